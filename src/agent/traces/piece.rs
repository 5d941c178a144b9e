//! What one of Ray's exported events says about a task attempt, a job or a node:
//! the part of it the spans are built from. Read from the record the parser made of
//! the event (its ids, `fields.attempt`, and the payload kept as `fields.event_data`).
//!
//! Ray's keys are camelCase, or snake_case when the aggregator preserves proto
//! names: both are read. Ids are protobuf bytes in base64.

use raylog_parsers::id::id_from_base64;
use raylog_parsers::record::FieldValue;
use raylog_parsers::Record;
use serde::Deserialize;

/// One event, as far as spans go.
#[derive(Debug, Clone, PartialEq)]
pub enum Piece {
    /// `TASK_DEFINITION_EVENT` or `ACTOR_TASK_DEFINITION_EVENT`.
    Definition { key: (String, u32), job: Option<String>, def: Definition },
    /// `TASK_LIFECYCLE_EVENT`: transitions, and where the task ran.
    Lifecycle { key: (String, u32), job: Option<String>, life: Lifecycle },
    /// `TASK_PROFILE_EVENT` with the executor's `task::<name>` event: when execution ended.
    Executed { key: (String, u32), job: Option<String>, name: String, end_ns: i64, worker: Option<String> },
    /// `DRIVER_JOB_LIFECYCLE_EVENT` reaching a final state.
    JobEnded { job: String, at_ns: i64 },
    /// `NODE_LIFECYCLE_EVENT` reaching `DEAD`.
    NodeDead { node: String, at_ns: i64 },
}

/// A task's definition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Definition {
    pub name: Option<String>,
    pub task_type: Option<String>,
    pub parent: Option<String>,
    pub actor: Option<String>,
    /// The event's own time: a driver task's span starts with its first event.
    pub at_ns: Option<i64>,
    /// The node that posted it (the owner's).
    pub node: Option<String>,
}

