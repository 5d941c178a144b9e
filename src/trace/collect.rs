//! Collect: scan the inputs and keep the records of one trace, in time order.
//!
//! A task trace reads the inputs twice when it can (not from stdin): the first pass
//! only learns which workers ran the task and under which name, so the second can
//! pick that task's untagged stdout lines wherever they sit in the file order. Other
//! traces need one pass. `--context N` keeps, per file, a ring of the last N records
//! that were not selected, and emits them when a selected ERROR/FATAL follows.

use std::collections::VecDeque;

use raylog_parsers::ndjson::write_record;
use raylog_parsers::Record;

use super::entry::Entry;
use super::select::{Kind, Knowledge, Target};
use crate::discover::{Discovered, Origin};
use crate::scan::{scan_noted, scan_where, Note, ScanConfig, ScanReport, Seen};

/// The outcome of collecting a trace.
#[derive(Debug)]
pub struct Collected {
    /// Selected and context records, sorted by time (ties in scan order).
    pub entries: Vec<Entry>,
    pub knowledge: Knowledge,
    /// The report of the last pass (failures, warnings, counts).
    pub report: ScanReport,
}

/// Per-scan state: the current file, its context ring, and what was kept.
struct Collector<'a> {
    target: &'a Target,
    knowledge: Knowledge,
    context: usize,
    file: Option<(String, Option<String>, u64)>,
    /// The last `context` records of the current file; `None` for ones already kept.
    ring: VecDeque<Option<Entry>>,
    entries: Vec<Entry>,
    seq: u64,
    /// Entries keep their JSON (`--format json`).
    json: bool,
    buf: Vec<u8>,
}

impl Collector<'_> {
    /// Resets per-file state when a record comes from a different file than the last.
    /// Records of one file arrive together and with growing offsets.
    fn track_file(&mut self, r: &Record<'_>) {
        let same = self.file.as_ref().is_some_and(|(rel, session, off)| {
            *rel == r.file.rel_path && *session == r.file.session && r.offset >= *off
        });
        if !same {
            self.ring.clear();
            self.file = Some((r.file.rel_path.clone(), r.file.session.clone(), r.offset));
        } else if let Some(f) = &mut self.file {
            f.2 = r.offset;
        }
    }

    fn on_record(&mut self, r: &Record<'_>, json: Option<&str>) {
        self.track_file(r);
        self.knowledge.observe(self.target, r);
        let selected = self.knowledge.selects(self.target, r);
        if !selected && self.context == 0 {
            return;
        }
        self.seq += 1;
        let json = match (self.json, json) {
            (false, _) => None,
            (true, Some(j)) => Some(j.as_bytes()),
            (true, None) => {
                self.buf.clear();
                write_record(&mut self.buf, r);
                Some(&self.buf[..])
            }
        };
        let entry = Entry::from_record(r, self.seq, json);
        if !selected {
            self.push_ring(Some(entry));
            return;
        }
        if entry.is_error() {
            for slot in self.ring.iter_mut() {
                if let Some(mut c) = slot.take() {
                    c.context = true;
                    self.entries.push(c);
                }
            }
        }
        self.entries.push(entry);
        if self.context > 0 {
            self.push_ring(None);
        }
    }

    fn push_ring(&mut self, slot: Option<Entry>) {
        self.ring.push_back(slot);
        while self.ring.len() > self.context {
            self.ring.pop_front();
        }
    }
}

/// How many times [`collect`] reads the inputs: twice for a task (to learn its
/// workers and name first) unless stdin, which cannot be read again, is among them.
pub fn passes(disc: &Discovered, target: &Target) -> u64 {
    let rereadable = disc.files.iter().all(|f| f.origin != Origin::Stdin);
    if target.kind == Kind::Task && rereadable {
        2
    } else {
        1
    }
}

/// Scans `disc` and returns the trace of `target` with `context` records before
/// each error; with `json`, each entry keeps its record's JSON (for `--format
/// json`: text output needs none, and making it was a good part of a large trace's
/// work). `progress` gets bytes read, over all passes.
pub fn collect(
    disc: &Discovered,
    cfg: &ScanConfig,
    target: &Target,
    context: usize,
    json: bool,
    progress: &mut dyn FnMut(u64),
) -> Collected {
    let mut knowledge = Knowledge::default();
    if passes(disc, target) == 2 {
        let keep = |r: &Record<'_>, _: &mut Seen| target.may_teach(r);
        scan_where(disc, cfg, &keep, progress, &mut |r| knowledge.observe(target, r));
    }
    let mut c = Collector {
        target,
        knowledge,
        context,
        file: None,
        ring: VecDeque::with_capacity(context + 1),
        entries: vec![],
        seq: 0,
        json,
        buf: Vec::with_capacity(4096),
    };
    // Without context, a record neither selected nor teaching anything is dropped.
    let keep = |r: &Record<'_>, _: &mut Seen| context > 0 || target.may_teach(r) || target.may_select(r);
    // On many threads the workers write the NDJSON of each record that may be
    // selected: of a large trace, most of what the calling thread did per entry.
    let write = |r: &Record<'_>, out: &mut String| {
        let may = target.may_select(r);
        if may {
            super::entry::write_json(r, out);
        }
        may
    };
    let note: Option<Note<'_>> = if json { Some(&write) } else { None };
    let report = scan_noted(disc, cfg, &keep, note, progress, &mut |r, json| c.on_record(r, json));
    let mut entries = c.entries;
    // An entry is large (its ids are inline): sorting the keys and moving each
    // entry once beats moving entries through every merge of a stable sort.
    entries.sort_by_cached_key(|e| (e.timestamp, e.seq));
    Collected { entries, knowledge: c.knowledge, report }
}
