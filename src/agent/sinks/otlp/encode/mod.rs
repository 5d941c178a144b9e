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
//!   `observed_time_unix_nano` 11 (fixed64), and for a task's print `trace_id` 9 and
//!   `span_id` 10 (its job's trace, its attempt's `run` span: [`record_ids`]).
//! - `KeyValue.key` 1, `.value` 2; `AnyValue` oneof: `string_value` 1, `bool_value`
//!   2, `int_value` 3, `double_value` 4, `array_value` 5, `kvlist_value` 6;
//!   `ArrayValue.values` 1, `KeyValueList.values` 1.
//!
//! A `LogRecord`'s attributes are written before its other fields (any order is
//! valid protobuf), and start with two runs that a record usually shares with the
//! last record of its file ([`repeats`]): those are encoded once per file and sent
//! as deflate matches ([`gzip`], the default compression) or copied (no
//! compression, or `compression_level`, which hands the body to zlib). Each record's
//! size is known before it is written (only its own attributes go through a
//! scratch buffer), so nothing is moved or patched; the request's head, whose
//! lengths count every record, is written last into room left before them.
//!
//! Buffers live in the encoder and are reused; per record nothing is allocated
//! (an escaped string in a parser field is decoded into a reused scratch string).

mod json;
pub mod repeats;

use std::io::Write;

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use raylog_parsers::json::Value;

use super::attrs::{self, element, Key, Scalar, Val, MAX_DEPTH};
use super::config::{OtlpConfig, OtlpEncoding};
use crate::agent::batch::{Batch, BatchRecord, IdField, NodeIdentity};
pub use crate::agent::sinks::elasticsearch::encode::hex128;
use crate::agent::sinks::gzip::{self, GzWriter};
use crate::agent::sinks::pb;
use crate::agent::traces::span::record_ids;
use repeats::{Out, Plain, Repeats};

/// The scope every record is sent under.
pub const SCOPE_NAME: &str = "raylog";
pub const SCOPE_VERSION: &str = env!("CARGO_PKG_VERSION");

/// One encoded request.
pub struct Request {
    pub body: Bytes,
    /// Bytes before compression.
    pub raw_bytes: usize,
    /// How many of the entries asked for it holds: the first ones.
    pub records: usize,
}

/// Reusable request builder.
pub struct OtlpEncoder {
    encoding: OtlpEncoding,
    gzip: bool,
    /// zlib's level, when set; else [`gzip`] with the repeats found while encoding.
    level: Option<u32>,
    /// The runs of the request being written (see [`repeats`]).
    pub(crate) repeats: Repeats,
    /// The configured resource attributes: `service.*` first (`services` of them),
    /// then `resource_attributes`.
    resource: Vec<(String, String)>,
    services: usize,
    raw: Vec<u8>,
    /// A record's own attributes, written before its size is known.
    own: Vec<u8>,
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
            repeats: Repeats::default(),
            resource,
            services,
            raw: Vec::new(),
            own: Vec::new(),
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

    /// The request for the entries `sel` of `batch`, compressed as configured: the
    /// first of them that fit in `limit` bytes before compression (at least one).
    pub fn encode(&mut self, batch: &Batch, sel: &[u32], limit: usize) -> std::io::Result<Request> {
        if self.encoding == OtlpEncoding::Json {
            let mut raw = std::mem::take(&mut self.raw);
            raw.clear();
            raw.reserve(self.last_len + self.last_len / 8);
            let records = self.write_json(&mut raw, batch, sel, limit);
            // Runs are known in the protobuf form only: the JSON form, unless a level
            // is set, gets zlib's fastest.
            return self.finish(raw, 0, self.level.or(Some(1)), records);
        }
        let (resource, scope) = self.head_parts(batch);
        // The head's two lengths take at most 10 bytes each.
        let most = pb::msg_field_len(resource.len()) + pb::msg_field_len(scope.len()) + 2 * (1 + 10);
        if self.gzip && self.level.is_none() {
            let mut w = GzWriter::new(Vec::with_capacity(self.last_len / 3 + 1024), gzip::front_for(most));
            let records = self.write_records(&mut w, batch, sel, limit.saturating_sub(most));
            let len = w.raw_len();
            let head = head(&resource, &scope, len);
            self.last_len = head.len() + len;
            let (out, start) = w.finish(&head);
            return Ok(Request { body: Bytes::from(out).slice(start..), raw_bytes: self.last_len, records });
        }
        let mut raw = std::mem::take(&mut self.raw);
        raw.reserve(self.last_len + self.last_len / 8 + most);
        let mut p = Plain::new(raw, most);
        let records = self.write_records(&mut p, batch, sel, limit.saturating_sub(most));
        let head = head(&resource, &scope, p.raw_len());
        let (raw, start) = p.finish(&head);
        self.finish(raw, start, self.level, records)
    }

    /// The request of the body `raw[start..]`: gzipped at zlib's `level` if
    /// compressing, else as it is.
    fn finish(&mut self, raw: Vec<u8>, start: usize, level: Option<u32>, records: usize) -> std::io::Result<Request> {
        let raw_bytes = raw.len() - start;
        self.last_len = raw_bytes;
        if !self.gzip {
            return Ok(Request { body: Bytes::from(raw).slice(start..), raw_bytes, records });
        }
        let mut gz = GzEncoder::new(Vec::with_capacity(raw_bytes / 6 + 64), Compression::new(level.unwrap_or(1)));
        gz.write_all(&raw[start..])?;
        let body = gz.finish()?;
        self.raw = raw;
        Ok(Request { body: body.into(), raw_bytes, records })
    }

