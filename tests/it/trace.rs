//! `raylog trace`: the real binary on the fixtures.
//!
//! Golden files under `tests/golden/trace/` pin the whole output for an actor
//! (Phoenix, killed and restarted), a task (the failing `tracebacks` task), a job
//! (the Jobs API submission) and a worker (the SIGSEGV one). They are produced from
//! a copy of the fixture whose files all have one fixed mtime, because lines without
//! a time are dated by mtime. Regenerate after an intended change with
//! `RAYLOG_BLESS=1 cargo test --release --test it trace`, and review the diff.
//!
//! Every id is found by grepping the fixture files, never written here.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use regex::Regex;
use serde_json::Value;

use crate::util::{fixtures, logs_dir};

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| panic!("not one JSON document ({e}):\n{}", self.stdout))
    }
}

/// Runs `raylog trace <paths> <flags>` with stdin closed.
fn trace(paths: &[&Path], flags: &[&str]) -> Run {
    let mut all: Vec<OsString> = vec!["trace".into()];
    all.extend(paths.iter().map(|p| p.as_os_str().to_os_string()));
    all.extend(flags.iter().map(OsString::from));
    let out = Command::new(env!("CARGO_BIN_EXE_raylog")).args(&all).stdin(Stdio::null()).output().expect("run raylog");
    Run {
        code: out.status.code().expect("killed by a signal"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn fixture(name: &str) -> PathBuf {
    let p = fixtures().join(name);
    assert!(p.is_dir(), "missing fixture {}", p.display());
    p
}

/// A temp dir removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "raylog-trace-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_tree(from: &Path, to: &Path, mtime: std::time::SystemTime) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let (src, dst) = (e.path(), to.join(e.file_name()));
        if src.is_dir() {
            copy_tree(&src, &dst, mtime);
        } else if src.is_file() {
            std::fs::copy(&src, &dst).unwrap();
            std::fs::File::options().write(true).open(&dst).unwrap().set_modified(mtime).unwrap();
        }
    }
}

/// A copy of a fixture's session dir whose files all have the mtime 2030-01-01, so
/// time-less lines get the same time on every checkout.
fn pinned_copy(name: &str) -> (TempDir, PathBuf) {
    let tmp = TempDir::new(name);
    let session = logs_dir(&fixture(name)).parent().unwrap().to_path_buf();
    let dst = tmp.0.join(session.file_name().unwrap());
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_893_456_000);
    copy_tree(&session, &dst, mtime);
    (tmp, dst)
}

/// Compares `got` with `tests/golden/trace/<name>`, or rewrites it under RAYLOG_BLESS.
fn golden(name: &str, got: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden/trace").join(name);
    if std::env::var_os("RAYLOG_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e}; run `RAYLOG_BLESS=1 cargo test --release --test it trace` to create it", path.display())
    });
    if got != want {
        let (g, w): (Vec<_>, Vec<_>) = (got.lines().collect(), want.lines().collect());
        let i = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(g.len().min(w.len()));
        panic!(
            "{}: output differs at line {} ({} lines, golden has {}):\n  got:  {}\n  want: {}",
            path.display(),
            i + 1,
            g.len(),
            w.len(),
            g.get(i).unwrap_or(&"<none>"),
            w.get(i).unwrap_or(&"<none>")
        );
    }
}

/// Files directly in `dir` whose name matches `re`, sorted, with the capture groups.
fn files_named(dir: &Path, re: &Regex) -> Vec<(PathBuf, Vec<String>)> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).collect();
    paths.sort();
    paths
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let groups =
                re.captures(&name)?.iter().map(|m| m.map_or(String::new(), |m| m.as_str().to_string())).collect();
            Some((p, groups))
        })
        .collect()
}

fn read(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap()).into_owned()
}

