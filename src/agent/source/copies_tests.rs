//! logrotate's copy-truncate, as the reader meets it: the copy found before or after
//! the truncation, with or without bytes the reader had not read yet, and a plain
//! `cp`. Every line once; none twice.

use std::path::Path;

use super::tests::{write, Rig};
use super::*;

fn paths(p: &[&Path]) -> Changes {
    Changes { paths: p.iter().map(|p| p.to_path_buf()).collect(), everything: false }
}

fn lines(from: usize, to: usize) -> String {
    (from..to).map(|i| format!("[2026-11-30 09:00:{:02},000 I 1 1] (raylet) x.cc:1: line {i}\n", i % 60)).collect()
}

/// The `line N` of every record sent, in order.
fn numbers(rig: &mut Rig, changes: Changes) -> Vec<usize> {
    let mut got: Vec<usize> = vec![];
    let mut each = |sent: Vec<super::tests::Sent>| {
        got.extend(sent.iter().filter_map(|s| s.message.rsplit_once("line ")?.1.parse::<usize>().ok()));
    };
    each(rig.round_sent(changes));
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        each(rig.round_sent(Changes::default()));
    }
    got
}

/// `cp x x.1; truncate x`, then new lines in `x`, in both orders of the reader
/// seeing them, with 10 lines written and not read before the copy: the copy sends
/// those 10 only, and `x` its new lines.
#[test]
fn copytruncate_sends_only_what_was_not_read() {
    for copy_first in [true, false] {
        let mut rig = Rig::with(if copy_first { "ct-copy-first" } else { "ct-trunc-first" }, 8, true);
        let (x, x1) = (rig.logs().join("raylet.out"), rig.logs().join("raylet.out.1"));
        write(&x, &lines(0, 30));
        assert_eq!(numbers(&mut rig, Changes { everything: true, ..Default::default() }), (0..30).collect::<Vec<_>>());
        write(&x, &lines(30, 40));
        std::fs::copy(&x, &x1).unwrap();
        std::fs::OpenOptions::new().write(true).open(&x).unwrap().set_len(0).unwrap();
        write(&x, &lines(40, 45));
        let mut got = if copy_first { numbers(&mut rig, paths(&[&x1])) } else { numbers(&mut rig, paths(&[&x])) };
        got.extend(numbers(&mut rig, paths(&[&x, &x1])));
        got.sort_unstable();
        assert_eq!(got, (30..45).collect::<Vec<_>>(), "copy found {}", if copy_first { "first" } else { "second" });
    }
}

/// A plain `cp` (no truncation) of a file read to its end sends nothing again;
/// a new file alike in its first bytes but not named as a copy is read whole.
#[test]
fn a_plain_copy_is_not_sent_again_and_a_look_alike_is() {
    let mut rig = Rig::with("ct-plain", 8, true);
    let (x, x1, other) =
        (rig.logs().join("raylet.out"), rig.logs().join("raylet.out.1"), rig.logs().join("gcs_server.out"));
    write(&x, &lines(0, 30));
    assert_eq!(numbers(&mut rig, Changes { everything: true, ..Default::default() }).len(), 30);
    std::fs::copy(&x, &x1).unwrap();
    std::fs::copy(&x, &other).unwrap();
    let mut got = numbers(&mut rig, paths(&[&x1, &other]));
    got.sort_unstable();
    assert_eq!(got, (0..30).collect::<Vec<_>>(), "the look-alike only");
}

/// A raylet or GCS log appearing in a logs dir listed at start is a rotation, not
/// a node starting: its lines (and the dir's others) wait for no node id, so a
/// line written to a truncated or rotated file goes out in the next round, not
/// `actor_hold` (10 s) later. (Raylet here never names its node.)
#[test]
fn a_new_raylet_log_in_a_known_dir_waits_for_no_node_id() {
    let mut rig = Rig::with("ct-no-node-wait", 8, true);
    let (x, x1) = (rig.logs().join("raylet.out"), rig.logs().join("raylet.out.1"));
    write(&x, &lines(0, 3));
    assert_eq!(numbers(&mut rig, Changes { everything: true, ..Default::default() }).len(), 3);
    std::fs::rename(&x, &x1).unwrap();
    write(&x, &lines(3, 5));
    assert_eq!(numbers(&mut rig, paths(&[&x, &x1])), vec![3, 4], "sent at once, not held for a node id");
    assert_eq!(rig.source.enrich.hold.len(), 0);
}
