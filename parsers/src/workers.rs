//! What the correlator knows of each worker, kept small: a node's million worker
//! files name a million workers, and each starts with a `:job_id:` marker.
//!
//! Four maps keyed by [`Id`] (57 bytes inline) took about 230 bytes a worker with
//! their buckets: 230 MB at a million. Here a worker is one 52-byte slot found
//! through a 4-byte index, keyed by its id packed two digits to a byte
//! ([`PackedId`]), and what many workers share (their job, their actor's class) is
//! stored once and referred to by number. Every record of a worker's file looks its
//! worker up: the file's packed id is made once (`FileMeta::worker_key`), so those
//! lookups pack nothing and hash 32 bytes instead of 56.

use std::collections::HashMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use crate::id::{Id, IdMapState, PackedId};
use crate::time::Timestamp;

/// No value (for the `u32` references and the time).
const NONE: u32 = u32::MAX;
const NO_TIME: i64 = i64::MIN;

/// One worker: its id and what is known of it.
#[derive(Clone, Copy, Debug)]
struct Slot {
    key: PackedId,
    /// Index in [`Workers::jobs`].
    job: u32,
    /// Index in [`Workers::classes`].
    class: u32,
    /// Index in [`Workers::actors`]: the worker's own (a restarted actor gets a new worker).
    actor: u32,
    /// The newest time of its core-worker log, in nanoseconds, as two halves: an
    /// `i64` would align the slot to 8 bytes, 56 where 52 are used (4 MB at a
    /// million workers).
    time: [u32; 2],
}

impl Slot {
    fn new(key: PackedId) -> Slot {
        let mut s = Slot { key, job: NONE, class: NONE, actor: NONE, time: [0; 2] };
        s.set_time(NO_TIME);
        s
    }

    fn time(&self) -> i64 {
        ((self.time[0] as u64) << 32 | self.time[1] as u64) as i64
    }

    fn set_time(&mut self, t: i64) {
        self.time = [((t as u64) >> 32) as u32, t as u32];
    }
}

/// A small list of distinct values, each stored once and named by its index.
#[derive(Clone, Debug)]
struct Interned<T> {
    values: Vec<T>,
    index: HashMap<T, u32>,
}

impl<T> Default for Interned<T> {
    fn default() -> Self {
        Interned { values: vec![], index: HashMap::new() }
    }
}

impl<T: Clone + Eq + std::hash::Hash> Interned<T> {
    fn intern(&mut self, v: T) -> u32 {
        if let Some(&i) = self.index.get(&v) {
            return i;
        }
        let i = self.values.len() as u32;
        self.values.push(v.clone());
        self.index.insert(v, i);
        i
    }
}

/// Every worker learned of (see the module docs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Workers {
    slots: Vec<Slot>,
    /// Slot numbers, hashed by their id.
    index: HashTable<u32>,
    jobs: Interned<Id>,
    classes: Interned<Box<str>>,
    actors: Vec<Id>,
    hasher: IdMapState,
}

impl Workers {
    fn find(&self, key: &PackedId) -> Option<&Slot> {
        let slots = &self.slots;
        let i = self.index.find(self.hasher.hash_one(key), |&i| slots[i as usize].key == *key)?;
        Some(&slots[*i as usize])
    }

    /// `key`'s slot, made if new.
    fn slot(&mut self, key: &PackedId) -> &mut Slot {
        let key = *key;
        let (slots, hasher) = (&mut self.slots, &self.hasher);
        let hash = hasher.hash_one(key);
        let entry =
            self.index.entry(hash, |&i| slots[i as usize].key == key, |&i| hasher.hash_one(slots[i as usize].key));
        let i = *entry
            .or_insert_with(|| {
                slots.push(Slot::new(key));
                slots.len() as u32 - 1
            })
            .get();
        &mut slots[i as usize]
    }

    pub fn actor(&self, w: &PackedId) -> Option<Id> {
        let a = self.find(w)?.actor;
        (a != NONE).then(|| self.actors[a as usize])
    }

    /// Links `w` to `actor`; false when it was linked to it already.
    pub fn set_actor(&mut self, w: &PackedId, actor: Id) -> bool {
        let next = self.actors.len() as u32;
        let s = self.slot(w);
        match s.actor {
            NONE => s.actor = next,
            a => {
                let a = a as usize;
                if self.actors[a] == actor {
                    return false;
                }
                self.actors[a] = actor;
                return true;
            }
        }
        self.actors.push(actor);
        true
    }

    pub fn job(&self, w: &PackedId) -> Option<Id> {
        let j = self.find(w)?.job;
        (j != NONE).then(|| self.jobs.values[j as usize])
    }

    /// Sets `w`'s job; false when it was that job already.
    pub fn set_job(&mut self, w: &PackedId, job: Id) -> bool {
        if self.job(w) == Some(job) {
            return false;
        }
        let j = self.jobs.intern(job);
        self.slot(w).job = j;
        true
    }

