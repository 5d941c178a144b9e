//! Encodes a batch as an Elasticsearch `_bulk` body: one `create` action and one
//! document per record.
//!
//! ```text
//! {"create":{"_index":"logs-ray-default","_id":"<32 hex of doc_id>"}}
//! {"@timestamp":"2026-11-30T09:05:35.278Z","timestamp":…,"message":…,"node":…}
//! ```
//!
//! The document is the record's JSON with `@timestamp` spliced in front, so nothing
//! is parsed or re-serialised. `create` (not `index`) is what data streams require,
//! and together with the deterministic `_id` it makes a replay answer 409 instead of
//! writing a duplicate. Item `i` of the answer belongs to entry `sel[i]` of the
//! selection passed to [`BulkEncoder::encode`].
//!
//! The encoder keeps its buffers between requests; per record it only appends bytes.
//! By default gzip is raylog's own ([`super::runs`]): what each document repeats of
//! the one before (the action, its file's members, its ids, the node) goes as a
//! deflate match, the rest as stored bytes, written as it goes. With
//! `compression_level`, zlib compresses the NDJSON as it is written, through a
//! small staging buffer that stays in cache, so the uncompressed body (several
//! times the compressed one) never exists whole.
//! The action prefix (`{"create":{"_index":"…","_id":"`) is cached per UTC day, which
//! is all a dated index pattern can change.

use std::io::Write;

use bytes::Bytes;
use flate2::write::GzEncoder;
use flate2::Compression;
use raylog_parsers::time::civil_from_days;
use raylog_parsers::Timestamp;

use super::config::{EsTarget, Gzip};
use super::runs::{Doc, Runs};
use crate::agent::batch::Batch;
use crate::agent::sinks::gzip::{self, GzWriter};

const NANOS_PER_DAY: i64 = 86_400 * 1_000_000_000;

/// NDJSON staged before it is handed to the compressor.
const STAGE: usize = 64 << 10;

/// Reusable `_bulk` body builder.
#[derive(Debug)]
pub struct BulkEncoder {
    target: EsTarget,
    /// NDJSON not yet compressed (or, without gzip, the whole body).
    body: Vec<u8>,
    /// Size of the last body sent, to size the next one.
    last_len: usize,
    /// Action line up to the `_id` value, for `prefix_day`.
    prefix: Vec<u8>,
    prefix_day: Option<i64>,
    /// The repeats of the request being written (raylog's gzip).
    runs: Box<Runs>,
    /// A document's time, for `runs`.
    time: Vec<u8>,
}

impl BulkEncoder {
    pub fn new(target: EsTarget) -> BulkEncoder {
        let (runs, time) = (Box::default(), Vec::new());
        BulkEncoder { target, body: Vec::new(), last_len: 0, prefix: Vec::new(), prefix_day: None, runs, time }
    }

    /// The `_bulk` body for the entries `sel` of `batch` (in that order), compressed
    /// as `gzip` says.
    pub fn encode(&mut self, batch: &Batch, sel: &[u32], gzip: Gzip) -> std::io::Result<Bytes> {
        if gzip == Gzip::Runs {
            return Ok(self.encode_runs(batch, sel));
        }
        self.body.clear();
        let records = sel.iter().filter_map(|&i| batch.entries.get(i as usize));
        let out = if let Gzip::Zlib(level) = gzip {
            let out = Vec::with_capacity(self.last_len + self.last_len / 8 + 64);
            let mut gz = GzEncoder::new(out, Compression::new(level));
            for e in records {
                self.record(e.timestamp_ns, e.doc_id, batch.json_of(e));
                if self.body.len() >= STAGE {
                    gz.write_all(&self.body)?;
                    self.body.clear();
                }
            }
            gz.write_all(&self.body)?;
            self.body.clear();
            gz.finish()?
        } else {
            self.body.reserve(self.last_len + self.last_len / 8);
            for e in records {
                self.record(e.timestamp_ns, e.doc_id, batch.json_of(e));
            }
            // The body goes to the HTTP client; staging starts small again.
            std::mem::replace(&mut self.body, Vec::with_capacity(STAGE))
        };
        self.last_len = out.len();
        Ok(out.into())
    }

