//! `[events]` through the binary: the posts Ray 2.60 really sent
//! (`fixtures/ray-2.60-events/posts`) go to a running `raylog ship` next to the logs
//! of the same run. Accepted posts survive a SIGKILL; the events reach the sink as
//! `ray_event` records with the ids the logs use; and they alone tell the agent
//! which actor a worker hosts.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::fixtures;

const PHOENIX: &str = "f105b6986fcc9f175ff53ed401000000";

fn fixture() -> PathBuf {
    fixtures().join("ray-2.60-events")
}

fn posts() -> Vec<Vec<u8>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixture().join("posts"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// Every eventId Ray posted.
fn posted_ids() -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    for p in posts() {
        for e in serde_json::from_slice::<Vec<Value>>(&p).unwrap() {
            ids.insert(e["eventId"].as_str().unwrap().to_string());
        }
    }
    ids
}

/// POSTs `body` as Ray does; returns the status (0 when nothing answered).
fn post(port: u16, body: &[u8]) -> u16 {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return 0 };
    let head = format!(
        "POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if s.write_all(head.as_bytes()).and_then(|()| s.write_all(body)).is_err() {
        return 0;
    }
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    answer.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0)
}

/// POSTs until a 200 (the agent may still be starting), as Ray's retries would.
fn post_until_taken(port: u16, body: &[u8]) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match post(port, body) {
            200 => return,
            c if Instant::now() > deadline => panic!("the receiver never took the post (last answer {c})"),
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Env {
    root: PathBuf,
    port: u16,
}

impl Env {
    /// The workers' stdout files of the fixture under a Ray temp root: no other file
    /// (core-worker logs, GCS, raylet, the structured logging in `.err`) names the
    /// actor a worker hosts, so only the events can say it (`raylog parse` on these
    /// files alone gives Phoenix's prints no `actor_id`: checked below).
    fn new(tag: &str) -> Env {
        let root = std::env::temp_dir().join(format!("raylog-events-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let session = std::fs::read_dir(fixture())
            .unwrap()
            .flatten()
            .find(|e| e.file_name().to_string_lossy().starts_with("session_"))
            .unwrap();
        let logs = root.join("ray").join(session.file_name()).join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        for e in std::fs::read_dir(session.path().join("logs")).unwrap().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().is_file() && name.starts_with("worker-") && name.ends_with(".out") {
                std::fs::copy(e.path(), logs.join(&name)).unwrap();
            }
        }
        Env { root, port: free_port() }
    }

    fn out(&self) -> PathBuf {
        self.root.join("out.ndjson")
    }

    fn start(&self) -> Child {
        self.start_with("")
    }

    /// The agent with `sinks` (TOML `[[sinks]]` tables) after the file sink.
    fn start_with(&self, sinks: &str) -> Child {
        let cfg = format!(
            r#"
[source]
paths = ["{ray}"]
state_dir = "{state}"
poll_interval = "100ms"
idle_flush = "100ms"
actor_hold = "60s"
[batch]
max_wait = "100ms"
[[sinks]]
type = "file"
path = "{out}"
[api]
address = ""
[events]
address = "127.0.0.1:{port}"
{sinks}
"#,
            ray = self.root.join("ray").display(),
            state = self.root.join("state").display(),
            out = self.out().display(),
            port = self.port,
        );
        let p = self.root.join("raylog.toml");
        std::fs::write(&p, cfg).unwrap();
        Command::new(env!("CARGO_BIN_EXE_raylog"))
            .args(["ship", "--log-level", "warn", "--config"])
            .arg(&p)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap()
    }

    fn records(&self) -> Vec<Value> {
        std::fs::read_to_string(self.out())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// eventId → times it arrived.
    fn events(&self) -> BTreeMap<String, usize> {
        let mut m = BTreeMap::new();
        for r in self.records().iter().filter(|r| r["component"] == "ray_event") {
            *m.entry(r["fields"]["event_id"].as_str().unwrap_or("").to_string()).or_default() += 1;
        }
        m
    }

    /// Starts the agent, posts it every one of Ray's posts, waits until each event
    /// arrived and stops it; returns its spool dir (the spool the receiver wrote).
    fn spool_posts(&self) -> PathBuf {
        let agent = self.start();
        for p in posts() {
            post_until_taken(self.port, &p);
        }
        let want = posted_ids().len();
        self.wait_for("every posted event", |e| e.events().len() == want);
        stop(agent);
        self.root.join("state/ray_events")
    }

    fn wait_for(&self, what: &str, pred: impl Fn(&Env) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !pred(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; {} event ids so far",
                self.events().len()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn stop(mut agent: Child) {
    unsafe { libc::kill(agent.id() as i32, libc::SIGTERM) };
    let _ = agent.wait();
}

#[test]
fn accepted_events_survive_sigkill_and_reach_the_sink_with_the_logs_ids() {
    let env = Env::new("kill");
    let posts = posts();
    let mut agent = env.start();
    let half = posts.len() / 2;
    for p in &posts[..half] {
        post_until_taken(env.port, p);
    }
    // Killed right after the last 200: what was accepted must not be lost.
    agent.kill().unwrap();
    let _ = agent.wait();
    let agent = env.start();
    for p in &posts[half..] {
        post_until_taken(env.port, p);
    }
    let want = posted_ids();
    env.wait_for("every posted event", |e| e.events().len() == want.len());
    // The first run's segment, sealed by the restart, is deleted once delivered: the
    // source's checkpoints name its inode and fingerprint its first bytes.
    let first = env.root.join("state/ray_events/ray_events-000000000001.ndjson");
    env.wait_for("the first run's segment, delivered, to be deleted", |_| !first.exists());
    stop(agent);
    let got = env.events();
    assert_eq!(got.keys().cloned().collect::<BTreeSet<_>>(), want);

    let records = env.records();
    let events: Vec<&Value> = records.iter().filter(|r| r["component"] == "ray_event").collect();
    // The restarted actor: its lifecycle with both workers, as the logs name them.
    let phoenix: Vec<&&Value> = events.iter().filter(|r| r["actor_id"] == PHOENIX).collect();
    let workers: BTreeSet<&str> = phoenix
        .iter()
        .filter(|r| r["fields"]["event_type"] == "ACTOR_LIFECYCLE_EVENT")
        .filter_map(|r| r["worker_id"].as_str())
        .collect();
    let files: BTreeSet<String> = std::fs::read_dir(
        std::fs::read_dir(env.root.join("ray")).unwrap().flatten().next().unwrap().path().join("logs"),
    )
    .unwrap()
    .flatten()
    .map(|e| e.file_name().to_string_lossy().into_owned())
    .collect();
    assert_eq!(workers.len(), 2, "{workers:?}");
    for w in &workers {
        assert!(files.iter().any(|f| f.starts_with(&format!("worker-{w}-01000000-"))), "{w} is a worker of the logs");
    }
    // The events alone said which actor those workers host: their prints carry it,
    // which the files alone do not.
    let alone = Command::new(env!("CARGO_BIN_EXE_raylog")).arg("parse").arg(env.root.join("ray")).output().unwrap();
    let alone: Vec<Value> =
        String::from_utf8(alone.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    for w in &workers {
        let prints: Vec<&Value> = alone.iter().filter(|r| r["worker_id"] == *w).collect();
        assert!(!prints.is_empty() && prints.iter().all(|r| r.get("actor_id").is_none()), "{w}: {prints:?}");
    }
    for w in &workers {
        let prints: Vec<&Value> =
            records.iter().filter(|r| r["component"] == "worker" && r["worker_id"] == *w).collect();
        assert!(!prints.is_empty(), "{w} printed");
        assert!(
            prints.iter().all(|r| r["actor_id"] == PHOENIX),
            "{w}: {:?}",
            prints.iter().map(|r| &r["actor_id"]).collect::<Vec<_>>()
        );
    }
    // Every record of an event has its own time and its node.
    assert!(events.iter().all(|r| r["timestamp"].as_str().is_some_and(|t| t.starts_with("2026-12-01T19:4"))
        && r["node_id"].as_str().is_some_and(|n| n.len() == 56)));
}

#[test]
fn trace_and_health_read_a_spool_next_to_the_logs() {
    // The agent's own spool, written from Ray's real posts.
    let env = Env::new("cli");
    let spool = env.spool_posts();
    let logs = fixture();
    let run = |args: &[&str], paths: &[&Path]| -> String {
        let out = Command::new(env!("CARGO_BIN_EXE_raylog")).args(args).args(paths).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let trace = run(&["trace", "--actor-id", PHOENIX, "--format", "json"], &[&logs, &spool]);
    let doc: Value = serde_json::from_str(&trace).unwrap();
    let states: Vec<&str> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["component"] == "ray_event" && r["fields"]["event_type"] == "ACTOR_LIFECYCLE_EVENT")
        .filter_map(|r| r["fields"]["state"].as_str())
        .collect();
    assert_eq!(states, ["PENDING_CREATION", "RESTARTING", "ALIVE"], "the actor's lifecycle in its trace");

    // health: the events alone tell the failures; beside the logs they add only what
    // the logs do not say (the Python exceptions), the rest is merged.
    let health =
        |paths: &[&Path]| -> Value { serde_json::from_str(&run(&["health", "--format", "json"], paths)).unwrap() };
    let counts = |r: &Value| {
        let n = |v: &Value| v.as_u64().unwrap();
        let by: BTreeMap<String, u64> = r["task_failures"]["by_exception"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| (g["exception"].as_str().unwrap().to_string(), n(&g["count"])))
            .collect();
        (n(&r["worker_deaths"]["total"]), n(&r["actor_failures"]["failures"]), n(&r["actor_failures"]["restarts"]), by)
    };
    let tasks = |v: &[(&str, u64)]| v.iter().map(|(k, n)| (k.to_string(), *n)).collect::<BTreeMap<_, _>>();
    let logs_only = counts(&health(&[&logs]));
    assert_eq!(logs_only, (2, 2, 1, tasks(&[("ACTOR_UNAVAILABLE", 2)])));
    let both = counts(&health(&[&logs, &spool]));
    assert_eq!(both, (2, 2, 1, tasks(&[("ACTOR_UNAVAILABLE", 2), ("ValueError", 2), ("RuntimeError", 1)])));
    let alone = health(&[&spool]);
    assert_eq!(
        counts(&alone),
        (2, 2, 1, tasks(&[("ValueError", 2), ("RuntimeError", 1), ("ACTOR_DIED", 1), ("ACTOR_UNAVAILABLE", 1)]))
    );
    let phoenix =
        alone["actor_failures"]["actors"].as_array().unwrap().iter().find(|a| a["actor_id"] == PHOENIX).unwrap();
    assert_eq!((phoenix["class"].as_str(), phoenix["restarts"].as_u64()), (Some("Phoenix"), Some(1)));
    assert_eq!(phoenix["events"][0]["pid"].as_u64(), Some(3406), "the first incarnation's pid, from the events");
    let _ = (run, logs);
}

/// Standard base64 (as proto3 JSON writes bytes), decoded here, apart from the
/// crate's decoder: the expected ids come from Ray's posts.
fn hex_of_base64(s: &str) -> String {
    const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut bits, mut n, mut out) = (0u32, 0, String::new());
    for c in s.bytes().filter(|&c| c != b'=') {
        bits = bits << 6 | ABC.iter().position(|&a| a == c).unwrap() as u32;
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push_str(&format!("{:02x}", (bits >> n) & 0xff));
        }
    }
    out
}

/// Each task attempt's byte ranges as Ray posted them: (file name, task hex,
/// attempt) → [start, end), pieces of one attempt merged.
fn posted_ranges() -> BTreeMap<(String, String, u64), (u64, u64)> {
    let mut out: BTreeMap<(String, String, u64), (u64, Option<u64>)> = BTreeMap::new();
    let num = |v: &Value| v.as_str().and_then(|s| s.parse::<u64>().ok()).or_else(|| v.as_u64());
    for p in posts() {
        for e in serde_json::from_slice::<Vec<Value>>(&p).unwrap() {
            let life = &e["taskLifecycleEvent"];
            let Some(info) = life.get("taskLogInfo") else { continue };
            let task = hex_of_base64(life["taskId"].as_str().unwrap());
            let attempt = life["taskAttempt"].as_u64().unwrap_or(0);
            for s in ["stdout", "stderr"] {
                let Some(file) = info[format!("{s}File")].as_str() else { continue };
                let name = file.rsplit('/').next().unwrap().to_string();
                let start = num(&info[format!("{s}Start")]).unwrap();
                let end = num(&info[format!("{s}End")]);
                let r = out.entry((name, task.clone(), attempt)).or_insert((start, end));
                *r = (r.0.min(start), r.1.max(end));
            }
        }
    }
    // Every task of the run ended, so every range has its end.
    out.into_iter().map(|(k, (s, e))| (k, (s, e.expect("an ended task's range has an end")))).collect()
}

/// `raylog parse` given the logs and the agent's spool (written from Ray's real
/// posts by the receiver): every print inside an attempt's posted range carries
/// that task and attempt, no other print carries an attempt; `trace --printed`
/// shows each attempt's prints apart.
#[test]
fn task_prints_are_tagged_offline_from_the_spool_beside_the_logs() {
    let env = Env::new("tasks");
    let spool = env.spool_posts();
    let ranges = posted_ranges();
    assert!(ranges.len() >= 8, "the run's tasks posted ranges: {ranges:?}");
    let out = Command::new(env!("CARGO_BIN_EXE_raylog")).arg("parse").arg(fixture()).arg(&spool).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let records: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let mut tagged = 0;
    for r in records.iter().filter(|r| r["component"] == "worker") {
        let (file, offset) = (r["file"].as_str().unwrap(), r["offset"].as_u64().unwrap());
        let within: Vec<_> =
            ranges.iter().filter(|((f, _, _), (s, e))| f == file && (*s..*e).contains(&offset)).collect();
        match within.as_slice() {
            [((_, task, attempt), _)] => {
                assert_eq!(
                    (r["task_id"].as_str(), r["task_attempt"].as_u64()),
                    (Some(task.as_str()), Some(*attempt)),
                    "{r}"
                );
                tagged += 1;
            }
            [] => assert!(r.get("task_attempt").is_none(), "{r}"),
            more => panic!("ranges overlap at {file}:{offset}: {more:?}"),
        }
    }
    // square ×4 on two workers (stdout and stderr), flaky ×2, tracebacks.
    assert!(tagged >= 16, "{tagged} prints tagged");
    let trace = Command::new(env!("CARGO_BIN_EXE_raylog"))
        .args(["trace", "--task-id", "e0dc174c", "--printed", "--format", "json"])
        .arg(fixture())
        .arg(&spool)
        .output()
        .unwrap();
    assert!(trace.status.success(), "{}", String::from_utf8_lossy(&trace.stderr));
    let doc: Value = serde_json::from_slice(&trace.stdout).unwrap();
    let printed: Vec<(u64, &str)> = doc["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["task_attempt"].as_u64().unwrap(), r["message"].as_str().unwrap()))
        .collect();
    // What workload.py's flaky task printed, once per attempt.
    assert_eq!(printed, [(0, "flaky about to fail 7"), (1, "flaky about to fail 7")]);
}

/// The task ranges outlive the events that gave them: the agent takes Ray's posts,
/// delivers and checkpoints them, and stops; the workers' files appear only after
/// it starts again, when the acknowledged events are no longer read. Their prints
/// still carry the task and attempt Ray's posts gave (from `state_dir/tasks.journal`).
#[test]
fn task_ranges_survive_a_restart_after_their_events_were_acknowledged() {
    let env = Env::new("restart");
    let logs = std::fs::read_dir(env.root.join("ray")).unwrap().flatten().next().unwrap().path().join("logs");
    let aside = env.root.join("aside");
    std::fs::rename(&logs, &aside).unwrap();
    std::fs::create_dir_all(&logs).unwrap();
    env.spool_posts();
    assert!(env.root.join("state/tasks.journal").is_file(), "the ranges were journaled");
    for e in std::fs::read_dir(&aside).unwrap().flatten() {
        std::fs::copy(e.path(), logs.join(e.file_name())).unwrap();
    }
    let agent = env.start();
    let ranges = posted_ranges();
    let in_range = |r: &Value| {
        let (file, offset) = (r["file"].as_str().unwrap_or(""), r["offset"].as_u64().unwrap_or(0));
        ranges
            .iter()
            .find(|((f, _, _), (s, e))| f == file && (*s..*e).contains(&offset))
            .map(|((_, t, a), _)| (t.clone(), *a))
    };
    let prints = |e: &Env| -> Vec<Value> {
        e.records().into_iter().filter(|r| r["component"] == "worker" && in_range(r).is_some()).collect()
    };
    env.wait_for("the prints inside task ranges", |e| prints(e).len() >= 9);
    stop(agent);
    assert!(env.events().values().all(|&n| n == 1), "the events were not read again after the restart");
    for r in prints(&env) {
        let (task, attempt) = in_range(&r).unwrap();
        assert_eq!((r["task_id"].as_str(), r["task_attempt"].as_u64()), (Some(task.as_str()), Some(attempt)), "{r}");
    }
}

/// Ray's real posts through the agent with `traces = true` into the independent
/// OTLP decoder (`tests/otlp/receiver.py`): every attempt that ran and ended, as the
/// posts say (decoded here), is a `run` span with Ray's times, ERROR on `FAILED`, the
/// parent its posted `parentTaskId` names and a retry's link; and every print that
/// carries a task attempt joins its attempt's `run` span by `traceId` and `spanId`.
#[test]
#[ignore = "needs the OTLP decoder venv (PyPI once): bash tests/otlp/setup-venv.sh"]
fn task_spans_reach_an_otlp_receiver_and_the_prints_join_them() {
    let python = crate::otlp::otlp_python("task-spans");
    let env = Env::new("spans");
    let rx = crate::otlp::Receiver::start(&python, env.root.join("otlp.jsonl"));
    let sink = format!(
        "[[sinks]]\ntype = \"otlp\"\nname = \"otlp\"\nendpoint = \"http://127.0.0.1:{}\"\ntraces = true\n",
        rx.port
    );
    let agent = env.start_with(&sink);
    for p in posts() {
        post_until_taken(env.port, &p);
    }
    // What the posts say of each attempt: RUNNING, its end, the error, the parent.
    // (task, attempt) → (RUNNING's time, FINISHED or FAILED, error type, parent task).
    type Said = (Option<String>, Option<String>, Option<String>, Option<String>);
    let mut said: BTreeMap<(String, u64), Said> = BTreeMap::new();
    for p in posts() {
        for e in serde_json::from_slice::<Vec<Value>>(&p).unwrap() {
            let (def, life) = (&e["taskDefinitionEvent"], &e["taskLifecycleEvent"]);
            let def = if def.is_object() { def } else { &e["actorTaskDefinitionEvent"] };
            for (p, is_def) in [(def, true), (life, false)] {
                let Some(task) = p["taskId"].as_str() else { continue };
                let s = said.entry((hex_of_base64(task), p["taskAttempt"].as_u64().unwrap_or(0))).or_default();
                if is_def {
                    s.3 = p["parentTaskId"].as_str().map(hex_of_base64);
                }
                for t in p["stateTransitions"].as_array().into_iter().flatten() {
                    match t["state"].as_str() {
                        Some("RUNNING") => s.0 = t["timestamp"].as_str().map(String::from),
                        Some("FINISHED" | "FAILED") => s.1 = t["state"].as_str().map(String::from),
                        _ => {}
                    }
                }
                if let Some(ty) = p["rayErrorInfo"]["errorType"].as_str() {
                    s.2 = Some(ty.to_string());
                }
            }
        }
    }
    let ran: Vec<_> = said.iter().filter(|(_, s)| s.0.is_some() && s.1.is_some()).collect();
    let spans = |rx: &crate::otlp::Receiver| -> Vec<Value> {
        rx.lines().into_iter().filter_map(|l| l.get("span").cloned()).collect()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let runs = loop {
        let runs: Vec<Value> =
            spans(&rx).into_iter().filter(|s| attr(s, "ray.span").as_deref() == Some("run")).collect();
        if runs.len() >= ran.len() || Instant::now() > deadline {
            break runs;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    stop(agent);
    assert!(rx.lines().iter().all(|l| l.get("error").is_none()), "the decoder refused a request");
    let run_of = |task: &str, attempt: u64| {
        runs.iter().find(|s| {
            attr(s, "ray.task_id").as_deref() == Some(task)
                && attr(s, "ray.task_attempt").as_deref() == Some(&attempt.to_string())
        })
    };
    for ((task, attempt), (running, end, error, parent)) in &ran {
        let s = run_of(task, *attempt).unwrap_or_else(|| panic!("no run span for {task}/{attempt}: {runs:#?}"));
        let start: i128 = s["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
        let posted = running.as_deref().unwrap().parse::<jiff::Timestamp>().unwrap().as_nanosecond();
        assert_eq!(start, posted, "{task}/{attempt}");
        let failed = end.as_deref() == Some("FAILED");
        assert_eq!(s["status"]["code"].as_i64() == Some(2), failed, "{task}/{attempt}: {s}");
        if failed {
            assert!(s["status"]["message"].as_str().unwrap().starts_with(error.as_deref().unwrap()), "{s}");
        }
        // The parent: the run span of attempt 0 of the posted parent, where it was sent.
        if let Some(p) = parent.as_deref().and_then(|p| run_of(p, 0)) {
            assert_eq!(s["parentSpanId"], p["spanId"], "{task}/{attempt}");
        }
        assert!(!s["parentSpanId"].as_str().unwrap().is_empty(), "{task} has its parent, the driver task");
        if *attempt > 0 {
            let prev = run_of(task, attempt - 1).unwrap();
            assert_eq!(s["links"][0]["spanId"], prev["spanId"], "the retry links its previous attempt");
        }
    }
    // Each print with an attempt joins that attempt's run span.
    let mut joined = 0;
    for l in rx.lines().iter().filter_map(|l| l.get("record")) {
        let attrs = l["attributes"].as_array().unwrap();
        let get = |k: &str| attrs.iter().find(|a| a["key"] == k).map(|a| a["value"].clone());
        let Some(a) = get("ray.task_attempt") else {
            assert!(l.get("spanId").is_none(), "{l}");
            continue;
        };
        let task = get("ray.task_id").unwrap()["stringValue"].as_str().unwrap().to_string();
        let attempt: u64 = a["intValue"].as_str().unwrap().parse().unwrap();
        let s = run_of(&task, attempt).unwrap_or_else(|| panic!("a print of {task}/{attempt} has no run span"));
        assert_eq!(hex_of_base64(l["traceId"].as_str().unwrap()), s["traceId"].as_str().unwrap());
        assert_eq!(hex_of_base64(l["spanId"].as_str().unwrap()), s["spanId"].as_str().unwrap());
        joined += 1;
    }
    assert!(joined >= 5, "{joined} prints joined their spans");
    eprintln!("task spans: {} run spans as Ray posted, {joined} prints joined", ran.len());
}

/// A span attribute's value as text.
fn attr(s: &Value, k: &str) -> Option<String> {
    let a = s["attributes"].as_array()?.iter().find(|a| a["key"] == k)?;
    let v = &a["value"];
    v["stringValue"].as_str().or(v["intValue"].as_str()).map(String::from)
}
