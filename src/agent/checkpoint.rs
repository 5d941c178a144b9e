//! Checkpoints: how far each file has been delivered, surviving restarts.
//!
//! A file is known by its identity, `(device, inode)`, plus a fingerprint of its first
//! bytes (so a recycled inode is not mistaken for the old file). The fingerprint grows
//! with the file up to [`FINGERPRINT_MAX`] bytes and is always checked against bytes
//! before the saved offset. The offset saved is the first byte not yet acknowledged by
//! every sink, with the parser context in force there, so a restart resumes exactly:
//! nothing acknowledged is re-sent except the batch in flight when the agent died.
//!
//! On disk (version 3), so that saving costs what changed, not what exists:
//! - `checkpoints.json`: a snapshot, a header line `{"version":3,"generation":G}`
//!   then one file per line, as a flat array ([`flat`]: about 60 bytes a file);
//! - `checkpoints.G.journal`: the files that changed since, one per line, appended
//!   and fsynced at each save. A torn last line (a crash mid-write) is ignored.
//!
//! When the journal outgrows half the snapshot (at least 1 MiB), the two are merged
//! into a new snapshot, written temp → fsync → rename → fsync of the directory, with
//! the next generation; the old journal is then deleted. A crash at any point leaves
//! either the old snapshot with its journal or the new one. The merge streams the
//! snapshot and keeps of the journal only where each file's last line is (24 bytes a
//! file, the line read again when written), and drops files gone for longer than
//! `source.forget_after`. Versions 1 (one pretty-printed JSON
//! document) and 2 (a named object per line, twice the size) are read, and replaced
//! by version 3 at the first save.

pub mod born;
mod disk;
mod flat;
pub mod lines;
mod resume;
pub mod tasks;
pub mod times;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use disk::{load, SaveBatch, Saved};
pub use resume::Resume;

/// Bytes of a file's start that identify it.
pub const FINGERPRINT_MAX: u64 = 1024;
const VERSION: u32 = 3;
const SNAPSHOT: &str = "checkpoints.json";

/// `(device, inode)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
}

impl FileKey {
    pub fn of(meta: &std::fs::Metadata) -> FileKey {
        use std::os::unix::fs::MetadataExt;
        FileKey { dev: meta.dev(), ino: meta.ino() }
    }

    /// A stable text form, used in document ids.
    pub fn label(&self) -> String {
        format!("{}:{}", self.dev, self.ino)
    }
}

/// A hash of a file's first `len` bytes.
///
/// Only the low 48 bits of `hash` ([`Fingerprint::HASH_MASK`]) count when two are
/// compared: the file table keeps 48 bits a file (2 bytes less in each of a million
/// entries), and checkpoints written with all 64 still match. Two different
/// starts of a file on a reused inode, of the same length, pass for one another
/// once in 2^48.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct Fingerprint {
    pub len: u64,
    pub hash: u64,
}

impl PartialEq for Fingerprint {
    fn eq(&self, other: &Fingerprint) -> bool {
        self.len == other.len && self.hash_is(other.hash)
    }
}

impl Eq for Fingerprint {}

impl Fingerprint {
    /// The bits of `hash` that count.
    pub const HASH_MASK: u64 = (1 << 48) - 1;

    /// Whether `bytes` (the file's first `len`) have this fingerprint's hash.
    pub fn hash_matches(&self, bytes: &[u8]) -> bool {
        self.hash_is(crate::agent::fnv::hash64(bytes))
    }

    fn hash_is(&self, hash: u64) -> bool {
        (self.hash ^ hash) & Fingerprint::HASH_MASK == 0
    }

    /// Fingerprints the first `min(limit, FINGERPRINT_MAX)` bytes of `f` (positioned
    /// reads: the descriptor's offset is left alone, and nothing is allocated).
    pub fn read_at(f: &std::fs::File, limit: u64) -> std::io::Result<Fingerprint> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; FINGERPRINT_MAX as usize];
        let want = limit.min(FINGERPRINT_MAX) as usize;
        let mut got = 0;
        while got < want {
            match f.read_at(&mut buf[got..want], got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(Fingerprint { len: got as u64, hash: crate::agent::fnv::hash64(&buf[..got]) })
    }
}

