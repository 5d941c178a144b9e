//! Finding files and noticing change: dir listings, inotify's paths, the stat poll.
//!
//! A listing reads each logs dir (recursively) and matches entries to tracked files
//! by inode, so a known file costs no stat. A new file is stat'ed, given its resume
//! point (its checkpoint, else its start, or its end for `start_at = "end"`) and,
//! when it has something to read, prescanned (see [`super::scan`]) before any file
//! is parsed; a file the reader forgot and finds again (its checkpoint kept where files
//! are resumed from) continues where it stopped. What a file missing from its place
//! means is decided in [`super::gone`].

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use raylog_parsers::{classify, Id};

use super::contexts::ContextPool;
use super::names::Name;
use super::table::{Place, Tick, Tracked, View};
use super::tail::Tailed;
use super::{Dir, Source, SWEEP_WATCHED};
use crate::agent::checkpoint::{born, unix_now, FileKey, Fingerprint};
use crate::agent::config::StartAt;
use crate::discover::{logs_roots, not_tailed, LogsRoot};

/// Discovery looks at the shutdown flag every this many entries or files: a
/// million-file listing or prescan must not hold SIGTERM for seconds.
pub(super) const STOP_CHECK: usize = 1024;

/// Files tracked from their checkpoint stat'ed per round (see
/// [`Source::stat_unstated`]): about a tenth of a second of stats between rounds.
const UNSTATED_CHUNK: usize = 16_384;

/// The fingerprint of a file skipped by `ignore_older`: matches no file, so when it
/// changes and is opened, it is read from its start.
pub(super) const READ_WHOLE: Fingerprint = Fingerprint { len: u64::MAX, hash: 0 };

/// A file listed or named by an event, not tracked yet. Its name is in the table's
/// arena already and becomes the tracked file's: a first scan of a million files
/// keeps each name once, packed, and no list of strings.
pub(super) struct Found {
    dir: u32,
    pub name: Name,
    /// The inode the listing gave (0 from an event): files are stat'ed in inode
    /// order, which keeps the kernel's inode reads and the checkpoint lookups near
    /// one another (a restart over a million files).
    pub(super) ino: u64,
}

impl Source {
    fn path_of(&self, f: &Found) -> PathBuf {
        self.dirs[f.dir as usize].root.join(self.table.names.get(f.name))
    }

    /// Where a tracked file is (as far as the table knows).
    pub(super) fn path(&self, t: &Tracked) -> PathBuf {
        self.dirs[t.dir() as usize].root.join(self.table.rel(t))
    }

    /// Lists every logs dir; tracks new files, notices moved and vanished ones.
    /// Returns how many files are new.
    ///
    /// The listing is streamed: a known file is matched by inode and marked with
    /// this listing's number, so listing 100,000 files keeps no list of them. Only a
    /// dir listed whole can say that a file is not there: one that could not be read
    /// (out of descriptors, say) leaves its files as they were.
    pub(super) fn rescan(&mut self) -> usize {
        let (roots, failures) = logs_roots(&self.cfg.source.paths);
        for (path, why) in failures {
            if self.failed_paths.insert(PathBuf::from(&path)) {
                tracing::warn!(%path, %why, "cannot read; will keep looking");
            }
        }
        self.listing = self.listing.wrapping_add(1);
        if self.first_scan {
            // A restart finds most files checkpointed: room for them at once, not by
            // doubling the table's indices through a million inserts.
            self.table.reserve(self.resume.len());
        }
        let mut new = vec![];
        for root in roots {
            self.dir_for(&root);
        }
        // Every dir followed, including one whose parent could not be read this time.
        let mut whole = vec![false; self.dirs.len()];
        for (d, whole) in whole.iter_mut().enumerate() {
            let root = self.dirs[d].root.clone();
            *whole = self.list(d as u32, &root, &mut new);
        }
        self.await_watch();
        if self.stopping() {
            // A listing of a million files takes seconds: SIGTERM is not kept waiting
            // for it. Nothing is marked missing or tracked from a cut-short listing.
            return 0;
        }
        // Stat'ed in inode order (see `Found::ino`), the lowest first.
        self.unstated.sort_unstable_by_key(|k| std::cmp::Reverse(k.ino));
        self.report_vanished(&new, &whole);
        let found = self.track_found(new);
        let listing = self.listing;
        let unlisted: Vec<FileKey> =
            self.table.values().filter(|t| t.listed != listing && whole[t.dir() as usize]).map(|t| t.key()).collect();
        for key in unlisted {
            self.unlisted(key);
        }
        if !self.absent_marked && whole.iter().all(|w| *w) {
            self.absent_marked = true;
            // Checkpoints of files not found at start: gone while the agent was down.
            // They stay where a file is resumed from, should one be found after all.
            let now = unix_now();
            for cp in self.resume.values_mut().filter(|cp| cp.gone_since == 0) {
                cp.gone_since = now;
                self.closed.push(cp.clone());
            }
        }
        self.expire_departed();
        self.maintain();
        if found > 1000 {
            // Tens of thousands of names were allocated and freed: give the memory back.
            crate::agent::trim_heap();
        }
        found
    }

