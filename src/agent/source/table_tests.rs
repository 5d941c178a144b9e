//! The slab, its two indices and the name arena, kept consistent through inserts,
//! renames, removals and the repacking that gives memory back.

use super::*;
use crate::agent::checkpoint::{Fingerprint, FINGERPRINT_MAX};

fn key(i: u64) -> FileKey {
    FileKey { dev: 7, ino: 1000 + i }
}

fn name(i: u64) -> String {
    format!("worker-{:056x}-01000000-{}.out", 0xA000000 + i, 10_000 + i)
}

fn add(t: &mut Table, i: u64) {
    let n = t.names.add(&name(i));
    t.insert(Tracked::new(key(i), 0, n, i, 1));
}

/// Every live file is found by key and by path, with its own name and size.
fn check(t: &Table, live: &[u64]) {
    assert_eq!(t.len(), live.len());
    assert_eq!(t.values().count(), live.len());
    for &i in live {
        let e = t.get(&key(i)).unwrap_or_else(|| panic!("file {i} not found by key"));
        assert_eq!((t.rel(e), e.size()), (name(i), i));
        assert_eq!(t.by_path(0, &name(i)), Some(key(i)), "file {i} not found by path");
    }
}

#[test]
fn a_slab_survives_inserts_removals_and_repacking() {
    let mut t = Table::default();
    for i in 0..30_000 {
        add(&mut t, i);
    }
    let gone: Vec<u64> = (0..30_000).filter(|i| i % 4 != 0).collect();
    for &i in &gone {
        assert!(t.remove(key(i)).is_some());
        assert_eq!(t.by_path(0, &name(i)), None);
        assert!(t.get(&key(i)).is_none());
    }
    let live: Vec<u64> = (0..30_000).filter(|i| i % 4 == 0).collect();
    check(&t, &live);
    for &i in live.iter().step_by(5) {
        t.mark(key(i));
    }
    t.mark(key(live[0]));
    let ready: Vec<FileKey> = live.iter().step_by(5).map(|&i| key(i)).collect();
    assert_eq!(t.ready_len(), ready.len(), "marking twice counts once");
    let (slots, arena) = (t.slots.capacity(), t.names.capacity());
    t.maintain();
    let mut after: Vec<FileKey> = t.ready().map(|e| e.key()).collect();
    after.sort();
    assert_eq!((after, t.ready_len()), (ready.clone(), ready.len()), "the round's files moved with their slots");
    for k in &ready {
        assert!(t.is_ready(k));
        t.unmark(k);
    }
    assert_eq!((t.ready().count(), t.ready_len()), (0, 0));
    assert!(t.slots.capacity() < slots / 2, "the slab was packed: {} slots", t.slots.capacity());
    assert!(t.names.capacity() < arena / 2, "the arena was rewritten");
    check(&t, &live);
    // Slots freed are reused before the slab grows.
    for i in 30_000..30_010 {
        add(&mut t, i);
    }
    t.mark(key(30_005));
    assert_eq!(t.ready().map(|e| e.key()).collect::<Vec<_>>(), [key(30_005)]);
    t.remove(key(30_005));
    assert_eq!(t.ready_len(), 0, "a file forgotten leaves the round");
    add(&mut t, 30_005);
    assert!(!t.is_ready(&key(30_005)), "a reused slot starts out of the round");
    let mut all = live.clone();
    all.extend(30_000..30_010);
    check(&t, &all);
    assert_eq!(t.sweep(usize::MAX).len(), all.len(), "the sweep sees every file once");
}