/// A lifecycle piece.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Lifecycle {
    pub states: Vec<(String, i64)>,
    /// `rayErrorInfo`: type and message.
    pub error: Option<(String, String)>,
    /// The node the task ran on (the event's, else the node that posted it).
    pub node: Option<String>,
    pub worker: Option<String>,
    pub pid: Option<u32>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Payload {
    #[serde(alias = "taskId", alias = "task_id")]
    task: Option<String>,
    #[serde(alias = "taskAttempt", alias = "task_attempt", alias = "attemptNumber", alias = "attempt_number")]
    attempt: Option<u32>,
    #[serde(alias = "jobId", alias = "job_id")]
    job: Option<String>,
    #[serde(alias = "taskName", alias = "task_name")]
    task_name: Option<String>,
    #[serde(alias = "actorTaskName", alias = "actor_task_name")]
    actor_task_name: Option<String>,
    #[serde(alias = "taskFunc", alias = "task_func", alias = "actorFunc", alias = "actor_func")]
    func: Option<Func>,
    #[serde(alias = "taskType", alias = "task_type")]
    task_type: Option<String>,
    #[serde(alias = "parentTaskId", alias = "parent_task_id")]
    parent: Option<String>,
    #[serde(alias = "actorId", alias = "actor_id")]
    actor: Option<String>,
    #[serde(alias = "stateTransitions", alias = "state_transitions")]
    transitions: Vec<Transition>,
    #[serde(alias = "rayErrorInfo", alias = "ray_error_info")]
    error: Option<ErrorInfo>,
    #[serde(alias = "nodeId", alias = "node_id")]
    node: Option<String>,
    #[serde(alias = "workerId", alias = "worker_id")]
    worker: Option<String>,
    #[serde(alias = "workerPid", alias = "worker_pid")]
    pid: Option<u32>,
    #[serde(alias = "profileEvents", alias = "profile_events")]
    profile: Option<Profile>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Func {
    #[serde(alias = "pythonFunctionDescriptor", alias = "python_function_descriptor")]
    python: Option<Descriptor>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Descriptor {
    #[serde(alias = "className", alias = "class_name")]
    class: String,
    #[serde(alias = "functionName", alias = "function_name")]
    function: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Transition {
    state: String,
    timestamp: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorInfo {
    #[serde(alias = "errorType", alias = "error_type")]
    error_type: String,
    #[serde(alias = "errorMessage", alias = "error_message")]
    error_message: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Profile {
    #[serde(alias = "componentId", alias = "component_id")]
    component: Option<String>,
    events: Vec<ProfileEvent>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ProfileEvent {
    #[serde(alias = "eventName", alias = "event_name")]
    name: String,
    #[serde(alias = "endTime", alias = "end_time")]
    end: String,
}

/// Event types a span is built from: the others are not parsed at all.
const TYPES: [&str; 6] = [
    "TASK_DEFINITION_EVENT",
    "ACTOR_TASK_DEFINITION_EVENT",
    "TASK_LIFECYCLE_EVENT",
    "TASK_PROFILE_EVENT",
    "DRIVER_JOB_LIFECYCLE_EVENT",
    "NODE_LIFECYCLE_EVENT",
];

/// The piece `r` (a `ray_event` record) holds, if any. `Err` with what is wrong when
/// the payload of an event of a span's type cannot be read.
pub fn parse(r: &Record<'_>) -> Result<Option<Piece>, String> {
    let Some(FieldValue::Str(ty) | FieldValue::Json(ty)) = r.fields.get("event_type") else { return Ok(None) };
    let ty = ty.trim_matches('"');
    if !TYPES.contains(&ty) {
        return Ok(None);
    }
    let Some(FieldValue::Json(data)) = r.fields.get("event_data") else { return Ok(None) };
    let p: Payload = serde_json::from_str(data).map_err(|e| format!("{ty}: {e}"))?;
    let node = || hex_id(p.node.as_deref()).or_else(|| r.ids.node_id.map(|n| n.as_str().to_owned()));
    let at = r.timestamp.map(|t| t.0);
    let key = || {
        let task = hex_id(p.task.as_deref()).or_else(|| r.ids.task_id.map(|t| t.as_str().to_owned()))?;
        Some((task, p.attempt.unwrap_or(0)))
    };
    let job = hex_id(p.job.as_deref()).or_else(|| r.ids.job_id.map(|j| j.as_str().to_owned()));
    Ok(match ty {
        "TASK_DEFINITION_EVENT" | "ACTOR_TASK_DEFINITION_EVENT" => key().map(|key| Piece::Definition {
            key,
            job,
            def: Definition {
                name: name_of(&p),
                task_type: p.task_type.clone().filter(|t| !t.is_empty()),
                parent: hex_id(p.parent.as_deref()),
                actor: hex_id(p.actor.as_deref()),
                at_ns: at,
                node: r.ids.node_id.map(|n| n.as_str().to_owned()),
            },
        }),
        "TASK_LIFECYCLE_EVENT" => key().map(|key| Piece::Lifecycle {
            key,
            job,
            life: Lifecycle {
                states: states(&p.transitions),
                error: p.error.as_ref().map(|e| (e.error_type.clone(), e.error_message.clone())),
                node: node(),
                worker: hex_id(p.worker.as_deref()),
                pid: p.pid.filter(|&p| p != 0),
            },
        }),
        "TASK_PROFILE_EVENT" => {
            let Some(prof) = &p.profile else { return Ok(None) };
            let Some(e) = prof.events.iter().find(|e| e.name.starts_with("task::")) else { return Ok(None) };
            let Ok(end_ns) = e.end.parse::<i64>() else { return Ok(None) };
            let worker = hex_id(prof.component.as_deref()).or_else(|| r.ids.worker_id.map(|w| w.as_str().to_owned()));
            let name = e.name["task::".len()..].to_owned();
            key().map(|key| Piece::Executed { key, job, name, end_ns, worker })
        }
        "DRIVER_JOB_LIFECYCLE_EVENT" => {
            let end = states(&p.transitions).into_iter().find(|(s, _)| s == "FINISHED" || s == "FAILED");
            match (job, end) {
                (Some(job), Some((_, at_ns))) => Some(Piece::JobEnded { job, at_ns }),
                _ => None,
            }
        }
        _ => {
            let dead = states(&p.transitions).into_iter().find(|(s, _)| s == "DEAD");
            match (node(), dead) {
                (Some(node), Some((_, at_ns))) => Some(Piece::NodeDead { node, at_ns }),
                _ => None,
            }
        }
    })
}

/// A task's name: `taskName`, else `actorTaskName` (`Class.method`), else the
/// function descriptor's.
fn name_of(p: &Payload) -> Option<String> {
    let named = p.task_name.clone().filter(|n| !n.is_empty());
    named.or_else(|| p.actor_task_name.clone().filter(|n| !n.is_empty())).or_else(|| {
        let d = p.func.as_ref()?.python.as_ref()?;
        match (d.class.is_empty(), d.function.is_empty()) {
            (_, true) => None,
            (true, false) => Some(d.function.clone()),
            (false, false) => Some(format!("{}.{}", d.class, d.function)),
        }
    })
}

/// The transitions with a readable time, in Ray's order.
fn states(ts: &[Transition]) -> Vec<(String, i64)> {
    ts.iter()
        .filter_map(|t| {
            let at: jiff::Timestamp = t.timestamp.parse().ok()?;
            Some((t.state.clone(), at.as_nanosecond() as i64))
        })
        .collect()
}

/// A base64 id as hex; `None` when empty or unreadable. An id of all `ff` bytes is
/// Ray's nil id (the driver task's parent).
fn hex_id(b64: Option<&str>) -> Option<String> {
    let id = id_from_base64(b64.filter(|s| !s.is_empty())?.as_bytes())?;
    let s = id.as_str();
    (!s.bytes().all(|c| c == b'f')).then(|| s.to_owned())
}
