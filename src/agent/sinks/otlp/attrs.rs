//! The mapping of a record onto OTLP: its severity and its attributes, in the
//! order both encoders write them. One table, so the protobuf and the JSON bodies
//! cannot drift apart; the tables of docs/otlp.md are this file.
//!
//! Semantic-convention names where one exists (`process.pid`, `log.file.name`,
//! `log.iostream`, `code.filepath`/`code.lineno`, `log.record.uid`), `ray.*` for
//! the rest. The parser's extra pairs (the record's `fields`) go under `ray.<key>`
//! with their JSON types kept, except a C++ `source` (`file.cc:N`), which becomes
//! `code.filepath` and `code.lineno`. Events also get `ray.event_type` (an export
//! event's `source_type`, an event's `label`) and `ray.state` (an export event's
//! `event_data.state`), so every kind of event is found by the same two keys.

use raylog_parsers::json::{self, Value};
use raylog_parsers::record::{FieldValue, Level};

use crate::agent::batch::{Batch, BatchRecord, IdField, Span};
use crate::agent::sinks::loki::encode::entry_time;

/// `severity_number` of the OpenTelemetry log data model for Ray's level.
pub fn severity_number(l: Level) -> u8 {
    match l {
        Level::Trace => 1,
        Level::Debug => 5,
        Level::Info => 9,
        Level::Warning => 13,
        Level::Error => 17,
        Level::Fatal => 21,
    }
}

/// `time_unix_nano` of `e`: the Loki sink's entry time (an offset below the time's
/// own precision, see [`entry_time`]), and for a time already in nanoseconds an
/// offset under a microsecond. Loki's `/otlp` puts all of a node's files in one
/// stream and stores entries alike in time and line once: Ray writes the job
/// supervisor's lines, with one nanosecond time, to two files.
pub fn record_time(e: &BatchRecord) -> u64 {
    let t = entry_time(e);
    let t = if t == e.timestamp_ns && !e.inferred {
        let x = ((e.doc_id >> 64) as u64 ^ e.doc_id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
        t.saturating_add((x % 1000) as i64)
    } else {
        t
    };
    t.max(0) as u64
}

/// An attribute's name: a prefix and the rest, so `ray.<field>` is never built.
#[derive(Clone, Copy, Debug)]
pub struct Key<'a>(pub &'static str, pub &'a str);

impl Key<'_> {
    pub fn len(&self) -> usize {
        self.0.len() + self.1.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.0.as_bytes());
        out.extend_from_slice(self.1.as_bytes());
    }
}

/// An attribute's value.
#[derive(Clone, Copy, Debug)]
pub enum Val<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
    /// 32 lowercase hex digits.
    Hex128(u128),
    /// A parser field's raw JSON (an escaped string, a number, an object…).
    Json(Value<'a>),
}

const ID_KEYS: [&str; 5] = ["ray.node_id", "ray.job_id", "ray.worker_id", "ray.actor_id", "ray.task_id"];

/// Calls `f` for each attribute of `e`, in a fixed order; absent values are skipped.
///
/// What stays the same from one record of a file to the next comes first, in
/// [`RUNS`] runs ([`each_in_run`]): the file, its stream and pid; then each id with
/// its name (the ids of a Ray process's own logs change from line to line, each at
/// its own pace); then what changes every record (its id, then [`each_of_record`]). The protobuf
/// encoder sends a run that says the same as in the last record of the same file as
/// a repeat of it (see `encode::repeats`).
pub fn each<'b>(batch: &'b Batch, e: &BatchRecord, f: &mut impl FnMut(Key<'b>, Val<'b>)) {
    for run in 0..RUNS {
        each_in_run(run, batch, e, f);
    }
    f(Key(UID_KEY, ""), Val::Hex128(e.doc_id));
    each_of_record(batch, e, f);
}

/// The attribute after the runs: the record's id, whose key and framing the
/// protobuf encoder sends with the runs (the id is 32 hex digits in every record).
pub const UID_KEY: &str = "log.record.uid";

/// Runs of attributes that [`each_in_run`] writes and [`same_in_run`] compares.
pub const RUNS: usize = 6;