/// Phoenix in ray-2.60-text: its actor id and its workers' pids, from the `.out`
/// files that print `Phoenix started` and the `Creating actor` line of their core logs.
fn phoenix() -> (String, BTreeSet<u64>) {
    let logs = logs_dir(&fixture("ray-2.60-text"));
    let out = Regex::new(r"^worker-([0-9a-f]{56})-[0-9a-f]{8}-(\d+)\.out$").unwrap();
    let create = Regex::new(r"Creating actor actor_id=([0-9a-f]{32})").unwrap();
    let (mut pids, mut actors) = (BTreeSet::new(), BTreeSet::new());
    for (p, c) in files_named(&logs, &out) {
        if read(&p).contains("Phoenix started") {
            pids.insert(c[2].parse().unwrap());
            let core = logs.join(format!("python-core-worker-{}_{}.log", &c[1], &c[2]));
            actors.extend(create.captures_iter(&read(&core)).map(|m| m[1].to_string()));
        }
    }
    assert_eq!((pids.len(), actors.len()), (2, 1), "Phoenix pids {pids:?}, actor ids {actors:?}");
    (actors.into_iter().next().unwrap(), pids)
}

/// The `tracebacks` task's id in ray-2.60-text, from its structured-logging line.
fn tracebacks_task() -> String {
    let logs = logs_dir(&fixture("ray-2.60-text"));
    let re = Regex::new(r"task_id=([0-9a-f]{48}) task_name=tracebacks ").unwrap();
    let errs = files_named(&logs, &Regex::new(r"^worker-.*\.err$").unwrap());
    let ids: BTreeSet<String> = errs
        .iter()
        .flat_map(|(p, _)| re.captures_iter(&read(p)).map(|c| c[1].to_string()).collect::<Vec<_>>())
        .collect();
    assert_eq!(ids.len(), 1, "tracebacks task ids: {ids:?}");
    ids.into_iter().next().unwrap()
}

/// The job of the Jobs API submission in ray-2.60-jobs-serve: the job of the worker
/// whose pid the driver log prints as `(Aggregator pid=N)`.
fn submitted_job() -> String {
    let logs = logs_dir(&fixture("ray-2.60-jobs-serve"));
    let driver = files_named(&logs, &Regex::new(r"^job-driver-.*\.log$").unwrap());
    let pid = Regex::new(r"\(Aggregator pid=(\d+)\)").unwrap().captures(&read(&driver[0].0)).unwrap()[1].to_string();
    let re = Regex::new(&format!(r"^worker-[0-9a-f]{{56}}-([0-9a-f]{{8}})-{pid}\.out$")).unwrap();
    files_named(&logs, &re)[0].1[1].to_string()
}

/// The worker of ray-2.60-cpp-json-attempts that died of SIGSEGV, and its pid.
fn segfaulter() -> (String, u64) {
    let logs = logs_dir(&fixture("ray-2.60-cpp-json-attempts"));
    let re = Regex::new(r"^worker-([0-9a-f]{56})-[0-9a-f]{8}-(\d+)\.err$").unwrap();
    let hit: Vec<_> =
        files_named(&logs, &re).into_iter().filter(|(p, _)| read(p).contains("SIGSEGV received")).collect();
    assert_eq!(hit.len(), 1);
    (hit[0].1[1].to_string(), hit[0].1[2].parse().unwrap())
}

fn records(v: &Value) -> &Vec<Value> {
    v["records"].as_array().expect("records array")
}

#[test]
fn golden_actor_phoenix() {
    let (actor, _) = phoenix();
    let (_tmp, dir) = pinned_copy("ray-2.60-text");
    let json = trace(&[&dir], &["--actor-id", &actor, "--format", "json"]);
    assert_eq!(json.code, 0, "{}", json.stderr);
    golden("actor-phoenix.json", &json.stdout);
    let text = trace(&[&dir], &["--actor-id", &actor]);
    assert_eq!(text.code, 0, "{}", text.stderr);
    golden("actor-phoenix.txt", &text.stdout);
}

