//! Task log ranges from the events Ray 2.60 really posted (`fixtures/ray-2.60-events`),
//! checked against the worker file the same run wrote, and the pieces events come in.

use super::*;
// The fixture and its posts, read as the event parser's tests read them.
use crate::formats::ray_event::tests::{fixture, posted_events};

const SESSION: &str = "session_2026-12-01_19-45-51_773160_3103";
const OUT_3272: &str = "worker-05bda0a4ef1f108c80eeef15850f054eca23ae47a8851b0f54432278-ffffffff-3272.out";

fn task(hex: &str) -> Id {
    Id::parse(hex.as_bytes()).unwrap()
}

fn ranges_of_the_run() -> TaskRanges {
    let mut t = TaskRanges::new();
    let events = posted_events();
    let infos: Vec<TaskLogInfo<'_>> = events.iter().filter_map(|e| TaskLogInfo::parse(e)).collect();
    // Seven lifecycle events of the run carry a range (Python's json read them too).
    assert_eq!(infos.len(), 7);
    infos.iter().for_each(|i| {
        t.add(i, "unused");
    });
    t
}

/// Ray's ranges for worker 3272 (decoded from the posts by Python's base64, not by
/// this crate) land on its `.out` file line for line: each covers what the task
/// printed, and the `:task_name:` markers Ray writes between tasks are outside.
#[test]
fn the_runs_ranges_cover_each_tasks_prints_in_the_worker_file() {
    let t = ranges_of_the_run();
    let text = std::fs::read(fixture().join(SESSION).join("logs").join(OUT_3272)).unwrap();
    let first = |n: &str| Lookup::Task { task_id: task(n), attempt: 0 };
    let flaky = |attempt| Lookup::Task { task_id: task("e0dc174c83599034ffffffffffffffffffffffff01000000"), attempt };
    let expected = [
        (":job_id:01000000", Lookup::None),
        (":task_name:square", Lookup::None),
        ("square task got 1", first("16310a0f0a45af5cffffffffffffffffffffffff01000000")),
        (":task_name:square", Lookup::None),
        ("square task got 2", first("c2668a65bda616c1ffffffffffffffffffffffff01000000")),
        (":task_name:square", Lookup::None),
        ("square task got 3", first("32d950ec0ccf9d2affffffffffffffffffffffff01000000")),
        (":task_name:flaky", Lookup::None),
        ("flaky about to fail 7", flaky(0)),
        (":task_name:flaky", Lookup::None),
        ("flaky about to fail 7", flaky(1)),
        (":task_name:tracebacks", Lookup::None),
        ("before an empty line", first("f4402ec78d3a2607ffffffffffffffffffffffff01000000")),
    ];
    let mut offset = 0u64;
    for (i, line) in text.split(|&b| b == b'\n').take(expected.len()).enumerate() {
        let (want_text, want) = expected[i];
        assert_eq!(String::from_utf8_lossy(line), want_text);
        assert_eq!(t.lookup(SESSION, OUT_3272, offset), want, "line {i} at {offset}: {want_text}");
        offset += line.len() as u64 + 1;
    }
    // Past the last task's range (it ended at the file's end): a later task may come.
    assert_eq!(t.lookup(SESSION, OUT_3272, text.len() as u64), Lookup::NotYet);
    // Another session's file of the same name is another file.
    assert_eq!(t.lookup("session_other", OUT_3272, 40), Lookup::NotYet);
}

/// Events come in pieces and more than once: a start while the task runs tags what
/// follows it; the end, learned later, closes it; a repeat changes nothing.
#[test]
fn a_range_started_tags_what_follows_until_its_end_comes() {
    let running = r#"{"eventType":"TASK_LIFECYCLE_EVENT","sessionName":"s1","taskLifecycleEvent":{"taskId":"FjEKDwpFr1z///////////////8BAAAA","taskAttempt":2,"taskLogInfo":{"stdoutFile":"/tmp/ray/session_latest/logs/w.out","stdoutStart":"100"}}}"#;
    let ended = r#"{"post":"p","i":0,"n":1,"event":{"eventType":"TASK_LIFECYCLE_EVENT","sessionName":"s1","taskLifecycleEvent":{"taskId":"FjEKDwpFr1z///////////////8BAAAA","taskAttempt":2,"taskLogInfo":{"stdoutFile":"/x/w.out","stdoutStart":"100","stdoutEnd":150}}}}"#;
    let id = task("16310a0f0a45af5cffffffffffffffffffffffff01000000");
    let mut t = TaskRanges::new();
    let info = TaskLogInfo::parse(running).expect("a start alone is a range");
    assert_eq!(info.ranges, vec![FileRange { file: "w.out", start: 100, end: None }]);
    t.add(&info, "spool");
    let tagged = Lookup::Task { task_id: id, attempt: 2 };
    assert_eq!(t.lookup("s1", "w.out", 99), Lookup::None);
    assert_eq!(t.lookup("s1", "w.out", 100), tagged);
    assert_eq!(t.lookup("s1", "w.out", 10_000), tagged, "open: a long task's prints are tagged as they come");
    // Ray's `:task_name:` marker of the next task at 120 (seen in a live run: the end
    // came in a later event than the next task's first print): what follows it waits
    // for that task's range; what precedes it is still the open one's.
    assert_eq!(t.lookup_in(Some("s1"), "w.out", 130, Some(120)), Lookup::NotYet);
    assert_eq!(t.lookup_in(Some("s1"), "w.out", 110, Some(120)), tagged);
    assert_eq!(t.lookup_in(Some("s1"), "w.out", 130, Some(90)), tagged, "its own marker precedes its start");
    for _ in 0..2 {
        t.add(&TaskLogInfo::parse(ended).unwrap(), "spool");
    }
    assert_eq!(t.files(), 1);
    assert_eq!(t.lookup("s1", "w.out", 149), tagged);
    assert_eq!(t.lookup("s1", "w.out", 150), Lookup::NotYet);
}

