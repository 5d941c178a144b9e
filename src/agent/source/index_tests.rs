//! The slot index against a plain map, under inserts, replacements, removals
//! (which shift runs back), growth of the table and of the slot bits, repacking and
//! shrinking, with hashes that collide on purpose.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

/// A slab of keys (by slot; sparse, so that slots near 2^32 cost nothing) and an
/// index over it.
struct Fixture {
    slab: HashMap<u32, u64>,
    /// One past the highest slot used.
    end: u32,
    index: SlotIndex,
    hash: fn(u64) -> u64,
}

impl Fixture {
    fn new(hash: fn(u64) -> u64) -> Fixture {
        Fixture { slab: HashMap::new(), end: 0, index: SlotIndex::default(), hash }
    }

    fn rehash(slab: &HashMap<u32, u64>, hash: fn(u64) -> u64) -> impl Fn(u32) -> u64 + '_ {
        move |s| hash(*slab.get(&s).expect("the index holds a vacant slot"))
    }

    fn find(&self, key: u64) -> Option<u32> {
        self.index.find((self.hash)(key), |s| self.slab.get(&s) == Some(&key))
    }

    fn insert(&mut self, key: u64, slot: u32) {
        self.end = self.end.max(slot + 1);
        self.slab.insert(slot, key);
        let h = (self.hash)(key);
        self.index.insert(h, slot, Fixture::rehash(&self.slab, self.hash));
    }

    fn remove(&mut self, key: u64, slot: u32) {
        let h = (self.hash)(key);
        self.index.remove(h, slot, Fixture::rehash(&self.slab, self.hash));
        self.slab.remove(&slot);
    }

    fn check(&self, model: &HashMap<u64, u32>) {
        assert_eq!(self.index.len(), model.len());
        for (&k, &s) in model {
            assert_eq!(self.find(k), Some(s), "key {k} lost");
        }
    }
}

fn mixed(k: u64) -> u64 {
    std::hash::BuildHasher::hash_one(&std::hash::BuildHasherDefault::<std::hash::DefaultHasher>::default(), k)
}

/// Eight homes in all, and a tag shared by keys 16 apart: long runs to shift.
fn colliding(k: u64) -> u64 {
    ((k % 8) << 61) | (k % 16)
}

/// Runs `ops` (an operation code and a number to choose with) against the index
/// and a map, comparing them every 97 steps and at the end.
fn random_ops(hash: fn(u64) -> u64, ops: &[(u8, u64)]) {
    let mut f = Fixture::new(hash);
    let mut model: HashMap<u64, u32> = HashMap::new();
    let mut free: Vec<u32> = vec![];
    let mut next_key = 0u64;
    for (step, &(op, r)) in ops.iter().enumerate() {
        match op % 10 {
            0..=4 => {
                let slot = free.pop().unwrap_or(f.end);
                f.insert(next_key, slot);
                model.insert(next_key, slot);
                next_key += 1;
            }
            5..=7 if !model.is_empty() => {
                let k = *model.keys().nth((r % model.len() as u64) as usize).unwrap();
                let s = model.remove(&k).unwrap();
                f.remove(k, s);
                free.push(s);
            }
            8 => assert_eq!(f.find(next_key + r % 5), None, "a key never added is found"),
            _ => {
                // The same key moves to a new slot (as a renamed file's path would).
                if let Some(&k) = model.keys().next() {
                    let (old, new) = (model[&k], f.end);
                    f.end += 1;
                    f.slab.insert(new, k);
                    f.slab.remove(&old);
                    let (slab, hash) = (&f.slab, f.hash);
                    f.index.upsert(hash(k), new, |s| s == old, Fixture::rehash(slab, hash));
                    model.insert(k, new);
                    free.push(old);
                }
            }
        }
        if step % 97 == 0 {
            f.check(&model);
        }
    }
    f.check(&model);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5))]

    #[test]
    fn matches_a_map_under_random_operations(ops in prop::collection::vec(any::<(u8, u64)>(), 20_000)) {
        random_ops(mixed, &ops);
    }

    #[test]
    fn matches_a_map_when_every_hash_collides(ops in prop::collection::vec(any::<(u8, u64)>(), 3_000)) {
        random_ops(colliding, &ops);
    }
}

#[test]
fn slots_past_the_first_bits_widen_the_buckets() {
    let mut f = Fixture::new(mixed);
    let mut model = HashMap::new();
    for (k, slot) in [(1u64, 3u32), (2, 70_000), (3, 5), (4, 1 << 20), (5, u32::MAX - 2)] {
        f.insert(k, slot);
        model.insert(k, slot);
        f.check(&model);
    }
    assert_eq!(f.index.bits, 32, "slot 2^32 - 3 needs every bit");
}

#[test]
fn repacking_and_shrinking_keep_every_entry() {
    let mut f = Fixture::new(mixed);
    for k in 0..50_000u64 {
        f.insert(k, k as u32);
    }
    let big = f.index.bytes();
    for k in (0..50_000u64).filter(|k| k % 10 != 0) {
        f.remove(k, k as u32);
    }
    // Pack: slot k goes to k / 10.
    let live: Vec<u64> = (0..50_000).step_by(10).collect();
    f.slab = live.iter().map(|&k| (k as u32 / 10, k)).collect();
    f.index.renumber(|s| s / 10);
    f.index.shrink_to_fit(Fixture::rehash(&f.slab, f.hash));
    let model: HashMap<u64, u32> = live.iter().map(|&k| (k, k as u32 / 10)).collect();
    f.check(&model);
    assert!(f.index.bytes() * 8 < big, "shrinking kept {} of {big} bytes", f.index.bytes());
}

#[test]
fn a_million_entries_take_about_five_bytes_each() {
    let mut f = Fixture::new(mixed);
    let n = 1_000_000;
    f.index.reserve(n, n, |_| unreachable!("nothing to rehash"));
    for k in 0..n as u64 {
        f.insert(k, k as u32);
    }
    let per = f.index.bytes() as f64 / n as f64;
    assert!((4.0..5.0).contains(&per), "{per:.2} bytes an entry after reserving");
    // And grown one at a time: between 0.68 and 0.85 full.
    let mut g = Fixture::new(mixed);
    for k in 0..n as u64 {
        g.insert(k, k as u32);
        if k % 4099 == 0 {
            let load = g.index.len() as f64 / (g.index.bytes() / 4) as f64;
            assert!(k < 100 || (0.67..=0.85).contains(&load), "load {load:.3} at {k}");
        }
    }
    assert_eq!(g.find(777_777), Some(777_777));
}
