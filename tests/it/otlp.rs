//! `type = "otlp"` sinks (#22) checked from outside raylog:
//! - into a real Grafana Loki 3.4.5 (`/otlp`, stock limits, [`RealLoki`]): every
//!   record of every fixture and of a `raycorpus.py` tree spanning three hours is
//!   stored once, nothing discarded, an actor's records (its prints included) are
//!   found by `ray_actor_id`, and Loki's `detected_level` follows the record's level;
//! - into a capture receiver that decodes with the OpenTelemetry project's own
//!   generated classes (`tests/otlp/receiver.py`, PyPI `opentelemetry-proto` in a venv
//!   `tests/otlp/setup-venv.sh` builds once per machine): every field of every record,
//!   protobuf and OTLP/JSON, gzip or not, against `raylog parse`'s record.
//!
//! Each needs something from outside the repo: `RAYLOG_LOKI_BIN`, `RAYLOG_BENCH_DIR`
//! (`../shared/bench`, set by `.ci/run`) or PyPI the first time, so each is
//! `#[ignore]`d; run with `--include-ignored` and without it, a test fails naming
//! what is missing and how to get it (docs/testing.md).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

use crate::loki_real::RealLoki;
use crate::ship_loki::{dead_letters, ship_once, ship_once_at, Scratch};
use crate::tree::{now_secs, record_count, shifted_copy};
use crate::util::{fixture_dirs, logs_dir};

const NS: i128 = 1_000_000_000;

/// A config shipping `ray` to the OTLP receiver at `endpoint` as node `n1` of
/// `cluster`; `sink` adds keys to the sink, `node` to `[node]`.
fn config(dir: &Path, ray: &Path, state: &Path, endpoint: &str, cluster: &str, sink: &str, node: &str) -> PathBuf {
    let text = format!(
        "[source]\npaths = [{ray:?}]\nstate_dir = {state:?}\npoll_interval = \"200ms\"\n\
         [node]\nname = \"n1\"\ncluster = \"{cluster}\"\n{node}\n[api]\naddress = \"\"\n\
         [[sinks]]\ntype = \"otlp\"\nendpoint = \"{endpoint}\"\n{sink}\n"
    );
    let p = dir.join(format!("{cluster}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// `raylog parse PATH`'s records, less those of `debug_state*.txt` (which `ship`
/// excludes by default).
fn parsed(path: &Path) -> Vec<Value> {
    let out = Command::new(env!("CARGO_BIN_EXE_raylog")).args(["parse", "-q"]).arg(path).output().unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "raylog parse {}: {out:?}", path.display());
    let recs: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| {
            let f = r["file"].as_str().unwrap();
            !(f.starts_with("debug_state") && f.ends_with(".txt"))
        })
        .collect();
    assert_eq!(recs.len() as u64, record_count(&[path.to_path_buf()]), "raylog parse vs the records ship sends");
    recs
}

/// Records by `(file, offset)`, each once.
fn by_place(recs: Vec<Value>) -> BTreeMap<(String, u64), Value> {
    let mut out = BTreeMap::new();
    for r in recs {
        let key = (r["file"].as_str().unwrap().to_string(), r["offset"].as_u64().unwrap());
        assert!(out.insert(key.clone(), r).is_none(), "two records at {key:?}");
    }
    out
}

/// The record's time in Unix ns, and how far past it the sent time may be: below
/// the record's own precision, or (a time-less record, which shares the time before
/// it) its byte offset in units of 100 ns plus < 100 ns.
fn time_window(r: &Value) -> (i128, i128) {
    let t: jiff::Timestamp = r["timestamp"].as_str().unwrap().parse().unwrap();
    let ns = t.as_nanosecond();
    let width = if r.get("timestamp_inferred").is_some() {
        (r["offset"].as_u64().unwrap() % 10_000_000) as i128 * 100 + 100
    } else if ns % 1_000_000 == 0 {
        1_000_000
    } else {
        // Microseconds, or nanoseconds: a time already in nanoseconds gets an offset
        // under a microsecond (Loki's /otlp stores entries alike in time and line once).
        1_000
    };
    (ns, width)
}

/// Loki's `detected_level` for a Ray level, as Loki 3.4.5 derives it from
/// `severity_text`/`severity_number` (found by experiment).
fn loki_level(level: Option<&str>) -> &'static str {
    match level {
        Some("TRACE") => "trace",
        Some("DEBUG") => "debug",
        Some("INFO") => "info",
        Some("WARNING") => "warn",
        Some("ERROR") => "error",
        Some("FATAL") => "fatal",
        Some(other) => panic!("level {other}"),
        None => "unknown",
    }
}

