//! The agent's Ray health counters (`raylog_ray_*` on `/metrics`, issue #14 part 3)
//! on `fixtures/ray-2.60-text` and the `*-health` fixtures: exact values read off
//! the fixture (fixtures/README.md: Phoenix is killed and restarted once; the health
//! workload's OOM kill, failed health checks and lost GCS), checked against `raylog
//! health --format json` on the same files, and `raylog_ray_records_total` summing to
//! the records the agent delivered and `raylog parse` finds (less `debug_state.txt`,
//! which the agent's default `source.exclude` skips).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ship::{stop, Agent};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn get(addr: &str, path: &str) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    body.split_once("\r\n\r\n").map(|(_, b)| b.to_string())
}

/// The latency metrics (Ray's Event stats: blocks and node liveness, issue #25).
const LATENCY: [&str; 3] = ["raylog_ray_handler_", "raylog_ray_event_loop_lag_seconds", "raylog_ray_nodes_alive"];

/// Every sample of `/metrics`: `name{labels}` → value. Values are floats in the
/// exposition format (`1.5`, `2e3`, `+Inf`); a line whose value is none fails.
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap_or_else(|| panic!("/metrics line without a value: {l:?}"));
            (k.to_string(), v.parse().unwrap_or_else(|e| panic!("/metrics line {l:?}: {e}")))
        })
        .collect()
}

/// Sample `key`'s value `v` as the integer a counter holds, exactly: a fraction or
/// an infinity there is a wrong count, not one to round.
fn count(key: &str, v: f64) -> u64 {
    assert!(v.is_finite() && v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(53), "{key} = {v}: not a count");
    v as u64
}

/// The sum of the samples of counter `name` whose labels contain all of `with`.
fn sum(m: &BTreeMap<String, f64>, name: &str, with: &[&str]) -> u64 {
    m.iter()
        .filter(|(k, _)| k.strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with('{')))
        .filter(|(k, _)| with.iter().all(|w| k.contains(w)))
        .map(|(k, v)| count(k, *v))
        .sum()
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

/// What the agent's `/metrics` says once it has shipped every record of fixture
/// `name`, with `raylog health --format json` and the record count of `raylog
/// parse` on the same files.
struct Shipped {
    m: BTreeMap<String, f64>,
    text: String,
    h: Value,
    want_records: u64,
}

/// The `node` label of every `raylog_ray_*` sample (`node.name` has quotes to escape).
const NODE: &str = "node=\"node-\\\"a\\\"\"";