/// Marker context in force at the saved offset (see `raylog_parsers::parser::FileContext`).
/// Boxed strings; the file table shares one copy between the files that end in
/// the same context (see [`Contexts`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SavedContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_name: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_name: Option<Box<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<Box<str>>,
    /// The actor of an actor worker's file, as the correlator knew it when the
    /// checkpoint was taken: what taught it (a core-worker log, an event) may be
    /// gone or not read again after a restart. Only on disk: the file table's
    /// shared contexts leave it out (one per actor would end their sharing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_id: Option<Box<str>>,
    /// The node of a raylet log's logs dir, which a restart may not read again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<Box<str>>,
}

impl SavedContext {
    /// The parser's context, `None` when it holds nothing.
    pub fn from_parser(c: &raylog_parsers::parser::FileContext) -> Option<Arc<SavedContext>> {
        let ctx = SavedContext {
            job_id: c.job_id.map(|i| i.as_str().into()),
            actor_name: c.actor_name.as_deref().map(Into::into),
            task_name: c.task_name.as_deref().map(Into::into),
            task_id: c.task_id.map(|i| i.as_str().into()),
            ..SavedContext::default()
        };
        (ctx != SavedContext::default()).then(|| Arc::new(ctx))
    }

    /// The context where record `at` starts (see [`raylog_parsers::record::AtRecord`]),
    /// `None` when it holds nothing.
    pub fn from_at(at: &raylog_parsers::record::AtRecord<'_>) -> Option<Arc<SavedContext>> {
        let ctx = SavedContext {
            job_id: at.job_id.map(|i| i.as_str().into()),
            actor_name: at.actor_name.map(Into::into),
            task_name: at.task_name.map(Into::into),
            task_id: at.task_id.map(|i| i.as_str().into()),
            ..SavedContext::default()
        };
        (ctx != SavedContext::default()).then(|| Arc::new(ctx))
    }

    /// `c` with the ids a restart may not learn again (`None` for none).
    pub fn with_ids(
        c: Option<Arc<SavedContext>>,
        actor: Option<&str>,
        node: Option<&str>,
    ) -> Option<Arc<SavedContext>> {
        if actor.is_none() && node.is_none() {
            return c;
        }
        let mut ctx = c.as_deref().cloned().unwrap_or_default();
        ctx.actor_id = actor.map(Into::into);
        ctx.node_id = node.map(Into::into);
        Some(Arc::new(ctx))
    }

    /// `c` without them (what the file table keeps), and them.
    #[allow(clippy::type_complexity)]
    pub fn split_ids(c: Option<Arc<SavedContext>>) -> (Option<Arc<SavedContext>>, Option<Box<str>>, Option<Box<str>>) {
        if c.as_ref().is_none_or(|c| c.actor_id.is_none() && c.node_id.is_none()) {
            return (c, None, None);
        }
        let mut ctx = c.map(Arc::unwrap_or_clone).unwrap_or_default();
        let (actor, node) = (ctx.actor_id.take(), ctx.node_id.take());
        ((ctx != SavedContext::default()).then(|| Arc::new(ctx)), actor, node)
    }

    /// Whether this is the context where record `at` starts.
    pub fn is_at(&self, at: &raylog_parsers::record::AtRecord<'_>) -> bool {
        let id = |s: &Option<Box<str>>, i: Option<&raylog_parsers::Id>| s.as_deref() == i.map(|i| i.as_str());
        id(&self.job_id, at.job_id)
            && self.actor_name.as_deref() == at.actor_name
            && self.task_name.as_deref() == at.task_name
            && id(&self.task_id, at.task_id)
    }

    /// The parser context to resume with, `last` being the time of the last record
    /// before the offset that had one of its own.
    pub fn to_parser(ctx: Option<&SavedContext>, last: Option<i64>) -> raylog_parsers::parser::FileContext {
        let id = |s: &Option<Box<str>>| s.as_deref().and_then(|s| raylog_parsers::Id::parse(s.as_bytes()));
        let empty = SavedContext::default();
        let c = ctx.unwrap_or(&empty);
        raylog_parsers::parser::FileContext {
            job_id: id(&c.job_id),
            actor_name: c.actor_name.as_deref().map(str::to_string),
            task_name: c.task_name.as_deref().map(str::to_string),
            task_id: id(&c.task_id),
            last_timestamp: last.map(raylog_parsers::Timestamp),
            // Not kept: until the file's next task marker, a print after a restart is
            // tagged by an open range as before the marker rule (its end usually
            // came meanwhile, and with it the right answer).
            task_marker_at: None,
        }
    }
}