    /// The body gzipped by [`Runs`].
    fn encode_runs(&mut self, batch: &Batch, sel: &[u32]) -> Bytes {
        let mut w = GzWriter::new(Vec::with_capacity(self.last_len + self.last_len / 8 + 64), gzip::front_for(0));
        self.runs.clear();
        let members = batch.node.json_members().as_bytes();
        for e in sel.iter().filter_map(|&i| batch.entries.get(i as usize)) {
            if self.prefix_for(e.timestamp_ns) {
                self.runs.new_action();
            }
            self.time.clear();
            Timestamp(e.timestamp_ns).write_rfc3339(&mut self.time);
            let (at, len) = (e.json.0 as usize, e.json.1 as usize);
            let mut id = [0; 32];
            hex128(&mut id, e.doc_id);
            let all = batch.json_buffer();
            let doc =
                Doc { action: &self.prefix, id, time: &self.time, all, json_at: (at, at + len), pieces: e.pieces };
            self.runs.write(&mut w, &doc, members);
        }
        let (out, start) = w.finish(&[]);
        self.last_len = out.len();
        Bytes::from(out).slice(start..)
    }

    fn record(&mut self, ts_ns: i64, doc_id: u128, json: &str) {
        self.action(ts_ns, doc_id);
        self.document(ts_ns, json);
    }

    /// Makes the action prefix the one for a record at `ts_ns`; whether it changed.
    fn prefix_for(&mut self, ts_ns: i64) -> bool {
        let day = ts_ns.div_euclid(NANOS_PER_DAY);
        // A data stream's name does not depend on the day: build it once.
        let stale = match self.target {
            EsTarget::DataStream(_) => self.prefix_day.is_none(),
            EsTarget::Index(_) => self.prefix_day != Some(day),
        };
        if stale {
            self.build_prefix(day);
        }
        stale
    }

    fn action(&mut self, ts_ns: i64, doc_id: u128) {
        self.prefix_for(ts_ns);
        self.body.extend_from_slice(&self.prefix);
        push_hex128(&mut self.body, doc_id);
        self.body.extend_from_slice(b"\"}}\n");
    }

    fn build_prefix(&mut self, day: i64) {
        self.prefix.clear();
        self.prefix.extend_from_slice(b"{\"create\":{\"_index\":");
        let name = match &self.target {
            EsTarget::DataStream(ds) => ds.clone(),
            EsTarget::Index(pattern) => index_name(pattern, day),
        };
        raylog_parsers::ndjson::write_str(&mut self.prefix, &name);
        self.prefix.extend_from_slice(b",\"_id\":\"");
        self.prefix_day = Some(day);
    }

    fn document(&mut self, ts_ns: i64, json: &str) {
        self.body.extend_from_slice(b"{\"@timestamp\":\"");
        Timestamp(ts_ns).write_rfc3339(&mut self.body);
        self.body.push(b'"');
        // The record JSON is always an object; anything else would corrupt the whole
        // request, so it is left out and the document keeps only its time.
        match json.strip_prefix('{') {
            Some(rest) if rest.ends_with('}') => {
                if rest != "}" {
                    self.body.push(b',');
                }
                self.body.extend_from_slice(rest.as_bytes());
            }
            _ => self.body.push(b'}'),
        }
        self.body.push(b'\n');
    }
}