    /// Waits, before the first stat, for the watches being set up while the first
    /// listing ran (which stats nothing it has a checkpoint for): a file changed
    /// between its stat and its dir's watch would go unseen until the stat poll.
    /// Polls instead if they could not be set up.
    fn await_watch(&mut self) {
        let Some(wake) = self.watch_setup.take() else { return };
        loop {
            match wake.wait_set_up(Duration::from_millis(100)) {
                Some(true) => return,
                Some(false) => {
                    self.watched = false;
                    self.next_rescan = Instant::now() + self.cfg.source.poll_interval;
                    return;
                }
                None if self.stopping() => return,
                None => {}
            }
        }
    }

    /// Whether the agent is stopping: discovery looks every [`STOP_CHECK`] files.
    pub(super) fn stopping(&self) -> bool {
        self.shutdown.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The index of `root` in the dir list, adding it if new.
    fn dir_for(&mut self, root: &LogsRoot) -> Option<u32> {
        if let Some(i) = self.dirs.iter().position(|d| d.root == root.root) {
            return Some(i as u32);
        }
        if self.dirs.len() as u32 > super::table::MAX_DIRS {
            if self.failed_paths.insert(root.root.clone()) {
                tracing::warn!(path = %root.root.display(), max = super::table::MAX_DIRS, "too many session logs dirs followed; not following this one (remove old sessions, or narrow source.paths)");
            }
            return None;
        }
        let dev = std::fs::metadata(&root.root).ok()?.dev();
        self.dirs.push(Dir {
            root: root.root.clone(),
            session: root.dir.session.clone(),
            dev,
            node: None,
            node_wait: None,
            live: !self.first_scan,
        });
        Some(self.dirs.len() as u32 - 1)
    }

    /// Walks `dir` of logs dir `d` (recursively, symlinks not followed): marks the
    /// tracked files listed, follows those renamed, and collects new ones into `new`.
    /// True when every entry was read: a dir that does not exist counts, as it
    /// holds nothing (a session Ray removed); one that failed does not.
    fn list(&mut self, d: u32, dir: &Path, new: &mut Vec<Found>) -> bool {
        let rd = match self.read_dir(dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return true,
            Err(e) => {
                if self.failed_paths.insert(dir.to_path_buf()) {
                    tracing::warn!(path = %dir.display(), error = %e, "cannot list; will keep looking");
                }
                return false;
            }
        };
        let mut whole = true;
        for (i, e) in rd.enumerate() {
            if i % STOP_CHECK == STOP_CHECK - 1 && self.stopping() {
                return false;
            }
            let Ok(e) = e else {
                whole = false;
                continue;
            };
            let Ok(ft) = e.file_type() else {
                whole = false;
                continue;
            };
            if ft.is_dir() {
                whole &= self.list(d, &e.path(), new);
                continue;
            }
            if ft.is_file() {
                self.listed(d, &e, new);
            }
        }
        whole
    }

    /// A file entry of a listing of logs dir `d`.
    fn listed(&mut self, d: u32, e: &std::fs::DirEntry, new: &mut Vec<Found>) {
        let key = FileKey { dev: self.dirs[d as usize].dev, ino: e.ino() };
        let root = &self.dirs[d as usize].root;
        let path = e.path();
        let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
        let listing = self.listing;
        let Some(t) = self.table.get_mut(&key) else {
            if self.excluded(&rel) {
                return;
            }
            let name = self.table.names.add(&rel.replace('\\', "/"));
            match self.resume.remove(&key) {
                Some(cp) => self.track_checkpointed(key, d, name, cp),
                None => new.push(Found { dir: d, name, ino: e.ino() }),
            }
            return;
        };
        t.listed = listing;
        let rel = rel.replace('\\', "/");
        let (dir, open) = (t.dir(), t.is_open());
        let moved = !(dir == d && self.table.is_named(&key, &rel));
        if moved && !open {
            // Under another name: renamed, or a new file on the inode of one deleted.
            let md = std::fs::metadata(&path).ok().filter(|md| FileKey::of(md) == key);
            if md.is_some_and(|md| self.reborn(key, &path, &md, true)) {
                new.push(Found { dir: d, name: self.table.names.add(&rel), ino: e.ino() });
                return;
            }
        }
        self.follow_move(key, d, &rel, &path);
    }

    fn read_dir(&self, dir: &Path) -> std::io::Result<std::fs::ReadDir> {
        #[cfg(test)]
        if self.list_fault.as_deref() == Some(dir) {
            return Err(std::io::Error::from_raw_os_error(libc::EMFILE));
        }
        std::fs::read_dir(dir)
    }

    fn excluded(&self, rel: &str) -> bool {
        not_tailed(rel) || self.cfg.source.exclude.iter().any(|g| g.matches(rel))
    }

    /// Records that tracked file `key` is listed at `rel` of dir `d` (a rename moves
    /// it within the logs dir: rotation, `old/`).
    fn follow_move(&mut self, key: FileKey, d: u32, rel: &str, path: &Path) {
        let Some(t) = self.table.get_mut(&key) else { return };
        let stray = t.place() != Place::Here;
        t.set_place(Place::Here);
        if stray {
            // It waited for this (it could not be opened by its old path, and what
            // was written meanwhile was reported under another name).
            self.table.mark(key);
        }
        let Some(t) = self.table.get_mut(&key) else { return };
        if t.dir() == d && self.table.is_named(&key, rel) {
            return;
        }
        if let Some(open) = self.table.open_mut(&key) {
            open.path = path.to_path_buf();
        }
        let name = self.table.names.add(rel);
        self.table.moved(key, d, name);
    }

    /// Starts tracking new files. Those with something to read are prescanned (with
    /// the core-worker logs of their workers) before any is parsed, so a worker's
    /// prints get their actor whatever order files are read in. Returns how many.
    /// `first`: found by the first listing (see [`Source::tracked`]).
    pub(super) fn track(&mut self, mut found: Vec<Found>, first: bool) -> Vec<FileKey> {
        found.sort_by_key(|f| f.ino);
        self.table.reserve(found.len());
        let mut added = Vec::with_capacity(found.len());
        for (i, f) in found.into_iter().enumerate() {
            if i % STOP_CHECK == STOP_CHECK - 1 && self.stopping() {
                break;
            }
            let path = self.path_of(&f);
            let Ok(md) = std::fs::metadata(&path) else {
                if f.ino != 0 {
                    // Listed, then gone before its stat: deleted unread, or renamed
                    // (the next listing tells, see `Source::report_vanished`).
                    self.vanished.push((FileKey { dev: self.dirs[f.dir as usize].dev, ino: f.ino }, f.dir, path));
                    self.next_rescan = Instant::now();
                }
                self.table.names.free(f.name);
                continue;
            };
            let key = FileKey::of(&md);
            self.reborn(key, &path, &md, true);
            if let Some(t) = self.table.get_mut(&key) {
                t.listed = self.listing;
                let rel = self.table.names.get(f.name);
                self.table.names.free(f.name);
                self.follow_move(key, f.dir, &rel, &path);
                continue;
            }
            let t = self.tracked(key, f, &md, first);
            let has_work = View { t: &t, open: None, head_aside: i64::MIN }.has_work();
            self.table.insert(t);
            if has_work {
                self.table.mark(key);
            }
            added.push(key);
        }
        let busy = self.busy_core_logs(&added);
        for (i, key) in added.iter().enumerate() {
            if i % STOP_CHECK == STOP_CHECK - 1 && self.stopping() {
                break;
            }
            let prescan = self.table.is_ready(key) || busy.contains(key);
            if !prescan && first {
                // Nothing to learn from it now (a restart over a million files
                // read before skips them all).
                continue;
            }
            let Some(t) = self.table.get(key) else { continue };
            let (dir, rel) = (t.dir(), self.table.rel(t));
            let path = self.dirs[dir as usize].root.join(&rel);
            let meta = classify(&rel, self.dirs[dir as usize].session.as_deref());
            if prescan {
                let first = self.prescan(dir, &path, &meta);
                let unread = self.table.get(key).filter(|t| t.resume() == 0 && self.table.head_of(t) == i64::MIN);
                if let Some(last) = unread.map(|t| t.last_time()) {
                    self.table.set_times(key, last, first.unwrap_or(i64::MIN));
                }
            }
            if !first && self.dirs[dir as usize].live && matches!(meta.component.as_str(), "gcs_server" | "raylet") {
                // A node is starting here (a head node's GCS comes before its raylet):
                // its node id will be announced soon.
                let until = Instant::now() + self.cfg.source.actor_hold;
                self.dirs[dir as usize].node_wait.get_or_insert(until);
            }
        }
        added
    }

    /// Of the files just `added`, the core-worker logs of workers with a file to
    /// read: prescanned too, as they name the worker's actor. Sized by the
    /// core-worker logs found (a first scan of a million finished workers' stdout,
    /// with no core-worker log among them, builds nothing).
    fn busy_core_logs(&self, added: &[FileKey]) -> HashSet<FileKey> {
        let rel = |k: &FileKey| self.table.get(k).map(|t| self.table.rel(t));
        let mut core: HashMap<Id, FileKey> = HashMap::new();
        for key in added {
            // Cheap test first, on the packed name: every core-worker log's has it.
            let Some(t) = self.table.get(key).filter(|t| self.table.names.has(t.name, b"-core-")) else { continue };
            let meta = classify(&self.table.rel(t), None);
            if let (Some(w), "core_worker") = (meta.worker_id, meta.component.as_str()) {
                core.insert(w, *key);
            }
        }
        if core.is_empty() {
            return HashSet::new();
        }
        let ready = added.iter().filter(|k| self.table.is_ready(k));
        ready.filter_map(|k| core.get(&classify(&rel(k)?, None).worker_id?).copied()).collect()
    }

    /// A new file's entry: where reading resumes, from its checkpoint if it has one.
    fn tracked(&mut self, key: FileKey, f: Found, md: &std::fs::Metadata, first: bool) -> Tracked {
        let mut t = Tracked::new(key, f.dir, f.name, md.len(), self.listing);
        let now = born::of_metadata(md);
        t.set_born(now);
        let path = self.path_of(&f);
        if let Some(mut cp) = self.resume.remove(&key).filter(|cp| !self.another_incarnation(cp, now, &path)) {
            self.learn_saved_ids(f.dir, f.name, &mut cp);
            resume_from(&mut t, cp, &mut self.table.contexts);
            return t;
        }
        if crate::agent::events::is_segment_name(&self.table.names.get(f.name)) {
            // Ray's events: raylog answered 2xx for them; they are read whole.
        } else if self.resume_copy((f.dir, f.name), &mut t, md) {
            // A copy-truncate's copy: read from where its original was read to.
        } else if self.cfg.source.start_at == StartAt::End && first && self.first_start {
            t.set_resume(md.len());
        } else if let Some(max) = self.cfg.source.ignore_older {
            // Old and never read: skipped until it changes, then read whole.
            if md.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age > max) {
                t.set_resume(md.len());
                t.set_unverified(true);
                t.set_fingerprint(READ_WHOLE);
            }
        }
        t
    }