/// Ray 2.60 sent a long task's end without its files (`{"stdoutEnd":"112",
/// "stderrEnd":"35"}`, seen in the live traces test): it ends the range the start
/// named, stdout's and stderr's apart.
#[test]
fn an_end_without_its_file_ends_the_range_its_start_named() {
    let start = r#"{"eventType":"TASK_LIFECYCLE_EVENT","sessionName":"s1","taskLifecycleEvent":{"taskId":"yO9FzNARJXH///////////////8BAAAA","taskAttempt":0,"stateTransitions":[{"state":"RUNNING","timestamp":"2026-12-07T19:25:01Z"}],"taskLogInfo":{"stdoutFile":"/tmp/ray/session_latest/logs/w.out","stderrFile":"/tmp/ray/session_latest/logs/w.err","stdoutStart":"35","stderrStart":"35"}}}"#;
    let end = r#"{"eventType":"TASK_LIFECYCLE_EVENT","sessionName":"s1","taskLifecycleEvent":{"taskId":"yO9FzNARJXH///////////////8BAAAA","taskAttempt":0,"stateTransitions":[],"taskLogInfo":{"stdoutEnd":"112","stderrEnd":"35"}}}"#;
    let tagged = Lookup::Task { task_id: task("c8ef45ccd0112571ffffffffffffffffffffffff01000000"), attempt: 0 };
    let mut t = TaskRanges::new();
    t.add(&TaskLogInfo::parse(start).unwrap(), "spool");
    assert_eq!(t.lookup("s1", "w.out", 200), tagged, "open");
    let info = TaskLogInfo::parse(end).expect("an end alone is read");
    assert_eq!((info.ranges.len(), info.ends), (0, [Some(112), Some(35)]));
    assert!(t.add(&info, "spool"));
    assert_eq!(t.lookup("s1", "w.out", 111), tagged);
    assert_eq!(t.lookup("s1", "w.out", 112), Lookup::NotYet, "ended at 112");
    assert_eq!(t.lookup("s1", "w.err", 35), Lookup::NotYet, "stderr ended where it began");
    assert!(!t.add(&info, "spool"), "a repeat changes nothing");
}

#[test]
fn snake_case_and_the_events_without_a_range() {
    let snake = r#"{"event_type":"TASK_LIFECYCLE_EVENT","session_name":"s","task_lifecycle_event":{"task_id":"FjEKDwpFr1z///////////////8BAAAA","task_log_info":{"stderr_file":"a/w.err","stderr_start":"5","stderr_end":"9"}}}"#;
    let info = TaskLogInfo::parse(snake).unwrap();
    assert_eq!((info.attempt, info.session), (0, Some("s")));
    assert_eq!(info.ranges, vec![FileRange { file: "w.err", start: 5, end: Some(9) }]);
    for not in [
        r#"{"eventType":"TASK_LIFECYCLE_EVENT","taskLifecycleEvent":{"taskId":"FjEKDwpFr1z///////////////8BAAAA"}}"#,
        r#"{"eventType":"ACTOR_LIFECYCLE_EVENT","actorLifecycleEvent":{}}"#,
        r#"{"eventType":"TASK_LIFECYCLE_EVENT","taskLifecycleEvent":{"taskLogInfo":{"stdoutFile":"w.out","stdoutStart":"1"}}}"#,
        "not json",
        "",
    ] {
        assert_eq!(TaskLogInfo::parse(not), None, "{not}");
    }
}

