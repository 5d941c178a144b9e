//! Encodes a batch as a Loki push request: entries grouped into streams by their
//! rendered label set, each stream in time order, written as `logproto.PushRequest`
//! protobuf with snappy block compression, or as the JSON push body (optionally gzip).
//!
//! Loki keys a stream by its label string, so labels are rendered per entry from the
//! configured templates. A batch holds runs of records from one file, so an entry
//! whose label inputs equal the previous entry's reuses its stream without rendering.
//! Every buffer lives in [`LokiEncoder`] and is reused: encoding allocates per batch
//! (the body handed to the HTTP client) and never per record.
//!
//! What is sent stays within Loki's limits, so Loki never drops part of a record:
//! a line longer than `max_line_bytes` is cut (on a character) and flagged with the
//! structured-metadata pair `truncated="true"`, metadata values are cut at
//! [`MAX_META_VALUE`] (so an entry's metadata stays under Loki's 64 KiB) and label
//! values at [`MAX_LABEL_VALUE`]. An entry's time is the record's plus an offset
//! below the record's own precision ([`entry_time`]): Loki stores entries with the
//! same stream, time and line once, and two records of one millisecond may well be
//! the same text.

mod json;
mod protobuf;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Write;

use raylog_parsers::ndjson::write_str;

use super::config::{LineContent, LokiConfig, LokiEncoding, METADATA_FIELDS, TEMPLATE_FIELDS};
use super::fields::{format_u64, Field};
use crate::agent::batch::{floor_char_boundary, Batch, BatchRecord};
use crate::agent::sinks::pb;

/// Used when every configured label renders empty: Loki refuses a stream without labels.
const FALLBACK_LABEL: (&str, &str) = ("service_name", "ray");
/// Longest label value sent (Loki's `max_label_value_length` is 2048).
pub const MAX_LABEL_VALUE: usize = 2048;
/// Longest structured-metadata value sent: with at most 13 pairs an entry's metadata
/// stays under Loki's 64 KiB (`max_structured_metadata_size`).
pub const MAX_META_VALUE: usize = 4096;

/// The time of `e`'s Loki entry: the record's time plus a deterministic offset, so
/// that records alike in stream, time and line stay distinct entries, and a replay of
/// the same record gets the same time (which Loki stores once).
/// - A record with a time of its own gets an offset below that time's precision
///   (under a millisecond for Ray's millisecond times, under a microsecond for
///   microsecond times, none for nanosecond times), mixed from its document id (file
///   identity, offset, message).
/// - A record whose time was inferred shares it with its neighbours, often a whole
///   file of prints: it gets its byte offset in the file (modulo 10 MB) in units of
///   100 ns, plus under 100 ns mixed from its document id. The records of one file
///   then stay distinct and in file order within the second after the time, and
///   twins in two files (same offset, time and line) differ but one time in 100.
pub fn entry_time(e: &BatchRecord) -> i64 {
    let ts = e.timestamp_ns;
    // FNV's low bits mix poorly (its prime is 2^88 + 315): fold both halves and
    // finish with splitmix64's mixer before taking a remainder, in 64 bits (a
    // 128-bit remainder is a library call, once per entry).
    let mut x = (e.doc_id >> 64) as u64 ^ e.doc_id as u64;
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^= x >> 31;
    if e.inferred {
        return ts.saturating_add(((e.offset % 10_000_000) * 100 + x % 100) as i64);
    }
    let unit: u64 = match ts {
        t if t % 1_000_000 == 0 => 1_000_000,
        t if t % 1_000 == 0 => 1_000,
        _ => return ts,
    };
    ts.saturating_add((x % unit) as i64)
}

/// A structured-metadata field with its protobuf `LabelPairAdapter.name` field
/// (tag, length, name) rendered once: the name is the same for every entry.
#[derive(Clone, Copy)]
struct Meta {
    name: &'static str,
    field: Field,
    /// `field`'s [`Field::text_slot`].
    slot: Option<usize>,
    /// `0x0a <len> <name>`, zero-padded to 16 bytes so it is copied as a fixed block.
    name_field: [u8; 16],
}