    /// A file listed whose checkpoint was loaded at start: tracked at once, as its
    /// checkpoint left it, and stat'ed in the rounds that follow. A restart over a
    /// million files would otherwise stat them all before reading a line; this way
    /// the listing completes the table, inotify's news of any of them is followed
    /// at once, and the files written while the agent was down are read as their
    /// stats come (those of live files first: they are not checkpointed as done).
    fn track_checkpointed(
        &mut self,
        key: FileKey,
        dir: u32,
        name: Name,
        mut cp: crate::agent::checkpoint::FileCheckpoint,
    ) {
        self.learn_saved_ids(dir, name, &mut cp);
        // The size is not known yet: nothing to read until the stat says so.
        let mut t = Tracked::new(key, dir, name, cp.offset, self.listing);
        resume_from(&mut t, cp, &mut self.table.contexts);
        self.table.insert(t);
        self.unstated.push(key);
    }

    /// Takes the ids a checkpoint of file `name` in dir `dir` kept (its worker's
    /// actor, its logs dir's node) out of it, into the correlator and the dir: what
    /// taught them before the restart may be gone.
    fn learn_saved_ids(&mut self, dir: u32, name: Name, cp: &mut crate::agent::checkpoint::FileCheckpoint) {
        let (ctx, actor, node) = crate::agent::checkpoint::SavedContext::split_ids(cp.context.take());
        cp.context = ctx;
        let id = |s: Option<Box<str>>| s.and_then(|s| Id::parse(s.as_bytes()));
        if let Some(a) = id(actor) {
            if let Some(w) = classify(&self.table.names.get(name), None).worker_id {
                self.corr.link(w, a);
            }
        }
        if let Some(n) = id(node) {
            self.dirs[dir as usize].node.get_or_insert(n);
        }
    }

