//! The default gzip of a `_bulk` body ([`crate::agent::sinks::gzip`]): what a
//! document repeats is sent as a deflate match, the rest as stored bytes.
//!
//! A document is the record's JSON (see [`super::encode`]), whose members come in a
//! fixed order; its writer says where the pieces start ([`Pieces`]: searching for
//! the keys took 4 % of the sink's CPU):
//!
//! ```text
//! {"create":{"_index":"…","_id":"   same in every action         match
//! <32 hex>                          the record's id               stored
//! "}}\n{"@timestamp":"              same in every document        match
//! <time>","timestamp":…,"message":…,  the record's own             stored
//! "component":…,"offset":           the file's members            match of its last document
//! <digits>                          the offset                    stored
//! ,"node_id":…,"pid":…              ids, pid, names               match of its last document if the same
//! ,"fields":{…}                     the parser's pairs            stored
//! ,"node":…}\n                      the node's members            match
//! ```
//!
//! A document whose JSON does not have these pieces (none should) is sent whole as
//! stored bytes. Zlib at the fastest level spent 0.68 of the 1.96 CPU-s of shipping
//! the 256 MiB benchmark tree; this writer sends two thirds of the raw body (579 of
//! 880 MB) for a fraction of that.

use std::hash::Hasher;

use raylog_parsers::id::IdHasher;
use raylog_parsers::ndjson::Pieces;

use crate::agent::sinks::gzip::{GzWriter, MIN_COPY, WINDOW};

/// Files whose last document is remembered (see `otlp::encode::repeats`).
const SLOTS: usize = 32;
/// A piece not written yet in this request.
const NOWHERE: usize = usize::MAX;
/// Between an action's id and the document's time.
pub const AFTER_ID: &[u8] = b"\"}}\n{\"@timestamp\":\"";

/// Where a record's JSON is cut (indices into it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cuts {
    /// `"component":`, after the message.
    members: usize,
    /// The offset's digits.
    digits: usize,
    /// After them: `,"node_id":`… up to `,"fields":`, `,"truncated":` or the node.
    ids: usize,
    /// `,"fields":`… up to the node.
    fields: usize,
    /// The node's members, up to the closing `}`.
    node: usize,
}

impl Cuts {
    /// The pieces of `json`, a record's JSON ending with the node's `members` and
    /// `}`, where its writer put them (`p`); `None` when they do not fit it.
    pub fn of(json: &[u8], p: &Pieces, members: &[u8]) -> Option<Cuts> {
        let node = json.len().checked_sub(members.len() + 1)?;
        let [m, d, i, f] = [p.members, p.digits, p.ids, p.fields].map(|x| x as usize);
        let ordered = 0 < m && m <= d && d <= i && i <= f && f <= node;
        if !ordered || !json.starts_with(b"{") || !json.ends_with(b"}") || json[node..node + members.len()] != *members
        {
            return None;
        }
        Some(Cuts { members: m, digits: d, ids: i, fields: f, node })
    }
}

/// What the request has written so far, to find repeats.
pub struct Runs {
    slots: Vec<Slot>,
    clock: u64,
    /// Where the constant pieces were last written.
    action_at: usize,
    after_id_at: usize,
    node_at: usize,
}

/// A file's last document: its entry (JSON and cuts) and where its two runs went.
#[derive(Clone, Copy, Default)]
struct Slot {
    hash: u64,
    /// When last used; 0: empty.
    used: u64,
    json: (usize, usize),
    cuts: Option<Cuts>,
    members_at: usize,
    ids_at: usize,
}

impl std::fmt::Debug for Runs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runs").field("files", &self.slots.iter().filter(|s| s.used != 0).count()).finish()
    }
}

impl Default for Runs {
    fn default() -> Runs {
        Runs {
            slots: vec![Slot::default(); SLOTS],
            clock: 0,
            action_at: NOWHERE,
            after_id_at: NOWHERE,
            node_at: NOWHERE,
        }
    }
}

/// A document to write: its action's start, id, time and record JSON (`json`, at
/// `json_at` in the batch's JSON buffer `all`).
pub struct Doc<'a> {
    pub action: &'a [u8],
    /// The `_id`: 32 hex digits.
    pub id: [u8; 32],
    pub time: &'a [u8],
    pub all: &'a [u8],
    pub json_at: (usize, usize),
    pub pieces: Pieces,
}

impl Runs {
    /// Starts a request: nothing written yet.
    pub fn clear(&mut self) {
        self.slots.iter_mut().for_each(|s| s.used = 0);
        self.clock = 0;
        (self.action_at, self.after_id_at, self.node_at) = (NOWHERE, NOWHERE, NOWHERE);
    }

