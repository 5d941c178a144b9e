//! The file table: every file the agent tracks, open or not.
//!
//! A long-lived node has 100,000 finished worker files and a few hundred being
//! written, so the table keeps little per file ([`Tracked`]: identity, where reading
//! resumes, the context there) and a descriptor for at most `max_open_files` of them
//! ([`Tailed`]). Files are found by `(device, inode)`, and by a hash of their path for
//! inotify's events. Work follows change: a file is looked at when it is in the
//! `ready` set (inotify said it changed, a stat poll saw it grow, it has more to read),
//! and the stat poll sweeps the table a slice at a time.

use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::tail::Tailed;
use crate::agent::checkpoint::{FileKey, Fingerprint, SavedContext};

/// A coarse clock: tenths of a second since the agent started (13 years fit).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tick(u32);

impl Tick {
    fn start() -> Instant {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *START.get_or_init(Instant::now)
    }

    pub fn now() -> Tick {
        Tick((Tick::start().elapsed().as_millis() / 100).min(u32::MAX as u128) as u32)
    }

    /// Time since this tick (to a tenth of a second).
    pub fn elapsed(self) -> std::time::Duration {
        std::time::Duration::from_millis(100 * Tick::now().0.saturating_sub(self.0) as u64)
    }
}

/// One tracked file.
pub struct Tracked {
    pub key: FileKey,
    /// Index of its logs dir in the source's dir list.
    pub dir: u32,
    /// Path inside the logs dir (`events/event_GCS.log`).
    pub rel: Box<str>,
    /// Size at the last stat.
    pub size: u64,
    /// Fingerprint of the file's start, as last known.
    pub fingerprint: Fingerprint,
    /// Where reading resumes when the file is opened: the first byte not yet
    /// emitted, the parser context there, and the last time a record there had.
    pub resume: u64,
    pub context: Option<Box<SavedContext>>,
    pub last_time: Option<i64>,
    /// The resume point came from a checkpoint and has not been checked against the
    /// file's fingerprint yet (done when it is first opened).
    pub unverified: bool,
    /// Where the file stands in time while closed: the record it stopped at, else
    /// the last one read (`i64::MIN` when never read). See `Tailed::head`.
    pub head: i64,
    /// Hash of the first line, once known (document ids derive from it).
    pub ident: Option<u64>,
    /// When data last arrived, or the file was last found changed ([`Tick`]: a
    /// 16-byte `Instant` in each of 100,000 entries would cost 1 MiB more).
    pub active: Tick,
    /// The number of the last dir listing that saw it (see `Source::rescan`).
    pub listed: u32,
    /// Whether `rel` names it (see [`Place`]).
    pub place: Place,
    pub open: Option<Box<Tailed>>,
}

/// Where a tracked file is, as far as the reader knows.
///
/// A file is forgotten only on proof that it left: its descriptor says it has no
/// name left (deleted), or a complete listing missed a file already `Unknown`. A
/// path that names another file proves nothing: rotation renames every file of a
/// family, and inotify reports the two halves of a rename in separate batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// At `rel`.
    Here,
    /// Not at `rel` any more (renamed, or deleted): the next listing looks for it by
    /// inode. Not closed meanwhile, as it cannot be reopened by its path.
    Unknown,
    /// Deleted, or in no logs dir: read to its end if open, then forgotten.
    Departed,
}

impl Tracked {
    /// Bytes not yet read (for a closed file: since its resume point).
    pub fn behind(&self) -> u64 {
        match &self.open {
            Some(t) => t.behind(),
            None => self.size.saturating_sub(self.resume),
        }
    }

    /// Where reading stands: the parser's offset if open, else the resume point.
    pub fn read_to(&self) -> u64 {
        match &self.open {
            Some(t) => t.parser.offset(),
            None => self.resume,
        }
    }

    /// Whether reading may emit something: bytes not read yet, or a record the time
    /// limit kept back.
    pub fn has_work(&self) -> bool {
        match &self.open {
            Some(t) => t.has_work() || t.size < t.parser.offset() || t.size < t.fingerprint.len,
            None => self.size != self.resume || self.size < self.fingerprint.len,
        }
    }

