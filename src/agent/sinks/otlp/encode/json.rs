//! The OTLP/JSON body: the same request as the protobuf one, in the protobuf JSON
//! mapping OTLP prescribes (lowerCamelCase names, `int64`/`fixed64` as decimal
//! strings, enums as numbers, ids as hex).

use raylog_parsers::json::Value;
use raylog_parsers::ndjson::write_str;

use super::{hex128, OtlpEncoder, SCOPE_NAME, SCOPE_VERSION};
use crate::agent::batch::{Batch, BatchRecord, IdField};
use crate::agent::sinks::otlp::attrs::{self, element, Key, Scalar, Val, MAX_DEPTH};
use crate::agent::traces::span::{hex_into, record_ids};

impl OtlpEncoder {
    /// The request as JSON, with the first entries of `sel` that fit in `limit`
    /// bytes (at least one); returns how many.
    pub(super) fn write_json(&mut self, out: &mut Vec<u8>, batch: &Batch, sel: &[u32], limit: usize) -> usize {
        out.extend_from_slice(b"{\"resourceLogs\":[{\"resource\":{\"attributes\":[");
        for (i, (k, v)) in self.resource(&batch.node).into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            json_attr(out, Key("", k), Val::Str(v), 0);
        }
        out.extend_from_slice(b"]},\"scopeLogs\":[{\"scope\":{\"name\":");
        write_str(out, SCOPE_NAME);
        out.extend_from_slice(b",\"version\":");
        write_str(out, SCOPE_VERSION);
        out.extend_from_slice(b"},\"logRecords\":[");
        const TAIL: &[u8] = b"]}]}]}";
        let (mut taken, mut written) = (0, false);
        for &i in sel {
            if let Some(e) = batch.entries.get(i as usize) {
                let at = out.len();
                if written {
                    out.push(b',');
                }
                json_record(out, batch, e);
                if written && out.len() + TAIL.len() > limit {
                    out.truncate(at);
                    break;
                }
                written = true;
            }
            taken += 1;
        }
        out.extend_from_slice(TAIL);
        taken
    }
}

/// One `LogRecord`: the hot path (numbers through a stack buffer, not a `String`).
fn json_record(out: &mut Vec<u8>, batch: &Batch, e: &BatchRecord) {
    out.extend_from_slice(b"{\"timeUnixNano\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(attrs::record_time(e)).as_bytes());
    out.extend_from_slice(b"\",\"observedTimeUnixNano\":\"");
    out.extend_from_slice(itoa::Buffer::new().format(e.observed_ns.max(0)).as_bytes());
    out.push(b'"');
    if let Some(l) = e.level {
        out.extend_from_slice(b",\"severityNumber\":");
        out.extend_from_slice(itoa::Buffer::new().format(attrs::severity_number(l)).as_bytes());
        out.extend_from_slice(b",\"severityText\":");
        write_str(out, l.as_str());
    }
    if let Some((trace, span)) = batch.id(e, IdField::Task).zip(e.task_attempt).map(|(t, a)| record_ids(t, a)) {
        // OTLP/JSON writes these two ids as hex, not base64.
        let mut hex = [0u8; 32];
        out.extend_from_slice(b",\"traceId\":\"");
        out.extend_from_slice(hex_into(&trace, &mut hex).as_bytes());
        out.extend_from_slice(b"\",\"spanId\":\"");
        out.extend_from_slice(hex_into(&span, &mut hex).as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b",\"body\":{\"stringValue\":");
    write_str(out, batch.str(e.message));
    out.extend_from_slice(b"},\"attributes\":[");
    let mut first = true;
    attrs::each(batch, e, &mut |k, v| {
        if !std::mem::take(&mut first) {
            out.push(b',');
        }
        json_attr(out, k, v, 0);
    });
    out.extend_from_slice(b"]}");
}

/// `{"key":…,"value":{…}}`.
fn json_attr(out: &mut Vec<u8>, k: Key<'_>, v: Val<'_>, depth: u32) {
    out.extend_from_slice(b"{\"key\":");
    // The prefix is ours (nothing to escape); the rest may be any field name.
    let at = out.len() + 1;
    write_str(out, k.1);
    out.splice(at..at, k.0.bytes());
    out.extend_from_slice(b",\"value\":");
    json_any(out, v, depth);
    out.push(b'}');
}

/// An `AnyValue` object.
fn json_any(out: &mut Vec<u8>, v: Val<'_>, depth: u32) {
    match v {
        Val::Str(s) => {
            out.extend_from_slice(b"{\"stringValue\":");
            write_str(out, s);
            out.push(b'}');
        }
        Val::Bool(b) => out.extend_from_slice(if b { b"{\"boolValue\":true}" } else { b"{\"boolValue\":false}" }),
        Val::Int(i) => {
            out.extend_from_slice(b"{\"intValue\":\"");
            out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
            out.extend_from_slice(b"\"}");
        }
        Val::Hex128(h) => json_any(out, Val::Str(hex128(&mut [0; 32], h)), depth),
        Val::Json(j) => json_json(out, j, depth),
    }
}

fn json_json(out: &mut Vec<u8>, j: Value<'_>, depth: u32) {
    match j {
        Value::Str(s, false) => json_any(out, Val::Str(&s[1..s.len() - 1]), depth),
        Value::Str(s, true) => {
            // Already valid JSON string text: copied as is.
            out.extend_from_slice(b"{\"stringValue\":");
            out.extend_from_slice(s.as_bytes());
            out.push(b'}');
        }
        Value::Bare(s) => json_any(out, Val::Str(s), depth),
        Value::Raw(r) if depth < MAX_DEPTH && r.starts_with('{') => {
            out.extend_from_slice(b"{\"kvlistValue\":{\"values\":[");
            let mut first = true;
            let _ = raylog_parsers::json::members(r, |k, v| {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                json_attr(out, Key("", k), Val::Json(v), depth + 1);
            });
            out.extend_from_slice(b"]}}");
        }
        Value::Raw(r) if depth < MAX_DEPTH && r.starts_with('[') => {
            out.extend_from_slice(b"{\"arrayValue\":{\"values\":[");
            let mut first = true;
            let _ = raylog_parsers::json::elements(r, |el| {
                if !std::mem::take(&mut first) {
                    out.push(b',');
                }
                json_json(out, element(el), depth + 1);
            });
            out.extend_from_slice(b"]}}");
        }
        Value::Raw(r) => match attrs::scalar(r) {
            Scalar::Int(i) => json_any(out, Val::Int(i), depth),
            Scalar::Bool(b) => json_any(out, Val::Bool(b), depth),
            Scalar::Double(_) => {
                out.extend_from_slice(b"{\"doubleValue\":");
                out.extend_from_slice(r.as_bytes());
                out.push(b'}');
            }
            Scalar::Null => out.extend_from_slice(b"{}"),
            Scalar::Text => json_any(out, Val::Str(r), depth),
        },
    }
}
