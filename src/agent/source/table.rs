//! The file table: every file the agent tracks, open or not.
//!
//! A long-lived node has 100,000 finished worker files and a few hundred being
//! written, so the table keeps little per file ([`Tracked`]: identity, where reading
//! resumes, the context there) and a descriptor for at most `max_open_files` of them
//! ([`Tailed`]). Files are found by `(device, inode)`, and by a hash of their path for
//! inotify's events. An open file's [`Tailed`] lives beside the table, keyed like
//! it, so an entry is 64 bytes whether open or not ([`super::entry`]). Work follows
//! change: a file is looked at when it is in the `ready` set (inotify said it
//! changed, a stat poll saw it grow, it has more to read), and the stat poll sweeps
//! the table a slice at a time.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Arc;

use super::contexts::ContextPool;
pub use super::entry::{Place, Tick, Tracked, View};
pub use super::homes::MAX_DIRS;
use super::homes::VACANT_DIR;
use super::index::SlotIndex;
use super::names::{Name, Names};
use super::tail::Tailed;
use crate::agent::checkpoint::{FileKey, SavedContext};

/// All tracked files: a slab of entries, found by key and by path through indices
/// of slab positions (no key or path is stored twice).
#[derive(Default)]
pub struct Table {
    slots: Vec<Tracked>,
    /// Vacant slots, reused first.
    free: Vec<u32>,
    len: usize,
    by_key: SlotIndex,
    /// `(dir, name)` → the file last seen at that path. Two entries may share a path
    /// for a while (a rotated file not yet followed to its new name, and the new file
    /// in its place): the index keeps the later one, as inotify's paths mean it.
    by_path: SlotIndex,
    pub names: Names,
    pub contexts: ContextPool,
    /// Files to look at in the next round: a bit per slot (a million files in a
    /// catch-up cost 128 KiB, where a set of keys took 36 MiB).
    ready: Vec<u64>,
    ready_count: usize,
    /// The open files' state (entries with [`OPEN`]).
    open: HashMap<FileKey, Box<Tailed>>,
    /// The heads of closed files too far from their last record's time for the
    /// entry to hold (closed with a record kept back by the time limit): few.
    heads_aside: HashMap<FileKey, i64>,
    hasher: std::hash::RandomState,
    /// How far the stat poll's pass over the slab got.
    sweep_at: usize,
}

fn key_hash(h: &std::hash::RandomState, key: &FileKey) -> u64 {
    h.hash_one(key)
}

fn path_hash(h: &std::hash::RandomState, dir: u32, raw: &[u8]) -> u64 {
    h.hash_one((dir, raw))
}

/// The hash of slot `j`'s key, for the key index to grow by.
fn rehash_key<'a>(h: &'a std::hash::RandomState, slots: &'a [Tracked]) -> impl Fn(u32) -> u64 + 'a {
    move |j| key_hash(h, &slots[j as usize].key())
}

/// The hash of slot `j`'s path, for the path index to grow by.
fn rehash_path<'a>(h: &'a std::hash::RandomState, slots: &'a [Tracked], names: &'a Names) -> impl Fn(u32) -> u64 + 'a {
    move |j| {
        let t = &slots[j as usize];
        path_hash(h, t.dir(), names.raw(t.name))
    }
}

impl Table {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    fn slot(&self, key: &FileKey) -> Option<u32> {
        let slots = &self.slots;
        self.by_key.find(key_hash(&self.hasher, key), |i| slots[i as usize].is(key))
    }

    pub fn get(&self, key: &FileKey) -> Option<&Tracked> {
        self.slot(key).map(|i| &self.slots[i as usize])
    }

    pub fn get_mut(&mut self, key: &FileKey) -> Option<&mut Tracked> {
        self.slot(key).map(|i| &mut self.slots[i as usize])
    }