#[test]
fn golden_task_tracebacks() {
    let task = tracebacks_task();
    let (_tmp, dir) = pinned_copy("ray-2.60-text");
    let r = trace(&[&dir], &["--task-id", &task, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    golden("task-tracebacks.json", &r.stdout);
}

#[test]
fn golden_job_submission() {
    let job = submitted_job();
    let (_tmp, dir) = pinned_copy("ray-2.60-jobs-serve");
    let r = trace(&[&dir], &["--job-id", &job, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    golden("job-submission.json", &r.stdout);
}

#[test]
fn golden_worker_segfaulter() {
    let (worker, _) = segfaulter();
    let (_tmp, dir) = pinned_copy("ray-2.60-cpp-json-attempts");
    let r = trace(&[&dir], &["--worker-id", &worker, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    golden("worker-segfaulter.json", &r.stdout);
}

fn ts(v: &Value, k: &str) -> Option<jiff::Timestamp> {
    v.get(k).and_then(Value::as_str).map(|s| s.parse().unwrap_or_else(|e| panic!("bad time {s:?}: {e}")))
}

#[test]
fn actor_summary_has_both_incarnations_in_time_order() {
    let (actor, pids) = phoenix();
    let r = trace(&[&fixture("ray-2.60-text")], &["--actor-id", &actor, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json();
    let s = &v["summary"];
    assert_eq!(s["actor_id"], actor.as_str());
    assert_eq!(s["class"], "Phoenix");
    assert_eq!(s["restarts"], 1);
    let inc = s["incarnations"].as_array().unwrap();
    let got: BTreeSet<u64> = inc.iter().map(|i| i["pid"].as_u64().expect("pid")).collect();
    assert_eq!(got, pids, "incarnation pids");
    for w in inc.windows(2) {
        assert!(ts(&w[0], "start") <= ts(&w[1], "start"), "incarnations out of order: {w:?}");
    }
    for i in inc {
        assert!(ts(i, "start").is_some() && ts(i, "start") <= ts(i, "end"), "{i}");
    }
    assert_eq!(inc[0]["exit_type"], "SYSTEM_ERROR", "the first incarnation died by os._exit: {}", inc[0]);
    assert!(s["death_cause"].is_string(), "{s}");
    let recs = records(&v);
    let msgs: Vec<&str> = recs.iter().filter_map(|r| r["message"].as_str()).collect();
    for pid in &pids {
        assert!(msgs.contains(&format!("Phoenix started in pid {pid}").as_str()), "stdout line of pid {pid} missing");
    }
    let gcs_exit =
        |r: &&Value| r["component"] == "gcs_server" && r["message"].as_str().unwrap().contains(" exits, type=");
    assert!(recs.iter().any(|r| gcs_exit(&r)), "GCS worker-exit line missing");
    assert!(recs.iter().any(|r| r["fields"]["label"] == "RAY_WORKER_FAILURE"), "worker failure event missing");
}

#[test]
fn records_are_sorted_by_time() {
    let (actor, _) = phoenix();
    for flags in [["--actor-id", actor.as_str()], ["--job-id", "01000000"]] {
        let v = trace(&[&fixture("ray-2.60-text")], &[flags[0], flags[1], "--format", "json"]).json();
        let times: Vec<_> = records(&v).iter().map(|r| ts(r, "timestamp").expect("every record has a time")).collect();
        assert!(times.len() > 10);
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{flags:?}: records out of time order");
    }
}

#[test]
fn task_trace_shows_the_exception() {
    let task = tracebacks_task();
    let dir = fixture("ray-2.60-text");
    let v = trace(&[&dir], &["--task-id", &task, "--format", "json"]).json();
    let s = &v["summary"];
    assert_eq!(s["name"], "tracebacks");
    let msg = s["exception"]["message"].as_str().expect("exception message");
    assert!(msg.contains("Traceback (most recent call last)") && msg.contains("ZeroDivisionError"), "{msg}");
    assert_eq!(s["attempts"].as_array().unwrap().len(), 1);
    // Its untagged stdout lines come from the worker that ran it.
    assert!(records(&v).iter().any(|r| r["stream"] == "stdout" && r["message"] == "before an empty line"));
    let text = trace(&[&dir], &["--task-id", &task]);
    assert_eq!(text.code, 0);
    assert!(text.stdout.contains("ZeroDivisionError: division by zero"), "{}", text.stdout);
}

#[test]
fn context_adds_records_before_an_error_from_the_same_file() {
    let task = tracebacks_task();
    let dir = fixture("ray-2.60-text");
    let plain = trace(&[&dir], &["--task-id", &task, "--format", "json"]).json();
    assert!(!records(&plain).is_empty(), "no traced records: the `all` below would be vacuous");
    assert!(records(&plain).iter().all(|r| r.get("context").is_none()));
    let v = trace(&[&dir], &["--task-id", &task, "--format", "json", "--context", "2"]).json();
    let recs = records(&v);
    let ctx: Vec<&Value> = recs.iter().filter(|r| r["context"] == true).collect();
    assert!(!ctx.is_empty(), "no context records");
    assert_eq!(v["summary"]["context_records"], ctx.len());
    assert_eq!(recs.len() - ctx.len(), records(&plain).len(), "context changed the traced records");
    let errors: Vec<&Value> = recs.iter().filter(|r| r["level"] == "ERROR" && r.get("context").is_none()).collect();
    let mut per_error: BTreeMap<(String, u64), usize> = BTreeMap::new();
    for c in &ctx {
        assert_ne!(c["task_id"].as_str(), Some(task.as_str()), "a traced record marked as context: {c}");
        // The first traced error after it in its file is what it is context for.
        let next = errors
            .iter()
            .filter(|e| e["file"] == c["file"] && e["offset"].as_u64() > c["offset"].as_u64())
            .min_by_key(|e| e["offset"].as_u64())
            .unwrap_or_else(|| panic!("context record with no later error in its file: {c}"));
        *per_error.entry((next["file"].to_string(), next["offset"].as_u64().unwrap())).or_default() += 1;
    }
    assert!(per_error.values().all(|n| *n <= 2), "more than 2 context records before one error: {per_error:?}");
    let text = trace(&[&dir], &["--task-id", &task, "--context", "2"]);
    assert!(text.stdout.lines().any(|l| l.starts_with("- ")), "no context gutter in text:\n{}", text.stdout);
}

#[test]
fn exactly_one_id_flag() {
    let dir = fixture("ray-2.60-text");
    let none = trace(&[&dir], &[]);
    assert_eq!(none.code, 2, "{}", none.stderr);
    assert!(none.stderr.contains("--actor-id") && none.stdout.is_empty(), "{}", none.stderr);
    let two = trace(&[&dir], &["--job-id", "01000000", "--worker-id", "abcd"]);
    assert_eq!(two.code, 2, "{}", two.stderr);
    assert!(two.stderr.contains("cannot be used with"), "{}", two.stderr);
    let bad = trace(&[&dir], &["--task-id", "xyz!"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("--task-id"), "{}", bad.stderr);
}

#[test]
fn nothing_matched_exits_1() {
    let r = trace(&[&fixture("ray-2.60-text")], &["--job-id", "7f000000"]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(r.stdout.is_empty() && r.stderr.contains("7f000000"), "{}", r.stderr);
}

/// The node a fixture's raylet announces.
fn node_of(fixture_name: &str) -> String {
    let raylet = read(&logs_dir(&fixture(fixture_name)).join("raylet.out"));
    let re = Regex::new(r"Setting node ID.*?node_id=([0-9a-f]{56})").unwrap();
    re.captures(&raylet).unwrap_or_else(|| panic!("{fixture_name}: no node id in raylet.out"))[1].to_string()
}

fn session_of(fixture_name: &str) -> String {
    logs_dir(&fixture(fixture_name)).parent().unwrap().file_name().unwrap().to_string_lossy().into_owned()
}

#[test]
fn two_logs_dirs_at_once_keep_each_records_node() {
    let (a, b) = ("ray-2.60-text", "ray-2.40-text");
    let nodes: BTreeMap<String, String> = [a, b].iter().map(|f| (session_of(f), node_of(f))).collect();
    let r = trace(&[&fixture(a), &fixture(b)], &["--job-id", "01000000", "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v = r.json();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for rec in records(&v) {
        let session = rec["session"].as_str().expect("session").to_string();
        if let Some(n) = rec["node_id"].as_str() {
            seen.entry(session).or_default().insert(n.to_string());
        }
    }
    assert_eq!(seen.len(), 2, "records from both dirs: {:?}", seen.keys());
    for (session, ns) in &seen {
        assert_eq!(ns, &BTreeSet::from([nodes[session].clone()]), "{session}: records carry another node");
    }
    let summary_nodes: BTreeSet<String> =
        v["summary"]["nodes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
    assert_eq!(summary_nodes, nodes.values().cloned().collect());
}

#[test]
fn worker_trace_names_the_crash() {
    let (worker, pid) = segfaulter();
    let r = trace(&[&fixture("ray-2.60-cpp-json-attempts")], &["--worker-id", &worker[..12], "--format", "json"]);
    let s = &r.json()["summary"];
    assert_eq!(s["worker_id"], worker.as_str());
    assert_eq!(s["pid"], pid);
    assert_eq!(s["signal"], "SIGSEGV");
    assert_eq!(s["exit_type"], "SYSTEM_ERROR");
    assert_eq!(s["actor_class"], "Segfaulter");
}
