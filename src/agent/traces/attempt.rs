//! One task attempt as this node saw it, merged from the pieces Ray sends (in any
//! order, at least once), and the spans it gives once they are complete.
//!
//! - `schedule` starts at the first pending state and ends at `SUBMITTED_TO_WORKER`
//!   (or at `FINISHED`/`FAILED` when the task never went to a worker: an actor
//!   creation, a task failed before it ran).
//! - `run` starts at `RUNNING` and ends at `FINISHED`/`FAILED`. A job's driver task
//!   starts with its first event and ends with the job.
//! - A span waits, once it could end, up to [`GRACE_NS`] for the definition (its
//!   name, parent and type) when it has not come yet.
//! - A `run` whose verdict does not come here (Ray sends `FINISHED`/`FAILED` from the
//!   owner's node; on another node only the execution's end is known, from the
//!   profile event) ends after [`GRACE_NS`] at the execution's end, without status.

use serde::{Deserialize, Serialize};

use super::piece::{Definition, Lifecycle};
use super::span::{job_of_task, span_id, trace_id, AttrValue, Kind, TaskSpan};

/// How long a span that could end waits for what it lacks (the definition; the
/// verdict of an executed task), in agent time.
pub const GRACE_NS: i64 = 10_000_000_000;

/// Why a span ended, as its `ray.span.closed_by` attribute says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClosedBy {
    /// `FINISHED` or `FAILED` (the job's end, for a driver).
    #[default]
    End,
    /// The profile's end of execution, the verdict not having come here.
    Executed,
    Timeout,
    NodeDeath,
    JobEnd,
}

impl ClosedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            ClosedBy::End => "end",
            ClosedBy::Executed => "executed",
            ClosedBy::Timeout => "timeout",
            ClosedBy::NodeDeath => "node_death",
            ClosedBy::JobEnd => "job_end",
        }
    }
}

/// A span sent: how it was cut, so it is built again the same when its events come
/// again (a settled attempt takes in nothing more, so the rest is as it was).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sent {
    pub kind: Kind,
    pub start_ns: i64,
    pub end_ns: i64,
    pub by: ClosedBy,
    pub failed: bool,
}

/// Pending states, recorded by the owner while it schedules the task.
const SCHEDULING: [&str; 5] = [
    "PENDING_ARGS_AVAIL",
    "PENDING_NODE_ASSIGNMENT",
    "PENDING_OBJ_STORE_MEM_AVAIL",
    "PENDING_ARGS_FETCH",
    "SUBMITTED_TO_WORKER",
];

fn terminal(s: &str) -> bool {
    s == "FINISHED" || s == "FAILED"
}

/// One attempt's state (kept in the journal as it is).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Attempt {
    pub task: String,
    pub attempt: u32,
    pub job: Option<String>,
    pub def: Option<SavedDef>,
    pub profile_name: Option<String>,
    pub run_node: Option<String>,
    pub owner_node: Option<String>,
    pub worker: Option<String>,
    pub pid: Option<u32>,
    /// Transitions, each (state, time) once, by time.
    pub states: Vec<(String, i64)>,
    pub error: Option<(String, String)>,
    pub executed_ns: Option<i64>,
    pub job_end_ns: Option<i64>,
    /// Agent time it was first seen (for `traces_span_timeout`).
    pub seen_ns: i64,
    /// Agent time a span of it first could end (for [`GRACE_NS`]).
    pub could_end_ns: Option<i64>,
    /// Spans sent: a piece repeating their end sends them again, unchanged.
    pub sent: Vec<Sent>,
    /// Kinds settled: sent, or never to be (`run` without `RUNNING` here).
    pub schedule_done: bool,
    pub run_done: bool,
}

/// The definition, as kept.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct SavedDef {
    pub name: Option<String>,
    pub task_type: Option<String>,
    pub parent: Option<String>,
    pub actor: Option<String>,
    pub at_ns: Option<i64>,
}

impl Attempt {
    pub fn new(task: &str, attempt: u32, now_ns: i64) -> Attempt {
        Attempt { task: task.to_owned(), attempt, seen_ns: now_ns, ..Attempt::default() }
    }

    pub fn settled(&self) -> bool {
        self.schedule_done && self.run_done
    }

    fn is_driver(&self) -> bool {
        self.def.as_ref().and_then(|d| d.task_type.as_deref()) == Some("DRIVER_TASK")
    }

    /// Takes in a definition. Returns whether anything was new.
    pub fn define(&mut self, job: Option<String>, d: Definition) -> bool {
        let new = SavedDef { name: d.name, task_type: d.task_type, parent: d.parent, actor: d.actor, at_ns: d.at_ns };
        let changed = self.def.as_ref() != Some(&new) || (self.job.is_none() && job.is_some());
        self.job = self.job.take().or(job);
        if self.owner_node.is_none() {
            self.owner_node = d.node;
        }
        self.def = Some(new);
        changed
    }

