//! Batch: records on their way to the sinks, stored in flat arenas.
//!
//! A parsed [`Record`] borrows the parser's buffers and dies with the callback, so the
//! reader copies what the sinks need into a [`Batch`]: each record's NDJSON line into
//! `json`, and the strings sinks index or label by (message, component, ids…) into
//! `text`, addressed by [`Span`]s, and the parser's other pairs, for OTLP, into `pairs`
//! ([`Pairs`]). One batch is three `Vec<u8>`s and a `Vec<BatchRecord>`, so
//! building it allocates per batch, not per record, and handing it to several sinks
//! is one `Arc`.

use std::sync::{Arc, Mutex};

use raylog_parsers::ndjson::{write_record_pieces, Pieces};
use raylog_parsers::record::{Level, Stream};
use raylog_parsers::Record;

use crate::agent::fnv;

mod pairs;
pub mod park;
pub use pairs::Pairs;

/// A slice of [`Batch::text`] (`len == 0` means absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Which id, as an index into [`Entry::ids`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdField {
    Node = 0,
    Job = 1,
    Worker = 2,
    Actor = 3,
    Task = 4,
}

impl IdField {
    pub const ALL: [IdField; 5] = [IdField::Node, IdField::Job, IdField::Worker, IdField::Actor, IdField::Task];

    /// The record-schema name (`actor_id`…).
    pub fn name(self) -> &'static str {
        ["node_id", "job_id", "worker_id", "actor_id", "task_id"][self as usize]
    }
}

/// What the configured sinks read from a batch. Writing each record's NDJSON and
/// copying its fields into `text` are most of what building a batch costs, so only
/// what some sink reads is built: Loki (message lines) reads fields, OTLP fields and
/// the parser's extra pairs, Elasticsearch, stdout and file read the JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    pub json: bool,
    pub fields: bool,
    /// The parser's other pairs (the record's `fields` object), as [`Pairs`] in
    /// [`Batch::pairs`] (see [`BatchRecord::extra`]).
    pub extra: bool,
}

impl Needs {
    pub const ALL: Needs = Needs { json: true, fields: true, extra: true };
    pub const NONE: Needs = Needs { json: false, fields: false, extra: false };
}

impl Default for Needs {
    fn default() -> Needs {
        Needs::ALL
    }
}

/// One record in a batch.
#[derive(Clone, Debug, Default)]
pub struct BatchRecord {
    /// Nanoseconds since the epoch (the record's time, or the time it was read).
    pub timestamp_ns: i64,
    /// When the record was read (released, for a record held for its actor).
    pub observed_ns: i64,
    pub level: Option<Level>,
    pub stream: Option<Stream>,
    pub pid: Option<u32>,
    /// Byte offset of the record in its file.
    pub offset: u64,
    /// The record's NDJSON object (no trailing newline), in [`Batch::json`]; empty
    /// unless [`Needs::json`].
    pub json: (u32, u32),
    /// Where `json`'s members are (see [`Pieces`]), for Elasticsearch's gzip.
    pub pieces: Pieces,
    /// The fields below are empty unless [`Needs::fields`].
    pub message: Span,
    pub component: Span,
    pub file: Span,
    pub session: Span,
    pub submission_id: Span,
    pub task_name: Span,
    pub actor_name: Span,
    pub ids: [Span; 5],
    /// The attempt of the task id that printed the record (`task_attempt`).
    pub task_attempt: Option<u32>,
    /// The record's parser fields in [`Batch::pairs`] (see [`Batch::pairs_of`]),
    /// empty when it has none or unless [`Needs::extra`].
    pub extra: Span,
    /// The file's full path when known, unless [`Needs::extra`] (OTLP's `log.file.path`).
    pub path: Span,
    /// Stable identity of the record: file identity and offset. Elasticsearch uses
    /// it as `_id` so a replay is not indexed twice.
    pub doc_id: u128,
    /// A line of the record was cut at `source.max_line_bytes`.
    pub truncated: bool,
    /// The record had no time of its own (`timestamp_inferred`).
    pub inferred: bool,
    /// Its time was estimated (`timestamp_estimated`).
    pub estimated: bool,
}

/// The agent's own identity, the same for every record.
#[derive(Clone, Debug, Default)]
pub struct NodeIdentity {
    pub name: String,
    pub cluster: Option<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    /// `,"node":…,"cluster":…,"labels":{…}` appended to every record's JSON.
    json_members: String,
}

impl NodeIdentity {
    /// `,"node":…,"cluster":…,"labels":{…}`: what ends every record's JSON.
    pub fn json_members(&self) -> &str {
        &self.json_members
    }