/// `severity_number` of the OpenTelemetry log data model.
fn severity_number(level: &str) -> u64 {
    match level {
        "TRACE" => 1,
        "DEBUG" => 5,
        "INFO" => 9,
        "WARNING" => 13,
        "ERROR" => 17,
        "FATAL" => 21,
        other => panic!("level {other}"),
    }
}

/// Loki 3.4.5 detects a level in the text of an entry that has no severity: a
/// record without a level whose message holds one of these gets it (`stderr: …`
/// contains `err:`), which raylog cannot prevent.
fn loki_guesses_a_level(message: &str) -> bool {
    let m = message.to_lowercase();
    ["err", "warn", "info", "debug", "trace", "fatal", "crit", "panic"].iter().any(|k| m.contains(k))
}

/// Checks every entry Loki returned for the records of `want` (cluster → records by
/// place): one entry per record, its line the message, its time within the record's
/// precision, its level metadata and `detected_level` the record's level. Returns
/// the level-less records Loki gave a level from their text.
fn check_loki_entries(
    entries: &[(i64, String, BTreeMap<String, String>)],
    want: &BTreeMap<String, BTreeMap<(String, u64), Value>>,
) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut guessed = vec![];
    for (ts, line, labels) in entries {
        let get = |k: &str| labels.get(k).map(String::as_str);
        let cluster = get("k8s_cluster_name").unwrap_or_else(|| panic!("no k8s_cluster_name: {labels:?}"));
        let place = (get("ray_file").unwrap().to_string(), get("ray_offset").unwrap().parse::<u64>().unwrap());
        let r = want[cluster].get(&place).unwrap_or_else(|| panic!("{cluster} {place:?}: no such record"));
        assert!(seen.insert((cluster.to_string(), place.clone())), "{cluster} {place:?} stored twice");
        assert_eq!(line, r["message"].as_str().unwrap(), "{cluster} {place:?}");
        let (t, width) = time_window(r);
        assert!(
            (*ts as i128) >= t && (*ts as i128) < t + width,
            "{cluster} {place:?}: time {ts} for {}",
            r["timestamp"]
        );
        assert_eq!(get("service_name"), Some("ray"));
        assert_eq!(get("service_instance_id"), Some("n1"));
        assert_eq!(get("ray_component"), r["component"].as_str(), "{cluster} {place:?}");
        assert_eq!(get("ray_actor_id"), r["actor_id"].as_str(), "{cluster} {place:?}");
        assert_eq!(get("ray_task_id"), r["task_id"].as_str(), "{cluster} {place:?}");
        let level = r["level"].as_str();
        assert_eq!(get("severity_text"), level, "{cluster} {place:?}");
        assert_eq!(get("severity_number"), level.map(|l| severity_number(l).to_string()).as_deref());
        let detected = get("detected_level").unwrap();
        if level.is_none() && detected != "unknown" {
            let m = r["message"].as_str().unwrap();
            assert!(loki_guesses_a_level(m), "{cluster} {place:?}: no level, detected {detected}: {m:?}");
            guessed.push(format!("{detected}: {m:?}"));
        } else {
            assert_eq!(detected, loki_level(level), "{cluster} {place:?}: {level:?}");
        }
    }
    let total: usize = want.values().map(BTreeMap::len).sum();
    assert_eq!(seen.len(), total, "entries stored vs records parsed");
    guessed
}