    /// The action's start changed (a new day's index): its next copy is written out.
    pub fn new_action(&mut self) {
        self.action_at = NOWHERE;
    }

    /// Writes the action line and the document of `d`; `members` are the node's.
    pub fn write(&mut self, w: &mut GzWriter, d: &Doc<'_>, members: &[u8]) {
        constant(w, d.action, &mut self.action_at);
        w.lit().extend_from_slice(&d.id);
        constant(w, AFTER_ID, &mut self.after_id_at);
        let json = &d.all[d.json_at.0..d.json_at.1];
        let out = w.lit();
        out.extend_from_slice(d.time);
        out.push(b'"');
        let Some(c) = Cuts::of(json, &d.pieces, members) else {
            whole(out, json);
            return;
        };
        out.push(b',');
        out.extend_from_slice(&json[1..c.members]);
        let s = self.slot(&json[c.members..c.digits], d.all);
        let (was, base) = (self.slots[s], w.raw_len());
        let same = |piece: fn(&Cuts) -> (usize, usize)| {
            was.cuts.is_some_and(|wc| {
                let (a, b) = piece(&wc);
                let (x, y) = piece(&c);
                d.all[was.json.0 + a..was.json.0 + b] == json[x..y]
            })
        };
        run(w, &json[c.members..c.digits], same(|c| (c.members, c.digits)), was.members_at);
        w.lit().extend_from_slice(&json[c.digits..c.ids]);
        let ids_at = w.raw_len();
        run(w, &json[c.ids..c.fields], same(|c| (c.ids, c.fields)), was.ids_at);
        w.lit().extend_from_slice(&json[c.fields..c.node]);
        // The node's members, `}` and the newline: the same in every document.
        let end = &d.all[d.json_at.0 + c.node..d.json_at.1];
        let at = w.raw_len();
        if self.node_at != NOWHERE && at - self.node_at <= WINDOW && end.len() >= MIN_COPY {
            // One match: the newline continues it.
            w.repeat(end, at - self.node_at);
            w.repeat(b"\n", at - self.node_at);
        } else {
            let out = w.lit();
            out.extend_from_slice(end);
            out.push(b'\n');
        }
        self.node_at = at;
        let slot = &mut self.slots[s];
        (slot.json, slot.cuts, slot.members_at, slot.ids_at) = (d.json_at, Some(c), base, ids_at);
    }

    /// The slot of the file whose members are `members` (a slice of `all`), emptied
    /// (no last document) if it is new.
    fn slot(&mut self, members: &[u8], all: &[u8]) -> usize {
        self.clock += 1;
        let mut h = IdHasher::default();
        h.write(members);
        let hash = h.finish();
        let found = self.slots.iter().position(|s| {
            s.used != 0
                && s.hash == hash
                && s.cuts.is_some_and(|c| all[s.json.0 + c.members..s.json.0 + c.digits] == *members)
        });
        let s = found.unwrap_or_else(|| (0..SLOTS).min_by_key(|&i| self.slots[i].used).unwrap_or(0));
        if found.is_none() {
            self.slots[s] = Slot { hash, members_at: NOWHERE, ids_at: NOWHERE, ..Slot::default() };
        }
        self.slots[s].used = self.clock;
        s
    }
}

/// The rest of a document whose JSON is not a record's (none should be), as
/// `encode::document` writes it.
fn whole(out: &mut Vec<u8>, json: &[u8]) {
    match json.strip_prefix(b"{") {
        Some(rest) if rest.ends_with(b"}") => {
            if rest != b"}" {
                out.push(b',');
            }
            out.extend_from_slice(rest);
        }
        _ => out.push(b'}'),
    }
    out.push(b'\n');
}

/// Writes `bytes`, a piece the same in every document, as a repeat of its last copy
/// (at `*at`) when there is one in the window.
fn constant(w: &mut GzWriter, bytes: &[u8], at: &mut usize) {
    let here = w.raw_len();
    if *at != NOWHERE && here - *at <= WINDOW && bytes.len() >= MIN_COPY {
        w.repeat(bytes, here - *at);
    } else {
        w.lit().extend_from_slice(bytes);
    }
    *at = here;
}

