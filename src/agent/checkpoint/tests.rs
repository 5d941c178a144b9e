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
        gone_since: 0,
    }
}

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
    a.context = Some(Box::new(SavedContext { job_id: Some("01000000".into()), ..Default::default() }));
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
    // 20,000 files: one save of them all, merged at once (over 1 MiB of journal).
    for i in 0..20_000 {
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
    assert_eq!(all.len(), 20_000);
    assert_eq!(all[&FileKey { dev: 1, ino: 7 }].offset, 700);
    // Nothing changed: nothing written.
    assert!(!s.is_dirty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_crash_at_any_point_of_a_save_leaves_a_loadable_state() {
    let dir = tmpdir("crash");
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    for i in 0..20_000 {
        s.update(cp(i, 1));
    }
    s.save().unwrap();
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
    assert_eq!((all[&FileKey { dev: 1, ino: 3 }].offset, all.len()), (9, 20_000));
    // A merge cut short before its rename: the temp file is ignored.
    std::fs::write(dir.join("checkpoints.json.tmp"), "{\"version\":2,\"generation\":2}\n{\"trunc").unwrap();
    assert_eq!(load(&dir).unwrap(), all);
    // Cut short after the rename, before the old journal went: generation 2 reads
    // its own (absent) journal, not the old one.
    let snapshot = std::fs::read(dir.join(SNAPSHOT)).unwrap();
    let mut s = CheckpointStore::open(&dir, 86_400).unwrap().0;
    for i in 0..20_000 {
        s.update(cp(i, 2));
    }
    std::fs::write(dir.join("checkpoints.1.journal.keep"), std::fs::read(&journal).unwrap()).unwrap();
    s.save().unwrap();
    assert!(std::fs::read(dir.join(SNAPSHOT)).unwrap() != snapshot);
    std::fs::rename(dir.join("checkpoints.1.journal.keep"), &journal).unwrap();
    let after = load(&dir).unwrap();
    // Every file the 20,000 updates named, each at the offset the new snapshot has.
    assert_eq!(after.len(), 20_000);
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
    assert!(text.starts_with("{\"version\":2,\"generation\":1}\n"), "{text}");
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