    pub fn new(
        name: String,
        cluster: Option<String>,
        labels: std::collections::BTreeMap<String, String>,
    ) -> NodeIdentity {
        let mut v = Vec::new();
        v.extend_from_slice(b",\"node\":");
        raylog_parsers::ndjson::write_str(&mut v, &name);
        if let Some(c) = &cluster {
            v.extend_from_slice(b",\"cluster\":");
            raylog_parsers::ndjson::write_str(&mut v, c);
        }
        if !labels.is_empty() {
            v.extend_from_slice(b",\"labels\":{");
            for (i, (k, val)) in labels.iter().enumerate() {
                if i > 0 {
                    v.push(b',');
                }
                raylog_parsers::ndjson::write_str(&mut v, k);
                v.push(b':');
                raylog_parsers::ndjson::write_str(&mut v, val);
            }
            v.push(b'}');
        }
        let json_members = String::from_utf8(v).unwrap_or_default();
        NodeIdentity { name, cluster, labels, json_members }
    }
}

/// Records ready for the sinks.
#[derive(Debug, Default)]
pub struct Batch {
    /// Batches are numbered in the order they were made; checkpoints advance in that order.
    pub seq: u64,
    pub json: Vec<u8>,
    pub text: Vec<u8>,
    /// The parser's fields of the records that have some, when [`Needs::extra`]
    /// (see [`Pairs`]).
    pub pairs: Vec<u8>,
    pub entries: Vec<BatchRecord>,
    pub node: Arc<NodeIdentity>,
    pub needs: Needs,
    /// The file members of the last record pushed and their spans in `text`: a batch
    /// holds runs of records from one file, which then share these spans.
    last_file: Vec<u8>,
    last_spans: [Span; 4],
    /// The same for the file's full path (two roots may hold files alike in all else).
    last_path: (String, Span),
    /// Spans of Ray's tasks finished while the batch filled (see
    /// [`crate::agent::traces`]): the OTLP sink with `traces = true` sends them.
    pub spans: Vec<crate::agent::traces::span::TaskSpan>,
}

impl Batch {
    pub fn new(seq: u64, node: Arc<NodeIdentity>) -> Batch {
        Batch { seq, node, ..Batch::default() }
    }

    /// Builds only what `needs` says the sinks read.
    pub fn needing(mut self, needs: Needs) -> Batch {
        self.needs = needs;
        self
    }

    /// A batch sized like `prev`, so filling it does not grow (and copy) its
    /// arenas again and again: batches are cut at about the same size every time.
    pub fn sized_like(seq: u64, prev: &Batch) -> Batch {
        Batch {
            seq,
            node: prev.node.clone(),
            needs: prev.needs,
            last_file: Vec::new(),
            last_spans: [Span::default(); 4],
            last_path: Default::default(),
            json: Vec::with_capacity(prev.json.len() + prev.json.len() / 8),
            text: Vec::with_capacity(prev.text.len() + prev.text.len() / 8),
            pairs: Vec::with_capacity(prev.pairs.len() + prev.pairs.len() / 8),
            entries: Vec::with_capacity(prev.entries.len() + prev.entries.len() / 8),
            spans: Vec::new(),
        }
    }

    /// This batch emptied for refilling as batch `seq`; its arenas keep their capacity.
    pub fn reuse(mut self, seq: u64) -> Batch {
        self.seq = seq;
        self.json.clear();
        self.text.clear();
        self.pairs.clear();
        self.entries.clear();
        self.spans.clear();
        self.last_file.clear();
        self.last_path = Default::default();
        self
    }

    /// The text of a span.
    pub fn str(&self, s: Span) -> &str {
        let b = &self.text[s.start as usize..(s.start + s.len) as usize];
        debug_assert!(std::str::from_utf8(b).is_ok());
        // SAFETY: `text` only ever receives whole `&str`s (`span`), and a span covers
        // exactly one of them, so it is valid UTF-8. Sinks call this per field per
        // record; re-validating here was a fifth of the Loki encoder's time.
        unsafe { std::str::from_utf8_unchecked(b) }
    }

