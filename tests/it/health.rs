//! `raylog health`: the real binary on the fixtures, with exact counts.
//!
//! Counts are checked two ways: against numbers read off the fixtures by hand
//! (fixtures/README.md says which actors died and restarted), and against the raw
//! lines in the fixture files counted here with plain regexes, independent of the
//! detection module. Ids are found by grepping the fixture files, never written here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use regex::Regex;
use serde_json::Value;

use crate::util::{fixture_dirs, fixtures, logs_dir};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn health(paths: &[&Path], flags: &[&str]) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_raylog"))
        .arg("health")
        .args(paths)
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .expect("run raylog");
    Run {
        code: out.status.code().expect("killed by a signal"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn json(paths: &[&Path], flags: &[&str]) -> Value {
    let mut all = vec!["--format", "json"];
    all.extend_from_slice(flags);
    let run = health(paths, &all);
    assert_eq!(run.code, 0, "{}", run.stderr);
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", run.stdout))
}

fn fixture(name: &str) -> PathBuf {
    fixtures().join(name)
}

/// Every line of the files in `logs` whose name starts with `prefix`.
fn lines_of(logs: &Path, prefix: &str) -> Vec<String> {
    let mut out = vec![];
    let mut dirs = vec![logs.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.file_name().unwrap().to_string_lossy().starts_with(prefix) {
                out.extend(std::fs::read_to_string(&p).unwrap_or_default().lines().map(str::to_string));
            }
        }
    }
    out
}

fn find_actor<'a>(report: &'a Value, actor_id: &str) -> &'a Value {
    report["actor_failures"]["actors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["actor_id"] == actor_id)
        .unwrap_or_else(|| panic!("actor {actor_id} not in {report:#}"))
}

#[test]
fn phoenix_gives_one_failure_one_restart_and_its_workers_death() {
    let dir = fixture("ray-2.60-text");
    let logs = logs_dir(&dir);
    // GCS's line for the actor with a restart left is Phoenix's (max_restarts=1).
    let re =
        Regex::new(r"Actor is failed on worker ([0-9a-f]{56}) .*remaining_restarts = 1,.* actor_id=([0-9a-f]{32})")
            .unwrap();
    let gcs = lines_of(&logs, "gcs_server.out");
    let (worker, actor) = gcs
        .iter()
        .find_map(|l| re.captures(l).map(|c| (c[1].to_string(), c[2].to_string())))
        .expect("Phoenix's failure in gcs_server.out");
    let pid_re = Regex::new(&format!(r"Worker ID: {worker} .*Worker PID: (\d+) Worker exit type: ([A-Z_]+)")).unwrap();
    let events = lines_of(&logs.join("events"), "event_RAYLET");
    let (pid, exit_type) = events
        .iter()
        .find_map(|l| pid_re.captures(l).map(|c| (c[1].parse::<u64>().unwrap(), c[2].to_string())))
        .unwrap();

    let report = json(&[&dir], &[]);
    let phoenix = find_actor(&report, &actor);
    assert_eq!(phoenix["class"], "Phoenix");
    assert_eq!((phoenix["failures"].as_u64(), phoenix["restarts"].as_u64()), (Some(1), Some(1)));
    let ev = &phoenix["events"][0];
    assert_eq!(ev["worker_id"], worker.as_str());
    assert_eq!(ev["pid"].as_u64(), Some(pid));
    assert_eq!(ev["exit_type"], exit_type.as_str());
    assert_eq!(ev["restarted"], true);

    let groups = report["worker_deaths"]["by_exit_type"].as_array().unwrap();
    let group = groups.iter().find(|g| g["exit_type"] == exit_type.as_str()).expect("exit type group");
    let death = group["workers"].as_array().unwrap().iter().find(|w| w["worker_id"] == worker.as_str()).unwrap();
    assert_eq!(death["pid"].as_u64(), Some(pid));
    assert_eq!(death["actor_id"], actor.as_str());
    assert!(death["node_id"].as_str().is_some_and(|n| n.len() == 56), "{death}");
}