/// The `(file, offset)` of every entry `query` returns.
fn places(loki: &RealLoki, query: &str) -> BTreeSet<(String, u64)> {
    let entries = loki.all_entries_by(query, 1000);
    let out: BTreeSet<_> =
        entries.iter().map(|(_, _, l)| (l["ray_file"].clone(), l["ray_offset"].parse::<u64>().unwrap())).collect();
    assert_eq!(out.len(), entries.len(), "{query}: an entry twice");
    out
}

/// An actor with prints in `recs`, and the places of all its records.
fn an_actor_with_prints(recs: &BTreeMap<(String, u64), Value>) -> (String, BTreeSet<(String, u64)>) {
    let actor = recs
        .values()
        .find(|r| r["stream"] == "stdout" && r["actor_id"].is_string() && r["component"] == "worker")
        .expect("an actor's print")["actor_id"]
        .as_str()
        .unwrap()
        .to_string();
    let places = recs.iter().filter(|(_, r)| r["actor_id"] == actor.as_str()).map(|(k, _)| k.clone()).collect();
    (actor, places)
}

/// Checks Loki finds `actor`'s records, and only them, by `ray_actor_id`.
fn check_actor(loki: &RealLoki, cluster: &str, actor: &str, want: &BTreeSet<(String, u64)>) {
    let q = format!("{{service_name=\"ray\", k8s_cluster_name=\"{cluster}\"}} | ray_actor_id=\"{actor}\"");
    let got = places(loki, &q);
    assert_eq!(&got, want, "{q}");
    let prints = loki.entries(&format!("{q} | log_iostream=\"stdout\"")).len();
    assert!(prints > 0, "{q}: the actor's prints");
    eprintln!("{cluster}: actor {actor}: {} records, {prints} of them prints", got.len());
}

/// `{level: n}` per Loki's `detected_level` for `selector`.
fn level_counts(loki: &RealLoki, selector: &str) -> BTreeMap<String, u64> {
    loki.counts(selector, "detected_level")
}

fn want_levels(recs: &BTreeMap<(String, u64), Value>) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for r in recs.values() {
        *out.entry(loki_level(r["level"].as_str()).to_string()).or_default() += 1;
    }
    out
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki): ../shared/loki/start-loki.sh --path"]
fn otlp_real_loki_stores_every_fixture_record_with_ids_and_levels() {
    let loki = RealLoki::start("otlp-fixtures", "");
    let tmp = Scratch::new("otlp-fixtures");
    let endpoint = format!("{}/otlp", loki.url());
    let mut want = BTreeMap::new();
    for (i, fixture) in fixture_dirs().iter().enumerate() {
        let cluster = format!("fixture{i}");
        let dst = tmp.0.join(&cluster);
        std::fs::create_dir_all(&dst).unwrap();
        // Loki refuses entries older than 7 days: whole days forward, as ship_loki does.
        shifted_copy(logs_dir(fixture).parent().unwrap(), &dst);
        // As Ray left them: every file last written at the session's last logged
        // time, not at the copy's. Time-less lines are dated by their file's mtime,
        // and Loki's `/otlp` makes one stream per node, so lines dated hours after
        // the rest would put the node's other records outside Loki's 1 h
        // out-of-order window (refused `too far behind`; see the report of #22).
        let last = parsed(&dst)
            .iter()
            .filter(|r| r.get("timestamp_inferred").is_none())
            .map(|r| r["timestamp"].as_str().unwrap().parse::<jiff::Timestamp>().unwrap())
            .max()
            .unwrap();
        set_mtimes(&dst, std::time::SystemTime::from(last));
        // No writer's count for a recorded session (fixtures/README.md): the records
        // raylog parse reads are the expectation.
        let recs = by_place(parsed(&dst));
        let state = tmp.0.join(format!("state-{cluster}"));
        let err = ship_once(&config(&tmp.0, &dst, &state, &endpoint, &cluster, "", ""));
        assert!(dead_letters(&state).is_empty(), "{cluster}: dead letters:\n{err}");
        want.insert(cluster, recs);
    }
    let total: u64 = want.values().map(|r| r.len() as u64).sum();
    assert_eq!(loki.stored("{service_name=\"ray\"}", total), total);
    let by_cluster = loki.counts("{service_name=\"ray\"}", "k8s_cluster_name");
    let want_counts: BTreeMap<String, u64> = want.iter().map(|(c, r)| (c.clone(), r.len() as u64)).collect();
    assert_eq!(by_cluster, want_counts, "stored per fixture vs records parsed");
    let discarded = loki.discarded();
    assert!(discarded.is_empty(), "Loki discarded entries: {discarded:?}");

    let guessed = check_loki_entries(&loki.all_entries_by("{service_name=\"ray\"}", 1000), &want);
    eprintln!("fixtures: {total} records stored; Loki gave {} level-less records a level: {guessed:?}", guessed.len());
    // The detected_level filter finds exactly the records of each level.
    let mut levels = BTreeMap::new();
    for recs in want.values() {
        for (l, n) in want_levels(recs) {
            *levels.entry(l).or_insert(0) += n;
        }
    }
    for l in ["info", "warn", "error"] {
        let n = loki.counts(&format!("{{service_name=\"ray\"}} | detected_level=\"{l}\""), "").values().sum::<u64>();
        let extra = guessed.iter().filter(|g| g.starts_with(&format!("{l}:"))).count() as u64;
        assert_eq!(n, levels[l] + extra, "detected_level=\"{l}\"");
    }

    let text = fixture_dirs().iter().position(|f| f.ends_with("ray-2.60-text")).expect("ray-2.60-text");
    let cluster = format!("fixture{text}");
    let (actor, places) = an_actor_with_prints(&want[&cluster]);
    check_actor(&loki, &cluster, &actor, &places);
}

