//! Encodes a batch as one OTLP `ExportLogsServiceRequest`: one `ResourceLogs` (the
//! agent's identity), one `ScopeLogs` (`raylog` and its version), one `LogRecord`
//! per record, in the batch's order.
//!
//! The protobuf is written by hand from `opentelemetry/proto/logs/v1/logs.proto`,
//! `common/v1/common.proto` and `collector/logs/v1/logs_service.proto` (OTLP 1.x),
//! with the wire helpers the Loki sink uses ([`crate::agent::sinks::pb`]): the sink
//! only ever writes these few messages, and a generated-code dependency (prost and
//! its build script, or the `opentelemetry-proto` crate with tonic) would cost more
//! build time than the whole encoder is lines. The JSON form ([`json`]) follows the
//! OTLP/JSON rules: lowerCamelCase names, 64-bit integers as strings, enums as
//! numbers.
//!
//! Field numbers used:
//! - `ExportLogsServiceRequest.resource_logs` 1; `ResourceLogs.resource` 1,
//!   `.scope_logs` 2; `Resource.attributes` 1; `ScopeLogs.scope` 1, `.log_records` 2;
//!   `InstrumentationScope.name` 1, `.version` 2.
//! - `LogRecord`, in the order written: `attributes` 6, `time_unix_nano` 1
//!   (fixed64), `severity_number` 2, `severity_text` 3, `body` 5,
//!   `observed_time_unix_nano` 11 (fixed64).
//! - `KeyValue.key` 1, `.value` 2; `AnyValue` oneof: `string_value` 1, `bool_value`
//!   2, `int_value` 3, `double_value` 4, `array_value` 5, `kvlist_value` 6;
//!   `ArrayValue.values` 1, `KeyValueList.values` 1.
//!
//! A `LogRecord`'s attributes are written before its other fields (any order is
//! valid protobuf), so that what a record repeats of the last record of its file
//! sits at a known place: [`Seen`] finds those runs while encoding, and [`gzip`]
//! sends them as deflate matches (the default compression; `compression_level`
//! hands the body to zlib instead).
//!
//! Buffers live in the encoder and are reused; per record nothing is allocated
//! (an escaped string in a parser field is decoded into a reused scratch string).

pub mod gzip;
mod json;

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use raylog_parsers::json::Value;

use super::attrs::{self, Key, Scalar, Val, MAX_DEPTH};
use super::config::{OtlpConfig, OtlpEncoding};
use crate::agent::batch::{Batch, BatchRecord, NodeIdentity, Span};
pub use crate::agent::sinks::elasticsearch::encode::hex128;
use crate::agent::sinks::pb;

/// The scope every record is sent under.
pub const SCOPE_NAME: &str = "raylog";
pub const SCOPE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// One encoded request.
pub struct Request {
    pub body: Vec<u8>,
    /// Bytes before compression.
    pub raw_bytes: usize,
}

/// Reusable request builder.
pub struct OtlpEncoder {
    encoding: OtlpEncoding,
    gzip: bool,
    /// zlib's level, when set; else [`gzip`] with the repeats found while encoding.
    level: Option<u32>,
    /// The repeats of the last request's body (see [`Seen`]).
    seen: Seen,
    /// The configured resource attributes: `service.*` first (`services` of them),
    /// then `resource_attributes`.
    resource: Vec<(String, String)>,
    services: usize,
    raw: Vec<u8>,
    scratch: String,
    /// Size of the last body, to size the next.
    last_len: usize,
}

