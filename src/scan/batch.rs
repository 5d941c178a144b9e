//! Records carried from a parse worker to the calling thread: what lets `health`
//! and `trace`, whose collectors keep state that depends on record order, use
//! [`super::parallel`] unchanged. A worker copies each record of its segment into a
//! [`Batch`] (its text in one string, its ids and times in a small struct); the
//! calling thread replays the batches in order as the same [`Record`]s, so the
//! collector sees exactly what the serial scan shows it. A caller's [`Note`] of a
//! record (`health`: an error's template) is worked out on the worker too and
//! handed over with it, so that work leaves the calling thread. A record the caller
//! only learns names from is copied as its [`Kept::Facts`]: no message, no pairs.

use std::collections::HashSet;
use std::ops::Range;

use raylog_parsers::id::IdMapState;
use raylog_parsers::record::{FieldValue, Fields, Ids};
use raylog_parsers::{FileMeta, Id, Level, Record, Timestamp};

use super::parallel::Fold;

/// One record, its strings as ranges of [`Batch::text`].
struct Rec {
    timestamp: Option<Timestamp>,
    timestamp_inferred: bool,
    timestamp_estimated: bool,
    truncated: bool,
    level: Option<Level>,
    message: Range<u32>,
    offset: u64,
    lines: u32,
    ids: Ids,
    pid: Option<u32>,
    task_name: Option<Range<u32>>,
    actor_name: Option<Range<u32>>,
    /// Its pairs in [`Batch::fields`].
    fields: Range<u32>,
    /// The caller's [`Note`] of it, in [`Batch::text`].
    note: Option<Range<u32>>,
    /// [`Kept::Whole`] or [`Kept::Facts`].
    kept: Kept,
}

/// One `fields` pair: key and value ranges, and whether the value is JSON.
struct Pair {
    key: Range<u32>,
    value: Range<u32>,
    json: bool,
}

/// The records of one segment (of one file).
#[derive(Default)]
pub struct Batch {
    meta: Option<FileMeta>,
    text: String,
    recs: Vec<Rec>,
    fields: Vec<Pair>,
    /// What the caller's [`Keep`] remembers of the segment so far.
    seen: Seen,
}

impl Batch {
    fn put(&mut self, s: &str) -> Range<u32> {
        let start = self.text.len() as u32;
        self.text.push_str(s);
        start..self.text.len() as u32
    }

    fn push(&mut self, r: &Record<'_>, kept: Kept, note: Option<Note<'_>>) {
        if self.meta.is_none() {
            self.meta = Some(r.file.clone());
        }
        let whole = kept == Kept::Whole;
        let message = if whole { self.put(r.message) } else { 0..0 };
        let task_name = r.task_name.map(|s| self.put(s));
        let actor_name = r.actor_name.map(|s| self.put(s));
        let first = self.fields.len() as u32;
        for f in r.fields.iter().filter(|_| whole) {
            let key = self.put(f.key);
            let (value, json) = match f.value {
                FieldValue::Str(v) => (self.put(v), false),
                FieldValue::Json(v) => (self.put(v), true),
            };
            self.fields.push(Pair { key, value, json });
        }
        let start = self.text.len() as u32;
        let note = note.filter(|_| whole).and_then(|f| {
            let noted = f(r, &mut self.text);
            noted.then_some(start..self.text.len() as u32)
        });
        self.recs.push(Rec {
            timestamp: r.timestamp,
            timestamp_inferred: r.timestamp_inferred,
            timestamp_estimated: r.timestamp_estimated,
            truncated: r.truncated,
            level: r.level,
            message,
            offset: r.offset,
            lines: r.lines,
            ids: *r.ids,
            pid: r.pid,
            task_name,
            actor_name,
            fields: first..self.fields.len() as u32,
            note,
            kept,
        });
    }

    fn str(&self, r: &Range<u32>) -> &str {
        &self.text[r.start as usize..r.end as usize]
    }