/// (fixture, worker deaths, actor failures, restarts, node deaths, task failures),
/// read off the fixtures: Counter beta dies once without restart and Phoenix once
/// with one restart in every `workload.py` run; `workload_extra.py` kills only the
/// Segfaulter; in jobs-serve three Serve actors fail at shutdown (the controller
/// may restart) and no worker exit is reported; the two actor-method calls that hit
/// the dead actors fail on the owner's side, plus in the export fixture the
/// `flaky` task's two ValueErrors and Counter.boom's RuntimeError. (ray-2.60-events
/// is a `workload.py` run too; its posted events are not under its session dir.) In
/// `ray-2.60-health` (`workload_health.py`) the memory monitor kills the `hog`
/// task's worker (OUT_OF_MEMORY on the owner's side), GCS removes the SIGSTOPped
/// second node, and the dashboard's driver sees two calls to the job supervisor
/// actors fail and the conda job's two fail on its runtime env; no actor fails
/// (the supervisors exit as intended) and the head node is never removed (GCS is
/// killed first). `ray-2.40-health` is the same run on one node: no node death.
const EXPECTED: &[(&str, u64, u64, u64, u64, u64)] = &[
    ("ray-2.40-plain", 2, 2, 1, 1, 2),
    ("ray-2.40-health", 1, 0, 0, 0, 5),
    ("ray-2.40-text", 2, 2, 1, 1, 2),
    ("ray-2.60-cpp-json-attempts", 1, 1, 0, 1, 1),
    ("ray-2.60-events", 2, 2, 1, 1, 2),
    ("ray-2.60-health", 1, 0, 0, 1, 5),
    ("ray-2.60-jobs-serve", 0, 3, 1, 1, 2),
    ("ray-2.60-json-rotated-export", 2, 2, 1, 1, 5),
    ("ray-2.60-text", 2, 2, 1, 1, 2),
    ("ray-2.9-plain", 2, 2, 1, 1, 2),
];

fn counts(r: &Value) -> (u64, u64, u64, u64, u64) {
    let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"));
    (
        n(&r["worker_deaths"]["total"]),
        n(&r["actor_failures"]["failures"]),
        n(&r["actor_failures"]["restarts"]),
        n(&r["node_deaths"]["total"]),
        n(&r["task_failures"]["total"]),
    )
}

#[test]
fn exact_counts_on_every_fixture() {
    let dirs = fixture_dirs();
    assert_eq!(dirs.len(), EXPECTED.len(), "a fixture was added: give it a row");
    for (name, deaths, actors, restarts, nodes, tasks) in EXPECTED {
        let r = json(&[&fixture(name)], &[]);
        assert_eq!(counts(&r), (*deaths, *actors, *restarts, *nodes, *tasks), "{name}");
        if is_health(name) {
            continue; // their failure events: health_fixture_* below
        }
        assert_eq!(r["oom_kills"]["total"], 0, "{name}: no workload ran out of memory");
        assert_eq!(r["gcs_health"]["total"], 0, "{name}: GCS stayed healthy");
        assert_eq!(r["node_deaths"]["unexpected"], 0, "{name}: every node was stopped on purpose");
        assert_eq!(r["object_spilling"]["events"], 0, "{name}: nothing spilled");
        assert_eq!(r["driver_failures"], Value::Array(vec![]), "{name}: no job failed");
    }
}

/// The fixtures of `workload_health.py` (fixtures/README.md) with what Ray logged
/// there, read off the files: OOM-killed workers, failed health checks, nodes
/// declared dead, lines saying GCS is gone, spill lines, MiB and objects spilled. Both have one `NODE_OUT_OF_MEMORY` death and two failed jobs. 2.60:
/// the SIGSTOPped node's five missed checks and its death; the raylet and the
/// dashboard's core driver each say `GCS has been unavailable …` and `Failed to
/// connect to GCS …` (`raylet.err`'s copy is not counted again); one spill line.
/// 2.40 (one node, no health check): only `Failed to connect to GCS …`, from the
/// raylet and six core-worker logs; two spill lines with running totals.
#[derive(Clone, Copy)]
struct HealthFixture {
    name: &'static str,
    oom: u64,
    checks: u64,
    dead: u64,
    unreachable: u64,
    spills: u64,
    mib: f64,
    objects: u64,
}