    pub fn class(&self, w: &PackedId) -> Option<&str> {
        let c = self.find(w)?.class;
        (c != NONE).then(|| &*self.classes.values[c as usize])
    }

    /// Sets `w`'s actor class unless it has one already (the first marker wins).
    /// False when it had one.
    pub fn set_class_once(&mut self, w: &PackedId, class: &[u8]) -> bool {
        if self.class(w).is_some() {
            return false;
        }
        let c = self.classes.intern(String::from_utf8_lossy(class).into());
        self.slot(w).class = c;
        true
    }

    pub fn time(&self, w: &PackedId) -> Option<Timestamp> {
        let t = self.find(w)?.time();
        (t != NO_TIME).then_some(Timestamp(t))
    }

    /// Keeps the newer of `w`'s time and `t`.
    /// False when it was not newer.
    pub fn note_time(&mut self, w: &PackedId, t: Timestamp) -> bool {
        let s = self.slot(w);
        let newer = t.0 > s.time();
        s.set_time(s.time().max(t.0));
        newer
    }

    /// Adds what `other` knows, as if the facts it learned were learned here after
    /// what is known now (a later job or actor wins, the first class stays, the
    /// newest time). Returns (links changed, facts changed).
    pub fn absorb(&mut self, other: &Workers) -> (u64, u64) {
        let (mut links, mut changes) = (0, 0);
        for s in &other.slots {
            if s.job != NONE {
                changes += self.set_job(&s.key, other.jobs.values[s.job as usize]) as u64;
            }
            if s.class != NONE {
                changes += self.set_class_once(&s.key, other.classes.values[s.class as usize].as_bytes()) as u64;
            }
            if s.actor != NONE {
                links += self.set_actor(&s.key, other.actors[s.actor as usize]) as u64;
            }
            if s.time() != NO_TIME {
                changes += self.note_time(&s.key, Timestamp(s.time())) as u64;
            }
        }
        (links, changes + links)
    }

    /// Workers linked to an actor.
    pub fn actors(&self) -> usize {
        self.actors.len()
    }

    /// Workers known.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Forgets worker `key` unless it is linked to an actor; true if it went. Its
    /// slot takes the last one's place, so this costs a lookup, not a rebuild.
    pub fn remove(&mut self, key: &PackedId) -> bool {
        let (slots, hasher) = (&self.slots, &self.hasher);
        let Ok(e) = self.index.find_entry(hasher.hash_one(key), |&i| slots[i as usize].key == *key) else {
            return false;
        };
        let i = *e.get() as usize;
        if slots[i].actor != NONE {
            return false;
        }
        e.remove();
        let last = self.slots.len() - 1;
        self.slots.swap_remove(i);
        if i != last {
            let moved = self.hasher.hash_one(self.slots[i].key);
            if let Some(j) = self.index.find_mut(moved, |&j| j as usize == last) {
                *j = i as u32;
            }
        }
        true
    }

