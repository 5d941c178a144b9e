//! The checkpoint files: round trips, the journal, merging, crashes at any point,
//! the old format, and forgetting files long gone.

use super::*;
use std::io::Write;

fn tmpdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("raylog-cp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn cp(ino: u64, offset: u64) -> FileCheckpoint {
    FileCheckpoint {
        key: FileKey { dev: 1, ino },
        fingerprint: Fingerprint { len: 10, hash: 99 },
        offset,
        context: None,
        last_time_ns: None,
        updated: unix_now(),
        born: 0,
        gone_since: 0,
    }
}

/// Files whose first save alone passes the journal's 1 MiB merge threshold.
const MERGED: u64 = 50_000;

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

#[test]
fn round_trip_and_version_check() {
    let dir = tmpdir("rt");
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    assert!(load(&dir).unwrap().is_empty());
    let mut a = cp(2, 1234);
    a.context = Some(std::sync::Arc::new(SavedContext { job_id: Some("01000000".into()), ..Default::default() }));
    a.last_time_ns = Some(1_796_029_536_393_944_816);
    s.update(a.clone());
    s.save().unwrap();
    assert_eq!(load(&dir).unwrap().get(&a.key), Some(&a));
    std::fs::write(dir.join(SNAPSHOT), "{\"version\":9,\"generation\":1}\n").unwrap();
    let e = load(&dir).unwrap_err().to_string();
    assert!(e.contains("version 9") && e.contains("checkpoints.json"), "{e}");
    std::fs::write(dir.join(SNAPSHOT), "garbage").unwrap();
    assert!(load(&dir).unwrap_err().to_string().contains("move it aside"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn offsets_never_go_back_for_the_same_file() {
    let dir = tmpdir("fwd");
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    let mut c = cp(2, 100);
    s.update(c.clone());
    c.offset = 50;
    s.update(c.clone());
    c.fingerprint.hash ^= 1 << 63; // the same file, as a table entry (48 bits) has it
    s.update(c.clone());
    s.save().unwrap();
    assert_eq!(load(&dir).unwrap()[&c.key].offset, 100);
    c.fingerprint.hash = 7; // a different file on the same inode
    s.update(c.clone());
    s.save().unwrap();
    assert_eq!(load(&dir).unwrap()[&c.key].offset, 50);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_save_writes_what_changed_and_merges_the_journal_when_it_grows() {
    let dir = tmpdir("journal");
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    // One save of them all, merged at once (over 1 MiB of journal).
    for i in 0..MERGED {
        s.update(cp(i, i));
    }
    s.save().unwrap();
    assert_eq!(files(&dir), ["checkpoints.json"], "merged into generation 1");
    let snapshot = std::fs::metadata(dir.join(SNAPSHOT)).unwrap().len();
    // One file changes: one journal line, the snapshot untouched.
    s.update(cp(7, 700));
    s.save().unwrap();
    let journal = std::fs::metadata(dir.join("checkpoints.1.journal")).unwrap().len();
    assert!(journal < 200, "a save of one file wrote {journal} bytes");
    assert_eq!(std::fs::metadata(dir.join(SNAPSHOT)).unwrap().len(), snapshot);
    let all = load(&dir).unwrap();
    assert_eq!(all.len() as u64, MERGED);
    assert_eq!(all[&FileKey { dev: 1, ino: 7 }].offset, 700);
    // Nothing changed: nothing written.
    assert!(!s.is_dirty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A store whose `MERGED` files, all at offset 1, were saved and merged into
/// generation 1.
fn merged_at_one(tag: &str) -> (PathBuf, CheckpointStore) {
    let dir = tmpdir(tag);
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    for i in 0..MERGED {
        s.update(cp(i, 1));
    }
    s.save().unwrap();
    (dir, s)
}

#[test]
fn a_crash_at_any_point_of_a_save_leaves_a_loadable_state() {
    let (dir, mut s) = merged_at_one("crash");
    assert_eq!(files(&dir), ["checkpoints.json"], "merged into generation 1");
    s.update(cp(1, 5));
    s.save().unwrap();
    // A save cut short in the journal: a torn line, ignored; the next save is whole.
    let journal = dir.join("checkpoints.1.journal");
    let mut f = std::fs::OpenOptions::new().append(true).open(&journal).unwrap();
    f.write_all(b"{\"key\":{\"dev\":1,\"ino\":2},\"fingerpr").unwrap();
    assert_eq!(load(&dir).unwrap()[&FileKey { dev: 1, ino: 1 }].offset, 5);
    assert_eq!(load(&dir).unwrap()[&FileKey { dev: 1, ino: 2 }].offset, 1);
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    s.update(cp(3, 9));
    s.save().unwrap();
    let all = load(&dir).unwrap();
    assert_eq!((all[&FileKey { dev: 1, ino: 3 }].offset, all.len() as u64), (9, MERGED));
    // A merge cut short before its rename: the temp file is ignored.
    std::fs::write(dir.join("checkpoints.json.tmp"), "{\"version\":2,\"generation\":2}\n{\"trunc").unwrap();
    assert_eq!(load(&dir).unwrap(), all);
    // Cut short after the rename, before the old journal went: generation 2 reads
    // its own (absent) journal, not the old one.
    let snapshot = std::fs::read(dir.join(SNAPSHOT)).unwrap();
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    for i in 0..MERGED {
        s.update(cp(i, 2));
    }
    std::fs::write(dir.join("checkpoints.1.journal.keep"), std::fs::read(&journal).unwrap()).unwrap();
    s.save().unwrap();
    assert!(std::fs::read(dir.join(SNAPSHOT)).unwrap() != snapshot);
    std::fs::rename(dir.join("checkpoints.1.journal.keep"), &journal).unwrap();
    let after = load(&dir).unwrap();
    // Every file the updates named, each at the offset the new snapshot has.
    assert_eq!(after.len() as u64, MERGED);
    assert!(after.values().all(|c| c.offset == 2), "the old journal is not replayed over the new snapshot");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn version_1_is_read_and_rewritten_at_the_first_save() {
    let dir = tmpdir("v1");
    std::fs::create_dir_all(&dir).unwrap();
    let v1 = r#"{
  "version": 1,
  "files": [
    {
      "key": { "dev": 1, "ino": 2 },
      "fingerprint": { "len": 10, "hash": 99 },
      "offset": 1234,
      "path": "/tmp/ray/session_x/logs/raylet.out",
      "context": {},
      "updated": 5
    },
    {
      "key": { "dev": 1, "ino": 3 },
      "fingerprint": { "len": 10, "hash": 98 },
      "offset": 77,
      "path": "/tmp/ray/session_x/logs/worker-a-01000000-1.out",
      "context": { "job_id": "01000000" },
      "updated": 5
    }
  ]
}"#;
    std::fs::write(dir.join(SNAPSHOT), v1).unwrap();
    let all = load(&dir).unwrap();
    assert_eq!(all[&FileKey { dev: 1, ino: 2 }].offset, 1234);
    assert_eq!(all[&FileKey { dev: 1, ino: 2 }].context, None, "an empty context is none");
    assert_eq!(all[&FileKey { dev: 1, ino: 3 }].context.as_ref().unwrap().job_id.as_deref(), Some("01000000"));
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    assert!(s.is_dirty(), "the old format is rewritten");
    s.save().unwrap();
    let text = std::fs::read_to_string(dir.join(SNAPSHOT)).unwrap();
    assert!(text.starts_with("{\"version\":3,\"generation\":1}\n"), "{text}");
    assert_eq!(load(&dir).unwrap(), all);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn files_gone_longer_than_forget_after_are_forgotten() {
    let dir = tmpdir("forget");
    let mut s = CheckpointStore::open(&dir, 3600).unwrap().0;
    let now = unix_now();
    let (mut long_gone, mut just_gone, present) = (cp(1, 10), cp(2, 10), cp(3, 10));
    long_gone.gone_since = now - 7200;
    just_gone.gone_since = now - 60;
    for c in [long_gone, just_gone, present] {
        s.update(c);
    }
    s.state.must_compact = true;
    s.save().unwrap();
    let mut left: Vec<u64> = load(&dir).unwrap().keys().map(|k| k.ino).collect();
    left.sort();
    assert_eq!(left, [2, 3]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_flat_form_keeps_every_field_and_leaves_out_trailing_defaults() {
    let mut all = cp(1_204_225, 160);
    all.key.dev = 65024;
    all.fingerprint = Fingerprint { len: 1024, hash: u64::MAX };
    all.gone_since = 1_796_216_300;
    all.last_time_ns = Some(-5);
    let ctx = |job: Option<&str>, task_id: Option<&str>| {
        Some(std::sync::Arc::new(SavedContext {
            job_id: job.map(Into::into),
            task_id: task_id.map(Into::into),
            ..Default::default()
        }))
    };
    let mut cases = vec![cp(3, 0), all.clone()];
    let mut gone = cp(4, 9);
    gone.gone_since = 12;
    let mut timed = cp(5, 9);
    timed.last_time_ns = Some(1_796_029_536_393_944_816);
    let mut ctx_only = cp(6, 9);
    ctx_only.context = ctx(None, Some("a\"b"));
    all.context = ctx(Some("01000000"), Some("t"));
    let mut ids = cp(7, 9);
    ids.context = Some(std::sync::Arc::new(SavedContext {
        actor_name: Some("Counter".into()),
        actor_id: Some("ceeabe459a58b124ad5b805d01000000".into()),
        node_id: Some("b41b".into()),
        ..Default::default()
    }));
    cases.extend([gone, timed, ctx_only, all, ids]);
    for c in &cases {
        let text = serde_json::to_string(&flat::Flat(c)).unwrap();
        let back: flat::Entry = serde_json::from_str(&text).unwrap();
        assert_eq!(&back.0, c, "{text}");
    }
    let finished = serde_json::to_string(&flat::Flat(&cases[0])).unwrap();
    assert_eq!(finished, format!("[1,3,10,99,0,{}]", cases[0].updated));
    let text = |i: usize| serde_json::to_string(&flat::Flat(&cases[i])).unwrap();
    assert!(text(2).ends_with(",12]"), "gone_since alone: {}", text(2));
    assert!(text(3).ends_with(",0,1796029536393944816]"), "{}", text(3));
    assert!(text(4).ends_with(",0,null,null,null,null,\"a\\\"b\"]"), "{}", text(4));
    assert!(text(6).ends_with(",\"ceeabe459a58b124ad5b805d01000000\",\"b41b\"]"), "{}", text(6));
    let past = "[1,2,3,4,5,6,0,null,null,null,null,null,null,null,\"x\"]";
    for bad in ["[1,2,3]", "[1,2,3,4,5,6,0,null,null,null,null,null,7]", "[1,2,3,4,5,-6]", past] {
        assert!(serde_json::from_str::<flat::Entry>(bad).is_err(), "{bad} was read");
    }
}

#[test]
fn version_2_is_read_with_a_journal_in_either_form_and_rewritten_flat() {
    let dir = tmpdir("v2");
    std::fs::create_dir_all(&dir).unwrap();
    let old = |ino: u64, offset: u64| {
        format!(
            r#"{{"key":{{"dev":1,"ino":{ino}}},"fingerprint":{{"len":10,"hash":99}},"offset":{offset},"context":{{"job_id":"01000000"}},"last_time_ns":7,"updated":5}}"#
        )
    };
    let snapshot = format!("{{\"version\":2,\"generation\":4}}\n{}\n{}\n", old(1, 10), old(2, 20));
    std::fs::write(dir.join(SNAPSHOT), snapshot).unwrap();
    // The journal an older raylog began, then a line this one appended.
    std::fs::write(dir.join("checkpoints.4.journal"), format!("{}\n[1,3,10,99,30,5]\n", old(2, 25))).unwrap();
    let all = load(&dir).unwrap();
    let offsets = |m: &HashMap<FileKey, FileCheckpoint>| {
        let mut v: Vec<(u64, u64)> = m.values().map(|c| (c.key.ino, c.offset)).collect();
        v.sort();
        v
    };
    assert_eq!(offsets(&all), [(1, 10), (2, 25), (3, 30)]);
    let one = &all[&FileKey { dev: 1, ino: 1 }];
    assert_eq!((one.last_time_ns, one.context.as_ref().unwrap().job_id.as_deref()), (Some(7), Some("01000000")));
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    assert!(s.is_dirty(), "version 2 is rewritten");
    s.save().unwrap();
    let text = std::fs::read_to_string(dir.join(SNAPSHOT)).unwrap();
    assert!(text.starts_with("{\"version\":3,\"generation\":5}\n[1,1,10,99,10,5,0,7,\"01000000\"]\n"), "{text}");
    assert_eq!(load(&dir).unwrap(), all);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_finished_file_takes_under_64_bytes_on_disk() {
    let dir = tmpdir("size");
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    // Inodes and hashes of a real 100,000-file node: 8-digit inodes, 20-digit hashes.
    for i in 0..20_000u64 {
        let mut c = cp(11_693_446 + i, 160);
        c.key.dev = 65024;
        c.fingerprint = Fingerprint { len: 160, hash: u64::MAX - i * 7_919 };
        s.update(c);
    }
    s.save().unwrap();
    let bytes = std::fs::metadata(dir.join(SNAPSHOT)).unwrap().len();
    assert!(bytes / 20_000 < 64, "{} bytes per file", bytes / 20_000);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_merge_keeps_each_files_last_journal_line_in_and_out_of_the_snapshot() {
    let (dir, mut s) = merged_at_one("merge-index");
    // Files in the snapshot and new ones, each changed over several saves, with a
    // torn line (a crash) between two of them; and files of another device with the
    // same inodes, changed in other rounds.
    let other = |ino: u64, offset: u64| FileCheckpoint { key: FileKey { dev: 2, ino }, ..cp(ino, offset) };
    for round in 0..3u64 {
        for i in (0..40).chain(MERGED + 10..MERGED + 20) {
            s.update(cp(i, 10 + round * 7 + i % 3));
        }
        for i in (round..6).chain(MERGED + 12..MERGED + 14) {
            s.update(other(i, 500 + round));
        }
        s.save().unwrap();
        if round == 1 {
            let journal = dir.join("checkpoints.1.journal");
            let mut f = std::fs::OpenOptions::new().append(true).open(&journal).unwrap();
            f.write_all(b"[1,5,0,0,99").unwrap();
        }
    }
    let before = load(&dir).unwrap();
    assert_eq!(before[&FileKey { dev: 1, ino: MERGED + 11 }].offset, 10 + 14 + (MERGED + 11) % 3);
    assert_eq!(before[&FileKey { dev: 2, ino: 0 }].offset, 500);
    assert_eq!(before[&FileKey { dev: 2, ino: 5 }].offset, 502);
    assert_eq!(before[&FileKey { dev: 1, ino: 5 }].offset, 10 + 14 + 5 % 3);
    s.state.must_compact = true;
    s.save().unwrap();
    assert_eq!(files(&dir), ["checkpoints.json"], "merged into generation 2");
    assert_eq!(load(&dir).unwrap(), before, "the merge kept what loading the journal gave");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Files alike sit apart in a snapshot (by inode): a job's task workers and actors
/// alternate. A load keeps one copy of each context, in the snapshot and the
/// journal alike, not one per file (a restart at a million files kept them all).
#[test]
fn a_load_keeps_one_copy_of_each_context() {
    let dir = tmpdir("ctx");
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    let ctx = |actor: Option<&str>| {
        let c =
            SavedContext { job_id: Some("01000000".into()), actor_name: actor.map(Into::into), ..Default::default() };
        Some(std::sync::Arc::new(c))
    };
    // A fixed `updated`: built again below to compare, `cp`'s clock may have ticked.
    let with = |ino: u64| FileCheckpoint {
        context: ctx((ino % 2 == 1).then_some("Trainer")),
        updated: 1_800_000_000,
        ..cp(ino, ino)
    };
    // Merged into the snapshot (over the journal's threshold), then a journal on top.
    (0..MERGED).for_each(|i| s.update(with(i)));
    s.save().unwrap();
    (MERGED..MERGED + 100).for_each(|i| s.update(with(i)));
    s.save().unwrap();
    assert!(files(&dir).iter().any(|f| f.ends_with(".journal")), "{:?}", files(&dir));
    let (resume, _) = disk::read(&dir).unwrap();
    let mut copies: Vec<*const SavedContext> =
        resume.values().filter_map(|c| c.context.as_deref().map(|c| c as *const _)).collect();
    assert_eq!(copies.len() as u64, MERGED + 100, "every file has its context");
    copies.sort_unstable();
    copies.dedup();
    assert_eq!(copies.len(), 2, "one copy of each of the two contexts");
    let all = load(&dir).unwrap();
    assert_eq!(all[&FileKey { dev: 1, ino: 3 }], with(3), "the contexts are the files' own");
    assert_eq!(all[&FileKey { dev: 1, ino: MERGED + 2 }], with(MERGED + 2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The first save of a generation creates its journal: the journal's directory is
/// fsynced then, after the data (a power loss could otherwise take the file's entry,
/// fsynced lines and all), and not again for the saves that only append to it.
#[test]
fn creating_the_journal_fsyncs_its_directory_once() {
    let dir = tmpdir("dirsync");
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    let synced = || disk::DIR_SYNCS.with(|d| d.borrow().clone());
    disk::DIR_SYNCS.with(|d| d.borrow_mut().clear());
    s.update(cp(2, 100));
    s.save().unwrap();
    assert!(dir.join("checkpoints.0.journal").is_file(), "{:?}", files(&dir));
    assert_eq!(synced(), std::slice::from_ref(&dir), "the directory of the journal just created");
    for ino in 3..6 {
        s.update(cp(ino, 200));
        s.save().unwrap();
    }
    assert_eq!(synced(), std::slice::from_ref(&dir), "appends to the journal leave its directory alone");
    let _ = std::fs::remove_dir_all(&dir);
}
