//! The router and the hold on a stepped clock: an actor worker's output waits for
//! its actor, goes out tagged once the actor is known, or untagged once `actor_hold`
//! is over; a file's later records stay behind its held ones. The waits are set
//! from the real monotonic clock when a record is routed; the tests read that clock
//! before and after routing and release at instants just inside and just past the
//! window, so no assertion depends on how long anything took.

use std::sync::Arc;
use std::time::{Duration, Instant};

use raylog_parsers::{classify, Correlator, FileParser, Id, Options};

use super::{Enrich, FileRoute, Hold};
use crate::agent::batch::{doc_id_seed, Batch, NodeIdentity};
use crate::agent::checkpoint::FileKey;
use crate::agent::metrics::Metrics;
use crate::agent::ray_metrics::RayCounter;

fn ray_counter() -> RayCounter {
    RayCounter::new(Arc::new(Metrics::new(&[])), "n")
}

const WORKER: &str = "abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2";
const ACTOR: &str = "6b5c1cd3ac1d3ea6c1c4a1b301000000";
/// Another actor's worker, whose actor is never learned.
const OTHER_WORKER: &str = "c1d2e3f405162738495a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6";
const HOLD: Duration = Duration::from_secs(10);

/// One actor worker's file (and another's), parsed chunk by chunk through a router
/// into a batch and the hold, as the reader does.
struct Rig {
    e: Enrich,
    corr: Correlator,
    parser: FileParser,
    meta: Arc<raylog_parsers::FileMeta>,
    key: FileKey,
    other: (FileParser, Arc<raylog_parsers::FileMeta>),
}

/// The other worker's file.
const OTHER_KEY: FileKey = FileKey { dev: 1, ino: 3 };

impl Rig {
    fn new() -> Rig {
        let name = format!("worker-{WORKER}-01000000-4242.out");
        let meta = Arc::new(classify(&name, Some("session_x")));
        let node = Arc::new(NodeIdentity::new("n".into(), None, Default::default()));
        let other = Arc::new(classify(&format!("worker-{OTHER_WORKER}-01000000-4343.out"), Some("session_x")));
        let mut e = Enrich::new(Batch::new(1, node), ray_counter(), HOLD, Default::default());
        // These tests step time to a wait's edges; the gap between passes has its own.
        e.hold.set_pass_gap(Duration::ZERO);
        Rig {
            e,
            corr: Correlator::new(),
            parser: FileParser::new((*meta).clone(), None, None),
            meta,
            key: FileKey { dev: 1, ino: 2 },
            other: (FileParser::new((*other).clone(), None, None), other),
        }
    }

    /// Parses `text` (completing its last record) and routes what comes out. Returns
    /// the instants before and after: the held records' waits end within
    /// `[before + HOLD, after + HOLD]`.
    fn read(&mut self, text: &str) -> (Instant, Instant) {
        let before = Instant::now();
        let parts = FileRoute { key: self.key, meta: self.meta.clone(), seed: doc_id_seed("1:2"), wait_node: None };
        let mut router = self.e.file(parts);
        let opts = Options::default();
        self.parser.push(text.as_bytes(), &mut self.corr, &opts, &mut |r| router.route(r));
        self.parser.flush(&mut self.corr, &opts, &mut |r| router.route(r));
        (before, Instant::now())
    }

    /// [`Rig::read`] for the other worker's file.
    fn read_other(&mut self, text: &str) -> (Instant, Instant) {
        let before = Instant::now();
        let parts = FileRoute { key: OTHER_KEY, meta: self.other.1.clone(), seed: doc_id_seed("1:3"), wait_node: None };
        let mut router = self.e.file(parts);
        let opts = Options::default();
        self.other.0.push(text.as_bytes(), &mut self.corr, &opts, &mut |r| router.route(r));
        self.other.0.flush(&mut self.corr, &opts, &mut |r| router.route(r));
        (before, Instant::now())
    }

    /// Releases what is due at `now`: (message, actor id) in the order released.
    /// The other worker's messages start with "other".
    fn release(&mut self, now: Instant) -> Vec<(String, Option<String>)> {
        let mut out = vec![];
        self.e.hold.release(now, &self.corr, &|_| None, false, usize::MAX, &mut |r, key, seed| {
            let other = r.message.starts_with("other");
            assert_eq!(key, if other { OTHER_KEY } else { FileKey { dev: 1, ino: 2 } });
            let want = doc_id_seed(if other { "1:3" } else { "1:2" });
            assert_eq!(seed, want, "a held record keeps its file's document-id seed");
            out.push((r.message.to_string(), r.ids.actor_id.map(|a| a.as_str().to_string())));
        });
        out
    }

