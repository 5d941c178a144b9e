//! Detections on Ray's exported events (`ray_event` records from raylog's event
//! spool, see `raylog_parsers::formats::ray_event`).
//!
//! Events state first hand what the logs say in prose: a worker `DEAD` with its exit
//! type, an actor `RESTARTING` or `DEAD` with its death reason, a task attempt
//! `FAILED` with its error and Python exception, a node `DEAD`. The same failures
//! are in the logs too, so the report merges them: a worker death by worker id, an
//! actor's failures by actor (the events count only for an actor GCS's log does not
//! mention), a task failure by task and attempt, a node by
//! id. The agent's counters count the logs' copy of each, except user exceptions,
//! which only the events (and the export API) name.

use std::borrow::Cow;

use raylog_parsers::record::FieldValue;
use raylog_parsers::Record;

use super::detect::{
    exception_class, ActorFailure, DeathSource, Event, NodeDeath, TaskFailure, TaskFailureSource, WorkerDeath,
};

fn field<'a>(r: &Record<'a>, k: &str) -> Option<&'a str> {
    match r.fields.get(k)? {
        FieldValue::Str(s) => Some(s),
        FieldValue::Json(_) => None,
    }
}

/// What a `ray_event` record says went wrong, if anything.
pub fn detect<'a>(r: &Record<'a>) -> Option<Event<'a>> {
    let state = field(r, "state");
    match (field(r, "event_type")?, state?) {
        ("WORKER_LIFECYCLE_EVENT", "DEAD") => {
            let exit_type = field(r, "exit_type")?;
            (!exit_type.starts_with("INTENDED")).then_some(Event::WorkerDeath(WorkerDeath {
                source: DeathSource::RayEvent,
                worker_id: r.ids.worker_id,
                node_id: r.ids.node_id,
                pid: r.pid,
                exit_type,
                detail: None,
            }))
        }
        ("ACTOR_LIFECYCLE_EVENT", s @ ("RESTARTING" | "DEAD")) => {
            // Only a death Ray did not intend: its worker or node died.
            let failed = s == "RESTARTING" || matches!(field(r, "death_reason"), Some("WORKER_DIED" | "NODE_DIED"));
            failed.then_some(Event::ActorFailure(ActorFailure {
                actor_id: r.ids.actor_id,
                worker_id: r.ids.worker_id,
                node_id: r.ids.node_id,
                job_id: r.ids.job_id,
                need_reschedule: true,
                remaining_restarts: None,
                restarting: s == "RESTARTING",
                from_event: true,
            }))
        }
        ("TASK_LIFECYCLE_EVENT", "FAILED") => {
            let error_type = field(r, "error_type")?;
            let exception = match (error_type, r.fields.get("event_data")) {
                ("TASK_EXECUTION_EXCEPTION", Some(FieldValue::Json(data))) => {
                    crate::trace::facts::json_path(data, &["rayErrorInfo", "errorMessage"])
                        .or_else(|| crate::trace::facts::json_path(data, &["ray_error_info", "error_message"]))
                        .as_deref()
                        .and_then(exception_class)
                }
                _ => None,
            };
            let attempt = match r.fields.get("attempt") {
                Some(FieldValue::Json(n) | FieldValue::Str(n)) => n.parse().ok(),
                None => Some(0),
            };
            Some(Event::TaskFailure(TaskFailure {
                source: TaskFailureSource::RayEvent,
                task_id: r.ids.task_id,
                attempt,
                exception: exception.map_or(Cow::Borrowed(error_type), Cow::Owned),
                error_type: Cow::Borrowed(error_type),
                task_name: r.task_name,
            }))
        }
        ("NODE_LIFECYCLE_EVENT", "DEAD") => {
            Some(Event::NodeDeath(NodeDeath { node_id: r.ids.node_id, reason: None, message: None, from_event: true }))
        }
        _ => None,
    }
}
