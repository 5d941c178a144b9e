//! Detections in Ray's log lines, one record at a time.
//!
//! [`detect`] is called for every log record by `raylog health` and by the agent, so
//! it looks at the component first and at one byte of the message before any string
//! search, and returns borrowed text: a record that matches nothing costs a few
//! comparisons and no allocation. Each `*_event` function quotes the Ray message it
//! reads and the versions it was seen in; where Ray reworded a message between
//! 2.9, 2.40 and 2.60 every wording is accepted. No regex is used: the messages are
//! fixed C++ stream outputs, so `find` on their literal parts is exact and cheap.
//! What is found is a [`mod@super::detect`] type, as for the exported events.

use std::borrow::Cow;
use std::sync::LazyLock;

use memchr::memmem::Finder;
use raylog_parsers::classify::Stream;
use raylog_parsers::record::FieldValue;
use raylog_parsers::{Id, Level, Record};

use super::detect::{
    exception_class, ActorFailure, DeathSource, DriverExit, Event, GcsHealth, GcsHealthKind, NodeDeath, OomKill, Spill,
    TaskFailure, TaskFailureSource, WorkerDeath,
};

/// What log line `r` says went wrong, if anything.
///
/// `raylet.err` and `gcs_server.err` are skipped: Ray's C++ logger copies every
/// ERROR line of `raylet.out` / `gcs_server.out` to stderr, so an event there is
/// one already seen (fixtures/ray-2.60-health: the raylet's `Failed to connect to
/// GCS within 5 seconds.` is in both).
pub fn detect<'a>(r: &Record<'a>) -> Option<Event<'a>> {
    let m = r.message;
    let first = *m.as_bytes().first()?;
    match r.file.component.as_str() {
        "gcs_server" | "raylet" if r.file.stream == Some(Stream::Stderr) => None,
        "gcs_server" => gcs_event(r, first),
        "raylet" => raylet_event(r, first),
        "core_worker" | "core_driver" => match first {
            b'T' => owner_task_failure(r).map(Event::TaskFailure),
            b'F' | b'G' => gcs_unreachable(r).map(Event::GcsHealth),
            _ => None,
        },
        "event" => match first {
            b'A' => worker_failure_event(r).map(Event::WorkerDeath),
            b'C' => job_event(m).map(Event::DriverExit),
            _ => None,
        },
        "export_event" if first == b'E' => export_task_failure(r).map(Event::TaskFailure),
        "job_supervisor" if first == b'J' => supervisor_exit(m).map(Event::DriverExit),
        _ => None,
    }
}

fn gcs_event<'a>(r: &Record<'a>, first: u8) -> Option<Event<'a>> {
    match first {
        b'R' => gcs_worker_exit(r).map(Event::WorkerDeath).or_else(|| node_removed(r).map(Event::NodeDeath)),
        b',' => node_removed(r).map(Event::NodeDeath),
        b'A' => actor_failed(r).map(Event::ActorFailure),
        b'H' | b'N' => health_check(r).map(Event::GcsHealth),
        _ => None,
    }
}

fn raylet_event<'a>(r: &Record<'a>, first: u8) -> Option<Event<'a>> {
    match first {
        b'K' => oom_kill(r.message).map(Event::OomKill),
        b'S' | b':' => spilled(r.message).map(Event::Spill),
        _ if r.level >= Some(Level::Warning) => gcs_unreachable(r).map(Event::GcsHealth),
        _ => None,
    }
}

/// A literal's memmem searcher, built once: building one per search (`memmem::find`)
/// was most of what reading a worker death took (3,100 instructions of its 5,300).
macro_rules! lit {
    ($s:literal) => {{
        static FINDER: LazyLock<Finder<'static>> = LazyLock::new(|| Finder::new($s));
        &*FINDER
    }};
}

