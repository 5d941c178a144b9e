//! Detect: the failure events Ray states, as one vocabulary for every source.
//!
//! The types here ([`Event`] and what it carries) are what `raylog health` merges
//! and the agent counts; [`Event::counts_once`] is the one rule by which both count
//! each failure once. The sources sit beside this module, each reading one kind of
//! record: [`super::log_line`] Ray's log lines, [`super::ray_event`] Ray's exported
//! events; [`super::detect()`] picks between them by the record's component.

use std::borrow::Cow;

use raylog_parsers::Id;

/// Which log said a worker died. GCS (`gcs_server.out`, head node only) reports
/// every unintended exit; the raylet's `RAY_WORKER_FAILURE` event (every node)
/// reports only `SYSTEM_ERROR` exits of workers that ran a task or actor (the
/// raylet's `DisconnectClient`; an OOM kill's `NODE_OUT_OF_MEMORY` death has no such
/// event, see fixtures/ray-2.60-health). So a consumer counting deaths picks one
/// source per death: the report merges them by worker id, the agent counts the
/// event for a `SYSTEM_ERROR` death and GCS for any other (see `counts_once`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeathSource {
    Gcs,
    RayletEvent,
    /// A `WORKER_LIFECYCLE_EVENT` Ray exported (see `health::ray_event`).
    RayEvent,
}

/// A worker process that exited other than as intended.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerDeath<'a> {
    pub source: DeathSource,
    pub worker_id: Option<Id>,
    pub node_id: Option<Id>,
    pub pid: Option<u32>,
    /// `SYSTEM_ERROR`, `USER_ERROR`, `NODE_OUT_OF_MEMORY`, ...
    pub exit_type: &'a str,
    pub detail: Option<&'a str>,
}

/// The raylet's memory monitor killing workers.
#[derive(Clone, Debug, PartialEq)]
pub struct OomKill<'a> {
    /// Workers killed by this decision (2.60 kills several at once).
    pub workers: u32,
    pub detail: &'a str,
}

/// GCS handling the death of an actor's worker.
#[derive(Clone, Debug, PartialEq)]
pub struct ActorFailure {
    pub actor_id: Option<Id>,
    pub worker_id: Option<Id>,
    pub node_id: Option<Id>,
    pub job_id: Option<Id>,
    /// GCS reschedules the actor (0 when the exit was intended, e.g. the job ended).
    pub need_reschedule: bool,
    /// Restarts left after this one; -1 is unlimited.
    pub remaining_restarts: Option<i64>,
    /// An exported event said the actor is `RESTARTING`.
    pub restarting: bool,
    /// From an exported event, not GCS's log line (the report keeps one of the two).
    pub from_event: bool,
}

impl ActorFailure {
    /// Whether GCS restarts the actor after this failure.
    pub fn restarts(&self) -> bool {
        self.restarting || (self.need_reschedule && self.remaining_restarts.is_some_and(|n| n != 0))
    }
}

/// GCS removing a node from the cluster.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeDeath<'a> {
    pub node_id: Option<Id>,
    /// `EXPECTED_TERMINATION`, `UNEXPECTED_TERMINATION`, `AUTOSCALER_DRAIN_IDLE`, ...
    /// (absent in 2.9, which logs no reason).
    pub reason: Option<&'a str>,
    pub message: Option<&'a str>,
    /// From an exported event, not GCS's log line.
    pub from_event: bool,
}

impl NodeDeath<'_> {
    /// A planned removal (`ray stop`, SIGTERM at shutdown, autoscaler drain).
    pub fn expected(&self) -> bool {
        self.reason.is_some_and(|r| r == "EXPECTED_TERMINATION" || r.starts_with("AUTOSCALER_DRAIN"))
    }
}

/// What went wrong between GCS and a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum GcsHealthKind {
    /// One failed health check of a raylet (GCS counts down to the node's death).
    CheckFailed,
    /// The last check failed: GCS declares the node dead.
    NodeDeclaredDead,
    /// A raylet or worker cannot reach GCS (slow or unavailable RPCs).
    GcsUnreachable,
}