    /// File `key` with its open state.
    pub fn view(&self, key: &FileKey) -> Option<View<'_>> {
        self.get(key).map(|t| self.view_of(t))
    }

    /// Entry `t` (of this table) with its open state.
    pub fn view_of<'a>(&'a self, t: &'a Tracked) -> View<'a> {
        let open = if t.is_open() { self.open.get(&t.key()).map(|o| &**o) } else { None };
        View { t, open, head_aside: self.head_of(t) }
    }

    /// Where closed file `t` stands in time (see `Tailed::head`).
    pub fn head_of(&self, t: &Tracked) -> i64 {
        t.head_here().unwrap_or_else(|| self.heads_aside.get(&t.key()).copied().unwrap_or(i64::MIN))
    }

    /// Sets the time of file `key`'s last record before its resume point, and its
    /// head (where it stands in time while closed).
    pub fn set_times(&mut self, key: &FileKey, last: Option<i64>, head: i64) {
        let Some(t) = self.get_mut(key) else { return };
        if !t.set_times(last, head) {
            self.heads_aside.insert(*key, head);
        } else if !self.heads_aside.is_empty() {
            self.heads_aside.remove(key);
        }
    }

    /// The open state of file `key`, if it is open.
    pub fn open_of(&self, key: &FileKey) -> Option<&Tailed> {
        self.open.get(key).map(|o| &**o)
    }

    pub fn open_mut(&mut self, key: &FileKey) -> Option<&mut Tailed> {
        self.open.get_mut(key).map(|o| &mut **o)
    }

    /// File `key` and its open state, both to change.
    pub fn entry_mut(&mut self, key: &FileKey) -> Option<(&mut Tracked, Option<&mut Tailed>)> {
        let i = self.slot(key)?;
        Some((&mut self.slots[i as usize], self.open.get_mut(key).map(|o| &mut **o)))
    }

    pub fn values(&self) -> impl Iterator<Item = View<'_>> {
        self.slots.iter().filter(|t| !t.vacant()).map(|t| self.view_of(t))
    }

    /// The parser context file `t` resumes in.
    pub fn context_of(&self, t: &Tracked) -> Option<&Arc<SavedContext>> {
        self.contexts.get(t.ctx)
    }

    /// Gives file `key` the context `c` to resume in.
    pub fn set_context(&mut self, key: &FileKey, c: Option<Arc<SavedContext>>) {
        if let Some(i) = self.slot(key) {
            let t = &mut self.slots[i as usize];
            t.ctx = self.contexts.set(t.ctx, c);
        }
    }

    /// Reading file `key` starts over from its start (it was truncated or replaced).
    pub fn restart(&mut self, key: &FileKey) {
        self.set_context(key, None);
        self.set_times(key, None, i64::MIN);
        if let Some(t) = self.get_mut(key) {
            t.set_resume(0);
        }
    }

    /// Path inside its logs dir of a tracked file.
    pub fn rel(&self, t: &Tracked) -> String {
        self.names.get(t.name)
    }

    /// Whether tracked file `key` is named `rel`.
    pub fn is_named(&self, key: &FileKey, rel: &str) -> bool {
        let raw = self.names.encoded(rel);
        self.get(key).is_some_and(|t| self.names.raw(t.name) == raw.as_slice())
    }

    /// The file last seen at `rel` of dir `dir`, as far as the table knows.
    pub fn by_path(&self, dir: u32, rel: &str) -> Option<FileKey> {
        let raw = self.names.encoded(rel);
        let (slots, names) = (&self.slots, &self.names);
        let i = self.by_path.find(path_hash(&self.hasher, dir, &raw), |i| {
            let t = &slots[i as usize];
            t.dir() == dir && names.raw(t.name) == raw.as_slice()
        })?;
        Some(self.slots[i as usize].key())
    }

    /// Adds a closed file (its `dir` and `name` say where it is now).
    pub fn insert(&mut self, t: Tracked) {
        let key = t.key();
        debug_assert!(self.slot(&key).is_none(), "{key:?} tracked twice");
        debug_assert!(!t.is_open());
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = t;
                i
            }
            None => {
                self.slots.push(t);
                self.slots.len() as u32 - 1
            }
        };
        self.len += 1;
        let (slots, h) = (&self.slots, &self.hasher);
        self.by_key.insert(key_hash(h, &key), i, rehash_key(h, slots));
        self.index_path(i);
    }

    /// Makes slot `i` the file at its path, in place of any other.
    fn index_path(&mut self, i: u32) {
        let (slots, names, h) = (&self.slots, &self.names, &self.hasher);
        let t = &slots[i as usize];
        let (dir, raw) = (t.dir(), names.raw(t.name));
        let hash = path_hash(h, dir, raw);
        let rehash = rehash_path(h, slots, names);
        let same = |j: u32| {
            let u = &slots[j as usize];
            u.dir() == dir && names.raw(u.name) == raw
        };
        self.by_path.upsert(hash, i, same, rehash);
    }

    /// Takes slot `i` out of the path index, if the index has it there.
    fn unindex_path(&mut self, i: u32) {
        let (slots, names, h) = (&self.slots, &self.names, &self.hasher);
        let t = &slots[i as usize];
        let hash = path_hash(h, t.dir(), names.raw(t.name));
        self.by_path.remove(hash, i, rehash_path(h, slots, names));
    }

    /// Records that `key` is now at `name` of dir `dir` (renamed). The name is the
    /// table's from now on (freed if the file was there already).
    pub fn moved(&mut self, key: FileKey, dir: u32, name: Name) {
        let Some(i) = self.slot(&key) else {
            self.names.free(name);
            return;
        };
        let t = &self.slots[i as usize];
        if t.dir() == dir && self.names.same(t.name, name) {
            self.names.free(name);
            return;
        }
        self.unindex_path(i);
        let t = &mut self.slots[i as usize];
        let old = t.name;
        t.name = name;
        t.set_dir(dir);
        self.names.free(old);
        self.index_path(i);
    }

    /// Forgets a file (and drops its descriptor).
    pub fn remove(&mut self, key: FileKey) -> Option<Tracked> {
        let i = self.slot(&key)?;
        self.unindex_path(i);
        let (slots, h) = (&self.slots, &self.hasher);
        self.by_key.remove(key_hash(h, &key), i, rehash_key(h, slots));
        self.unmark_slot(i);
        self.open.remove(&key);
        if !self.heads_aside.is_empty() {
            self.heads_aside.remove(&key);
        }
        let mut t =
            std::mem::replace(&mut self.slots[i as usize], Tracked::new(key, VACANT_DIR as u32, Name::NONE, 0, 0));
        self.names.free(t.name);
        self.contexts.release(t.ctx);
        t.ctx = super::contexts::Ctx::NONE;
        self.free.push(i);
        self.len -= 1;
        Some(t)
    }

    /// Makes room for `n` more files at once (a first scan), rather than growing
    /// the slab and indices step by step.
    pub fn reserve(&mut self, n: usize) {
        let n = n.saturating_sub(self.free.len());
        let (slots, names, h) = (&self.slots, &self.names, &self.hasher);
        let max_slot = slots.len() + n;
        self.by_key.reserve(n, max_slot, rehash_key(h, slots));
        self.by_path.reserve(n, max_slot, rehash_path(h, slots, names));
        self.slots.reserve(n);
    }

    /// Puts `key` in the next round (it must be tracked already).
    pub fn mark(&mut self, key: FileKey) {
        let slot = self.slot(&key);
        debug_assert!(slot.is_some(), "{key:?} marked ready before it is tracked");
        if let Some(i) = slot {
            let (w, b) = (i as usize / 64, 1u64 << (i % 64));
            if w >= self.ready.len() {
                self.ready.resize(self.slots.len().div_ceil(64), 0);
            }
            if self.ready[w] & b == 0 {
                self.ready[w] |= b;
                self.ready_count += 1;
            }
        }
    }

    /// Takes `key` out of the next round.
    pub fn unmark(&mut self, key: &FileKey) {
        if let Some(i) = self.slot(key) {
            self.unmark_slot(i);
        }
    }

    fn unmark_slot(&mut self, i: u32) {
        let (w, b) = (i as usize / 64, 1u64 << (i % 64));
        if self.ready.get(w).is_some_and(|v| v & b != 0) {
            self.ready[w] &= !b;
            self.ready_count -= 1;
        }
    }

    pub fn is_ready(&self, key: &FileKey) -> bool {
        self.slot(key).is_some_and(|i| self.ready.get(i as usize / 64).is_some_and(|v| v & (1 << (i % 64)) != 0))
    }

    /// How many files are in the next round.
    pub fn ready_len(&self) -> usize {
        self.ready_count
    }

    /// The files in the next round, in slab order.
    pub fn ready(&self) -> impl Iterator<Item = View<'_>> {
        self.ready.iter().enumerate().flat_map(move |(w, &bits)| {
            let mut bits = bits;
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    self.view_of(&self.slots[w * 64 + b])
                })
            })
        })
    }

    /// Gives `key` its open state (or takes it away with `None`), keeping the count.
    pub fn set_open(&mut self, key: FileKey, open: Option<Box<Tailed>>) -> Option<Box<Tailed>> {
        let t = self.get_mut(&key)?;
        match open {
            Some(o) => {
                t.set_open(true);
                self.open.insert(key, o)
            }
            None => {
                t.set_open(false);
                self.open.remove(&key)
            }
        }
    }

    /// The open files.
    pub fn open_keys(&self) -> Vec<FileKey> {
        self.open.keys().copied().collect()
    }

    /// The next `n` files of the stat poll's sweep over the slab (from where it
    /// stopped; files added or removed meanwhile may be seen twice or missed once,
    /// which a safety net can afford).
    pub fn sweep(&mut self, n: usize) -> Vec<FileKey> {
        if self.sweep_at >= self.slots.len() {
            self.sweep_at = 0;
        }
        let mut keys = Vec::with_capacity(n.min(self.len));
        while keys.len() < n && self.sweep_at < self.slots.len() {
            let t = &self.slots[self.sweep_at];
            if !t.vacant() {
                keys.push(t.key());
            }
            self.sweep_at += 1;
        }
        keys
    }

    /// Gives memory back after many files left: the name arena is rewritten when
    /// mostly garbage, and the slab packed when mostly vacant. Not while a listing
    /// holds names of files not tracked yet (they would be lost in the rewrite).
    pub fn maintain(&mut self) {
        let sparse = self.free.len() >= 4096 && self.free.len() * 2 > self.slots.len();
        if !sparse && !self.names.wants_compact() {
            return;
        }
        if sparse {
            self.pack();
        }
        let moved = self.names.compact(self.slots.iter().filter(|t| !t.vacant()).map(|t| t.name));
        for (t, n) in self.slots.iter_mut().filter(|t| !t.vacant()).zip(moved) {
            t.name = n;
        }
    }

    /// Drops the vacant slots. The indices keep their hashes (they derive from what
    /// the entries hold, not where), so their slot numbers are rewritten in place.
    fn pack(&mut self) {
        let mut to = vec![u32::MAX; self.slots.len()];
        let mut n = 0;
        for (i, t) in self.slots.iter().enumerate() {
            if !t.vacant() {
                to[i] = n;
                n += 1;
            }
        }
        let mut ready = vec![0u64; (n as usize).div_ceil(64)];
        for t in self.ready() {
            let i = to[self.slot(&t.t.key()).expect("a ready file is tracked") as usize] as usize;
            ready[i / 64] |= 1 << (i % 64);
        }
        self.ready = ready;
        self.slots.retain(|t| !t.vacant());
        self.slots.shrink_to_fit();
        (self.free, self.sweep_at) = (vec![], 0);
        self.by_key.renumber(|i| to[i as usize]);
        self.by_path.renumber(|i| to[i as usize]);
        let (slots, names, h) = (&self.slots, &self.names, &self.hasher);
        self.by_key.shrink_to_fit(rehash_key(h, slots));
        self.by_path.shrink_to_fit(rehash_path(h, slots, names));
    }
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