    /// The bodies of the request's `Resource` and `InstrumentationScope`.
    fn head_parts(&self, batch: &Batch) -> (Vec<u8>, Vec<u8>) {
        let mut resource = Vec::new();
        for (k, v) in self.resource(&batch.node) {
            pb_str_attr(&mut resource, 1, Key("", k), v);
        }
        let mut scope = Vec::new();
        pb::str_field(&mut scope, 1, SCOPE_NAME.as_bytes());
        pb::str_field(&mut scope, 2, SCOPE_VERSION.as_bytes());
        (resource, scope)
    }

    /// The `LogRecord`s of `sel`, in order, while they fit in `limit` bytes (the
    /// first one whatever its size). Returns how many of `sel` are written.
    fn write_records(&mut self, o: &mut impl Out, batch: &Batch, sel: &[u32], limit: usize) -> usize {
        let mut rec = Rec {
            repeats: std::mem::take(&mut self.repeats),
            own: std::mem::take(&mut self.own),
            scratch: std::mem::take(&mut self.scratch),
        };
        rec.repeats.clear();
        let (mut taken, mut written) = (0, false);
        for &i in sel {
            if let Some(e) = batch.entries.get(i as usize) {
                if !rec.write(o, batch, i, e, if written { limit } else { usize::MAX }) {
                    break;
                }
                written = true;
            }
            taken += 1;
        }
        (self.repeats, self.own, self.scratch) = (rec.repeats, rec.own, rec.scratch);
        taken
    }
}

/// Everything before the records: `ExportLogsServiceRequest.resource_logs` (1), and
/// in it the `Resource` (1) and `ScopeLogs` (2) with its scope (1); the records
/// (`ScopeLogs.log_records`, 2) are the rest of it.
fn head(resource: &[u8], scope: &[u8], records: usize) -> Vec<u8> {
    let scope_logs = pb::msg_field_len(scope.len()) + records;
    let resource_logs = pb::msg_field_len(resource.len()) + pb::msg_field_len(scope_logs);
    let mut out = Vec::with_capacity(resource.len() + scope.len() + 32);
    pb::key(&mut out, 1, pb::LEN);
    pb::varint(&mut out, resource_logs as u64);
    pb::key(&mut out, 1, pb::LEN);
    pb::varint(&mut out, resource.len() as u64);
    out.extend_from_slice(resource);
    pb::key(&mut out, 2, pb::LEN);
    pb::varint(&mut out, scope_logs as u64);
    pb::key(&mut out, 1, pb::LEN);
    pb::varint(&mut out, scope.len() as u64);
    out.extend_from_slice(scope);
    out
}

/// The buffers of the record writer.
struct Rec {
    repeats: Repeats,
    own: Vec<u8>,
    scratch: String,
}

impl Rec {
    /// One `LogRecord` (field 2 of `ScopeLogs`): the hot path. The runs of its file
    /// first (see [`repeats`]), then its own attributes, time, severity and body.
    /// Writes nothing and returns false if the body would pass `limit` bytes.
    fn write(&mut self, o: &mut impl Out, batch: &Batch, i: u32, e: &BatchRecord, limit: usize) -> bool {
        let Rec { repeats, own, scratch } = self;
        let slot = repeats.update(batch, i, e, &mut |run, buf| match run {
            attrs::RUNS => uid_framing(buf),
            run => attrs::each_in_run(run, batch, e, &mut |k, v| pb_attr(buf, scratch, 6, k, v, 0)),
        });
        own.clear();
        own.extend_from_slice(hex128(&mut [0; 32], e.doc_id).as_bytes());
        attrs::each_of_record(batch, e, &mut |k, v| pb_attr(own, scratch, 6, k, v, 0));
        let msg = batch.str(e.message).as_bytes();
        let any = 1 + pb::varint_len(msg.len() as u64) + msg.len();
        // Times are a key and 8 bytes; a level is its number (under 128) and its word.
        let level = e.level.map_or(0, |l| 2 + 2 + l.as_str().len());
        // A task's print joins its attempt's `run` span: 16 and 8 bytes, each with a
        // key and a length.
        let ids = batch.id(e, IdField::Task).zip(e.task_attempt).map(|(t, a)| record_ids(t, a));
        let len = repeats.len(slot) + own.len() + 9 + level + pb::msg_field_len(any) + 9 + ids.map_or(0, |_| 28);
        if o.raw_len() + pb::msg_field_len(len) > limit {
            return false;
        }
        let out = o.lit();
        pb::key(out, 2, pb::LEN);
        pb::varint(out, len as u64);
        repeats.write(slot, o);
        let out = o.lit();
        let start = out.len();
        out.extend_from_slice(own);
        pb::fixed64(out, 1, attrs::record_time(e));
        if let Some(l) = e.level {
            pb::key(out, 2, pb::VARINT);
            out.push(attrs::severity_number(l));
            pb::str_field(out, 3, l.as_str().as_bytes());
        }
        pb::key(out, 5, pb::LEN);
        pb::varint(out, any as u64);
        pb::bytes_always(out, 1, msg);
        pb::fixed64(out, 11, e.observed_ns.max(0) as u64);
        if let Some((trace, span)) = ids {
            pb::bytes_always(out, 9, &trace);
            pb::bytes_always(out, 10, &span);
        }
        debug_assert_eq!(out.len() - start, len - repeats.len(slot), "the record's size was known");
        true
    }
}

/// A record's `log.record.uid` attribute up to its value, 32 hex digits: the
/// same bytes in every record.
fn uid_framing(out: &mut Vec<u8>) {
    pb_str_attr(out, 6, Key(attrs::UID_KEY, ""), "0123456789abcdef0123456789abcdef");
    out.truncate(out.len() - 32);
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

#[cfg(test)]
pub(crate) mod tests;
