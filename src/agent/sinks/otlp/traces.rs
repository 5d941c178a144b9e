//! Spans out: an OTLP/HTTP `ExportTraceServiceRequest` (protobuf, the encoding every
//! OTLP receiver takes) of the spans a batch carries, posted to the traces URL with
//! the logs' headers, TLS, compression and timeout, before the batch's logs.
//!
//! Written by hand like the logs ([`super::encode`]), from
//! `opentelemetry/proto/trace/v1/trace.proto` and
//! `collector/trace/v1/trace_service.proto`:
//! - `ExportTraceServiceRequest.resource_spans` 1; `ResourceSpans.resource` 1,
//!   `.scope_spans` 2; `ScopeSpans.scope` 1, `.spans` 2.
//! - `Span`: `trace_id` 1, `span_id` 2, `parent_span_id` 4, `name` 5, `kind` 6
//!   (INTERNAL = 1), `start_time_unix_nano` 7 and `end_time_unix_nano` 8 (fixed64),
//!   `attributes` 9, `events` 11, `links` 13, `status` 15.
//! - `Span.Event`: `time_unix_nano` 1 (fixed64), `name` 2. `Span.Link`: `trace_id`
//!   1, `span_id` 2. `Status`: `message` 2, `code` 3 (ERROR = 2).
//!
//! A request holds at most `max_request_bytes` before compression; a batch's spans
//! take as many as they need. A span refused for good (400, 413) is logged and
//! counted, never retried: its records went or go with the logs.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;

use crate::agent::sinks::pb;
use crate::agent::traces::span::{AttrValue, TaskSpan};

/// `KeyValue` (field `field`) of a string or an integer.
fn attr(out: &mut Vec<u8>, field: u8, k: &str, v: &AttrValue) {
    pb::nested(out, field, 1, |kv| {
        pb::str_field(kv, 1, k.as_bytes());
        pb::nested(kv, 2, 1, |any| match v {
            AttrValue::Str(s) => pb::bytes_always(any, 1, s.as_bytes()),
            AttrValue::Int(i) => {
                pb::key(any, 3, pb::VARINT);
                pb::varint(any, *i as u64);
            }
        });
    });
}

/// One `Span` (field 2 of `ScopeSpans`).
fn span(out: &mut Vec<u8>, s: &TaskSpan) {
    pb::nested(out, 2, 2, |o| {
        pb::bytes_always(o, 1, &s.trace_id);
        pb::bytes_always(o, 2, &s.span_id);
        if let Some(p) = &s.parent {
            pb::bytes_always(o, 4, p);
        }
        pb::str_field(o, 5, s.name.as_bytes());
        pb::key(o, 6, pb::VARINT);
        o.push(1);
        pb::fixed64(o, 7, s.start_ns.max(0) as u64);
        pb::fixed64(o, 8, s.end_ns.max(0) as u64);
        for (k, v) in &s.attrs {
            attr(o, 9, k, v);
        }
        for (name, at) in &s.events {
            pb::nested(o, 11, 1, |e| {
                pb::fixed64(e, 1, (*at).max(0) as u64);
                pb::str_field(e, 2, name.as_bytes());
            });
        }
        for l in &s.links {
            pb::nested(o, 13, 1, |e| {
                pb::bytes_always(e, 1, &s.trace_id);
                pb::bytes_always(e, 2, l);
            });
        }
        if let Some(msg) = &s.error {
            pb::nested(o, 15, 2, |st| {
                pb::str_field(st, 2, msg.as_bytes());
                pb::key(st, 3, pb::VARINT);
                st.push(2);
            });
        }
    });
}

/// The requests (uncompressed protobuf) for `spans`, each holding what fits in
/// `limit` bytes (a span alone larger than it goes alone).
pub fn encode(resource: &[(&str, &str)], spans: &[TaskSpan], limit: usize) -> Vec<Vec<u8>> {
    let mut head = Vec::new();
    pb::nested(&mut head, 1, 2, |r| {
        for (k, v) in resource {
            attr(r, 1, k, &AttrValue::Str((*v).to_owned()));
        }
    });
    let mut scope = Vec::new();
    pb::nested(&mut scope, 1, 1, |s| {
        pb::str_field(s, 1, super::encode::SCOPE_NAME.as_bytes());
        pb::str_field(s, 2, super::encode::SCOPE_VERSION.as_bytes());
    });
    let mut out = Vec::new();
    let mut body: Vec<u8> = Vec::new();
    let flush = |body: &mut Vec<u8>, out: &mut Vec<Vec<u8>>| {
        if body.is_empty() {
            return;
        }
        let mut req = Vec::with_capacity(body.len() + head.len() + scope.len() + 16);
        pb::nested(&mut req, 1, 3, |rs| {
            rs.extend_from_slice(&head);
            pb::nested(rs, 2, 3, |ss| {
                ss.extend_from_slice(&scope);
                ss.extend_from_slice(body);
            });
        });
        out.push(req);
        body.clear();
    };
    let mut one = Vec::new();
    for s in spans {
        one.clear();
        span(&mut one, s);
        if !body.is_empty() && body.len() + one.len() + head.len() + scope.len() + 16 > limit {
            flush(&mut body, &mut out);
        }
        body.extend_from_slice(&one);
    }
    flush(&mut body, &mut out);
    out
}

/// `raw` gzipped at zlib's fastest level (spans are few: the logs' own gzip, made
/// for repeated attributes, would gain nothing).
pub fn gzip(raw: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::with_capacity(raw.len() / 4 + 64), Compression::new(1));
    gz.write_all(raw)?;
    gz.finish()
}