impl OtlpEncoder {
    pub fn new(cfg: &OtlpConfig) -> OtlpEncoder {
        let mut resource = vec![("service.name".to_string(), cfg.service_name.clone())];
        if let Some(ns) = &cfg.service_namespace {
            resource.push(("service.namespace".into(), ns.clone()));
        }
        let services = resource.len();
        resource.extend(cfg.resource_attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
        OtlpEncoder {
            encoding: cfg.encoding,
            gzip: cfg.gzip,
            level: cfg.compression_level,
            seen: Seen::default(),
            resource,
            services,
            raw: Vec::new(),
            scratch: String::new(),
            last_len: 0,
        }
    }

    /// The resource attributes for records of `node`: `service.name`,
    /// `service.namespace`, `service.instance.id` (the node's name), the node's
    /// cluster and name, the configured extras, then the node's labels. A key set
    /// twice keeps its first value.
    pub fn resource<'a>(&'a self, node: &'a NodeIdentity) -> Vec<(&'a str, &'a str)> {
        let mut out: Vec<(&str, &str)> = Vec::with_capacity(self.resource.len() + 3 + node.labels.len());
        let named = [
            // Loki's `/otlp` indexes this (and not the node's name): one stream per
            // node, as the Loki sink's `node` label makes, not one per cluster.
            ("service.instance.id", node.name.as_str()),
            ("k8s.cluster.name", node.cluster.as_deref().unwrap_or("")),
            ("k8s.node.name", &node.name),
            ("host.name", &node.name),
        ];
        let (service, extras) = self.resource.split_at(self.services);
        let pairs = (service.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .chain(named)
            .chain(extras.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .chain(node.labels.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        for (k, v) in pairs {
            if !v.is_empty() && !out.iter().any(|(have, _)| *have == k) {
                out.push((k, v));
            }
        }
        out
    }

    /// The request for the entries `sel` of `batch`, compressed as configured.
    pub fn encode(&mut self, batch: &Batch, sel: &[u32]) -> std::io::Result<Request> {
        let mut raw = std::mem::take(&mut self.raw);
        raw.clear();
        raw.reserve(self.last_len + self.last_len / 8);
        match self.encoding {
            OtlpEncoding::Protobuf => self.write_protobuf(&mut raw, batch, sel),
            OtlpEncoding::Json => self.write_json(&mut raw, batch, sel),
        }
        let raw_bytes = raw.len();
        self.last_len = raw_bytes;
        // Repeats are found in the protobuf form only: the JSON form, unless a level
        // is set, gets zlib's fastest.
        let level = match self.encoding {
            OtlpEncoding::Protobuf => self.level,
            OtlpEncoding::Json => Some(self.level.unwrap_or(1)),
        };
        let body = match (self.gzip, level) {
            (false, _) => raw,
            (true, Some(level)) => {
                let mut gz = GzEncoder::new(Vec::with_capacity(raw_bytes / 6 + 64), Compression::new(level));
                gz.write_all(&raw)?;
                let body = gz.finish()?;
                self.raw = raw;
                body
            }
            (true, None) => {
                let mut body = Vec::with_capacity(raw_bytes / 3 + 64);
                gzip::write(&raw, &self.seen.copies, &mut body);
                self.raw = raw;
                body
            }
        };
        Ok(Request { body, raw_bytes })
    }

    fn write_protobuf(&mut self, raw: &mut Vec<u8>, batch: &Batch, sel: &[u32]) {
        let mut scratch = std::mem::take(&mut self.scratch);
        let mut seen = std::mem::take(&mut self.seen);
        seen.clear();
        let resource = self.resource(&batch.node);
        // The two outer messages hold nearly the whole request: room for the length
        // the last request needed (3 bytes: up to 2 MiB, 4: up to 256 MiB), so a body
        // of megabytes is not moved to make room twice per request.
        let outer = pb::varint_len(self.last_len as u64).max(3);
        let mut records_end = 0;
        pb::nested(raw, 1, outer, |raw| {
            pb::nested(raw, 1, 2, |raw| {
                for (k, v) in &resource {
                    pb_str_attr(raw, 1, Key("", k), v);
                }
            });
            pb::nested(raw, 2, outer, |raw| {
                pb::nested(raw, 1, 1, |raw| {
                    pb::str_field(raw, 1, SCOPE_NAME.as_bytes());
                    pb::str_field(raw, 2, SCOPE_VERSION.as_bytes());
                });
                for e in sel.iter().filter_map(|&i| batch.entries.get(i as usize)) {
                    pb_record(raw, &mut scratch, batch, e, &mut seen);
                }
                records_end = raw.len();
            });
        });
        // Had an outer length needed more or fewer bytes than guessed, every record
        // moved by as many: nothing is written after the records.
        let moved = raw.len() as isize - records_end as isize;
        for c in &mut seen.copies {
            c.at = c.at.wrapping_add_signed(moved);
        }
        self.seen = seen;
        self.scratch = scratch;
    }
}

/// Where the attributes of the last few records are, to find what each record
/// repeats: each attribute is looked for among those of the last record of the same
/// file (records of a few files take turns in a batch read in time order), in order,
/// allowing for attributes one of the two lacks.
#[derive(Default)]
struct Seen {
    copies: Vec<gzip::Copy>,
    /// (file, where its attributes start, each one's place from there and length).
    recent: [(Span, usize, Attrs); 4],
    next: usize,
    /// The attributes of the record being written, from the start of its body.
    cur: Attrs,
}

/// A record's attributes: each one's place from the first and its length.
type Attrs = Vec<(u32, u32)>;

impl Seen {
    /// Forgets the last request.
    fn clear(&mut self) {
        self.copies.clear();
        self.recent.iter_mut().for_each(|(_, _, list)| list.clear());
        self.cur.clear();
    }

    /// Finds the repeats of the record of `file` whose attributes (listed in `cur`)
    /// start at `at`.
    fn note(&mut self, raw: &[u8], batch: &Batch, file: Span, at: usize) {
        let n = self.recent.len();
        let last = (self.next + n - 1) % n;
        let same = (0..n).map(|i| (last + n - i) % n).find(|&i| {
            let (f, _, list) = &self.recent[i];
            !list.is_empty() && (*f == file || batch.str(*f) == batch.str(file))
        });
        let (_, base, prev) = &self.recent[same.unwrap_or(last)];
        let first = self.copies.len();
        let mut j = 0;
        for &(rel, len) in &self.cur {
            let (s, len) = (at + rel as usize, len as usize);
            let found = (j..prev.len().min(j + 3))
                .find(|&k| prev[k].1 as usize == len && same_bytes(raw, base + prev[k].0 as usize, s, len));
            let Some(k) = found else { continue };
            j = k + 1;
            let dist = s - (base + prev[k].0 as usize);
            if dist > gzip::WINDOW {
                continue;
            }
            match self.copies.last_mut() {
                Some(c) if c.at + c.len == s && c.dist == dist => c.len += len,
                _ => self.copies.push(gzip::Copy { at: s, len, dist }),
            }
        }
        // A short repeat costs more as a match than as literals.
        let mut kept = first;
        for i in first..self.copies.len() {
            if self.copies[i].len >= gzip::MIN_COPY {
                self.copies[kept] = self.copies[i];
                kept += 1;
            }
        }
        self.copies.truncate(kept);
        let slot = same.unwrap_or(self.next);
        if same.is_none() {
            self.next = (self.next + 1) % n;
        }
        let (f, base, list) = &mut self.recent[slot];
        (*f, *base) = (file, at);
        std::mem::swap(list, &mut self.cur);
        self.cur.clear();
    }
}

/// Whether the `len` bytes at `a` and at `b` are the same. Values that differ
/// mostly differ at their end (ids, offsets): that is looked at first.
fn same_bytes(raw: &[u8], a: usize, b: usize, len: usize) -> bool {
    if len >= 8 {
        let tail = |p: usize| u64::from_le_bytes(raw[p + len - 8..p + len].try_into().unwrap());
        if tail(a) != tail(b) {
            return false;
        }
    }
    raw[a..a + len] == raw[b..b + len]
}

/// One `LogRecord` (field 2 of `ScopeLogs`): the hot path. Its attributes come
/// first (protobuf allows any field order), so the run repeated from the record
/// before starts at a known place.
fn pb_record(raw: &mut Vec<u8>, scratch: &mut String, batch: &Batch, e: &BatchRecord, seen: &mut Seen) {
    let start = raw.len();
    // Records of 128 B to 16 KiB take a 2-byte length.
    pb::nested(raw, 2, 2, |raw| {
        let at = raw.len();
        let cur = &mut seen.cur;
        attrs::each(batch, e, &mut |k, v| {
            let s = raw.len();
            pb_attr(raw, scratch, 6, k, v, 0);
            // A record is under 4 GiB: `max_line_bytes` bounds it.
            cur.push(((s - at) as u32, (raw.len() - s) as u32));
        });
        pb::fixed64(raw, 1, attrs::record_time(e));
        if let Some(l) = e.level {
            pb::key(raw, 2, pb::VARINT);
            raw.push(attrs::severity_number(l));
            pb::str_field(raw, 3, l.as_str().as_bytes());
        }
        let msg = batch.str(e.message).as_bytes();
        pb::key(raw, 5, pb::LEN);
        pb::varint(raw, (1 + pb::varint_len(msg.len() as u64) + msg.len()) as u64);
        pb::bytes_always(raw, 1, msg);
        pb::fixed64(raw, 11, e.observed_ns.max(0) as u64);
    });
    // The key byte, then the length: its size is known only now.
    let len_bytes = raw[start + 1..].iter().position(|b| b & 0x80 == 0).map_or(1, |p| p + 1);
    seen.note(raw, batch, e.file, start + 1 + len_bytes);
}

/// A `KeyValue` whose value is a string (sizes known up front: no length to patch).
fn pb_str_attr(raw: &mut Vec<u8>, field: u8, k: Key<'_>, v: &str) {
    let (kl, vl) = (k.len(), v.len());
    // KeyValue = key (2 + kl) + value (2 + AnyValue (2 + vl)): when that is under 128
    // every length is one byte, and the headers are written as two 4-byte runs.
    if kl + vl + 6 < 128 {
        raw.extend_from_slice(&[field << 3 | pb::LEN, (kl + vl + 6) as u8, 1 << 3 | pb::LEN, kl as u8]);
        k.write(raw);
        raw.extend_from_slice(&[2 << 3 | pb::LEN, (vl + 2) as u8, 1 << 3 | pb::LEN, vl as u8]);
        raw.extend_from_slice(v.as_bytes());
        return;
    }
    let any = 1 + pb::varint_len(v.len() as u64) + v.len();
    let kv = 1 + pb::varint_len(k.len() as u64) + k.len() + pb::msg_field_len(any);
    pb::key(raw, field, pb::LEN);
    pb::varint(raw, kv as u64);
    pb::key(raw, 1, pb::LEN);
    pb::varint(raw, k.len() as u64);
    k.write(raw);
    pb::key(raw, 2, pb::LEN);
    pb::varint(raw, any as u64);
    pb::bytes_always(raw, 1, v.as_bytes());
}

/// A `KeyValue` as field `field` of the message being written, `depth` levels down.
fn pb_attr(raw: &mut Vec<u8>, scratch: &mut String, field: u8, k: Key<'_>, v: Val<'_>, depth: u32) {
    match v {
        Val::Str(s) => pb_str_attr(raw, field, k, s),
        Val::Hex128(h) => pb_str_attr(raw, field, k, hex128(&mut [0; 32], h)),
        // An `int_value` or `bool_value`: sizes known too (a varint of at most 10).
        Val::Int(i) if k.len() < SHORT_KEY => pb_varint_attr(raw, field, k, 3, i as u64),
        Val::Bool(b) if k.len() < SHORT_KEY => pb_varint_attr(raw, field, k, 2, b as u64),
        v => pb::nested(raw, field, 1, |raw| {
            pb::key(raw, 1, pb::LEN);
            pb::varint(raw, k.len() as u64);
            k.write(raw);
            pb::nested(raw, 2, 1, |raw| pb_any(raw, scratch, v, depth));
        }),
    }
}

/// A key this short keeps a `KeyValue` holding a varint under 128 bytes.
const SHORT_KEY: usize = 128 - 16;

/// A `KeyValue` whose value is the varint `n` as `AnyValue` field `tag`, for a key
/// shorter than [`SHORT_KEY`]: every length one byte.
fn pb_varint_attr(raw: &mut Vec<u8>, field: u8, k: Key<'_>, tag: u8, n: u64) {
    let any = 1 + pb::varint_len(n);
    raw.extend_from_slice(&[field << 3 | pb::LEN, (k.len() + any + 4) as u8, 1 << 3 | pb::LEN, k.len() as u8]);
    k.write(raw);
    raw.extend_from_slice(&[2 << 3 | pb::LEN, any as u8, tag << 3 | pb::VARINT]);
    pb::varint(raw, n);
}

/// The body of an `AnyValue`.
fn pb_any(raw: &mut Vec<u8>, scratch: &mut String, v: Val<'_>, depth: u32) {
    match v {
        Val::Str(s) => pb::bytes_always(raw, 1, s.as_bytes()),
        Val::Bool(b) => {
            pb::key(raw, 2, pb::VARINT);
            raw.push(b as u8);
        }
        Val::Int(i) => {
            pb::key(raw, 3, pb::VARINT);
            pb::varint(raw, i as u64);
        }
        Val::Hex128(h) => pb::bytes_always(raw, 1, hex128(&mut [0; 32], h).as_bytes()),
        Val::Json(j) => pb_json(raw, scratch, j, depth),
    }
}

/// The body of an `AnyValue` for a raw JSON value: strings decoded, numbers and
/// booleans typed, objects as `kvlist_value`, arrays as `array_value`, `null` empty.
fn pb_json(raw: &mut Vec<u8>, scratch: &mut String, j: Value<'_>, depth: u32) {
    match j {
        Value::Str(s, false) => pb::bytes_always(raw, 1, &s.as_bytes()[1..s.len() - 1]),
        Value::Str(s, true) => {
            scratch.clear();
            raylog_parsers::json::unescape_into(&s[1..s.len() - 1], scratch);
            pb::bytes_always(raw, 1, scratch.as_bytes());
        }
        Value::Bare(s) => pb::bytes_always(raw, 1, s.as_bytes()),
        Value::Raw(r) if depth < MAX_DEPTH && r.starts_with('{') => pb::nested(raw, 6, 1, |raw| {
            let _ = raylog_parsers::json::members(r, |k, v| {
                pb_attr(raw, scratch, 1, Key("", k), Val::Json(v), depth + 1);
            });
        }),
        Value::Raw(r) if depth < MAX_DEPTH && r.starts_with('[') => pb::nested(raw, 5, 1, |raw| {
            let _ = raylog_parsers::json::elements(r, |el| {
                pb::nested(raw, 1, 1, |raw| pb_json(raw, scratch, element(el), depth + 1));
            });
        }),
        Value::Raw(r) => match attrs::scalar(r) {
            Scalar::Int(i) => pb_any(raw, scratch, Val::Int(i), depth),
            Scalar::Bool(b) => pb_any(raw, scratch, Val::Bool(b), depth),
            Scalar::Double(d) => {
                pb::key(raw, 4, pb::I64);
                raw.extend_from_slice(&d.to_le_bytes());
            }
            Scalar::Null => {}
            Scalar::Text => pb::bytes_always(raw, 1, r.as_bytes()),
        },
    }
}

/// An array element's raw text as a [`Value`].
pub fn element(el: &str) -> Value<'_> {
    if el.starts_with('"') {
        Value::Str(el, el.contains('\\'))
    } else {
        Value::Raw(el)
    }
}

#[cfg(test)]
pub(crate) mod tests;
