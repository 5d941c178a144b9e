//! The conversion on the bodies Ray 2.60's aggregator really posted
//! (`fixtures/ray-2.60-events/posts/NNN.json`, recorded by `fixtures/record_events.sh`
//! next to the same run's logs, so ids can be checked against the log file names).

use std::path::{Path, PathBuf};

use super::*;
use crate::json::elements;

pub(crate) fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/ray-2.60-events")
}

/// Every event of every post, in order, as raw JSON text.
pub(crate) fn posted_events() -> Vec<String> {
    let mut posts: Vec<PathBuf> = std::fs::read_dir(fixture().join("posts"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    posts.sort();
    assert!(posts.len() >= 5, "posts missing: {posts:?}");
    let mut out = vec![];
    for p in posts {
        let body = std::fs::read_to_string(&p).unwrap();
        elements(&body, |e| out.push(e.to_string())).unwrap_or_else(|_| panic!("{}: not a JSON array", p.display()));
    }
    out
}

/// The parts of a parsed event the tests look at.
#[derive(Debug, Default, Clone)]
struct Got {
    event_type: String,
    state: Option<String>,
    message: String,
    time: Option<String>,
    ids: [Option<String>; 5],
    pid: Option<u32>,
    task_name: Option<String>,
    links: Vec<(String, String)>,
    field: Vec<(String, String)>,
}

fn convert(line: &str) -> Got {
    let (mut scratch, mut d) = (String::new(), Draft::default());
    assert!(parse(line, &mut scratch, &mut d), "not parsed: {line}");
    let s = |i: Option<Id>| i.map(|i| i.as_str().to_string());
    let field = d
        .fields
        .iter()
        .map(|f| {
            let v = match f.value {
                FieldValue::Str(s) | FieldValue::Json(s) => s,
            };
            (f.key.to_string(), v.to_string())
        })
        .collect();
    Got {
        event_type: String::new(),
        state: None,
        message: d.message.to_string(),
        time: d.timestamp.map(|t| t.to_rfc3339()),
        ids: [s(d.ids.node_id), s(d.ids.job_id), s(d.ids.worker_id), s(d.ids.actor_id), s(d.ids.task_id)],
        pid: d.pid,
        task_name: d.task_name.map(str::to_string),
        links: d.links.iter().map(|(w, a)| (w.as_str().to_string(), a.as_str().to_string())).collect(),
        field,
    }
    .with_type_and_state()
}

impl Got {
    fn with_type_and_state(mut self) -> Got {
        self.event_type = self.get("event_type").unwrap_or_default();
        self.state = self.get("state");
        self
    }
    fn get(&self, k: &str) -> Option<String> {
        self.field.iter().find(|f| f.0 == k).map(|f| f.1.clone())
    }
    fn node(&self) -> Option<&str> {
        self.ids[0].as_deref()
    }
    fn job(&self) -> Option<&str> {
        self.ids[1].as_deref()
    }
    fn worker(&self) -> Option<&str> {
        self.ids[2].as_deref()
    }
    fn actor(&self) -> Option<&str> {
        self.ids[3].as_deref()
    }
    fn task(&self) -> Option<&str> {
        self.ids[4].as_deref()
    }
}

/// The worker file names of the same run: `worker-<wid>-<job>-<pid>.out`.
fn worker_files() -> Vec<(String, u32)> {
    let session = std::fs::read_dir(fixture())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("session_"))
        .unwrap();
    let mut v = vec![];
    for e in std::fs::read_dir(session.path().join("logs")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(rest) = name.strip_prefix("worker-").and_then(|r| r.strip_suffix(".out")) {
            let parts: Vec<&str> = rest.split('-').collect();
            v.push((parts[0].to_string(), parts[2].parse().unwrap()));
        }
    }
    v
}

#[test]
fn every_posted_event_converts_with_its_type_time_and_node() {
    let events = posted_events();
    assert_eq!(events.len(), 105);
    let got: Vec<Got> = events.iter().map(|e| convert(e)).collect();
    let node = got[0].node().expect("the first event names the node").to_string();
    for (g, raw) in got.iter().zip(&events) {
        let want_type = raw.split("\"eventType\": \"").nth(1).unwrap().split('"').next().unwrap();
        assert_eq!(g.event_type, want_type);
        assert!(g.message.starts_with(want_type), "{}", g.message);
        assert!(g.time.as_deref().is_some_and(|t| t.starts_with("2026-12-01T19:4")), "{:?}", g.time);
        assert_eq!(g.node(), Some(node.as_str()), "one node ran everything: {raw}");
        assert!(g.get("event_data").is_some_and(|d| raw.contains(&d)), "payload kept verbatim");
    }
    // The node id is the hex the raylet log names.
    let raylet = std::fs::read_dir(fixture())
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("session_"))
        .unwrap()
        .path()
        .join("logs/raylet.out");
    assert!(std::fs::read_to_string(raylet).unwrap().contains(&node));
    // An event's time is its own, to the nanosecond.
    assert_eq!(got[0].time.as_deref(), Some(&*rfc3339_of(&events[0])));
}