#[test]
fn a_path_names_the_file_last_seen_there() {
    let mut t = Table::default();
    add(&mut t, 1);
    // Rotation: file 1 is renamed to `.1`, and file 2 is created at its old path
    // before the rename of 1 is followed.
    let n = t.names.add(&name(1));
    t.insert(Tracked::new(key(2), 0, n, 5, 1));
    assert_eq!(t.by_path(0, &name(1)), Some(key(2)), "the newer file is at the path");
    let moved = t.names.add(&format!("{}.1", name(1)));
    t.moved(key(1), 0, moved);
    assert_eq!(t.by_path(0, &name(1)), Some(key(2)), "following the old file left the new one indexed");
    assert_eq!(t.by_path(0, &format!("{}.1", name(1))), Some(key(1)));
    assert!(t.is_named(&key(1), &format!("{}.1", name(1))));
    // The same name in another logs dir is another path.
    assert_eq!(t.by_path(1, &name(1)), None);
    t.remove(key(2));
    assert_eq!(t.by_path(0, &name(1)), None);
    assert_eq!(t.by_path(0, &format!("{}.1", name(1))), Some(key(1)));
}

#[test]
fn sentinels_read_back_as_options() {
    let mut t = Table::default();
    add(&mut t, 1);
    t.set_context(&key(1), ctx("01000000", "A"));
    let e = t.get(&key(1)).unwrap();
    assert_eq!((e.last_time(), t.head_of(e)), (None, i64::MIN));
    t.set_times(&key(1), Some(-5), 3);
    let e = t.get(&key(1)).unwrap();
    assert_eq!((e.last_time(), t.head_of(e)), (Some(-5), 3));
    t.get_mut(&key(1)).unwrap().set_resume(9);
    t.restart(&key(1));
    let e = t.get(&key(1)).unwrap();
    assert_eq!((e.last_time(), e.resume(), t.head_of(e)), (None, 0, i64::MIN));
    assert!(t.context_of(e).is_none());
    assert_eq!(t.contexts.len(), 0, "a restart lets go of the context");
}

/// The packed fields read back what was written, at their limits too.
#[test]
fn packed_fields_read_back() {
    let big = FileKey { dev: u64::MAX - 3, ino: u64::MAX - 1 };
    let mut e = Tracked::new(big, 5, Name::NONE, (1 << 48) - 1, 9);
    assert_eq!((e.key(), e.size(), e.dir(), e.listed), (big, (1 << 48) - 1, 5, 9));
    assert!(e.is(&big) && !e.is(&FileKey { dev: 7, ino: big.ino }));
    // Inodes differing only in the bits the home holds are different files.
    for ino in [big.ino & ((1 << 48) - 1), big.ino ^ 1 << 48, big.ino ^ 1 << 63] {
        assert!(!e.is(&FileKey { dev: big.dev, ino }), "{ino:x}");
        let other = Tracked::new(FileKey { dev: big.dev, ino }, 5, Name::NONE, 0, 0);
        assert_eq!(other.key().ino, ino);
    }
    e.set_size(1 << 50);
    assert_eq!(e.size(), (1 << 48) - 1, "sizes past 256 TiB are held at the limit");
    for (fp, unverified, place) in [(FINGERPRINT_MAX + 1, true, Place::Departed), (0, false, Place::Unknown)] {
        e.set_resume(fp * 1_000_003);
        e.set_fingerprint(Fingerprint { len: fp, hash: 77 });
        e.set_unverified(unverified);
        e.set_place(place);
        e.set_open(!unverified);
        let last = unverified.then_some(-1);
        assert!(e.set_times(last, 5));
        assert_eq!((e.last_time(), e.head_here()), (last, Some(5)));
        assert_eq!(e.fingerprint(), Fingerprint { len: fp, hash: 77 });
        assert_eq!(
            (e.unverified(), e.place(), e.is_open(), e.resume()),
            (unverified, place, !unverified, fp * 1_000_003)
        );
    }
    // A checkpoint written with all 64 bits of the hash still matches the entry's 48.
    let full = Fingerprint { len: 1024, hash: 0xDEAD_BEEF_0123_4567 };
    e.set_fingerprint(full);
    assert_eq!((e.fingerprint(), e.fingerprint().hash), (full, 0xBEEF_0123_4567));
    assert_ne!(e.fingerprint(), Fingerprint { hash: full.hash ^ (1 << 47), ..full });
    assert_ne!(e.fingerprint(), Fingerprint { len: 1023, ..full });
    e.set_dir(6);
    assert_eq!((e.key(), e.dir()), (big, 6), "a move keeps the device");
    e.set_fingerprint(Fingerprint { len: u64::MAX, hash: 1 });
    assert_eq!(e.fingerprint().len, u64::MAX, "a damaged checkpoint's length stays one");
    assert_eq!((e.place(), e.is_open(), e.unverified()), (Place::Unknown, true, false));
}