    fn learn_actor(&mut self) {
        let (w, a) = (Id::parse(WORKER.as_bytes()).unwrap(), Id::parse(ACTOR.as_bytes()).unwrap());
        assert!(self.corr.link(w, a));
    }
}

fn msgs(v: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    v.iter().map(|(m, a)| (m.to_string(), a.map(str::to_string))).collect()
}

#[test]
fn an_actors_output_waits_for_its_actor_and_goes_out_tagged() {
    let mut rig = Rig::new();
    let (_, after) = rig.read(":actor_name:Counter\nprint 0\nprint 1\n");
    // Another actor's print, read later: it waits for its own actor, never learned.
    let (_, other_after) = rig.read_other(":actor_name:Other\nother 0\n");
    assert_eq!(rig.e.batch.len(), 0, "an actor's print went out before its actor was known");
    assert_eq!(rig.e.hold.len(), 3);
    assert_eq!(rig.release(after), vec![], "released with the actor still unknown and the wait not over");
    rig.learn_actor();
    assert_eq!(rig.release(after), msgs(&[("print 0", Some(ACTOR)), ("print 1", Some(ACTOR))]));
    // Nothing is released twice: with the other print still held (its wait began
    // after `after`), releasing again gives nothing, and once its wait is over only
    // it goes out.
    assert_eq!(rig.release(after), vec![], "released twice");
    assert_eq!(rig.e.hold.len(), 1);
    assert_eq!(rig.release(other_after + HOLD), msgs(&[("other 0", None)]), "released twice");
    assert!(rig.e.hold.is_empty());
}

#[test]
fn an_unknown_actors_output_goes_out_untagged_after_actor_hold() {
    let mut rig = Rig::new();
    let (before, after) = rig.read(":actor_name:Counter\nprint 0\nprint 1\n");
    // A later print, read strictly after `after` (a spin of nanoseconds, not a
    // sleep): its wait ends strictly after the first two's.
    while Instant::now() <= after {}
    let (_, after2) = rig.read("print 2\n");
    assert_eq!(rig.e.hold.len(), 3);
    // Just inside the wait (it began at `before` at the earliest): still held.
    assert_eq!(rig.release(before + HOLD - Duration::from_millis(1)), vec![]);
    assert_eq!(rig.e.hold.len(), 3);
    // Past it (it began at `after` at the latest): out, untagged, in order.
    assert_eq!(rig.release(after + HOLD), msgs(&[("print 0", None), ("print 1", None)]));
    // "print 2" still waits; releasing again gives nothing, and once its wait is
    // over only it goes out.
    assert_eq!(rig.release(after + HOLD), vec![], "released twice");
    assert_eq!(rig.e.hold.len(), 1);
    assert_eq!(rig.release(after2 + HOLD), msgs(&[("print 2", None)]), "released twice");
    assert!(rig.e.hold.is_empty());
}

#[test]
fn a_files_later_records_stay_behind_its_held_ones() {
    let mut rig = Rig::new();
    let (_, after) = rig.read(":actor_name:Counter\nprint 0\n");
    assert_eq!(rig.e.hold.len(), 1);
    rig.learn_actor();
    // Parsed now, this record is tagged at once and need not wait for anything; but
    // "print 0" is still held (not released yet), so it must wait behind it.
    rig.read("print 1\n");
    assert_eq!(rig.e.batch.len(), 0, "a later record overtook a held one of its file");
    assert_eq!(rig.e.hold.len(), 2);
    assert_eq!(rig.release(after), msgs(&[("print 0", Some(ACTOR)), ("print 1", Some(ACTOR))]));
    // Once the hold has nothing of the file, its records go straight to the batch.
    rig.read("print 2\n");
    assert_eq!(rig.e.batch.len(), 1);
    assert!(rig.e.hold.is_empty());
}