/// One file's checkpoint.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCheckpoint {
    pub key: FileKey,
    pub fingerprint: Fingerprint,
    /// First byte not yet delivered everywhere.
    pub offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "disk::context")]
    pub context: Option<Arc<SavedContext>>,
    /// Nanoseconds of the last record before the offset that had a time of its own:
    /// the time of the time-less records right after it, so a resumed file dates
    /// them as the first read did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_time_ns: Option<i64>,
    /// Unix seconds of the last update.
    pub updated: u64,
    /// The file's incarnation ([`born`]): 0 where none is known, 1 from a
    /// checkpoint written before raylog kept them.
    #[serde(default, skip_serializing_if = "is_zero32")]
    pub born: u32,
    /// Unix seconds since the file was found gone (absent: present). Checkpoints of
    /// files gone for longer than `source.forget_after` are dropped.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub gone_since: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn is_zero32(v: &u32) -> bool {
    *v == 0
}

impl FileCheckpoint {
    /// Whether `self` may replace `old`: offsets only move forward within one file
    /// (same fingerprint); a different fingerprint is a different file on the inode.
    fn supersedes(&self, old: &FileCheckpoint) -> bool {
        old.fingerprint != self.fingerprint
            || old.born != self.born
            || old.offset <= self.offset
            || self.gone_since != old.gone_since
    }
}

/// Why checkpoints could not be loaded or saved.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{path}: {source}; check that source.state_dir exists and is writable by raylog")]
    Io { path: String, source: std::io::Error },
    #[error("{path}: not a raylog checkpoint file ({message}); move it aside to start over (files will be re-read from source.start_at)")]
    Corrupt { path: String, message: String },
    #[error("{path}: written by a newer raylog (format version {found}, this one reads {VERSION}); upgrade raylog or move the file aside")]
    Version { path: String, found: u32 },
}

/// Checkpoints that changed since the last save, and where the files on disk stand.
/// The ack tracker owns it; each save takes the changes ([`CheckpointStore::take`])
/// to a blocking thread ([`SaveBatch::write`]) and gets the new state back.
#[derive(Debug)]
pub struct CheckpointStore {
    dir: PathBuf,
    state: Saved,
    changes: HashMap<FileKey, FileCheckpoint>,
    forget_after_secs: u64,
    /// Told every delivered position (the event spool deletes what was delivered).
    observer: Option<std::sync::Arc<dyn Observer>>,
    /// The last batch whose positions were applied, all batches before it too.
    applied_batch: u64,
    /// `applied_batch` when the save under way was taken.
    saving_batch: u64,
    /// A save was taken and has not come back.
    in_save: bool,
    /// The last batch whose positions, and every earlier batch's, are on disk:
    /// the reader's journal of times drops what is older (see [`times`]).
    saved_batch: Arc<std::sync::atomic::AtomicU64>,
}

/// Whoever must hear of every delivered position (the event spool): a trait so that
/// the store knows nothing of its listeners.
pub trait Observer: std::fmt::Debug + Send + Sync {
    fn note(&self, cp: &FileCheckpoint);
}

impl CheckpointStore {
    /// Opens the checkpoints in `state_dir` (creating it if needed) for saving, and
    /// returns what they hold: where each file resumes.
    pub fn open(state_dir: &Path, forget_after_secs: u64) -> Result<(CheckpointStore, Resume), CheckpointError> {
        let (files, state) = disk::read(state_dir)?;
        let store = CheckpointStore {
            dir: state_dir.to_path_buf(),
            state,
            changes: HashMap::new(),
            forget_after_secs,
            observer: None,
            applied_batch: 0,
            saving_batch: 0,
            in_save: false,
            saved_batch: Arc::default(),
        };
        Ok((store, files))
    }

    /// Tells `observer` every delivered position from now on.
    pub fn observe(&mut self, observer: std::sync::Arc<dyn Observer>) {
        self.observer = Some(observer);
    }

