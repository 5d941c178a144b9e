//! The life of one worker process as the trace's records tell it: where and as which
//! pid it ran, when it was first and last heard of, and how it exited.
//!
//! An actor incarnation, a task attempt and a `--worker-id` trace are all such a
//! life, so they share this code.

use std::collections::HashMap;

use raylog_parsers::id::IdMapState;
use raylog_parsers::{Id, Timestamp};

use super::entry::Entry;
use super::facts::{actor_failure, crash_signal, exit_fact, pid_in_text, ExitFact};

/// One worker process.
#[derive(Clone, Debug, Default)]
pub struct Life {
    pub worker_id: Option<Id>,
    pub node_id: Option<Id>,
    pub pid: Option<u32>,
    pub job_id: Option<Id>,
    pub actor_id: Option<Id>,
    /// The class its `:actor_name:` marker named.
    pub actor_class: Option<String>,
    pub start: Option<Timestamp>,
    pub end: Option<Timestamp>,
    pub exit_type: Option<String>,
    pub exit_detail: Option<String>,
    /// A crash dump's signal (`*** SIGSEGV received`).
    pub signal: Option<String>,
    /// GCS's `death context type` when it failed an actor on this worker.
    pub death_context: Option<String>,
    /// A driver (its core log is `python-core-driver-*`).
    pub driver: bool,
    pub records: usize,
}

/// Counts values to give the most frequent, ties to the first seen (deterministic
/// output). A worker's records name one node, job or pid, a few at most: a list
/// beats a map.
struct Tally<T> {
    counts: Vec<(T, usize)>,
}

impl<T: Copy + PartialEq> Tally<T> {
    fn new() -> Tally<T> {
        Tally { counts: Vec::new() }
    }

    fn add(&mut self, v: Option<T>) {
        let Some(v) = v else { return };
        match self.counts.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => self.counts.push((v, 1)),
        }
    }

    fn most_common(&self) -> Option<T> {
        let best = self.counts.iter().map(|(_, n)| *n).max()?;
        self.counts.iter().find(|(_, n)| *n == best).map(|(v, _)| *v)
    }
}

/// Earliest and latest of some times.
#[derive(Clone, Copy, Default)]
pub(super) struct TimeRange(Option<(Timestamp, Timestamp)>);

impl TimeRange {
    pub(super) fn add(&mut self, t: Timestamp) {
        self.0 = Some(self.0.map_or((t, t), |(a, b)| (a.min(t), b.max(t))));
    }

    /// The earliest and the latest, if any time was added.
    pub(super) fn bounds(self) -> (Option<Timestamp>, Option<Timestamp>) {
        (self.0.map(|t| t.0), self.0.map(|t| t.1))
    }
}

/// The strongest exit statement; among equals, the latest.
fn best_exit(facts: impl Iterator<Item = (Option<Timestamp>, ExitFact)>) -> Option<ExitFact> {
    let mut best: Option<(Option<Timestamp>, ExitFact)> = None;
    for (t, f) in facts {
        let better = match &best {
            None => true,
            Some((bt, b)) => f.source < b.source || (f.source == b.source && t >= *bt),
        };
        if better {
            best = Some((t, f));
        }
    }
    best.map(|(_, f)| f)
}

/// The life of worker `w` from the records about it (`entries` all name `w`).
///
/// One pass over the entries: a large trace's entries are cold in cache by now, and
/// a pass per fact (eleven) made up most of the summary's time.
pub fn life_of(w: Id, entries: &[&Entry]) -> Life {
    let (mut own_nodes, mut nodes, mut pids, mut jobs, mut actors) =
        (Tally::new(), Tally::new(), Tally::new(), Tally::new(), Tally::new());
    // Events carry whole seconds, which would put a death before the lines leading
    // to it; lines without a time of their own say little. Both count only when
    // nothing better exists.
    let (mut precise, mut any) = (TimeRange::default(), TimeRange::default());
    let mut facts: Vec<(Option<Timestamp>, ExitFact)> = Vec::new();
    let (mut actor_class, mut signal, mut death_context, mut driver) = (None, None, None, false);
    for e in entries {
        nodes.add(e.ids.node_id);
        if e.in_worker_file() {
            own_nodes.add(e.ids.node_id);
            pids.add(e.pid);
            jobs.add(e.ids.job_id);
            actors.add(e.ids.actor_id);
            if actor_class.is_none() && e.component() == "worker" {
                actor_class = Some(e.actor_name.clone());
            }
        }
        if let Some(t) = e.timestamp {
            any.add(t);
            if !e.inferred && !matches!(e.component(), "event" | "export_event") {
                precise.add(t);
            }
        }
        if let Some(f) = exit_fact(e.component(), &e.message, e.label.as_deref()) {
            facts.push((e.timestamp, f));
        }
        if signal.is_none() {
            signal = crash_signal(&e.message);
        }
        if death_context.is_none() {
            death_context = actor_failure(&e.message).and_then(|f| f.death_context);
        }
        driver |= e.component() == "core_driver" && e.file_worker;
    }
    let (start, end) = if precise.0.is_some() { precise } else { any }.bounds();
    // Type and detail are chosen apart: GCS's `exits, type=` line has no detail, and
    // the event or the worker itself may say more.
    let detail = best_exit(facts.iter().filter(|(_, f)| f.detail.is_some()).cloned()).and_then(|f| f.detail);
    let exit = best_exit(facts.into_iter().filter(|(_, f)| f.exit_type.is_some()));
    Life {
        worker_id: Some(w),
        node_id: own_nodes.most_common().or_else(|| nodes.most_common()),
        pid: pids.most_common().or_else(|| entries.iter().find_map(|e| pid_in_text(&e.message))),
        job_id: jobs.most_common().or_else(|| w.job_of_driver_worker()),
        actor_id: actors.most_common(),
        actor_class: actor_class.flatten(),
        start,
        end,
        exit_type: exit.and_then(|f| f.exit_type),
        exit_detail: detail,
        signal,
        death_context,
        driver,
        records: entries.len(),
    }
}

