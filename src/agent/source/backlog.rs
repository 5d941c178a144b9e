//! The discovery backlog: files a listing found, tracked a chunk per round.
//!
//! A first listing of a million files finds a million new ones, and tracking one
//! costs a stat, and a prescan when it has something to read: over a minute for all
//! of them, in which nothing would be read, not even a line just written to
//! `raylet.out`. So a listing that finds more than [`TRACK_CHUNK`] new files keeps
//! them here and tracks [`TRACK_CHUNK`] per round; the rounds between read what is
//! tracked already, live files among it.
//!
//! Tracking a worker's files before its core-worker log would read its prints
//! before the log that names its actor was prescanned. So the backlog is ordered:
//! the files of no worker first (raylet, GCS, drivers: they name jobs and actors for
//! all), then the workers' files grouped by worker id, a group never split between
//! two chunks.

use super::files::Found;
use super::Source;

/// Files tracked (stat'ed, and prescanned when they have something to read) per
/// round while a backlog lasts: about a third of a second of work. A few in unit
/// tests, so the model test's listings go through the backlog too.
#[cfg(not(test))]
pub(super) const TRACK_CHUNK: usize = 16_384;
#[cfg(test)]
pub(super) const TRACK_CHUNK: usize = 3;

/// Files listed and not tracked yet, in the order they are to be tracked, last
/// first (taken from the end).
#[derive(Default)]
pub(super) struct Backlog {
    /// `(worker group, file)`; group 0: a file of no worker.
    files: Vec<(u64, Found)>,
    /// Found by the first listing (`start_at` applies to them).
    first: bool,
    /// Events were lost meanwhile: list again once the backlog is tracked.
    pub relist: bool,
}

impl Backlog {
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// The group of a file named `rel`: a hash of the worker id in its name (its
/// stdout and stderr, `worker-<id>-…`, and its core-worker log,
/// `python-core-worker-<id>_…`), else 0.
fn group(rel: &str) -> u64 {
    let base = rel.rsplit('/').next().unwrap_or(rel);
    let Some(rest) = base.strip_prefix("python-core-worker-").or_else(|| base.strip_prefix("worker-")) else {
        return 0;
    };
    let id = &rest.as_bytes()[..rest.bytes().take_while(u8::is_ascii_hexdigit).count()];
    if id.len() < 8 {
        return 0;
    }
    crate::agent::fnv::hash64(id) | 1
}

impl Source {
    /// Tracks what a listing found: at once when it is a few files, else
    /// [`TRACK_CHUNK`] now and the rest in the rounds that follow. Returns how many
    /// were tracked now.
    pub(super) fn track_found(&mut self, found: Vec<Found>) -> usize {
        let first = self.first_scan;
        if found.len() <= TRACK_CHUNK && self.backlog.is_empty() {
            return self.track(found, first).len();
        }
        // Room for all of them at once, not by doubling through each chunk.
        self.table.reserve(found.len());
        let names = &self.table.names;
        let mut files: Vec<(u64, Found)> = found.into_iter().map(|f| (group(&names.get(f.name)), f)).collect();
        // Group 0 last in the vector: taken first.
        files.sort_unstable_by_key(|(g, _)| std::cmp::Reverse(*g));
        files.extend(std::mem::take(&mut self.backlog.files));
        self.backlog = Backlog { files, first, relist: self.backlog.relist };
        self.track_backlog()
    }

    /// Tracks the next chunk of the backlog (see the module docs).
    pub(super) fn track_backlog(&mut self) -> usize {
        let files = &mut self.backlog.files;
        if files.is_empty() {
            return 0;
        }
        let mut at = files.len().saturating_sub(TRACK_CHUNK);
        // A worker's files stay together (group 0 may be cut anywhere).
        let g = files[at].0;
        while g != 0 && at > 0 && files[at - 1].0 == g {
            at -= 1;
        }
        let chunk: Vec<Found> = files.drain(at..).map(|(_, f)| f).collect();
        if files.is_empty() {
            *files = Vec::new();
        } else if files.len() * 2 < files.capacity() {
            // Given back as it drains: the table grows meanwhile.
            files.shrink_to_fit();
        }
        let first = self.backlog.first;
        self.track(chunk, first).len()
    }
}

#[cfg(test)]
mod tests {
    use super::group;

    #[test]
    fn a_workers_files_share_a_group_and_others_have_none() {
        let id = "a".repeat(40) + "0123456789abcdef";
        let out = group(&format!("worker-{id}-01000000-4242.out"));
        assert_ne!(out, 0);
        assert_eq!(group(&format!("worker-{id}-01000000-4242.err")), out);
        assert_eq!(group(&format!("python-core-worker-{id}_4242.log")), out);
        assert_eq!(group(&format!("old/worker-{id}-01000000-4242.out.1")), out);
        assert_ne!(group(&format!("worker-{}-01000000-4242.out", "b".repeat(56))), out);
        for other in
            ["raylet.out", "gcs_server.err", "python-core-driver-01000000_1.log", "worker-x.out", "events/e.log"]
        {
            assert_eq!(group(other), 0, "{other}");
        }
    }
}