    /// The parser's fields of `e` (none unless [`Needs::extra`]).
    pub fn pairs_of(&self, e: &BatchRecord) -> Pairs<'_> {
        Pairs { rest: &self.pairs[e.extra.start as usize..(e.extra.start + e.extra.len) as usize] }
    }

    /// The id of `e` for `field`, if present.
    pub fn id(&self, e: &BatchRecord, field: IdField) -> Option<&str> {
        let s = e.ids[field as usize];
        (!s.is_empty()).then(|| self.str(s))
    }

    /// Every entry's NDJSON object, side by side (entry `e`'s is at `e.json`).
    pub fn json_buffer(&self) -> &[u8] {
        &self.json
    }

    /// The NDJSON object of `e` (node identity included).
    pub fn json_of(&self, e: &BatchRecord) -> &str {
        let b = &self.json[e.json.0 as usize..(e.json.0 + e.json.1) as usize];
        debug_assert!(std::str::from_utf8(b).is_ok());
        // SAFETY: `json` is written only by `ndjson::write_record` (from `&str` fields
        // and ASCII) and the node members (same writer), one whole object per entry.
        unsafe { std::str::from_utf8_unchecked(b) }
    }

    /// Bytes allocated by the arenas, used or not.
    pub fn capacity(&self) -> usize {
        self.json.capacity()
            + self.text.capacity()
            + self.pairs.capacity()
            + self.entries.capacity() * std::mem::size_of::<BatchRecord>()
    }

    /// Bytes held, for the buffer bound.
    pub fn bytes(&self) -> usize {
        self.json.len() + self.text.len() + self.pairs.len() + self.entries.len() * std::mem::size_of::<BatchRecord>()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn span(&mut self, s: &str) -> Span {
        let start = self.text.len() as u32;
        self.text.extend_from_slice(s.as_bytes());
        Span { start, len: s.len() as u32 }
    }

    fn opt_span(&mut self, s: Option<&str>) -> Span {
        s.map_or(Span::default(), |s| self.span(s))
    }

    /// Appends a record. `now_ns` dates records without a time; `doc_id` identifies it.
    pub fn push(&mut self, r: &Record<'_>, now_ns: i64, doc_id: u128) {
        let mut entry = BatchRecord {
            timestamp_ns: r.timestamp.map_or(now_ns, |t| t.0),
            observed_ns: now_ns,
            level: r.level,
            stream: r.file.stream,
            pid: r.pid,
            offset: r.offset,
            doc_id,
            task_attempt: r.ids.task_attempt,
            truncated: r.truncated,
            inferred: r.timestamp_inferred || r.timestamp.is_none(),
            estimated: r.timestamp_estimated,
            ..BatchRecord::default()
        };
        if self.needs.json {
            (entry.json, entry.pieces) = self.push_json(r);
        }
        if self.needs.fields {
            self.push_fields(r, &mut entry);
        }
        if self.needs.extra {
            self.push_extra(r, &mut entry);
        }
        self.entries.push(entry);
    }

    fn push_json(&mut self, r: &Record<'_>) -> ((u32, u32), Pieces) {
        let json_start = self.json.len();
        let pieces = write_record_pieces(&mut self.json, r);
        // Replace the closing `}\n` with the node identity and a new `}`.
        self.json.truncate(self.json.len() - 2);
        self.json.extend_from_slice(self.node.json_members.as_bytes());
        self.json.push(b'}');
        ((json_start as u32, (self.json.len() - json_start) as u32), pieces)
    }

    fn push_fields(&mut self, r: &Record<'_>, e: &mut BatchRecord) {
        // By reference: an `Option<Id>` is 58 bytes, and copying the five cost more
        // than the spans made of them.
        let ids = [&r.ids.node_id, &r.ids.job_id, &r.ids.worker_id, &r.ids.actor_id, &r.ids.task_id];
        for (slot, id) in e.ids.iter_mut().zip(ids) {
            *slot = id.as_ref().map_or(Span::default(), |i| self.span(i.as_str()));
        }
        e.message = self.span(r.message);
        let members = r.file.json_members();
        if self.last_file != members {
            self.last_spans = [
                self.span(&r.file.component),
                self.span(&r.file.rel_path),
                self.opt_span(r.file.session.as_deref()),
                self.opt_span(r.file.submission_id.as_deref()),
            ];
            self.last_file.clear();
            self.last_file.extend_from_slice(members);
        }
        [e.component, e.file, e.session, e.submission_id] = self.last_spans;
        e.task_name = self.opt_span(r.task_name);
        e.actor_name = self.opt_span(r.actor_name);
    }

    fn push_extra(&mut self, r: &Record<'_>, e: &mut BatchRecord) {
        if !r.fields.is_empty() {
            let start = self.pairs.len() as u32;
            for f in r.fields.iter() {
                Pairs::push(&mut self.pairs, f.key, f.value);
            }
            e.extra = Span { start, len: self.pairs.len() as u32 - start };
        }
        let path = r.file.path.as_deref().unwrap_or("");
        if self.last_path.0 != path {
            self.last_path.1 = self.span(path);
            self.last_path.0.clear();
            self.last_path.0.push_str(path);
        }
        e.path = self.last_path.1;
    }

    /// A JSON object of what [`Needs::fields`] keeps of `e` (for the dead-letter file
    /// when no sink needed the record's full JSON, and for a Loki JSON line too long
    /// to send whole): the schema's names for the time, level, message (cut to
    /// `max_message` bytes, then flagged `truncated`), file members, offset, ids, pid,
    /// names and node identity.
    pub fn write_fields_json(&self, e: &BatchRecord, out: &mut Vec<u8>, max_message: usize) {
        use raylog_parsers::ndjson::write_str;
        out.extend_from_slice(b"{\"timestamp\":\"");
        raylog_parsers::Timestamp(e.timestamp_ns).write_rfc3339(out);
        out.push(b'"');
        if let Some(l) = e.level {
            out.extend_from_slice(b",\"level\":");
            write_str(out, l.as_str());
        }
        let member = |out: &mut Vec<u8>, name: &str, s: Span| {
            if !s.is_empty() {
                out.extend_from_slice(b",\"");
                out.extend_from_slice(name.as_bytes());
                out.extend_from_slice(b"\":");
                write_str(out, self.str(s));
            }
        };
        let message = self.str(e.message);
        let cut = floor_char_boundary(message, max_message);
        out.extend_from_slice(b",\"message\":");
        write_str(out, &message[..cut]);
        if e.truncated || cut < message.len() {
            out.extend_from_slice(b",\"truncated\":true");
        }
        member(out, "component", e.component);
        if let Some(s) = e.stream {
            out.extend_from_slice(b",\"stream\":");
            write_str(out, s.as_str());
        }
        member(out, "file", e.file);
        member(out, "session", e.session);
        member(out, "submission_id", e.submission_id);
        out.extend_from_slice(b",\"offset\":");
        out.extend_from_slice(e.offset.to_string().as_bytes());
        for f in IdField::ALL {
            member(out, f.name(), e.ids[f as usize]);
        }
        if let Some(p) = e.pid {
            out.extend_from_slice(b",\"pid\":");
            out.extend_from_slice(p.to_string().as_bytes());
        }
        member(out, "task_name", e.task_name);
        member(out, "actor_name", e.actor_name);
        if !e.extra.is_empty() {
            out.extend_from_slice(b",\"fields\":");
            raylog_parsers::ndjson::write_pairs_object(out, self.pairs_of(e));
        }
        out.extend_from_slice(self.node.json_members.as_bytes());
        out.push(b'}');
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character.
pub fn floor_char_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    (0..=max).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0)
}

