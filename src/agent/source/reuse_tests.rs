//! A file is one incarnation (issue #57): a new file on the inode of one read
//! before is read from its start, with document ids of its own, and an upgrade
//! from checkpoints that kept no incarnation re-reads nothing and skips nothing.

use super::tests::{write, Rig};
use super::*;
use crate::agent::checkpoint::born;

const OUT: &str = "worker-21dc0df5ded5fb4aec71a925b0bf97f61e4d13473624ef1e715e6988-01000000-4356.out";

fn everything() -> Changes {
    Changes { everything: true, ..Default::default() }
}

/// The same script run again: 2 KiB of banner (more than the first KiB the
/// reopen checks), then its records.
fn run_of(tag: &str, records: usize) -> String {
    let banner: String =
        (0..40).map(|i| format!(":job_id:01000000 banner line {i:02} of the script........\n")).collect();
    assert!(banner.len() > 2048);
    banner + &(0..records).map(|i| format!("{tag} record {i}\n")).collect::<String>()
}

/// Rounds until nothing more comes; the records sent, as (message, doc id).
fn drain(rig: &mut Rig, changes: Changes) -> Vec<(String, u128)> {
    let mut got: Vec<_> = rig.round_sent(changes).into_iter().map(|s| (s.message, s.doc_id)).collect();
    for _ in 0..4 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        got.extend(rig.round_sent(Changes::default()).into_iter().map(|s| (s.message, s.doc_id)));
    }
    got.retain(|(m, _)| m.contains(" record "));
    got
}

/// A worker file of 10 records is read and checkpointed; the file is then another
/// run's (the same banner, 180 records) on the same inode, as when ext4 hands a
/// freed inode straight back. Its incarnation is injected into the checkpoint as
/// the old file's (one the new file does not have): every one of the 180 records
/// is sent, none with an id of the old file's. The control is today's checkpoint
/// (no incarnation): the reopen, which checks the first KiB, resumes at the old
/// file's offset and skips the new file's first records. Run twice: with birth
/// times, and without (as on ext4 with 128-byte inodes: the inode's generation
/// number then tells the incarnations apart).
#[test]
fn a_new_file_on_a_reused_inode_is_read_from_its_start_with_ids_of_its_own() {
    for birth_times in [true, false] {
        let _fallback = (!birth_times).then(born::tests::without_birth_time);
        let probe = std::env::temp_dir().join(format!("raylog-born-probe-{}", std::process::id()));
        std::fs::write(&probe, "x").unwrap();
        let kept = born::of_file(&std::fs::File::open(&probe).unwrap(), &std::fs::metadata(&probe).unwrap());
        std::fs::remove_file(&probe).unwrap();
        if !born::known(kept) {
            eprintln!("SKIPPED (birth times: {birth_times}): this file system keeps no incarnation (NFS, older tmpfs)");
            continue;
        }
        for injected in [true, false] {
            let tag = format!("reuse-{birth_times}-{injected}");
            let mut rig = Rig::with(&tag, 8, false);
            let out = rig.logs().join(OUT);
            write(&out, &run_of("old", 10));
            let old = drain(&mut rig, everything());
            assert_eq!(old.len(), 10);
            let other = 0xdead_beef;
            rig.restart_edited(0, |cp| cp.born = if injected { other } else { born::UNKNOWN });
            // The new run on the same inode (rewritten in place keeps the inode).
            std::fs::OpenOptions::new().write(true).open(&out).unwrap().set_len(0).unwrap();
            write(&out, &run_of("new", 180));
            let new = drain(&mut rig, everything());
            if injected {
                let want: Vec<String> = (0..180).map(|i| format!("new record {i}")).collect();
                assert_eq!(new.iter().map(|(m, _)| m.clone()).collect::<Vec<_>>(), want, "birth times: {birth_times}");
                assert!(new.iter().all(|(_, id)| old.iter().all(|(_, o)| o != id)), "an id of the old file's");
            } else {
                assert!(new.len() < 180, "the control: the old offset skips records ({} sent)", new.len());
            }
        }
    }
}

/// An agent upgraded from checkpoints written before incarnations (none in them)
/// resumes each file where it was: a file read to its end sends nothing again; a
/// batch not acknowledged is sent again with the ids the older raylog gave it
/// (`route::identity` without an incarnation); lines written since go out once.
#[test]
fn an_upgrade_from_checkpoints_without_incarnations_rereads_nothing_and_skips_nothing() {
    let mut rig = Rig::with("upgrade", 8, false);
    let (out, done) = (rig.logs().join(OUT), rig.logs().join(OUT.replace("4356", "4357")));
    write(&done, "done record 0\ndone record 1\n");
    assert_eq!(drain(&mut rig, everything()).len(), 2);
    write(&out, "live record 0\nlive record 1\n");
    assert_eq!(drain(&mut rig, everything()).len(), 2);
    write(&out, "live record 2\nlive record 3\n");
    let mut live = rig.round_sent(everything());
    while live.len() < 2 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        live.extend(rig.round_sent(Changes::default()));
    }
    // The live file's last batch is not acknowledged; nothing saved has an incarnation.
    rig.restart_edited(1, |cp| cp.born = born::UNKNOWN);
    write(&out, "live record 4\n");
    let again = drain(&mut rig, everything());
    let messages: Vec<&str> = again.iter().map(|(m, _)| m.as_str()).collect();
    assert!(!messages.iter().any(|m| m.starts_with("done")), "a file read to its end is not read again: {messages:?}");
    assert!(!messages.iter().any(|m| ["live record 0", "live record 1"].contains(m)), "{messages:?}");
    assert_eq!(messages.iter().filter(|m| **m == "live record 4").count(), 1, "{messages:?}");
    let key = FileKey::of(&std::fs::metadata(&out).unwrap());
    for (m, id) in &again {
        let offset = m.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap() * 14;
        let legacy =
            crate::agent::enrich::route::identity(key, born::UNKNOWN, crate::agent::fnv::hash64(b"live record 0"));
        let want = doc_id_from(crate::agent::batch::doc_id_seed(&legacy), offset, m);
        assert_eq!(*id, want, "{m}: the id an older raylog gave it");
    }
}
