//! Restarts (issue #57): a record read again after the agent was killed is the
//! same entry, with the same time and document id, whatever was learned meanwhile.

use super::tests::{write, Rig};
use super::*;

const WORKER: &str = "21dc0df5ded5fb4aec71a925b0bf97f61e4d13473624ef1e715e6988";

fn everything() -> Changes {
    Changes { everything: true, ..Default::default() }
}

/// A round, then a few more after the idle flush's 1 ms: the last line of a file
/// goes out only once the file has been idle that long, which a fast machine may
/// not reach within the first round.
fn settled(rig: &mut Rig, changes: Changes) -> Vec<super::tests::Sent> {
    let mut got = rig.round_sent(changes);
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        got.extend(rig.round_sent(Changes::default()));
    }
    got
}

fn ns(rfc3339: &str) -> i64 {
    rfc3339.parse::<jiff::Timestamp>().unwrap().as_nanosecond() as i64
}

/// A worker's prints, dated from its core-worker log's newest line (they carry no
/// time), are sent; the agent is killed before any batch is acknowledged; the
/// core-worker log goes on an hour later. Read again, the prints keep the time they
/// went out with (from the journal of times), not the hour-later one the log now
/// gives: Loki would store them twice otherwise. Without the journal (the
/// control), the same restart gives them the later time.
#[test]
fn a_print_read_again_after_a_restart_keeps_its_time() {
    for journal in [true, false] {
        let mut rig = Rig::with(if journal { "reprint" } else { "reprint-none" }, 8, false);
        let logs = rig.logs();
        let core = logs.join(format!("python-core-worker-{WORKER}_4356.log"));
        let out = logs.join(format!("worker-{WORKER}-01000000-4356.out"));
        write(&core, "[2026-11-30 10:21:13,549 I 4356 4356] core_worker_process.cc:872: Constructing CoreWorkerProcess. pid: 4356\n");
        write(&out, ":job_id:01000000\nprint one\nprint two\n");
        let first: Vec<_> =
            settled(&mut rig, everything()).into_iter().filter(|s| s.message.starts_with("print")).collect();
        assert_eq!(first.len(), 2);
        assert!(first.iter().all(|s| s.time == ns("2026-11-30T10:21:13.549Z")), "{first:?}");
        write(&core, "[2026-11-30 11:21:13,549 I 4356 4356] core_worker.cc:1: an hour later\n");
        if !journal {
            for e in std::fs::read_dir(rig.dir.join("state")).unwrap() {
                let p = e.unwrap().path();
                if p.file_name().unwrap().to_string_lossy().starts_with("times.") {
                    std::fs::remove_file(p).unwrap();
                }
            }
        }
        rig.restart(usize::MAX);
        let again: Vec<_> =
            settled(&mut rig, everything()).into_iter().filter(|s| s.message.starts_with("print")).collect();
        assert_eq!(again.len(), 2, "the unacknowledged batch is read again");
        for (a, b) in first.iter().zip(&again) {
            assert_eq!((&a.message, a.offset, a.doc_id), (&b.message, b.offset, b.doc_id));
            if journal {
                assert_eq!(a.time, b.time, "{} read again with another time", a.message);
            } else {
                assert_eq!(b.time, ns("2026-11-30T11:21:13.549Z"), "the control: no journal, the later time");
            }
        }
    }
}

const NODE: &str = "b41b4d0f9f2f900e85be32890a6a2f6a31a6d567a5a182881cccfc4b";
const ACTOR: &str = "ceeabe459a58b124ad5b805d01000000";

/// The actor and node ids a worker's prints got stay on them when a restart reads
/// them again, though what taught them is gone or not read again: the core-worker
/// log that named the actor was deleted, and raylet's log (which named the node)
/// has nothing new to read.
#[test]
fn ids_learned_before_a_restart_still_tag_prints_after_it() {
    let mut rig = Rig::with("ids", 8, false);
    let logs = rig.logs();
    let core = logs.join(format!("python-core-worker-{WORKER}_4356.log"));
    let out = logs.join(format!("worker-{WORKER}-01000000-4356.out"));
    write(
        &logs.join("raylet.out"),
        &format!("[2026-11-30 10:21:04,411 I 4102 4102] (raylet) main.cc:711: Setting node ID node_id={NODE}\n"),
    );
    write(
        &core,
        &format!("[2026-11-30 10:21:13,558 I 4356 4356] core_worker.cc:3247: Creating actor actor_id={ACTOR}\n"),
    );
    write(&out, ":job_id:01000000\n:actor_name:Counter\ncounter at 1\n");
    let ids =
        |v: &serde_json::Value| (v["actor_id"].as_str().map(String::from), v["node_id"].as_str().map(String::from));
    let want = (Some(ACTOR.to_string()), Some(NODE.to_string()));
    let mut first = rig.round_json(everything());
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        first.extend(rig.round_json(Changes::default()));
    }
    let print = first.iter().find(|v| v["message"] == "counter at 1").expect("the print went out");
    assert_eq!(ids(print), want);
    rig.restart(0);
    std::fs::remove_file(&core).unwrap();
    write(&out, "counter at 2\n");
    let mut again = rig.round_json(everything());
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        again.extend(rig.round_json(Changes::default()));
    }
    let print = again.iter().find(|v| v["message"] == "counter at 2").expect("the new print went out (not held)");
    assert_eq!(ids(print), want, "{print}");
}

