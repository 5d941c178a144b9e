//! Where each file resumes: the checkpoints loaded at start, until discovery takes
//! them.
//!
//! A restart on a node with a million files loads a million checkpoints before the
//! first listing finds the files. In a `HashMap` they took about 390 MiB (80-byte
//! entries in a table of 2^21 buckets, plus growth); here they are one vector sorted
//! by file (80 MiB), found by binary search. A file found takes its entry (a bit in
//! a bitset marks it taken, the vector is packed once most are), and the few
//! checkpoints put back later (a file forgotten that may come back) go to a small
//! map beside it. A lookup first narrows the search to the entries of one slice of
//! the inodes ([`Jumps`]): a binary search over 80 MiB missed the cache at each of
//! its 20 steps, 13 % of a restart's CPU at a million files.

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
    jumps: Jumps,
}

/// Slices of `sorted` by inode: where the entries of each of at most [`SLICES`]
/// equal inode ranges start. Only when every entry is on one device (sorted by
/// device first, the inodes of two devices would interleave the ranges).
#[derive(Debug, Default)]
struct Jumps {
    dev: u64,
    min: u64,
    shift: u32,
    /// `starts[b]`: the first entry whose inode range is `b` or later, and the
    /// number of entries at the end.
    starts: Vec<u32>,
}

const SLICES: u64 = 1 << 16;

impl Jumps {
    fn of(sorted: &[FileCheckpoint]) -> Jumps {
        let (Some(first), Some(last)) = (sorted.first(), sorted.last()) else { return Jumps::default() };
        if sorted.len() < 4096 || first.key.dev != last.key.dev {
            return Jumps::default();
        }
        let (min, span) = (first.key.ino, last.key.ino - first.key.ino);
        let shift = (0..64).find(|s| span >> s < SLICES).unwrap_or(64);
        let slices = (span >> shift) as usize + 1;
        let mut starts = Vec::with_capacity(slices + 1);
        let mut i = 0;
        for b in 0..=slices {
            while i < sorted.len() && (((sorted[i].key.ino - min) >> shift) as usize) < b {
                i += 1;
            }
            starts.push(i as u32);
        }
        Jumps { dev: first.key.dev, min, shift, starts }
    }

    /// The entries `key` can be among: none when it is off the device or outside
    /// the inodes of every entry.
    fn range(&self, key: &FileKey, len: usize) -> std::ops::Range<usize> {
        if self.starts.is_empty() {
            return 0..len;
        }
        let slices = self.starts.len() as u64 - 1;
        match key.ino.checked_sub(self.min).map(|d| d >> self.shift) {
            Some(b) if key.dev == self.dev && b < slices => {
                self.starts[b as usize] as usize..self.starts[b as usize + 1] as usize
            }
            _ => 0..0,
        }
    }
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
        let jumps = Jumps::of(&sorted);
        Resume { sorted, taken, n_taken: 0, extra: HashMap::new(), jumps }
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
        let r = self.jumps.range(key, self.sorted.len());
        let i = r.start + self.sorted[r].binary_search_by_key(key, |c| c.key).ok()?;
        (!self.is_taken(i)).then_some(i)
    }

    pub fn get(&self, key: &FileKey) -> Option<&FileCheckpoint> {
        self.extra.get(key).or_else(|| self.find(key).map(|i| &self.sorted[i]))
    }

    /// Takes `key`'s checkpoint.
    pub fn remove(&mut self, key: &FileKey) -> Option<FileCheckpoint> {
        if let Some(cp) = self.extra.remove(key) {
            self.shrink_extra();
            return Some(cp);
        }
        let i = self.find(key)?;
        self.take(i);
        let cp = FileCheckpoint { context: self.sorted[i].context.take(), ..self.sorted[i] };
        // A quarter taken: while a restart's listing fills the file table, the
        // loaded entries give their memory back as they go, so the two together
        // stay under what the full table takes at the end (packed at half, the
        // 80 MiB loaded beside half of a million files' table was the restart's
        // peak, 9 MiB over the table's own; at three quarters, more).
        if self.n_taken >= 4096 && self.n_taken * 4 >= self.sorted.len() {
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
        self.shrink_extra();
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

    /// Gives back the map's memory once it is under a quarter full: 100,000 files
    /// deleted at once put back 100,000 checkpoints for `forget_after` (a table of
    /// 12 MiB), which a map keeps when they are dropped.
    fn shrink_extra(&mut self) {
        if self.extra.capacity() >= 64 && self.extra.len() * 4 < self.extra.capacity() {
            self.extra.shrink_to_fit();
        }
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
        self.jumps = Jumps::of(&self.sorted);
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
            born: 0,
            gone_since: 0,
        }
    }

    /// Found through the inode slices as by a search of the whole: present and
    /// absent inodes, the extremes, clustered and spread inodes, two devices.
    #[test]
    fn slices_find_what_a_whole_search_finds() {
        let mut x: u64 = 3;
        let mut next = || {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            x >> 20
        };
        for case in 0..5 {
            let inos: Vec<u64> = match case {
                0 => (0..30_000).map(|i| 1000 + i * 3).collect(),
                1 => (0..30_000).map(|_| next()).collect(),
                2 => (0..30_000).map(|i| if i % 2 == 0 { i } else { u64::MAX - i }).collect(),
                3 => (0..30_000).map(|i| 5 + i % 7_000).collect(),
                // From inode 0, one inode a slice: probing u64::MAX is the furthest slice.
                _ => (0..30_000).collect(),
            };
            let mut v: Vec<FileCheckpoint> = inos.iter().map(|&i| cp(i, i)).collect();
            if case == 3 {
                v.iter_mut().take(10_000).for_each(|c| c.key.dev = 2);
            }
            let r = Resume::from_entries(v);
            assert_eq!(r.jumps.starts.is_empty(), case == 3, "case {case}: slices only on one device");
            let probes = inos.iter().flat_map(|&i| [i, i.wrapping_add(1), i.wrapping_sub(1)]).chain([0, u64::MAX]);
            for ino in probes {
                for dev in [1, 2] {
                    let key = FileKey { dev, ino };
                    let whole = r.sorted.binary_search_by_key(&key, |c| c.key).ok();
                    assert_eq!(r.find(&key), whole, "case {case}: {key:?}");
                }
            }
        }
    }

    /// Files deleted at once put their checkpoints back until `forget_after`; once
    /// they are dropped, or taken again, the map's memory goes too.
    #[test]
    fn put_back_checkpoints_give_their_memory_back_when_they_go() {
        let mut r = Resume::from_entries(Vec::new());
        for i in 0..10_000 {
            r.insert(cp(i, 0).key, cp(i, i));
        }
        assert!(r.extra.capacity() >= 10_000);
        r.retain(|c| c.key.ino < 100);
        assert_eq!(r.len(), 100);
        assert!(r.extra.capacity() < 1_000, "kept {}", r.extra.capacity());
        for i in 0..100 {
            r.insert(cp(i + 100, 0).key, cp(i + 100, 1));
        }
        for i in 0..200 {
            assert_eq!(r.remove(&cp(i, 0).key).map(|c| c.offset), Some(if i < 100 { i } else { 1 }));
        }
        assert!(r.extra.capacity() < 64, "kept {}", r.extra.capacity());
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
