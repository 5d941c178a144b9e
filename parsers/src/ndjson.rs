//! Writes a [`Record`] as one line of JSON (the record schema of docs/records.md).
//!
//! Hand-written rather than derived with serde because it runs once per record on
//! the hot path: fields are appended straight into a reused `Vec<u8>`, absent fields
//! are omitted (never `null`), and escaping copies runs of safe bytes at once.

use crate::id::Id;
pub use crate::json_str::write_str;
use crate::record::{FieldValue, Fields, Level, Record};

/// Separates a member from the previous one unless it is the object's first.
#[inline]
fn sep(out: &mut Vec<u8>) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
}

/// Writes `key` (the member's `,"name":"` prefix, as one literal) and the id.
#[inline]
fn id(out: &mut Vec<u8>, key: &[u8], v: &Option<Id>) {
    if let Some(v) = v {
        out.extend_from_slice(key);
        v.write_to(out);
        out.push(b'"');
    }
}

/// Writes `key` (the member's `,"name":` prefix) and the string.
#[inline]
fn opt_str(out: &mut Vec<u8>, key: &[u8], v: Option<&str>) {
    if let Some(v) = v {
        out.extend_from_slice(key);
        write_str(out, v);
    }
}

#[inline]
fn num(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// The whole `"level":"…"` member: levels never need escaping.
fn level_member(l: Level) -> &'static [u8] {
    match l {
        Level::Trace => b"\"level\":\"TRACE\"",
        Level::Debug => b"\"level\":\"DEBUG\"",
        Level::Info => b"\"level\":\"INFO\"",
        Level::Warning => b"\"level\":\"WARNING\"",
        Level::Error => b"\"level\":\"ERROR\"",
        Level::Fatal => b"\"level\":\"FATAL\"",
    }
}

/// Appends `rec` as a JSON object followed by `\n`.
///
/// Member names are written as literals together with their separators: this runs
/// once per record and the output is larger than the input, so every push counts.
pub fn write_record(out: &mut Vec<u8>, rec: &Record<'_>) {
    write_record_pieces(out, rec);
}

/// Where [`write_record_pieces`] put the members a bulk encoder cuts a document at,
/// as offsets from the object's `{`: what the writer knows, so nobody searches for
/// them (Elasticsearch's gzip, `raylog::agent::sinks::elasticsearch::runs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pieces {
    /// `"component":`, the file's members after the message.
    pub members: u32,
    /// The offset's digits (after `,"offset":`).
    pub digits: u32,
    /// After them: the ids, pid and names.
    pub ids: u32,
    /// `,"fields":` or `,"truncated":`, else the closing `}`.
    pub fields: u32,
}

/// [`write_record`], saying where its pieces are.
#[inline]
pub fn write_record_pieces(out: &mut Vec<u8>, rec: &Record<'_>) -> Pieces {
    let start = out.len();
    let at = |out: &Vec<u8>| (out.len() - start) as u32;
    out.push(b'{');
    if let Some(t) = rec.timestamp {
        out.extend_from_slice(b"\"timestamp\":\"");
        t.write_rfc3339(out);
        out.push(b'"');
    }
    if rec.timestamp_inferred {
        out.extend_from_slice(b",\"timestamp_inferred\":true");
    }
    if rec.timestamp_estimated {
        out.extend_from_slice(b",\"timestamp_estimated\":true");
    }
    if let Some(l) = rec.level {
        sep(out);
        out.extend_from_slice(level_member(l));
    }
    sep(out);
    out.extend_from_slice(b"\"message\":");
    write_str(out, rec.message);
    out.push(b',');
    let members = at(out);
    out.extend_from_slice(rec.file.json_members());
    out.extend_from_slice(b",\"offset\":");
    let digits = at(out);
    num(out, rec.offset);
    let after = at(out);
    let ids = rec.ids;
    id(out, b",\"node_id\":\"", &ids.node_id);
    id(out, b",\"job_id\":\"", &ids.job_id);
    id(out, b",\"worker_id\":\"", &ids.worker_id);
    id(out, b",\"actor_id\":\"", &ids.actor_id);
    id(out, b",\"task_id\":\"", &ids.task_id);
    if let Some(a) = ids.task_attempt {
        out.extend_from_slice(b",\"task_attempt\":");
        num(out, a as u64);
    }
    if let Some(p) = rec.pid {
        out.extend_from_slice(b",\"pid\":");
        num(out, p as u64);
    }
    opt_str(out, b",\"task_name\":", rec.task_name);
    opt_str(out, b",\"actor_name\":", rec.actor_name);
    let fields = at(out);
    if !rec.fields.is_empty() {
        write_fields(out, rec.fields);
    }
    if rec.truncated {
        out.extend_from_slice(b",\"truncated\":true");
    }
    out.extend_from_slice(b"}\n");
    Pieces { members, digits, ids: after, fields }
}

/// The `,"fields":{…}` member.
fn write_fields(out: &mut Vec<u8>, fields: &Fields<'_>) {
    out.extend_from_slice(b",\"fields\":");
    write_fields_object(out, fields);
}

/// The record's `fields` as one JSON object (`{}` when there are none).
pub fn write_fields_object(out: &mut Vec<u8>, fields: &Fields<'_>) {
    write_pairs_object(out, fields.iter().map(|f| (f.key, f.value)));
}

/// Key/value pairs as one JSON object (`{}` when there are none): text escaped,
/// JSON values as they are.
pub fn write_pairs_object<'a>(out: &mut Vec<u8>, pairs: impl IntoIterator<Item = (&'a str, FieldValue<'a>)>) {
    let mut open = b'{';
    for (key, value) in pairs {
        out.push(open);
        open = b',';
        write_str(out, key);
        out.push(b':');
        match value {
            FieldValue::Str(s) => write_str(out, s),
            FieldValue::Json(j) => out.extend_from_slice(j.as_bytes()),
        }
    }
    if open == b'{' {
        out.push(b'{');
    }
    out.push(b'}');
}