    /// Takes in lifecycle transitions. Returns whether anything was new.
    pub fn live(&mut self, job: Option<String>, l: Lifecycle, posted_by: Option<&str>) -> bool {
        let mut changed = false;
        for (s, at) in l.states {
            if !self.states.iter().any(|(s2, a2)| *s2 == s && *a2 == at) {
                if SCHEDULING.contains(&s.as_str()) && self.owner_node.is_none() {
                    self.owner_node = posted_by.map(str::to_owned);
                }
                if s == "RUNNING" {
                    self.run_node = l.node.clone().or(self.run_node.take());
                }
                self.states.push((s, at));
                changed = true;
            }
        }
        self.states.sort_by_key(|(_, at)| *at);
        if l.error.is_some() && self.error.is_none() {
            (self.error, changed) = (l.error, true);
        }
        self.worker = self.worker.take().or(l.worker);
        self.pid = self.pid.or(l.pid);
        self.job = self.job.take().or(job);
        changed
    }

    /// Takes in the end of execution (profile event). Returns whether it was new.
    pub fn executed(&mut self, job: Option<String>, name: String, end_ns: i64, worker: Option<String>) -> bool {
        let changed = self.executed_ns != Some(end_ns);
        self.executed_ns = Some(end_ns);
        self.profile_name = Some(name);
        self.worker = self.worker.take().or(worker);
        self.job = self.job.take().or(job);
        changed
    }

    fn first(&self, f: impl Fn(&str) -> bool) -> Option<&(String, i64)> {
        self.states.iter().find(|(s, _)| f(s))
    }

    fn sched_bounds(&self) -> Option<(i64, Option<(i64, bool)>)> {
        let start = self.first(|s| SCHEDULING.contains(&s))?.1;
        let end = match self.first(|s| s == "SUBMITTED_TO_WORKER") {
            Some((_, at)) => Some((*at, false)),
            // `RUNNING` comes from the executor, often before the owner's
            // `SUBMITTED_TO_WORKER`: the owner's own end is what closes it.
            None => self.first(terminal).map(|(s, at)| (*at, s == "FAILED")),
        };
        Some((start, end))
    }