const HEALTH: &[HealthFixture] = &[
    HealthFixture {
        name: "ray-2.40-health",
        oom: 1,
        checks: 0,
        dead: 0,
        unreachable: 7,
        spills: 2,
        mib: 144.0,
        objects: 6,
    },
    HealthFixture {
        name: "ray-2.60-health",
        oom: 1,
        checks: 5,
        dead: 1,
        unreachable: 4,
        spills: 1,
        mib: 72.0,
        objects: 3,
    },
];

fn is_health(name: &str) -> bool {
    HEALTH.iter().any(|h| h.name == name)
}

#[test]
fn health_fixture_failure_events() {
    for &HealthFixture { name, oom, checks, dead, unreachable, spills, mib, objects } in HEALTH {
        let r = json(&[&fixture(name)], &[]);
        let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("{name}: not a count: {v}"));
        assert_eq!(n(&r["oom_kills"]["total"]), oom, "{name}");
        assert_eq!(r["oom_kills"]["kills"][0]["workers"], 1, "{name}");
        let deaths = r["worker_deaths"]["by_exit_type"].as_array().unwrap();
        assert_eq!(deaths.len(), 1, "{name}");
        assert_eq!((deaths[0]["exit_type"].as_str(), n(&deaths[0]["count"])), (Some("NODE_OUT_OF_MEMORY"), 1));
        let kinds = &r["gcs_health"]["by_kind"];
        let kind = |k: &str| kinds.get(k).map_or(0, n);
        assert_eq!(kind("health_check_failed"), checks, "{name}");
        assert_eq!(kind("node_failed_health_check"), dead, "{name}");
        assert_eq!(kind("gcs_unreachable"), unreachable, "{name}");
        assert_eq!(n(&r["gcs_health"]["total"]), checks + dead + unreachable, "{name}");
        assert_eq!(n(&r["node_deaths"]["unexpected"]), dead, "{name}");
        let sp = &r["object_spilling"];
        assert_eq!((n(&sp["events"]), sp["mib"].as_f64(), n(&sp["objects"])), (spills, Some(mib), objects), "{name}");
        let jobs: Vec<(&str, &str)> = r["driver_failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| (d["submission_id"].as_str().unwrap(), d["outcome"].as_str().unwrap()))
            .collect();
        assert_eq!(jobs, [("raysubmit_health_conda", "FAILED"), ("raysubmit_health_exit1", "FAILED")], "{name}");

        let text = health(&[&fixture(name)], &[]);
        assert_eq!(text.code, 0, "{}", text.stderr);
        for needle in [
            "Worker deaths: 1\n".to_string(),
            "NODE_OUT_OF_MEMORY ×1".into(),
            format!("OOM kills: {oom}\n"),
            format!("GCS health: {}", checks + dead + unreachable),
            "Failed jobs: 2\n".into(),
            "raysubmit_health_conda  FAILED\n".into(),
            format!("Object spilling: {spills} spills, {mib} MiB, {objects} objects"),
        ] {
            assert!(text.stdout.contains(&needle), "{name}: {needle:?} not in:\n{}", text.stdout);
        }
    }
    let text = health(&[&fixture("ray-2.60-health")], &[]).stdout;
    let gcs = "GCS health: 10 (gcs_unreachable ×4, health_check_failed ×5, node_failed_health_check ×1)";
    assert!(text.contains(gcs) && text.contains("Node deaths: 1 (1 unexpected)"), "{text}");
}