impl GcsHealthKind {
    pub fn as_str(self) -> &'static str {
        match self {
            GcsHealthKind::CheckFailed => "health_check_failed",
            GcsHealthKind::NodeDeclaredDead => "node_failed_health_check",
            GcsHealthKind::GcsUnreachable => "gcs_unreachable",
        }
    }
}

/// A GCS health problem.
#[derive(Clone, Debug, PartialEq)]
pub struct GcsHealth<'a> {
    pub kind: GcsHealthKind,
    pub node_id: Option<Id>,
    pub detail: &'a str,
}

/// Who reported a task failure: the owner's core-worker log, or the 2.60 export
/// events (which carry the Python exception). One failure can appear in both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TaskFailureSource {
    Owner,
    Export,
    /// A `TASK_LIFECYCLE_EVENT` Ray exported (see `health::ray_event`).
    RayEvent,
}

/// A task or actor-method attempt that failed.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskFailure<'a> {
    pub source: TaskFailureSource,
    pub task_id: Option<Id>,
    pub attempt: Option<u32>,
    /// Ray's error type: `TASK_EXECUTION_EXCEPTION`, `ACTOR_DIED`, `ACTOR_UNAVAILABLE`...
    pub error_type: Cow<'a, str>,
    /// The Python exception class for an exception raised by user code, else the
    /// error type: what `task_failures` groups by.
    pub exception: Cow<'a, str>,
    pub task_name: Option<&'a str>,
}

/// A submitted job's driver that ended with an error.
#[derive(Clone, Debug, PartialEq)]
pub struct DriverExit<'a> {
    pub submission_id: &'a str,
    /// `exit code N` or `FAILED`/`STOPPED`.
    pub outcome: &'a str,
}

/// The raylet spilling objects to external storage.
#[derive(Clone, Debug, PartialEq)]
pub struct Spill {
    pub mib: f64,
    pub objects: u64,
}

/// One recognised failure event.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<'a> {
    WorkerDeath(WorkerDeath<'a>),
    OomKill(OomKill<'a>),
    ActorFailure(ActorFailure),
    NodeDeath(NodeDeath<'a>),
    GcsHealth(GcsHealth<'a>),
    TaskFailure(TaskFailure<'a>),
    DriverExit(DriverExit<'a>),
    Spill(Spill),
}

impl Event<'_> {
    /// Whether a per-record counter should count this event, so that the agent's
    /// counters agree with `raylog health`: not a `SYSTEM_ERROR` worker death GCS
    /// repeats (the raylet's event counts it, on the node where it happened; other
    /// exit types have no event, so GCS's line counts them), not an actor whose
    /// worker exited as intended (`need_reschedule = 0`), and not an export event's
    /// system error for a task (the owner's `Task attempt … failed` line counts it;
    /// export events add only the user exceptions the owner does not log).
    pub fn counts_once(&self) -> bool {
        match self {
            // The raylet's event reports only SYSTEM_ERROR deaths; GCS every other
            // exit type; an exported event repeats one of the two.
            Event::WorkerDeath(d) => match d.source {
                DeathSource::RayletEvent => true,
                DeathSource::Gcs => d.exit_type != "SYSTEM_ERROR",
                DeathSource::RayEvent => false,
            },
            Event::ActorFailure(a) => a.need_reschedule && !a.from_event,
            Event::NodeDeath(n) => !n.from_event,
            Event::TaskFailure(f) => f.source == TaskFailureSource::Owner || f.error_type == "TASK_EXECUTION_EXCEPTION",
            _ => true,
        }
    }
}

/// `ValueError` from a Python traceback's last line `ValueError: bad input 7`
/// (dotted names kept: `ray.exceptions.RayTaskError`).
pub fn exception_class(text: &str) -> Option<String> {
    let last = text.trim_end().lines().last()?.trim();
    let name = last.split(':').next()?.trim();
    let ok = !name.is_empty()
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
    ok.then(|| name.to_string())
}