fn rfc3339_of(raw: &str) -> String {
    let t = raw.split("\"timestamp\": \"").nth(1).unwrap().split('"').next().unwrap();
    rfc3339(t).unwrap().unwrap().to_rfc3339()
}

#[test]
fn the_restarted_actor_links_both_of_its_workers() {
    let got: Vec<Got> = posted_events().iter().map(|e| convert(e)).collect();
    let def = got
        .iter()
        .find(|g| g.event_type == "ACTOR_DEFINITION_EVENT" && g.message.contains("class_name=Phoenix"))
        .unwrap();
    let phoenix = def.actor().unwrap().to_string();
    assert_eq!(phoenix, "f105b6986fcc9f175ff53ed401000000");
    assert_eq!(def.job(), Some("01000000"));
    let mut workers: Vec<String> = got
        .iter()
        .filter(|g| g.event_type == "ACTOR_LIFECYCLE_EVENT" && g.actor() == Some(&phoenix))
        .flat_map(|g| g.links.iter().map(|l| l.0.clone()))
        .collect();
    workers.dedup();
    // Its two incarnations: the worker files of pids 3406 and 3439, in that order.
    let files = worker_files();
    let wid_of = |pid| files.iter().find(|f| f.1 == pid).unwrap().0.clone();
    assert_eq!(workers, vec![wid_of(3406), wid_of(3439)]);
    // ALIVE on its first worker → RESTARTING (that worker died) → ALIVE on the second.
    let states: Vec<(Option<&str>, Option<&str>, Option<u32>)> = got
        .iter()
        .filter(|g| g.event_type == "ACTOR_LIFECYCLE_EVENT" && g.actor() == Some(&phoenix))
        .map(|g| (g.state.as_deref(), g.worker(), g.pid))
        .collect();
    let (first, second) = (wid_of(3406), wid_of(3439));
    assert_eq!(
        states,
        [
            (Some("PENDING_CREATION"), None, None),
            (Some("RESTARTING"), Some(&*first), Some(3406)),
            (Some("ALIVE"), Some(&*second), Some(3439))
        ]
    );
}

#[test]
fn a_dead_actor_and_its_worker_say_why() {
    let got: Vec<Got> = posted_events().iter().map(|e| convert(e)).collect();
    let beta =
        got.iter().find(|g| g.event_type == "ACTOR_DEFINITION_EVENT" && g.message.contains("name=beta")).unwrap();
    let dead = got
        .iter()
        .find(|g| {
            g.event_type == "ACTOR_LIFECYCLE_EVENT" && g.actor() == beta.actor() && g.state.as_deref() == Some("DEAD")
        })
        .unwrap();
    assert_eq!(dead.get("death_reason").as_deref(), Some("WORKER_DIED"));
    assert!(
        dead.message.contains("state=DEAD") && dead.message.contains("death_reason=WORKER_DIED"),
        "{}",
        dead.message
    );
    let worker = dead.links[0].0.clone();
    let files = worker_files();
    assert!(files.iter().any(|f| f.0 == worker), "beta's worker {worker} has a worker file");
    let wdead: Vec<&Got> =
        got.iter().filter(|g| g.event_type == "WORKER_LIFECYCLE_EVENT" && g.state.as_deref() == Some("DEAD")).collect();
    assert_eq!(wdead.len(), 2, "beta's and Phoenix's first workers");
    assert!(wdead.iter().all(|g| g.get("exit_type").as_deref() == Some("SYSTEM_ERROR")));
    assert!(wdead.iter().any(|g| g.worker() == Some(&*worker)));
}