#[test]
fn an_entry_stays_small() {
    // What a million tracked files cost before their names and the two indices.
    assert_eq!(std::mem::size_of::<Tracked>(), 58);
}

/// A head far from the last record's time (a record kept back, seconds later) is
/// kept by the table, read back through entries and views, and let go of when no
/// longer needed or when the file goes.
#[test]
fn heads_too_far_for_the_entry_are_kept_aside() {
    let mut t = Table::default();
    for i in 0..3 {
        add(&mut t, i);
    }
    let (s, day) = (1_000_000_000i64, 86_400_000_000_000i64);
    let cases = [
        (Some(day), day + 2 * s, false),
        (Some(day), day + 2_147_483_647, false),
        (Some(day), day + 2_147_483_648, true),
        (Some(day), day - 2_147_483_647, false),
        (Some(day), day - 2_147_483_648, true),
        (Some(day), day - 3 * s, true),
        (None, day, false),
        (Some(i64::MAX - 1), i64::MIN, true),
        (Some(0), i64::MAX, true),
        (None, i64::MIN, false),
    ];
    for (last, head, aside) in cases {
        t.set_times(&key(1), last, head);
        let e = t.get(&key(1)).unwrap();
        assert_eq!((e.last_time(), t.head_of(e), t.view(&key(1)).unwrap().head()), (last, head, head));
        assert_eq!(t.heads_aside.len(), aside as usize, "{last:?} {head}");
        assert_eq!(t.head_of(t.get(&key(2)).unwrap()), i64::MIN, "another file's head is its own");
    }
    t.set_times(&key(1), Some(0), 10 * s);
    assert_eq!(t.heads_aside.len(), 1);
    t.remove(key(1));
    assert!(t.heads_aside.is_empty(), "a file that goes takes its head along");
}

fn ctx(job: &str, actor: &str) -> Option<Arc<SavedContext>> {
    Some(Arc::new(SavedContext { job_id: Some(job.into()), actor_name: Some(actor.into()), ..Default::default() }))
}

/// Files that end in the same context hold one copy of it; a context no file
/// holds any more leaves the pool at once, so a node's stream of tasks cannot
/// grow it.
#[test]
fn contexts_are_shared_and_released() {
    let mut t = Table::default();
    for i in 0..10_000 {
        add(&mut t, i);
        t.set_context(&key(i), ctx("01000000", if i % 2 == 0 { "A" } else { "B" }));
    }
    assert_eq!(t.contexts.len(), 2);
    let of = |t: &Table, i| t.context_of(t.get(&key(i)).unwrap()).cloned();
    assert!(Arc::ptr_eq(&of(&t, 0).unwrap(), &of(&t, 2).unwrap()));
    assert!(!Arc::ptr_eq(&of(&t, 0).unwrap(), &of(&t, 1).unwrap()));
    assert_eq!(of(&t, 1).as_deref(), ctx("01000000", "B").as_deref());
    // 100,000 distinct contexts in turn (a task's id), each replacing the last.
    for i in 0..100_000 {
        t.set_context(&key(4), ctx(&format!("{i:08x}"), "C"));
    }
    assert_eq!(t.contexts.len(), 3, "the pool kept contexts nobody holds");
    t.set_context(&key(4), None);
    assert_eq!(t.contexts.len(), 2);
    // Forgetting every file that held B lets B go; A is still shared.
    for i in (1..10_000).step_by(2) {
        t.remove(key(i));
    }
    assert_eq!(t.contexts.len(), 1);
    t.set_context(&key(4), ctx("01000000", "A"));
    assert!(Arc::ptr_eq(&of(&t, 0).unwrap(), &of(&t, 4).unwrap()));
    assert!(t.get(&key(1)).is_none());
}
