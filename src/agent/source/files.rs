//! Finding files and noticing change: dir listings, inotify's paths, the stat poll.
//!
//! A listing reads each logs dir (recursively) and matches entries to tracked files
//! by inode, so a known file costs no stat. A new file is stat'ed, given its resume
//! point (its checkpoint, else its start, or its end for `start_at = "end"`) and,
//! when it has something to read, prescanned for correlation before any file is
//! parsed. A file no longer listed is gone: drained to its end if open, forgotten
//! otherwise, its checkpoint marked so it is dropped after `source.forget_after`.

use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use raylog_parsers::{classify, Id};

use super::table::{Tick, Tracked};
use super::{Dir, Source, SWEEP_WATCHED};
use crate::agent::checkpoint::{unix_now, FileKey, Fingerprint};
use crate::agent::config::StartAt;
use crate::discover::{logs_roots, not_tailed, LogsRoot};

/// The fingerprint of a file skipped by `ignore_older`: matches no file, so when it
/// changes and is opened, it is read from its start.
pub(super) const READ_WHOLE: Fingerprint = Fingerprint { len: u64::MAX, hash: 0 };

/// A file listed or named by an event, not tracked yet. Its `rel` becomes the
/// tracked file's: a first scan of 100,000 files allocates each name once.
struct Found {
    dir: u32,
    rel: Box<str>,
}

impl Source {
    fn path_of(&self, f: &Found) -> PathBuf {
        self.dirs[f.dir as usize].root.join(&*f.rel)
    }

    /// Lists every logs dir; tracks new files, notices moved and vanished ones.
    /// Returns how many files are new.
    ///
    /// The listing is streamed: a known file is matched by inode and marked with
    /// this listing's number, so listing 100,000 files keeps no list of them.
    pub(super) fn rescan(&mut self) -> usize {
        let (roots, failures) = logs_roots(&self.cfg.source.paths);
        for (path, why) in failures {
            if self.failed_paths.insert(PathBuf::from(&path)) {
                tracing::warn!(%path, %why, "cannot read; will keep looking");
            }
        }
        self.listing = self.listing.wrapping_add(1);
        let mut new = vec![];
        for root in roots {
            let Some(d) = self.dir_for(&root) else { continue };
            self.list(d, &root.root, &mut new);
        }
        let found = self.track(new);
        let listing = self.listing;
        let vanished: Vec<FileKey> = self.table.values().filter(|t| t.listed != listing).map(|t| t.key).collect();
        for key in vanished {
            self.gone(key, true);
        }
        if self.first_scan {
            // Checkpoints of files not found at start: gone while the agent was down.
            let now = unix_now();
            for (_, mut cp) in std::mem::take(&mut self.resume) {
                if cp.gone_since == 0 {
                    cp.gone_since = now;
                    self.closed.push(cp);
                }
            }
        }
        if found > 1000 {
            // Tens of thousands of names were allocated and freed: give the memory back.
            crate::agent::trim_heap();
        }
        found
    }

    /// The index of `root` in the dir list, adding it if new.
    fn dir_for(&mut self, root: &LogsRoot) -> Option<u32> {
        if let Some(i) = self.dirs.iter().position(|d| d.root == root.root) {
            return Some(i as u32);
        }
        let dev = std::fs::metadata(&root.root).ok()?.dev();
        self.dirs.push(Dir {
            root: root.root.clone(),
            session: root.dir.session.clone(),
            dev,
            node: None,
            node_wait: None,
        });
        Some(self.dirs.len() as u32 - 1)
    }

