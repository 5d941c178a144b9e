//! Ray's exported events (`RayEvent`, Ray 2.60 `RAY_enable_ray_event=1`), as the
//! dashboard agent's aggregator POSTs them and as raylog's spool keeps them
//! (`ray_events-<seq>.ndjson`, one event per line).
//!
//! A spool line is `{"post":"<id>","i":<index>,"n":<count>,"event":{RayEvent}}`; a
//! bare `RayEvent` object is read too. The event:
//! `{"eventId","sourceType":"GCS","eventType":"ACTOR_LIFECYCLE_EVENT","timestamp":
//! "2026-12-01T19:43:30.951541831Z","severity":"INFO","sessionName","nodeId",
//! "message","actorLifecycleEvent":{…}}`: exactly one member holds the payload, an
//! object named after the event type. Keys are camelCase, or snake_case when Ray runs
//! with `RAY_DASHBOARD_AGGREGATOR_AGENT_PRESERVE_PROTO_FIELD_NAME=1`; both are read.
//! Ids are protobuf bytes in base64 (`"jobId":"AQAAAA=="` is job `01000000`) and
//! become the hex the logs print.
//!
//! Lifecycle payloads carry `stateTransitions` (`ALIVE`, `RESTARTING`, `DEAD`,
//! `FAILED`…), each with its own node, worker and pid: the record takes the last
//! state, and every transition to `ALIVE` with a worker is a worker → actor link for
//! the correlator ([`Draft::links`]), so a restarted actor's two workers both map to
//! it (they are listed in the message and in `fields.workers`, in order). An actor
//! task's worker is linked to the actor its task id names. The message is composed (`ACTOR_LIFECYCLE_EVENT state=DEAD class_name=Counter
//! death_reason=WORKER_DIED`); the payload is kept verbatim as `fields.event_data`.

use std::fmt::Write;

use super::Draft;
use crate::id::{id_from_base64, Id};
use crate::ids_in_text::IdKind;
use crate::json::{elements, members, Value};
use crate::record::{FieldValue, Level};
use crate::time::{parse_civil, OutOfRange, Timestamp};

/// What one event says, gathered while walking it, before the message is written.
#[derive(Default)]
struct Seen<'a> {
    event_type: &'a str,
    state: Option<&'a str>,
    /// Workers that went `ALIVE` (an actor's incarnations), in order.
    alive_workers: Vec<Id>,
    summary: Vec<(&'static str, &'a str)>,
}

/// Parses one spool line or bare event. False when `text` is not a JSON object or
/// has no `eventType`.
pub fn parse<'a>(text: &'a str, scratch: &'a mut String, d: &mut Draft<'a>) -> bool {
    let mut event: Option<&'a str> = None;
    let wrapped = members(text, |k, v| {
        if k == "event" && matches!(v, Value::Raw(r) if r.starts_with('{')) {
            event = Some(v.raw());
        }
    });
    if wrapped.is_err() {
        return false;
    }
    let mut seen = Seen::default();
    if !event_members(event.unwrap_or(text), d, &mut seen) || seen.event_type.is_empty() {
        return false;
    }
    if let Some(actor) = d.ids.actor_id {
        d.links.extend(seen.alive_workers.iter().map(|w| (*w, actor)));
    }
    // An actor task (or creation task) runs on the actor's worker.
    if let (Some(w), Some(a)) = (d.ids.worker_id, d.ids.task_id.and_then(|t| t.actor_of_task())) {
        d.links.push((w, a));
    }
    let workers_at = write_message(&seen, scratch);
    d.fields.push("event_type", FieldValue::Str(seen.event_type));
    if let Some(s) = seen.state {
        d.fields.push("state", FieldValue::Str(s));
    }
    let s: &'a String = scratch;
    if let Some(at) = workers_at {
        d.fields.push("workers", FieldValue::Str(&s[at..]));
    }
    d.message = s;
    true
}

/// The top level of a `RayEvent`.
fn event_members<'a>(event: &'a str, d: &mut Draft<'a>, seen: &mut Seen<'a>) -> bool {
    let mut top_node = None;
    let mut message = "";
    let ok = members(event, |k, v| match k {
        // The first one stated, as the receiver checks it: a later empty or
        // non-string duplicate must not turn an accepted event into plain text.
        "eventType" | "event_type" if seen.event_type.is_empty() => seen.event_type = v.plain_str().unwrap_or(""),
        "eventType" | "event_type" => {}
        "timestamp" => match v.plain_str().and_then(rfc3339) {
            Some(Ok(t)) => d.timestamp = Some(t),
            Some(Err(OutOfRange)) => d.time_out_of_range = true,
            None => {}
        },
        "severity" => d.level = v.plain_str().and_then(|s| Level::from_name(s.as_bytes())),
        "nodeId" | "node_id" => top_node = v.plain_str().and_then(|s| id_from_base64(s.as_bytes())),
        "sourceType" | "source_type" => d.fields.push("source_type", v.to_field()),
        "eventId" | "event_id" => d.fields.push("event_id", v.to_field()),
        "sessionName" | "session_name" => d.fields.push("session_name", v.to_field()),
        "message" => message = v.plain_str().unwrap_or(""),
        _ if matches!(v, Value::Raw(r) if r.starts_with('{')) => {
            payload(v.raw(), d, seen);
            d.fields.push("event_data", FieldValue::Json(v.raw()));
        }
        _ => {}
    });
    if !message.is_empty() {
        seen.summary.push(("message", message));
    }
    // The payload's own node (where a task ran, an actor lives) wins over the
    // node that reported the event.
    IdKind::Node.store(&mut d.ids, top_node);
    ok.is_ok()
}