/// Sets the mtime of every file under `dir`.
fn set_mtimes(dir: &Path, t: std::time::SystemTime) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            set_mtimes(&p, t);
        } else if p.is_file() {
            std::fs::File::options().write(true).open(&p).unwrap().set_modified(t).unwrap();
        }
    }
}

/// `../shared/bench`, from `RAYLOG_BENCH_DIR`. Panics when it is unset: the tests
/// that need it are `#[ignore]`d, and run with `--include-ignored` must not pass
/// without it.
pub(crate) fn bench_dir(test: &str) -> PathBuf {
    let Some(p) = std::env::var_os("RAYLOG_BENCH_DIR") else {
        panic!("{test} needs raycorpus.py: RAYLOG_BENCH_DIR=$(cd ../shared/bench && pwd) (.ci/run sets it)")
    };
    let p = PathBuf::from(p);
    assert!(p.join("raycorpus.py").is_file(), "RAYLOG_BENCH_DIR={} has no raycorpus.py", p.display());
    p
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki), RAYLOG_BENCH_DIR (raycorpus.py): ../shared/loki/start-loki.sh --path; ../shared/bench"]
fn otlp_real_loki_backfill_of_a_corpus_spanning_three_hours() {
    let bench = bench_dir("otlp-corpus");
    let loki = RealLoki::start("otlp-corpus", "");
    let tmp = Scratch::new("otlp-corpus");
    let ray = tmp.0.join("ray");
    let out = Command::new("python3")
        .arg(bench.join("raycorpus.py"))
        .args(["generate", "--size-mb", "3", "--seed", "22", "--workers", "6", "--start", "now-3h"])
        .args(["--span-hours", "3", "--out"])
        .arg(&ray)
        .output()
        .unwrap();
    assert!(out.status.success(), "raycorpus.py: {out:?}");
    // What Loki must store is what raycorpus.py wrote (its manifest), not what
    // raylog's parser reads; the parsed records say what each entry must hold.
    let manifest: Value = serde_json::from_slice(&std::fs::read(ray.join("manifest.json")).unwrap()).unwrap();
    let n = manifest["records"].as_u64().expect("the manifest's record count");
    let recs = by_place(parsed(&ray));
    assert_eq!(recs.len() as u64, n, "records raylog parse reads vs the manifest's");
    eprintln!("corpus: {n} records, {}", String::from_utf8_lossy(&out.stdout).trim());
    let state = tmp.0.join("state");
    let started = std::time::Instant::now();
    let err = ship_once_at(&config(&tmp.0, &ray, &state, &format!("{}/otlp", loki.url()), "corpus", "", ""), "info");
    let took = started.elapsed();
    assert!(dead_letters(&state).is_empty(), "dead letters:\n{err}");
    assert_eq!(loki.stored("{service_name=\"ray\"}", n), n);
    let want = BTreeMap::from([("corpus".to_string(), recs)]);
    let guessed = check_loki_entries(&loki.all_entries_by("{service_name=\"ray\"}", 1000), &want);
    let mut levels = want_levels(&want["corpus"]);
    for g in &guessed {
        *levels.get_mut("unknown").unwrap() -= 1;
        *levels.entry(g.split(':').next().unwrap().to_string()).or_default() += 1;
    }
    assert_eq!(level_counts(&loki, "{service_name=\"ray\"}"), levels, "by detected_level");
    let (actor, places) = an_actor_with_prints(&want["corpus"]);
    check_actor(&loki, "corpus", &actor, &places);
    // Whatever Loki discarded is a push it refused whole with 429 (the OTLP sink is
    // unpaced until Loki states its rate), which raylog sent again: the counts above
    // say every record is stored. Anything else is a loss.
    let discarded = loki.discarded();
    assert!(discarded.keys().all(|k| k == "rate_limited"), "Loki discarded {discarded:?}:\n{err}");
    assert!(discarded.is_empty() || err.contains("pacing pushes below it"), "{discarded:?} without a 429:\n{err}");
    eprintln!(
        "corpus: {n} records ({} bytes per manifest) shipped in {took:?}; discarded {discarded:?}; \
         level-less records Loki gave a level: {}",
        manifest["bytes"],
        guessed.len()
    );
}

