//! A file is one incarnation (see `checkpoint::born`): a new file on the inode of
//! one tracked, or checkpointed, is told from it and read as a new file, from its
//! start and with document ids of its own.

use std::path::Path;

use super::copies::Truncated;
use super::table::Place;
use super::Source;
use crate::agent::checkpoint::{born, FileCheckpoint, FileKey, Fingerprint};

impl Source {
    /// Whether the file at `path`, born `now`, is not the one checkpointed (`cp`) on
    /// its inode (then it is read as a new file: from its start, with its own ids).
    pub(super) fn another_incarnation(&self, cp: &FileCheckpoint, now: u32, path: &Path) -> bool {
        let (saved, fp) = (cp.born, cp.fingerprint);
        // Birth times tick coarsely (ext4's clock: a few ms), so a file deleted and
        // its inode reused within one tick look alike to them: then the first bytes
        // tell (those the checkpoint kept; a file found again with others is not it).
        let other = born::differ(saved, now) || head_differs(path, fp);
        if other {
            tracing::info!(path = %path.display(), "a new file on the inode of one read before (born since): reading it from its start");
        }
        other
    }

    /// Whether tracked file `key` (stat'ed at `path`: `md`) is another file than the one
    /// tracked on its inode (born since): then the one tracked is gone, and is
    /// forgotten, so that this one is tracked as a new file.
    /// `moved`: found under another name than the one tracked (else the first
    /// bytes are not read: an event per append must not cost a read).
    pub(super) fn reborn(&mut self, key: FileKey, path: &Path, md: &std::fs::Metadata, moved: bool) -> bool {
        let Some(t) = self.table.get(&key) else { return false };
        // (An open file's inode cannot be reused: its descriptor holds it.)
        if t.is_open() {
            return false;
        }
        // Birth times tick coarsely (a few ms): within a tick, a file believed gone
        // (moved or deleted), or found under another name, with other first bytes
        // is another one. (A rotation renames a file whole; a truncated one taken
        // for another loses nothing: its bytes are gone.)
        let fp = t.fingerprint();
        let gone_other = || (t.place() != Place::Here || moved) && head_differs(path, fp);
        if !born::differ(t.born(), born::of_metadata(md)) && !gone_other() {
            return false;
        }
        tracing::info!(path = %self.path(t).display(), "another file on this inode than the one tracked (born since, or other first bytes where it was thought gone): reading it from its start");
        // Or it is the file tracked, truncated in place and renamed: where it stood
        // is kept for its copy, should one turn up (see `copies`).
        let (resume, ctx, last) = (t.resume(), self.table.context_of(t).cloned(), t.last_time());
        self.note_truncated(Truncated::new(key, fp, resume, ctx, last));
        self.forget(key);
        // Its position is no one's now: the new file is read from its start.
        self.resume.remove(&key);
        true
    }
}

/// Whether the file at `path` no longer starts with the bytes fingerprinted `fp`
/// (false when none were: an empty fingerprint, or a file to read whole).
fn head_differs(path: &Path, fp: Fingerprint) -> bool {
    fp.len > 0
        && fp.len != u64::MAX
        && std::fs::File::open(path).is_ok_and(|h| Fingerprint::read_at(&h, fp.len).is_ok_and(|x| x != fp))
}
