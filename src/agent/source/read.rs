//! Reading: the round over the files that changed, in time order, and the
//! descriptors it needs.
//!
//! A file is opened when it has something to read. At the `max_open_files` cap the
//! least recently active open file is closed, preferring one that holds nothing (no
//! pending record, partial line or record kept back by the time limit, no held actor
//! output); one that holds something is re-read from where that starts when it is
//! reopened. A finished file (mtime older than `idle_flush`) is flushed at its end,
//! so it holds nothing. `EMFILE` closes a file and leaves the open to the next
//! round, never retrying at once. Closing keeps where reading resumes and the
//! parser context there, so a reopened file continues exactly, even if it was
//! renamed meanwhile.

use std::collections::BinaryHeap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Instant;

use raylog_parsers::{classify, Correlator, Options, Record, Timestamp};

use super::table::{Place, Tick, View};
use super::tail::{ReadResult, Tailed};
use super::{Source, MERGE_SLACK, READ_BUDGET, READ_CHUNK, STOP_READ_MAX};
use crate::agent::checkpoint::{FileKey, SavedContext};
use crate::agent::enrich::node::{self, RAYLET_NODE_SCAN};

/// The most closed files one round reads (see [`Source::read_round`]). Three in
/// the unit tests, so that the model test's rounds run into the cap.
#[cfg(not(test))]
const ROUND_FILES: usize = 8192;
#[cfg(test)]
const ROUND_FILES: usize = 3;

/// How an attempt to open a file went.
enum Opened {
    Yes,
    /// Not now (at the cap, out of descriptors): it stays ready.
    Later,
    /// Cannot be opened (gone, unreadable).
    Never,
}

impl Source {
    /// Reads the files with something to read, oldest next record first, up to
    /// [`MERGE_SLACK`] past the oldest (see the module docs). True when it made
    /// progress: bytes read, a file learned when its next record is, or finished.
    pub(super) fn read_round(&mut self) -> bool {
        // The oldest ROUND_FILES closed files of each group only: a catch-up of a
        // million files does not sort (and hold) a million entries each round; the
        // rest are as late or later, and wait for the next round. Open files always
        // take part: when no other can be opened (every descriptor drains a deleted
        // file), they are what makes progress.
        let mut oldest: [BinaryHeap<(i64, FileKey)>; GROUPS] = Default::default();
        let mut order = vec![];
        let mut idle = vec![];
        for t in self.table.ready() {
            let g = self.merge_group(&t);
            if !t.has_work() && t.place() != Place::Departed {
                idle.push(t.key());
            } else if let Some(open) = t.open {
                order.push((t.head(), t.key(), g, open.parser.blocked().is_some()));
            } else {
                oldest[g].push((t.head(), t.key()));
                if oldest[g].len() > ROUND_FILES {
                    oldest[g].pop();
                }
            }
        }
        for key in idle {
            self.table.unmark(&key);
        }
        for (g, heap) in oldest.into_iter().enumerate() {
            order.extend(heap.into_iter().map(|(head, key)| (head, key, g, false)));
        }
        // Live files (inotify named them) take part however many older files wait:
        // they are read as far as the time limit lets them, not after the backlog.
        for key in std::mem::take(&mut self.hot) {
            let Some(t) = self.table.view(&key).filter(|t| t.open.is_none() && self.table.is_ready(&key)) else {
                continue;
            };
            order.push((t.head(), key, self.merge_group(&t), false));
        }
        // The groups' limits are apart, so the order between groups changes only
        // latency: Ray's own files (raylet.out, few) go first, not after a round of
        // 8,192 backlog worker files (a second and a half at a million files), which
        // their new line would otherwise wait behind: their head is the newest.
        order.sort_unstable_by_key(|&(head, key, g, stopped)| (g != 0, head, key, g, stopped));
        order.dedup();
        // Set by the oldest file of its group that can be read: one that must wait
        // for a descriptor (every open file is being drained after a deletion or a
        // rename) must not keep the others, and with them those descriptors, waiting.
        let mut limits: [Option<Option<Timestamp>>; GROUPS] = [None; GROUPS];
        let (mut total, mut progress) = (0, false);
        for (head, key, g, stopped) in order {
            // A file the limit stopped waits until the limit is REREAD_SLACK past
            // it: each read then takes minutes of its records, not the few seconds the
            // oldest file's READ_BUDGET moved the limit by (a round per budget of
            // raylet's, for every small file in its group).
            let wait = if stopped { REREAD_SLACK } else { 0 };
            if limits[g].flatten().is_some_and(|l| head > l.0.saturating_sub(wait)) {
                continue;
            }
            match self.ensure_open(key) {
                Opened::Yes => {}
                Opened::Later => continue,
                Opened::Never => {
                    progress = true;
                    continue;
                }
            }
            let limit = *limits[g].get_or_insert(merge_limit(Some(head)));
            let (bytes, blocked_at, done) = self.read_file(key, limit);
            total += bytes;
            progress |= bytes > 0 || done || blocked_at.is_some_and(|b| b.0 != head);
            // Cut as soon as the batch is full, not at the end of the round: one
            // round can read megabytes, and batches must stay within max_bytes.
            self.cut(false);
            // Likewise the hold: a backlog read at full speed fills it fast.
            if self.enrich.hold.is_full() {
                self.release_held(false);
            }
        }
        self.metrics.bytes_read.fetch_add(total, Relaxed);
        progress
    }

