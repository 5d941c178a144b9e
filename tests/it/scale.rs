//! Twenty thousand finished worker files (issue #26's properties at a scale `cargo
//! test` runs in well under a minute): `raylog ship` under a low open-files limit
//! stops on SIGTERM in the middle of its start-up discovery, then delivers every line
//! exactly once while a live file keeps being served during the catch-up and
//! thousands of files are deleted under it (each drained or reported lost), keeps an
//! actor's prints tagged with their actor through the chunked discovery, picks up a
//! new worker file and a new session, goes quiet (no disk writes), keeps its
//! checkpoints under 100 bytes a file, and resumes after a restart without sending
//! anything again.
//!
//! Properties, not timings: every wait is bounded but generous, and what is asserted
//! is an order (the live line before the backlog's end), a count (each `seq=` once)
//! or a size, never how fast.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::manyfiles::{assert_never_out_of_descriptors, fds_under, start, worker};
use crate::ship::{append, stop, Agent, Env};

const FILES: u64 = 20_000;
const LINES: u64 = 5;
/// Hard open-files limit: the agent keeps a quarter for sockets and the like.
const NOFILE: u64 = 256;
/// Files deleted during the catch-up (the last ones written).
const DELETED: u64 = 5_000;
const SOURCE: &str = "max_open_files = 1000\nclose_inactive = \"1s\"\n\
                      [retry]\nshutdown_grace = \"2s\"";

/// Writes the finished workers' files: `seq` 0 .. FILES * LINES. Each starts as
/// Ray's do, with a `:job_id:` marker, and every other one (an actor's, whose
/// core-worker log is gone) with `:actor_name:`: the agent holds those prints for
/// their actor, which keeps its hold full for the whole catch-up.
fn finished_workers(env: &Env) -> Vec<PathBuf> {
    let paths: Vec<PathBuf> = (0..FILES).map(|i| worker(env, i)).collect();
    for (i, p) in (0..FILES).zip(&paths) {
        let actor = if i % 2 == 1 { ":actor_name:Trainer\n" } else { "" };
        std::fs::write(p, format!(":job_id:01000000\n{actor}")).unwrap();
        append(p, i * LINES, (i + 1) * LINES);
    }
    paths
}

/// Bytes process `pid` caused to be written to storage so far. A file that cannot
/// be read, or has no `write_bytes`, fails: read as 0 it would pass any quiet check.
fn write_bytes(pid: u32) -> u64 {
    let path = format!("/proc/{pid}/io");
    let io = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {path}: {e}"));
    let n = io.lines().find_map(|l| l.strip_prefix("write_bytes: "));
    n.and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("{path} has no write_bytes count:\n{io}"))
}

/// Waits (bounded) for `quiet` in which process `pid` writes nothing to disk.
fn wait_quiet(pid: u32, quiet: Duration, within: Duration) {
    let deadline = Instant::now() + within;
    let (mut since, mut at) = (Instant::now(), write_bytes(pid));
    while since.elapsed() < quiet {
        assert!(Instant::now() < deadline, "still writing to disk {within:?} after the catch-up");
        std::thread::sleep(Duration::from_millis(100));
        let now = write_bytes(pid);
        if now != at {
            (since, at) = (Instant::now(), now);
        }
    }
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| e.metadata().map_or(0, |m| m.len())).sum()
}

