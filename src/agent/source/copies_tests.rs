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

/// All the messages a few rounds send.
fn messages(rig: &mut Rig, changes: Changes) -> Vec<String> {
    let mut got: Vec<String> = rig.round_sent(changes).into_iter().map(|s| s.message).collect();
    for _ in 0..5 {
        std::thread::sleep(std::time::Duration::from_millis(3));
        got.extend(rig.round_sent(Changes::default()).into_iter().map(|s| s.message));
    }
    got
}

/// #57, found by the model test: a line being written when logrotate copies and
/// truncates the file goes out whole and once, from the copy; it used to go out as
/// a fragment at the truncation (or when the copy was found), the copy read from
/// past its start.
#[test]
fn a_line_being_written_at_a_copytruncate_goes_out_whole_from_the_copy() {
    for copy_first in [true, false] {
        let tag = if copy_first { "ct-partial-copy-first" } else { "ct-partial-trunc-first" };
        let mut rig = Rig::with_source(tag, 8, true, "partial_line_timeout = \"1h\"\n");
        let (x, x1) = (rig.logs().join("raylet.out"), rig.logs().join("raylet.out.1"));
        write(&x, &lines(0, 30));
        assert_eq!(numbers(&mut rig, Changes { everything: true, ..Default::default() }).len(), 30);
        let line = lines(30, 31);
        write(&x, &line[..12]);
        assert!(messages(&mut rig, paths(&[&x])).is_empty(), "half a line waits for its newline");
        write(&x, &line[12..]);
        std::fs::copy(&x, &x1).unwrap();
        std::fs::OpenOptions::new().write(true).open(&x).unwrap().set_len(0).unwrap();
        write(&x, &lines(31, 33));
        let mut got = messages(&mut rig, paths(&[if copy_first { &x1 } else { &x }]));
        got.extend(messages(&mut rig, paths(&[&x, &x1])));
        let ends: Vec<&str> = got.iter().filter_map(|m| m.rsplit_once("line ").map(|(_, n)| n)).collect();
        assert_eq!(got.len(), 3, "{tag}: each line once, none cut in two: {got:?}");
        let mut ends = ends;
        ends.sort_unstable();
        assert_eq!(ends, ["30", "31", "32"], "{tag}: {got:?}");
    }
}

/// #57, found by the model test: prints of an actor's worker still held (its actor
/// not known yet) when logrotate's copy of their file is found are read again from
/// the copy, as the copy's, so a restart before they go out (the file truncated
/// meanwhile) loses none. The copy's checkpoint used to pass them, and the hold
/// does not outlive a restart.
#[test]
fn prints_held_when_their_file_is_copied_survive_a_restart() {
    const W: &str = "21dc0df5ded5fb4aec71a925b0bf97f61e4d13473624ef1e715e6988";
    let mut rig = Rig::with_source("ct-held", 8, true, "actor_hold = \"1h\"\n");
    let x = rig.logs().join(format!("worker-{W}-01000000-4356.out"));
    let x1 = rig.logs().join(format!("worker-{W}-01000000-4356.out.1"));
    write(&x, ":job_id:01000000\n:actor_name:Counter\nheld 1\nheld 2\n");
    let mut got = messages(&mut rig, Changes { everything: true, ..Default::default() });
    assert!(got.is_empty(), "held for their actor: {got:?}");
    // One more print, copied before the reader saw it: read from the copy, it
    // moves the copy's checkpoint past where the two held ones are in the copy.
    write(&x, "held 3\n");
    std::fs::copy(&x, &x1).unwrap();
    got.extend(messages(&mut rig, paths(&[&x1])));
    std::fs::OpenOptions::new().write(true).open(&x).unwrap().set_len(0).unwrap();
    got.extend(messages(&mut rig, paths(&[&x])));
    assert!(got.is_empty(), "still held: {got:?}");
    rig.restart(0);
    got.extend(messages(&mut rig, Changes { everything: true, ..Default::default() }));
    rig.source.stop();
    got.extend(rig.sent().into_iter().map(|s| s.message));
    got.sort();
    assert_eq!(got, ["held 1", "held 2", "held 3"], "each print once, after the restart");
}