/// Expands `%Y`, `%m`, `%d` (and `%%`) of an index pattern for a UTC day number.
pub fn index_name(pattern: &str, day: i64) -> String {
    let (y, m, d) = civil_from_days(day);
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => out.push_str(&format!("{y:04}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Appends `v` as 32 lowercase hex digits: the document `_id`.
pub fn push_hex128(out: &mut Vec<u8>, v: u128) {
    out.extend_from_slice(hex128(&mut [0; 32], v).as_bytes());
}

/// `v` as 32 lowercase hex digits, in `buf` (OTLP's `log.record.uid` too).
pub fn hex128(buf: &mut [u8; 32], v: u128) -> &str {
    // Eight digits at a time: every record's id goes through here (once per sink).
    for (i, chunk) in buf.chunks_exact_mut(8).enumerate() {
        let x = (v >> (96 - 32 * i)) as u32 as u64;
        // One nibble per byte, the first nibble in the first byte.
        let x = (x | x << 16) & 0x0000_ffff_0000_ffff;
        let x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
        let x = (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f;
        // '0' + nibble, and 'a' - '0' - 10 more for nibbles of 10 and above.
        let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
        chunk.copy_from_slice(&(x + 0x3030_3030_3030_3030 + letters * 0x27).to_be_bytes());
    }
    debug_assert!(buf.is_ascii());
    // SAFETY: every byte was just written as a hex digit ('0'..='9', 'a'..='f'):
    // ASCII, so valid UTF-8, with no pass over it again for every record.
    unsafe { std::str::from_utf8_unchecked(buf) }
}

#[cfg(test)]
mod unit {
    use super::*;
    use crate::agent::sinks::gzip::tests::gunzip;

    #[test]
    fn ids_are_the_hex_of_format() {
        let mut x: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834;
        for v in
            [0, 1, u128::MAX, 0xa, 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210].into_iter().chain((0..200).map(|_| {
                x = x.wrapping_mul(0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645).wrapping_add(1);
                x
            }))
        {
            assert_eq!(hex128(&mut [0; 32], v), format!("{v:032x}"));
        }
    }

    #[test]
    fn dates_and_ids() {
        assert_eq!(index_name("ray-%Y.%m.%d-%%", 20_453), "ray-2025.12.31-%");
        let mut v = Vec::new();
        push_hex128(&mut v, 0x0123_4567_89ab_cdef_0000_0000_0000_00ff);
        assert_eq!(v, b"0123456789abcdef00000000000000ff");
        assert_eq!(std::str::from_utf8(&v).unwrap(), format!("{:032x}", 0x0123_4567_89ab_cdef_0000_0000_0000_00ffu128));
    }

    #[test]
    fn gzip_is_the_same_body_compressed_in_pieces() {
        use raylog_parsers::{classify, Correlator, FileParser, Options};
        let node = std::sync::Arc::new(crate::agent::batch::NodeIdentity::new("n".into(), None, Default::default()));
        let mut b = Batch::new(1, node);
        let mut text = String::new();
        for i in 0..3000 {
            text.push_str(&format!("[2026-11-30 09:05:35,{:03} I 1 1] a.cc:{i}: line {i} \"quoted\" é\n", i % 1000));
        }
        let (mut p, mut corr) = (FileParser::new(classify("raylet.out", None), None, None), Correlator::new());
        p.push(text.as_bytes(), &mut corr, &Options::default(), &mut |r| b.push(r, 0, r.offset as u128));
        p.finish(&mut corr, &Options::default(), &mut |r| b.push(r, 0, r.offset as u128));
        let sel: Vec<u32> = (0..b.len() as u32).collect();
        let mut enc = BulkEncoder::new(EsTarget::DataStream("logs-ray-default".into()));
        let plain = enc.encode(&b, &sel, Gzip::None).unwrap();
        assert!(plain.len() > 4 * STAGE, "the body spans several staging buffers");
        for gzip in [Gzip::Zlib(1), Gzip::Runs] {
            let gz = enc.encode(&b, &sel, gzip).unwrap();
            assert_eq!(gunzip(&gz), plain, "{gzip:?}");
        }
        assert_eq!(plain.iter().filter(|&&c| c == b'\n').count(), 2 * b.len());
        // The encoder is reused: the next body is the same, not appended to.
        assert_eq!(enc.encode(&b, &sel[..2], Gzip::None).unwrap().iter().filter(|&&c| c == b'\n').count(), 4);
    }

    #[test]
    fn the_gzip_body_is_the_plain_body_with_its_repeats_as_matches() {
        let b = super::super::runs::tests::batch();
        let sel: Vec<u32> = (0..b.len() as u32).collect();
        for target in [EsTarget::DataStream("logs-ray-default".into()), EsTarget::Index("ray-%Y.%m.%d".into())] {
            let mut enc = BulkEncoder::new(target.clone());
            let plain = enc.encode(&b, &sel, Gzip::None).unwrap();
            let gz = enc.encode(&b, &sel, Gzip::Runs).unwrap();
            assert_eq!(gunzip(&gz), plain, "{target:?}");
            assert!(gz.len() * 3 < plain.len() * 2, "{target:?}: {} bytes of {}", gz.len(), plain.len());
        }
    }
}
