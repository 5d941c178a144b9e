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
/// is a `workload.py` run too; its posted events are not under its session dir.)
const EXPECTED: &[(&str, u64, u64, u64, u64, u64)] = &[
    ("ray-2.40-plain", 2, 2, 1, 1, 2),
    ("ray-2.40-text", 2, 2, 1, 1, 2),
    ("ray-2.60-cpp-json-attempts", 1, 1, 0, 1, 1),
    ("ray-2.60-events", 2, 2, 1, 1, 2),
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
        assert_eq!(r["oom_kills"]["total"], 0, "{name}: no workload ran out of memory");
        assert_eq!(r["gcs_health"]["total"], 0, "{name}: GCS stayed healthy");
        assert_eq!(r["node_deaths"]["unexpected"], 0, "{name}: every node was stopped on purpose");
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

/// README's sample output is what the binary prints on that fixture.
#[test]
fn readme_sample_is_real_output() {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let start = readme.find("`raylog health fixtures/ray-2.60-text`").expect("README names the fixture");
    let block = &readme[start..];
    let open = block.find("```\n").unwrap() + 4;
    let close = open + block[open..].find("```").unwrap();
    let run = health(&[&fixture("ray-2.60-text")], &[]);
    assert_eq!(block[open..close], run.stdout, "README's Ray health sample differs from the output");
}

/// What the agent will count per record (`detect` + `counts_once`, no state across
/// records) equals what `raylog health` reports after merging, on every fixture.
#[test]
fn per_record_counting_agrees_with_the_report() {
    use raylog::health::{detect, Event};
    for dir in fixture_dirs() {
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
        let r = json(&[&dir], &[]);
        assert_eq!((deaths, actors, restarts, nodes, tasks), counts(&r), "{}", dir.display());
    }
}