    /// Stats the next [`UNSTATED_CHUNK`] files tracked from their checkpoint; those
    /// with something to read are prescanned (with their worker's core-worker log)
    /// and read.
    pub(super) fn stat_unstated(&mut self) {
        if self.unstated.is_empty() {
            return;
        }
        let mut work = Vec::new();
        for _ in 0..UNSTATED_CHUNK {
            let Some(key) = self.unstated.pop() else { break };
            // Open: being read already, and prescanned when it was opened or found.
            let Some(t) = self.table.get(&key).filter(|t| !t.is_open()) else { continue };
            let path = self.path(t);
            match std::fs::metadata(&path) {
                Ok(md) if FileKey::of(&md) == key && self.reborn(key, &path, &md, false) => {
                    self.next_rescan = Instant::now()
                }
                Ok(md) if FileKey::of(&md) == key => {
                    let Some((t, open)) = self.table.entry_mut(&key) else { continue };
                    if md.len() != t.size() {
                        changed(t, open, md.len());
                    }
                    // Ready by an event since the listing, and not prescanned: it is now.
                    if self.table.view(&key).is_some_and(|v| v.has_work()) || self.table.is_ready(&key) {
                        self.table.mark(key);
                        work.push(key);
                    }
                }
                // Renamed or deleted since the listing: the next one sorts it out.
                _ => self.next_rescan = Instant::now(),
            }
        }
        // Given back as it drains: after a restart at a million files, the 16 MiB
        // it held stayed resident for good.
        if self.unstated.is_empty() {
            self.unstated = Vec::new();
        } else if self.unstated.len() * 2 < self.unstated.capacity() {
            self.unstated.shrink_to_fit();
        }
        self.prescan_resumed(&work);
    }