/// The same events counted from the raw lines with regexes written here.
#[test]
fn health_fixture_events_agree_with_the_raw_lines() {
    let re = |s: &str| Regex::new(s).unwrap();
    let caps = |lines: &[String], re: &Regex| -> Vec<Vec<String>> {
        let caps = lines.iter().filter_map(|l| re.captures(l));
        caps.map(|c| c.iter().skip(1).map(|m| m.map_or("", |m| m.as_str()).to_string()).collect()).collect()
    };
    let kill_re =
        re(r"\(raylet\) node_manager\.cc:\d+: Killing (?:(\d+) worker\(s\), kill details: |worker with task )");
    let oom_re = re(r"Reporting worker exit, worker id = ([0-9a-f]{56}),.* exit_type = NODE_OUT_OF_MEMORY,");
    let check_re = re(
        r"\(gcs_server\) gcs_health_check_manager\.cc:\d+: Health check failed for node ([0-9a-f]{56}), remaining checks (\d+)",
    );
    let dead_re = re(r"Node is dead because the health check failed\. node_id=([0-9a-f]{56})");
    let removed_re = re(r"^\S+ \S+ I \d+ \d+\] \(gcs_server\) \S+: , death reason = (\w+), .* node_id=([0-9a-f]{56})");
    let lost_re = re(
        r"\] (\(raylet\) )?[a-z_]+\.(cc|h):\d+: (GCS has been unavailable for more than \d+ seconds|Failed to connect to GCS within \d+ seconds)",
    );
    let spill_re = re(r":info_message:Spilled (\d+) MiB, (\d+) objects, write throughput");
    let sup_re = re(r"-- Job (\S+) entrypoint command exited with code ([1-9]\d*)");
    let job_re = re(r#""message": "Completed a ray job (\S+) with a status (FAILED|STOPPED)"#);

    for h in HEALTH {
        let (name, oom, checks_want, dead_want) = (h.name, h.oom, h.checks, h.dead);
        let (unreachable_want, spills_want) = (h.unreachable, h.spills);
        let logs = logs_dir(&fixture(name));
        let r = json(&[&fixture(name)], &[]);
        let n = |v: &Value| v.as_u64().unwrap_or_else(|| panic!("{name}: not a count: {v}"));
        let raylet = lines_of(&logs, "raylet.out");
        let gcs = lines_of(&logs, "gcs_server.out");

        // The memory monitor's kills (2.60 states a number, 2.40 one line per
        // worker), and the deaths GCS reports for them.
        let kills = caps(&raylet, &kill_re);
        let killed: u64 = kills.iter().map(|c| c[0].parse::<u64>().unwrap_or(1)).sum();
        assert_eq!(killed, oom, "{name}");
        assert_eq!(n(&r["oom_kills"]["total"]), killed, "{name}");
        let deaths = caps(&gcs, &oom_re);
        let group = &r["worker_deaths"]["by_exit_type"][0];
        assert_eq!(group["count"].as_u64(), Some(deaths.len() as u64), "{name}");
        assert_eq!(group["workers"][0]["worker_id"], deaths[0][0].as_str(), "{name}");

        // Health checks: every failed check and the death name the node GCS removes.
        let checks = caps(&gcs, &check_re);
        let dead = caps(&gcs, &dead_re);
        let removed = caps(&gcs, &removed_re);
        assert_eq!((checks.len() as u64, dead.len() as u64), (checks_want, dead_want), "{name}");
        let by_kind = &r["gcs_health"]["by_kind"];
        let kind = |k: &str| by_kind.get(k).map_or(0, n);
        assert_eq!(kind("health_check_failed"), checks.len() as u64, "{name}");
        assert_eq!(kind("node_failed_health_check"), dead.len() as u64, "{name}");
        assert_eq!(removed.len(), dead.len(), "{name}");
        if let Some(d) = dead.first() {
            let remaining: Vec<&str> = checks.iter().map(|c| c[1].as_str()).collect();
            assert_eq!(remaining, ["4", "3", "2", "1", "0"], "{name}");
            assert!(checks.iter().all(|c| c[0] == d[0]) && removed[0][1] == d[0], "{name}");
            let node = &r["node_deaths"]["nodes"][0];
            assert_eq!(node["node_id"].as_str(), Some(&*removed[0][1]), "{name}");
            assert_eq!(node["reason"].as_str(), Some(&*removed[0][0]), "{name}");
        }

        // GCS unreachable: the raylet's log and the core-worker/driver logs, each
        // line once (raylet.err and the .err files of Python components and IO
        // workers repeat them and are not read here).
        let unreachable = caps(&raylet, &lost_re).len() + caps(&lines_of(&logs, "python-core-"), &lost_re).len();
        assert_eq!(unreachable as u64, unreachable_want, "{name}");
        assert_eq!(kind("gcs_unreachable"), unreachable as u64, "{name}");

        // Spilling: the raylet's running totals, so the last (largest) is the amount.
        let spills = caps(&raylet, &spill_re);
        assert_eq!(spills.len() as u64, spills_want, "{name}");
        assert_eq!(n(&r["object_spilling"]["events"]), spills.len() as u64, "{name}");
        let most = |i: usize| spills.iter().map(|c| c[i].parse::<u64>().unwrap()).max().unwrap();
        let sp = &r["object_spilling"];
        assert_eq!((sp["mib"].as_f64(), n(&sp["objects"])), (Some(most(0) as f64), most(1)), "{name}");

        // Failed jobs: the supervisor's non-zero exit codes and the FAILED/STOPPED events.
        let sup = caps(&lines_of(&logs.join("jobs"), "supervisor-"), &sup_re);
        let ev = caps(&lines_of(&logs.join("events"), "event_JOBS"), &job_re);
        let failed: BTreeSet<String> = sup.iter().chain(&ev).map(|c| c[0].clone()).collect();
        assert_eq!((sup.len(), ev.len(), failed.len()), (1, 2, 2), "{name}");
        let got: BTreeSet<String> = r["driver_failures"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["submission_id"].as_str().unwrap().into())
            .collect();
        assert_eq!(got, failed, "{name}");
    }
}

/// The same numbers from the raw lines, counted with regexes written here.
#[test]
fn counts_agree_with_the_raw_lines() {
    let exit = Regex::new(r"Reporting worker exit, worker id = ([0-9a-f]{56})").unwrap();
    let event =
        Regex::new(r"RAY_WORKER_FAILURE.*Worker ID: ([0-9a-f]{56})|Worker ID: ([0-9a-f]{56}).*RAY_WORKER_FAILURE")
            .unwrap();
    let failed = Regex::new(r"is failed on worker .*need_reschedule = 1,.*remaining_restarts = (-?\d+)").unwrap();
    let removed = Regex::new(r"(^|\W)(Removing node, |, death reason = )").unwrap();
    for dir in fixture_dirs() {
        let logs = logs_dir(&dir);
        let gcs = lines_of(&logs, "gcs_server.out");
        let mut workers: BTreeSet<String> =
            gcs.iter().filter_map(|l| exit.captures(l)).map(|c| c[1].to_string()).collect();
        for l in lines_of(&logs.join("events"), "event_RAYLET") {
            if let Some(c) = event.captures(&l) {
                workers.insert(c.get(1).or(c.get(2)).unwrap().as_str().to_string());
            }
        }
        let fails: Vec<i64> = gcs.iter().filter_map(|l| failed.captures(l)).map(|c| c[1].parse().unwrap()).collect();
        let nodes = gcs.iter().filter(|l| removed.is_match(l)).count() as u64;
        let r = json(&[&dir], &[]);
        let (d, a, re, n, _) = counts(&r);
        let name = dir.display();
        assert_eq!(d, workers.len() as u64, "{name}: worker deaths");
        assert_eq!(a, fails.len() as u64, "{name}: actor failures");
        assert_eq!(re, fails.iter().filter(|&&x| x != 0).count() as u64, "{name}: restarts");
        assert_eq!(n, nodes, "{name}: node deaths");
    }
}

#[test]
fn task_failures_by_exception_in_the_export_fixture() {
    let r = json(&[&fixture("ray-2.60-json-rotated-export")], &[]);
    let groups = r["task_failures"]["by_exception"].as_array().unwrap();
    let count = |e: &str| groups.iter().find(|g| g["exception"] == e).and_then(|g| g["count"].as_u64());
    // `flaky` (max_retries=1, retry_exceptions=True) raises ValueError twice.
    assert_eq!(count("ValueError"), Some(2));
    assert_eq!(count("RuntimeError"), Some(1), "Counter.boom");
    assert_eq!(count("ACTOR_UNAVAILABLE"), Some(2), "crash and die, said by the owner");
    assert_eq!(count("ACTOR_DIED"), None, "the export copy of an owner-reported failure is dropped");
    let flaky = &groups.iter().find(|g| g["exception"] == "ValueError").unwrap()["tasks"];
    let attempts: Vec<u64> = flaky.as_array().unwrap().iter().map(|t| t["attempt"].as_u64().unwrap()).collect();
    assert_eq!(attempts, [0, 1]);
    assert_eq!(flaky[0]["name"], "flaky");
}

#[test]
fn json_has_every_section_and_top_errors_group_by_template() {
    let r = json(&[&fixture("ray-2.60-text")], &[]);
    for key in
        ["worker_deaths", "oom_kills", "actor_failures", "node_deaths", "gcs_health", "task_failures", "top_errors"]
    {
        assert!(r.get(key).is_some(), "missing {key}");
    }
    // The two RAY_WORKER_FAILURE events differ only in ids and numbers: one template.
    let events = lines_of(&logs_dir(&fixture("ray-2.60-text")).join("events"), "event_RAYLET");
    let n = events.iter().filter(|l| l.contains("\"severity\":\"ERROR\"")).count() as u64;
    assert_eq!(n, 2);
    let top = r["top_errors"].as_array().unwrap();
    let t = top.iter().find(|t| t["template"].as_str().unwrap().starts_with("A worker died")).expect("template");
    assert_eq!(t["count"].as_u64(), Some(n));
    assert_eq!(t["components"]["event"].as_u64(), Some(n));
    assert!(t["template"].as_str().unwrap().contains("Worker ID: <id>"), "{t}");
    let total: u64 = top.iter().map(|t| t["count"].as_u64().unwrap()).sum();
    assert!(total <= r["error_records"].as_u64().unwrap());
}

#[test]
fn several_nodes_and_archives_add_up() {
    let (a, b) = (fixture("ray-2.60-text"), fixture("ray-2.40-text"));
    let both = json(&[&a, &b], &[]);
    let (ra, rb) = (counts(&json(&[&a], &[])), counts(&json(&[&b], &[])));
    assert_eq!(counts(&both), (ra.0 + rb.0, ra.1 + rb.1, ra.2 + rb.2, ra.3 + rb.3, ra.4 + rb.4));

    let tmp = std::env::temp_dir().join(format!("raylog-health-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let tgz = tmp.join("node.tar.gz");
    let ok = Command::new("tar").arg("czf").arg(&tgz).arg("-C").arg(&a).arg(".").status().unwrap();
    assert!(ok.success());
    let from_tar = json(&[&tgz], &[]);
    std::fs::remove_dir_all(&tmp).unwrap();
    assert_eq!(from_tar["actor_failures"], json(&[&a], &[])["actor_failures"]);
}

#[test]
fn since_and_until_narrow_the_window() {
    let dir = fixture("ray-2.60-text");
    // Phoenix's worker died at 10:21:13 (gcs_server.out); Counter beta's before.
    let before = json(&[&dir], &["--until", "2026-11-30T10:21:12.900Z"]);
    assert_eq!(counts(&before).1, 1, "only Counter beta's failure");
    let after = json(&[&dir], &["--since", "2026-11-30 10:21:13"]);
    assert_eq!(counts(&after).1, 1, "only Phoenix's failure");
    assert_eq!(after["actor_failures"]["restarts"], 1);
    let nothing = json(&[&dir], &["--since", "2030-01-01"]);
    assert_eq!(counts(&nothing), (0, 0, 0, 0, 0));
}

#[test]
fn text_report_and_errors() {
    let dir = fixture("ray-2.60-text");
    let run = health(&[&dir], &[]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    for needle in ["Worker deaths: 2", "SYSTEM_ERROR ×2", "OOM kills: none", "Actor failures: 2 (1 restart)", "Phoenix"]
    {
        assert!(run.stdout.contains(needle), "{needle:?} not in:\n{}", run.stdout);
    }
    let bad = health(&[&dir], &["--since", "yesterday-ish"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("--since"), "{}", bad.stderr);
    let missing = health(&[Path::new("/nonexistent/ray")], &[]);
    assert_eq!(missing.code, 2);
    assert!(missing.stderr.contains("/nonexistent/ray"), "{}", missing.stderr);
}

/// The sample output in docs/health.md is what the binary prints on that fixture.
#[test]
fn docs_sample_is_real_output() {
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/health.md")).unwrap();
    let start = page.find("`raylog health fixtures/ray-2.60-text`").expect("docs/health.md names the fixture");
    let block = &page[start..];
    let open = block.find("```\n").unwrap() + 4;
    let close = open + block[open..].find("```").unwrap();
    let run = health(&[&fixture("ray-2.60-text")], &[]);
    assert_eq!(block[open..close], run.stdout, "the Ray health sample in docs/health.md differs from the output");
}

/// What the agent will count per record (`detect` + `counts_once`, no state across
/// records) is what was read off each fixture ([`EXPECTED`], literal numbers, not
/// `detect`'s), as `raylog health` reports after merging.
#[test]
fn per_record_counting_agrees_with_the_report() {
    use raylog::health::{detect, Event};
    assert_eq!(fixture_dirs().len(), EXPECTED.len(), "a fixture was added: give it a row");
    for &(name, deaths_want, actors_want, restarts_want, nodes_want, tasks_want) in EXPECTED {
        let dir = fixture(name);
        let want = (deaths_want, actors_want, restarts_want, nodes_want, tasks_want);
        let disc = raylog::discover::discover(std::slice::from_ref(&dir));
        let cfg = raylog::scan::ScanConfig::default();
        let (mut deaths, mut actors, mut restarts, mut nodes, mut tasks) = (0u64, 0u64, 0u64, 0u64, 0u64);
        raylog::scan::scan(&disc, &cfg, &mut |_| {}, &mut |r| {
            let Some(ev) = detect(r).filter(|e| e.counts_once()) else { return };
            match ev {
                Event::WorkerDeath(_) => deaths += 1,
                Event::ActorFailure(a) => {
                    actors += 1;
                    restarts += u64::from(a.restarts());
                }
                Event::NodeDeath(_) => nodes += 1,
                Event::TaskFailure(_) => tasks += 1,
                _ => {}
            }
        });
        assert_eq!((deaths, actors, restarts, nodes, tasks), want, "{name}: counted per record");
        assert_eq!(counts(&json(&[&dir], &[])), want, "{name}: raylog health");
    }
}

/// The `latency` section: GCS's and the raylet's blocks of fixtures/ray-2.60-text
/// (read off the file: GCS's `Main service` block has `GcsInMemoryStore.Put - 3
/// total`, `event_loop_lag_probe … Queueing time: mean = 2.24ms`), the raylet's
/// object manager's own io_context, and the node's life as GCS and the raylet tell it.
#[test]
fn latency_section_reads_gcs_and_raylet_blocks() {
    let run = health(&[&fixture("ray-2.60-text")], &["--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let procs = v["latency"]["processes"].as_array().expect("latency.processes");
    let gcs = procs.iter().find(|p| p["component"] == "gcs_server" && p["io_context"] == "Main service").expect("GCS");
    assert_eq!(gcs["pid"], 4034);
    let put = gcs["slowest_by_queueing"].as_array().unwrap().iter().find(|h| h["handler"] == "GcsInMemoryStore.Put");
    assert_eq!(put.expect("Put")["calls"], 3);
    assert_eq!(gcs["lag"]["max_s"], serde_json::json!(0.00224));
    assert!(procs.iter().any(|p| p["component"] == "raylet" && p["io_context"] == "ObjectManager"));
    assert!(procs.iter().all(|p| p["component"] == "gcs_server" || p["component"] == "raylet"), "GCS and raylets only");
    let alive: Vec<u64> =
        v["latency"]["nodes_alive"].as_array().unwrap().iter().map(|n| n["alive"].as_u64().unwrap()).collect();
    assert_eq!(alive, [1, 0], "up at start, removed at `ray stop`");
    // Outside the window: no blocks.
    let late = health(&[&fixture("ray-2.60-text")], &["--format", "json", "--since", "2026-11-30T10:30:00Z"]);
    let v: serde_json::Value = serde_json::from_str(&late.stdout).unwrap();
    assert!(v["latency"]["processes"].as_array().unwrap().is_empty(), "{}", late.stdout);
}

/// A rotated GCS log read out of time order (`gcs_server.out`, the newest, sorts
/// before `gcs_server.out.1`): the blocks are joined in time order, so the calls are
/// the last block's total and the lags go oldest first, as the agent counts them
/// tailing the files as Ray writes them.
#[test]
fn latency_joins_rotated_files_in_time_order() {
    let dir = std::env::temp_dir().join(format!("rl-health-rot-{}", std::process::id()));
    let logs = dir.join("session_2026-11-30_10-21-03_039314_4033/logs");
    std::fs::create_dir_all(&logs).unwrap();
    // (second, CreateActor total, probe calls, probe queueing total ms)
    let block = |sec: u32, creates: u64, probes: u64, lag_ms: f64| {
        format!(
            "[2026-11-30 10:21:{sec:02},080 I 4034 4034] (gcs_server) gcs_server.cc:1322: Main service Event stats:\n\n\n\
             Global stats: {creates} total (0 active)\n\
             Queueing time: mean = 1.00ms, max = 1.00ms, min = 0.00ms, total = 1.00ms\n\
             Execution time:  mean = 1.00ms, total = 1.00ms\n\
             Event stats:\n\
             \tActorInfoGcsService.grpc_server.CreateActor - {creates} total (0 active), Execution time: mean = 1.00ms, total = {creates}.00ms, Queueing time: mean = 0.00ms, max = 0.00ms, min = 0.00ms, total = 0.00ms\n\
             \tevent_loop_lag_probe - {probes} total (0 active), Execution time: mean = 0.01ms, total = 0.01ms, Queueing time: mean = {:.2}ms, max = 9.00ms, min = 0.00ms, total = {lag_ms:.2}ms\n",
            lag_ms / probes as f64
        )
    };
    // The older file holds the first two blocks.
    std::fs::write(logs.join("gcs_server.out.1"), block(1, 3, 2, 4.0) + &block(2, 5, 4, 12.0)).unwrap();
    std::fs::write(logs.join("gcs_server.out"), block(3, 9, 6, 32.0) + &block(4, 12, 8, 34.0)).unwrap();
    let v = json(&[&dir], &[]);
    let _ = std::fs::remove_dir_all(&dir);
    let gcs = v["latency"]["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["component"] == "gcs_server" && p["io_context"] == "Main service")
        .expect("GCS")
        .clone();
    let create = gcs["handlers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["handler"] == "ActorInfoGcsService.grpc_server.CreateActor");
    assert_eq!(create.expect("CreateActor")["calls"], 12, "{gcs}");
    assert_eq!(gcs["blocks"], 4);
    assert_eq!(
        (gcs["first"].as_str(), gcs["last"].as_str()),
        (Some("2026-11-30T10:21:01.080Z"), Some("2026-11-30T10:21:04.080Z"))
    );
    // Interval lags: 2 ms printed, (12-4)/2 = 4, (32-12)/2 = 10, (34-32)/2 = 1.
    assert_eq!(gcs["lag"], serde_json::json!({"first_s": 0.002, "last_s": 0.001, "max_s": 0.01}), "{gcs}");
}