/// The text after `label` (a [`lit!`]) up to (not including) the first of `ends`,
/// or the end.
fn between<'a>(m: &'a str, label: &Finder<'_>, ends: &[u8]) -> Option<&'a str> {
    // memmem, not `str::find`: building std's two-way searcher for each label was
    // most of what the agent spends on these lines (a GCS worker exit asks for five).
    let rest = &m[label.find(m.as_bytes())? + label.needle().len()..];
    // The ends are ASCII: a byte found is a character boundary. Searched for with
    // memchr: asking `ends.contains` of each byte cost more than finding the label.
    debug_assert!(ends.is_ascii());
    let b = rest.as_bytes();
    let end = match *ends {
        [] => None,
        [x] => memchr::memchr(x, b),
        [x, y] => memchr::memchr2(x, y, b),
        [x, y, z] => memchr::memchr3(x, y, z, b),
        _ => b.iter().position(|c| ends.contains(c)),
    };
    let end = end.unwrap_or(rest.len());
    Some(&rest[..end])
}

fn id_after(m: &str, label: &Finder<'_>) -> Option<Id> {
    between(m, label, b", .").and_then(|s| Id::parse(s.as_bytes()))
}

fn upper_word(s: &str) -> Option<&str> {
    let end = s.find(|c: char| !(c.is_ascii_uppercase() || c == '_')).unwrap_or(s.len());
    (end > 0).then_some(&s[..end])
}

/// GCS, for every worker that did not exit as intended (`gcs_worker_manager.cc`;
/// intended exits are logged at DEBUG):
///
/// `Reporting worker exit, worker id = <wid>, node id = <nid>, address = <ip>,
/// exit_type = SYSTEM_ERROR, exit_detail = Worker unexpectedly exits with a
/// connection error code 2. End of file. …` (2.9.3, 2.40, 2.60; 2.40/2.60 append
/// ` worker_id=…` context, the 2.60 C++ JSON form keeps only the message).
pub fn gcs_worker_exit<'a>(r: &Record<'a>) -> Option<WorkerDeath<'a>> {
    let m = r.message;
    if !m.starts_with("Reporting worker exit, ") {
        return None;
    }
    Some(WorkerDeath {
        source: DeathSource::Gcs,
        worker_id: id_after(m, lit!("worker id = ")).or(r.ids.worker_id),
        node_id: id_after(m, lit!("node id = ")).or(r.ids.node_id),
        pid: None,
        exit_type: upper_word(between(m, lit!("exit_type = "), b",")?)?,
        detail: between(m, lit!("exit_detail = "), b"").map(strip_pairs),
    })
}

/// The raylet's `RAY_WORKER_FAILURE` event (`events/event_RAYLET.log`), written on
/// the node where the worker died:
///
/// `A worker died or was killed while executing a task by an unexpected system
/// error. … Lease ID: <id> Worker ID: <wid> Node ID: <nid> Worker IP address: <ip>
/// Worker port: <n> Worker PID: <pid> Worker exit type: SYSTEM_ERROR Worker exit
/// detail: …` (2.60; 2.9.3 and 2.40 say `RayTask ID:` instead of `Lease ID:`).
pub fn worker_failure_event<'a>(r: &Record<'a>) -> Option<WorkerDeath<'a>> {
    let m = r.message;
    if !m.starts_with("A worker died or was killed") {
        return None;
    }
    Some(WorkerDeath {
        source: DeathSource::RayletEvent,
        worker_id: id_after(m, lit!("Worker ID: ")).or(r.ids.worker_id),
        node_id: id_after(m, lit!("Node ID: ")).or(r.ids.node_id),
        pid: between(m, lit!("Worker PID: "), b" ").and_then(|p| p.parse().ok()),
        exit_type: upper_word(between(m, lit!("Worker exit type: "), b" ")?)?,
        detail: between(m, lit!("Worker exit detail: "), b""),
    })
}

/// A C++ message without the ` key=value` context pairs 2.40+ append.
fn strip_pairs(s: &str) -> &str {
    let mut s = s.trim_end();
    while let Some(i) = s.rfind(' ') {
        let (k, _) = s[i + 1..].split_once('=').unwrap_or(("", ""));
        if k.is_empty() || !k.bytes().all(|c| c.is_ascii_lowercase() || c == b'_') {
            break;
        }
        s = s[..i].trim_end();
    }
    s
}

