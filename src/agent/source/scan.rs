//! The prescan of a file when it is found: before any file is parsed, what it says
//! for the others (a worker's actor and job, a logs dir's node id, a worker's
//! latest time) is learned, and its place in the time order is told from its first
//! record's time, so a catch-up can start without opening every file once.

use std::path::Path;

use raylog_parsers::{classify, Timestamp};

use super::Source;
use crate::agent::checkpoint::FileKey;

impl Source {
    /// Prescans the files `work` found with something to read after a restart, and
    /// the core-worker logs of the workers among them (read before the restart, but
    /// the ones that name the worker's actor).
    pub(super) fn prescan_resumed(&mut self, work: &[FileKey]) {
        let mut keys = work.to_vec();
        for key in work {
            let Some(t) = self.table.get(key) else { continue };
            let meta = classify(&self.table.rel(t), None);
            if let (Some(w), Some(pid), Some(_)) = (meta.worker_id, meta.pid, meta.stream) {
                let log = format!("python-core-worker-{}_{pid}.log", w.as_str());
                keys.extend(self.table.by_path(t.dir(), &log));
            }
        }
        // A core-worker log with work of its own is prescanned once.
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            let Some(t) = self.table.get(&key) else { continue };
            let (dir, rel) = (t.dir(), self.table.rel(t));
            let meta = classify(&rel, self.dirs[dir as usize].session.as_deref());
            self.prescan(dir, &self.dirs[dir as usize].root.join(&rel), &meta);
        }
    }

    /// Learns correlation (actor of a worker, job of a worker), the file's time hint
    /// and a raylet's node id from what a file holds when it is found, before any file
    /// is parsed: the bytes before a resume offset will not be parsed again, and a
    /// worker's stdout may be read before the core-worker log that names its actor.
    /// Same pass as `raylog parse` makes, so the agent and the CLI tag the same records.
    ///
    /// Returns the time its first record will have, when that can be told: files
    /// are read in time order (see [`super::read`]), and a file whose place in time
    /// is unknown would hold every other back until it is opened.
    pub(super) fn prescan(&mut self, dir: u32, path: &Path, meta: &raylog_parsers::FileMeta) -> Option<i64> {
        if !crate::prescan::wanted_by_prescan(meta) {
            return None;
        }
        use std::io::Read;
        let f = std::fs::File::open(path).ok()?;
        let mtime = f.metadata().ok().and_then(|md| md.modified().ok());
        // A worker's only file teaches nothing another file needs (see `quiet`).
        let unwritten = mtime.and_then(|m| m.elapsed().ok()).unwrap_or_default();
        let teach = !self.alone(dir, meta, unwritten);
        let mut found = crate::prescan::Prescanned::default();
        let mut first = None;
        let limit = crate::prescan::prescan_limit(meta);
        let _ = crate::lines::for_each_line_chunk(f.take(limit), |c| {
            if first.is_none() && meta.component != "worker" {
                first = crate::prescan::first_line_time(meta, c, self.corr.zone());
            }
            if teach {
                crate::prescan::prescan_bytes(meta, c, &mut self.corr, &mut found)
            } else {
                crate::prescan::prescan_own(meta, c, self.corr.zone(), &mut found)
            }
        });
        if let (Some(n), d) = (found.node, &mut self.dirs[dir as usize]) {
            d.node.get_or_insert(n);
        }
        if meta.component == "worker" {
            let mtime = mtime.and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok());
            let mtime = mtime.and_then(|d| i64::try_from(d.as_nanos()).ok()).map(Timestamp);
            first = raylog_parsers::untimed_first(meta, mtime, found.time_hint, &self.corr);
        }
        first.map(|t| t.0)
    }
}
