//! [`Entry`]: an owned copy of one record, kept for the trace after the scan moves on.
//!
//! A parser [`Record`] borrows the parser's buffers and dies with the callback, but a
//! trace must hold its records until every file has been read (to sort them and to
//! build the summary). An entry keeps the record's NDJSON form for output plus the
//! few fields the summary reads, so nothing is parsed twice.

use std::sync::Arc;

use raylog_parsers::ndjson::write_record;
use raylog_parsers::record::{FieldValue, Ids};
use raylog_parsers::{Level, Record, Timestamp};

/// One record of the trace.
#[derive(Clone, Debug)]
pub struct Entry {
    pub timestamp: Option<Timestamp>,
    /// The line had no time of its own (see the record schema).
    pub inferred: bool,
    /// The time was estimated from the file's next timed line or the worker's
    /// core-worker log (`timestamp_estimated` in the record schema).
    pub estimated: bool,
    pub level: Option<Level>,
    pub message: String,
    pub component: String,
    pub file: String,
    pub session: Option<String>,
    pub submission_id: Option<String>,
    /// The worker whose own file this is (worker stdout/stderr, core-worker log).
    pub file_worker: bool,
    pub offset: u64,
    /// Shared with the entries before it that have the same ids (most of a file's
    /// records): five inline ids are half an entry's size, and a large trace's
    /// fresh pages cost more than anything else its calling thread does.
    pub ids: Arc<Ids>,
    pub pid: Option<u32>,
    pub task_name: Option<String>,
    pub actor_name: Option<String>,
    /// Event `label` (`RAY_WORKER_FAILURE`...).
    pub label: Option<String>,
    /// Export events' `event_data`, raw JSON.
    pub event_data: Option<String>,
    /// A `--context` record: not about the traced entity, shown before an error.
    pub context: bool,
    /// Position in scan order, so sorting keeps ties in the order they were read.
    pub seq: u64,
    /// The record's NDJSON members without `timestamp` and without the braces.
    body: String,
}

/// A field's text, unescaped when it was stored as a JSON string.
fn field_text(v: FieldValue<'_>) -> String {
    match v {
        FieldValue::Str(s) => s.to_string(),
        FieldValue::Json(j) => {
            let mut out = String::new();
            match j.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                Some(inner) => raylog_parsers::json::unescape_into(inner, &mut out),
                None => out.push_str(j),
            }
            out
        }
    }
}

/// Splits `{"timestamp":"…",rest}\n` into `rest`; the writer always puts the
/// timestamp first and RFC 3339 text holds no quote, so the first `",` ends it.
fn body_of(json: &str, has_timestamp: bool) -> String {
    let t = json.trim_end();
    let inner = t.strip_prefix('{').and_then(|t| t.strip_suffix('}')).unwrap_or(t);
    if has_timestamp {
        if let Some(end) = inner.find("\",") {
            return inner[end + 2..].to_string();
        }
    }
    inner.to_string()
}

/// Appends `r`'s NDJSON line to `out`, as [`Entry::from_record`] reads it.
pub fn write_json(r: &Record<'_>, out: &mut String) {
    // SAFETY: the record writer appends only whole `&str`s of the record and ASCII,
    // so `out` stays UTF-8.
    let start = out.len();
    write_record(unsafe { out.as_mut_vec() }, r);
    debug_assert!(std::str::from_utf8(&out.as_bytes()[start..]).is_ok());
}

impl Entry {
    /// Copies what the trace needs out of `r`. `json` is `r`'s NDJSON line
    /// ([`write_json`]) when the trace is printed as JSON; without it the entry
    /// keeps no JSON (text output does not use it) and [`Entry::write_json`] must
    /// not be called.
    /// `ids` is `r`'s ids, shared ([`Entry::ids`]).
    pub fn from_record(r: &Record<'_>, seq: u64, json: Option<&str>, ids: Arc<Ids>) -> Entry {
        debug_assert_eq!(*ids, *r.ids);
        let event_data = match r.fields.get("event_data") {
            Some(FieldValue::Json(j)) => Some(j.to_string()),
            _ => None,
        };
        Entry {
            timestamp: r.timestamp,
            inferred: r.timestamp_inferred,
            estimated: r.timestamp_estimated,
            level: r.level,
            message: r.message.to_string(),
            component: r.component().to_string(),
            file: r.file.rel_path.clone(),
            session: r.file.session.clone(),
            submission_id: r.file.submission_id.clone(),
            file_worker: r.file.worker_id.is_some() && r.ids.worker_id == r.file.worker_id,
            offset: r.offset,
            ids,
            pid: r.pid,
            task_name: r.task_name.map(str::to_string),
            actor_name: r.actor_name.map(str::to_string),
            label: r.fields.get("label").map(field_text),
            event_data,
            context: false,
            seq,
            body: json.map_or_else(String::new, |j| body_of(j, r.timestamp.is_some())),
        }
    }

    /// The worker the record is about: its `worker_id`, else one its text names.
    pub fn worker(&self) -> Option<raylog_parsers::Id> {
        self.ids.worker_id.or_else(|| super::facts::worker_in_text(&self.component, &self.message))
    }

    /// ERROR or FATAL.
    pub fn is_error(&self) -> bool {
        self.level.is_some_and(|l| l >= Level::Error)
    }

    /// A file of the worker process itself (not a driver's): its stdout/stderr or
    /// its core-worker log.
    pub fn in_worker_file(&self) -> bool {
        self.file_worker && matches!(self.component.as_str(), "worker" | "core_worker")
    }

    /// Appends the record as one JSON object (no newline): the NDJSON schema, plus
    /// `context` when it applies.
    pub fn write_json(&self, out: &mut String) {
        out.push('{');
        if let Some(t) = self.timestamp {
            out.push_str("\"timestamp\":\"");
            // SAFETY: an RFC 3339 time is ASCII, so `out` stays UTF-8.
            t.write_rfc3339(unsafe { out.as_mut_vec() });
            out.push_str("\",");
        }
        debug_assert!(!self.body.is_empty(), "an entry made without its JSON is written as JSON");
        out.push_str(&self.body);
        if self.context {
            out.push_str(",\"context\":true");
        }
        out.push('}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_drops_only_the_timestamp() {
        let j = r#"{"timestamp":"2026-11-30T10:21:12.477Z","level":"INFO","message":"a \",b"}"#;
        assert_eq!(body_of(j, true), r#""level":"INFO","message":"a \",b""#);
        assert_eq!(body_of(r#"{"message":"x","fields":{"a":1}}"#, false), r#""message":"x","fields":{"a":1}"#);
    }
}