#[test]
fn task_events_carry_task_job_worker_and_the_actor_of_an_actor_task() {
    let got: Vec<Got> = posted_events().iter().map(|e| convert(e)).collect();
    let failed: Vec<&Got> =
        got.iter().filter(|g| g.event_type == "TASK_LIFECYCLE_EVENT" && g.state.as_deref() == Some("FAILED")).collect();
    let types: Vec<String> = failed.iter().map(|g| g.get("error_type").unwrap()).collect();
    // flaky ×2 and Counter.boom raise; beta's call finds it dead; Phoenix's calls
    // while it restarts find it unavailable.
    assert_eq!(types.iter().filter(|t| *t == "TASK_EXECUTION_EXCEPTION").count(), 3, "{types:?}");
    assert!(types.iter().any(|t| t == "ACTOR_DIED"), "{types:?}");
    let flaky: Vec<&&Got> = failed.iter().filter(|g| g.get("event_data").unwrap().contains("ray::flaky()")).collect();
    assert_eq!(flaky.len(), 2);
    assert_eq!(flaky[0].task(), flaky[1].task(), "one task, two attempts");
    assert_eq!(flaky.iter().map(|g| g.get("attempt").unwrap()).collect::<Vec<_>>(), ["0", "1"]);
    let flaky_task = flaky[0].task().unwrap();
    assert_eq!(flaky_task.len(), 48);
    assert!(flaky_task.ends_with("ffffffffffffffffffffffff01000000"), "a normal task of job 01000000");
    assert_eq!(flaky[0].job(), Some("01000000"));
    assert!(flaky[0].worker().is_some());
    // Counter.boom: an actor task; the event names the worker, and the task id the actor.
    let boom = failed.iter().find(|g| g.get("event_data").unwrap().contains("Counter.boom")).unwrap();
    let actor = &boom.task().unwrap()[16..];
    assert_eq!(boom.links, vec![(boom.worker().unwrap().to_string(), actor.to_string())]);
    // A definition names the function.
    let square =
        got.iter().find(|g| g.event_type == "TASK_DEFINITION_EVENT" && g.task_name.as_deref() == Some("square"));
    assert!(square.is_some_and(|g| g.task().is_some() && g.job() == Some("01000000")));
}