    /// Takes in paths inotify reported. Returns how many files are new.
    ///
    /// Renames come as two events (old path, new path) in any order, so every path is
    /// resolved first, and only then is a path that no longer names its file checked:
    /// the file may just have been seen under its new name.
    pub(super) fn on_paths(&mut self, paths: Vec<PathBuf>) -> usize {
        let (mut new, mut stale) = (vec![], vec![]);
        for path in paths {
            let known = self.locate(&path).and_then(|(d, rel)| self.table.by_path(d, &rel));
            match std::fs::metadata(&path) {
                Ok(md) if md.is_dir() => self.next_rescan = Instant::now(),
                Ok(md) if md.is_file() => {
                    let key = FileKey::of(&md);
                    self.reborn(key, &path, &md, known != Some(key));
                    if let Some(grew) = self.table.view(&key).map(|v| md.len() > v.read_to()) {
                        let Some((t, open)) = self.table.entry_mut(&key) else { continue };
                        changed(t, open, md.len());
                        let stray = t.place() != Place::Here;
                        self.table.mark(key);
                        self.hot.push(key);
                        if known != Some(key) || stray {
                            self.relocate(key, &path);
                        } else if !grew {
                            // Written to where it was, yet no longer: rewritten in
                            // place? (Not asked of a rename: rotation renames every
                            // backup, and none of them changed.)
                            self.verify(key);
                        }
                    } else if let Some(f) = self.found_at(&path) {
                        new.push(f);
                    }
                    stale.extend(known.filter(|k| *k != key));
                }
                Ok(_) => {}
                Err(_) => stale.extend(known),
            }
        }
        for key in stale {
            self.check_gone(key);
        }
        let added = self.track(new, self.first_scan);
        self.hot.extend_from_slice(&added);
        added.len()
    }