/// GCS deciding what happens to an actor whose worker died (`gcs_actor_manager.cc`):
///
/// - 2.60: `Actor is failed on worker <wid> at node <nid>, need_reschedule = 1, death
///   context type = ActorDiedErrorContext, remaining_restarts = 1, num_restarts = 0,
///   num_restarts_due_to_node_preemption = 0, preempted = 0 job_id=01000000 actor_id=<aid>`
/// - 2.40: the same up to `remaining_restarts = 1`, then ` job_id=… actor_id=…`
/// - 2.9.3: `Actor <aid> is failed on worker <wid> at node <nid>, need_reschedule = 1,
///   death context type = ActorDiedErrorContext, remaining_restarts = 0, job id = 01000000`
pub fn actor_failed(r: &Record<'_>) -> Option<ActorFailure> {
    let m = r.message;
    if !m.starts_with("Actor ") {
        return None;
    }
    let at = lit!("is failed on worker ").find(m.as_bytes())?;
    let leading = Id::parse(m["Actor ".len()..at].trim().as_bytes());
    Some(ActorFailure {
        actor_id: leading.or_else(|| id_after(m, lit!("actor_id="))).or(r.ids.actor_id),
        worker_id: id_after(m, lit!("is failed on worker ")).or(r.ids.worker_id),
        node_id: id_after(m, lit!(" at node ")).or(r.ids.node_id),
        job_id: id_after(m, lit!("job_id=")).or_else(|| id_after(m, lit!("job id = "))).or(r.ids.job_id),
        need_reschedule: between(m, lit!("need_reschedule = "), b", ")? != "0",
        remaining_restarts: between(m, lit!("remaining_restarts = "), b", ").and_then(|n| n.parse().ok()),
        restarting: false,
        from_event: false,
    })
}

/// GCS removing a node (`gcs_node_manager.cc`):
///
/// - 2.60: `, death reason = EXPECTED_TERMINATION, death message = received SIGTERM
///   node_id=<nid> node_name=192.0.2.2` (the message starts with the comma)
/// - 2.40: `Removing node, node name = 192.0.2.2, death reason = EXPECTED_TERMINATION,
///   death message = received SIGTERM node_id=<nid>`
/// - 2.9.3: `Removing node, node id = <nid>, node name = 192.0.2.2` (no reason)
pub fn node_removed<'a>(r: &Record<'a>) -> Option<NodeDeath<'a>> {
    let m = r.message;
    if !(m.starts_with(", death reason = ") || m.starts_with("Removing node, ")) {
        return None;
    }
    Some(NodeDeath {
        node_id: id_after(m, lit!("node id = ")).or_else(|| id_after(m, lit!("node_id="))).or(r.ids.node_id),
        reason: between(m, lit!("death reason = "), b", "),
        message: between(m, lit!("death message = "), b"").map(strip_pairs),
        from_event: false,
    })
}

/// GCS health checks of raylets (`gcs_health_check_manager.cc`):
///
/// - one missed check: `Health check failed for node <nid>, remaining checks 4, status
///   4, response status 0, status message Deadline Exceeded, status details `
///   (fixtures/ray-2.60-health, a SIGSTOPped raylet; a two-node 2.40 trial wrote the
///   same); older sources stop after `remaining checks 4` (source only).
/// - the last one: `Node is dead because the health check failed. node_id=<nid>`
///   (2.60, and the 2.40 trial); older sources put the id in the prose, `Node <nid>
///   is dead because the health check failed.` (source only). GCS then removes the
///   node (`, death reason = UNEXPECTED_TERMINATION, death message = health check
///   failed due to missing too many heartbeats`, a [`NodeDeath`]).
pub fn health_check<'a>(r: &Record<'a>) -> Option<GcsHealth<'a>> {
    let m = r.message;
    let kind = if m.starts_with("Health check failed for node ") {
        GcsHealthKind::CheckFailed
    } else if m.starts_with("Node ") && m.contains("is dead because the health check failed") {
        GcsHealthKind::NodeDeclaredDead
    } else {
        return None;
    };
    let node_id = id_after(m, lit!("for node "))
        .or_else(|| Id::parse(m["Node ".len()..].split(' ').next().unwrap_or("").as_bytes()))
        .or_else(|| id_after(m, lit!("node_id=")))
        .or(r.ids.node_id);
    Some(GcsHealth { kind, node_id, detail: strip_pairs(m) })
}

