//! The tracer on Ray's real events (`fixtures/ray-2.60-events/posts`): every span's
//! expected start, end, parent, status and name come from the posts, decoded here
//! with a decoder of the test's own, not from the crate.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::attempt::GRACE_NS;
use super::span::{hex, span_id, trace_id, AttrValue, Kind, TaskSpan};
use super::*;

const NOW: i64 = 1_800_000_000_000_000_000;

fn settings() -> Settings {
    Settings { max_spans_per_job: 10_000, span_timeout: Duration::from_secs(3600), max_open_spans: 100_000 }
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/ray-2.60-events/posts")
}

/// Ray's events, in the order they were posted.
fn posted() -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixture())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| serde_json::from_slice::<Vec<serde_json::Value>>(&std::fs::read(f).unwrap()).unwrap())
        .collect()
}

/// Standard base64 to hex, the test's own.
fn b64hex(s: &str) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut acc, mut bits, mut out) = (0u32, 0, String::new());
    for c in s.bytes().filter(|&c| c != b'=') {
        acc = acc << 6 | ABC.iter().position(|&a| a == c).unwrap() as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push_str(&format!("{:02x}", (acc >> bits) & 0xff));
        }
    }
    out
}

fn ns(t: &str) -> i64 {
    t.parse::<jiff::Timestamp>().unwrap().as_nanosecond() as i64
}

/// Feeds `events` to `t` as the agent reads them: spool lines through the parser.
fn feed(t: &mut Tracer, events: &[serde_json::Value], now: i64) {
    let text: String = events.iter().map(|e| format!("{e}\n")).collect();
    let meta = raylog_parsers::classify("ray_events-000000000001.ndjson", None);
    let mut p = raylog_parsers::FileParser::new(meta, None, None);
    let (opts, mut corr) = (raylog_parsers::Options::default(), raylog_parsers::Correlator::new());
    let mut keep = |r: &Record<'_>| t.observe(r, now);
    p.push(text.as_bytes(), &mut corr, &opts, &mut keep);
    p.finish(&mut corr, &opts, &mut keep);
}

/// What the posts say of each (task hex, attempt): its states with times, its
/// definition (name, parent hex), and its error type.
#[derive(Default, Debug)]
struct Said {
    states: Vec<(String, i64)>,
    name: Option<String>,
    parent: Option<String>,
    error: Option<String>,
    /// The executor's `task::<name>` profile event's end.
    executed: Option<i64>,
}

fn said(events: &[serde_json::Value]) -> BTreeMap<(String, u32), Said> {
    let mut out: BTreeMap<(String, u32), Said> = BTreeMap::new();
    for e in events {
        let ty = e["eventType"].as_str().unwrap();
        if ty == "TASK_PROFILE_EVENT" {
            let p = &e["taskProfileEvents"];
            let key = (b64hex(p["taskId"].as_str().unwrap()), p["attemptNumber"].as_u64().unwrap_or(0) as u32);
            for pe in p["profileEvents"]["events"].as_array().unwrap() {
                if pe["eventName"].as_str().unwrap().starts_with("task::") {
                    out.entry(key.clone()).or_default().executed = pe["endTime"].as_str().unwrap().parse().ok();
                }
            }
            continue;
        }
        let p = match ty {
            "TASK_DEFINITION_EVENT" => &e["taskDefinitionEvent"],
            "ACTOR_TASK_DEFINITION_EVENT" => &e["actorTaskDefinitionEvent"],
            "TASK_LIFECYCLE_EVENT" => &e["taskLifecycleEvent"],
            _ => continue,
        };
        let key = (b64hex(p["taskId"].as_str().unwrap()), p["taskAttempt"].as_u64().unwrap_or(0) as u32);
        let s = out.entry(key).or_default();
        if ty.ends_with("DEFINITION_EVENT") {
            s.name = p["taskName"].as_str().or(p["actorTaskName"].as_str()).map(String::from);
            s.parent = Some(b64hex(p["parentTaskId"].as_str().unwrap()));
        }
        for tr in p["stateTransitions"].as_array().into_iter().flatten() {
            s.states.push((tr["state"].as_str().unwrap().into(), ns(tr["timestamp"].as_str().unwrap())));
        }
        if let Some(t) = p["rayErrorInfo"]["errorType"].as_str() {
            s.error = Some(t.into());
        }
    }
    out
}

fn at(s: &Said, state: &str) -> Option<i64> {
    s.states.iter().filter(|(x, _)| x == state).map(|(_, t)| *t).min()
}

fn str_attr<'a>(s: &'a TaskSpan, k: &str) -> Option<&'a str> {
    match s.attr(k) {
        Some(AttrValue::Str(v)) => Some(v),
        _ => None,
    }
}