    fn run_start(&self) -> Option<i64> {
        if self.is_driver() {
            let first = self.states.first().map(|s| s.1);
            return match (first, self.def.as_ref().and_then(|d| d.at_ns)) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        self.first(|s| s == "RUNNING").map(|s| s.1)
    }

    /// Where the run ends and why, when known.
    fn run_end(&self, now_ns: i64) -> Option<(i64, ClosedBy)> {
        if self.is_driver() {
            return self.job_end_ns.map(|at| (at, ClosedBy::JobEnd));
        }
        if let Some((_, at)) = self.first(terminal) {
            return Some((*at, ClosedBy::End));
        }
        let waited = self.could_end_ns.is_some_and(|c| now_ns - c >= GRACE_NS);
        self.executed_ns.filter(|_| waited).map(|at| (at, ClosedBy::Executed))
    }

    /// Notes, the first time, that a span of it could end now.
    pub fn note_could_end(&mut self, now_ns: i64) {
        let sched = self.sched_bounds().is_some_and(|(_, e)| e.is_some());
        let run = self.first(terminal).is_some() || (self.run_start().is_some() && self.executed_ns.is_some());
        if (sched || run || self.job_end_ns.is_some()) && self.could_end_ns.is_none() {
            self.could_end_ns = Some(now_ns);
        }
    }

    /// Whether the name and parent are known, or waiting for them is over.
    fn defined_or_waited(&self, now_ns: i64) -> bool {
        self.def.is_some() || self.could_end_ns.is_some_and(|c| now_ns - c >= GRACE_NS)
    }

    /// The spans that are complete now, marked sent. `closing` forces the open ones
    /// to end at `closing.0` for reason `closing.1` (timeout, node death).
    pub fn finish(&mut self, now_ns: i64, closing: Option<(i64, ClosedBy)>) -> Vec<TaskSpan> {
        let mut out = Vec::new();
        let defined = self.defined_or_waited(now_ns) || closing.is_some();
        let waited = self.could_end_ns.is_some_and(|c| now_ns - c >= GRACE_NS);
        if !self.schedule_done {
            match self.sched_bounds() {
                Some((start, Some((end, failed)))) if defined => {
                    out.push(self.cut(Kind::Schedule, start, end, ClosedBy::End, failed));
                    self.schedule_done = true;
                }
                Some((start, None)) if closing.is_some() => {
                    let (end, by) = closing.unwrap_or_default();
                    out.push(self.cut(Kind::Schedule, start, end.max(start), by, false));
                    self.schedule_done = true;
                }
                None if closing.is_some() || waited => {
                    // Scheduled elsewhere (another node owns it): not ours to send.
                    self.schedule_done = true;
                }
                _ => {}
            }
        }
        if !self.run_done {
            match (self.run_start(), self.run_end(now_ns).or(closing)) {
                (Some(start), Some((end, by))) if defined => {
                    let failed = by == ClosedBy::End && self.first(terminal).is_some_and(|(s, _)| s == "FAILED");
                    out.push(self.cut(Kind::Run, start, end.max(start), by, failed));
                    self.run_done = true;
                }
                // Not run here (another node ran it, or its worker died before its
                // `RUNNING` went out): once the verdict waited long enough, nothing to send.
                (None, _) if closing.is_some() || (self.first(terminal).is_some() && waited) => self.run_done = true,
                _ => {}
            }
        }
        self.sent.extend(out.iter().map(|s| s.1));
        out.into_iter().map(|s| s.0).collect()
    }

    /// The spans sent whose end is one of `ends`, built again as they went.
    pub fn resend<'a>(&'a self, ends: &'a [i64]) -> impl Iterator<Item = TaskSpan> + 'a {
        let again = self.sent.iter().filter(move |s| ends.contains(&s.end_ns));
        again.map(|s| self.span(s.kind, s.start_ns, s.end_ns, s.by, s.failed))
    }

    /// Builds the span of `kind` and notes it sent.
    fn cut(&self, kind: Kind, start_ns: i64, end_ns: i64, by: ClosedBy, failed: bool) -> (TaskSpan, Sent) {
        (self.span(kind, start_ns, end_ns, by, failed), Sent { kind, start_ns, end_ns, by, failed })
    }

    fn span(&self, kind: Kind, start: i64, end: i64, by: ClosedBy, failed: bool) -> TaskSpan {
        let job = self.job.as_deref().or_else(|| job_of_task(&self.task)).unwrap_or("");
        let def = self.def.clone().unwrap_or_default();
        // A top-level task's parent is the driver task (Ray's `ff…ff<job>`), whose
        // span the head's agent sends; the driver's own parent is nil.
        let parent = def.parent.as_deref().filter(|_| !self.is_driver()).map(|p| span_id(p, 0, Kind::Run));
        let mut attrs: Vec<(String, AttrValue)> = vec![
            ("ray.span".into(), AttrValue::Str(kind.as_str().into())),
            ("ray.task_id".into(), AttrValue::Str(self.task.clone())),
            ("ray.task_attempt".into(), AttrValue::Int(self.attempt.into())),
            ("ray.job_id".into(), AttrValue::Str(job.into())),
            ("ray.span.closed_by".into(), AttrValue::Str(by.as_str().into())),
        ];
        let node = match kind {
            Kind::Schedule => self.owner_node.as_ref(),
            Kind::Run => self.run_node.as_ref().or(self.owner_node.as_ref()),
        };
        let opt = [
            ("ray.actor_id", def.actor.clone()),
            ("ray.node_id", node.cloned()),
            ("ray.worker_id", self.worker.clone().filter(|_| kind == Kind::Run)),
            ("ray.task_type", def.task_type.clone()),
        ];
        attrs.extend(opt.into_iter().filter_map(|(k, v)| Some((k.to_owned(), AttrValue::Str(v?)))));
        if let Some(pid) = self.pid.filter(|_| kind == Kind::Run) {
            attrs.push(("ray.worker_pid".into(), AttrValue::Int(pid.into())));
        }
        let error = failed.then(|| match &self.error {
            Some((ty, msg)) => {
                attrs.push(("ray.error_type".into(), AttrValue::Str(ty.clone())));
                let msg: String = msg.chars().take(4096).collect();
                format!("{ty}: {msg}")
            }
            None => "FAILED".to_owned(),
        });
        let in_span = |s: &str| match kind {
            Kind::Schedule => SCHEDULING.contains(&s) || (failed && terminal(s)),
            Kind::Run => !SCHEDULING.contains(&s),
        };
        let events = self.states.iter().filter(|(s, at)| in_span(s) && *at >= start && *at <= end).cloned().collect();
        let name = def.name.or_else(|| self.profile_name.clone());
        let name = match (name, self.is_driver()) {
            (_, true) => format!("driver {job}"),
            (Some(n), false) => n,
            (None, false) => "ray task".to_owned(),
        };
        let links = if self.attempt > 0 { vec![span_id(&self.task, self.attempt - 1, Kind::Run)] } else { vec![] };
        TaskSpan {
            trace_id: trace_id(job),
            span_id: span_id(&self.task, self.attempt, kind),
            parent,
            name,
            kind,
            start_ns: start,
            end_ns: end,
            error,
            attrs,
            events,
            links,
        }
    }
}
