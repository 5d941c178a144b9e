//! A node with more files than descriptors: `raylog ship` under a low open-files
//! limit delivers every line of thousands of finished worker files exactly once,
//! keeps its descriptors under `source.max_open_files`, picks up appends to files it
//! closed (even renamed while closed), and resumes after a restart without resending.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::ship::{append, exactly_once, stop, Agent, Env};

/// Starts the agent with `[source]` keys `extra` under an open-files limit of `nofile`.
fn start(env: &Env, extra: &str, nofile: u64) -> Agent {
    let cfg = format!(
        r#"
[source]
paths = ["{ray}"]
state_dir = "{state}"
idle_flush = "100ms"
partial_line_timeout = "1s"
{extra}
[batch]
max_wait = "100ms"
[[sinks]]
type = "file"
path = "{out}"
[api]
address = ""
"#,
        ray = env.root.join("ray").display(),
        state = env.root.join("state").display(),
        out = env.out().display(),
    );
    let path = env.root.join("many.toml");
    std::fs::write(&path, cfg).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_raylog"));
    cmd.args(["ship", "--log-level", "warn", "--config"]).arg(&path).stdout(Stdio::null()).stderr(Stdio::inherit());
    // SAFETY: only setrlimit between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit { rlim_cur: nofile as libc::rlim_t, rlim_max: nofile as libc::rlim_t };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Agent(cmd.spawn().unwrap())
}

/// Descriptors of process `pid` open on files under `dir`.
fn fds_under(pid: u32, dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    rd.flatten().filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(dir))).count()
}

fn total_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |rd| rd.count())
}

fn worker(env: &Env, i: u64) -> std::path::PathBuf {
    env.logs().join(format!("worker-{:056x}-01000000-{}.out", 0xb000 + i, 20_000 + i))
}

#[test]
fn thousands_of_files_under_a_low_open_files_limit() {
    let env = Env::new("many");
    let (files, per) = (3000u64, 3u64);
    for i in 0..files {
        append(&worker(&env, i), i * per, (i + 1) * per);
    }
    let n = files * per;
    // 128 descriptors: 64 reserved for sockets, checkpoints and the like, 64 for logs.
    let agent = start(&env, "max_open_files = 256\nclose_inactive = \"1s\"", 128);
    let (pid, ray) = (agent.id(), env.root.join("ray"));
    let (mut peak_logs, mut peak_all) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.received().len() < n as usize && Instant::now() < deadline {
        peak_logs = peak_logs.max(fds_under(pid, &ray));
        peak_all = peak_all.max(total_fds(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(exactly_once(&env.received(), n), "{} of {n} lines arrived (each once?)", env.received().len());
    // The cap, plus the one descriptor a newly opened worker file's first 64 KiB are
    // read through for its time hint (from the reserve, closed at once).
    assert!(peak_logs > 0 && peak_logs <= 65, "log files held open at once: {peak_logs} (cap 64 + 1)");
    assert!(peak_all < 128, "descriptors in use: {peak_all} of 128");
    // Idle files are closed after close_inactive; an append to an old one is read.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(fds_under(pid, &ray), 0, "files idle for close_inactive are closed");
    append(&worker(&env, 7), n, n + 1);
    append(&worker(&env, files - 1), n + 1, n + 2);
    env.wait_for("the appends to closed files", |r| r.len() as u64 == n + 2);
    stop(agent);
    // A restart resumes from the checkpoints: nothing is sent again.
    append(&worker(&env, 1234), n + 2, n + 3);
    let agent = start(&env, "max_open_files = 256", 128);
    env.wait_for("the append made while the agent was down", |r| r.len() as u64 == n + 3);
    std::thread::sleep(Duration::from_millis(500));
    stop(agent);
    assert!(exactly_once(&env.received(), n + 3), "a restart re-sent or lost lines");
}

#[test]
fn a_file_rotated_while_closed_keeps_its_identity() {
    let env = Env::new("closedrot");
    let raylet = env.logs().join("raylet.out");
    append(&raylet, 0, 10);
    for i in 0..20 {
        append(&worker(&env, i), 100 + i, 101 + i);
    }
    let agent = start(&env, "max_open_files = 8\nclose_inactive = \"500ms\"", 1024);
    let (pid, ray) = (agent.id(), env.root.join("ray"));
    env.wait_for("the first lines", |r| r.len() == 30);
    let deadline = Instant::now() + Duration::from_secs(10);
    while fds_under(pid, &ray) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(fds_under(pid, &ray), 0, "every file closed after close_inactive");
    // Rotated while closed: the old inode is now raylet.out.1 and still grows; a new
    // raylet.out starts. The old one resumes at its offset (0..10 not sent again).
    std::fs::rename(&raylet, env.logs().join("raylet.out.1")).unwrap();
    append(&env.logs().join("raylet.out.1"), 10, 15);
    append(&raylet, 15, 20);
    env.wait_for("lines of both files", |r| (0..20).all(|s| r.contains_key(&s)));
    std::thread::sleep(Duration::from_millis(500));
    stop(agent);
    let r = env.received();
    assert!((0..20).all(|s| r[&s] == 1), "each line once: {r:?}");
}
