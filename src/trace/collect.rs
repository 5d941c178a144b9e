//! Collect: scan the inputs and keep the records of one trace, in time order.
//!
//! A task trace reads the inputs twice when it can (not from stdin): the first pass
//! only learns which workers ran the task and under which name, so the second can
//! pick that task's untagged stdout lines wherever they sit in the file order. Other
//! traces need one pass. `--context N` keeps, per file, a ring of the last N records
//! that were not selected, and emits them when a selected ERROR/FATAL follows.

use std::collections::VecDeque;
use std::sync::Arc;

use raylog_parsers::record::Ids;
use raylog_parsers::{FileMeta, Record, Timestamp};

use super::entry::Entry;
use super::select::{Kind, Knowledge, Target};
use crate::discover::{Discovered, Origin};
use crate::scan::{scan_where, ScanConfig, ScanReport, Seen};

/// The outcome of collecting a trace.
#[derive(Debug)]
pub struct Collected {
    /// Selected and context records, in scan order: [`Collected::sorted`] gives them
    /// in time order.
    pub entries: Vec<Entry>,
    /// Indices into `entries` in time order (ties in scan order).
    order: Vec<u32>,
    /// `(time, seq)` of each entry, by index.
    keys: Vec<(Option<Timestamp>, u64)>,
    /// Selected records (the entries that are not context).
    pub records: usize,
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
    /// `(time, seq)` of each entry, by index: sorting the entries themselves (576
    /// bytes each then, cold in cache after a large scan) took a tenth of a large
    /// trace's run.
    keys: Vec<(Option<Timestamp>, u64)>,
    records: usize,
    /// The ids of the last entry made, shared by the next ones that have the same.
    last_ids: Option<Arc<Ids>>,
    /// The file of the last entry made, shared likewise.
    last_meta: Option<Arc<FileMeta>>,
    seq: u64,
    /// Entries keep what their JSON needs (`--format json`).
    json: bool,
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

    fn on_record(&mut self, r: &Record<'_>) {
        self.track_file(r);
        self.knowledge.observe(self.target, r);
        let selected = self.knowledge.selects(self.target, r);
        if !selected && self.context == 0 {
            return;
        }
        self.seq += 1;
        let (ids, meta) = (shared(&mut self.last_ids, r.ids), shared(&mut self.last_meta, r.file));
        let entry = Entry::from_record(r, self.seq, self.json, meta, ids);
        if !selected {
            self.push_ring(Some(entry));
            return;
        }
        if entry.is_error() {
            for slot in self.ring.iter_mut() {
                if let Some(mut c) = slot.take() {
                    c.context = true;
                    self.keys.push((c.timestamp, c.seq));
                    self.entries.push(c);
                }
            }
        }
        self.keys.push((entry.timestamp, entry.seq));
        self.entries.push(entry);
        self.records += 1;
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

/// `last` when it holds `value`, else a new `Arc` of it, kept as `last` for the next
/// entries: neighbours mostly share their file and ids.
fn shared<T: Clone + PartialEq>(last: &mut Option<Arc<T>>, value: &T) -> Arc<T> {
    match last {
        Some(l) if **l == *value => l.clone(),
        _ => last.insert(Arc::new(value.clone())).clone(),
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
/// each error; with `json`, each entry keeps what its record's JSON needs (for
/// `--format json`: text output needs less). `progress` gets bytes read, over all
/// passes.
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
        keys: vec![],
        records: 0,
        last_ids: None,
        last_meta: None,
        seq: 0,
        json,
    };
    // Without context, a record neither selected nor teaching anything is dropped.
    let keep = |r: &Record<'_>, _: &mut Seen| context > 0 || target.may_teach(r) || target.may_select(r);
    let report = scan_where(disc, cfg, &keep, progress, &mut |r| c.on_record(r));
    // The keys are distinct (`seq`): an unstable sort gives the one order.
    let mut order: Vec<u32> = (0..c.entries.len() as u32).collect();
    if !c.keys.is_sorted() {
        order.sort_unstable_by_key(|&i| c.keys[i as usize]);
    }
    Collected { entries: c.entries, order, keys: c.keys, records: c.records, knowledge: c.knowledge, report }
}

impl Collected {
    /// The entries in time order (ties in scan order). The entries stay where the
    /// scan put them: moving them into order cost more than reading them through
    /// these references.
    pub fn sorted(&self) -> Vec<&Entry> {
        self.order.iter().map(|&i| &self.entries[i as usize]).collect()
    }

    /// The entries' times, in scan order (read from a compact copy, not the entries).
    pub fn times(&self) -> impl Iterator<Item = Timestamp> + '_ {
        self.keys.iter().filter_map(|k| k.0)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use raylog_parsers::Options;

    use super::*;
    use crate::discover::discover;

    /// The entries stay in scan order; `sorted` gives each once, by time then scan
    /// order, context records included, and `records` counts the rest.
    #[test]
    fn sorted_gives_every_entry_once_in_time_order() {
        let cfg = ScanConfig { opts: Options::default(), stdin_name: None, fixed_mtime: None, threads: 1 };
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let disc = discover(&[root.join("ray-2.60-text")]);
        let job = collect(&disc, &cfg, &Target::parse(Kind::Job, "01000000").expect("a job id"), 0, false, &mut |_| {});
        // The task whose traceback is an ERROR with other records of its file before it.
        let task = job.entries.iter().find(|e| e.task_name.as_deref() == Some("tracebacks") && e.ids.task_id.is_some());
        let task = task.and_then(|e| e.ids.task_id).expect("the tracebacks task");
        let target = Target::parse(Kind::Task, task.as_str()).expect("a task id");
        let with_context = collect(&disc, &cfg, &target, 2, false, &mut |_| {});
        let context = with_context.entries.iter().filter(|e| e.context).count();
        assert!(context > 0, "context records before the traceback");
        // Two sessions: files of each in turn, so scan order is not time order.
        let both = discover(&[root.join("ray-2.60-text"), root.join("ray-2.60-health")]);
        let job = collect(&both, &cfg, &Target::parse(Kind::Job, "01000000").expect("a job id"), 0, false, &mut |_| {});
        assert!(!job.entries.is_sorted_by_key(|e| (e.timestamp, e.seq)), "scan order is time order: nothing sorted");
        // Neighbours with the same ids share them (`Entry::from_record` checks they are the record's).
        let shared = job.entries.windows(2).filter(|p| Arc::ptr_eq(&p[0].ids, &p[1].ids)).count();
        let equal = job.entries.windows(2).filter(|p| p[0].ids == p[1].ids).count();
        assert!(shared == equal && shared > job.entries.len() / 2, "{shared} shared, {equal} equal");
        for got in [with_context, job] {
            let sorted = got.sorted();
            assert_eq!(sorted.len(), got.entries.len());
            assert!(sorted.windows(2).all(|p| (p[0].timestamp, p[0].seq) < (p[1].timestamp, p[1].seq)));
            let mut seqs: Vec<u64> = sorted.iter().map(|e| e.seq).collect();
            seqs.sort_unstable();
            seqs.dedup();
            assert_eq!(seqs.len(), got.entries.len(), "each entry once");
            assert_eq!(got.records, got.entries.iter().filter(|e| !e.context).count());
            assert_eq!(got.times().count(), got.entries.iter().filter(|e| e.timestamp.is_some()).count());
        }
    }
}
