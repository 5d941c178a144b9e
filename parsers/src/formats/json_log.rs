//! JSON log lines: structured logging in JSON encoding and C++ `RAY_BACKEND_LOG_JSON=1`.
//!
//! Both write flat objects with `asctime`, `levelname`, `message`, `filename`,
//! `lineno` and Ray's context keys (`job_id`, `worker_id`, `task_id`...), plus user
//! `extra` keys. Known keys become schema fields; the rest are kept verbatim under
//! `fields`. An `exc_text` traceback is appended to the message so the record reads
//! like its TEXT twin.

use super::{Draft, ParseCtx};
use crate::json::{members, unescape_into, Value};
use crate::record::Level;
use crate::time::{parse_civil, EpochUnit};

/// Parses one JSON log object. Returns false when `text` is not a JSON object.
pub fn parse<'a>(text: &'a str, scratch: &'a mut String, cx: &ParseCtx<'_>, d: &mut Draft<'a>) -> bool {
    let mut message: Option<Value<'a>> = None;
    let mut exc: Option<Value<'a>> = None;
    let mut ns: Option<&'a str> = None;
    let parsed = members(text, |k, v| match k {
        "message" | "msg" => message = Some(v),
        "exc_text" | "exc_info" => exc = Some(v),
        "asctime" => {
            if let Some((c, _)) = v.plain_str().and_then(|s| parse_civil(s.as_bytes())) {
                d.civil_time(cx.zone, c);
            }
        }
        "timestamp_ns" => ns = Some(v.raw()),
        // C++ JSON logging writes spdlog's letter (`I`), Python the name (`INFO`).
        "levelname" | "level" | "severity" => {
            d.level = d.level.or_else(|| {
                v.plain_str().and_then(|s| match s.as_bytes() {
                    [c] => Level::from_letter(*c),
                    name => Level::from_name(name),
                })
            })
        }
        // The file already says which component wrote it.
        "component" => {}
        "process" | "pid" => d.pid = v.raw().trim_matches('"').parse().ok(),
        _ => match v.plain_str() {
            Some(s) => d.put_pair(k, s),
            None => d.fields.push(k, v.to_field()),
        },
    });
    if parsed.is_err() {
        return false;
    }
    // The precise time wins over `asctime`, wherever it is in the object.
    if let Some(ns) = ns {
        d.epoch_time(ns, EpochUnit::Nanos);
    }
    d.message = join_message(message, exc, scratch);
    true
}

/// The decoded message, with an exception text on the lines after it. Borrows the
/// line when nothing needs decoding.
pub(super) fn join_message<'a>(message: Option<Value<'a>>, exc: Option<Value<'a>>, scratch: &'a mut String) -> &'a str {
    let exc = exc.filter(|e| e.str_inner().is_some_and(|s| !s.is_empty()));
    match (message, exc) {
        (Some(Value::Str(_, false)), None) => message.and_then(|m| m.plain_str()).unwrap_or(""),
        (None, None) => "",
        (m, e) => {
            scratch.clear();
            if let Some(m) = m {
                match m.str_inner() {
                    Some(inner) => unescape_into(inner, scratch),
                    None => scratch.push_str(m.raw()),
                }
            }
            if let Some(inner) = e.and_then(|e| e.str_inner()) {
                if !scratch.is_empty() {
                    scratch.push('\n');
                }
                unescape_into(inner, scratch);
            }
            let s: &'a String = scratch;
            s.trim_end_matches('\n')
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FileKind;
    use crate::record::FieldValue;
    use crate::time::Zone;

    #[test]
    fn structured_json() {
        let line = r#"{"asctime": "2026-11-30 09:06:00,509", "levelname": "WARNING", "message": "counter alpha at 1", "filename": "workload.py", "lineno": 28, "process": 7790, "job_id": "01000000", "worker_id": "84772710e0adfe9ee6ac063bdbcdc78abeae6dbc31b91231c629bb8e", "actor_id": "1b7eb88dc31d2402f6fc27a801000000", "task_name": "Counter.incr", "timestamp_ns": 1796029560509334082, "user": {"a": 1}}"#;
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::Worker };
        let mut scratch = String::new();
        let mut d = Draft::default();
        assert!(parse(line, &mut scratch, &cx, &mut d));
        assert_eq!(d.message, "counter alpha at 1");
        assert_eq!(d.level, Some(Level::Warning));
        assert_eq!(d.pid, Some(7790));
        assert_eq!(d.task_name, Some("Counter.incr"));
        assert_eq!(d.ids.actor_id.unwrap().as_str(), "1b7eb88dc31d2402f6fc27a801000000");
        assert_eq!(d.fields.get("user"), Some(FieldValue::Json(r#"{"a": 1}"#)));
        assert_eq!(d.timestamp.unwrap().to_rfc3339(), "2026-11-30T09:06:00.509334082Z");
    }

    #[test]
    fn cpp_json_line() {
        let line = r#"{"asctime":"2026-11-30 10:54:18,263","levelname":"I","message":"Creating actor","filename":"core_worker.cc","lineno":3247,"actor_id":"8410879277044213416b94f301000000"}"#;
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::Cpp };
        let mut scratch = String::new();
        let mut d = Draft::default();
        assert!(parse(line, &mut scratch, &cx, &mut d));
        assert_eq!(d.level, Some(Level::Info));
        assert_eq!(d.message, "Creating actor");
        assert_eq!(d.ids.actor_id.unwrap().as_str(), "8410879277044213416b94f301000000");
        assert_eq!(d.timestamp.unwrap().to_rfc3339(), "2026-11-30T10:54:18.263Z");
    }

    #[test]
    fn exc_text_joins() {
        let line = r#"{"asctime": "2026-11-30 09:06:00,509", "levelname": "ERROR", "message": "failed \u00e9", "exc_text": "Traceback (most recent call last):\n  File \"x.py\"\nValueError: x"}"#;
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::Worker };
        let mut scratch = String::new();
        let mut d = Draft::default();
        assert!(parse(line, &mut scratch, &cx, &mut d));
        assert_eq!(d.message, "failed é\nTraceback (most recent call last):\n  File \"x.py\"\nValueError: x");
    }
}