/// The payload object: ids, names, pid, attempt, transitions, errors.
fn payload<'a>(obj: &'a str, d: &mut Draft<'a>, seen: &mut Seen<'a>) {
    let _ = members(obj, |k, v| {
        if let Some(kind) = id_kind(k) {
            if let Some(s) = v.plain_str() {
                kind.store(&mut d.ids, id_from_base64(s.as_bytes()));
            }
            return;
        }
        match k {
            "taskName" | "task_name" | "actorTaskName" | "actor_task_name" => {
                d.task_name = d.task_name.or(v.plain_str().filter(|s| !s.is_empty()));
            }
            "className" | "class_name" => {
                d.actor_name = d.actor_name.or(v.plain_str().filter(|s| !s.is_empty()));
                summary(seen, "class_name", v);
            }
            "name" => summary(seen, "name", v),
            "pid" | "workerPid" | "worker_pid" | "driverPid" | "driver_pid" => set_pid(d, v),
            "taskAttempt" | "task_attempt" | "attemptNumber" | "attempt_number" => {
                d.fields.push("attempt", FieldValue::Json(v.raw()));
                summary(seen, "attempt", v);
            }
            "workerType" | "worker_type" => summary(seen, "worker_type", v),
            "nodeName" | "node_name" => summary(seen, "node_name", v),
            "entrypoint" => summary(seen, "entrypoint", v),
            "stateTransitions" | "state_transitions" => transitions(v.raw(), d, seen),
            "rayErrorInfo" | "ray_error_info" => error_info(v.raw(), d, seen),
            "profileEvents" | "profile_events" => profile(v.raw(), d),
            _ => {}
        }
    });
}

/// Payload keys naming an id, in either spelling. `driverNodeId` is the node of a
/// job's driver; an owner's or parent's id is not the record's.
fn id_kind(k: &str) -> Option<IdKind> {
    Some(match k {
        "taskId" | "task_id" => IdKind::Task,
        "jobId" | "job_id" => IdKind::Job,
        "actorId" | "actor_id" => IdKind::Actor,
        "workerId" | "worker_id" => IdKind::Worker,
        "nodeId" | "node_id" | "driverNodeId" | "driver_node_id" => IdKind::Node,
        _ => return None,
    })
}

fn set_pid(d: &mut Draft<'_>, v: Value<'_>) {
    let p = v.raw().trim_matches('"').parse().ok().filter(|&p: &u32| p != 0);
    d.pid = d.pid.or(p);
}

fn summary<'a>(seen: &mut Seen<'a>, key: &'static str, v: Value<'a>) {
    if let Some(s) = v.plain_str().filter(|s| !s.is_empty()) {
        seen.summary.push((key, s));
    }
}

/// `stateTransitions`: the last state wins, and with it its node, worker and pid
/// (each transition says where the task or actor was then).
fn transitions<'a>(raw: &'a str, d: &mut Draft<'a>, seen: &mut Seen<'a>) {
    let (mut node, mut worker, mut pid) = (None, None, None);
    let _ = elements(raw, |t| {
        let (mut state, mut w, mut n, mut p) = (None, None, None, None);
        let _ = members(t, |k, v| match k {
            "state" => state = v.plain_str(),
            "workerId" | "worker_id" => w = v.plain_str().and_then(|s| id_from_base64(s.as_bytes())),
            "nodeId" | "node_id" => n = v.plain_str().and_then(|s| id_from_base64(s.as_bytes())),
            "pid" => p = v.raw().parse().ok().filter(|&p: &u32| p != 0),
            "deathCause" | "death_cause" => death_cause(v.raw(), d, seen),
            "deathInfo" | "death_info" => death_info(v.raw(), d, seen),
            _ => {}
        });
        if let (Some("ALIVE"), Some(w)) = (state, w) {
            seen.alive_workers.push(w);
        }
        seen.state = state.or(seen.state);
        (node, worker, pid) = (n.or(node), w.or(worker), p.or(pid));
    });
    IdKind::Node.store(&mut d.ids, node);
    IdKind::Worker.store(&mut d.ids, worker);
    d.pid = d.pid.or(pid);
}