    /// Where the file stands in time, for reading files in time order (see
    /// `Tailed::head`).
    pub fn head(&self) -> i64 {
        match &self.open {
            Some(t) => t.head(),
            None => self.head,
        }
    }
}

/// All tracked files.
#[derive(Default)]
pub struct Table {
    files: HashMap<FileKey, Tracked>,
    /// Path hash → the file at that path. (Two of 100,000 paths sharing a 64-bit
    /// hash is a one-in-10⁹ event; it would only cost the first file its inotify
    /// lookups, and the stat poll and listings would still find its changes.)
    by_path: HashMap<u64, FileKey>,
    /// Files to look at in the next round.
    pub ready: HashSet<FileKey>,
    /// The files with a descriptor.
    open: HashSet<FileKey>,
    hasher: std::hash::RandomState,
    /// How far the stat poll's pass over the table got.
    sweep_at: usize,
}

impl Table {
    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    pub fn get(&self, key: &FileKey) -> Option<&Tracked> {
        self.files.get(key)
    }

    pub fn get_mut(&mut self, key: &FileKey) -> Option<&mut Tracked> {
        self.files.get_mut(key)
    }

    pub fn values(&self) -> impl Iterator<Item = &Tracked> {
        self.files.values()
    }

    fn path_hash(&self, path: &Path) -> u64 {
        self.hasher.hash_one(path)
    }

    /// The file `path` names, as far as the table knows.
    pub fn by_path(&self, path: &Path, full: impl Fn(&Tracked) -> PathBuf) -> Option<FileKey> {
        let key = *self.by_path.get(&self.path_hash(path))?;
        self.files.get(&key).is_some_and(|t| full(t) == path).then_some(key)
    }

    /// Adds a file (`path` is where it is now).
    pub fn insert(&mut self, t: Tracked, path: &Path) {
        self.by_path.insert(self.path_hash(path), t.key);
        if t.open.is_some() {
            self.open.insert(t.key);
        }
        self.files.insert(t.key, t);
    }

    /// Records that `key` is now at `path` (renamed), its old path being `old`.
    pub fn moved(&mut self, key: FileKey, old: &Path, path: &Path, rel: Box<str>) {
        self.unindex(key, old);
        self.by_path.insert(self.path_hash(path), key);
        if let Some(t) = self.files.get_mut(&key) {
            t.rel = rel;
        }
    }

    fn unindex(&mut self, key: FileKey, path: &Path) {
        let h = self.path_hash(path);
        if self.by_path.get(&h) == Some(&key) {
            self.by_path.remove(&h);
        }
    }

    /// Forgets a file (at `path`).
    pub fn remove(&mut self, key: FileKey, path: &Path) -> Option<Tracked> {
        self.unindex(key, path);
        self.ready.remove(&key);
        self.open.remove(&key);
        self.files.remove(&key)
    }

    /// Gives `key` its open state (or takes it away with `None`), keeping the count.
    pub fn set_open(&mut self, key: FileKey, open: Option<Box<Tailed>>) -> Option<Box<Tailed>> {
        let t = self.files.get_mut(&key)?;
        let was = std::mem::replace(&mut t.open, open);
        if t.open.is_some() {
            self.open.insert(key);
        } else {
            self.open.remove(&key);
        }
        was
    }

    /// The open files.
    pub fn open_keys(&self) -> Vec<FileKey> {
        self.open.iter().copied().collect()
    }

    /// The next `n` files of the stat poll's sweep over the table. The sweep walks
    /// the map in its own order from where it stopped (no list of 100,000 keys is
    /// kept); files added or removed meanwhile may be seen twice or missed once,
    /// which a safety net can afford.
    pub fn sweep(&mut self, n: usize) -> Vec<FileKey> {
        if self.sweep_at >= self.files.len() {
            self.sweep_at = 0;
        }
        let keys: Vec<FileKey> = self.files.keys().skip(self.sweep_at).take(n).copied().collect();
        self.sweep_at += keys.len();
        keys
    }
}