/// The attributes of run `run` of `e`: the file (0), the node (1), worker (2), job
/// (3), actor (4) and task (5). They depend only on the fields of `e` that
/// [`same_in_run`] compares.
pub fn each_in_run<'b>(run: usize, batch: &'b Batch, e: &BatchRecord, f: &mut impl FnMut(Key<'b>, Val<'b>)) {
    let mut id = |field: IdField| {
        if let Some(v) = batch.id(e, field) {
            f(Key(ID_KEYS[field as usize], ""), Val::Str(v));
        }
    };
    match run {
        0 => each_of_file(batch, e, f),
        1 => id(IdField::Node),
        2 => id(IdField::Worker),
        3 => {
            id(IdField::Job);
            text(batch, "ray.submission_id", e.submission_id, f);
        }
        4 => {
            id(IdField::Actor);
            text(batch, "ray.actor_name", e.actor_name, f);
        }
        _ => {
            id(IdField::Task);
            if let Some(a) = e.task_attempt {
                f(Key("ray.task_attempt", ""), Val::Int(a as i64));
            }
            text(batch, "ray.task_name", e.task_name, f);
        }
    }
}

/// Whether [`each_in_run`] says the same of `x` and `y` for run `run`.
pub fn same_in_run(run: usize, batch: &Batch, x: &BatchRecord, y: &BatchRecord) -> bool {
    let same = |a: Span, b: Span| a == b || batch.str(a) == batch.str(b);
    let id = |field: IdField| same(x.ids[field as usize], y.ids[field as usize]);
    match run {
        0 => {
            x.pid == y.pid
                && x.stream == y.stream
                && same(x.file, y.file)
                && same(x.path, y.path)
                && same(x.component, y.component)
                && same(x.session, y.session)
        }
        1 => id(IdField::Node),
        2 => id(IdField::Worker),
        3 => id(IdField::Job) && same(x.submission_id, y.submission_id),
        4 => id(IdField::Actor) && same(x.actor_name, y.actor_name),
        _ => id(IdField::Task) && x.task_attempt == y.task_attempt && same(x.task_name, y.task_name),
    }
}

fn text<'b>(batch: &'b Batch, k: &'static str, s: Span, f: &mut impl FnMut(Key<'b>, Val<'b>)) {
    let s = batch.str(s);
    if !s.is_empty() {
        f(Key(k, ""), Val::Str(s));
    }
}

/// The attributes of the file and the process writing it.
fn each_of_file<'b>(batch: &'b Batch, e: &BatchRecord, f: &mut impl FnMut(Key<'b>, Val<'b>)) {
    text(batch, "ray.component", e.component, f);
    text(batch, "ray.session", e.session, f);
    let file = batch.str(e.file);
    if !file.is_empty() {
        f(Key("log.file.name", ""), Val::Str(file.rsplit('/').next().unwrap_or(file)));
        let path = batch.str(e.path);
        if !path.is_empty() {
            f(Key("log.file.path", ""), Val::Str(path));
        }
        f(Key("ray.file", ""), Val::Str(file));
    }
    if let Some(s) = e.stream {
        f(Key("log.iostream", ""), Val::Str(s.as_str()));
    }
    if let Some(pid) = e.pid {
        f(Key("process.pid", ""), Val::Int(pid as i64));
    }
}

/// The attributes of the record itself after its id ([`UID_KEY`]): its place, flags
/// and the parser's pairs.
pub fn each_of_record<'b>(batch: &'b Batch, e: &BatchRecord, f: &mut impl FnMut(Key<'b>, Val<'b>)) {
    if !e.file.is_empty() {
        f(Key("ray.offset", ""), Val::Int(e.offset.min(i64::MAX as u64) as i64));
    }
    if e.inferred {
        f(Key("ray.timestamp_inferred", ""), Val::Bool(true));
    }
    if e.estimated {
        f(Key("ray.timestamp_estimated", ""), Val::Bool(true));
    }
    if e.truncated {
        f(Key("ray.truncated", ""), Val::Bool(true));
    }
    if !e.extra.is_empty() {
        let sent = |k: &str| taken(batch, e, k);
        extra(batch.pairs_of(e), batch.str(e.component), &sent, f);
    }
}

