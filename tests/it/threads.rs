//! `raylog parse`, `health` and `trace` with `--threads N` give the single-threaded
//! output byte for byte: on
//! every fixture, and on files made up here to land on every case the parallel
//! scan checks at its segment boundaries (tracebacks and C++ continuation lines
//! around a cut, markers that change mid-file, prints without a time, lines longer
//! than a segment, a link learned while parsing, gzip and tarballs, damaged input).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use flate2::write::GzEncoder;

use crate::cli::TempDir;
use crate::util::fixture_dirs;

/// stdout, stderr and the exit code of `raylog parse --threads N <args>`.
fn parse_with(threads: usize, args: &[&Path]) -> (Vec<u8>, String, i32) {
    run_with(&["parse"], threads, args)
}

/// stdout, stderr and the exit code of `raylog <cmd...> --threads N <args>`.
fn run_with(cmd: &[&str], threads: usize, args: &[&Path]) -> (Vec<u8>, String, i32) {
    let out = Command::new(env!("CARGO_BIN_EXE_raylog"))
        .args(cmd)
        .arg(format!("--threads={threads}"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run raylog");
    (out.stdout, String::from_utf8_lossy(&out.stderr).into_owned(), out.status.code().expect("exit code"))
}

/// Asserts every thread count gives what one thread gives; returns that.
fn same_for_any_threads(args: &[&Path]) -> (Vec<u8>, String, i32) {
    same_for_any_threads_of(&["parse"], args)
}

fn same_for_any_threads_of(cmd: &[&str], args: &[&Path]) -> (Vec<u8>, String, i32) {
    let one = run_with(cmd, 1, args);
    for n in [2, 3, 8] {
        let many = run_with(cmd, n, args);
        assert_eq!(many.2, one.2, "exit code of {cmd:?} with --threads {n} on {args:?}");
        assert_eq!(many.1, one.1, "stderr of {cmd:?} with --threads {n} on {args:?}");
        if many.0 != one.0 {
            let (a, b) = (String::from_utf8_lossy(&one.0), String::from_utf8_lossy(&many.0));
            let at = a.lines().zip(b.lines()).position(|(x, y)| x != y);
            panic!(
                "stdout of {cmd:?} with --threads {n} on {args:?} differs from --threads 1 (line {at:?}):\n{:?}\n{:?}",
                at.and_then(|i| a.lines().nth(i)),
                at.and_then(|i| b.lines().nth(i))
            );
        }
    }
    one
}

#[test]
fn threads_give_the_serial_output_on_every_fixture() {
    let dirs = fixture_dirs();
    for d in &dirs {
        let (out, _, code) = same_for_any_threads(&[d]);
        assert_eq!(code, 0, "{}", d.display());
        assert!(out.len() > 1000, "{}: records expected", d.display());
    }
    let all: Vec<&Path> = dirs.iter().map(|d| d.as_path()).collect();
    same_for_any_threads(&all);
}

/// The first value of `key` in NDJSON records.
fn first_id(ndjson: &[u8], key: &str) -> Option<String> {
    let text = String::from_utf8_lossy(ndjson);
    let at = text.find(&format!("\"{key}\":\""))? + key.len() + 4;
    Some(text[at..at + text[at..].find('"')?].to_string())
}

/// The middle of the records' times (RFC 3339).
fn middle_time(ndjson: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(ndjson);
    let mut times: Vec<&str> = text
        .lines()
        .filter_map(|l| {
            let at = l.find("\"timestamp\":\"")? + 13;
            Some(&l[at..at + l[at..].find('"')?])
        })
        .collect();
    times.sort_unstable();
    times.get(times.len() / 2).map(|t| t.to_string())
}

#[test]
fn health_and_trace_on_threads_give_the_serial_output() {
    let dirs = fixture_dirs();
    let mut traced = 0;
    for d in &dirs {
        let (health, _, _) = same_for_any_threads_of(&["health", "--format", "json"], &[d]);
        assert!(health.len() > 100, "{}", d.display());
        let (records, _, _) = parse_with(1, &[d]);
        // The workers sift by the time filter before they keep a worker's first record.
        let mid = middle_time(&records).expect("timed records");
        let (since, _, _) = same_for_any_threads_of(&["health", "--format", "json", "--since", &mid], &[d]);
        let (until, _, _) = same_for_any_threads_of(&["health", "--format", "json", "--until", &mid], &[d]);
        assert!(since != health || until != health, "{}: a filter at {mid} changes the report", d.display());
        for (flag, key) in
            [("--actor-id", "actor_id"), ("--task-id", "task_id"), ("--job-id", "job_id"), ("--worker-id", "worker_id")]
        {
            let Some(id) = first_id(&records, key) else { continue };
            for context in ["0", "2"] {
                let (out, _, code) =
                    same_for_any_threads_of(&["trace", flag, &id, "--context", context, "--format", "json"], &[d]);
                assert_eq!(code, 0, "trace {flag} {id} on {}", d.display());
                assert!(out.len() > 100);
                traced += 1;
            }
        }
    }
    assert!(traced >= 16, "actors, tasks, jobs and workers traced: {traced}");
}

const WORKER: &str = "3d5a4fd12aabfe228f219e9cb0eb53f16947ccf25ec84d8dbc742547";
const ACTOR: &str = "09e2e8c662248b483b7ffc0501000000";
const TASK: &str = "d6b9ccc6c4ae127209e2e8c662248b483b7ffc0501000000";

/// A worker's stderr of about `mb` MiB: Python log lines, tracebacks, prints without
/// a time, task markers every so often, CRLF lines, bad UTF-8, and (when `giant`)
/// lines longer than a segment. The link of the worker to its actor is stated once,
/// by a structured line in the middle (not what the prescan reads).
fn worker_err(mb: usize, giant: bool) -> Vec<u8> {
    let mut b = b":job_id:01000000\n:actor_name:Trainer\n".to_vec();
    let mut i = 0u64;
    while b.len() < mb << 20 {
        i += 1;
        let (s, ms) = (i / 1000 % 60, i % 1000);
        if i % 997 == 0 {
            writeln!(b, ":task_name:Trainer.step_{i}").unwrap();
            writeln!(b, ":task_attempt_start:{TASK}:0").unwrap();
        }
        match i % 41 {
            0 => {
                writeln!(b, "2026-01-15 10:00:{s:02},{ms:03}\tERROR train.py:155 -- step {i} failed").unwrap();
                b.extend_from_slice(b"Traceback (most recent call last):\n  File \"/app/model.py\", line 303, in forward\n    raise KeyError(...)\nKeyError: 'user_42'\n");
            }
            1 => b.extend_from_slice(
                b"Traceback (most recent call last):\n  File \"/app/x.py\", line 1, in <module>\nValueError: bare\n",
            ),
            2..=6 => writeln!(b, "print {i} without a time").unwrap(),
            7 => writeln!(b, "2026-01-15 10:00:{s:02},{ms:03}\tINFO train.py:64 -- crlf {i}\r").unwrap(),
            8 => b.extend_from_slice(b"bad \xff\xfe utf-8 \n"),
            9 if giant && i % 2009 == 9 => {
                b.extend_from_slice(b"2026-01-15 10:00:00,000\tINFO x.py:1 -- giant ");
                b.extend(std::iter::repeat_n(b'g', (1 << 20) + 700_000));
                b.push(b'\n');
            }
            _ => writeln!(b, "2026-01-15 10:00:{s:02},{ms:03}\tINFO serve_app.py:295 -- step {i} loss=0.{i}").unwrap(),
        }
        if b.len() > (mb << 20) / 2 && i % 41 == 20 && !b.windows(9).any(|w| w == b"linked me") {
            writeln!(
                b,
                "2026-01-15 10:00:{s:02},{ms:03}\tINFO serve_app.py:1 -- linked me worker_id={WORKER} actor_id={ACTOR} task_id={TASK}"
            )
            .unwrap();
        }
    }
    b
}

/// raylet's log of about `mb` MiB: C++ records, some with continuation lines.
fn raylet(mb: usize) -> Vec<u8> {
    let mut b = Vec::new();
    let mut i = 0u64;
    while b.len() < mb << 20 {
        i += 1;
        let (s, ms) = (i / 1000 % 60, i % 1000);
        writeln!(b, "[2026-01-15 10:00:{s:02},{ms:03} I 4211 4211] node_manager.cc:{i}: record {i} worker_id={WORKER}")
            .unwrap();
        if i % 13 == 0 {
            b.extend_from_slice(b"  continued line one\ncontinued line two\n\n");
        }
    }
    b
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

#[test]
fn threads_cut_big_files_where_the_serial_parser_would() {
    let tmp = TempDir::new("threads");
    let logs = tmp.path().join("session_2026-01-15_10-00-00_000000_1/logs");
    std::fs::create_dir_all(&logs).unwrap();
    let err = worker_err(6, false);
    let write = |name: &str, bytes: &[u8]| std::fs::write(logs.join(name), bytes).unwrap();
    write(&format!("worker-{WORKER}-01000000-4242.err"), &err);
    // Lines longer than a segment: cut where they are, the rest of the file read serially.
    write(&format!("worker-{}-01000000-4343.err", "e".repeat(56)), &worker_err(5, true));
    // Its stdout, read after the stderr: prints that take the actor learned there.
    let mut out = b":job_id:01000000\n".to_vec();
    for i in 0..60_000 {
        writeln!(out, "print {i} from the actor").unwrap();
    }
    write(&format!("worker-{WORKER}-01000000-4242.out"), &out);
    write("raylet.out", &raylet(3));
    write("raylet.1.out.gz", &gzip(&raylet(2)));
    let gz = gzip(&worker_err(2, false));
    write("python-core-worker-aa.log.gz", &gz[..gz.len() * 2 / 3]);
    write("dashboard.log", b"");
    write("monitor.log", b"2026-01-15 10:00:00,000\tINFO monitor.py:1 -- no newline at the end");
    let (stdout, stderr, code) = same_for_any_threads(&[tmp.path()]);
    assert_eq!(code, 2, "the truncated gzip is a failure: {stderr}");
    assert!(stderr.contains("truncated compressed data"), "{stderr}");

    // The prints of the worker's stdout carry the actor learned from its stderr.
    let text = String::from_utf8_lossy(&stdout);
    let prints: Vec<&str> = text.lines().filter(|l| l.contains("from the actor")).collect();
    assert_eq!(prints.len(), 60_000);
    assert!(prints.iter().all(|l| l.contains(ACTOR)), "{:?}", prints[0]);
    // Markers changed mid-file: the last task's name is on the records after it.
    let marker = err.windows(19).rposition(|w| w == b":task_name:Trainer.").expect("task markers");
    let name = &err[marker + 11..marker + err[marker..].iter().position(|&c| c == b'\n').unwrap()];
    let name = format!("\"task_name\":\"{}\"", String::from_utf8_lossy(name));
    assert!(name.contains("Trainer.step_") && text.contains(&name), "{name} in the output");
    same_for_any_threads_of(&["health"], &[tmp.path()]);
    // A trace selects an untagged print by what it learned on the way: this worker's
    // core-worker log names the actor (not as a creation the correlator links), so
    // only the trace knows the worker's prints are the actor's.
    let (w2, a2) = ("c".repeat(56), "a1b2c3d4e5f60718293a4b5c01000000");
    let core = format!("[2026-01-15 10:00:00,000 I 4242 4242] core_worker.cc:1: Executing task for actor_id={a2}\n");
    write(&format!("python-core-worker-{w2}_4242.log"), core.as_bytes());
    let prints: String = (0..20_000).map(|i| format!("untagged print {i}\n")).collect();
    write(&format!("worker-{w2}-01000000-4242.out"), prints.as_bytes());
    // Many worker files that each teach the correlator a link while parsed: past a
    // few copies of it for the workers, the rest of the scan is serial.
    for n in 0..60 {
        let (w, a) = (format!("{n:056x}"), format!("{n:08x}0f0e0d0c0b0a090801000000"));
        let t = format!("{n:016x}{a}");
        let taught = format!("2026-01-15 10:00:00,000\tINFO x.py:1 -- hi worker_id={w} actor_id={a} task_id={t}\n");
        write(&format!("worker-{w}-01000000-{n}.err"), taught.as_bytes());
        write(&format!("worker-{w}-01000000-{n}.out"), format!("print of actor {n}\n").as_bytes());
    }
    let (trace, _, _) = same_for_any_threads_of(&["trace", "--actor-id", a2, "--format", "json"], &[tmp.path()]);
    let trace = String::from_utf8_lossy(&trace);
    assert!(trace.contains("untagged print 19999"), "the trace holds the worker's prints");
    let (all, _, _) = same_for_any_threads(&[tmp.path()]);
    let all = String::from_utf8_lossy(&all);
    let taught = all.lines().filter(|l| l.contains("print of actor") && l.contains("0f0e0d0c0b0a0908")).count();
    assert_eq!(taught, 60, "each worker's print carries the actor its stderr taught");
    same_for_any_threads_of(&["trace", "--actor-id", ACTOR, "--context", "1"], &[tmp.path()]);
    same_for_any_threads_of(&["trace", "--task-id", TASK], &[tmp.path()]);

    // The same files in a tarball, beside another.
    let tar_path = tmp.path().join("node.tar.gz");
    let mut tar =
        tar::Builder::new(GzEncoder::new(std::fs::File::create(&tar_path).unwrap(), flate2::Compression::fast()));
    tar.append_dir_all("session_2026-01-15_10-00-00_000000_1/logs", &logs).unwrap();
    tar.into_inner().unwrap().finish().unwrap();
    let copy = tmp.path().join("copy.tar.gz");
    std::fs::copy(&tar_path, &copy).unwrap();
    let (_, _, code) = same_for_any_threads(&[&tar_path, &copy]);
    assert_eq!(code, 2);
}