/// A raylet or core worker failing to reach GCS. Seen in 2.60 after gcs_server was
/// killed (fixtures/ray-2.60-health, `RAY_gcs_rpc_server_reconnect_timeout_s=5`; the
/// default is 60), in `raylet.out` and in the core-driver log of every process
/// with a GCS client, each line once per process:
///
/// - `GCS has been unavailable for more than 5 seconds` (W,
///   `retryable_grpc_client.cc`; `<service> has been unavailable …` in general, so
///   only a service naming GCS counts: `Core worker <ip> has been unavailable …`
///   and `ObservabilityPubSub …` do not),
/// - then `Failed to connect to GCS within 5 seconds. GCS may have been killed.
///   It's either GCS is terminated by `ray stop` or is killed unexpectedly. …` (E,
///   `rpc_client.h`), and the process exits.
///
/// 2.40 (fixtures/ray-2.40-health) writes only the second, from
/// `gcs_rpc_client.h`, in `raylet.out` and every core-worker log (the spill and
/// restore workers' too). `Failed to connect to GCS at address <ip:port> within 5
/// seconds.` is in the 2.60 binaries as well (source only). A SIGSTOPped GCS logs
/// none of these: the TCP connections stay up and calls just wait.
pub fn gcs_unreachable<'a>(r: &Record<'a>) -> Option<GcsHealth<'a>> {
    let m = r.message;
    let hit = m.starts_with("Failed to connect to GCS")
        || (m.contains("GCS") && m.contains(" has been unavailable for more than "));
    hit.then(|| GcsHealth { kind: GcsHealthKind::GcsUnreachable, node_id: r.ids.node_id, detail: strip_pairs(m) })
}

/// The raylet's memory monitor (`node_manager.cc`) choosing workers to kill:
///
/// - 2.60 (seen, fixtures/ray-2.60-health): `Killing 1 worker(s), kill details:
///   Memory on the node (IP: 192.0.2.2, ID: <nid>) was 4.13GB used / 23.54GB limit
///   (0.175271)`, continued by `OOM kill reason: …`, the object store usage, `Ray
///   killed 1 worker(s) based on the killing policy` and `Selected to kill: (Task:
///   …, task name=hog, …, pid=6244, …)` lines (since 2.56 several workers can go at
///   once)
/// - before 2.56 (2.40, fixtures/ray-2.40-health): `Killing worker with task
///   Type=NORMAL_TASK, Language=PYTHON, Resources: {head: 1, CPU: 1, },
///   function_descriptor={…function_name=driver.<locals>.hog…}, …` followed by the
///   memory usage and the suggestions, one line per killed worker
///
/// Each killed worker then exits with type `NODE_OUT_OF_MEMORY` (GCS's `Reporting
/// worker exit`; the raylet writes an `Out of Memory` event, not a
/// `RAY_WORKER_FAILURE`).
pub fn oom_kill(m: &str) -> Option<OomKill<'_>> {
    if let Some(rest) = m.strip_prefix("Killing ") {
        if rest.starts_with("worker with task ") {
            return Some(OomKill { workers: 1, detail: m });
        }
        let (n, tail) = rest.split_once(' ')?;
        if tail.starts_with("worker(s), kill details: ") {
            return Some(OomKill { workers: n.parse().ok()?, detail: m });
        }
    }
    None
}

/// The raylet's spill summary (`local_object_manager.cc`, at most about once a
/// second while spilling). 2.40 and 2.60 write it with the `:info_message:` prefix
/// that makes drivers print it: `:info_message:Spilled 72 MiB, 3 objects, write
/// throughput 92 MiB/s.` (fixtures/ray-2.60-health); the bare `Spilled 512 MiB, 4
/// objects, …` is accepted too. The numbers are the raylet's running totals, not
/// per line: 2.40 wrote `Spilled 72 MiB, 3 objects` then `Spilled 144 MiB, 6
/// objects` for the same six objects (fixtures/ray-2.40-health).
pub fn spilled(m: &str) -> Option<Spill> {
    let rest = m.strip_prefix(":info_message:").unwrap_or(m).strip_prefix("Spilled ")?;
    let (mib, rest) = rest.split_once(" MiB, ")?;
    let (objects, _) = rest.split_once(" objects")?;
    Some(Spill { mib: mib.parse().ok()?, objects: objects.parse().ok()? })
}

