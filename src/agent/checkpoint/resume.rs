//! Where each file resumes: the checkpoints loaded at start, until discovery takes
//! them.
//!
//! A restart on a node with a million files loads a million checkpoints before the
//! first listing finds the files. In a `HashMap` they took about 390 MiB (80-byte
//! entries in a table of 2^21 buckets, plus growth); here they are one vector sorted
//! by file (80 MiB), found by binary search. A file found takes its entry (a bit in
//! a bitset marks it taken, the vector is packed once most are), and the few
//! checkpoints put back later (a file forgotten that may come back) go to a small
//! map beside it.

use std::collections::HashMap;

use super::{FileCheckpoint, FileKey};

#[derive(Debug, Default)]
pub struct Resume {
    /// Sorted by key, keys unique.
    sorted: Vec<FileCheckpoint>,
    /// A bit per entry of `sorted`: taken.
    taken: Vec<u64>,
    n_taken: usize,
    /// Put back since the load.
    extra: HashMap<FileKey, FileCheckpoint>,
}

impl Resume {
    /// From entries in any order; of two for the same file, the later one counts.
    pub fn from_entries(mut v: Vec<FileCheckpoint>) -> Resume {
        // Stable: the later of two entries for one file stays later, and is kept
        // (`dedup_by` drops the later of two neighbours: it is swapped back first).
        // In place: a million checkpoints are 80 MiB, a copy as much again.
        v.sort_by_key(|c| c.key);
        v.dedup_by(|later, kept| {
            let same = later.key == kept.key;
            if same {
                std::mem::swap(later, kept);
            }
            same
        });
        let mut sorted = v;
        sorted.shrink_to_fit();
        let taken = vec![0; sorted.len().div_ceil(64)];
        Resume { sorted, taken, n_taken: 0, extra: HashMap::new() }
    }

    pub fn len(&self) -> usize {
        self.sorted.len() - self.n_taken + self.extra.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn is_taken(&self, i: usize) -> bool {
        bit(&self.taken, i)
    }

    fn take(&mut self, i: usize) {
        self.taken[i / 64] |= 1 << (i % 64);
        self.n_taken += 1;
    }

    /// The index in `sorted` of `key`'s entry, if not taken.
    fn find(&self, key: &FileKey) -> Option<usize> {
        let i = self.sorted.binary_search_by_key(key, |c| c.key).ok()?;
        (!self.is_taken(i)).then_some(i)
    }

    pub fn get(&self, key: &FileKey) -> Option<&FileCheckpoint> {
        self.extra.get(key).or_else(|| self.find(key).map(|i| &self.sorted[i]))
    }

    /// Takes `key`'s checkpoint.
    pub fn remove(&mut self, key: &FileKey) -> Option<FileCheckpoint> {
        if let Some(cp) = self.extra.remove(key) {
            return Some(cp);
        }
        let i = self.find(key)?;
        self.take(i);
        let cp = FileCheckpoint { context: self.sorted[i].context.take(), ..self.sorted[i] };
        // Half taken: while a restart's listing fills the file table, the loaded
        // entries give their memory back as they go (at three quarters, the peak
        // held both for most of the listing).
        if self.n_taken >= 4096 && self.n_taken * 2 >= self.sorted.len() {
            self.pack();
        }
        Some(cp)
    }

    /// Puts a checkpoint (back).
    pub fn insert(&mut self, key: FileKey, cp: FileCheckpoint) {
        match self.find(&key) {
            Some(i) => self.sorted[i] = cp,
            None => {
                self.extra.insert(key, cp);
            }
        }
    }

    /// Keeps the entries `keep` says to.
    pub fn retain(&mut self, mut keep: impl FnMut(&FileCheckpoint) -> bool) {
        self.extra.retain(|_, cp| keep(cp));
        for i in 0..self.sorted.len() {
            if !self.is_taken(i) && !keep(&self.sorted[i]) {
                self.take(i);
            }
        }
    }

    pub fn values_mut(&mut self) -> impl Iterator<Item = &mut FileCheckpoint> {
        let taken = &self.taken;
        let loaded = self.sorted.iter_mut().enumerate().filter(move |(i, _)| !bit(taken, *i));
        loaded.map(|(_, cp)| cp).chain(self.extra.values_mut())
    }

    pub fn values(&self) -> impl Iterator<Item = &FileCheckpoint> {
        let loaded = self.sorted.iter().enumerate().filter(|(i, _)| !self.is_taken(*i));
        loaded.map(|(_, cp)| cp).chain(self.extra.values())
    }

    /// Gives back the memory of the taken entries.
    fn pack(&mut self) {
        let taken = std::mem::take(&mut self.taken);
        let mut i = 0;
        self.sorted.retain(|_| {
            i += 1;
            !bit(&taken, i - 1)
        });
        self.sorted.shrink_to_fit();
        self.taken = vec![0; self.sorted.len().div_ceil(64)];
        self.n_taken = 0;
    }

    /// As a map (tests, tools).
    pub fn into_map(self) -> HashMap<FileKey, FileCheckpoint> {
        let mut m: HashMap<FileKey, FileCheckpoint> = HashMap::with_capacity(self.len());
        let taken = &self.taken;
        for (i, cp) in self.sorted.into_iter().enumerate() {
            if !bit(taken, i) {
                m.insert(cp.key, cp);
            }
        }
        m.extend(self.extra);
        m
    }
}

fn bit(bits: &[u64], i: usize) -> bool {
    bits[i / 64] & (1 << (i % 64)) != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::checkpoint::Fingerprint;

    fn cp(ino: u64, offset: u64) -> FileCheckpoint {
        FileCheckpoint {
            key: FileKey { dev: 1, ino },
            fingerprint: Fingerprint { len: 10, hash: ino },
            offset,
            context: None,
            last_time_ns: None,
            updated: 1,
            gone_since: 0,
        }
    }

    #[test]
    fn entries_are_found_taken_put_back_and_packed() {
        let mut v: Vec<FileCheckpoint> = (0..20_000).rev().map(|i| cp(i, i)).collect();
        v.push(cp(5, 555));
        let mut r = Resume::from_entries(v);
        assert_eq!((r.len(), r.get(&cp(5, 0).key).map(|c| c.offset)), (20_000, Some(555)), "the later entry counts");
        for i in 0..16_000 {
            assert_eq!(r.remove(&cp(i, 0).key).map(|c| c.offset), Some(if i == 5 { 555 } else { i }));
            assert!(r.get(&cp(i, 0).key).is_none() && r.remove(&cp(i, 0).key).is_none(), "taken once");
        }
        assert!(r.sorted.len() < 20_000, "packed once most were taken");
        assert_eq!(r.len(), 4_000);
        r.insert(cp(3, 0).key, cp(3, 33));
        r.insert(cp(19_999, 0).key, cp(19_999, 1));
        assert_eq!(r.get(&cp(3, 0).key).map(|c| c.offset), Some(33));
        assert_eq!(r.get(&cp(19_999, 0).key).map(|c| c.offset), Some(1));
        assert_eq!(r.len(), 4_001);
        r.retain(|c| c.key.ino % 2 == 1);
        assert_eq!(r.values().count(), r.len());
        assert!(r.values().all(|c| c.key.ino % 2 == 1));
        for c in r.values_mut() {
            c.gone_since = 7;
        }
        let m = r.into_map();
        assert_eq!(m.len(), 2_001);
        assert!(m.values().all(|c| c.gone_since == 7) && m.contains_key(&cp(3, 0).key));
    }
}