    /// Opens file `key` if it is not open, closing another at the cap.
    fn ensure_open(&mut self, key: FileKey) -> Opened {
        let Some(t) = self.table.get(&key) else { return Opened::Never };
        if t.is_open() {
            return Opened::Yes;
        }
        if t.place() != Place::Here {
            // Its path names another file now, or none: a listing will find it.
            self.table.unmark(&key);
            return Opened::Never;
        }
        if self.table.open_count() >= self.max_open && !self.evict(key) {
            return Opened::Later;
        }
        match self.open(key) {
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) || e.raw_os_error() == Some(libc::ENFILE) => {
                // Out of descriptors: give one back, try again next round.
                self.evict(key);
                if !self.emfile_logged {
                    self.emfile_logged = true;
                    tracing::warn!(open = self.table.open_count(), max_open_files = self.max_open, "out of file descriptors; closing idle files (lower source.max_open_files or raise the open-files limit)");
                }
                Opened::Later
            }
            Err(e) => {
                let Some(t) = self.table.get(&key) else { return Opened::Never };
                let path = self.path(t);
                if e.kind() == std::io::ErrorKind::NotFound {
                    self.misplaced(key);
                } else {
                    if self.failed_paths.insert(path.clone()) {
                        tracing::warn!(path = %path.display(), error = %e, "cannot open; will retry when it changes");
                    }
                    self.metrics.read_errors.fetch_add(1, Relaxed);
                }
                self.table.unmark(&key);
                Opened::Never
            }
            Ok(false) => {
                // Rotated while closed: its path names another file. Reading that
                // under this file's identity would send it twice and lose this one's tail.
                self.misplaced(key);
                self.table.unmark(&key);
                Opened::Never
            }
            Ok(true) => Opened::Yes,
        }
    }

    /// Opens file `key` at its resume point, if its path still names it (false if
    /// not). A file read before must still start with the bytes it started with;
    /// if not, Ray deleted it and the inode went to a new file, read from its start.
    fn open(&mut self, key: FileKey) -> std::io::Result<bool> {
        let t = self.table.get(&key).expect("checked by the caller");
        let d = &self.dirs[t.dir() as usize];
        let rel = self.table.rel(t);
        let path = d.root.join(&rel);
        let mut meta = classify(&rel, d.session.as_deref());
        meta.path = Some(path.to_string_lossy().into_owned());
        let meta = Arc::new(meta);
        let saved = self.table.context_of(t).map(|c| &**c);
        if let (Some(w), Some(c)) = (meta.worker_key(), saved) {
            // Its worker may have been forgotten (`quiet`) or never prescanned (a restart).
            self.corr.recall_worker(&w, c.job_id.as_deref(), c.actor_name.as_deref());
        }
        let ctx = SavedContext::to_parser(saved, t.last_time());
        let expect = (t.unverified() || t.fingerprint().len > 0).then_some(t.fingerprint());
        let (dir, node, resume, fresh, born) = (t.dir(), d.node, t.resume(), t.ctx.is_none(), t.born());
        if fresh {
            self.recall_sibling(dir, &meta);
        }
        let Some((mut tailed, replaced)) = Tailed::open(path, key, meta.clone(), node, resume, ctx, expect, born)?
        else {
            return Ok(false);
        };
        if replaced && expect != Some(super::files::READ_WHOLE) {
            tracing::info!(path = %tailed.path.display(), "file replaced since it was last read (inode reused or truncated in place); reading it from the start");
            // Truncated in place while closed (copy-truncate): where it stood is
            // kept for its copy, should one turn up (see `copies`).
            if let (Some(fp), Some(t)) = (expect, self.table.view(&key)) {
                let ctx = self.table.context_of(&t).cloned();
                self.note_truncated(super::copies::Truncated::new(key, fp, resume, ctx, t.last_time()));
            }
        }
        if tailed.parser.context().last_timestamp.is_none() && tailed.parser.offset() < crate::prescan::TIME_HINT_WINDOW
        {
            tailed.parser.set_time_hint(self.time_hint(&tailed));
        }
        let t = self.table.get_mut(&key).expect("checked by the caller");
        t.set_size(tailed.size);
        t.set_unverified(false);
        t.set_fingerprint(tailed.fingerprint);
        t.set_born(tailed.born);
        self.table.set_open(key, Some(Box::new(tailed)));
        Ok(true)
    }

    /// The time of a worker file's first timed line (see `crate::prescan::Prescanned`).
    fn time_hint(&mut self, t: &Tailed) -> Option<Timestamp> {
        if t.meta.component != "worker" {
            return None;
        }
        use std::io::Read;
        let f = std::fs::File::open(&t.path).ok()?;
        let mut found = crate::prescan::Prescanned::default();
        let zone = self.corr.zone();
        let _ = crate::lines::for_each_line_chunk(f.take(crate::prescan::TIME_HINT_WINDOW), |c| {
            crate::prescan::prescan_own(&t.meta, c, zone, &mut found)
        });
        found.time_hint
    }

    /// Closes an open file other than `keep` to make room: the least recently active
    /// of those that hold nothing, else of all. A file closed while it holds a record
    /// (open, or kept back by the time limit) or a partial line is read again from
    /// where that starts when it is reopened: nothing is lost, a few bytes are read
    /// twice. (Waiting for such files instead would deadlock a catch-up of more files
    /// than the cap: each is held at its first record until the others get there.)
    /// False when no other file can be closed.
    fn evict(&mut self, keep: FileKey) -> bool {
        loop {
            let victim = self
                .table
                .open_keys()
                .into_iter()
                .filter(|k| *k != keep)
                .filter_map(|k| {
                    let t = self.table.view(&k).filter(|t| t.place() == Place::Here)?;
                    let busy = !t.open.is_some_and(|o| o.is_clean()) || self.enrich.hold.holds_file(&k);
                    Some((busy, t.active, k))
                })
                .min();
            let Some((_, _, k)) = victim else { return false };
            if self.closable(k) {
                self.close(k);
                return true;
            }
            // Deleted meanwhile: it is read to its end through its descriptor.
            self.misplaced(k);
        }
    }

    /// Whether file `key` may be closed: closing is safe only while its path names
    /// it, as that is how it is opened again. One that is deleted or renamed away is
    /// read to its end through its descriptor first.
    pub(super) fn closable(&self, key: FileKey) -> bool {
        self.table.view(&key).is_some_and(|t| t.place() == Place::Here && t.open.is_some_and(|o| !o.deleted()))
    }

    /// Closes file `key`'s descriptor, keeping where reading resumes.
    pub(super) fn close(&mut self, key: FileKey) {
        let Some(open) = self.table.set_open(key, None) else { return };
        let ctx = open.parser.context();
        self.table.set_context(&key, SavedContext::from_parser(ctx));
        self.table.set_times(&key, ctx.last_timestamp.map(|t| t.0), open.head());
        let Some(t) = self.table.get_mut(&key) else { return };
        t.set_resume(open.parser.unemitted_offset());
        t.set_size(open.size);
        // The first line's hash (document ids) is not kept: a million closed files
        // would hold 8 MiB of it, and reopening reads it again from the descriptor,
        // whose first bytes the fingerprint check has just matched.
        t.set_fingerprint(open.fingerprint);
        if (View { t, open: None, head_aside: i64::MIN }).has_work() {
            // Closed holding a record or a partial line: read it again from there.
            self.table.mark(key);
        } else {
            let dir = t.dir();
            self.forget_if_alone(dir, &open);
        }
    }

    /// The open state of file `key`, if it is open.
    pub(super) fn open_file(&mut self, key: FileKey) -> Option<&mut Tailed> {
        self.table.open_mut(&key)
    }

    /// Runs `f` on open file `key` with the correlator, the parse options and where
    /// its records go: the enrich stage. Every record the source reads passes here.
    /// `None` when the file is not open.
    pub(super) fn parse_open<R>(
        &mut self,
        key: FileKey,
        f: impl FnOnce(&mut Tailed, &mut Correlator, &Options, &mut dyn FnMut(&Record<'_>)) -> R,
    ) -> Option<R> {
        let wait_node = self.waits_for_node(key);
        let open = self.table.open_mut(&key)?;
        let mut router = self.enrich.file(open.route(wait_node));
        Some(f(open, &mut self.corr, &self.cfg.source.parse, &mut |r| router.route(r)))
    }

    /// Reads one file under `limit`. Returns the bytes read, the time of the record
    /// the limit stopped it at, and whether it was finished (and forgotten).
    fn read_file(&mut self, key: FileKey, limit: Option<Timestamp>) -> (u64, Option<Timestamp>, bool) {
        let Some(before) = self.open_file(key).map(|o| o.stats()) else { return (0, None, false) };
        let (once, partial, idle) = (self.once, self.cfg.source.partial_line_timeout, self.cfg.source.idle_flush);
        let mut buf = std::mem::take(&mut self.buf);
        let refreshed = self.open_file(key).map_or(Ok(false), |o| o.refresh());
        let res = refreshed.and_then(|truncated| {
            if truncated {
                self.truncated_in_place(key);
            }
            let mut res = ReadResult { truncated, ..ReadResult::default() };
            // A chunk at a time, marking where the file stands in between (see
            // `Source::cut`): a sink that stores the batch push by push can then
            // checkpoint it push by push, not only at the end of this file's budget.
            loop {
                let want = (READ_BUDGET - res.bytes).min(READ_CHUNK as u64);
                let read =
                    |open: &mut Tailed, corr: &mut Correlator, opts: &Options, emit: &mut dyn FnMut(&Record<'_>)| {
                        open.read(&mut buf, want, limit, corr, opts, emit)
                    };
                let r = self.parse_open(key, read).unwrap_or(Ok(ReadResult::default()))?;
                (res.bytes, res.at_eof, res.blocked) = (res.bytes + r.bytes, r.at_eof, r.blocked);
                if r.at_eof || r.blocked || r.bytes == 0 || res.bytes >= READ_BUDGET {
                    break;
                }
                self.dirty.insert(key);
                self.cut(false);
            }
            if res.at_eof && !res.blocked {
                // At the end of a file nobody wrote to for a while (a finished
                // worker's, found by a catch-up), or of any file with `--once`: its
                // last record is complete, so it goes out now (within the time
                // limit) and the file holds nothing: it can be closed at once to
                // make room for the next.
                self.parse_open(key, |open, corr, opts, emit| {
                    let quiet = open.quiet_for();
                    let whole = once || quiet >= partial;
                    if whole || quiet >= idle {
                        open.flush_within(limit, whole, corr, opts, emit);
                    }
                });
            }
            Ok(res)
        });
        self.buf = buf;
        let Some((t, Some(open))) = self.table.entry_mut(&key) else { return (0, None, false) };
        let after = open.stats();
        let m = &self.metrics;
        // Differences of counts that never go back (see `Tailed::stats`).
        m.lines_read.fetch_add(after.lines - before.lines, Relaxed);
        m.records_read.fetch_add(after.records - before.records, Relaxed);
        m.invalid_utf8.fetch_add(after.invalid_utf8 - before.invalid_utf8, Relaxed);
        m.truncated_lines.fetch_add(after.truncated_lines - before.truncated_lines, Relaxed);
        let path = open.path.clone();
        let r = match res {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(path = %path.display(), offset = open.parser.offset(), error = %e, "read failed; closing the file");
                m.read_errors.fetch_add(1, Relaxed);
                self.close(key);
                self.table.unmark(&key);
                return (0, None, false);
            }
        };
        let (blocked, clean) = (open.parser.blocked(), open.is_clean());
        // Missing from its path and read to its end: no name left means deleted.
        let deleted = r.at_eof && t.place() == Place::Unknown && open.deleted();
        let raylet_unknown = open.meta.component == "raylet" && open.node_unknown() && r.bytes > 0;
        let near_start = open.parser.offset().saturating_sub(r.bytes) < RAYLET_NODE_SCAN;
        if r.bytes > 0 || r.truncated {
            self.dirty.insert(key);
            t.active = Tick::now();
        }
        if r.truncated {
            tracing::info!(path = %path.display(), "file was truncated in place (copy-truncate); reading it from the start");
        }
        if deleted {
            t.set_place(Place::Departed);
        }
        let departed = t.place() == Place::Departed;
        if raylet_unknown && near_start {
            // A new session's raylet has started writing: look for its node id.
            self.learn_node(key, &path);
        }
        if r.at_eof && departed && (clean || self.once) {
            self.finish_and_forget(key);
            return (r.bytes, None, true);
        }
        if r.at_eof && blocked.is_none() && !departed {
            self.table.unmark(&key);
        }
        (r.bytes, blocked, false)
    }

    /// At shutdown, file `key` was deleted (its writer is done with it): read the
    /// rest (up to [`STOP_READ_MAX`]) and emit its last record, which would
    /// otherwise wait in the parser for a continuation and be lost with the file.
    pub(super) fn drain_deleted(&mut self, key: FileKey) {
        if let Some(t) = self.table.get_mut(&key) {
            t.set_place(Place::Departed);
        }
        for _ in 0..STOP_READ_MAX / READ_BUDGET {
            let (bytes, blocked, done) = self.read_file(key, None);
            if done || bytes == 0 || blocked.is_some() {
                break;
            }
        }
        self.finish_and_forget(key);
    }

    /// A vanished file read to its end: emit what it held and stop following it.
    fn finish_and_forget(&mut self, key: FileKey) {
        if self.table.get(&key).is_none() {
            return;
        }
        self.parse_open(key, |open, corr, opts, emit| open.parser.finish(corr, opts, emit));
        self.forget(key);
    }

    /// Reads raylet's first MiB for the node id of its logs dir.
    fn learn_node(&mut self, key: FileKey, raylet: &std::path::Path) {
        let Some(n) = node::from_raylet_head(raylet) else { return };
        let Some(dir) = self.table.get(&key).map(|t| t.dir()) else { return };
        self.dirs[dir as usize].node = Some(n);
        // Records held for this node may go now.
        self.enrich.hold.unsettle();
        for k in self.table.open_keys() {
            if self.table.get(&k).is_none_or(|t| t.dir() != dir) {
                continue;
            }
            if let Some(open) = self.table.open_mut(&k) {
                if open.node_unknown() {
                    open.set_node(Some(n));
                }
            }
        }
    }

    /// Emits the open record of every open file quiet for `idle_flush` (unless it
    /// is dated past what the files still being read have reached), and partial last
    /// lines quiet for `partial_line_timeout`.
    pub(super) fn flush_idle(&mut self) {
        let now = Instant::now();
        let (idle, partial) = (self.cfg.source.idle_flush, self.cfg.source.partial_line_timeout);
        let mut oldest = [None; GROUPS];
        for t in self.table.ready().filter(|t| t.has_work()) {
            let g = &mut oldest[self.merge_group(&t)];
            *g = Some(g.map_or(t.head(), |o: i64| o.min(t.head())));
        }
        // Ray's own files first, as in a read round (see `read_round`).
        let mut keys = self.table.open_keys();
        keys.sort_by_cached_key(|k| self.table.get(k).is_none_or(|t| self.merge_group(t) != 0));
        for key in keys {
            let Some(g) = self.table.get(&key).map(|t| self.merge_group(t)) else { continue };
            let limit = merge_limit(oldest[g]);
            let Some(open) = self.open_file(key).filter(|o| o.wants_flush(now, idle, partial)) else { continue };
            let before = open.parser.unemitted_offset();
            self.parse_open(key, |open, corr, opts, emit| {
                open.flush_if_idle(now, idle, partial, limit, corr, opts, emit)
            });
            let Some(open) = self.open_file(key) else { continue };
            let (moved, blocked) = (open.parser.unemitted_offset() != before, open.parser.blocked().is_some());
            if moved {
                self.dirty.insert(key);
            }
            if blocked {
                self.table.mark(key);
            }
        }
    }

    /// Closes open files that have been idle for `close_inactive` and hold nothing.
    pub(super) fn close_inactive(&mut self) {
        let after = self.cfg.source.close_inactive;
        let idle: Vec<FileKey> = self
            .table
            .open_keys()
            .into_iter()
            .filter(|k| !self.table.is_ready(k) && !self.enrich.hold.holds_file(k))
            .filter(|k| {
                self.table.view(k).is_some_and(|t| t.active.elapsed() >= after && t.open.is_some_and(|o| o.is_clean()))
            })
            .filter(|k| self.closable(*k))
            .collect();
        for key in idle {
            self.close(key);
        }
    }

    /// `--once`: every file is complete; emit the last lines and held records.
    pub(super) fn finish_all(&mut self) {
        for key in self.table.open_keys() {
            if self.parse_open(key, |open, corr, opts, emit| open.parser.finish(corr, opts, emit)).is_some() {
                self.dirty.insert(key);
            }
        }
        self.release_held(true);
    }
}