/// Whether the attribute of record field `k` was sent for `e` (a parser field of
/// that name then goes under `ray.fields.`).
fn taken(batch: &Batch, e: &BatchRecord, k: &str) -> bool {
    let text = |s| !batch.str(s).is_empty();
    match k {
        "component" => text(e.component),
        "session" => text(e.session),
        "submission_id" => text(e.submission_id),
        "task_name" => text(e.task_name),
        "actor_name" => text(e.actor_name),
        "file" | "offset" => text(e.file),
        "timestamp_inferred" => e.inferred,
        "timestamp_estimated" => e.estimated,
        "truncated" => e.truncated,
        "task_attempt" => e.task_attempt.is_some(),
        _ => IdField::ALL.iter().any(|&id| id.name() == k && batch.id(e, id).is_some()),
    }
}

/// The parser's pairs (`fields`): `ray.<key>`, `code.*` from `source`, and the
/// event keys.
fn extra<'b>(
    fields: impl Iterator<Item = (&'b str, FieldValue<'b>)>,
    component: &str,
    taken: &dyn Fn(&str) -> bool,
    f: &mut impl FnMut(Key<'b>, Val<'b>),
) {
    let (mut has_type, mut has_state) = (false, false);
    let (mut event_type, mut state) = (None, None);
    // One pass: the event keys go after every pair, so what the pairs say of them
    // is known by then.
    for (k, v) in fields {
        let v = field_val(v);
        match (k, v) {
            ("event_type", _) => has_type = true,
            ("state", _) => has_state = true,
            ("source_type", _) if component == "export_event" => event_type = Some(v),
            ("label", _) if component == "event" => event_type = Some(v),
            ("event_data", Val::Json(data)) => state = nested_member(data, "state"),
            ("source", _) => {
                if let Some((file, line)) = plain_str(v).and_then(code_location) {
                    f(Key("code.filepath", ""), Val::Str(file));
                    f(Key("code.lineno", ""), Val::Int(line));
                    continue;
                }
            }
            _ => {}
        }
        // A field named like an attribute above (a `node_id` caught in prose) would
        // repeat its key, which OTLP forbids: it goes under `ray.fields.`.
        let prefix = if taken(k) { "ray.fields." } else { "ray." };
        f(Key(prefix, k), v);
    }
    if let Some(v) = event_type.filter(|_| !has_type) {
        f(Key("ray.event_type", ""), v);
    }
    if let Some(v) = state.filter(|_| !has_state) {
        f(Key("ray.state", ""), Val::Json(v));
    }
}

/// A parser field's value as an attribute's: text as it is, JSON as the value it
/// is (a Python bare word, `NaN`, as text).
fn field_val(v: FieldValue<'_>) -> Val<'_> {
    match v {
        FieldValue::Str(s) => Val::Str(s),
        FieldValue::Json(j @ ("NaN" | "Infinity" | "-Infinity")) => Val::Str(j),
        FieldValue::Json(j) => Val::Json(element(j)),
    }
}

/// A JSON value's raw text (an array element, a parser field's JSON) as a [`Value`].
pub fn element(el: &str) -> Value<'_> {
    if el.starts_with('"') {
        Value::Str(el, el.contains('\\'))
    } else {
        Value::Raw(el)
    }
}

/// The text of a value that is text with no escapes.
fn plain_str(v: Val<'_>) -> Option<&str> {
    match v {
        Val::Str(s) => Some(s),
        Val::Json(j) => j.plain_str(),
        _ => None,
    }
}

/// The member `name` of a JSON object value.
fn nested_member<'b>(v: Value<'b>, name: &str) -> Option<Value<'b>> {
    let Value::Raw(obj) = v else { return None };
    let mut found = None;
    json::members(obj, |k, v| {
        if k == name && found.is_none() {
            found = Some(v);
        }
    })
    .ok()?;
    found
}

/// `gcs_server.cc:1322` → (`gcs_server.cc`, 1322).
pub fn code_location(s: &str) -> Option<(&str, i64)> {
    let (file, line) = s.rsplit_once(':')?;
    if file.is_empty() || line.is_empty() || line.len() > 9 || !line.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((file, line.parse().ok()?))
}

/// What a raw JSON scalar is, for both encoders.
pub enum Scalar {
    Int(i64),
    Double(f64),
    Bool(bool),
    Null,
    /// Anything else (a number too large for either, a Python `NaN`): sent as text.
    Text,
}