/// Writes `bytes`, a repeat of the copy at `at` if `same` and it is in the window.
fn run(w: &mut GzWriter, bytes: &[u8], same: bool, at: usize) {
    let here = w.raw_len();
    if same && at != NOWHERE && here - at <= WINDOW && bytes.len() >= MIN_COPY {
        w.repeat(bytes, here - at);
    } else {
        w.lit().extend_from_slice(bytes);
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use raylog_parsers::{classify, Correlator, FileParser, Options};

    use super::*;
    use crate::agent::batch::{doc_id, Batch, NodeIdentity};

    /// Lines of many files in turns (more than the slots), with ids that come and
    /// go, parser fields, a message quoting a document's keys, lines cut at the
    /// line limit, and times that cross midnight (a dated index changes name).
    pub fn batch() -> Batch {
        let labels = [("ray.io/node-type".to_string(), "head".to_string())].into();
        let node = Arc::new(NodeIdentity::new("node-a".into(), Some("c1".into()), labels));
        let mut b = Batch::new(1, node);
        let names: Vec<String> = (0..40)
            .map(|k| match k % 3 {
                0 => format!("raylet.out.{k}"),
                1 => format!("python-core-worker-{:056x}_{}.log", k * 7919, 5000 + k),
                _ => format!("worker-{:056x}-01000000-{}.out", k * 7919, 5000 + k),
            })
            .collect();
        let opts = Options { max_line_bytes: 20_000, ..Options::default() };
        let mut parsers: Vec<FileParser> =
            names.iter().map(|n| FileParser::new(classify(n, Some("session_x")), None, None)).collect();
        let mut corr = Correlator::new();
        let mut x: u64 = 11;
        for i in 0..3_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let k = if x >> 60 == 0 {
                (x >> 32) as usize % names.len()
            } else {
                (i / 40) as usize % 5 + (x >> 62) as usize
            };
            let (h, m) = (23 - (i < 1500) as u64, i % 60);
            let line = match (k % 3, x >> 57) {
                (_, 0) => format!("{}\n", "long".repeat(6_000)),
                (2, n) => format!("step {i}: a \"quote\" and ,\"component\":\"x\" loss {n}\n"),
                (_, n) => format!("[2026-11-30 {h:02}:{m:02}:00,080 I 4034 4034] node_manager.cc:{i}: task_id={:048x} worker_id={:056x} lease {i}\n", n % 3, n % 2),
            };
            let name = &names[k];
            let mut push = |r: &raylog_parsers::Record<'_>| {
                b.push(r, 1_764_600_000_000_000_000, doc_id(name, r.offset, r.message))
            };
            parsers[k].push(line.as_bytes(), &mut corr, &opts, &mut push);
        }
        for (k, p) in parsers.iter_mut().enumerate() {
            let name = &names[k];
            p.finish(&mut corr, &opts, &mut |r| {
                b.push(r, 1_764_600_000_000_000_000, doc_id(name, r.offset, r.message))
            });
        }
        b
    }

    #[test]
    fn a_document_is_cut_at_its_keys_not_at_text_that_quotes_them() {
        let b = batch();
        let members = b.node.json_members().as_bytes();
        let find = |hay: &[u8], key: &[u8]| hay.windows(key.len()).position(|w| w == key);
        let mut cut = 0;
        for e in &b.entries {
            let json = b.json_of(e).as_bytes();
            let c = Cuts::of(json, &e.pieces, members).expect("a record's JSON has every piece");
            // Where the writer says, and where a search for the keys finds them.
            assert_eq!(Some(c.members), find(json, b",\"component\":").map(|i| i + 1));
            assert!(json[..c.digits].ends_with(b",\"offset\":"));
            assert_eq!(std::str::from_utf8(&json[c.digits..c.ids]).unwrap(), e.offset.to_string());
            let rest = &json[c.ids..c.node];
            let fields = find(rest, b",\"fields\":").or_else(|| find(rest, b",\"truncated\":"));
            assert_eq!(c.fields, c.ids + fields.unwrap_or(rest.len()));
            assert_eq!(&json[c.node..], [members, b"}"].concat());
            let quoted: &[u8] = b",\\\"component\\\":";
            cut += find(&json[..c.members], quoted).is_some() as usize;
        }
        assert!(cut > 10, "messages quoting the keys were cut after them: {cut}");
        let e = &b.entries[0];
        let json = b.json_of(e).as_bytes();
        assert_eq!(Cuts::of(json, &Pieces::default(), members), None, "no pieces: sent whole");
        assert_eq!(Cuts::of(&json[..json.len() - 1], &e.pieces, members), None, "not ending in the node");
        assert_eq!(Cuts::of(b"{\"message\":\"x\"}", &e.pieces, members), None);
    }
}