#[test]
fn snake_case_keys_and_the_spool_wrapper_read_the_same() {
    let events = posted_events();
    for raw in events.iter().step_by(7) {
        let camel = convert(raw);
        let snake = snake_case(raw);
        let g = convert(&snake);
        assert_eq!(
            (g.ids.clone(), g.message.clone(), g.time.clone(), g.pid),
            (camel.ids.clone(), camel.message.clone(), camel.time.clone(), camel.pid),
            "{snake}"
        );
        let wrapped = format!(r#"{{"post":"p1","i":0,"n":1,"event":{raw}}}"#);
        let w = convert(&wrapped);
        assert_eq!((w.ids, w.message, w.links), (camel.ids, camel.message, camel.links));
    }
}

/// What Ray posts with `RAY_DASHBOARD_AGGREGATOR_AGENT_PRESERVE_PROTO_FIELD_NAME=1`.
fn snake_case(raw: &str) -> String {
    fn conv(v: serde_json::Value) -> serde_json::Value {
        match v {
            serde_json::Value::Object(m) => serde_json::Value::Object(
                m.into_iter()
                    .map(|(k, v)| {
                        let mut s = String::new();
                        for c in k.chars() {
                            if c.is_ascii_uppercase() {
                                s.push('_');
                                s.push(c.to_ascii_lowercase());
                            } else {
                                s.push(c);
                            }
                        }
                        (s, conv(v))
                    })
                    .collect(),
            ),
            serde_json::Value::Array(a) => serde_json::Value::Array(a.into_iter().map(conv).collect()),
            v => v,
        }
    }
    conv(serde_json::from_str(raw).unwrap()).to_string()
}

#[test]
fn not_an_event_is_not_parsed() {
    let (mut s, mut d) = (String::new(), Draft::default());
    for bad in ["", "[]", "{}", r#"{"event":{}}"#, r#"{"message":"x"}"#, "{\"eventType\":", "plain text"] {
        assert!(!parse(bad, &mut s, &mut d), "{bad:?}");
        d = Draft::default();
    }
    assert_eq!(
        rfc3339("2026-12-01T19:43:30.5+01:00").and_then(Result::ok).map(|t| t.to_rfc3339()).as_deref(),
        Some("2026-12-01T18:43:30.500Z")
    );
    assert_eq!(rfc3339("2026-12-01 nonsense"), None);
}

/// An event with `timestamp`, through the same path a spool line takes (format
/// parse, then the flags a record gets): its time, and whether it is flagged.
fn timed(ts: &str) -> (Option<String>, bool) {
    use crate::formats::{LineFormat, ParseCtx};
    let line = format!(
        r#"{{"post":"p","i":0,"n":1,"event":{{"eventType":"NODE_LIFECYCLE_EVENT","timestamp":"{ts}","nodeLifecycleEvent":{{"stateTransitions":[{{"state":"ALIVE"}}]}}}}}}"#
    );
    let (zone, mut scratch, mut d) = (crate::time::Zone::Utc, String::new(), Draft::default());
    let cx = ParseCtx { zone: &zone, kind: crate::classify::FileKind::RayEvent };
    crate::formats::parse(LineFormat::RayEvent, &line, &mut scratch, &cx, &mut d);
    assert_eq!(d.message, "NODE_LIFECYCLE_EVENT state=ALIVE", "still parsed as an event: {line}");
    d.flag_problems(false);
    let flagged = d.fields.get("time_out_of_range") == Some(FieldValue::Json("true"));
    (d.timestamp.map(|t| t.to_rfc3339()), flagged)
}

#[test]
fn event_times_no_timestamp_holds_are_flagged_never_wrapped() {
    let far = [
        // The offset Ray never sends but a broken exporter might: 6e12 minutes.
        "2026-12-01T19:43:30.951541831+99999999999:00",
        "2026-12-01T19:43:30-99999999999:59",
        "2026-12-01T19:43:30+00:99999999999999999999",
        "2026-12-01T19:43:30+9223372036854775807:00",
        "2026-12-01T19:43:30-340282366920938463463374607431768211456:00",
        // Years outside 1677-09-21..2262-04-11, before or after the offset.
        "9999-12-31T23:59:59.999999999Z",
        "0000-01-01T00:00:00Z",
        "1600-01-01T00:00:00+00:00",
        "2262-04-11T23:47:16.854775808Z",
        "2262-04-11T22:47:17-01:00",
        "1677-09-21T00:12:43.145224192+00:01",
    ];
    for ts in far {
        assert_eq!(timed(ts), (None, true), "{ts}");
    }
    // Kept, to the nanosecond, however close to the edges (the offset applied exactly).
    let kept = [
        ("2026-12-01T19:43:30.951541831Z", "2026-12-01T19:43:30.951541831Z"),
        ("2026-12-01T19:43:30.5z", "2026-12-01T19:43:30.500Z"),
        ("2026-12-01T19:43:30.5-05:30", "2026-12-02T01:13:30.500Z"),
        ("2026-12-01T19:43:30+48:00", "2026-11-29T19:43:30.000Z"),
        // More digits than an i128 holds, but zeros: 12 hours.
        (
            "2026-12-01T19:43:30+0000000000000000000000000000000000000000000000000000000000000012:00",
            "2026-12-01T07:43:30.000Z",
        ),
        ("2262-04-11T23:47:16.854775807Z", "2262-04-11T23:47:16.854775807Z"),
        ("2262-04-12T00:47:16.854775807+01:00", "2262-04-11T23:47:16.854775807Z"),
        ("1677-09-20T23:12:43.145224192-01:00", "1677-09-21T00:12:43.145224192Z"),
    ];
    for (ts, want) in kept {
        assert_eq!(timed(ts), (Some(want.to_string()), false), "{ts}");
    }
    // Not a time at all: no time, and nothing to flag (the record's time is inferred).
    for ts in [
        "2026-12-01T19:43:30+",
        "2026-12-01T19:43:30+01",
        "2026-12-01T19:43:30+1:x",
        "2026-12-01T19:43:30+-1:00",
        "yesterday",
    ] {
        assert_eq!(timed(ts), (None, false), "{ts}");
    }
}