/// SIGTERM to a start-up over a backlog: the agent exits cleanly within its
/// `shutdown_grace` (2 s here, plus a second for the process to go).
fn stops_during_discovery(env: &Env, err: &Path) {
    let mut agent = start(env, SOURCE, NOFILE, err);
    std::thread::sleep(Duration::from_millis(150));
    Command::new("kill").arg("-TERM").arg(agent.id().to_string()).status().unwrap();
    let t = Instant::now();
    let st = loop {
        if let Some(st) = agent.try_wait().unwrap() {
            break st;
        }
        assert!(t.elapsed() < Duration::from_secs(3), "no exit within shutdown_grace (2 s) of SIGTERM at start-up");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(st.success(), "raylog ship exited with {st} after SIGTERM at start-up");
}

/// The catch-up: a line appended to a live file at the start arrives before the
/// backlog's last line; the last [`DELETED`] files are deleted once it has begun
/// (listed, their sizes known): each is drained whole or named as lost; every other
/// line arrives once; descriptors stay under the cap.
fn catches_up_serving_a_live_file(env: &Env, err: &Path, paths: &[PathBuf], total: u64) -> Agent {
    let raylet = env.logs().join("raylet.out");
    let agent = start(env, SOURCE, NOFILE, err);
    append(&raylet, total, total + 1);
    let (pid, ray) = (agent.id(), env.root.join("ray"));
    env.wait_within(Duration::from_secs(60), "the first line", |r| !r.is_empty());
    let kept = FILES - DELETED;
    for p in &paths[kept as usize..] {
        std::fs::remove_file(p).unwrap();
    }
    let (deadline, mut peak) = (Instant::now() + Duration::from_secs(120), 0);
    let mut seen_live_with = None;
    let lost = loop {
        peak = peak.max(fds_under(pid, &ray));
        let r = env.received();
        if seen_live_with.is_none() && r.contains_key(&total) {
            seen_live_with = Some(r.keys().filter(|s| **s < total).count());
        }
        let log = std::fs::read_to_string(err).unwrap();
        let settled = |i: u64| (i * LINES..(i + 1) * LINES).all(|s| r.contains_key(&s));
        let lost: Vec<u64> = (kept..FILES).filter(|&i| !settled(i)).collect();
        let named = lost.iter().all(|&i| log.contains(&*paths[i as usize].file_name().unwrap().to_string_lossy()));
        if r.contains_key(&total) && (0..kept).all(settled) && named {
            break lost;
        }
        assert!(
            Instant::now() < deadline,
            "catch-up: {} lines, {} deleted files not drained, after 120 s; the agent's log ends:\n{}",
            r.len(),
            lost.len(),
            &log[log.len().saturating_sub(3000)..]
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let r = env.received();
    let twice: Vec<_> = r.iter().filter(|(_, c)| **c > 1).take(5).collect();
    assert!(twice.is_empty(), "sent twice: {twice:?}");
    let backlog_then = seen_live_with.unwrap();
    assert!(backlog_then < total as usize - LINES as usize * lost.len(), "the live line waited for the whole backlog");
    let log = assert_never_out_of_descriptors(err);
    let cap: usize = log
        .split("using=")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .unwrap_or_else(|| panic!("the agent says what cap it uses:\n{log}"));
    // Sampled, so a lower bound of the true peak: the cap plus a time hint's read.
    assert!(peak <= cap + 1, "{peak} descriptors on log files, over the cap of {cap}");
    eprintln!(
        "scale: live line after {backlog_then} of {total} backlog lines; at most {peak} log fds seen; \
         of {DELETED} files deleted during the catch-up, {} reported lost",
        lost.len()
    );
    agent
}

/// A new worker file and a new session, each with one line, arrive.
fn follows_new_files(env: &Env, next: u64) -> u64 {
    append(&worker(env, FILES + 1), next, next + 1);
    env.wait_for("a new worker file's line", |r| r.contains_key(&next));
    let session = env.root.join("ray/session_2026-11-30_10-00-00_000000_2/logs");
    std::fs::create_dir_all(&session).unwrap();
    append(&session.join("raylet.out"), next + 1, next + 2);
    env.wait_for("a new session's line", |r| r.contains_key(&(next + 1)));
    next + 2
}

/// A real actor worker's stdout and core-worker log (from a Ray run), among the
/// backlog: the start-up discovery tracks it in chunks, a worker's files together,
/// so its prints still get the actor its core-worker log names.
const ACTOR_SEQ: u64 = 10_000_000;

fn actor_worker(env: &Env) {
    let real = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/ray-2.60-jobs-serve/session_2026-11-30_09-31-29_637100_6988/logs");
    let wid = "432349002613ccb2a609f32e497aa7d9eb9fbe5c2d552f6bf7e6fbdf";
    let out = format!("worker-{wid}-ffffffff-7659.out");
    let core = format!("python-core-worker-{wid}_7659.log");
    for f in [&out, &core] {
        std::fs::copy(real.join(f), env.logs().join(f)).unwrap();
    }
    append(&env.logs().join(&out), ACTOR_SEQ, ACTOR_SEQ + 1);
}

fn assert_actor_known(env: &Env) {
    let tok = format!("seq={ACTOR_SEQ}");
    let records = env.records();
    let r = records.iter().find(|r| r["message"].as_str().is_some_and(|m| m.contains(&tok)));
    let actor = r.map(|r| r["actor_id"].clone()).unwrap_or_default();
    assert_eq!(actor, "4f5a785cd66775710826e94c03000000", "the actor's print, tracked from the backlog");
}

#[test]
fn twenty_thousand_files_keep_every_promise() {
    let env = Env::new("scale");
    let paths = finished_workers(&env);
    actor_worker(&env);
    let raylet = env.logs().join("raylet.out");
    std::fs::write(&raylet, "").unwrap();
    let total = FILES * LINES;
    let err = env.root.join("agent.err");
    stops_during_discovery(&env, &err);
    let agent = catches_up_serving_a_live_file(&env, &err, &paths, total);
    env.wait_for("the actor's print", |r| r.contains_key(&ACTOR_SEQ));
    assert_actor_known(&env);
    let next = follows_new_files(&env, total + 1);
    // Quiet: no disk writes over 3 s once the last saves are done.
    wait_quiet(agent.id(), Duration::from_secs(3), Duration::from_secs(30));
    let state = dir_bytes(&env.root.join("state"));
    assert!(state <= 100 * (FILES + 2), "checkpoints take {} bytes a file", state / (FILES + 2));
    stop(agent);
    // A restart: a line appended while the agent was down arrives, then a marker in
    // every remaining file; once all have, nothing was sent twice.
    let kept = &paths[..(FILES - DELETED) as usize];
    append(&kept[0], next, next + 1);
    let agent = start(&env, SOURCE, NOFILE, &err);
    for (k, p) in kept.iter().enumerate() {
        append(p, next + 1 + k as u64, next + 2 + k as u64);
    }
    let end = next + 1 + kept.len() as u64;
    env.wait_within(Duration::from_secs(60), "every marker", |r| (next..end).all(|s| r.contains_key(&s)));
    stop(agent);
    assert_never_out_of_descriptors(&err);
    let r = env.received();
    let twice: BTreeMap<u64, usize> = r.iter().filter(|(_, c)| **c > 1).map(|(s, c)| (*s, *c)).take(5).collect();
    assert!(twice.is_empty(), "sent twice: {twice:?}");
}

/// A `/proc/<pid>/io` that cannot be read (no such process here: pids stop far
/// below u32::MAX) fails, naming the file, instead of reading as no disk writes,
/// which would pass any check that the agent went quiet.
#[test]
#[should_panic(expected = "/proc/4294967295/io")]
fn write_bytes_fails_naming_a_proc_io_it_cannot_read() {
    write_bytes(u32::MAX);
}