/// An actor's prints wait in the hold for the actor's id (no core-worker log names
/// it here), so the file's checkpoint stays at the first of them, with the context
/// that held there: a `:task_name:` marker read after it must not be in force when
/// a restart reads that print again.
#[test]
fn a_checkpoint_at_a_held_record_resumes_with_the_context_there() {
    let mut rig = Rig::with("held-ctx", 8, false);
    let out = rig.logs().join(format!("worker-{WORKER}-01000000-4356.out"));
    write(&out, ":job_id:01000000\n:actor_name:Counter\nprint a\n:task_name:later_task\nprint b\n");
    let first = rig.round_json(everything());
    assert!(first.iter().all(|v| !v["message"].as_str().unwrap().starts_with("print")), "held: {first:?}");
    rig.restart(0);
    rig.round_json(everything());
    rig.round_json(Changes::default());
    rig.source.release_held(true);
    rig.source.cut(true);
    let again = rig.sent_json();
    let task = |m: &str| again.iter().find(|v| v["message"] == m).map(|v| v["task_name"].clone());
    assert_eq!(task("print a"), Some(serde_json::Value::Null), "{again:?}");
    assert_eq!(task("print b"), Some(serde_json::json!("later_task")), "{again:?}");
}

/// A worker's prints wait in the hold for its actor's id (no core-worker log names
/// it), and Ray deletes the file; the agent is stopped (SIGTERM): the prints go out
/// at once, without the actor id, not dropped (the file cannot be read again after
/// the restart).
#[test]
fn held_records_of_a_deleted_file_go_out_at_shutdown() {
    let mut rig = Rig::with("stop-held", 8, false);
    let out = rig.logs().join(format!("worker-{WORKER}-01000000-4356.out"));
    write(&out, ":job_id:01000000\n:actor_name:Counter\nheld print 1\nheld print 2\n");
    let mut first = rig.round_json(everything());
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        first.extend(rig.round_json(Changes::default()));
    }
    assert!(first.iter().all(|v| !v["message"].as_str().unwrap().starts_with("held")), "held: {first:?}");
    std::fs::remove_file(&out).unwrap();
    rig.source.stop();
    let sent = rig.sent_json();
    let prints: Vec<_> = sent.iter().filter(|v| v["message"].as_str().unwrap().starts_with("held")).collect();
    assert_eq!(prints.len(), 2, "{sent:?}");
    assert!(prints.iter().all(|v| v["actor_id"].is_null() && v["job_id"] == "01000000"), "{prints:?}");
}

/// #57 item 5: a file deleted before the stop (its deletion not yet seen) has its
/// last record still in the parser, waiting for a continuation: the stop emits it,
/// where it used to stay behind the checkpoint of a file nothing can read again.
#[test]
fn the_last_record_of_a_file_deleted_before_the_stop_goes_out_at_the_stop() {
    let mut rig = Rig::with("stop-deleted-last", 8, false);
    // The last record waits for a continuation as long as a live file's would.
    rig.source.cfg.source.idle_flush = std::time::Duration::from_secs(3600);
    rig.source.cfg.source.partial_line_timeout = std::time::Duration::from_secs(3600);
    let gcs = rig.logs().join("gcs_server.out");
    let lines = [
        "[2026-11-30 09:05:33,150 I 4214 4214] gcs_server.cc:1: first",
        "[2026-11-30 09:05:33,151 I 4214 4214] gcs_server.cc:2: second",
    ];
    write(&gcs, &format!("{}\n{}\n", lines[0], lines[1]));
    let mut got = rig.round_json(everything());
    std::fs::remove_file(&gcs).unwrap();
    rig.source.stop();
    got.extend(rig.sent_json());
    let messages: Vec<&str> = got.iter().filter_map(|v| v["message"].as_str()).collect();
    assert_eq!(messages, ["first", "second"], "{got:?}");
}