    /// Forgets every worker not linked to an actor for which `keep` says no, and
    /// gives their memory back; returns how many.
    pub fn forget(&mut self, keep: impl Fn(&PackedId) -> bool) -> usize {
        let before = self.slots.len();
        self.slots.retain(|s| s.actor != NONE || keep(&s.key));
        let gone = before - self.slots.len();
        if gone > 0 {
            self.slots.shrink_to_fit();
            let (slots, hasher) = (&self.slots, &self.hasher);
            let mut index = HashTable::with_capacity(slots.len());
            for (i, s) in slots.iter().enumerate() {
                index.insert_unique(hasher.hash_one(s.key), i as u32, |&i| hasher.hash_one(slots[i as usize].key));
            }
            self.index = index;
        }
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Id {
        Id::parse(s.as_bytes()).unwrap()
    }

    fn key(s: &str) -> PackedId {
        id(s).packed()
    }

    /// A slot's time, kept in two halves, comes back whole: the sign, both ends
    /// of the range, and no time at all.
    #[test]
    fn a_slots_time_keeps_every_bit() {
        let mut s = Slot::new(key(&"1".repeat(56)));
        assert_eq!(s.time(), NO_TIME);
        for t in [i64::MIN + 1, -1, 0, 1, 1 << 32, (1 << 32) - 1, -(1 << 32), 1_764_842_733_150_123_456, i64::MAX] {
            s.set_time(t);
            assert_eq!(s.time(), t);
        }
        let mut w = Workers::default();
        let k = key(&"2".repeat(56));
        assert!(w.note_time(&k, Timestamp(-5)) && !w.note_time(&k, Timestamp(-6)));
        assert_eq!(w.time(&k), Some(Timestamp(-5)));
        assert!(w.note_time(&k, Timestamp(1 << 40)));
        assert_eq!(w.time(&k), Some(Timestamp(1 << 40)));
    }

    /// Each worker keeps its own facts, found again by id, whatever its id's shape
    /// (sequential, shared prefix or suffix, or not 56 digits long).
    #[test]
    fn workers_keep_their_own_facts() {
        let mut w = Workers::default();
        let ids: Vec<PackedId> = (0..20_000u64)
            .map(|i| match i % 4 {
                0 => key(&format!("{i:056x}")),
                1 => key(&format!("{i:x}{}", "f".repeat(56 - format!("{i:x}").len()))),
                2 => key(&format!("abcdef{i:050x}")),
                _ => key(&format!("{i:040x}")),
            })
            .collect();
        for (i, x) in ids.iter().enumerate() {
            w.set_job(x, id(&format!("{:08x}", i % 3 + 1)));
            if i % 2 == 0 {
                w.set_class_once(x, format!("Class{}", i % 5).as_bytes());
                w.set_class_once(x, b"Later");
                assert!(w.set_actor(x, id(&format!("{i:032x}"))));
                assert!(!w.set_actor(x, id(&format!("{i:032x}"))));
            }
            w.note_time(x, Timestamp(i as i64 * 10));
            w.note_time(x, Timestamp(i as i64));
        }
        for (i, x) in ids.iter().enumerate() {
            assert_eq!(w.job(x), Some(id(&format!("{:08x}", i % 3 + 1))), "worker {i}");
            assert_eq!(w.time(x), Some(Timestamp(i as i64 * 10)));
            if i % 2 == 0 {
                assert_eq!(w.class(x), Some(format!("Class{}", i % 5).as_str()));
                assert_eq!(w.actor(x), Some(id(&format!("{i:032x}"))));
            } else {
                assert_eq!((w.class(x), w.actor(x)), (None, None));
            }
        }
        assert_eq!((w.jobs.values.len(), w.classes.values.len(), w.actors()), (3, 5, 10_000));
        assert_eq!(w.slots.len(), 20_000);
        assert!(std::mem::size_of::<Slot>() <= 52);
        assert!(w.actor(&key(&"e".repeat(56))).is_none());
        // Ids that differ only in length are different workers.
        assert!(w.actor(&key(&format!("{:039x}", 0))).is_none() && w.actor(&key(&format!("{:040x}", 0))).is_none());
        assert!(w.job(&key(&format!("{:039x}", 3))).is_none() && w.job(&key(&format!("{:040x}", 3))).is_some());
        // A worker relinked (the same worker id reused) answers with the new actor.
        assert!(w.set_actor(&ids[0], id(&"7".repeat(32))));
        assert_eq!(w.actor(&ids[0]), Some(id(&"7".repeat(32))));
    }

    /// Forgetting drops the workers asked, never one hosting an actor, and every
    /// worker kept is found again with its own facts.
    #[test]
    fn forgotten_workers_go_and_the_rest_stay_found() {
        let mut w = Workers::default();
        let ids: Vec<PackedId> = (0..10_000u64).map(|i| key(&format!("{i:056x}"))).collect();
        for (i, x) in ids.iter().enumerate() {
            w.set_job(x, id(&format!("{:08x}", i % 7 + 1)));
            w.note_time(x, Timestamp(i as i64));
            if i % 10 == 0 {
                w.set_actor(x, id(&format!("{i:032x}")));
            }
        }
        // Keep every third; actors (every tenth) stay whatever `keep` says.
        let thirds: std::collections::HashSet<PackedId> = ids.iter().step_by(3).copied().collect();
        let gone = w.forget(|k| thirds.contains(k));
        let stays = |i: usize| i % 3 == 0 || i % 10 == 0;
        assert_eq!(gone, (0..10_000).filter(|&i| !stays(i)).count());
        assert_eq!(w.len(), 10_000 - gone);
        for (i, x) in ids.iter().enumerate() {
            if stays(i) {
                assert_eq!(w.job(x), Some(id(&format!("{:08x}", i % 7 + 1))), "worker {i}");
                assert_eq!(w.time(x), Some(Timestamp(i as i64)));
                assert_eq!(w.actor(x).is_some(), i % 10 == 0);
            } else {
                assert_eq!((w.job(x), w.time(x)), (None, None), "worker {i} forgotten");
            }
        }
        // One at a time: the last slot moves into the gap and is still found.
        let (a, b) = (ids[3], *ids.last().unwrap());
        assert!(w.job(&a).is_some() && w.actor(&a).is_none());
        assert!(w.remove(&a) && !w.remove(&a));
        assert_eq!((w.job(&a), w.time(&a)), (None, None));
        assert_eq!(w.job(&b), Some(id(&format!("{:08x}", 9_999 % 7 + 1))));
        assert_eq!(w.time(&b), Some(Timestamp(9_999)));
        // A worker hosting an actor stays.
        assert!(!w.remove(&ids[10]) && w.actor(&ids[10]).is_some());
        // A forgotten worker learned again starts afresh.
        w.set_job(&ids[1], id("0000000a"));
        assert_eq!((w.job(&ids[1]), w.time(&ids[1])), (Some(id("0000000a")), None));
        assert_eq!(w.forget(|_| true), 0);
    }
}