impl Meta {
    fn new(name: &'static str, field: Field) -> Meta {
        let mut name_field = [0u8; 16];
        name_field[0] = 1 << 3 | pb::LEN;
        name_field[1] = name.len() as u8;
        name_field[2..2 + name.len()].copy_from_slice(name.as_bytes());
        Meta { name, field, slot: field.text_slot(), name_field }
    }

    fn name_field_len(&self) -> usize {
        2 + self.name.len()
    }

    /// The length of its `LabelPairAdapter` for a value of `value_len` bytes (not 0).
    fn pair_len(&self, value_len: usize) -> usize {
        self.name_field_len() + pb::msg_field_len(value_len)
    }
}

enum Part {
    Lit(String),
    Field(Field),
}

/// One configured label: its name and compiled template.
struct Label {
    name: String,
    parts: Vec<Part>,
}

fn template_field(name: &str) -> Option<Field> {
    TEMPLATE_FIELDS.contains(&name).then(|| Field::parse(name)).flatten()
}

/// Splits a template into literal text and `{field}`s (unknown `{x}` stays literal).
fn compile(template: &str) -> Vec<Part> {
    let mut parts = Vec::new();
    let mut lit = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let field =
            rest[open..].find('}').and_then(|close| Some((template_field(&rest[open + 1..open + close])?, close)));
        let Some((f, close)) = field else {
            lit.push_str(&rest[..=open]);
            rest = &rest[open + 1..];
            continue;
        };
        lit.push_str(&rest[..open]);
        if !lit.is_empty() {
            parts.push(Part::Lit(std::mem::take(&mut lit)));
        }
        parts.push(Part::Field(f));
        rest = &rest[open + close + 1..];
    }
    lit.push_str(rest);
    if !lit.is_empty() {
        parts.push(Part::Lit(lit));
    }
    parts
}

