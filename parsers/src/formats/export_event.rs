//! Export API events (`export_events/event_EXPORT_<TYPE>.log`).
//!
//! `{"event_data":{…},"event_id","source_type":"EXPORT_ACTOR","timestamp":<s>}`. Ids in
//! `event_data` are protobuf bytes in base64 (`"job_id":"AQAAAA=="` is `01000000`) and
//! are decoded to hex; the worker of a task event is `profile_events.component_id`.
//! These lines carry no prose, so the message is composed from the source type and
//! the state-like members (`EXPORT_ACTOR state=ALIVE class_name=Counter pid=7790`);
//! `event_data` itself is kept verbatim under `fields`.

use super::Draft;
use crate::id::id_from_base64;
use crate::ids_in_text::IdKind;
use crate::json::{members, Value};
use crate::record::{FieldValue, Ids};
use crate::time::EpochUnit;
use std::fmt::Write;

/// Members of `event_data` worth showing in the message.
const SUMMARY_KEYS: [&str; 8] =
    ["state", "class_name", "name", "func_or_class_name", "entrypoint", "is_dead", "node_name", "attempt_number"];

/// Parses one export event. Returns false when `text` is not a JSON object.
pub fn parse<'a>(text: &'a str, scratch: &'a mut String, d: &mut Draft<'a>) -> bool {
    let mut data: Option<&'a str> = None;
    let mut source = "";
    let parsed = members(text, |k, v| match k {
        "event_data" => data = Some(v.raw()),
        "source_type" => source = v.plain_str().unwrap_or(""),
        "timestamp" => d.epoch_time(v.raw(), EpochUnit::Seconds),
        _ => d.fields.push(k, v.to_field()),
    });
    if parsed.is_err() {
        return false;
    }
    d.fields.push("source_type", FieldValue::Str(source));
    scratch.clear();
    scratch.push_str(source);
    if let Some(data) = data {
        walk_data(data, d, scratch, 0);
        d.fields.push("event_data", FieldValue::Json(data));
    }
    let s: &'a String = scratch;
    d.message = s;
    true
}

/// Decodes ids and summary members of `event_data`, one level into nested objects
/// (`task_info`, `profile_events`, `state_updates`).
fn walk_data<'a>(obj: &'a str, d: &mut Draft<'a>, msg: &mut String, depth: u8) {
    let _ = members(obj, |k, v| {
        if let Some(kind) = IdKind::from_key(k) {
            store_b64(kind, v, &mut d.ids);
            return;
        }
        match k {
            "component_id" => store_b64(IdKind::Worker, v, &mut d.ids),
            "worker_pid" | "pid" | "driver_pid" => {
                let p = v.raw().trim_matches('"').parse().ok().filter(|&p: &u32| p != 0);
                d.pid = d.pid.or(p);
            }
            "func_or_class_name" if depth > 0 => d.task_name = d.task_name.or(v.plain_str()),
            _ if depth == 0 && matches!(v, Value::Raw(r) if r.starts_with('{')) => walk_data(v.raw(), d, msg, 1),
            _ => {}
        }
        if SUMMARY_KEYS.contains(&k) {
            let shown = v.plain_str().unwrap_or(v.raw());
            if !shown.is_empty() && !shown.starts_with(['{', '[']) {
                let _ = write!(msg, " {k}={shown}");
            }
        }
    });
}

fn store_b64(kind: IdKind, v: Value<'_>, ids: &mut Ids) {
    if let Some(s) = v.plain_str() {
        kind.store(ids, id_from_base64(s.as_bytes()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actor_event() {
        let line = r#"{"event_data": {"actor_id": "G364jcMdJAL2/CeoAQAAAA==", "class_name": "Counter", "death_cause": {}, "job_id": "AQAAAA==", "name": "", "node_id": "uysW4dnc1/2/Zhzk4C0TizRJ+wXL4BBErfwMOw==", "pid": 7790, "state": "ALIVE"}, "event_id": "bc5c", "source_type": "EXPORT_ACTOR", "timestamp": 1796029559}"#;
        let mut s = String::new();
        let mut d = Draft::default();
        assert!(parse(line, &mut s, &mut d));
        assert_eq!(d.ids.actor_id.unwrap().as_str(), "1b7eb88dc31d2402f6fc27a801000000");
        assert_eq!(d.ids.job_id.unwrap().as_str(), "01000000");
        assert_eq!(d.ids.node_id.unwrap().as_str(), "bb2b16e1d9dcd7fdbf661ce4e02d138b3449fb05cbe01044adfc0c3b");
        assert_eq!(d.pid, Some(7790));
        assert_eq!(d.message, "EXPORT_ACTOR class_name=Counter pid=7790 state=ALIVE".replace(" pid=7790", ""));
    }

    #[test]
    fn task_event_worker() {
        let line = r#"{"event_data": {"attempt_number": 0, "job_id": "AQAAAA==", "profile_events": {"component_id": "hHcnEOCt/p7mrAY7283Hir6ubbwxuRIxxim7jg==", "component_type": "worker"}, "state_updates": {"worker_pid": 7790}, "task_id": "//////////8bfriNwx0kAvb8J6gBAAAA"}, "event_id": "38", "source_type": "EXPORT_TASK", "timestamp": 1796029561}"#;
        let mut s = String::new();
        let mut d = Draft::default();
        assert!(parse(line, &mut s, &mut d));
        assert_eq!(d.ids.task_id.unwrap().as_str(), "ffffffffffffffff1b7eb88dc31d2402f6fc27a801000000");
        assert_eq!(d.ids.worker_id.unwrap().as_str().len(), 56);
        assert_eq!(d.pid, Some(7790));
    }
}