/// `entries` grouped by the worker each is about ([`Entry::worker`], which may read
/// the text: asked once per entry), in their order.
pub fn by_worker<'a>(entries: &[&'a Entry]) -> HashMap<Id, Vec<&'a Entry>, IdMapState> {
    let mut by: HashMap<Id, Vec<&Entry>, IdMapState> = HashMap::default();
    // Neighbours in time mostly share a worker: a run is gathered apart and added
    // when the worker changes, rather than hashing every entry's 57-byte id.
    let (mut run_of, mut run): (Option<Id>, Vec<&Entry>) = (None, Vec::new());
    for e in entries.iter().copied() {
        let Some(w) = e.worker() else { continue };
        if run_of != Some(w) {
            if let Some(rw) = run_of.replace(w) {
                by.entry(rw).or_default().append(&mut run);
            }
        }
        run.push(e);
    }
    if let Some(rw) = run_of {
        by.entry(rw).or_default().append(&mut run);
    }
    by
}

/// Lives of every worker named by `entries`, ordered by start time, then worker id.
pub fn lives(entries: &[&Entry]) -> Vec<Life> {
    let mut v: Vec<Life> = by_worker(entries).into_iter().map(|(w, es)| life_of(w, &es)).collect();
    v.sort_by(|a, b| {
        (a.start, a.worker_id.map(|w| w.as_str().to_string()))
            .cmp(&(b.start, b.worker_id.map(|w| w.as_str().to_string())))
    });
    v
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use raylog_parsers::Options;

    use super::*;
    use crate::discover::discover;
    use crate::scan::ScanConfig;
    use crate::trace::{collect, Kind, Target};

    fn most_common<T: Copy + PartialEq>(values: impl Iterator<Item = T>) -> Option<T> {
        let mut t = Tally::new();
        values.for_each(|v| t.add(Some(v)));
        t.most_common()
    }

    /// `life_of` as it was first written, a pass per fact: the reference.
    fn reference(w: Id, entries: &[&Entry]) -> Life {
        let own: Vec<&&Entry> = entries.iter().filter(|e| e.in_worker_file()).collect();
        let precise = |e: &&&Entry| !e.inferred && !matches!(e.component(), "event" | "export_event");
        let timed: Vec<Timestamp> = entries.iter().filter(precise).filter_map(|e| e.timestamp).collect();
        let times = if timed.is_empty() { entries.iter().filter_map(|e| e.timestamp).collect() } else { timed };
        let facts: Vec<(Option<Timestamp>, ExitFact)> = entries
            .iter()
            .filter_map(|e| exit_fact(e.component(), &e.message, e.label.as_deref()).map(|f| (e.timestamp, f)))
            .collect();
        let detail = best_exit(facts.iter().filter(|(_, f)| f.detail.is_some()).cloned()).and_then(|f| f.detail);
        let exit = best_exit(facts.into_iter().filter(|(_, f)| f.exit_type.is_some()));
        Life {
            worker_id: Some(w),
            node_id: most_common(own.iter().filter_map(|e| e.ids.node_id))
                .or_else(|| most_common(entries.iter().filter_map(|e| e.ids.node_id))),
            pid: most_common(own.iter().filter_map(|e| e.pid))
                .or_else(|| entries.iter().find_map(|e| pid_in_text(&e.message))),
            job_id: most_common(own.iter().filter_map(|e| e.ids.job_id)).or_else(|| w.job_of_driver_worker()),
            actor_id: most_common(own.iter().filter_map(|e| e.ids.actor_id)),
            actor_class: own.iter().find(|e| e.component() == "worker").and_then(|e| e.actor_name.clone()),
            start: times.iter().min().copied(),
            end: times.iter().max().copied(),
            exit_type: exit.and_then(|f| f.exit_type),
            exit_detail: detail,
            signal: entries.iter().find_map(|e| crash_signal(&e.message)),
            death_context: entries.iter().filter_map(|e| actor_failure(&e.message)).find_map(|f| f.death_context),
            driver: entries.iter().any(|e| e.component() == "core_driver" && e.file_worker),
            records: entries.len(),
        }
    }

    /// Every worker's life in the fixtures' job traces, from the one pass and from the
    /// reference, field by field (the fixtures hold crashes, OOM kills, actor
    /// failures, restarts and drivers).
    #[test]
    fn one_pass_tells_each_life_as_a_pass_per_fact_does() {
        let cfg = ScanConfig { opts: Options::default(), stdin_name: None, fixed_mtime: None, threads: 1 };
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let (mut lives, mut exits, mut signals) = (0, 0, 0);
        for dir in std::fs::read_dir(&root).expect("fixtures").flatten().filter(|d| d.path().is_dir()) {
            let dir = dir.path();
            let disc = discover(std::slice::from_ref(&dir));
            let target = Target::parse(Kind::Job, "01000000").expect("a job id");
            let got = collect(&disc, &cfg, &target, 0, false, &mut |_| {});
            let sorted = got.sorted();
            for (w, es) in by_worker(&sorted) {
                let (one, want) = (life_of(w, &es), reference(w, &es));
                assert_eq!(format!("{one:?}"), format!("{want:?}"), "{}: worker {}", dir.display(), w.as_str());
                lives += 1;
                exits += one.exit_type.is_some() as usize;
                signals += one.signal.is_some() as usize;
            }
        }
        assert!(lives > 20 && exits > 3, "{lives} lives, {exits} with an exit type, {signals} with a signal");
    }
}