/// Reads a raw JSON value that is not a string, object or array.
pub fn scalar(raw: &str) -> Scalar {
    match raw {
        "true" => Scalar::Bool(true),
        "false" => Scalar::Bool(false),
        "null" => Scalar::Null,
        _ if !raw.contains(['.', 'e', 'E']) => raw.parse().map_or(Scalar::Text, Scalar::Int),
        _ => raw.parse::<f64>().ok().filter(|d| d.is_finite()).map_or(Scalar::Text, Scalar::Double),
    }
}

/// Nested JSON deeper than this is sent as its JSON text.
pub const MAX_DEPTH: u32 = 16;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn code_locations() {
        assert_eq!(code_location("gcs_server.cc:1322"), Some(("gcs_server.cc", 1322)));
        assert_eq!(code_location("worker.py:12"), Some(("worker.py", 12)));
        for bad in ["x.cc", ":12", "x.cc:", "x.cc:1a", "x.cc:12345678901"] {
            assert_eq!(code_location(bad), None, "{bad}");
        }
    }

    #[test]
    fn scalars() {
        assert!(matches!(scalar("12"), Scalar::Int(12)));
        assert!(matches!(scalar("-3"), Scalar::Int(-3)));
        assert!(matches!(scalar("1.5"), Scalar::Double(d) if d == 1.5));
        assert!(matches!(scalar("1e3"), Scalar::Double(d) if d == 1000.0));
        assert!(matches!(scalar("99999999999999999999"), Scalar::Text));
        assert!(matches!(scalar("true"), Scalar::Bool(true)));
        assert!(matches!(scalar("null"), Scalar::Null));
        assert!(matches!(scalar("NaN"), Scalar::Text));
    }

    #[test]
    fn event_keys_come_from_each_kind_of_event() {
        let mut got = Vec::new();
        let mut f = |k: Key<'_>, v: Val<'_>| got.push(format!("{}{}={}", k.0, k.1, render(v)));
        extra(
            fields(r#"{"event_id":"e1","source_type":"EXPORT_ACTOR","event_data":{"state":"ALIVE","pid":5}}"#),
            "export_event",
            &|_| false,
            &mut f,
        );
        extra(fields(r#"{"label":"RAY_WORKER_FAILURE","source":"RAYLET"}"#), "event", &|_| false, &mut f);
        extra(
            fields(r#"{"event_type":"TASK","state":"RUNNING","source":"node_manager.cc:77"}"#),
            "ray_event",
            &|_| false,
            &mut f,
        );
        assert_eq!(
            got,
            [
                "ray.event_id=e1",
                "ray.source_type=EXPORT_ACTOR",
                "ray.event_data={\"state\":\"ALIVE\",\"pid\":5}",
                "ray.event_type=EXPORT_ACTOR",
                "ray.state=\"ALIVE\"",
                "ray.label=RAY_WORKER_FAILURE",
                "ray.source=RAYLET",
                "ray.event_type=RAY_WORKER_FAILURE",
                "ray.event_type=TASK",
                "ray.state=RUNNING",
                "code.filepath=node_manager.cc",
                "code.lineno=77",
            ]
        );
    }

    #[test]
    fn a_field_named_like_a_sent_attribute_goes_under_ray_fields() {
        let mut got = Vec::new();
        let mut f = |k: Key<'_>, v: Val<'_>| got.push(format!("{}{}={}", k.0, k.1, render(v)));
        let fields = r#"{"node_id":"'3a29')","job_id":"x"}"#;
        extra(super::tests::fields(fields), "ray_client_server", &|k| k == "node_id", &mut f);
        assert_eq!(got, ["ray.fields.node_id='3a29')", "ray.job_id=x"]);
    }

    /// A JSON object's members as the parser's fields of a record.
    pub(super) fn fields(json: &str) -> std::vec::IntoIter<(&str, FieldValue<'_>)> {
        let mut v = vec![];
        json::members(json, |k, val| v.push((k, val.to_field()))).unwrap();
        v.into_iter()
    }

    fn render(v: Val<'_>) -> String {
        match v {
            Val::Str(s) => s.to_string(),
            Val::Int(i) => i.to_string(),
            Val::Bool(b) => b.to_string(),
            Val::Hex128(h) => format!("{h:032x}"),
            Val::Json(j) => j.raw().to_string(),
        }
    }
}
