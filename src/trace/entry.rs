//! [`Entry`]: an owned copy of one record, kept for the trace after the scan moves on.
//!
//! A parser [`Record`] borrows the parser's buffers and dies with the callback, but a
//! trace must hold its records until every file has been read (to sort them and to
//! build the summary). An entry keeps what the summary reads and, for `--format
//! json`, the rest of the record, so that its NDJSON is written when the trace is
//! printed (on the render threads), by the writer `raylog parse` uses. What a file's
//! records share (the file's classification, the ids of a run of records) is shared,
//! not copied: fresh pages were the largest cost of collecting a large trace, and a
//! JSON body kept per entry (630 bytes, mostly ids and the file's members again) was
//! most of them.

use std::sync::Arc;

use raylog_parsers::ndjson::write_record;
use raylog_parsers::record::{FieldValue, Fields, Ids};
use raylog_parsers::{FileMeta, Level, Record, Timestamp};

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
    /// The file's classification (component, path, session…), shared by the
    /// entries of one file.
    meta: Arc<FileMeta>,
    /// The worker whose own file this is (worker stdout/stderr, core-worker log).
    pub file_worker: bool,
    pub offset: u64,
    /// Physical lines of the record.
    lines: u32,
    /// A line was cut at `max_line_bytes`.
    truncated: bool,
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
    /// The record's `fields` pairs (JSON output only; `None` when it has none).
    pairs: Option<Box<Pairs>>,
    /// Made for JSON output.
    json: bool,
}

/// A record's `fields` pairs, owned: keys and values one after the other in `text`.
#[derive(Clone, Debug)]
struct Pairs {
    text: String,
    /// Each pair's key end, value end (in `text`) and whether the value is JSON.
    ends: Vec<(u32, u32, bool)>,
}

impl Pairs {
    fn of(fields: &Fields<'_>) -> Option<Box<Pairs>> {
        if fields.is_empty() {
            return None;
        }
        let mut p = Pairs { text: String::new(), ends: Vec::new() };
        for f in fields.iter() {
            let (v, json) = match f.value {
                FieldValue::Str(v) => (v, false),
                FieldValue::Json(v) => (v, true),
            };
            p.text.push_str(f.key);
            let key_end = p.text.len() as u32;
            p.text.push_str(v);
            p.ends.push((key_end, p.text.len() as u32, json));
        }
        Some(Box::new(p))
    }

    /// The pairs as the parser gave them, in their order.
    fn fields(&self) -> Fields<'_> {
        let mut fields = Fields::default();
        let mut start = 0;
        for &(key_end, end, json) in &self.ends {
            let (k, v) = (&self.text[start..key_end as usize], &self.text[key_end as usize..end as usize]);
            fields.push(k, if json { FieldValue::Json(v) } else { FieldValue::Str(v) });
            start = end as usize;
        }
        fields
    }
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