/// An actor's `deathCause`: `{"actorDiedErrorContext":{"reason":"WORKER_DIED",…}}`.
fn death_cause<'a>(raw: &'a str, d: &mut Draft<'a>, seen: &mut Seen<'a>) {
    let _ = members(raw, |_, ctx| {
        let _ = members(ctx.raw(), |k, v| {
            if k == "reason" {
                d.fields.push("death_reason", v.to_field());
                summary(seen, "death_reason", v);
            }
        });
    });
}

/// A worker's `deathInfo`: `{"exitType":"SYSTEM_ERROR","exitDetail":"…"}`.
fn death_info<'a>(raw: &'a str, d: &mut Draft<'a>, seen: &mut Seen<'a>) {
    let _ = members(raw, |k, v| {
        if matches!(k, "exitType" | "exit_type") {
            d.fields.push("exit_type", v.to_field());
            summary(seen, "exit_type", v);
        }
    });
}

/// A failed task's `rayErrorInfo`: `errorType` (`TASK_EXECUTION_EXCEPTION`,
/// `ACTOR_DIED`…); the message and traceback stay in `event_data`.
fn error_info<'a>(raw: &'a str, d: &mut Draft<'a>, seen: &mut Seen<'a>) {
    let _ = members(raw, |k, v| {
        if matches!(k, "errorType" | "error_type") {
            d.fields.push("error_type", v.to_field());
            summary(seen, "error_type", v);
        }
    });
}

/// A task profile's `profileEvents`: the worker that ran it is `componentId` when
/// `componentType` is `worker`.
fn profile<'a>(raw: &'a str, d: &mut Draft<'a>) {
    let (mut component, mut is_worker) = (None, false);
    let _ = members(raw, |k, v| match k {
        "componentId" | "component_id" => component = v.plain_str().and_then(|s| id_from_base64(s.as_bytes())),
        "componentType" | "component_type" => is_worker = v.plain_str() == Some("worker"),
        _ => {}
    });
    if is_worker {
        IdKind::Worker.store(&mut d.ids, component);
    }
}

/// The message; `workers=<w1>,<w2>` last when an actor went `ALIVE` on workers
/// (all its incarnations in this event), whose start is returned: that list is also
/// the `workers` field, so a worker id finds the actor's lifecycle events.
fn write_message(seen: &Seen<'_>, out: &mut String) -> Option<usize> {
    out.clear();
    out.push_str(seen.event_type);
    if let Some(s) = seen.state {
        let _ = write!(out, " state={s}");
    }
    for (k, v) in &seen.summary {
        let _ = write!(out, " {k}={v}");
    }
    if seen.alive_workers.is_empty() {
        return None;
    }
    out.push_str(" workers=");
    let at = out.len();
    for (i, w) in seen.alive_workers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(w.as_str());
    }
    Some(at)
}

/// `2026-12-01T19:43:30.951541831Z` (or with a `±hh:mm` offset) as a timestamp,
/// like [`Timestamp::parse_epoch`]: `None` when `s` is not such a time,
/// [`OutOfRange`] when it is one no `Timestamp` holds. The offset is applied in
/// `i128` before the range is checked: a time near an edge is kept exactly, and a
/// nonsense offset (`+99999999999:00`) is flagged, never wrapped into another year.
pub fn rfc3339(s: &str) -> Option<Result<Timestamp, OutOfRange>> {
    let (civil, used) = parse_civil(s.as_bytes())?;
    let rest = &s[used..];
    let utc = civil.utc_nanos();
    let at = match rest.as_bytes() {
        [] | [b'Z' | b'z'] => Some(utc),
        [sign @ (b'+' | b'-'), ..] => {
            let (h, m) = rest[1..].split_once(':')?;
            // Each number on its own is in range or not: `None` of `number` is not a
            // time, `Some(None)` one too large for any i128 arithmetic.
            let (h, m) = (number(h)?, number(m)?);
            let minutes = h.and_then(|h| h.checked_mul(60)).zip(m).and_then(|(h, m)| h.checked_add(m));
            let offset = minutes.and_then(|m| m.checked_mul(60_000_000_000));
            match sign {
                b'+' => offset.and_then(|o| utc.checked_sub(o)),
                _ => offset.and_then(|o| utc.checked_add(o)),
            }
        }
        _ => return None,
    };
    Some(at.and_then(Timestamp::from_nanos_i128).ok_or(OutOfRange))
}

/// ASCII digits as a number: `None` for anything else (signs included), `Some(None)`
/// for more digits than an `i128` holds.
fn number(t: &str) -> Option<Option<i128>> {
    (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())).then(|| t.parse().ok())
}

#[cfg(test)]
mod fuzz;
#[cfg(test)]
pub(crate) mod tests;