#[test]
fn other_files_are_not_held_behind_an_actors_output() {
    let mut rig = Rig::new();
    rig.read(":actor_name:Counter\nprint 0\n");
    assert_eq!(rig.e.hold.len(), 1);
    let raylet = Arc::new(classify("raylet.out", Some("session_x")));
    let mut p = FileParser::new((*raylet).clone(), None, None);
    let parts = FileRoute { key: FileKey { dev: 1, ino: 3 }, meta: raylet, seed: doc_id_seed("1:3"), wait_node: None };
    let mut router = rig.e.file(parts);
    let line = b"[2026-11-30 09:05:33,150 I 4214 4214] (raylet) node_manager.cc:1: work\n";
    p.push(line, &mut rig.corr, &Options::default(), &mut |r| router.route(r));
    p.flush(&mut rig.corr, &Options::default(), &mut |r| router.route(r));
    assert_eq!(rig.e.batch.len(), 1, "raylet's record waited behind a worker's");
    assert_eq!(rig.e.hold.len(), 1);
}

/// Release keeps a file's order too: a later record that is ready (it waits for
/// nothing) does not overtake an earlier one of its file still waiting, here for
/// its logs dir's node id (a new session whose raylet has not named it yet).
#[test]
fn a_ready_record_is_not_released_ahead_of_a_waiting_one_of_its_file() {
    let meta = Arc::new(classify("gcs_server.out", Some("session_x")));
    let key = FileKey { dev: 1, ino: 4 };
    let node = Arc::new(NodeIdentity::new("n".into(), None, Default::default()));
    let (mut e, mut corr) =
        (Enrich::new(Batch::new(1, node), ray_counter(), HOLD, Default::default()), Correlator::new());
    let mut p = FileParser::new((*meta).clone(), None, None);
    let opts = Options::default();
    let line = |m: &str| format!("[2026-11-30 09:05:33,150 I 4214 4214] gcs_server.cc:1: {m}\n");
    let now = Instant::now();
    // Read while the node is awaited: "first" waits for it (for an hour at most).
    let node_until = Some(now + Duration::from_secs(3600));
    let parts = |wait_node| FileRoute { key, meta: meta.clone(), seed: doc_id_seed("1:4"), wait_node };
    let mut router = e.file(parts(node_until));
    p.push(line("first").as_bytes(), &mut corr, &opts, &mut |r| router.route(r));
    p.flush(&mut corr, &opts, &mut |r| router.route(r));
    // Read after the session's node wait ended: "second" waits for nothing, but is
    // held behind "first".
    let mut router = e.file(parts(None));
    p.push(line("second").as_bytes(), &mut corr, &opts, &mut |r| router.route(r));
    p.flush(&mut corr, &opts, &mut |r| router.route(r));
    assert_eq!((e.batch.len(), e.hold.len()), (0, 2));
    let hold = &mut e.hold;
    let release = |hold: &mut Hold, node: Option<Id>| {
        let mut out = vec![];
        hold.release(now, &corr, &|_| node, false, usize::MAX, &mut |r, _, _| out.push(r.message.to_string()));
        out
    };
    assert_eq!(release(hold, None), Vec::<String>::new(), "a later record overtook a waiting one");
    let n = Id::parse(b"e9e1cbd2e1ad6c8a3e9c4bd5c1a5b3f0f2e4d6c8a0b2c4d6e6bd7f6c").unwrap();
    // As the source does when raylet names the node.
    hold.unsettle();
    assert_eq!(release(hold, Some(n)), ["first", "second"]);
    assert!(hold.is_empty());
}