/// Delivered batches on their way back to the reader, which refills them instead of
/// allocating new arenas: the big buffers then live for the whole run, rather than
/// being freed and allocated again for every batch, which fragments the heap and
/// leaves the process holding several times the memory actually in use.
#[derive(Clone)]
pub struct Recycler {
    pool: Arc<Mutex<Vec<Batch>>>,
    /// Batches whose arenas grew past this many bytes are freed, not kept: an
    /// unusually large batch must not pin its memory for the rest of the run.
    max_capacity: usize,
}

impl Recycler {
    /// At most this many batches wait here: the reader takes one per cut.
    const KEEP: usize = 2;

    pub fn new(max_capacity: usize) -> Recycler {
        Recycler { pool: Arc::default(), max_capacity }
    }

    /// Takes back `batch` if this was its last holder (the last sink to finish it).
    pub fn put(&self, batch: Arc<Batch>) {
        let Ok(b) = Arc::try_unwrap(batch) else { return };
        if b.capacity() > self.max_capacity {
            return;
        }
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if pool.len() < Self::KEEP {
            pool.push(b);
        }
    }

    pub fn take(&self) -> Option<Batch> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Drops the batches kept for reuse (the reader is idle: their megabytes are
    /// better back with the OS until the next busy spell).
    pub fn clear(&self) {
        self.pool.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// `doc_id` for a record: a 128-bit FNV-1a hash of the file identity, the offset and
/// the head and length of the message. A replay of the same bytes gets the same id
/// (Elasticsearch answers 409 and nothing is stored twice), while a file rewritten in
/// place (copy-truncate) puts new text at old offsets and must get new ids, or the
/// new records would be dropped as duplicates of the old.
pub fn doc_id(identity: &str, offset: u64, message: &str) -> u128 {
    doc_id_from(doc_id_seed(identity), offset, message)
}

/// The hash state after a file's identity: computed once per file and read, so
/// each record only hashes its own offset, length and message head.
pub fn doc_id_seed(identity: &str) -> u128 {
    fnv::hash128(fnv::OFFSET_128, identity.as_bytes().iter().chain(b"@"))
}

/// [`doc_id`] from a [`doc_id_seed`]: FNV-1a over 64-bit words (offset, length,
/// the first 32 message bytes zero-padded), six multiplies per record.
pub fn doc_id_from(seed: u128, offset: u64, message: &str) -> u128 {
    let bytes = message.as_bytes();
    let mut head = [0u8; 32];
    let n = bytes.len().min(32);
    head[..n].copy_from_slice(&bytes[..n]);
    let words = head.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8-byte chunk")));
    let mut h = seed;
    for w in [offset, bytes.len() as u64].into_iter().chain(words) {
        h = fnv::step128(h, w);
    }
    h
}

#[cfg(test)]
mod tests;