fn ship(name: &str) -> Shipped {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures").join(name);
    let root = std::env::temp_dir().join(format!("raylog-raymetrics-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let out = root.join("out.ndjson");
    let api = format!("127.0.0.1:{}", free_port());
    let cfg = format!(
        r#"
[source]
paths = ["{ray}"]
state_dir = "{state}"
poll_interval = "100ms"
idle_flush = "100ms"
partial_line_timeout = "200ms"
[batch]
max_wait = "100ms"
[[sinks]]
type = "file"
path = "{out}"
[api]
address = "{api}"
[node]
name = "node-\"a\""
"#,
        ray = dir.display(),
        state = root.join("state").display(),
        out = out.display(),
    );
    std::fs::write(root.join("raylog.toml"), cfg).unwrap();

    let parsed = Command::new(env!("CARGO_BIN_EXE_raylog")).arg("parse").arg(&dir).output().unwrap();
    assert!(parsed.status.success());
    // The agent skips `debug_state*.txt` by default (source.exclude); `parse` does not.
    // No writer counted the records of a recorded Ray session (fixtures/README.md):
    // `raylog parse` is the expectation here.
    let want_records = String::from_utf8(parsed.stdout)
        .unwrap()
        .lines()
        .filter(|l| {
            serde_json::from_str::<Value>(l).unwrap()["file"].as_str().is_some_and(|f| !f.contains("debug_state"))
        })
        .count() as u64;
    let health =
        Command::new(env!("CARGO_BIN_EXE_raylog")).args(["health", "--format", "json"]).arg(&dir).output().unwrap();
    let h: Value = serde_json::from_slice(&health.stdout).expect("health JSON");

    let agent = Agent(
        Command::new(env!("CARGO_BIN_EXE_raylog"))
            .args(["ship", "--log-level", "warn", "--config"])
            .arg(root.join("raylog.toml"))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    // Every record delivered (so every record read, held ones released), then scrape.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut text = String::new();
    while Instant::now() < deadline {
        if lines(&out) as u64 >= want_records {
            if let Some(t) = get(&api, "/metrics") {
                text = t;
                let m = samples(&text);
                if sum(&m, "raylog_ray_records_total", &[]) >= want_records {
                    break;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(agent);
    let _ = std::fs::remove_dir_all(&root);
    let m = samples(&text);
    assert!(!m.is_empty(), "no /metrics scraped");

    Shipped { m, text, h, want_records }
}

/// `name{node="…"}`, or `name{node="…",labels}`: a per-node counter's sample.
fn on_node(name: &str, labels: &str) -> String {
    if labels.is_empty() {
        format!("{name}{{{NODE}}}")
    } else {
        format!("{name}{{{NODE},{labels}}}")
    }
}

impl Shipped {
    fn exact(&self, name: &str, labels: &str) -> u64 {
        let key = if labels.is_empty() { name.to_string() } else { format!("{name}{{{labels}}}") };
        count(&key, *self.m.get(&key).unwrap_or_else(|| panic!("no {key} in\n{}", self.text)))
    }

    /// Every `raylog_ray_*` health counter's samples (all but
    /// `raylog_ray_records_total`) are exactly `want`: no sample missing, none more.
    fn counters_are(&self, fixture: &str, want: &[(String, u64)]) {
        let got: BTreeMap<&str, u64> = self
            .m
            .iter()
            .filter(|(k, _)| k.starts_with("raylog_ray_") && !k.starts_with("raylog_ray_records_total"))
            // The latency figures (issue #25) are checked in `agrees_with_health`.
            .filter(|(k, _)| !LATENCY.iter().any(|l| k.starts_with(l)))
            .map(|(k, v)| (k.as_str(), count(k, *v)))
            .collect();
        let want: BTreeMap<&str, u64> = want.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(got.len(), want.len(), "{fixture}: samples {got:#?}, expected {want:#?}");
        assert_eq!(got, want, "{fixture}");
    }

    /// Every counter equals what `raylog health` reports, and every record read
    /// was counted once.
    fn agrees_with_health(&self) {
        let (m, h, text) = (&self.m, &self.h, &self.text);
        let n = |v: &Value| v.as_u64().unwrap();
        assert_eq!(sum(m, "raylog_ray_worker_deaths_total", &[]), n(&h["worker_deaths"]["total"]));
        for g in h["worker_deaths"]["by_exit_type"].as_array().unwrap() {
            let l = format!("{NODE},exit_type=\"{}\"", g["exit_type"].as_str().unwrap());
            assert_eq!(self.exact("raylog_ray_worker_deaths_total", &l), n(&g["count"]));
        }
        assert_eq!(self.exact("raylog_ray_actor_failures_total", NODE), n(&h["actor_failures"]["failures"]));
        assert_eq!(self.exact("raylog_ray_actor_restarts_total", NODE), n(&h["actor_failures"]["restarts"]));
        assert_eq!(self.exact("raylog_ray_oom_kills_total", NODE), n(&h["oom_kills"]["total"]));
        assert_eq!(self.exact("raylog_ray_node_deaths_total", ""), n(&h["node_deaths"]["total"]));
        assert_eq!(self.exact("raylog_ray_gcs_health_failures_total", ""), n(&h["gcs_health"]["total"]));
        assert_eq!(sum(m, "raylog_ray_task_failures_total", &[]), n(&h["task_failures"]["total"]));
        for g in h["task_failures"]["by_exception"].as_array().unwrap() {
            let l = format!("{NODE},exception=\"{}\"", g["exception"].as_str().unwrap());
            assert_eq!(self.exact("raylog_ray_task_failures_total", &l), n(&g["count"]));
        }
        // Each GCS handler `raylog health` lists: the agent counted the same calls.
        let mut checked = 0;
        for p in h["latency"]["processes"].as_array().unwrap() {
            let (comp, io) = (p["component"].as_str().unwrap(), p["io_context"].as_str().unwrap());
            for row in
                p["slowest_by_execution"].as_array().unwrap().iter().chain(p["slowest_by_queueing"].as_array().unwrap())
            {
                let l = format!(
                    "{NODE},component=\"{comp}\",io_context=\"{io}\",handler=\"{}\"",
                    row["handler"].as_str().unwrap()
                );
                assert_eq!(self.exact("raylog_ray_handler_calls_total", &l), n(&row["calls"]), "{l}");
                checked += 1;
            }
        }
        assert!(checked > 0 || h["latency"]["processes"].as_array().unwrap().is_empty());
        // ERROR and FATAL records: what `raylog health` counts as error records.
        let errors = sum(m, "raylog_ray_records_total", &["level=\"ERROR\""])
            + sum(m, "raylog_ray_records_total", &["level=\"FATAL\""]);
        assert_eq!(errors, n(&h["error_records"]));

        // Each record counted once: as many as were delivered, and as `raylog parse` finds.
        let records = sum(m, "raylog_ray_records_total", &[]);
        assert_eq!(records, self.want_records, "{text}");
        assert_eq!(records, self.exact("raylog_sink_records_sent_total", "sink=\"file\""), "{text}");
        assert!(m.keys().filter(|k| k.starts_with("raylog_ray_records_total{")).all(|k| k.contains(NODE)));
        assert!(m.keys().any(|k| k.starts_with("raylog_ray_records_total{") && k.contains("component=\"raylet\"")));
    }
}

#[test]
fn ship_counts_ray_health_as_raylog_health_does() {
    let s = ship("ray-2.60-text");
    eprintln!("ray-2.60-text: records={}", sum(&s.m, "raylog_ray_records_total", &[]));
    // Read off the fixture's lines, not computed by `raylog::health::detect`:
    // gcs_server.out reports two SYSTEM_ERROR exits (Counter beta, 354b6a02…, and
    // Phoenix, 78858d8b…), and events/event_RAYLET.log has one RAY_WORKER_FAILURE
    // for each of the two; GCS fails both actors with need_reschedule = 1, Phoenix
    // with remaining_restarts = 1 (its one restart); the driver's core log has two
    // `Task attempt … failed with error ACTOR_UNAVAILABLE` (the calls that killed
    // them); `ray stop` removes the node (`death reason = EXPECTED_TERMINATION`). No
    // OOM kill, no GCS health line.
    s.counters_are(
        "ray-2.60-text",
        &[
            (on_node("raylog_ray_worker_deaths_total", "exit_type=\"SYSTEM_ERROR\""), 2),
            (on_node("raylog_ray_actor_failures_total", ""), 2),
            (on_node("raylog_ray_actor_restarts_total", ""), 1),
            (on_node("raylog_ray_task_failures_total", "exception=\"ACTOR_UNAVAILABLE\""), 2),
            ("raylog_ray_node_deaths_total".into(), 1),
            (on_node("raylog_ray_oom_kills_total", ""), 0),
            ("raylog_ray_gcs_health_failures_total".into(), 0),
        ],
    );
    s.agrees_with_health();
}

/// The `workload_health.py` fixtures, read off their lines (not computed by
/// `raylog::health::detect`): gcs_server.out reports one worker exit,
/// `exit_type = NODE_OUT_OF_MEMORY`, with no RAY_WORKER_FAILURE event; raylet.out
/// has the memory monitor's one kill (2.60 `Killing 1 worker(s)`, 2.40 `Killing
/// worker with task`); no actor fails with need_reschedule = 1 (the job supervisor
/// exits as intended). GCS health: 2.60 has five `Health check failed for node`,
/// one `Node is dead because the health check failed` and four lines saying GCS is
/// gone (raylet.out and the core log of driver 02000000, two each), 10; 2.40 (one
/// node, no health check) seven `Failed to connect to GCS` (raylet.out, driver
/// 02000000's core log and five spill/restore workers' core logs). Node deaths: 2.60 one (`death reason = UNEXPECTED_TERMINATION`), 2.40
/// none. The drivers' core logs have five `Task attempt … failed with error`:
/// OUT_OF_MEMORY (the `hog` task), ACTOR_UNAVAILABLE and ACTOR_DIED (calls to the
/// job supervisor actors), RUNTIME_ENV_SETUP_FAILED twice (the conda job).
#[test]
fn ship_counts_the_health_fixture_events() {
    for (name, gcs, nodes) in [("ray-2.60-health", 10, 1), ("ray-2.40-health", 7, 0)] {
        let s = ship(name);
        let task = |e: &str| on_node("raylog_ray_task_failures_total", &format!("exception=\"{e}\""));
        s.counters_are(
            name,
            &[
                (on_node("raylog_ray_worker_deaths_total", "exit_type=\"NODE_OUT_OF_MEMORY\""), 1),
                (on_node("raylog_ray_oom_kills_total", ""), 1),
                ("raylog_ray_gcs_health_failures_total".into(), gcs),
                ("raylog_ray_node_deaths_total".into(), nodes),
                (task("OUT_OF_MEMORY"), 1),
                (task("ACTOR_UNAVAILABLE"), 1),
                (task("ACTOR_DIED"), 1),
                (task("RUNTIME_ENV_SETUP_FAILED"), 2),
                (on_node("raylog_ray_actor_failures_total", ""), 0),
                (on_node("raylog_ray_actor_restarts_total", ""), 0),
            ],
        );
        s.agrees_with_health();
    }
}

/// The live test's check (`live.rs`): after the workload, the live agent's Ray
/// counters against what the workload did and against `raylog health --format json`
/// on the same Ray dir. `delivered`: the records the live Elasticsearch sink stored.
/// `paths`: the live Ray dir and the agent's event spool (the agent read both).
pub(crate) fn check_live(metrics: &str, paths: &[&Path], delivered: usize, failures: &mut Vec<String>) {
    let m = samples(metrics);
    let health = Command::new(env!("CARGO_BIN_EXE_raylog")).args(["health", "--format", "json"]).args(paths).output();
    let Some(h) = health.ok().and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok()) else {
        failures.push("ray metrics: raylog health --format json failed on the live Ray dir".into());
        return;
    };
    let n = |v: &Value| v.as_u64().unwrap_or(u64::MAX);
    let got = |name: &str| sum(&m, name, &[]);
    let mut eq = |what: &str, got: u64, want: u64| {
        if got != want {
            failures.push(format!("ray metrics: {what} is {got} on /metrics, {want} expected"));
        }
    };
    // Three drivers each kill their Phoenix once (os._exit) and GCS restarts it.
    eq("raylog_ray_actor_restarts_total", got("raylog_ray_actor_restarts_total"), 3);
    eq(
        "raylog_ray_actor_restarts_total vs raylog health",
        got("raylog_ray_actor_restarts_total"),
        n(&h["actor_failures"]["restarts"]),
    );
    eq(
        "raylog_ray_actor_failures_total vs raylog health",
        got("raylog_ray_actor_failures_total"),
        n(&h["actor_failures"]["failures"]),
    );
    eq(
        "raylog_ray_worker_deaths_total vs raylog health",
        got("raylog_ray_worker_deaths_total"),
        n(&h["worker_deaths"]["total"]),
    );
    eq("raylog_ray_oom_kills_total vs raylog health", got("raylog_ray_oom_kills_total"), n(&h["oom_kills"]["total"]));
    eq(
        "raylog_ray_node_deaths_total vs raylog health",
        got("raylog_ray_node_deaths_total"),
        n(&h["node_deaths"]["total"]),
    );
    eq(
        "raylog_ray_gcs_health_failures_total vs raylog health",
        got("raylog_ray_gcs_health_failures_total"),
        n(&h["gcs_health"]["total"]),
    );
    eq(
        "raylog_ray_task_failures_total vs raylog health",
        got("raylog_ray_task_failures_total"),
        n(&h["task_failures"]["total"]),
    );
    for g in h["task_failures"]["by_exception"].as_array().into_iter().flatten() {
        let e = g["exception"].as_str().unwrap_or("");
        let c = sum(&m, "raylog_ray_task_failures_total", &[&format!("exception=\"{e}\"")]);
        eq(&format!("raylog_ray_task_failures_total{{exception=\"{e}\"}}"), c, n(&g["count"]));
    }
    let least = got("raylog_ray_actor_failures_total").min(got("raylog_ray_worker_deaths_total"));
    eq("actor failures and worker deaths (at least 3)", least.min(3), 3);
    // Every record read counted once: as many as the agent sent to a sink (records
    // read twice are the delivery checks' business: they show as duplicates there).
    let sent = sum(&m, "raylog_sink_records_sent_total", &["sink=\"elasticsearch\""]);
    eq("sum of raylog_ray_records_total vs records sent", got("raylog_ray_records_total"), sent);
    if sent != delivered as u64 {
        println!("live: ray metrics: {sent} records sent, the server stored {delivered}");
    }
    println!(
        "live: ray metrics: worker_deaths={} actor_failures={} actor_restarts={} task_failures={} node_deaths={} records={}",
        got("raylog_ray_worker_deaths_total"),
        got("raylog_ray_actor_failures_total"),
        got("raylog_ray_actor_restarts_total"),
        got("raylog_ray_task_failures_total"),
        got("raylog_ray_node_deaths_total"),
        got("raylog_ray_records_total"),
    );
    check_gcs_handlers(&m, &h, paths[0].parent().unwrap_or(paths[0]), failures);
}

/// The live GCS handler counters (issue #25, part 5; Ray prints its blocks every
/// second there): per (io_context, handler), the agent's
/// `raylog_ray_handler_calls_total` equals the calls `raylog health` computes from
/// the same files, the handlers past the cap adding up under `other`; and GCS's
/// `CreateActor` total in the first session equals what Ray's state API listed after
/// the workload created and killed its 200 actors (`gcs_actors.json`).
fn check_gcs_handlers(m: &BTreeMap<String, f64>, h: &Value, dir: &Path, failures: &mut Vec<String>) {
    let label = |k: &str, name: &str| {
        let at = k.find(&format!("{name}=\"")).map(|i| i + name.len() + 2)?;
        Some(k[at..].split('"').next()?.to_string())
    };
    let mut agent: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (k, v) in m.iter().filter(|(k, _)| k.starts_with("raylog_ray_handler_calls_total{")) {
        if label(k, "component").as_deref() == Some("gcs_server") {
            *agent
                .entry((label(k, "io_context").unwrap_or_default(), label(k, "handler").unwrap_or_default()))
                .or_default() += count(k, *v);
        }
    }
    let gcs: Vec<&Value> =
        h["latency"]["processes"].as_array().into_iter().flatten().filter(|p| p["component"] == "gcs_server").collect();
    let mut health: BTreeMap<(String, String), u64> = BTreeMap::new();
    for p in &gcs {
        for row in p["handlers"].as_array().into_iter().flatten() {
            let key =
                (p["io_context"].as_str().unwrap_or("").to_string(), row["handler"].as_str().unwrap_or("").to_string());
            *health.entry(key).or_default() += row["calls"].as_u64().unwrap_or(0);
        }
    }
    let (mut named, mut other_want) = (0, 0);
    for (key, calls) in &health {
        match agent.get(key) {
            Some(got) => {
                named += 1;
                if got != calls {
                    failures.push(format!("gcs handlers: {key:?}: {got} calls on /metrics, raylog health {calls}"));
                }
            }
            None => other_want += calls,
        }
    }
    let other_got: u64 = agent.iter().filter(|(k, _)| k.1 == "other").map(|(_, v)| v).sum();
    if other_got != other_want || named == 0 {
        failures.push(format!(
            "gcs handlers: `other` {other_got} on /metrics, {other_want} in raylog health's unnamed handlers ({named} named)"
        ));
    }
    let create = check_create_actor(&gcs, dir, failures);
    println!(
        "live: gcs handlers: {} handler series, {named} named as raylog health, other {other_got}; {create}",
        agent.len()
    );
}

/// GCS's `CreateActor` calls in the session the workload's `gcs_actors.json` names
/// equal the actors Ray's state API listed there (at least its 200); what was seen.
fn check_create_actor(gcs: &[&Value], dir: &Path, failures: &mut Vec<String>) -> String {
    let Some(listed) =
        std::fs::read(dir.join("gcs_actors.json")).ok().and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    else {
        failures.push(format!("gcs handlers: the workload wrote no {}", dir.join("gcs_actors.json").display()));
        return "no gcs_actors.json".into();
    };
    let session = listed["session"].as_str().unwrap_or("?");
    let create = gcs
        .iter()
        .filter(|p| p["session"] == session && p["io_context"] == "Main service")
        .flat_map(|p| p["handlers"].as_array().into_iter().flatten())
        .filter(|r| r["handler"] == "ActorInfoGcsService.grpc_server.CreateActor")
        .map(|r| r["calls"].as_u64().unwrap_or(0))
        .sum::<u64>();
    let actors = listed["actors"].as_u64().unwrap_or(0);
    if create != actors || actors < 200 {
        failures.push(format!(
            "gcs handlers: CreateActor {create} calls in {session}, Ray's state API lists {actors} actors"
        ));
    }
    format!("CreateActor {create} = {actors} actors listed")
}

/// `/metrics` values are floats in the exposition format (`1.5`, `2e3`, `+Inf`):
/// every sample is kept, none dropped for not being an integer.
#[test]
fn metrics_samples_keep_float_values() {
    let text = "# TYPE a_total counter\na_total{x=\"1\"} 3\nb_seconds 1.5\nc 2e3\nd_bucket{le=\"+Inf\"} 7\ne +Inf\n";
    let m = samples(text);
    let shown: BTreeMap<&str, String> = m.iter().map(|(k, v)| (k.as_str(), v.to_string())).collect();
    let want =
        [("a_total{x=\"1\"}", "3"), ("b_seconds", "1.5"), ("c", "2000"), ("d_bucket{le=\"+Inf\"}", "7"), ("e", "inf")];
    assert_eq!(shown, want.into_iter().map(|(k, v)| (k, v.to_string())).collect::<BTreeMap<_, _>>());
}