impl Entry {
    /// Copies what the trace needs out of `r`; with `json` (the trace is printed as
    /// JSON) its `fields` pairs too, else [`Entry::write_json`] must not be called.
    /// `meta` and `ids` are `r`'s file and ids, shared ([`Entry::ids`]).
    pub fn from_record(r: &Record<'_>, seq: u64, json: bool, meta: Arc<FileMeta>, ids: Arc<Ids>) -> Entry {
        debug_assert_eq!(*ids, *r.ids);
        debug_assert!(*meta == *r.file);
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
            meta,
            file_worker: r.file.worker_id.is_some() && r.ids.worker_id == r.file.worker_id,
            offset: r.offset,
            lines: r.lines,
            truncated: r.truncated,
            ids,
            pid: r.pid,
            task_name: r.task_name.map(str::to_string),
            actor_name: r.actor_name.map(str::to_string),
            label: r.fields.get("label").map(field_text),
            event_data,
            context: false,
            seq,
            pairs: if json { Pairs::of(r.fields) } else { None },
            json,
        }
    }

    /// The schema's `component`.
    pub fn component(&self) -> &str {
        &self.meta.component
    }

    /// The file, relative to its logs dir.
    pub fn file(&self) -> &str {
        &self.meta.rel_path
    }

    pub fn session(&self) -> Option<&str> {
        self.meta.session.as_deref()
    }

    /// The Jobs API submission id its file names.
    pub fn submission_id(&self) -> Option<&str> {
        self.meta.submission_id.as_deref()
    }

    /// The worker the record is about: its `worker_id`, else one its text names.
    pub fn worker(&self) -> Option<raylog_parsers::Id> {
        self.ids.worker_id.or_else(|| super::facts::worker_in_text(self.component(), &self.message))
    }

    /// ERROR or FATAL.
    pub fn is_error(&self) -> bool {
        self.level.is_some_and(|l| l >= Level::Error)
    }

    /// A file of the worker process itself (not a driver's): its stdout/stderr or
    /// its core-worker log.
    pub fn in_worker_file(&self) -> bool {
        self.file_worker && matches!(self.component(), "worker" | "core_worker")
    }

    /// Appends the record as one JSON object (no newline): its NDJSON line, as
    /// `raylog parse` writes it, plus `context` when it applies.
    pub fn write_json(&self, out: &mut String) {
        debug_assert!(self.json, "an entry made without its JSON is written as JSON");
        let fields = self.pairs.as_ref().map(|p| p.fields()).unwrap_or_default();
        let r = Record {
            timestamp: self.timestamp,
            timestamp_inferred: self.inferred,
            timestamp_estimated: self.estimated,
            level: self.level,
            message: &self.message,
            file: &self.meta,
            offset: self.offset,
            lines: self.lines,
            ids: &self.ids,
            pid: self.pid,
            task_name: self.task_name.as_deref(),
            actor_name: self.actor_name.as_deref(),
            fields: &fields,
            truncated: self.truncated,
            task_pending: false,
            at: Default::default(),
        };
        // SAFETY: the record writer appends only whole `&str`s of the record and ASCII,
        // so `out` stays UTF-8.
        let v = unsafe { out.as_mut_vec() };
        write_record(v, &r);
        v.pop(); // its newline
        if self.context {
            v.pop(); // the closing brace
            v.extend_from_slice(b",\"context\":true}");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use raylog_parsers::ndjson::write_record;
    use raylog_parsers::Options;

    use super::*;
    use crate::discover::discover;
    use crate::scan::{scan, ScanConfig};

    /// An entry's JSON is its record's NDJSON line, byte for byte, for every record of
    /// every fixture (pairs as text and as JSON, inferred times, lines cut short), and
    /// a context entry's is the same object with `"context":true` last.
    #[test]
    fn json_is_the_records_ndjson_line() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let disc = discover(&[root]);
        let (mut n, mut with_pairs, mut json_pairs, mut inferred, mut cut) = (0, 0, 0, 0, 0);
        let (mut line, mut got) = (Vec::new(), String::new());
        // Once as parsed by default, once with lines cut at 100 bytes.
        for max_line_bytes in [Options::default().max_line_bytes, 100] {
            let opts = Options { max_line_bytes, ..Options::default() };
            let cfg = ScanConfig { opts, stdin_name: None, fixed_mtime: None, threads: 1 };
            scan(&disc, &cfg, &mut |_| {}, &mut |r| {
                line.clear();
                write_record(&mut line, r);
                let mut e = Entry::from_record(r, 0, true, Arc::new(r.file.clone()), Arc::new(*r.ids));
                got.clear();
                e.write_json(&mut got);
                assert_eq!(got.as_bytes(), &line[..line.len() - 1], "{} at {}", r.file.rel_path, r.offset);
                e.context = true;
                got.clear();
                e.write_json(&mut got);
                let object = std::str::from_utf8(&line[..line.len() - 2]).expect("UTF-8");
                assert_eq!(got, format!("{object},\"context\":true}}"));
                n += 1;
                with_pairs += !r.fields.is_empty() as usize;
                json_pairs += r.fields.iter().any(|f| matches!(f.value, FieldValue::Json(_))) as usize;
                inferred += r.timestamp_inferred as usize;
                cut += r.truncated as usize;
            });
        }
        let counts = format!("{n} records, {with_pairs} with pairs, {json_pairs} JSON, {inferred} inferred, {cut} cut");
        assert!(n > 1000 && with_pairs > 100 && json_pairs > 10 && inferred > 10 && cut > 100, "{counts}");
    }
}