/// Merge groups: a worker's output, core-worker logs, the rest (see
/// [`Source::merge_group`]).
const GROUPS: usize = 3;

impl Source {
    /// The group of files read in time order together: all of them, unless no sink
    /// puts two components in one stream (see `Config::streams_split_by_component`).
    /// Then a worker's output (a million files on a node that ran for weeks),
    /// core-worker logs (as many) and the rest (raylet, GCS, the dashboard: few
    /// files, always live) each go at their own pace: a catch-up of the first two
    /// does not hold raylet's lines back for minutes.
    fn merge_group(&self, t: &super::table::Tracked) -> usize {
        if !self.split_merge {
            return 0;
        }
        match self.table.names.leading_token(t.name) {
            Some(b"worker-") => 1,
            Some(b"python-core-worker-") => 2,
            _ => 0,
        }
    }
}

/// How far the limit must have passed a file it stopped before that file is read
/// again (see [`Source::read_round`]).
const REREAD_SLACK: i64 = MERGE_SLACK.as_nanos() as i64 / 2;

/// The time limit of a round whose oldest pending record is at `oldest`.
fn merge_limit(oldest: Option<i64>) -> Option<Timestamp> {
    Some(Timestamp(oldest?.saturating_add(MERGE_SLACK.as_nanos() as i64)))
}
