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

/// The most frequent value, ties to the first seen (deterministic output).
fn most_common<T: Copy + PartialEq>(values: impl Iterator<Item = T>) -> Option<T> {
    let mut counts: Vec<(T, usize)> = vec![];
    for v in values {
        match counts.iter_mut().find(|(x, _)| *x == v) {
            Some((_, n)) => *n += 1,
            None => counts.push((v, 1)),
        }
    }
    let best = counts.iter().map(|(_, n)| *n).max()?;
    counts.into_iter().find(|(_, n)| *n == best).map(|(v, _)| v)
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
pub fn life_of(w: Id, entries: &[&Entry]) -> Life {
    let own: Vec<&&Entry> = entries.iter().filter(|e| e.in_worker_file()).collect();
    let pick_node = most_common(own.iter().filter_map(|e| e.ids.node_id))
        .or_else(|| most_common(entries.iter().filter_map(|e| e.ids.node_id)));
    // Events carry whole seconds, which would put a death before the lines leading
    // to it; lines without a time of their own say little. Both count only when
    // nothing better exists.
    let precise = |e: &&&Entry| !e.inferred && !matches!(e.component.as_str(), "event" | "export_event");
    let timed: Vec<Timestamp> = entries.iter().filter(precise).filter_map(|e| e.timestamp).collect();
    let times = if timed.is_empty() { entries.iter().filter_map(|e| e.timestamp).collect() } else { timed };
    let facts: Vec<(Option<Timestamp>, ExitFact)> = entries
        .iter()
        .filter_map(|e| exit_fact(&e.component, &e.message, e.label.as_deref()).map(|f| (e.timestamp, f)))
        .collect();
    // Type and detail are chosen apart: GCS's `exits, type=` line has no detail, and
    // the event or the worker itself may say more.
    let detail = best_exit(facts.iter().filter(|(_, f)| f.detail.is_some()).cloned()).and_then(|f| f.detail);
    let exit = best_exit(facts.into_iter().filter(|(_, f)| f.exit_type.is_some()));
    Life {
        worker_id: Some(w),
        node_id: pick_node,
        pid: most_common(own.iter().filter_map(|e| e.pid))
            .or_else(|| entries.iter().find_map(|e| pid_in_text(&e.message))),
        job_id: most_common(own.iter().filter_map(|e| e.ids.job_id)).or_else(|| w.job_of_driver_worker()),
        actor_id: most_common(own.iter().filter_map(|e| e.ids.actor_id)),
        actor_class: own.iter().find(|e| e.component == "worker").and_then(|e| e.actor_name.clone()),
        start: times.iter().min().copied(),
        end: times.iter().max().copied(),
        exit_type: exit.and_then(|f| f.exit_type),
        exit_detail: detail,
        signal: entries.iter().find_map(|e| crash_signal(&e.message)),
        death_context: entries.iter().filter_map(|e| actor_failure(&e.message)).find_map(|f| f.death_context),
        driver: entries.iter().any(|e| e.component == "core_driver" && e.file_worker),
        records: entries.len(),
    }
}

/// `entries` grouped by the worker each is about ([`Entry::worker`], which may read
/// the text: asked once per entry), in their order.
pub fn by_worker<'a>(entries: &[&'a Entry]) -> HashMap<Id, Vec<&'a Entry>, IdMapState> {
    let mut by: HashMap<Id, Vec<&Entry>, IdMapState> = HashMap::default();
    for e in entries.iter().copied() {
        if let Some(w) = e.worker() {
            by.entry(w).or_default().push(e);
        }
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