    /// Where `path` is in the dirs followed, if it is a file to ship. A path outside
    /// every known logs dir may be a new session: list the dirs again soon.
    fn found_at(&mut self, path: &Path) -> Option<Found> {
        let Some((d, rel)) = self.locate(path) else {
            self.next_rescan = Instant::now();
            return None;
        };
        (!self.excluded(&rel)).then(|| Found { dir: d, name: self.table.names.add(&rel), ino: 0 })
    }

    /// The logs dir `path` is in, and the path inside it.
    fn locate(&self, path: &Path) -> Option<(u32, String)> {
        let d = self.dirs.iter().position(|d| path.starts_with(&d.root))?;
        let rel = path.strip_prefix(&self.dirs[d].root).ok()?.to_string_lossy().replace('\\', "/");
        Some((d as u32, rel))
    }

    /// Tracked file `key` was seen at `path`: follow it there if it is in a logs dir.
    pub(super) fn relocate(&mut self, key: FileKey, path: &Path) {
        match self.locate(path) {
            Some((d, rel)) if !self.excluded(&rel) => self.follow_move(key, d, &rel, path),
            Some(_) => {}
            None => self.next_rescan = Instant::now(),
        }
    }

    /// Stats every file (inotify lost events: any may have grown). An open file is
    /// asked through its descriptor; a closed one through its path, after the
    /// listing that came with the same news put every file at its path.
    pub(super) fn stat_all(&mut self) {
        let keys: Vec<FileKey> = self.table.values().map(|t| t.key()).collect();
        for key in keys {
            let path = match self.table.get(&key) {
                Some(t) if !t.is_open() => Some(self.path(t)),
                Some(_) => None,
                None => continue,
            };
            let Some(grew_from) = self.table.view(&key).map(|v| v.read_to()) else { continue };
            let Some((t, mut open)) = self.table.entry_mut(&key) else { continue };
            let size = match (&mut open, path) {
                (Some(open), _) => open.stat().map(|()| open.size).ok(),
                (None, path) => {
                    path.and_then(|p| std::fs::metadata(p).ok()).filter(|md| FileKey::of(md) == key).map(|md| md.len())
                }
            };
            match size {
                Some(size) => {
                    let recent = t.active.elapsed() < RECENT;
                    let grew = size > grew_from;
                    changed(t, open, size);
                    self.table.mark(key);
                    if recent && !grew {
                        self.verify(key);
                    }
                }
                None if open.is_none() => self.next_rescan = Instant::now(),
                None => {}
            }
        }
    }

