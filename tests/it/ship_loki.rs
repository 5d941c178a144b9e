//! `raylog ship` into a real Grafana Loki 3.4.5 with stock limits ([`RealLoki`]),
//! checked by querying it back: every record stored exactly once, nothing discarded
//! (`loki_discarded_samples_total`), nothing dead-lettered unless it should be.
//!
//! Trees have recent times ([`crate::tree`]), since Loki refuses entries older than
//! 7 days: the recorded fixtures shifted forward by whole days, and synthetic sessions
//! whose files each span hours (a catch-up, a backfill, a restart after hours down).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::loki_real::RealLoki;
use crate::tree::{ago, hours_tree, record_count, shifted_copy, HoursTree};
use crate::util::{fixture_dirs, logs_dir};

/// A scratch dir for one test, removed after a pass.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!("raylog-lk-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A config shipping `ray` to `loki` as cluster `cluster`; `sink` adds Loki keys.
fn config(dir: &Path, ray: &Path, state: &Path, loki: &RealLoki, cluster: &str, sink: &str) -> PathBuf {
    let text = format!(
        "[source]\npaths = [{ray:?}]\nstate_dir = {state:?}\npoll_interval = \"200ms\"\n\
         [node]\nname = \"n1\"\ncluster = \"{cluster}\"\n[api]\naddress = \"\"\n\
         [[sinks]]\ntype = \"loki\"\nendpoint = \"{url}\"\n{sink}\n",
        url = loki.url(),
    );
    let p = dir.join(format!("{cluster}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

/// `raylog ship --once`: asserts it exits 0, returns its stderr.
pub fn ship_once(cfg: &Path) -> String {
    ship_once_at(cfg, "warn")
}

/// [`ship_once`] logging at `level`. A run still going after 5 minutes (a sink that
/// never accepts, say) is killed and fails the test instead of hanging it.
pub fn ship_once_at(cfg: &Path, level: &str) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_raylog"))
        .args(["ship", "--once", "--log-level", level, "--config"])
        .arg(cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = std::io::Read::read_to_string(&mut pipe, &mut err);
        err
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let err = reader.join().unwrap();
    let Some(status) = status else { panic!("raylog ship --once still running after 5 minutes:\n{err}") };
    assert!(status.success(), "raylog ship --once exited with {status}:\n{err}");
    err
}

/// The dead-letter records in `state`.
pub fn dead_letters(state: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(state.join("dead-letter.ndjson")).unwrap_or_default();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn no_discards(loki: &RealLoki) {
    let d = loki.discarded();
    assert!(d.is_empty(), "Loki discarded entries: {d:?}");
    let sharded = loki.sharded_streams();
    assert!(sharded.is_empty(), "Loki sharded streams (over shard_streams.desired_rate): {sharded:?}");
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki): ../shared/loki/start-loki.sh --path"]
fn real_loki_stores_each_fixture_record_once_even_after_a_restart_without_checkpoints() {
    let loki = RealLoki::start("fixtures", "");
    let tmp = Scratch::new("fixtures");
    let mut want = BTreeMap::new();
    for (i, fixture) in fixture_dirs().iter().enumerate() {
        let cluster = format!("fixture{i}");
        let dst = tmp.0.join(&cluster);
        std::fs::create_dir_all(&dst).unwrap();
        shifted_copy(logs_dir(fixture).parent().unwrap(), &dst);
        // Recorded Ray sessions come with no count of their records from their
        // writer (fixtures/README.md): raylog's reading of them is the expectation
        // (tests/it/reconcile.rs checks its records cover every line of the files).
        want.insert(cluster.clone(), record_count(std::slice::from_ref(&dst)));
        // The second run has no checkpoints: it sends everything again, which Loki
        // must store once (the same entries, byte for byte).
        for run in 0..2 {
            let state = tmp.0.join(format!("state-{cluster}-{run}"));
            let err = ship_once(&config(&tmp.0, &dst, &state, &loki, &cluster, ""));
            assert!(dead_letters(&state).is_empty(), "{cluster}: dead letters:\n{err}");
        }
    }
    let got = loki.stored("{service_name=\"ray\"}", want.values().sum());
    let by_cluster = loki.counts("{service_name=\"ray\"}", "cluster");
    assert_eq!(by_cluster, want, "stored per fixture vs records parsed");
    eprintln!("fixtures: stored {by_cluster:?} after two runs each, discarded {:?}", loki.discarded());
    assert_eq!(got, want.values().sum::<u64>());
    no_discards(&loki);
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki): ../shared/loki/start-loki.sh --path"]
fn real_loki_catch_up_of_many_files_spanning_hours() {
    let loki = RealLoki::start("catchup", "");
    let tmp = Scratch::new("catchup");
    let tree = hours_tree(
        &tmp.0.join("ray"),
        7,
        12,
        1500,
        ago(Duration::from_secs(3 * 3600 + 1440)),
        ago(Duration::from_secs(300)),
    );
    tree.write(i64::MIN, i64::MAX);
    let want = tree.records(i64::MIN, i64::MAX);
    let state = tmp.0.join("state");
    let err = ship_once(&config(&tmp.0, &tmp.0.join("ray"), &state, &loki, "catchup", ""));
    assert!(dead_letters(&state).is_empty(), "dead letters:\n{err}");
    assert_eq!(loki.stored("{cluster=\"catchup\"}", want), want);
    no_discards(&loki);
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki): ../shared/loki/start-loki.sh --path"]
fn real_loki_restart_after_hours_down() {
    let loki = RealLoki::start("restart", "");
    let tmp = Scratch::new("restart");
    let ray = tmp.0.join("ray");
    let tree = hours_tree(&ray, 11, 8, 1200, ago(Duration::from_secs(5 * 3600)), ago(Duration::from_secs(300)));
    let (state, down) = (tmp.0.join("state"), ago(Duration::from_secs(3 * 3600)));
    // The agent ran until three hours ago...
    tree.write(i64::MIN, down);
    let cfg = config(&tmp.0, &ray, &state, &loki, "restart", "");
    ship_once(&cfg);
    let before = tree.records(i64::MIN, down);
    // ...then Ray wrote for three hours without it, and it starts again.
    tree.write(down, i64::MAX);
    let err = ship_once(&cfg);
    let want = tree.records(i64::MIN, i64::MAX);
    assert!(want > before + 1000, "the second part is hours of records: {before} then {want}");
    assert!(dead_letters(&state).is_empty(), "dead letters:\n{err}");
    assert_eq!(loki.stored("{cluster=\"restart\"}", want), want);
    no_discards(&loki);
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki): ../shared/loki/start-loki.sh --path"]
fn real_loki_sigkill_during_a_backfill_stores_each_record_once() {
    let loki = RealLoki::start("sigkill", "");
    let tmp = Scratch::new("sigkill");
    let ray = tmp.0.join("ray");
    let tree = hours_tree(&ray, 3, 16, 1800, ago(Duration::from_secs(3 * 3600)), ago(Duration::from_secs(120)));
    tree.write(i64::MIN, i64::MAX);
    let want = tree.records(i64::MIN, i64::MAX);
    let state = tmp.0.join("state");
    let cfg = config(&tmp.0, &ray, &state, &loki, "sigkill", "");
    let mut kills = 0;
    for after in [1200, 1700, 900] {
        let mut agent = Command::new(env!("CARGO_BIN_EXE_raylog"))
            .args(["ship", "--once", "--log-level", "error", "--config"])
            .arg(&cfg)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(after) && agent.try_wait().unwrap().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        if agent.try_wait().unwrap().is_none() {
            agent.kill().unwrap(); // SIGKILL
            kills += 1;
        }
        agent.wait().unwrap();
    }
    assert!(kills >= 2, "the backfill finished before it could be killed");
    ship_once(&cfg);
    assert!(dead_letters(&state).is_empty());
    // Loki's log queries return an entry sent twice (same stream, time and line) once;
    // its metric queries over chunks still in the ingester may count it twice (the
    // batch in flight at each kill is sent again), so entries are counted here.
    let counted = loki.stored("{cluster=\"sigkill\"}", want);
    let entries = loki.all_entries("{cluster=\"sigkill\"}");
    eprintln!("sigkill: {} entries, count_over_time {counted}, {want} records", entries.len());
    if entries.len() as u64 != want {
        panic!("after {kills} SIGKILLs: {} entries, want {want}\n{}", entries.len(), excess_report(&entries, &tree));
    }
    assert!(counted >= want, "count_over_time {counted} < {want}: records lost");
    no_discards(&loki);
}

/// The files of `tree` with more or fewer entries than lines (less Ray's `:job_id:`
/// markers), and for the first ones the milliseconds holding more entries than
/// lines, with every copy's time and labels: the copies differ in one of them.
fn excess_report(entries: &[(i64, String, BTreeMap<String, String>)], tree: &HoursTree) -> String {
    let mut out = String::new();
    for (file, lines) in &tree.files {
        let lines: Vec<i64> = lines.iter().filter(|l| !l.1.starts_with(":job_id:")).map(|l| l.0).collect();
        let got: Vec<_> = entries.iter().filter(|e| e.2.get("file") == Some(file)).collect();
        if got.len() == lines.len() {
            continue;
        }
        out += &format!("{file}: {} entries, {} lines\n", got.len(), lines.len());
        let mut by_ms: BTreeMap<i64, Vec<_>> = BTreeMap::new();
        for e in &got {
            by_ms.entry(e.0.div_euclid(1_000_000)).or_default().push(e);
        }
        let over = by_ms.iter().filter(|(ms, c)| c.len() > lines.iter().filter(|t| *t == *ms).count());
        for (ms, copies) in over.take(if out.len() < 4000 { 3 } else { 0 }) {
            out += &format!("  at {ms} ms:\n");
            for (ts, line, labels) in copies {
                out += &format!("    {ts} {line:?} {labels:?}\n");
            }
        }
    }
    out
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki): ../shared/loki/start-loki.sh --path"]
fn real_loki_long_lines_are_cut_and_old_entries_dead_lettered_unsent() {
    let loki = RealLoki::start("limits", "");
    let tmp = Scratch::new("limits");
    let logs = tmp.0.join("ray/session_2026-11-30_10-00-00_000000_1/logs");
    std::fs::create_dir_all(&logs).unwrap();
    let line = |ms: i64, msg: &str| {
        let t = jiff::Timestamp::from_millisecond(ms).unwrap().to_zoned(jiff::tz::TimeZone::UTC);
        format!("[{} I 7303 7303] (raylet) main.cc:1: {msg}\n", t.strftime("%Y-%m-%d %H:%M:%S,%3f"))
    };
    let mut text = String::new();
    for i in 0..5 {
        text += &line(ago(Duration::from_secs(8 * 86_400)) + i, &format!("eight days ago {i}"));
    }
    text += &line(ago(Duration::from_secs(60)), "before the long one");
    text += &line(ago(Duration::from_secs(59)), &"x".repeat(300 << 10));
    text += &line(ago(Duration::from_secs(58)), "after the long one");
    std::fs::write(logs.join("raylet.out"), text).unwrap();
    let state = tmp.0.join("state");
    let err = ship_once(&config(&tmp.0, &tmp.0.join("ray"), &state, &loki, "limits", ""));
    let dead = dead_letters(&state);
    assert_eq!(dead.len(), 5, "{dead:?}");
    for d in &dead {
        assert_eq!(d["kind"], "too_old");
        assert!(d["reason"].as_str().unwrap().contains("reject_old_samples_max_age"));
        assert!(d["record"]["message"].as_str().unwrap().starts_with("eight days ago"));
    }
    assert!(err.contains("5 record(s) were not shipped") && err.contains("5 too_old"), "{err}");
    assert_eq!(loki.stored("{cluster=\"limits\"}", 3), 3);
    let cut = loki.entries("{cluster=\"limits\"} | truncated=\"true\"");
    assert_eq!(cut.len(), 1, "{cut:?}");
    assert_eq!(cut[0].0.len(), 256 << 10, "cut at Loki's max_line_size");
    no_discards(&loki);
}

#[test]
#[ignore = "needs RAYLOG_LOKI_BIN (a real Loki): ../shared/loki/start-loki.sh --path"]
fn real_loki_backfill_faster_than_the_ingestion_rate_limit() {
    let limits = "  ingestion_rate_mb: 1\n  ingestion_burst_size_mb: 1";
    let loki = RealLoki::start("ratelimit", limits);
    let tmp = Scratch::new("ratelimit");
    let ray = tmp.0.join("ray");
    let tree = hours_tree(&ray, 5, 4, 1500, ago(Duration::from_secs(2 * 3600)), ago(Duration::from_secs(60)));
    tree.write(i64::MIN, i64::MAX);
    let want = tree.records(i64::MIN, i64::MAX);
    let state = tmp.0.join("state");
    let started = Instant::now();
    let err = ship_once_at(&config(&tmp.0, &ray, &state, &loki, "ratelimit", ""), "info");
    assert!(dead_letters(&state).is_empty(), "dead letters:\n{err}");
    assert_eq!(loki.stored("{cluster=\"ratelimit\"}", want), want);
    // raylog starts at its default pace (3 MiB/s), over this Loki's 1 MiB/s: its first
    // push is refused with 429, and Loki counts that push's entries as discarded
    // (raylog sends them again). Nothing else is discarded.
    let discarded = loki.discarded();
    assert_eq!(discarded.len(), 1, "one reason, rate_limited: {discarded:?}\n{err}");
    let n = discarded.get("rate_limited").copied().unwrap_or_else(|| panic!("{discarded:?}"));
    assert!(n > 0 && n < want, "{n} of {want} discarded");
    // raylog learns the limit Loki states in the 429 and paces at 90 % of it...
    let pacing: Vec<&str> = err.lines().filter(|l| l.contains("pacing pushes below it")).collect();
    assert_eq!(pacing.len(), 1, "raylog learns the limit once:\n{err}");
    assert!(pacing[0].contains("bytes_per_second=943718"), "90 % of 1 MiB/s: {}", pacing[0]);
    // ...so that one push is the only one refused: its entries are all Loki discarded.
    let refused: Vec<u64> = err
        .lines()
        .filter(|l| l.contains("HTTP 429") && l.contains("(limit: 1048576 bytes/sec)"))
        .map(|l| {
            let n = l.split("attempting to ingest '").nth(1).and_then(|r| r.split('\'').next());
            n.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("no line count in {l}"))
        })
        .collect();
    assert_eq!(refused.len(), 1, "one push refused with 429, then paced:\n{err}");
    assert_eq!(refused[0], n, "the refused push's entries are what Loki discarded:\n{err}");
    eprintln!("rate limit 1 MiB/s: {want} records in {:?}, discarded {discarded:?}", started.elapsed());
}