/// A task's event as Ray 2.60 posts it: a lifecycle event of `task` (base64 of its
/// 24 bytes) whose `taskLogInfo` names the rig's worker file from `start` (to `end`).
fn task_event(task_b64: &str, attempt: u32, start: u64, end: Option<u64>) -> String {
    let end = end.map_or(String::new(), |e| format!(r#","stdoutEnd":"{e}""#));
    format!(
        r#"{{"eventType":"TASK_LIFECYCLE_EVENT","sessionName":"session_x","taskLifecycleEvent":{{"taskId":"{task_b64}","taskAttempt":{attempt},"taskLogInfo":{{"stdoutFile":"/tmp/ray/session_x/logs/worker-{WORKER}-01000000-4242.out","stdoutStart":"{start}"{end}}}}}}}"#
    )
}

/// A task worker's prints wait for the event giving their attempt's range (once
/// the session's events named ranges at all), and go out tagged with the task and
/// attempt the event names; a print no event covers goes out untagged when its
/// wait is over, and is counted. The ids are what Python's base64 makes of them.
#[test]
fn a_task_print_waits_for_its_attempts_range_and_goes_out_tagged() {
    // base64 of the bytes of task 16310a0f0a45af5cffffffffffffffffffffffff01000000.
    const TASK_B64: &str = "FjEKDwpFr1z///////////////8BAAAA";
    const TASK_HEX: &str = "16310a0f0a45af5cffffffffffffffffffffffff01000000";
    let spool = classify("ray_events-000000000001.ndjson", None);
    let mut rig = Rig::new();
    // No range of the session known yet: a print goes straight out, untagged.
    rig.read(":job_id:01000000\nbefore any event\n");
    assert_eq!(rig.e.batch.len(), 1);
    assert!(rig.e.hold.is_empty());
    // A range of another attempt, so the session is known to export ranges.
    assert!(rig.corr.learn_task_log_of(&spool, &task_event(TASK_B64, 0, 0, Some(17))));
    let start = 17 + "before any event\n".len() as u64;
    let (_, after) = rig.read("print 0\nprint 1\n");
    assert_eq!(rig.e.hold.len(), 2, "the prints wait for their attempt's range");
    assert_eq!(rig.release(after), vec![]);
    // The retry's range starts at the first print (its end comes later).
    assert!(rig.corr.learn_task_log_of(&spool, &task_event(TASK_B64, 1, start, None)));
    let mut got = vec![];
    rig.e.hold.release(after, &rig.corr, &|_| None, false, usize::MAX, &mut |r, _, _| {
        got.push((r.message.to_string(), r.ids.task_id.map(|t| t.to_string()), r.ids.task_attempt))
    });
    let want = |m: &str| (m.to_string(), Some(TASK_HEX.to_string()), Some(1));
    assert_eq!(got, vec![want("print 0"), want("print 1")]);
    // The attempt ends after "print 1"; a later print waits for a range that never
    // comes, then goes out untagged and counted.
    let end = start + "print 0\nprint 1\n".len() as u64;
    assert!(rig.corr.learn_task_log_of(&spool, &task_event(TASK_B64, 1, start, Some(end))));
    let (_, after) = rig.read("worker's own line\n");
    assert_eq!(rig.release(after), vec![]);
    assert_eq!(rig.e.hold.untagged_tasks, 0);
    assert_eq!(rig.release(after + HOLD), msgs(&[("worker's own line", None)]));
    assert_eq!(rig.e.hold.untagged_tasks, 1);
}

/// With task events received, a print waits for its range from the start; once
/// its session's tasks are seen running without ranges (what Ray 2.60 posts while
/// `RAY_ROTATION_MAX_BYTES` is set: this event is one it posted then, its session
/// renamed to the rig's), the held print goes out at once, and later ones wait no more.
#[test]
fn prints_stop_waiting_once_their_sessions_tasks_run_without_ranges() {
    const RUNNING_WITHOUT: &str = r#"{"eventId": "XW2OleiG0IWVb+Ba+mbA7jsIGN7FaaoF9P7Odg==", "sourceType": "CORE_WORKER", "eventType": "TASK_LIFECYCLE_EVENT", "timestamp": "2026-12-07T16:30:27.069859214Z", "severity": "INFO", "sessionName": "session_x", "taskLifecycleEvent": {"taskId": "yO9FzNARJXH///////////////8BAAAA", "stateTransitions": [{"state": "RUNNING", "timestamp": "2026-12-07T16:30:27.069859214Z"}], "workerPid": 14154, "jobId": "AQAAAA==", "taskAttempt": 0, "nodeId": "", "workerId": ""}, "nodeId": "QxNc9ovchrLHTN7VRVvnF9foqIzAfRkpN7TvoQ==", "message": ""}"#;
    let spool = classify("ray_events-000000000001.ndjson", None);
    let mut rig = Rig::new();
    rig.corr.await_tasks(true);
    let (_, after) = rig.read(":job_id:01000000\nprint 0\n");
    assert_eq!(rig.e.hold.len(), 1, "with task events received, a print waits for its range");
    assert_eq!(rig.release(after), vec![]);
    assert!(rig.corr.learn_task_log_of(&spool, RUNNING_WITHOUT));
    assert_eq!(rig.release(after), msgs(&[("print 0", None)]));
    assert_eq!(rig.e.hold.untagged_tasks, 0, "it did not wait in vain: nothing was coming");
    rig.read("print 1\n");
    assert!(rig.e.hold.is_empty(), "later prints of the session do not wait");
    assert_eq!(rig.e.batch.len(), 1, "print 1 went straight into the batch");
}
