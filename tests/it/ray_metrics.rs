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

/// Every sample of `/metrics`: `name{labels}` → value.
fn samples(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(k, v)| Some((k.to_string(), v.parse().ok()?))))
        .collect()
}

/// The sum of the samples of metric `name` whose labels contain all of `with`.
fn sum(m: &BTreeMap<String, u64>, name: &str, with: &[&str]) -> u64 {
    m.iter()
        .filter(|(k, _)| k.strip_prefix(name).is_some_and(|rest| rest.is_empty() || rest.starts_with('{')))
        .filter(|(k, _)| with.iter().all(|w| k.contains(w)))
        .map(|(_, v)| v)
        .sum()
}

fn lines(p: &Path) -> usize {
    std::fs::read_to_string(p).map_or(0, |t| t.lines().count())
}

/// What the agent's `/metrics` says once it has shipped every record of fixture
/// `name`, with `raylog health --format json` and the record count of `raylog
/// parse` on the same files.
struct Shipped {
    m: BTreeMap<String, u64>,
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

impl Shipped {
    fn exact(&self, name: &str, labels: &str) -> u64 {
        let key = if labels.is_empty() { name.to_string() } else { format!("{name}{{{labels}}}") };
        *self.m.get(&key).unwrap_or_else(|| panic!("no {key} in\n{}", self.text))
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
    // Read off the fixture (README.md's `raylog health` output): Counter beta killed
    // (not restarted) and Phoenix killed and restarted once, both SYSTEM_ERROR; the
    // two calls that killed them fail ACTOR_UNAVAILABLE; `ray stop` removes the node.
    let wd = s.exact("raylog_ray_worker_deaths_total", &format!("{NODE},exit_type=\"SYSTEM_ERROR\""));
    let restarts = s.exact("raylog_ray_actor_restarts_total", NODE);
    let failures = s.exact("raylog_ray_actor_failures_total", NODE);
    let unavailable = s.exact("raylog_ray_task_failures_total", &format!("{NODE},exception=\"ACTOR_UNAVAILABLE\""));
    let node_deaths = s.exact("raylog_ray_node_deaths_total", "");
    eprintln!(
        "ray-2.60-text: worker_deaths SYSTEM_ERROR={wd} actor_failures={failures} actor_restarts={restarts} \
         task_failures ACTOR_UNAVAILABLE={unavailable} node_deaths={node_deaths} records={}",
        sum(&s.m, "raylog_ray_records_total", &[])
    );
    assert_eq!((wd, failures, restarts, unavailable, node_deaths), (2, 2, 1, 2, 1), "{}", s.text);
    s.agrees_with_health();
}

/// The `workload_health.py` fixtures: the OOM-killed worker has no
/// RAY_WORKER_FAILURE event, so the agent counts GCS's `NODE_OUT_OF_MEMORY` exit;
/// GCS health counts the failed checks, the node's death and the lines saying GCS
/// is gone (2.60: 5 + 1 + 4; 2.40, one node: 7 `Failed to connect to GCS`).
#[test]
fn ship_counts_the_health_fixture_events() {
    for (name, gcs_want, nodes_want) in [("ray-2.60-health", 10, 1), ("ray-2.40-health", 7, 0)] {
        let s = ship(name);
        let oom_death = s.exact("raylog_ray_worker_deaths_total", &format!("{NODE},exit_type=\"NODE_OUT_OF_MEMORY\""));
        let oom = s.exact("raylog_ray_oom_kills_total", NODE);
        let gcs = s.exact("raylog_ray_gcs_health_failures_total", "");
        let nodes = s.exact("raylog_ray_node_deaths_total", "");
        let oom_task = s.exact("raylog_ray_task_failures_total", &format!("{NODE},exception=\"OUT_OF_MEMORY\""));
        assert_eq!((oom_death, oom, gcs, nodes, oom_task), (1, 1, gcs_want, nodes_want, 1), "{name}: {}", s.text);
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
}