#[test]
fn every_attempt_of_the_real_run_gives_its_spans_with_the_parent_status_and_times_ray_posted() {
    let events = posted();
    let mut t = Tracer::new(settings());
    feed(&mut t, &events, NOW);
    t.sweep(NOW + GRACE_NS + 1);
    let spans = t.take_spans();
    let by_id: BTreeMap<[u8; 8], &TaskSpan> = spans.iter().map(|s| (s.span_id, s)).collect();
    assert_eq!(by_id.len(), spans.len(), "each span once");
    let said = said(&events);
    let (mut runs, mut failed) = (0, 0);
    for ((task, attempt), s) in &said {
        if task.starts_with(&"f".repeat(40)) {
            continue; // the driver: its span ends with the job (not in these posts)
        }
        let end = at(s, "FINISHED").or(at(s, "FAILED"));
        let run = by_id.get(&span_id(task, *attempt, Kind::Run));
        match (at(s, "RUNNING"), end) {
            (Some(start), Some(end)) => {
                let run = run.unwrap_or_else(|| panic!("no run span for {task}/{attempt}"));
                runs += 1;
                assert_eq!((run.start_ns, run.end_ns), (start, end), "{task}/{attempt}");
                assert_eq!(run.trace_id, trace_id("01000000"));
                assert_eq!(run.name, s.name.clone().unwrap(), "{task}");
                assert_eq!(run.parent, s.parent.as_deref().map(|p| span_id(p, 0, Kind::Run)), "{task}");
                assert_eq!(str_attr(run, "ray.task_id"), Some(task.as_str()));
                if at(s, "FAILED").is_some() {
                    failed += 1;
                    let err = run.error.as_deref().unwrap_or_else(|| panic!("{task} failed without ERROR"));
                    assert!(err.starts_with(s.error.as_deref().unwrap()), "{err}");
                } else {
                    assert_eq!(run.error, None, "{task}");
                }
                let retried = *attempt > 0;
                assert_eq!(run.links, if retried { vec![span_id(task, attempt - 1, Kind::Run)] } else { vec![] });
            }
            // No verdict posted, but the executor's profile says when it ended (the
            // restarted actor's attempt 1): ended there once the verdict waited.
            (Some(start), None) if s.executed.is_some() => {
                let run = run.unwrap_or_else(|| panic!("no run span for {task}/{attempt}"));
                assert_eq!((run.start_ns, Some(run.end_ns)), (start, s.executed), "{task}/{attempt}");
                assert_eq!(str_attr(run, "ray.span.closed_by"), Some("executed"));
                assert_eq!(run.error, None);
            }
            // Not run here, or no end posted: no run span.
            _ => assert!(run.is_none(), "{task}/{attempt}: {run:?}"),
        }
        let sched = by_id.get(&span_id(task, *attempt, Kind::Schedule));
        match (at(s, "PENDING_ARGS_AVAIL"), at(s, "SUBMITTED_TO_WORKER")) {
            (Some(start), Some(end)) => {
                let sched = sched.unwrap_or_else(|| panic!("no schedule span for {task}/{attempt}"));
                assert_eq!((sched.start_ns, sched.end_ns), (start, end));
                assert_eq!(sched.parent, s.parent.as_deref().map(|p| span_id(p, 0, Kind::Run)));
                assert_eq!(str_attr(sched, "ray.span"), Some("schedule"));
            }
            (None, _) => assert!(sched.is_none()),
            _ => {}
        }
    }
    // Counted from the posts by hand: 13 attempts ran and ended (4 square, 2 flaky,
    // tracebacks, Counter.__init__, 3 Counter.incr, Counter.boom, Phoenix.hello), 3 failed
    // (flaky twice, boom): the loop above checked each one.
    assert_eq!((runs, failed), (13, 3), "{said:#?}");
    // The same events again (Ray sends at least once; a restart reads again what was
    // not acknowledged): the same spans, unchanged.
    feed(&mut t, &events, NOW + 2 * GRACE_NS);
    let again = t.take_spans();
    for s in &again {
        assert_eq!(by_id.get(&s.span_id), Some(&s), "sent again changed");
    }
    assert_eq!(t.counts.built, spans.len() as u64, "nothing new built");
    // Past the timeout, what is open closes (the actor's restart never ended here).
    t.sweep(NOW + 3600 * 1_000_000_000 + 1);
    let late = t.take_spans();
    assert!(!late.is_empty() && late.iter().all(|s| str_attr(s, "ray.span.closed_by") == Some("timeout")), "{late:?}");
}

