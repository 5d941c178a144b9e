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

use std::collections::HashSet;
use std::time::{Duration, Instant};

use raylog_parsers::classify;
use raylog_parsers::id::PackedId;

use super::table::{Place, Tracked};
use super::Source;

/// How long all of a worker's files must have been unchanged before it is
/// forgotten: a pooled worker idle for less may run another task.
pub(super) const QUIET: Duration = Duration::from_secs(600);
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
        if self.corr.workers() == 0 || !self.table.values().any(|t| worker_file(t) && quiet(t, quiet_for)) {
            return 0;
        }
        let mut busy: HashSet<PackedId> = HashSet::new();
        for t in self.table.values().filter(|t| !quiet(t, quiet_for)) {
            if let Some(k) = self.worker_key(t) {
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

    fn worker_key(&self, t: &Tracked) -> Option<PackedId> {
        match &t.open {
            Some(open) => open.meta.worker_key(),
            None => classify(&self.table.rel(t), None).worker_key(),
        }
    }
}

/// Whether a file is read to its end, closed, where it was, and unchanged for
/// `quiet_for`.
fn quiet(t: &Tracked, quiet_for: Duration) -> bool {
    t.open.is_none() && !t.has_work() && !t.unverified && t.place == Place::Here && t.active.elapsed() >= quiet_for
}
