//! A node with more files than descriptors: `raylog ship` under a low open-files
//! limit delivers every line of thousands of finished worker files exactly once,
//! keeps its descriptors under `source.max_open_files`, picks up appends to files it
//! closed (even renamed while closed), and resumes after a restart without resending.
//!
//! No peak is sampled and no "nothing happened" waits a fixed time: the agent runs
//! under a hard open-files limit it cannot raise and must never log running out of
//! descriptors; the log files it holds open at once are counted from inotify's open
//! and close events (every one, in order), not from snapshots of `/proc/PID/fd`;
//! "all closed" is polled for until it holds (bounded); and "nothing was sent twice"
//! is checked once the agent has read every file again up to a marker line appended
//! to it, not after a sleep.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::ship::{append, exactly_once, stop, Agent, Env};

/// Starts the agent with `[source]` keys `extra` under a hard open-files limit of
/// `nofile` (soft = hard: the agent cannot raise it), its stderr to `stderr`.
pub(crate) fn start(env: &Env, extra: &str, nofile: u64, stderr: &Path) -> Agent {
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
    let err = std::fs::File::create(stderr).unwrap();
    cmd.args(["ship", "--log-level", "warn", "--config"]).arg(&path).stdout(Stdio::null()).stderr(err);
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

/// What the agent logged, checked for any sign of running out of descriptors: its
/// own warning when an open fails with EMFILE/ENFILE, or the OS's text for either
/// from any other open (a listing, a checkpoint, the sink's file).
pub(crate) fn assert_never_out_of_descriptors(stderr: &Path) -> String {
    let text = std::fs::read_to_string(stderr).unwrap();
    for sign in ["out of file descriptors", "Too many open files", "os error 24", "os error 23"] {
        assert!(!text.contains(sign), "the agent ran out of descriptors ({sign:?}):\n{text}");
    }
    text
}

/// Descriptors of process `pid` open on files under `dir`.
pub(crate) fn fds_under(pid: u32, dir: &Path) -> usize {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return 0 };
    rd.flatten().filter(|e| std::fs::read_link(e.path()).is_ok_and(|t| t.starts_with(dir))).count()
}

