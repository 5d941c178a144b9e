//! The file table's indices: a hash (of a file's key, or of its path) to the slab
//! position holding it, in 4 bytes a bucket.
//!
//! A million tracked files need two indices of a million entries each. A
//! `hashbrown` table of `u32` costs 5 bytes a bucket and has a power of two of them,
//! so just past 917,504 entries it doubles to 2^21 buckets: 21 bytes a file for
//! the two. Here a bucket is one `u32` holding the slot (plus one; 0 is empty) in
//! its low `bits` and, in the bits the slab does not need, a tag of the hash that
//! rules out most other entries without reading the slab. Any number of buckets
//! will do (the hash picks one by multiplying, not masking), so the table grows by
//! a quarter at a load of 0.85 and stays between 0.68 and 0.85 full: about 5 bytes
//! a file for each index.
//!
//! Collisions probe linearly; a removal shifts the entries after it back (no
//! tombstones), which needs their hashes again: every call that can move entries
//! takes `rehash`, the hash of what a slot holds (the table computes it from the
//! slab, as it did to insert it).

/// Buckets of a table that has never held anything.
const MIN_CAP: usize = 16;
/// Bits for slots in a small table (the rest are the tag).
const MIN_BITS: u32 = 16;

#[derive(Default)]
pub struct SlotIndex {
    buckets: Vec<u32>,
    len: usize,
    /// Slot (+ 1) bits of a bucket; the `32 - bits` above them are the tag.
    bits: u32,
}

/// Bits a bucket needs for slots up to `max_slot`.
fn bits_for(max_slot: usize) -> u32 {
    (usize::BITS - (max_slot + 1).leading_zeros()).max(MIN_BITS)
}

/// The slot in bucket `b` (not empty) of a table with `bits` slot bits.
fn slot_of(b: u32, bits: u32) -> u32 {
    (b & u32::MAX >> (32 - bits)) - 1
}

/// Buckets for `n` entries at the highest load allowed (0.85).
fn cap_for(n: usize) -> usize {
    n * 20 / 17 + 1
}