/// The owner's core-worker log when an attempt of a task it submitted fails
/// (`task_manager.cc`):
///
/// `Task attempt <tid> failed with error ACTOR_UNAVAILABLE Fail immediately? 0,
/// status RpcError: …` (2.40, 2.60) and `… failed with error ACTOR_DIED …` (2.9.3).
/// An exception raised by user code is not logged here; the export events carry it.
pub fn owner_task_failure<'a>(r: &Record<'a>) -> Option<TaskFailure<'a>> {
    let m = r.message;
    let rest = m.strip_prefix("Task attempt ")?;
    let kind = upper_word(between(rest, lit!(" failed with error "), b" ")?)?;
    Some(TaskFailure {
        source: TaskFailureSource::Owner,
        task_id: Id::parse(rest.split(' ').next()?.as_bytes()).or(r.ids.task_id),
        attempt: None,
        error_type: Cow::Borrowed(kind),
        exception: Cow::Borrowed(kind),
        task_name: r.task_name,
    })
}

/// A 2.60 `EXPORT_TASK` event whose state update has an `error_info`
/// (`export_events/event_EXPORT_TASK_<pid>.log`, with `RAY_enable_export_api_write=1`):
/// `{"error_info":{"error_message":"User exception:\n… ValueError: bad input 7",
/// "error_type":"TASK_EXECUTION_EXCEPTION"}, …}`. The exception class is the last
/// line's `Name:` of `error_message`.
pub fn export_task_failure<'a>(r: &Record<'a>) -> Option<TaskFailure<'a>> {
    if !r.message.starts_with("EXPORT_TASK") {
        return None;
    }
    let Some(FieldValue::Json(data)) = r.fields.get("event_data") else {
        return None;
    };
    if !data.contains("\"error_info\"") {
        return None;
    }
    let path = |k| crate::trace::facts::json_path(data, &["state_updates", "error_info", k]);
    let error_type = path("error_type")?;
    let exception = match error_type.as_str() {
        "TASK_EXECUTION_EXCEPTION" => path("error_message").as_deref().and_then(exception_class),
        _ => None,
    };
    Some(TaskFailure {
        source: TaskFailureSource::Export,
        task_id: r.ids.task_id,
        attempt: crate::trace::facts::attempt_in_text(r.message),
        exception: Cow::Owned(exception.unwrap_or_else(|| error_type.clone())),
        error_type: Cow::Owned(error_type),
        task_name: r.task_name,
    })
}

/// The job supervisor (`jobs/supervisor-<submission id>.log`, `job_supervisor.py`,
/// 2.x) when a submitted driver ends: `Job raysubmit_etl_001 entrypoint command
/// exited with code 0`, `… exited with code 1` (fixtures/ray-2.60-jobs-serve and
/// ray-2.60-health). Only non-zero codes are failures. A job whose supervisor
/// never started (runtime env setup failed) has no such line, only the event.
pub fn supervisor_exit(m: &str) -> Option<DriverExit<'_>> {
    let rest = m.strip_prefix("Job ")?;
    let (id, tail) = rest.split_once(' ')?;
    let code = tail.strip_prefix("entrypoint command exited with code ")?;
    (code.trim() != "0").then(|| DriverExit { submission_id: id, outcome: m.rsplit_once(" with ").map_or(m, |x| x.1) })
}

/// The `JOBS` event at a job's end (`events/event_JOBS.log`, `job_manager.py`, 2.x):
/// `Completed a ray job raysubmit_etl_001 with a status SUCCEEDED.`; `FAILED` and
/// `STOPPED` are failures. When the job manager itself failed the job, its reason
/// follows (severity ERROR): `Completed a ray job raysubmit_health_conda with a
/// status FAILED. runtime_env setup failed: Failed to set up runtime environment.\n…`
/// (fixtures/ray-2.60-health); the outcome is the status word alone.
pub fn job_event(m: &str) -> Option<DriverExit<'_>> {
    let rest = m.strip_prefix("Completed a ray job ")?;
    let (id, status) = rest.split_once(" with a status ")?;
    let status = upper_word(status)?;
    (status != "SUCCEEDED").then_some(DriverExit { submission_id: id, outcome: status })
}

#[cfg(test)]
#[path = "log_line_tests.rs"]
mod tests;