#[test]
fn open_spans_survive_a_restart_through_the_journal() {
    let dir = std::env::temp_dir().join(format!("raylog-tracer-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let events = posted();
    let half = events.len() / 2;
    // One run through, without a restart.
    let mut whole = Tracer::new(settings());
    feed(&mut whole, &events, NOW);
    whole.sweep(NOW + GRACE_NS + 1);
    let want: BTreeMap<[u8; 8], TaskSpan> = whole.take_spans().into_iter().map(|s| (s.span_id, s)).collect();
    // The first half, journaled, then a restart that reads only the second half.
    let mut t = Tracer::open(settings(), &dir);
    feed(&mut t, &events[..half], NOW);
    let mut got: BTreeMap<[u8; 8], TaskSpan> = t.take_spans().into_iter().map(|s| (s.span_id, s)).collect();
    t.write_journal(&dir);
    drop(t);
    let mut t = Tracer::open(settings(), &dir);
    feed(&mut t, &events[half..], NOW);
    t.sweep(NOW + GRACE_NS + 1);
    got.extend(t.take_spans().into_iter().map(|s| (s.span_id, s)));
    assert_eq!(got.keys().collect::<Vec<_>>(), want.keys().collect::<Vec<_>>());
    assert_eq!(got, want);
    // Without the journal, the second half alone misses spans (the test can fail).
    let mut blank = Tracer::new(settings());
    feed(&mut blank, &events[half..], NOW);
    blank.sweep(NOW + GRACE_NS + 1);
    assert!(blank.take_spans().len() < want.len());
    let _ = std::fs::remove_dir_all(&dir);
}

fn life(task: &str, states: &[(&str, i64)], node: &str) -> Piece {
    Piece::Lifecycle {
        key: (task.into(), 0),
        job: Some("01000000".into()),
        life: piece::Lifecycle {
            states: states.iter().map(|(s, t)| (s.to_string(), *t)).collect(),
            node: Some(node.into()),
            ..Default::default()
        },
    }
}

fn define(task: &str, ty: &str) -> Piece {
    Piece::Definition {
        key: (task.into(), 0),
        job: Some("01000000".into()),
        def: piece::Definition { name: Some("f".into()), task_type: Some(ty.into()), ..Default::default() },
    }
}

#[test]
fn a_dead_node_closes_its_runs_and_a_job_end_closes_its_driver() {
    let mut t = Tracer::new(settings());
    let task = "c8ef45ccd0112571ffffffffffffffffffffffff01000000";
    t.apply(define(task, "NORMAL_TASK"), NOW);
    t.apply(life(task, &[("RUNNING", 100)], "aa"), NOW);
    t.apply(Piece::NodeDead { node: "bb".into(), at_ns: 150 }, NOW);
    assert!(t.take_spans().is_empty(), "another node's death closes nothing here");
    t.apply(Piece::NodeDead { node: "aa".into(), at_ns: 200 }, NOW);
    let s = t.take_spans();
    assert_eq!(s.len(), 1);
    assert_eq!((s[0].start_ns, s[0].end_ns, str_attr(&s[0], "ray.span.closed_by")), (100, 200, Some("node_death")));
    let driver = span::driver_task("01000000");
    t.apply(define(&driver, "DRIVER_TASK"), NOW);
    t.apply(life(&driver, &[("RUNNING", 50)], "aa"), NOW);
    assert!(t.take_spans().is_empty(), "the driver runs until its job ends");
    t.apply(Piece::JobEnded { job: "01000000".into(), at_ns: 900 }, NOW);
    let s = t.take_spans();
    assert_eq!((s.len(), s[0].start_ns, s[0].end_ns, s[0].parent), (1, 50, 900, None));
    assert_eq!(s[0].span_id, span_id(&driver, 0, Kind::Run));
}

#[test]
fn bounds_count_what_they_refuse() {
    let mut t = Tracer::new(Settings { max_spans_per_job: 1, max_open_spans: 2, ..settings() });
    let tasks: Vec<String> = (0..3).map(|i| format!("{i:016x}ffffffffffffffffffffffff01000000")).collect();
    for task in &tasks {
        t.apply(life(task, &[("RUNNING", 10)], "aa"), NOW);
    }
    assert_eq!((t.open_attempts(), t.counts.over_open_limit), (2, 1));
    for task in &tasks {
        t.apply(life(task, &[("FINISHED", 20)], "aa"), NOW);
    }
    t.sweep(NOW + GRACE_NS + 1);
    assert_eq!(t.take_spans().len(), 1);
    assert_eq!(t.counts.over_job_limit, 1);
    assert_eq!(hex(&trace_id("01000000")).len(), 32);
}
