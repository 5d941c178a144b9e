//! Ray events (`events/event_<SOURCE>.log`): one JSON object per line.
//!
//! New form: `{"custom_fields":{…ids…},"event_id","host_name","label","message","pid",
//! "severity","source_type","timestamp":<seconds>}`. Older Ray wrote
//! `"time_stamp":"YYYY-MM-DD HH:MM:SS.ffffff"` and put `job_id`/`node_id`/`task_id` at the
//! top level; both are read. `label` (e.g. `RAY_WORKER_FAILURE`) and `source_type`
//! are kept under `fields`; ids inside the message prose are picked up too.

use super::{Draft, ParseCtx};
use crate::ids_in_text::scan_prose;
use crate::json::{members, Value};
use crate::record::{FieldValue, Level};
use crate::time::{parse_civil, EpochUnit};

/// Parses one event. Returns false when `text` is not a JSON object.
pub fn parse<'a>(text: &'a str, scratch: &'a mut String, cx: &ParseCtx<'_>, d: &mut Draft<'a>) -> bool {
    let mut message: Option<Value<'a>> = None;
    let mut custom: Option<&'a str> = None;
    let parsed = members(text, |k, v| match k {
        "message" => message = Some(v),
        "custom_fields" => custom = Some(v.raw()),
        "severity" => d.level = v.plain_str().and_then(|s| Level::from_name(s.as_bytes())),
        "timestamp" => {
            // Seconds, possibly with a fraction.
            d.epoch_time(v.raw(), EpochUnit::Seconds);
        }
        "time_stamp" => {
            if let Some((c, _)) = v.plain_str().and_then(|s| parse_civil(s.as_bytes())) {
                d.civil_time(cx.zone, c);
            }
        }
        "pid" => d.pid = v.raw().trim_matches('"').parse().ok(),
        _ => match v.plain_str() {
            Some(s) => d.put_pair(k, s),
            None => d.fields.push(k, v.to_field()),
        },
    });
    if parsed.is_err() {
        return false;
    }
    if let Some(c) = custom {
        let ok = members(c, |k, v| match v.plain_str() {
            Some(s) => d.put_pair(k, s),
            None => d.fields.push(k, v.to_field()),
        });
        if ok.is_err() {
            d.fields.push("custom_fields", FieldValue::Json(c));
        }
    }
    d.message = super::json_log::join_message(message, None, scratch);
    scan_prose(d.message.split('\n').next().unwrap_or(""), &mut d.ids);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FileKind;
    use crate::time::Zone;

    fn run<'a>(line: &'a str, scratch: &'a mut String) -> Draft<'a> {
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::Event };
        let mut d = Draft::default();
        assert!(parse(line, scratch, &cx, &mut d));
        d
    }

    #[test]
    fn new_form() {
        let line = r#"{"custom_fields":{"job_id":"01000000","node_id":"695e461fb0f54d6e7375eeaf092edbcbcbd997954cab95dbf3635b7a","worker_id":"78d4630a58840d032a9dd87f4bf08d0f07a48465f2b862515c3b4935"},"event_id":"70c0","host_name":"vm","label":"RAY_WORKER_FAILURE","message":"A worker died. Worker PID: 4748","pid":"4214","severity":"ERROR","source_type":"RAYLET","timestamp":1796029537}"#;
        let mut s = String::new();
        let d = run(line, &mut s);
        assert_eq!(d.level, Some(Level::Error));
        assert_eq!(d.pid, Some(4214));
        assert_eq!(d.ids.job_id.unwrap().as_str(), "01000000");
        assert_eq!(d.ids.worker_id.unwrap().as_str(), "78d4630a58840d032a9dd87f4bf08d0f07a48465f2b862515c3b4935");
        assert_eq!(d.fields.get("label"), Some(FieldValue::Str("RAY_WORKER_FAILURE")));
        assert_eq!(d.timestamp.unwrap().to_rfc3339(), "2026-11-30T09:05:37.000Z");
        assert_eq!(d.message, "A worker died. Worker PID: 4748");
    }

    #[test]
    fn old_form() {
        let line = r#"{"event_id":"ab","job_id":"02000000","node_id":"695e461fb0f54d6e7375eeaf092edbcbcbd997954cab95dbf3635b7a","task_id":"ffffffffffffffff","label":"X","message":"m","severity":"WARNING","source_type":"GCS","time_stamp":"2023-05-01 10:00:00.123456","custom_fields":{}}"#;
        let mut s = String::new();
        let d = run(line, &mut s);
        assert_eq!(d.ids.job_id.unwrap().as_str(), "02000000");
        assert_eq!(d.ids.task_id, None);
        assert_eq!(d.timestamp.unwrap().to_rfc3339(), "2023-05-01T10:00:00.123456Z");
        assert_eq!(d.level, Some(Level::Warning));
    }
}