    /// Hands each record to `on_record`, as the parser made it (or its facts), with
    /// its note and how much of it was kept.
    pub fn replay(&self, on_record: &mut dyn FnMut(&Record<'_>, Option<&str>, Kept)) {
        let Some(meta) = &self.meta else { return };
        for rec in &self.recs {
            let mut fields = Fields::default();
            for p in &self.fields[rec.fields.start as usize..rec.fields.end as usize] {
                let v = self.str(&p.value);
                fields.push(self.str(&p.key), if p.json { FieldValue::Json(v) } else { FieldValue::Str(v) });
            }
            let record = Record {
                timestamp: rec.timestamp,
                timestamp_inferred: rec.timestamp_inferred,
                timestamp_estimated: rec.timestamp_estimated,
                level: rec.level,
                message: self.str(&rec.message),
                file: meta,
                offset: rec.offset,
                lines: rec.lines,
                ids: &rec.ids,
                pid: rec.pid,
                task_name: rec.task_name.as_ref().map(|r| self.str(r)),
                actor_name: rec.actor_name.as_ref().map(|r| self.str(r)),
                fields: &fields,
                truncated: rec.truncated,
                task_pending: false,
                at: Default::default(),
            };
            on_record(&record, rec.note.as_ref().map(|n| self.str(n)), rec.kept);
        }
    }
}

/// How much of a record a caller needs, asked of every record of a segment in
/// order, with the segment's [`Seen`]; what it says no to is not copied.
pub type Keep<'a> = &'a (dyn Fn(&Record<'_>, &mut Seen) -> Kept + Sync);

/// What a [`Keep`] asks a worker to copy of a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kept {
    No,
    /// The record, and the caller's [`Note`] of it.
    Whole,
    /// Its facts only: times, level, offset, ids, pid, task and actor names, file.
    /// It is replayed with an empty message, no pairs and no note. `health` learns
    /// the names of tasks from records that change nothing else: most of those it
    /// keeps, whose messages would cross to the calling thread for nothing.
    Facts,
}

/// What a [`Keep`] remembers of the segment it is sifting, for a caller that needs
/// only the first record of a segment to say something (`health` learns a worker's
/// pid from the first record that names both). The records a worker copies are a
/// run of the serial order, so the first of a run is at least as early as any the
/// caller could still learn from; the rest are not copied.
#[derive(Default)]
pub struct Seen {
    ids: HashSet<(u8, Id), IdMapState>,
    /// The last id asked per kind: a file's records name the same few ids over and
    /// over, and comparing is cheaper than hashing.
    last: [Option<Id>; Seen::KINDS],
}

impl Seen {
    /// Kinds are `0..KINDS`.
    pub const KINDS: usize = 4;

    /// True the first time `(kind, id)` is asked in this segment.
    pub fn first(&mut self, kind: u8, id: Id) -> bool {
        let last = &mut self.last[kind as usize];
        if *last == Some(id) {
            return false;
        }
        *last = Some(id);
        self.ids.insert((kind, id))
    }

    fn clear(&mut self) {
        self.ids.clear();
        self.last = [None; Seen::KINDS];
    }
}

/// What a caller works out of a record it keeps, on the worker: appended to the
/// string, or false for nothing.
pub type Note<'a> = &'a (dyn Fn(&Record<'_>, &mut String) -> bool + Sync);

/// The [`Fold`] that copies every record `keep` wants into a [`Batch`], with its
/// note.
pub struct Copy<'a> {
    pub keep: Keep<'a>,
    pub note: Option<Note<'a>>,
}

impl Fold for Copy<'_> {
    type Piece = Batch;

    fn add(&self, b: &mut Batch, r: &Record<'_>) {
        match (self.keep)(r, &mut b.seen) {
            Kept::No => {}
            kept => b.push(r, kept, self.note),
        }
    }

    fn reset(&self, b: &mut Batch) {
        b.meta = None;
        b.text.clear();
        b.recs.clear();
        b.fields.clear();
        b.seen.clear();
    }
}
