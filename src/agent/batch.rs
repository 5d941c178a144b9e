//! Batch: records on their way to the sinks, stored in two flat arenas.
//!
//! A parsed [`Record`] borrows the parser's buffers and dies with the callback, so the
//! reader copies what the sinks need into a [`Batch`]: each record's NDJSON line into
//! `json`, and the strings sinks index or label by (message, component, ids…) into
//! `text`, addressed by [`Span`]s. One batch is two `Vec<u8>`s and a `Vec<Entry>`, so
//! building it allocates per batch, not per record, and handing it to several sinks
//! is one `Arc`.

use std::sync::Arc;

use raylog_parsers::ndjson::write_record;
use raylog_parsers::record::{Level, Stream};
use raylog_parsers::Record;

/// A slice of [`Batch::text`] (`len == 0` means absent).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    start: u32,
    len: u32,
}

impl Span {
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

/// One record in a batch.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Nanoseconds since the epoch (the record's time, or the time it was read).
    pub timestamp_ns: i64,
    pub level: Option<Level>,
    pub stream: Option<Stream>,
    pub pid: Option<u32>,
    /// The record's NDJSON object (no trailing newline), in [`Batch::json`].
    pub json: (u32, u32),
    pub message: Span,
    pub component: Span,
    pub file: Span,
    pub session: Span,
    pub submission_id: Span,
    pub task_name: Span,
    pub actor_name: Span,
    pub ids: [Span; 5],
    /// Stable identity of the record: file identity and offset. Elasticsearch uses
    /// it as `_id` so a replay is not indexed twice.
    pub doc_id: u128,
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
    pub entries: Vec<Entry>,
    pub node: Arc<NodeIdentity>,
}

impl Batch {
    pub fn new(seq: u64, node: Arc<NodeIdentity>) -> Batch {
        Batch { seq, node, ..Batch::default() }
    }

    /// A batch sized like `prev`, so filling it does not grow (and copy) its
    /// arenas again and again: batches are cut at about the same size every time.
    pub fn sized_like(seq: u64, prev: &Batch) -> Batch {
        Batch {
            seq,
            node: prev.node.clone(),
            json: Vec::with_capacity(prev.json.len() + prev.json.len() / 8),
            text: Vec::with_capacity(prev.text.len() + prev.text.len() / 8),
            entries: Vec::with_capacity(prev.entries.len() + prev.entries.len() / 8),
        }
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

    /// The id of `e` for `field`, if present.
    pub fn id(&self, e: &Entry, field: IdField) -> Option<&str> {
        let s = e.ids[field as usize];
        (!s.is_empty()).then(|| self.str(s))
    }

    /// The NDJSON object of `e` (node identity included).
    pub fn json_of(&self, e: &Entry) -> &str {
        let b = &self.json[e.json.0 as usize..(e.json.0 + e.json.1) as usize];
        debug_assert!(std::str::from_utf8(b).is_ok());
        // SAFETY: `json` is written only by `ndjson::write_record` (from `&str` fields
        // and ASCII) and the node members (same writer), one whole object per entry.
        unsafe { std::str::from_utf8_unchecked(b) }
    }

    /// Bytes held, for the buffer bound.
    pub fn bytes(&self) -> usize {
        self.json.len() + self.text.len() + self.entries.len() * std::mem::size_of::<Entry>()
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
        let json_start = self.json.len();
        write_record(&mut self.json, r);
        // Replace the closing `}\n` with the node identity and a new `}`.
        self.json.truncate(self.json.len() - 2);
        self.json.extend_from_slice(self.node.json_members.as_bytes());
        self.json.push(b'}');
        let json = (json_start as u32, (self.json.len() - json_start) as u32);
        let ids = [r.ids.node_id, r.ids.job_id, r.ids.worker_id, r.ids.actor_id, r.ids.task_id];
        let mut id_spans = [Span::default(); 5];
        for (slot, id) in id_spans.iter_mut().zip(ids) {
            *slot = self.opt_span(id.as_ref().map(|i| i.as_str()));
        }
        let entry = Entry {
            timestamp_ns: r.timestamp.map_or(now_ns, |t| t.0),
            level: r.level,
            stream: r.file.stream,
            pid: r.pid,
            json,
            message: self.span(r.message),
            component: self.span(&r.file.component),
            file: self.span(&r.file.rel_path),
            session: self.opt_span(r.file.session.as_deref()),
            submission_id: self.opt_span(r.file.submission_id.as_deref()),
            task_name: self.opt_span(r.task_name),
            actor_name: self.opt_span(r.actor_name),
            ids: id_spans,
            doc_id,
        };
        self.entries.push(entry);
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

const FNV_PRIME: u128 = 0x0000000001000000000000000000013B;

/// The hash state after a file's identity: computed once per file and read, so
/// each record only hashes its own offset, length and message head.
pub fn doc_id_seed(identity: &str) -> u128 {
    fnv(0x6c62272e07bb014262b821756295c58d, identity.as_bytes().iter().chain(b"@"))
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
        h = (h ^ w as u128).wrapping_mul(FNV_PRIME);
    }
    h
}

fn fnv<'a>(mut h: u128, bytes: impl Iterator<Item = &'a u8>) -> u128 {
    for b in bytes {
        h ^= *b as u128;
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use raylog_parsers::{classify, Correlator, FileParser, Options};

    #[test]
    fn records_land_in_the_arenas() {
        let node = Arc::new(NodeIdentity::new("node-a".into(), Some("c1".into()), Default::default()));
        let mut b = Batch::new(7, node);
        let meta = classify("raylet.out", Some("session_x"));
        let mut p = FileParser::new(meta, None, None);
        let text = b"[2026-11-30 09:05:35,278 I 4214 4214] (raylet) worker_pool.cc:564: Started worker_id=abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2\n";
        let mut corr = Correlator::new();
        p.push(text, &mut corr, &Options::default(), &mut |r| b.push(r, 0, doc_id("1:2", r.offset, r.message)));
        p.finish(&mut corr, &Options::default(), &mut |r| b.push(r, 0, doc_id("1:2", r.offset, r.message)));
        assert_eq!(b.len(), 1);
        let e = &b.entries[0];
        assert_eq!(b.str(e.component), "raylet");
        assert_eq!(b.id(e, IdField::Worker), Some("abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2"));
        assert_eq!(b.id(e, IdField::Actor), None);
        let v: serde_json::Value = serde_json::from_str(b.json_of(e)).unwrap();
        assert_eq!(v["node"], "node-a");
        assert_eq!(v["cluster"], "c1");
        assert_eq!(v["component"], "raylet");
        assert_ne!(doc_id("1:2", 0, "a"), doc_id("1:2", 1, "a"));
        assert_ne!(doc_id("1:2", 0, "a"), doc_id("1:2", 0, "b"), "new text at an old offset");
        assert_eq!(doc_id("1:2", 0, "a"), doc_id("1:2", 0, "a"));
    }
}
