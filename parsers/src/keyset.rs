//! The index [`crate::record::Fields`] uses to find repeated keys in big records.
//!
//! A record's fields come from its line, so one line of a million `key=value` pairs
//! or JSON members means a million lookups: finding a repeated key must take constant
//! time, or parsing that line is quadratic. The index is a compact open-addressing
//! table of field positions, not a `HashMap<&str, usize>`: a slot is 8 bytes instead
//! of 24, and growing it reuses the stored hash bits instead of hashing every key
//! again, which matters because a table this size misses the cache on every probe.
//!
//! Keys are hashed with folded multiplies under a per-process random seed (the
//! construction of wyhash and foldhash): keys are chosen by whoever writes the logs,
//! and with a fixed, weak hash (FxHash-style) they could be made to collide, which
//! makes every insertion a long probe and the parse quadratic again.

/// A slot: `(hash bits << 32) | (position + 1)`, 0 when empty.
type Slot = u64;

/// Positions of distinct keys, looked up by key. It stores no keys: the caller
/// resolves a position to its key (`key_at`), so the index borrows nothing.
#[derive(Clone, Debug, Default)]
pub(crate) struct KeySet {
    slots: Vec<Slot>,
    len: usize,
}

impl KeySet {
    /// True until the first insertion (the index then exists).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Inserts `key` at position `at` unless an equal key is already there, whose
    /// position is then returned as the error.
    pub fn insert<'k>(&mut self, key: &str, at: u32, key_at: impl Fn(u32) -> &'k str) -> Result<(), u32> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let h = hash(key);
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                self.slots[i] = (h as u64) << 32 | (at as u64 + 1);
                self.len += 1;
                return Ok(());
            }
            let pos = (s as u32).wrapping_sub(1);
            if (s >> 32) as u32 == h && key_at(pos) == key {
                return Err(pos);
            }
            i = (i + 1) & mask;
        }
    }

    /// The position of `key`, if present.
    pub fn get<'k>(&self, key: &str, key_at: impl Fn(u32) -> &'k str) -> Option<u32> {
        if self.slots.is_empty() {
            return None;
        }
        let h = hash(key);
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            let pos = (s as u32).wrapping_sub(1);
            if (s >> 32) as u32 == h && key_at(pos) == key {
                return Some(pos);
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the table (at least 64 slots), placing each slot by its stored hash.
    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(64);
        let old = std::mem::replace(&mut self.slots, vec![0; size]);
        let mask = size - 1;
        for s in old.into_iter().filter(|&s| s != 0) {
            let mut i = (s >> 32) as usize & mask;
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }
}

/// Per-process random seeds, taken from std's own random hash keys.
fn seeds() -> (u64, u64) {
    use std::hash::BuildHasher;
    static SEEDS: std::sync::OnceLock<(u64, u64)> = std::sync::OnceLock::new();
    *SEEDS.get_or_init(|| {
        let s = std::collections::hash_map::RandomState::new();
        (s.hash_one(1u64) | 1, s.hash_one(2u64))
    })
}

/// Folded 64×64→128-bit multiply: every input bit reaches every output bit.
#[inline]
fn fold_mul(a: u64, b: u64) -> u64 {
    let p = a as u128 * b as u128;
    p as u64 ^ (p >> 64) as u64
}

/// 32 bits of a keyed hash of `key`.
#[inline]
fn hash(key: &str) -> u32 {
    let (k, mut h) = seeds();
    let b = key.as_bytes();
    let mut words = b.chunks_exact(8);
    for c in &mut words {
        h = fold_mul(h ^ u64::from_le_bytes(c.try_into().unwrap_or([0; 8])), k);
    }
    let tail = words.remainder();
    let mut w = [0u8; 8];
    w[..tail.len()].copy_from_slice(tail);
    h = fold_mul(h ^ u64::from_le_bytes(w), k ^ b.len() as u64);
    (fold_mul(h, k.rotate_left(29)) >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_repeats_across_growth() {
        let keys: Vec<String> = (0..5000).map(|i| format!("k{i}")).collect();
        let mut set = KeySet::default();
        let key_at = |p: u32| keys[p as usize].as_str();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(set.insert(k, i as u32, key_at), Ok(()), "{k}");
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(set.insert(k, 9999, key_at), Err(i as u32), "{k}");
            assert_eq!(set.get(k, key_at), Some(i as u32));
        }
        assert_eq!(set.get("k5000", key_at), None);
        assert_eq!(set.get("", key_at), None);
    }

    #[test]
    fn keys_differing_only_in_length_or_tail_differ() {
        let keys = ["", "\0", "\0\0", "abcdefgh", "abcdefgh\0", "abcdefghi"];
        let mut set = KeySet::default();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(set.insert(k, i as u32, |p| keys[p as usize]), Ok(()), "{k:?}");
        }
    }
}
