//! Gone: when a tracked file is no longer where the reader left it, and when it may
//! be forgotten.
//!
//! Rotation renames every file of a family (`x.1` → `x.2`, `x` → `x.1`), inotify
//! may report the two halves of a rename in different rounds (or drop them), and a
//! listing can fail or race a rename. None of that proves a file left, and a file
//! forgotten by mistake would be found again and read again from 0. So a file is
//! forgotten only on proof ([`Place`]): its descriptor says no name is left (it was
//! deleted), or a complete listing missed it after it was already missing from its
//! path. A forgotten file's position is kept where files are resumed from (as a
//! checkpoint is at start), so a file found again after all continues where it
//! stopped, its fingerprint checked. What Ray deleted before it was read is counted
//! (`raylog_files_lost_total`, `raylog_bytes_lost_total`) and named in a warning.

use std::collections::HashSet;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use super::files::Found;
use super::table::Place;
use super::Source;
use crate::agent::checkpoint::{unix_now, FileCheckpoint, FileKey, SavedContext};

impl Source {
    /// The path of tracked file `key` may no longer name it (an event said so): if
    /// it does not, the next listing looks for it. An open file with no name left
    /// was deleted: it is read to its end and forgotten, no listing needed.
    pub(super) fn check_gone(&mut self, key: FileKey) {
        let Some(t) = self.table.get(&key) else { return };
        let path = self.path(t);
        if std::fs::metadata(&path).is_ok_and(|md| FileKey::of(&md) == key) {
            return;
        }
        self.misplaced(key);
    }

    /// File `key` is not at its path: [`Place::Unknown`] until a listing finds it,
    /// or [`Place::Departed`] at once when its descriptor shows it was deleted.
    pub(super) fn misplaced(&mut self, key: FileKey) {
        if self.table.open_of(&key).is_some_and(|o| o.deleted()) {
            self.departed(key);
            return;
        }
        let Some(t) = self.table.get_mut(&key) else { return };
        if t.place() == Place::Here {
            t.set_place(Place::Unknown);
        }
        self.next_rescan = Instant::now();
    }

    /// A complete listing of its dir did not find file `key`.
    pub(super) fn unlisted(&mut self, key: FileKey) {
        let Some(t) = self.table.get(&key) else { return };
        match t.place() {
            Place::Here => self.misplaced(key),
            Place::Unknown => self.departed(key),
            Place::Departed => {}
        }
    }

    /// File `key` left (deleted, or in no logs dir): an open one is read to its end
    /// through its descriptor first (see `read_file`), a closed one is forgotten now.
    fn departed(&mut self, key: FileKey) {
        let Some(t) = self.table.get_mut(&key) else { return };
        t.set_place(Place::Departed);
        if t.is_open() {
            self.table.mark(key);
        } else {
            self.forget(key);
        }
    }

    /// Stops tracking file `key`; its checkpoint is marked gone. Unless it is known
    /// deleted, its position stays in `resume`, should it be found again.
    pub(super) fn forget(&mut self, key: FileKey) {
        let Some(t) = self.table.view(&key) else { return };
        let path = self.path(&t);
        let lost = t.behind();
        if lost > 0 && t.open.is_none() {
            self.lost(&path, lost, t.resume());
        }
        let deleted = t.open.is_some_and(|o| o.deleted());
        if let Some(mut cp) = self.position(key) {
            cp.gone_since = unix_now();
            if !deleted {
                self.resume.insert(key, self.resume_point(key, &cp));
            }
            self.closed.push(cp);
        }
        self.dirty.remove(&key);
        self.table.remove(key);
    }

    /// Where file `key` resumes if it is found again: past what was sent or held
    /// (held records are still to go out), unlike its checkpoint.
    fn resume_point(&self, key: FileKey, cp: &FileCheckpoint) -> FileCheckpoint {
        let mut point = cp.clone();
        if let Some(t) = self.table.view(&key) {
            match t.open {
                Some(o) => {
                    point.offset = o.parser.unemitted_offset();
                    point.context = SavedContext::from_parser(o.parser.context());
                }
                None => (point.offset, point.context) = (t.resume(), self.table.context_of(&t).cloned()),
            }
        }
        point
    }

    /// Ray deleted `path` (or moved it away) with `bytes` not read, from `offset` on.
    pub(super) fn lost(&self, path: &std::path::Path, bytes: u64, offset: u64) {
        self.metrics.files_lost.fetch_add(1, Relaxed);
        self.metrics.bytes_lost.fetch_add(bytes, Relaxed);
        tracing::warn!(
            path = %path.display(),
            offset,
            bytes,
            "file deleted (or moved out of the logs dirs) before it was read to its end, while it was closed (over source.max_open_files, or idle for source.close_inactive); those bytes are not shipped: raise source.max_open_files or source.close_inactive if this repeats"
        );
    }

    /// A file a listing found was deleted before it could be stat'ed: its size is
    /// not known, only that none of it was read.
    pub(super) fn lost_unread(&self, path: &std::path::Path) {
        self.metrics.files_lost.fetch_add(1, Relaxed);
        tracing::warn!(
            path = %path.display(),
            "file deleted before it could be read (found by a listing of many new files, tracked a chunk at a time); its bytes are not shipped and their number is not known"
        );
    }

    /// Drops the positions of files gone for longer than `source.forget_after`, as
    /// the checkpoint store does (at each listing, and every quarter of
    /// `forget_after`, at most a minute apart).
    pub(super) fn expire_departed(&mut self) {
        let now = unix_now();
        let after = self.cfg.source.forget_after.as_secs();
        let before = self.resume.len();
        self.resume.retain(|cp| cp.gone_since == 0 || now.saturating_sub(cp.gone_since) <= after);
        if before - self.resume.len() > 1000 {
            // Thousands of positions (a mass deletion) went: give the memory back.
            crate::agent::trim_heap();
        }
    }

    /// Reports as lost the files an earlier listing found that were gone before they
    /// could be stat'ed (a backlog of a million files is tracked a chunk at a time,
    /// and Ray may delete thousands meanwhile) and that this complete listing of
    /// their dir does not find under another name: deleted before a byte was read.
    pub(super) fn report_vanished(&mut self, new: &[Found], whole: &[bool]) {
        if self.vanished.is_empty() {
            return;
        }
        let found: HashSet<u64> = new.iter().map(|f| f.ino).collect();
        let (mut keep, listing) = (vec![], self.listing);
        for (key, dir, path) in std::mem::take(&mut self.vanished) {
            if !whole.get(dir as usize).copied().unwrap_or(false) {
                keep.push((key, dir, path));
            } else if !found.contains(&key.ino) && self.table.get(&key).is_none_or(|t| t.listed != listing) {
                self.lost_unread(&path);
            }
        }
        self.vanished = keep;
    }
}