/// The receiver's python: `tests/otlp/setup-venv.sh` installs its venv the first
/// time. Panics when that fails: the tests that need it are `#[ignore]`d.
pub(crate) fn otlp_python(test: &str) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/setup-venv.sh");
    let out = Command::new("bash").arg(&script).stderr(Stdio::inherit()).output().expect("run setup-venv.sh");
    assert!(
        out.status.success(),
        "{test} needs the independent OTLP decoder: bash tests/otlp/setup-venv.sh failed (it needs python3 and PyPI access once)"
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// `tests/otlp/receiver.py`, killed on drop.
pub(crate) struct Receiver {
    child: Child,
    pub(crate) port: u16,
    out: PathBuf,
}

impl Receiver {
    pub(crate) fn start(python: &Path, out: PathBuf) -> Receiver {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otlp/receiver.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg("--out")
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("port ").and_then(|p| p.parse().ok());
        let Some(port) = port else {
            let _ = child.kill();
            panic!("receiver.py did not start: {line:?}");
        };
        Receiver { child, port, out }
    }

    /// Every line written so far.
    pub(crate) fn lines(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An OTLP `AnyValue` as `MessageToDict` writes it, as plain JSON.
fn any(v: &Value) -> Value {
    let o = v.as_object().unwrap_or_else(|| panic!("AnyValue {v}"));
    let Some((k, x)) = o.iter().next() else { return Value::Null };
    assert_eq!(o.len(), 1, "AnyValue with two values: {v}");
    match k.as_str() {
        "stringValue" | "boolValue" | "doubleValue" => x.clone(),
        "intValue" => Value::from(x.as_str().unwrap().parse::<i64>().unwrap()),
        "arrayValue" => {
            Value::Array(x.get("values").and_then(Value::as_array).into_iter().flatten().map(any).collect())
        }
        "kvlistValue" => Value::Object(kv_map(x.get("values").unwrap_or(&Value::Null), "kvlist")),
        other => panic!("unexpected AnyValue {other}: {v}"),
    }
}

/// Repeated `KeyValue`s as a map; a key twice is an error.
fn kv_map(kvs: &Value, what: &str) -> serde_json::Map<String, Value> {
    let (out, twice) = kv_map_twice(kvs);
    assert!(twice.is_empty(), "{what}: keys twice: {twice:?}");
    out
}

/// Repeated `KeyValue`s as a map (the first value of a key), and the keys that
/// came again with their later values (OTLP: keys MUST be unique).
fn kv_map_twice(kvs: &Value) -> (serde_json::Map<String, Value>, Vec<(String, Value)>) {
    let (mut out, mut twice) = (serde_json::Map::new(), vec![]);
    for kv in kvs.as_array().into_iter().flatten() {
        let k = kv["key"].as_str().unwrap().to_string();
        let v = kv.get("value").map(any).unwrap_or(Value::Null);
        if out.contains_key(&k) {
            twice.push((k, v));
        } else {
            out.insert(k, v);
        }
    }
    (out, twice)
}

/// JSON values equal, numbers by value (OTLP has int and double; JSON one number).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        // An integer beyond 64 bits goes as its text.
        (Value::Number(x), Value::String(s)) if x.as_i64().is_none() => s.parse::<f64>().ok() == x.as_f64(),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(a, b)| same(a, b)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// `gcs_server.cc:1322` → (`gcs_server.cc`, 1322), as `code.*` attributes take it.
fn code_location(s: &str) -> Option<(&str, i64)> {
    let (file, line) = s.rsplit_once(':')?;
    if file.is_empty() || line.is_empty() || line.len() > 9 || !line.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((file, line.parse().ok()?))
}

/// The attributes a `LogRecord` must have for record `r` of the logs dir `logs`.
fn want_attrs(r: &Value, logs: &Path) -> BTreeMap<String, Value> {
    let mut a = BTreeMap::new();
    let fields = r.get("fields").and_then(Value::as_object).cloned().unwrap_or_default();
    for (k, v) in r.as_object().unwrap() {
        match k.as_str() {
            "timestamp" | "level" | "message" => {} // the record's own fields
            // An empty text is sent as no attribute.
            "component" | "session" | "submission_id" | "task_name" | "actor_name" if v == "" => {}
            "node_id"
            | "job_id"
            | "worker_id"
            | "actor_id"
            | "task_id"
            | "component"
            | "session"
            | "submission_id"
            | "task_name"
            | "actor_name"
            | "timestamp_inferred"
            | "truncated"
            | "timestamp_estimated" => {
                a.insert(format!("ray.{k}"), v.clone());
            }
            "file" => {
                let f = v.as_str().unwrap();
                a.insert("ray.file".into(), v.clone());
                a.insert("log.file.name".into(), Value::from(f.rsplit('/').next().unwrap()));
                a.insert("log.file.path".into(), Value::from(logs.join(f).to_str().unwrap()));
            }
            "offset" => {
                a.insert("ray.offset".into(), v.clone());
            }
            "stream" => {
                a.insert("log.iostream".into(), v.clone());
            }
            "pid" => {
                a.insert("process.pid".into(), v.clone());
            }
            "fields" => {
                for (fk, fv) in &fields {
                    match (fk.as_str(), fv.as_str().and_then(code_location)) {
                        ("source", Some((file, line))) => {
                            a.insert("code.filepath".into(), Value::from(file));
                            a.insert("code.lineno".into(), Value::from(line));
                        }
                        // Named like a record field that has an attribute of its own.
                        _ if r.get(fk).is_some_and(|v| v != "") => {
                            a.insert(format!("ray.fields.{fk}"), fv.clone());
                        }
                        _ => {
                            a.insert(format!("ray.{fk}"), fv.clone());
                        }
                    }
                }
            }
            other => panic!("record field {other} has no OTLP mapping in this test: {r}"),
        }
    }
    // Every kind of event is found by ray.event_type and ray.state.
    let component = r["component"].as_str().unwrap_or("");
    let event_type = match component {
        "export_event" => fields.get("source_type"),
        "event" => fields.get("label"),
        _ => None,
    };
    if let (Some(t), false) = (event_type, fields.contains_key("event_type")) {
        a.insert("ray.event_type".into(), t.clone());
    }
    if let (Some(s), false) = (fields.get("event_data").and_then(|d| d.get("state")), fields.contains_key("state")) {
        a.insert("ray.state".into(), s.clone());
    }
    a
}

/// Checks one received `LogRecord` against `raylog parse`'s record; the mismatches.
fn check_record(
    r: &Value,
    logs: &Path,
    got: &Value,
    observed: (i128, i128),
    uids: &mut BTreeSet<String>,
) -> Vec<String> {
    let mut bad = vec![];
    let (mut attrs, twice) = kv_map_twice(&got["attributes"]);
    for (k, v) in twice {
        bad.push(format!("attribute {k} twice: {} then {v}", attrs[&k]));
    }
    let uid = attrs.remove("log.record.uid").unwrap_or(Value::Null);
    let uid = uid.as_str().unwrap_or("");
    if uid.len() != 32 || !uid.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        bad.push(format!("log.record.uid {uid:?}"));
    }
    if !uids.insert(uid.to_string()) {
        bad.push(format!("log.record.uid {uid} twice"));
    }
    if got["body"] != serde_json::json!({"stringValue": r["message"]}) {
        bad.push(format!("body {} vs message {}", got["body"], r["message"]));
    }
    let num = |k: &str| got.get(k).and_then(Value::as_str).and_then(|s| s.parse::<i128>().ok());
    let (t, width) = time_window(r);
    match num("timeUnixNano") {
        Some(ts) if ts >= t && ts < t + width => {}
        other => bad.push(format!("timeUnixNano {other:?} for {} (window {width} ns)", r["timestamp"])),
    }
    match num("observedTimeUnixNano") {
        Some(o) if o >= observed.0 && o <= observed.1 => {}
        other => bad.push(format!("observedTimeUnixNano {other:?} outside the run {observed:?}")),
    }
    let severity = (got.get("severityNumber").and_then(Value::as_u64), got.get("severityText").and_then(Value::as_str));
    let want_severity = match r["level"].as_str() {
        Some(l) => (Some(severity_number(l)), Some(l)),
        None => (None, None),
    };
    if severity != want_severity {
        bad.push(format!("severity {severity:?} vs level {}", r["level"]));
    }
    let want = want_attrs(r, logs);
    for (k, v) in &want {
        match attrs.get(k) {
            Some(g) if same(v, g) => {}
            g => bad.push(format!("attribute {k}: {g:?}, want {v}")),
        }
    }
    for (k, v) in &attrs {
        if !want.contains_key(k) {
            bad.push(format!("attribute {k}={v} that the record does not have"));
        }
    }
    let expected_keys =
        ["timeUnixNano", "observedTimeUnixNano", "severityNumber", "severityText", "body", "attributes"];
    for k in got.as_object().unwrap().keys().filter(|k| !expected_keys.contains(&k.as_str())) {
        bad.push(format!("LogRecord field {k}"));
    }
    bad
}

#[test]
#[ignore = "needs the OTLP decoder venv (PyPI once): bash tests/otlp/setup-venv.sh"]
fn otlp_independent_decoder_reads_every_field_of_every_record() {
    let python = otlp_python("otlp-decoder");
    let tmp = Scratch::new("otlp-decoder");
    let rx = Receiver::start(&python, tmp.0.join("received.ndjson"));
    let endpoint = format!("http://127.0.0.1:{}", rx.port);
    let node = "labels = { team = \"raylog\", \"ray.io/node-type\" = \"head\" }";
    let sink = "service_namespace = \"ml\"\nresource_attributes = { \"deployment.environment.name\" = \"test\" }";
    // (cluster, fixture, encoding, gzip): every fixture in protobuf + gzip, some also
    // in OTLP/JSON and without compression.
    let mut runs = vec![];
    for f in fixture_dirs() {
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        runs.push((format!("{name}-protobuf-gzip"), f.clone(), "protobuf", true));
        if name.contains("events") || name.contains("json") {
            runs.push((format!("{name}-json-gzip"), f.clone(), "json", true));
        }
        if name == "ray-2.60-text" || name == "ray-2.60-jobs-serve" {
            runs.push((format!("{name}-json-none"), f.clone(), "json", false));
            runs.push((format!("{name}-protobuf-none"), f.clone(), "protobuf", false));
        }
    }
    let t0 = (now_secs() as i128 - 1) * NS;
    for (cluster, fixture, encoding, gzip) in &runs {
        let compression = if *gzip { "gzip" } else { "none" };
        let sink = format!("{sink}\nencoding = \"{encoding}\"\ncompression = \"{compression}\"");
        let state = tmp.0.join(format!("state-{cluster}"));
        let err = ship_once(&config(&tmp.0, fixture, &state, &endpoint, cluster, &sink, node));
        assert!(dead_letters(&state).is_empty(), "{cluster}: dead letters:\n{err}");
    }
    let t1 = (now_secs() as i128 + 1) * NS;

    let lines = rx.lines();
    let errors: Vec<&Value> = lines.iter().filter(|l| l.get("error").is_some()).collect();
    assert!(errors.is_empty(), "the receiver refused requests: {errors:?}");
    let mut received: BTreeMap<String, Vec<&Value>> = BTreeMap::new();
    for l in &lines {
        let resource = kv_map(&l["resource"]["attributes"], "resource");
        let cluster = resource["k8s.cluster.name"].as_str().unwrap().to_string();
        received.entry(cluster).or_default().push(l);
    }
    let mut uids = BTreeSet::new();
    let (mut total, mut problems) = (0, vec![]);
    for (cluster, fixture, encoding, gzip) in &runs {
        let mut want = by_place(parsed(fixture));
        let got = received.remove(cluster).unwrap_or_default();
        assert_eq!(got.len(), want.len(), "{cluster}: records received vs parsed");
        let resource: Value = serde_json::json!({
            "service.name": "ray", "service.namespace": "ml", "service.instance.id": "n1",
            "k8s.cluster.name": cluster, "k8s.node.name": "n1", "host.name": "n1",
            "deployment.environment.name": "test", "team": "raylog", "ray.io/node-type": "head",
        });
        let scope = serde_json::json!({"name": "raylog", "version": env!("CARGO_PKG_VERSION")});
        let mut uids_here = BTreeSet::new();
        for l in got {
            assert_eq!((l["encoding"].as_str(), l["gzip"].as_bool()), (Some(*encoding), Some(*gzip)), "{cluster}");
            assert_eq!(Value::Object(kv_map(&l["resource"]["attributes"], "resource")), resource, "{cluster}");
            assert_eq!(l["scope"], scope, "{cluster}");
            let rec = &l["record"];
            let attrs = kv_map_twice(&rec["attributes"]).0;
            let place = (
                attrs.get("ray.file").and_then(Value::as_str).unwrap_or("?").to_string(),
                attrs.get("ray.offset").and_then(Value::as_u64).unwrap_or(u64::MAX),
            );
            let Some(r) = want.remove(&place) else { panic!("{cluster}: {place:?} received twice or not parsed") };
            for b in check_record(&r, &logs_dir(fixture), rec, (t0, t1), &mut uids_here) {
                problems.push(format!("{cluster} {place:?}: {b}"));
            }
            total += 1;
        }
        assert!(want.is_empty(), "{cluster}: not received: {:?}", want.keys().collect::<Vec<_>>());
        // The same record sent twice (another encoding) keeps its uid.
        uids.extend(uids_here);
    }
    assert!(received.is_empty(), "records of no run: {:?}", received.keys().collect::<Vec<_>>());
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for p in &problems {
        let kind = p.split(": ").nth(1).unwrap_or("").split([' ', '=']).take(2).collect::<Vec<_>>().join(" ");
        *kinds.entry(kind).or_default() += 1;
    }
    assert!(
        problems.is_empty(),
        "{} mismatches {kinds:?}; the first:\n{}",
        problems.len(),
        problems
            .iter()
            .filter(|p| !p.contains("timestamp_estimated"))
            .chain(problems.iter())
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!(
        "decoder: {total} records in {} runs, every field as raylog parse has it; {} distinct uids",
        runs.len(),
        uids.len()
    );
}