    /// Walks `dir` of logs dir `d` (recursively, symlinks not followed): marks the
    /// tracked files listed, follows those renamed, and collects new ones into `new`.
    fn list(&mut self, d: u32, dir: &Path, new: &mut Vec<Found>) {
        let rd = match std::fs::read_dir(dir) {
            Ok(rd) => rd,
            Err(e) => {
                if self.failed_paths.insert(dir.to_path_buf()) {
                    tracing::warn!(path = %dir.display(), error = %e, "cannot list; will keep looking");
                }
                return;
            }
        };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                self.list(d, &e.path(), new);
                continue;
            }
            if !ft.is_file() {
                continue;
            }
            let key = FileKey { dev: self.dirs[d as usize].dev, ino: e.ino() };
            let root = &self.dirs[d as usize].root;
            let path = e.path();
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy();
            let listing = self.listing;
            let Some(t) = self.table.get_mut(&key) else {
                if !self.excluded(&rel) {
                    new.push(Found { dir: d, rel: rel.replace('\\', "/").into() });
                }
                continue;
            };
            t.listed = listing;
            if t.dir == d && *t.rel == *rel {
                t.gone = false;
            } else {
                let rel = rel.replace('\\', "/");
                self.follow_move(key, d, &rel, &path);
            }
        }
    }

    fn excluded(&self, rel: &str) -> bool {
        not_tailed(rel) || self.cfg.source.exclude.iter().any(|g| g.matches(rel))
    }

    /// Records that tracked file `key` is listed at `rel` of dir `d` (a rename moves
    /// it within the logs dir: rotation, `old/`).
    fn follow_move(&mut self, key: FileKey, d: u32, rel: &str, path: &Path) {
        let Some(t) = self.table.get_mut(&key) else { return };
        t.gone = false;
        if t.dir == d && &*t.rel == rel {
            return;
        }
        let old = self.dirs[t.dir as usize].root.join(&*t.rel);
        t.dir = d;
        if let Some(open) = &mut t.open {
            open.path = path.to_path_buf();
        }
        self.table.moved(key, &old, path, rel.into());
    }

    /// Starts tracking new files. Those with something to read are prescanned (with
    /// the core-worker logs of their workers) before any is parsed, so a worker's
    /// prints get their actor whatever order files are read in. Returns how many.
    fn track(&mut self, found: Vec<Found>) -> usize {
        let mut added = vec![];
        for f in found {
            let path = self.path_of(&f);
            let Ok(md) = std::fs::metadata(&path) else { continue };
            let key = FileKey::of(&md);
            if let Some(t) = self.table.get_mut(&key) {
                t.listed = self.listing;
                self.follow_move(key, f.dir, &f.rel, &path);
                continue;
            }
            let t = self.tracked(key, f, &md);
            if t.has_work() {
                self.table.ready.insert(key);
            }
            self.table.insert(t, &path);
            added.push(key);
        }
        let busy: std::collections::HashSet<Id> = added
            .iter()
            .filter(|k| self.table.ready.contains(k))
            .filter_map(|k| classify(&self.table.get(k)?.rel, None).worker_id)
            .collect();
        for key in &added {
            let Some(t) = self.table.get(key) else { continue };
            let (dir, path) = (t.dir, self.dirs[t.dir as usize].root.join(&*t.rel));
            let meta = classify(&t.rel, self.dirs[dir as usize].session.as_deref());
            let has_work = self.table.ready.contains(key);
            let names_busy_actor = meta.component == "core_worker" && meta.worker_id.is_some_and(|w| busy.contains(&w));
            if has_work || names_busy_actor {
                self.prescan(dir, &path, &meta);
            }
            if !self.first_scan && matches!(meta.component.as_str(), "gcs_server" | "raylet") {
                // A node is starting here (a head node's GCS comes before its raylet):
                // its node id will be announced soon.
                let until = Instant::now() + self.cfg.source.actor_hold;
                self.dirs[dir as usize].node_wait.get_or_insert(until);
            }
        }
        added.len()
    }

    /// A new file's entry: where reading resumes, from its checkpoint if it has one.
    fn tracked(&mut self, key: FileKey, f: Found, md: &std::fs::Metadata) -> Tracked {
        let mut t = Tracked {
            key,
            dir: f.dir,
            rel: f.rel,
            size: md.len(),
            fingerprint: Fingerprint::default(),
            resume: 0,
            context: None,
            last_time: None,
            unverified: false,
            head: i64::MIN,
            ident: None,
            active: Tick::now(),
            listed: self.listing,
            gone: false,
            open: None,
        };
        if let Some(cp) = self.resume.remove(&key) {
            (t.resume, t.context, t.last_time, t.fingerprint, t.unverified) =
                (cp.offset, cp.context, cp.last_time_ns, cp.fingerprint, true);
            t.head = t.last_time.unwrap_or(i64::MIN);
            return t;
        }
        if crate::agent::events::is_segment_name(&t.rel) {
            // Ray's events: raylog answered 2xx for them; they are read whole.
        } else if self.cfg.source.start_at == StartAt::End && self.first_scan && self.first_start {
            t.resume = md.len();
        } else if let Some(max) = self.cfg.source.ignore_older {
            // Old and never read: skipped until it changes, then read whole.
            if md.modified().ok().and_then(|m| m.elapsed().ok()).is_some_and(|age| age > max) {
                (t.resume, t.fingerprint, t.unverified) = (md.len(), READ_WHOLE, true);
            }
        }
        t
    }

    /// Learns correlation (actor of a worker, job of a worker), the file's time hint
    /// and a raylet's node id from what a file holds when it is found, before any file
    /// is parsed: the bytes before a resume offset will not be parsed again, and a
    /// worker's stdout may be read before the core-worker log that names its actor.
    /// Same pass as `raylog parse` makes, so the agent and the CLI tag the same records.
    fn prescan(&mut self, dir: u32, path: &Path, meta: &raylog_parsers::FileMeta) {
        if !crate::prescan::wanted_by_prescan(meta) {
            return;
        }
        use std::io::Read;
        let Ok(f) = std::fs::File::open(path) else { return };
        let mut found = crate::prescan::Prescanned::default();
        let limit = crate::prescan::prescan_limit(meta);
        let _ = crate::lines::for_each_line_chunk(f.take(limit), |c| {
            crate::prescan::prescan_bytes(meta, c, &mut self.corr, &mut found)
        });
        if let (Some(n), d) = (found.node, &mut self.dirs[dir as usize]) {
            d.node.get_or_insert(n);
        }
    }

    /// Takes in paths inotify reported. Returns how many files are new.
    ///
    /// Renames come as two events (old path, new path) in any order, so every path is
    /// resolved first, and only then is a path that no longer names its file checked:
    /// the file may just have been seen under its new name.
    pub(super) fn on_paths(&mut self, paths: Vec<PathBuf>) -> usize {
        let (mut new, mut stale) = (vec![], vec![]);
        for path in paths {
            let known = self.table.by_path(&path, |t| self.dirs[t.dir as usize].root.join(&*t.rel));
            match std::fs::metadata(&path) {
                Ok(md) if md.is_dir() => self.next_rescan = Instant::now(),
                Ok(md) if md.is_file() => {
                    let key = FileKey::of(&md);
                    if let Some(t) = self.table.get_mut(&key) {
                        changed(t, md.len());
                        self.table.ready.insert(key);
                        if known != Some(key) {
                            self.relocate(key, &path);
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
        self.track(new)
    }

    /// Where `path` is in the dirs followed, if it is a file to ship. A path outside
    /// every known logs dir may be a new session: list the dirs again soon.
    fn found_at(&mut self, path: &Path) -> Option<Found> {
        let Some(d) = self.dirs.iter().position(|d| path.starts_with(&d.root)) else {
            self.next_rescan = Instant::now();
            return None;
        };
        let rel = path.strip_prefix(&self.dirs[d].root).ok()?.to_string_lossy().replace('\\', "/");
        (!self.excluded(&rel)).then(|| Found { dir: d as u32, rel: rel.into() })
    }

    /// Tracked file `key` was seen at `path`: follow it there if it is in a logs dir.
    fn relocate(&mut self, key: FileKey, path: &Path) {
        if let Some(f) = self.found_at(path) {
            self.follow_move(key, f.dir, &f.rel, path);
        }
    }

    /// The path of tracked file `key` may no longer name it: if it does not, it is
    /// gone, unless a listing (soon) finds it elsewhere.
    fn check_gone(&mut self, key: FileKey) {
        let Some(t) = self.table.get(&key) else { return };
        let path = self.dirs[t.dir as usize].root.join(&*t.rel);
        if std::fs::metadata(&path).is_ok_and(|md| FileKey::of(&md) == key) {
            return;
        }
        self.gone(key, false);
        self.next_rescan = Instant::now();
    }

    /// File `key` is no longer at its path: an open one is read to its end (its
    /// descriptor still reads it), then forgotten; a closed one is forgotten when a
    /// listing (`listed`) confirms it is nowhere in the logs dirs.
    pub(super) fn gone(&mut self, key: FileKey, listed: bool) {
        let Some(t) = self.table.get_mut(&key) else { return };
        t.gone = true;
        if t.open.is_some() {
            self.table.ready.insert(key);
        } else if listed {
            self.forget(key);
        }
    }

    /// Stops tracking file `key`; its checkpoint is marked gone.
    pub(super) fn forget(&mut self, key: FileKey) {
        let Some(t) = self.table.get(&key) else { return };
        let path = self.dirs[t.dir as usize].root.join(&*t.rel);
        let lost = t.behind();
        if lost > 0 && t.open.is_none() {
            tracing::warn!(path = %path.display(), bytes = lost, "file deleted before it was read to its end (it was closed, over source.max_open_files); those bytes are not shipped");
        }
        if let Some(mut cp) = self.position(key) {
            cp.gone_since = unix_now();
            self.closed.push(cp);
        }
        self.dirty.remove(&key);
        self.table.remove(key, &path);
    }

    /// Stats the next slice of the table: all of it per [`SWEEP_WATCHED`] while
    /// inotify watches, per `poll_interval` otherwise. Files that changed are read.
    pub(super) fn sweep(&mut self) {
        let period = if self.watched { SWEEP_WATCHED } else { self.cfg.source.poll_interval };
        let rounds = (period.as_secs_f64().max(1.0)).ceil() as usize;
        let n = self.table.len().div_ceil(rounds);
        for key in self.table.sweep(n) {
            let Some(t) = self.table.get(&key) else { continue };
            let path = self.dirs[t.dir as usize].root.join(&*t.rel);
            match std::fs::metadata(&path) {
                Ok(md) if FileKey::of(&md) == key => {
                    if let Some(t) = self.table.get_mut(&key) {
                        if md.len() != t.size {
                            changed(t, md.len());
                            self.table.ready.insert(key);
                        }
                    }
                }
                // Renamed or deleted without an event: a listing sorts it out.
                _ => self.next_rescan = Instant::now(),
            }
        }
    }
}

/// Notes a new size for a tracked file.
fn changed(t: &mut Tracked, size: u64) {
    t.size = size;
    t.active = Tick::now();
    if let Some(open) = &mut t.open {
        // What decides whether it has work (growth, or truncation below the offset).
        open.size = size;
    }
}