/// Waits (bounded) until process `pid` holds no descriptor under `dir`.
fn wait_all_closed(pid: u32, dir: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while fds_under(pid, dir) > 0 {
        assert!(
            Instant::now() < deadline,
            "still open after {within:?}: {} under {}",
            fds_under(pid, dir),
            dir.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn worker(env: &Env, i: u64) -> PathBuf {
    env.logs().join(format!("worker-{:056x}-01000000-{}.out", 0xb000 + i, 20_000 + i))
}

/// How many of the files in one directory are open at once, from inotify's
/// `IN_OPEN` and `IN_CLOSE_*` events on the directory: the kernel queues them as the
/// opens and closes happen (an open's before its descriptor exists, a close's once
/// it is gone), so the count never misses a peak. Each file is also watched on its
/// own: inotify merges an event identical to the one queued just before it (two
/// opens or two closes of one file in a row, as its tail's and its time hint's can
/// be), and the file's own event, queued between the directory's, keeps them apart
/// (without it the count here never gets back to 0). Meant for a directory only the
/// agent opens files in while it counts.
struct OpenFiles {
    fd: i32,
    stop: Arc<AtomicBool>,
    /// Files open as of the last event read.
    now: Arc<AtomicI64>,
    thread: Option<std::thread::JoinHandle<Counted>>,
}

#[derive(Debug, Default)]
struct Counted {
    /// Most files open at once.
    peak: i64,
    /// Files open when counting stopped.
    open: i64,
    /// Opens seen in all.
    opens: u64,
    /// Files closed more often than opened: a merged event (never expected).
    unbalanced: Vec<String>,
    /// The kernel's queue overflowed: events were lost, the count means nothing.
    overflow: bool,
}

impl OpenFiles {
    fn watch(dir: &Path, files: &[PathBuf]) -> OpenFiles {
        use std::os::unix::ffi::OsStrExt;
        let cpath = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY: plain syscalls on a descriptor this struct owns and NUL-terminated paths.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        assert!(fd >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
        let mask = libc::IN_OPEN | libc::IN_CLOSE_WRITE | libc::IN_CLOSE_NOWRITE;
        let add = |p: &Path| {
            let wd = unsafe { libc::inotify_add_watch(fd, cpath(p).as_ptr(), mask) };
            assert!(wd >= 0, "inotify_add_watch {}: {}", p.display(), std::io::Error::last_os_error());
            wd
        };
        let dir_wd = add(dir);
        for f in files {
            add(f);
        }
        let (stop, now) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicI64::new(0)));
        let (quit, live) = (stop.clone(), now.clone());
        let thread = std::thread::spawn(move || {
            let mut c = Counted::default();
            let mut per_file: HashMap<Vec<u8>, i64> = HashMap::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
            loop {
                let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                if n <= 0 {
                    // Drained: stop once asked, else wait for more.
                    if quit.load(Ordering::SeqCst) {
                        return c;
                    }
                    unsafe { libc::poll(&mut pfd, 1, 20) };
                    continue;
                }
                let mut at = 0usize;
                while at < n as usize {
                    // struct inotify_event { int wd; u32 mask, cookie, len; char name[len]; }
                    let word = |i: usize| u32::from_ne_bytes(buf[at + i..at + i + 4].try_into().unwrap());
                    let (wd, ev, len) = (word(0) as i32, word(4), word(12) as usize);
                    let name = &buf[at + 16..at + 16 + len];
                    let name = name[..name.iter().position(|&b| b == 0).unwrap_or(len)].to_vec();
                    at += 16 + len;
                    if ev & libc::IN_Q_OVERFLOW != 0 {
                        c.overflow = true;
                    }
                    if wd != dir_wd || ev & libc::IN_ISDIR != 0 || name.is_empty() {
                        continue; // a file's own watch, or the directory itself (a listing)
                    }
                    let open = per_file.entry(name.clone()).or_default();
                    if ev & libc::IN_OPEN != 0 {
                        *open += 1;
                        c.open += 1;
                        c.opens += 1;
                        c.peak = c.peak.max(c.open);
                    } else if *open > 0 {
                        *open -= 1;
                        c.open -= 1;
                    } else {
                        c.unbalanced.push(String::from_utf8_lossy(&name).into_owned());
                    }
                }
                live.store(c.open, Ordering::SeqCst);
            }
        });
        OpenFiles { fd, stop, now, thread: Some(thread) }
    }

    /// Waits (bounded) until no file is open.
    fn wait_none_open(&self, within: Duration) {
        let deadline = Instant::now() + within;
        while self.now.load(Ordering::SeqCst) > 0 {
            let open = self.now.load(Ordering::SeqCst);
            assert!(Instant::now() < deadline, "{open} log files still open after {within:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops counting (after reading every event queued so far).
    fn finish(mut self) -> Counted {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for OpenFiles {
    fn drop(&mut self) {
        if let Some(t) = self.thread.take() {
            self.stop.store(true, Ordering::SeqCst);
            let _ = t.join();
        }
        // SAFETY: closes the inotify descriptor this struct owns, after its reader.
        unsafe { libc::close(self.fd) };
    }
}

#[test]
fn thousands_of_files_under_a_low_open_files_limit() {
    let env = Env::new("many");
    let (files, per) = (3000u64, 3u64);
    let paths: Vec<PathBuf> = (0..files).map(|i| worker(&env, i)).collect();
    for (i, p) in (0..files).zip(&paths) {
        append(p, i * per, (i + 1) * per);
    }
    let n = files * per;
    // 128 descriptors: 64 reserved for sockets, checkpoints and the like, 64 for logs.
    let opens = OpenFiles::watch(&env.logs(), &paths);
    let err = env.root.join("agent.err");
    let agent = start(&env, "max_open_files = 256\nclose_inactive = \"1s\"", 128, &err);
    let (pid, ray) = (agent.id(), env.root.join("ray"));
    env.wait_within(Duration::from_secs(60), "every line", |r| r.len() as u64 >= n);
    assert!(exactly_once(&env.received(), n), "{} of {n} lines arrived (each once?)", env.received().len());
    // Idle files are closed after close_inactive (by the count, and in /proc).
    opens.wait_none_open(Duration::from_secs(20));
    wait_all_closed(pid, &ray, Duration::from_secs(20));
    let counted = opens.finish();
    eprintln!("manyfiles: {} opens of log files, at most {} open at once", counted.opens, counted.peak);
    // Every open and close of a log file, in order: the cap (64 here, from the
    // limit), plus the one descriptor a newly opened worker file's first 64 KiB are
    // read through for its time hint (from the reserve, closed at once).
    assert!(!counted.overflow, "inotify's queue overflowed: the count is incomplete");
    assert!(
        counted.unbalanced.is_empty(),
        "closes without an open: {:?}",
        &counted.unbalanced[..5.min(counted.unbalanced.len())]
    );
    assert!(counted.opens >= files, "every file opened at least once: {counted:?}");
    assert!(counted.peak <= 65, "log files held open at once: {} (cap 64 + 1)", counted.peak);
    // Under the hard limit of 128 it says it uses 64 for logs, and never ran out.
    let log = assert_never_out_of_descriptors(&err);
    assert!(log.contains("using=64"), "the cap comes from the open-files limit:\n{log}");
    // An append to an old (closed) file is read.
    append(&worker(&env, 7), n, n + 1);
    append(&worker(&env, files - 1), n + 1, n + 2);
    env.wait_for("the appends to closed files", |r| r.len() as u64 == n + 2);
    stop(agent);
    assert_never_out_of_descriptors(&err);
    // A restart resumes from the checkpoints: an append made while the agent was
    // down arrives, and nothing is sent again. Every file gets a marker line: once
    // all have arrived, the agent has read every file from where it resumed to the
    // end, so whatever it would resend has been sent.
    append(&worker(&env, 1234), n + 2, n + 3);
    let agent = start(&env, "max_open_files = 256", 128, &err);
    for (i, p) in (0..files).zip(&paths) {
        append(p, n + 3 + i, n + 4 + i);
    }
    let all = n + 3 + files;
    env.wait_within(Duration::from_secs(60), "every file's marker after the restart", |r| r.len() as u64 >= all);
    stop(agent);
    assert_never_out_of_descriptors(&err);
    let r = env.received();
    assert!(
        exactly_once(&r, all),
        "a restart re-sent or lost lines: {:?}",
        r.iter().filter(|(_, c)| **c != 1).take(5).collect::<Vec<_>>()
    );
}

#[test]
fn a_file_rotated_while_closed_keeps_its_identity() {
    let env = Env::new("closedrot");
    let raylet = env.logs().join("raylet.out");
    append(&raylet, 0, 10);
    for i in 0..20 {
        append(&worker(&env, i), 100 + i, 101 + i);
    }
    let err = env.root.join("agent.err");
    let agent = start(&env, "max_open_files = 8\nclose_inactive = \"500ms\"", 1024, &err);
    let (pid, ray) = (agent.id(), env.root.join("ray"));
    env.wait_for("the first lines", |r| r.len() == 30);
    wait_all_closed(pid, &ray, Duration::from_secs(10));
    // Rotated while closed: the old inode is now raylet.out.1 and still grows; a new
    // raylet.out starts. The old one resumes at its offset (0..10 not sent again).
    let old = env.logs().join("raylet.out.1");
    std::fs::rename(&raylet, &old).unwrap();
    append(&old, 10, 15);
    append(&raylet, 15, 20);
    env.wait_for("lines of both files", |r| (0..20).all(|s| r.contains_key(&s)));
    // A marker line in each: once both arrive, each file was read again to its end.
    append(&old, 20, 21);
    append(&raylet, 21, 22);
    env.wait_for("both markers", |r| r.contains_key(&20) && r.contains_key(&21));
    stop(agent);
    // raylet's 22 lines (both files) and the 20 workers' each exactly once.
    let r = env.received();
    let want: Vec<u64> = (0..22).chain(100..120).collect();
    assert_eq!(r.len(), want.len(), "{r:?}");
    assert!(r.keys().copied().eq(want) && r.values().all(|&c| c == 1), "each line once: {r:?}");
}