    /// Records a delivered position (only ever forward for the same fingerprint).
    pub fn update(&mut self, cp: FileCheckpoint) {
        if let Some(o) = &self.observer {
            o.note(&cp);
        }
        match self.changes.get(&cp.key) {
            Some(old) if !cp.supersedes(old) => {}
            _ => {
                self.changes.insert(cp.key, cp);
            }
        }
    }

    /// Every position of batch `seq`, and of the batches before it, was applied.
    pub fn applied(&mut self, seq: u64) {
        self.applied_batch = self.applied_batch.max(seq);
        if !self.is_dirty() && !self.in_save {
            // Nothing to write: they are saved as they stand.
            self.saving_batch = self.applied_batch;
            self.saved_batch.store(self.applied_batch, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The last batch whose positions (and every earlier batch's) are on disk, as
    /// saves complete.
    pub fn saved_batch(&self) -> Arc<std::sync::atomic::AtomicU64> {
        self.saved_batch.clone()
    }

    /// Whether anything changed since the last save.
    pub fn is_dirty(&self) -> bool {
        !self.changes.is_empty() || self.state.must_compact
    }

    /// The changes, to be written by [`SaveBatch::write`] on another thread while
    /// this store keeps collecting.
    pub fn take(&mut self) -> SaveBatch {
        // Taken, not drained: after a catch-up of 100,000 files the map's capacity
        // would otherwise stay allocated.
        (self.saving_batch, self.in_save) = (self.applied_batch, true);
        let mut entries: Vec<FileCheckpoint> = std::mem::take(&mut self.changes).into_values().collect();
        // One entry per file (a map's values): no stable sort's scratch needed.
        entries.sort_unstable_by_key(|e| e.key);
        SaveBatch::new(self.dir.clone(), self.state.clone(), entries, self.forget_after_secs)
    }

    /// After a save: the new state on disk, or (on failure) the changes back, under
    /// any newer ones collected meanwhile.
    pub fn saved(
        &mut self,
        outcome: Result<Saved, (CheckpointError, Vec<FileCheckpoint>)>,
    ) -> Result<(), CheckpointError> {
        self.in_save = false;
        match outcome {
            Ok(state) => {
                self.state = state;
                self.saved_batch.store(self.saving_batch, std::sync::atomic::Ordering::Relaxed);
                Ok(())
            }
            Err((e, entries)) => {
                for cp in entries {
                    self.changes.entry(cp.key).or_insert(cp);
                }
                Err(e)
            }
        }
    }

    /// Files in the last snapshot plus the journal lines since (an upper bound of
    /// the files tracked, for logs).
    pub fn approx_len(&self) -> u64 {
        self.state.snapshot_entries + self.state.journal_entries
    }

    /// Saves everything now, on this thread (tests, and the last save at exit).
    pub fn save(&mut self) -> Result<(), CheckpointError> {
        let batch = self.take();
        let outcome = batch.write();
        self.saved(outcome)
    }
}

/// Now, in Unix seconds.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The parser contexts files stopped in, one copy of each, as checkpoints are
/// loaded (the file table keeps its own counted pool, `source::contexts`, which
/// takes these `Arc`s as they are).
///
/// Ray starts each worker's log with `:job_id:` and, for an actor, `:actor_name:`
/// lines, so nearly every file read ends in a context. Boxed per file they cost
/// about 150 bytes each (four strings and their allocations): 150 MB at a million
/// files. A node has few distinct ones (a job, an actor class, the last task's
/// name), so files share them. Those no file holds any more are dropped whenever
/// the pool has doubled since the last sweep, which keeps it O(1) per file
/// amortised and bounded by twice the contexts in use.
#[derive(Default)]
pub struct Contexts {
    pool: HashSet<Arc<SavedContext>>,
    sweep_at: usize,
}

impl Contexts {
    /// The shared copy of `c`.
    pub fn intern(&mut self, c: Option<Arc<SavedContext>>) -> Option<Arc<SavedContext>> {
        let c = c?;
        if let Some(a) = self.pool.get(&*c) {
            return Some(a.clone());
        }
        if self.pool.len() >= self.sweep_at {
            self.pool.retain(|a| Arc::strong_count(a) > 1);
            self.sweep_at = (2 * self.pool.len()).max(64);
        }
        self.pool.insert(c.clone());
        Some(c)
    }
}

#[cfg(test)]
mod tests;