impl SlotIndex {
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Bytes of buckets.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.buckets.capacity() * 4
    }

    fn home(&self, hash: u64) -> usize {
        ((hash as u128 * self.buckets.len() as u128) >> 64) as usize
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.buckets.len() {
            0
        } else {
            i + 1
        }
    }

    /// The tag of `hash`: bits of its low half (the home comes from the high bits).
    fn tag(&self, hash: u64) -> u32 {
        (hash as u32).checked_shr(self.bits).unwrap_or(0)
    }

    fn pack(&self, tag: u32, slot: u32) -> u32 {
        tag.checked_shl(self.bits).unwrap_or(0) | (slot + 1)
    }

    fn slot_of(&self, b: u32) -> u32 {
        slot_of(b, self.bits)
    }

    fn tag_of(&self, b: u32) -> u32 {
        b.checked_shr(self.bits).unwrap_or(0)
    }

    /// The bucket of the entry under `hash` that `eq` accepts.
    fn position(&self, hash: u64, mut eq: impl FnMut(u32) -> bool) -> Option<usize> {
        if self.buckets.is_empty() {
            return None;
        }
        let (tag, mut i) = (self.tag(hash), self.home(hash));
        loop {
            let b = self.buckets[i];
            if b == 0 {
                return None;
            }
            if self.tag_of(b) == tag && eq(self.slot_of(b)) {
                return Some(i);
            }
            i = self.next(i);
        }
    }

    /// The slot under `hash` that `eq` accepts.
    pub fn find(&self, hash: u64, eq: impl FnMut(u32) -> bool) -> Option<u32> {
        self.position(hash, eq).map(|i| self.slot_of(self.buckets[i]))
    }

    /// Adds `slot` under `hash` (not there yet).
    pub fn insert(&mut self, hash: u64, slot: u32, rehash: impl Fn(u32) -> u64) {
        self.make_room(1, slot as usize, true, &rehash);
        self.place(hash, slot);
        self.len += 1;
    }

    /// Puts `slot` under `hash` in place of the entry `eq` accepts, or adds it.
    pub fn upsert(&mut self, hash: u64, slot: u32, eq: impl FnMut(u32) -> bool, rehash: impl Fn(u32) -> u64) {
        match self.position(hash, eq) {
            Some(i) if bits_for(slot as usize) <= self.bits => self.buckets[i] = self.pack(self.tag(hash), slot),
            Some(i) => {
                self.remove_at(i, &rehash);
                self.insert(hash, slot, rehash);
            }
            None => self.insert(hash, slot, rehash),
        }
    }

    /// Takes `slot` out from under `hash`, if it is there.
    pub fn remove(&mut self, hash: u64, slot: u32, rehash: impl Fn(u32) -> u64) {
        if let Some(i) = self.position(hash, |s| s == slot) {
            self.remove_at(i, &rehash);
        }
    }

    /// Empties bucket `i` and moves each entry of the run after it that may go
    /// there back (an entry may sit anywhere from its home on, never before it).
    fn remove_at(&mut self, i: usize, rehash: &impl Fn(u32) -> u64) {
        let cap = self.buckets.len();
        let dist = |from: usize, to: usize| (to + cap - from) % cap;
        let (mut hole, mut j) = (i, i);
        loop {
            j = self.next(j);
            let b = self.buckets[j];
            if b == 0 {
                break;
            }
            let home = self.home(rehash(self.slot_of(b)));
            if dist(home, j) >= dist(hole, j) {
                self.buckets[hole] = b;
                hole = j;
            }
        }
        self.buckets[hole] = 0;
        self.len -= 1;
    }

    /// Makes room for `n` more entries, with slots up to `max_slot`: exactly (a
    /// first scan knows how many files it found; growing past them adds a quarter).
    pub fn reserve(&mut self, n: usize, max_slot: usize, rehash: impl Fn(u32) -> u64) {
        self.make_room(n, max_slot, false, &rehash);
    }

    /// Makes room for `n` more entries with slots up to `max_slot`; when the
    /// buckets must grow, with a quarter to spare if `spare`.
    fn make_room(&mut self, n: usize, max_slot: usize, spare: bool, rehash: &impl Fn(u32) -> u64) {
        let bits = bits_for(max_slot).max(self.bits);
        assert!(bits <= 32, "over 4 billion tracked files");
        let fits = cap_for(self.len + n) <= self.buckets.len();
        if !fits || bits != self.bits {
            let need = cap_for(self.len + n);
            let cap = if fits { self.buckets.len() } else { (if spare { need * 5 / 4 } else { need }).max(MIN_CAP) };
            self.rebuild(cap, bits, rehash);
        }
    }

    /// Gives back buckets beyond what the entries need.
    pub fn shrink_to_fit(&mut self, rehash: impl Fn(u32) -> u64) {
        let cap = (cap_for(self.len) * 5 / 4).max(MIN_CAP);
        if cap < self.buckets.len() {
            self.rebuild(cap, self.bits, &rehash);
        }
    }

    /// Changes every slot number (the slab was packed; hashes are unchanged).
    pub fn renumber(&mut self, to: impl Fn(u32) -> u32) {
        for i in 0..self.buckets.len() {
            let b = self.buckets[i];
            if b != 0 {
                self.buckets[i] = self.pack(self.tag_of(b), to(self.slot_of(b)));
            }
        }
    }

    fn rebuild(&mut self, cap: usize, bits: u32, rehash: &impl Fn(u32) -> u64) {
        let old = std::mem::replace(&mut self.buckets, vec![0; cap]);
        let old_bits = std::mem::replace(&mut self.bits, bits);
        for b in old.into_iter().filter(|&b| b != 0) {
            let slot = slot_of(b, old_bits);
            self.place(rehash(slot), slot);
        }
    }

    /// Writes `slot` in the first empty bucket from `hash`'s home.
    fn place(&mut self, hash: u64, slot: u32) {
        let mut i = self.home(hash);
        while self.buckets[i] != 0 {
            i = self.next(i);
        }
        self.buckets[i] = self.pack(self.tag(hash), slot);
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