/// Calls `f(name, value)` for each configured metadata field `e` has, and
/// `truncated` when its line was cut.
fn each_meta(metadata: &[Meta], batch: &Batch, e: &BatchRecord, cut: bool, mut f: impl FnMut(&'static str, &str)) {
    let mut num = [0u8; 32];
    for m in metadata {
        let v = m.field.value(batch, e, &mut num);
        if !v.is_empty() {
            f(m.name, &v[..floor_char_boundary(v, MAX_META_VALUE)]);
        }
    }
    if cut {
        f("truncated", "true");
    }
}

fn push_i64(out: &mut Vec<u8>, v: i64) {
    if v < 0 {
        out.push(b'-');
    }
    let mut buf = [0u8; 20];
    out.extend_from_slice(format_u64(&mut buf, v.unsigned_abs()));
}

/// A push request body, ready for the HTTP client.
#[derive(Debug)]
pub struct PushBody {
    pub body: Vec<u8>,
    pub content_type: &'static str,
    pub content_encoding: Option<&'static str>,
    pub streams: usize,
    pub entries: usize,
    /// Size before compression: about what Loki's rate limits count.
    pub raw_bytes: usize,
}

/// The last few (entry, stream slot) pairs placed, most recent first. A file's
/// records alternate between a few streams (its levels), so most entries find their
/// stream here by comparing label inputs, without rendering and hashing labels.
#[derive(Default)]
struct Recent {
    items: [(u32, u32); 4],
    len: usize,
}

/// A stream of the batch being encoded.
struct Slot {
    /// Its Loki label string, in `LokiEncoder::arena`.
    labels: (u32, u32),
    /// An entry of the stream, to render the labels again for JSON.
    first: u32,
    /// Next slot with the same label hash (`u32::MAX`: none).
    next: u32,
    /// The hash of its label string.
    hash: u64,
    /// Its bytes in the last body written, before compression.
    bytes: u32,
}

/// Turns batches into push bodies; holds the compiled config and reusable buffers.
pub struct LokiEncoder {
    labels: Vec<Label>,
    /// Some label depends on a per-entry field (else every entry shares one stream).
    per_entry: Vec<Field>,
    metadata: Vec<Meta>,
    /// The most bytes an entry's metadata pairs take.
    metadata_room: usize,
    line_format: LineContent,
    encoding: LokiEncoding,
    max_line: usize,
    /// A JSON line rebuilt with its message cut (lines too long for Loki; rare).
    long_line: Vec<u8>,
    /// Label hash → first slot with that hash.
    index: HashMap<u64, u32>,
    slots: Vec<Slot>,
    arena: Vec<u8>,
    key: Vec<u8>,
    value: String,
    /// (slot, timestamp, entry): sorted, it lists each stream's entries in time order.
    order: Vec<(u32, i64, u32)>,
    /// Scratch for sorting `order`.
    sorted: Vec<(u32, i64, u32)>,
    ends: Vec<u32>,
    raw: Vec<u8>,
    /// Snappy output; only grows, so it is zeroed once, not per batch.
    compressed: Vec<u8>,
    // Boxed: its 2 KiB inline hash table would bloat every `SinkImpl`.
    snappy: Box<snap::raw::Encoder>,
}

impl LokiEncoder {
    pub fn new(cfg: &LokiConfig) -> LokiEncoder {
        // BTreeMap order: label names come out sorted, as Loki writes them.
        let labels: Vec<Label> =
            cfg.labels.iter().map(|(name, t)| Label { name: name.clone(), parts: compile(t) }).collect();
        let mut per_entry = Vec::new();
        for part in labels.iter().flat_map(|l| &l.parts) {
            if let Part::Field(f) = part {
                if f.per_entry() && !per_entry.contains(f) {
                    per_entry.push(*f);
                }
            }
        }
        let metadata = cfg
            .structured_metadata
            .iter()
            .filter_map(|m| METADATA_FIELDS.iter().find(|f| *f == m))
            .filter_map(|name| Some(Meta::new(name, Field::parse(name)?)))
            .fold(Vec::new(), |mut v: Vec<Meta>, m| {
                // At most one of each: a name listed twice would be sent twice per entry.
                if !v.iter().any(|x| x.name == m.name) {
                    v.push(m);
                }
                v
            });
        LokiEncoder {
            labels,
            per_entry,
            // Each pair: key and length (4), its name (16, written as a block), the
            // value's key and length (4) and the longest value sent.
            metadata_room: metadata.len() * (4 + 16 + 4 + MAX_META_VALUE),
            metadata,
            line_format: cfg.line_format,
            encoding: cfg.encoding,
            max_line: cfg.max_line_bytes,
            long_line: Vec::new(),
            index: HashMap::new(),
            slots: Vec::new(),
            arena: Vec::new(),
            key: Vec::new(),
            value: String::new(),
            order: Vec::new(),
            sorted: Vec::new(),
            ends: Vec::new(),
            raw: Vec::new(),
            compressed: Vec::new(),
            snappy: Box::new(snap::raw::Encoder::new()),
        }
    }

    /// Encodes the entries `only` selects (all when `None`).
    pub fn encode(&mut self, batch: &Batch, only: Option<&[u32]>) -> Result<PushBody, String> {
        self.group(batch, only);
        self.raw.clear();
        let (body, content_type, content_encoding) = match self.encoding {
            LokiEncoding::Protobuf => {
                self.write_protobuf(batch);
                let max = snap::raw::max_compress_len(self.raw.len());
                if self.compressed.len() < max {
                    self.compressed.resize(max, 0);
                }
                let n = self.snappy.compress(&self.raw, &mut self.compressed).map_err(|e| format!("snappy: {e}"))?;
                (self.compressed[..n].to_vec(), "application/x-protobuf", None)
            }
            LokiEncoding::Json { gzip } => {
                self.write_json(batch);
                if gzip {
                    let out = Vec::with_capacity(self.raw.len() / 8 + 64);
                    // Level 1: JSON log lines compress well at any level, and CPU is the budget.
                    let mut gz = flate2::write::GzEncoder::new(out, flate2::Compression::fast());
                    gz.write_all(&self.raw).map_err(|e| format!("gzip: {e}"))?;
                    (gz.finish().map_err(|e| format!("gzip: {e}"))?, "application/json", Some("gzip"))
                } else {
                    (self.raw.to_vec(), "application/json", None)
                }
            }
        };
        Ok(PushBody {
            body,
            content_type,
            content_encoding,
            streams: self.slots.len(),
            entries: self.order.len(),
            raw_bytes: self.raw.len(),
        })
    }

    /// Assigns each selected entry to its stream and sorts them into `order`.
    fn group(&mut self, batch: &Batch, only: Option<&[u32]>) {
        self.index.clear();
        self.slots.clear();
        self.arena.clear();
        self.order.clear();
        let mut recent = Recent::default();
        match only {
            Some(only) => only.iter().for_each(|&i| self.place(batch, i, &mut recent)),
            None => (0..batch.entries.len() as u32).for_each(|i| self.place(batch, i, &mut recent)),
        }
        self.sort_by_stream_and_time();
    }

    /// Orders `self.order` by stream, then time, then entry index (so equal times keep
    /// the batch's order). A counting sort by stream (few streams, many entries) keeps
    /// the batch order within a stream, which is usually time order already.
    fn sort_by_stream_and_time(&mut self) {
        let ends = &mut self.ends;
        ends.clear();
        ends.resize(self.slots.len() + 1, 0);
        for o in &self.order {
            ends[o.0 as usize + 1] += 1;
        }
        for k in 1..ends.len() {
            ends[k] += ends[k - 1];
        }
        // `ends[s]` is now where stream `s` starts; scattering moves it to its end.
        self.sorted.clear();
        self.sorted.resize(self.order.len(), (0, 0, 0));
        for &o in &self.order {
            let at = &mut ends[o.0 as usize];
            self.sorted[*at as usize] = o;
            *at += 1;
        }
        std::mem::swap(&mut self.order, &mut self.sorted);
        let mut start = 0;
        for &end in &ends[..self.slots.len()] {
            let run = &mut self.order[start..end as usize];
            if !run.is_sorted_by_key(|o| o.1) {
                // A stream's entries are a few sorted runs (each file's, read in time
                // order), which the stable sort finds and merges: 0.8 % of the Loki
                // path's instructions less than the unstable one, whose partitioning
                // does not see runs. The keys are unique, so the order is the same.
                run.sort_by_key(|o| (o.1, o.2));
            }
            start = end as usize;
        }
    }

    fn place(&mut self, batch: &Batch, i: u32, recent: &mut Recent) {
        let Some(e) = batch.entries.get(i as usize) else { return };
        let seen = &recent.items[..recent.len];
        let hit = seen.iter().position(|&(p, _)| self.same_labels(batch, &batch.entries[p as usize], e));
        let slot = match hit {
            Some(k) => {
                recent.items[..=k].rotate_right(1);
                recent.items[0].1
            }
            None => {
                recent.len = (recent.len + 1).min(recent.items.len());
                recent.items[..recent.len].rotate_right(1);
                self.slot_for(batch, e, i)
            }
        };
        recent.items[0] = (i, slot);
        self.order.push((slot, entry_time(e), i));
    }

    fn same_labels(&self, batch: &Batch, a: &BatchRecord, b: &BatchRecord) -> bool {
        self.per_entry.iter().all(|f| f.same(batch, a, b))
    }

    /// Renders `e`'s label string and finds or makes its slot.
    fn slot_for(&mut self, batch: &Batch, e: &BatchRecord, i: u32) -> u32 {
        self.render_key(batch, e);
        let mut h = DefaultHasher::new();
        self.key.hash(&mut h);
        let h = h.finish();
        let head = self.index.get(&h).copied().unwrap_or(u32::MAX);
        let mut s = head;
        while s != u32::MAX {
            let slot = &self.slots[s as usize];
            let (start, len) = (slot.labels.0 as usize, slot.labels.1 as usize);
            if self.arena[start..start + len] == self.key[..] {
                return s;
            }
            s = slot.next;
        }
        let labels = (self.arena.len() as u32, self.key.len() as u32);
        self.arena.extend_from_slice(&self.key);
        let new = self.slots.len() as u32;
        self.slots.push(Slot { labels, first: i, next: head, hash: h, bytes: 0 });
        self.index.insert(h, new);
        new
    }

    /// Renders one label's value for `e` into `self.value`, cut at [`MAX_LABEL_VALUE`].
    fn render_value(value: &mut String, label: &Label, batch: &Batch, e: &BatchRecord) {
        value.clear();
        for part in &label.parts {
            match part {
                Part::Lit(s) => value.push_str(s),
                Part::Field(f) => value.push_str(f.value(batch, e, &mut [0; 32])),
            }
        }
        value.truncate(floor_char_boundary(value, MAX_LABEL_VALUE));
    }

    /// The entries of the stream whose label string is `labels` in the last push, in
    /// the order they were sent (by time), or `None` if no stream has that string.
    pub fn stream_entries(&self, labels: &str) -> Option<Vec<u32>> {
        let slot = self.slots.iter().position(|s| {
            let (start, len) = s.labels;
            &self.arena[start as usize..(start + len) as usize] == labels.as_bytes()
        })?;
        Some(self.order[self.run(slot)].iter().map(|o| o.2).collect())
    }

    /// Each stream of the last push: the hash of its labels and its bytes before
    /// compression (what Loki's stream rate counts, and a little more).
    pub fn stream_sizes(&self) -> impl Iterator<Item = (u64, usize)> + '_ {
        self.slots.iter().map(|s| (s.hash, s.bytes as usize))
    }

    /// The times the entries of the last push were sent with, by entry index.
    pub fn sent_time(&self, entry: u32) -> Option<i64> {
        self.order.iter().find(|o| o.2 == entry).map(|o| o.1)
    }

    /// `{a="x", b="y"}` into `self.key`: names sorted, empty values left out.
    fn render_key(&mut self, batch: &Batch, e: &BatchRecord) {
        self.key.clear();
        self.key.push(b'{');
        for label in &self.labels {
            Self::render_value(&mut self.value, label, batch, e);
            if !self.value.is_empty() {
                push_label(&mut self.key, &label.name, &self.value);
            }
        }
        if self.key.len() == 1 {
            push_label(&mut self.key, FALLBACK_LABEL.0, FALLBACK_LABEL.1);
        }
        self.key.push(b'}');
    }

    /// The line of `e` and whether it had to be cut for Loki (or was cut already
    /// by the parser). Uses `long_line` for a JSON line rebuilt shorter.
    #[inline]
    fn line<'b>(
        max: usize,
        format: LineContent,
        long_line: &'b mut Vec<u8>,
        batch: &'b Batch,
        e: &BatchRecord,
    ) -> (&'b [u8], bool) {
        match format {
            LineContent::Message => {
                let m = batch.str(e.message);
                let n = floor_char_boundary(m, max);
                (&m.as_bytes()[..n], e.truncated || n < m.len())
            }
            LineContent::Json => {
                let j = batch.json_of(e);
                if j.len() <= max {
                    return (j.as_bytes(), e.truncated);
                }
                // Too long: the fields with the message cut to what fits.
                long_line.clear();
                let over = j.len() - max;
                let keep = batch.str(e.message).len().saturating_sub(over + 64);
                batch.write_fields_json(e, long_line, keep);
                let fits = std::str::from_utf8(long_line).map_or(0, |s| floor_char_boundary(s, max));
                (&long_line[..fits], true)
            }
        }
    }

    /// The range of `self.order` holding stream `slot` (after sorting).
    fn run(&self, slot: usize) -> std::ops::Range<usize> {
        (if slot == 0 { 0 } else { self.ends[slot - 1] as usize })..self.ends[slot] as usize
    }
}

/// `, name="value"` (no comma first) with the value quoted as Loki's label parser reads it.
fn push_label(key: &mut Vec<u8>, name: &str, value: &str) {
    if key.len() > 1 {
        key.extend_from_slice(b", ");
    }
    key.extend_from_slice(name.as_bytes());
    key.extend_from_slice(b"=\"");
    for &b in value.as_bytes() {
        match b {
            b'\\' => key.extend_from_slice(b"\\\\"),
            b'"' => key.extend_from_slice(b"\\\""),
            // A raw newline ends a Go string literal; Loki would fail to parse it.
            b'\n' => key.extend_from_slice(b"\\n"),
            b'\r' => key.extend_from_slice(b"\\r"),
            b'\t' => key.extend_from_slice(b"\\t"),
            _ => key.push(b),
        }
    }
    key.push(b'"');
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn every_metadata_name_fits_its_prefix_block() {
        for name in METADATA_FIELDS {
            let m = Meta::new(name, Field::parse(name).expect("a record field"));
            let mut want = vec![];
            pb::str_field(&mut want, 1, name.as_bytes());
            assert_eq!(&m.name_field[..m.name_field_len()], &want[..], "{name}");
        }
    }
}