/// The parser tags each print of worker 3272 with the attempt whose range holds it,
/// as Ray's events (decoded by Python, see above) say, once the correlator learned
/// them from the spool lines; the event's range wins over a marker's task; and a
/// print no range covers waits (`task_pending`) only while one may still come.
#[test]
fn the_parser_tags_each_print_with_the_attempt_that_wrote_it() {
    let parse = |corr: &mut crate::Correlator, session: Option<&str>| {
        let text = std::fs::read(fixture().join(SESSION).join("logs").join(OUT_3272)).unwrap();
        let mut p = crate::FileParser::new(crate::classify(OUT_3272, session), None, None);
        let (opts, mut out) = (crate::Options::default(), vec![]);
        let mut keep = |r: &crate::Record<'_>| {
            out.push((r.message.to_string(), r.ids.task_id.map(|t| t.to_string()), r.ids.task_attempt, r.task_pending))
        };
        p.push(&text, corr, &opts, &mut keep);
        p.finish(corr, &opts, &mut keep);
        out
    };
    let spool = crate::classify("ray_events-000001.ndjson", None);
    let mut corr = crate::Correlator::new();
    // Before any event: no task, and nothing to wait for (no range of the session).
    let before = parse(&mut corr, Some(SESSION));
    assert!(before.iter().all(|(_, t, a, pending)| t.is_none() && a.is_none() && !pending), "{before:?}");
    for e in posted_events() {
        corr.learn_task_log_of(&spool, &e);
    }
    let got = parse(&mut corr, Some(SESSION));
    let want = |m: &str, t: &str, a: u32| (m.to_string(), Some(t.to_string()), Some(a), false);
    assert_eq!(got[0], want("square task got 1", "16310a0f0a45af5cffffffffffffffffffffffff01000000", 0));
    assert_eq!(got[1], want("square task got 2", "c2668a65bda616c1ffffffffffffffffffffffff01000000", 0));
    assert_eq!(got[3], want("flaky about to fail 7", "e0dc174c83599034ffffffffffffffffffffffff01000000", 0));
    assert_eq!(got[4], want("flaky about to fail 7", "e0dc174c83599034ffffffffffffffffffffffff01000000", 1));
    assert!(got[5].0.starts_with("before an empty line"), "{got:?}");
    assert_eq!(got[5].1.as_deref(), Some("f4402ec78d3a2607ffffffffffffffffffffffff01000000"));
    // A logs dir not under its session dir (an archive): the file name finds it.
    let unnamed = parse(&mut corr, None);
    assert_eq!(unnamed.iter().map(|r| &r.1).collect::<Vec<_>>(), got.iter().map(|r| &r.1).collect::<Vec<_>>());
    // Another session's file of that name waits for a range of its own session only
    // if that session's events named ranges: here none did.
    let other = parse(&mut corr, Some("session_other"));
    assert!(other.iter().all(|(_, t, _, pending)| t.is_none() && !pending), "{other:?}");
}

/// The agent journals what changed and restores it after a restart: the restored
/// ranges answer as the learned ones did.
#[test]
fn changed_ranges_are_kept_for_the_journal_and_restore_the_same_answers() {
    let mut t = TaskRanges::new();
    t.track_changes();
    let events = posted_events();
    for i in events.iter().filter_map(|e| TaskLogInfo::parse(e)) {
        t.add(&i, "unused");
    }
    let changed = t.take_changed();
    assert!(!changed.is_empty());
    assert!(t.take_changed().is_empty(), "taken once");
    // The same events again (at least once delivery) change nothing.
    for i in events.iter().filter_map(|e| TaskLogInfo::parse(e)) {
        assert!(!t.add(&i, "unused"));
    }
    let mut restored = TaskRanges::new();
    changed.iter().for_each(|r| {
        restored.restore(r);
    });
    assert_eq!(restored.saved(), t.saved());
    for offset in (0..400).step_by(7) {
        assert_eq!(restored.lookup(SESSION, OUT_3272, offset), t.lookup(SESSION, OUT_3272, offset), "at {offset}");
    }
}

/// Past [`MAX_FILES`] files the oldest file's ranges go; past
/// [`MAX_RANGES_PER_FILE`] a file's earliest.
#[test]
fn ranges_are_bounded() {
    let mut t = TaskRanges::new();
    let id = task("16310a0f0a45af5cffffffffffffffffffffffff01000000");
    let range = |file: String, attempt: u32, start: u64| SavedRange {
        session: "s".into(),
        file: file.into(),
        task_id: id,
        attempt,
        start,
        end: Some(start + 1),
    };
    for n in 0..MAX_RANGES_PER_FILE as u32 + 10 {
        t.restore(&range("a".into(), n, n as u64 * 2));
    }
    assert_eq!(t.lookup("s", "a", 0), Lookup::None, "the earliest went");
    assert_eq!(t.lookup("s", "a", 40), Lookup::Task { task_id: id, attempt: 20 });
    for n in 0..MAX_FILES {
        t.restore(&range(format!("f{n}"), 0, 0));
    }
    assert_eq!(t.files(), MAX_FILES);
    assert_eq!(t.lookup("s", "a", 40), Lookup::NotYet, "the oldest file went");
    assert_eq!(t.lookup("s", "f1", 0), Lookup::Task { task_id: id, attempt: 0 });
}

/// In the run that gave ranges, no event says a normal task ran without one: the
/// driver's task and the actors' calls, which never have ranges, do not count.
#[test]
fn a_run_with_ranges_never_looks_like_one_without() {
    let events = posted_events();
    let kinds: Vec<TaskLog<'_>> = events.iter().filter_map(|e| TaskLog::parse(e)).collect();
    assert_eq!(kinds.len(), 7, "the seven ranges");
    assert!(kinds.iter().all(|k| matches!(k, TaskLog::Ranges(_))), "{kinds:?}");
}