    /// Checks that file `key` still starts with the bytes it started with when read;
    /// if not (a copy-truncate that grew back to where reading stood), it is read
    /// again from its start. One positioned read, plus an open if it is closed.
    fn verify(&mut self, key: FileKey) {
        if let Some(open) = self.table.open_mut(&key) {
            if open.verify() {
                self.table.mark(key);
            }
            return;
        }
        let Some(t) = self.table.get(&key) else { return };
        let (fp, here) = (t.fingerprint(), t.place() == Place::Here);
        if fp.len == 0 || !here || fp == READ_WHOLE {
            return;
        }
        let Some(t) = self.table.get(&key) else { return };
        let path = self.path(t);
        let Ok(f) = std::fs::File::open(&path) else { return };
        let same = f.metadata().is_ok_and(|md| FileKey::of(&md) == key)
            && Fingerprint::read_at(&f, fp.len).is_ok_and(|now| now == fp);
        if !same && f.metadata().is_ok_and(|md| FileKey::of(&md) == key) {
            tracing::info!(path = %path.display(), "file was truncated in place (copy-truncate); reading it from the start");
            if let Some(t) = self.table.view(&key) {
                let ctx = self.table.context_of(&t).cloned();
                self.note_truncated(super::copies::Truncated::new(key, fp, t.resume(), ctx, t.last_time()));
            }
            self.table.restart(&key);
            let Some(t) = self.table.get_mut(&key) else { return };
            t.set_fingerprint(Fingerprint::default());
            self.table.mark(key);
        }
    }

    /// Stats the next slice of the table: all of it per [`SWEEP_WATCHED`] while
    /// inotify watches, per `poll_interval` otherwise. Files that changed are read.
    pub(super) fn sweep(&mut self) {
        // While inotify watches, a safety net: slower in proportion past 250,000
        // files, so that a million idle files cost under 1 % of a core to stat.
        let scale = (self.table.len() / 250_000).max(1) as u32;
        let period = if self.watched { SWEEP_WATCHED * scale } else { self.cfg.source.poll_interval };
        let rounds = (period.as_secs_f64().max(1.0)).ceil() as usize;
        let n = self.table.len().div_ceil(rounds);
        for key in self.table.sweep(n) {
            let Some(t) = self.table.get(&key) else { continue };
            let path = self.path(t);
            match std::fs::metadata(&path) {
                Ok(md) if FileKey::of(&md) == key && self.reborn(key, &path, &md, false) => {
                    self.next_rescan = Instant::now()
                }
                Ok(md) if FileKey::of(&md) == key => {
                    if let Some((t, open)) = self.table.entry_mut(&key) {
                        if md.len() != t.size() {
                            changed(t, open, md.len());
                            self.table.mark(key);
                        }
                    }
                }
                // Renamed or deleted without an event: a listing sorts it out.
                _ => self.next_rescan = Instant::now(),
            }
        }
    }
}

/// How long after its last change a file is worth a check of its first bytes when
/// inotify lost events: long enough for any live file, short enough that a node's
/// 100,000 finished ones are not all opened.
const RECENT: std::time::Duration = std::time::Duration::from_secs(600);

/// Resumes `t` where its checkpoint says, to be checked against the file's first
/// bytes when it is opened.
fn resume_from(t: &mut Tracked, cp: crate::agent::checkpoint::FileCheckpoint, contexts: &mut ContextPool) {
    // A file checkpointed with no incarnation keeps none (its document ids keep
    // their form, see `checkpoint::born`).
    t.set_born(cp.born.max(born::LEGACY));
    t.set_resume(cp.offset);
    t.ctx = contexts.set(t.ctx, cp.context);
    t.set_unverified(true);
    t.set_fingerprint(cp.fingerprint);
    let held = t.set_times(cp.last_time_ns, cp.last_time_ns.unwrap_or(i64::MIN));
    debug_assert!(held, "a head equal to the last time is always held in the entry");
}

/// Notes a new size for a tracked file (and its open state, if open).
fn changed(t: &mut Tracked, open: Option<&mut Tailed>, size: u64) {
    t.set_size(size);
    t.active = Tick::now();
    if let Some(open) = open {
        // What decides whether it has work (growth, or truncation below the offset).
        open.size = size;
    }
}
