//! Forgetting the workers whose files are all read and quiet.
//!
//! The correlator keeps a slot for every worker whose file it prescanned (its job
//! and actor class, from the `:job_id:`/`:actor_name:` lines at the file's start):
//! a worker's other files (its core-worker log) need them, and the prescan runs
//! before any file is read, so they are known whatever order files are read in.
//! Once every file of a worker is read to its end and has not changed for a while,
//! no record needs them any more: each file resumes from the context it ended in
//! (its job, its actor's name), and other files' lines ask only for the actor a
//! worker hosts, which is kept. A node that ran for weeks then holds what its live
//! workers need, not a slot for each of the hundreds of thousands it ever started:
//! the state every restarted agent is in already (it does not prescan files read to
//! their end).
//!
//! A worker whose only file is one stdout or stderr file (no other stream, no
//! core-worker log, no rotation: what a million finished workers' files on one node
//! look like) needs no slot at all once that file is [`ALONE_AFTER`] old: its records
//! take job and class from the file's own context, and nothing else asks. Its
//! prescan does not teach the correlator, and the slot its reading makes is dropped
//! when the file is closed read to its end (a million 60-byte slots held through a
//! catch-up were a quarter of the agent's peak memory). A worker writes its markers
//! only once its core worker is up, and so its core-worker log made, so a file
//! with markers and no core-worker log beside it will not get one; should it be
//! rotated later, the continuation recalls the facts from the rotated file's
//! context when opened ([`Source::recall_sibling`]).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use raylog_parsers::id::PackedId;
use raylog_parsers::{classify, FileMeta};

use super::table::{Place, Tracked, View};
use super::tail::Tailed;
use super::Source;

/// How long all of a worker's files must have been unchanged before it is
/// forgotten: a pooled worker idle for less may run another task.
pub(super) const QUIET: Duration = Duration::from_secs(600);
/// How long a worker's only file must have been unwritten before its worker is
/// kept out of the correlator (see the module docs): a margin for a Ray whose
/// worker writes a marker before its core-worker log is made.
const ALONE_AFTER: Duration = Duration::from_secs(10);

/// How often the table is looked through for quiet workers, when idle: a look
/// costs a pass over the table, and a name's parse for each worker file not quiet
/// (about a second at a million files, in the minutes when some are and some not).
const EVERY: Duration = Duration::from_secs(300);

impl Source {
    /// Forgets the workers whose files are all read and unchanged for `quiet_for`
    /// ([`QUIET`]; see the module docs), at most every [`EVERY`], and only between
    /// catch-ups: while files are being read, every one of them names a worker still
    /// needed. Returns how many were forgotten.
    pub(super) fn forget_quiet_workers(&mut self, now: Instant, quiet_for: Duration) -> usize {
        if self.once || now < self.next_forget || !self.backlog.is_empty() || self.table.ready_len() > 0 {
            return 0;
        }
        self.next_forget = now + EVERY;
        // Only the names of worker files (`worker-`, `python-core-worker-`) start
        // with a token.
        let names = &self.table.names;
        let worker_file = |t: &Tracked| names.leading_token(t.name).is_some();
        if self.corr.workers() == 0 || !self.table.values().any(|t| worker_file(&t) && quiet(t, quiet_for)) {
            return 0;
        }
        let mut busy: HashSet<PackedId> = HashSet::new();
        for t in self.table.values().filter(|t| !quiet(*t, quiet_for)) {
            if let Some(k) = self.worker_key(&t) {
                busy.insert(k);
            }
        }
        let gone = self.corr.forget_workers(|k| busy.contains(k));
        if gone > 0 {
            tracing::debug!(gone, kept = self.corr.workers(), "forgot the workers whose files are all read and quiet");
            crate::agent::trim_heap();
        }
        gone
    }

    /// Whether worker file `meta` of dir `dir`, unwritten for `unwritten`, is its
    /// worker's only file (see the module docs): [`ALONE_AFTER`] old, a stdout or
    /// stderr file not rotated, and neither its other stream, its rotation `.1` nor
    /// its worker's core-worker log is tracked.
    pub(super) fn alone(&self, dir: u32, meta: &FileMeta, unwritten: Duration) -> bool {
        let (Some(w), Some(pid), Some(_), None) = (&meta.worker_id, meta.pid, meta.stream, meta.rotation) else {
            return false;
        };
        if unwritten < ALONE_AFTER {
            return false;
        }
        let rel = meta.rel_path.as_str();
        let Some(other) = sibling_stream(rel) else { return false };
        let at = rel.rfind('/').map_or(0, |i| i + 1);
        let core = format!("{}python-core-worker-{}_{pid}.log", &rel[..at], w.as_str());
        let tracked = |name: &str| self.table.by_path(dir, name).is_some();
        !tracked(&other) && !tracked(&format!("{rel}.1")) && !tracked(&core)
    }

    /// Forgets the worker of `open`, a file just closed read to its end, when the
    /// file is its worker's only one and [`ALONE_AFTER`] old.
    pub(super) fn forget_if_alone(&mut self, dir: u32, open: &Tailed) {
        let Some(w) = open.meta.worker_key() else { return };
        if self.alone(dir, &open.meta, open.quiet_for()) {
            self.corr.forget_worker(&w);
        }
    }

    /// Tells the correlator what the rotated file before `meta` (its `.1`) ended
    /// with, when the worker of `meta`, a file with no context of its own, is not
    /// known: a continuation written after its worker was forgotten.
    pub(super) fn recall_sibling(&mut self, dir: u32, meta: &FileMeta) {
        if meta.worker_id.is_none_or(|w| self.corr.job_of(&w).is_some()) {
            return;
        }
        let Some(w) = meta.worker_key() else { return };
        let Some(prev) = self.table.by_path(dir, &format!("{}.1", meta.rel_path)) else { return };
        if let Some(c) = self.table.get(&prev).and_then(|t| self.table.context_of(t)).map(|c| &**c) {
            self.corr.recall_worker(&w, c.job_id.as_deref(), c.actor_name.as_deref());
        }
    }

    fn worker_key(&self, t: &View<'_>) -> Option<PackedId> {
        match t.open {
            Some(open) => open.meta.worker_key(),
            None => classify(&self.table.rel(t), None).worker_key(),
        }
    }
}

/// `worker-….out` for `worker-….err` and back.
fn sibling_stream(rel: &str) -> Option<String> {
    let (stem, ext) = rel.rsplit_once('.')?;
    let other = match ext {
        "out" => "err",
        "err" => "out",
        _ => return None,
    };
    Some(format!("{stem}.{other}"))
}

/// Whether a file is read to its end, closed, where it was, and unchanged for
/// `quiet_for`.
fn quiet(t: View<'_>, quiet_for: Duration) -> bool {
    t.open.is_none() && !t.has_work() && !t.unverified() && t.place() == Place::Here && t.active.elapsed() >= quiet_for
}
