//! The CLI's contract: the real `raylog` binary run on fixtures and on files made
//! up here (gzip, tarballs, stdin, bad bytes, giant lines), checking stdout, stderr
//! and the exit code.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use regex::Regex;
use serde_json::Value;

use crate::util::{fixture_dirs, fixtures, logs_dir};

/// The result of one run of the binary.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Every stdout line as JSON.
    fn records(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad NDJSON line {l:?}: {e}")))
            .collect()
    }
}

fn finish(out: Output) -> Run {
    Run {
        code: out.status.code().expect("killed by a signal"),
        stdout: String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Runs `raylog <args>` with stdin closed.
fn raylog<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    finish(Command::new(env!("CARGO_BIN_EXE_raylog")).args(args).stdin(Stdio::null()).output().expect("run raylog"))
}

/// Runs `raylog parse <args>` with stdin closed.
fn parse<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut all = vec![OsStr::new("parse").to_os_string()];
    all.extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
    raylog(all)
}

/// A temp dir removed on drop; unique per process and per call.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let p = std::env::temp_dir().join(format!(
            "raylog-it-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fixture(name: &str) -> PathBuf {
    let p = fixtures().join(name);
    assert!(p.is_dir(), "missing fixture {}", p.display());
    p
}

fn s<'a>(v: &'a Value, k: &str) -> Option<&'a str> {
    v.get(k).and_then(Value::as_str)
}

/// Files directly in `dir`, sorted by name.
fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(dir).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_file()).collect();
    v.sort();
    v
}

fn name_of(p: &Path) -> String {
    p.file_name().unwrap().to_string_lossy().into_owned()
}

/// The Phoenix actor of `ray-2.60-text`, found by grepping the fixture: its worker ids
/// (the `.out` files with `Phoenix started`) and its actor id (`Creating actor
/// actor_id=` in those workers' core-worker logs).
fn phoenix() -> (String, BTreeSet<String>) {
    let logs = logs_dir(&fixture("ray-2.60-text"));
    let out_re = Regex::new(r"^worker-([0-9a-f]{56})-[0-9a-f]{8}-\d+\.out$").unwrap();
    let create = Regex::new(r"Creating actor actor_id=([0-9a-f]{32})").unwrap();
    let files = files_in(&logs);
    let mut wids = BTreeSet::new();
    for f in &files {
        if let Some(c) = out_re.captures(&name_of(f)) {
            let text = String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned();
            if text.contains("Phoenix started") {
                wids.insert(c[1].to_string());
            }
        }
    }
    assert_eq!(wids.len(), 2, "expected two Phoenix workers, found {wids:?}");
    let mut actors = BTreeSet::new();
    for f in &files {
        let n = name_of(f);
        if wids.iter().any(|w| n.starts_with(&format!("python-core-worker-{w}_"))) {
            let text = String::from_utf8_lossy(&std::fs::read(f).unwrap()).into_owned();
            for c in create.captures_iter(&text) {
                actors.insert(c[1].to_string());
            }
        }
    }
    assert_eq!(actors.len(), 1, "Phoenix actor ids: {actors:?}");
    (actors.into_iter().next().unwrap(), wids)
}

#[test]
fn actor_filter_follows_the_restarted_actor() {
    let (actor, wids) = phoenix();
    let r = parse([fixture("ray-2.60-text").as_os_str(), OsStr::new("--actor-id"), OsStr::new(&actor)]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let recs = r.records();
    assert!(!recs.is_empty());
    for v in &recs {
        assert_eq!(s(v, "actor_id"), Some(actor.as_str()), "{v}");
    }
    assert!(
        recs.iter().any(|v| s(v, "component") == Some("worker") && s(v, "stream") == Some("stdout")),
        "no worker stdout record for actor {actor}"
    );
    assert!(recs.iter().any(|v| s(v, "component") == Some("core_worker")), "no core_worker record for actor {actor}");
    assert!(recs.iter().any(|v| s(v, "file") == Some("gcs_server.out")), "no gcs_server.out record for actor {actor}");
    for w in &wids {
        assert!(
            recs.iter().any(|v| s(v, "worker_id") == Some(w.as_str())),
            "no record of Phoenix worker {w} under --actor-id {actor}"
        );
        assert!(
            recs.iter().any(|v| s(v, "component") == Some("worker")
                && s(v, "file").is_some_and(|f| f.starts_with(&format!("worker-{w}-")))),
            "no stdout/stderr record of Phoenix worker {w} under --actor-id {actor}"
        );
    }
}

#[test]
fn exit_1_when_filters_match_nothing() {
    let r = parse([fixture("ray-2.60-text").as_os_str(), OsStr::new("--job-id"), OsStr::new("7f000000")]);
    assert_eq!(r.code, 1, "stderr: {}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

#[test]
fn exit_2_for_a_missing_path_but_other_records_are_printed() {
    let tmp = TempDir::new("missing");
    let missing = tmp.path().join("no-such-dir");
    let r = parse([fixture("ray-2.60-text").as_os_str(), missing.as_os_str()]);
    assert_eq!(r.code, 2, "stderr: {}", r.stderr);
    assert!(
        r.stderr.contains(&missing.display().to_string()),
        "stderr does not name {}: {}",
        missing.display(),
        r.stderr
    );
    assert!(r.records().len() > 100, "records of the good path are missing");
}

#[test]
fn exit_2_for_a_bad_actor_id() {
    let r = parse([fixture("ray-2.60-text").as_os_str(), OsStr::new("--actor-id"), OsStr::new("xyz!")]);
    assert_eq!(r.code, 2, "stderr: {}", r.stderr);
    assert!(r.stderr.contains("--actor-id"), "{}", r.stderr);
    assert!(r.stdout.is_empty(), "{}", r.stdout);
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// Sets a file's mtime, so records dated by mtime agree between two copies.
fn set_mtime(p: &Path) {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_767_225_600);
    std::fs::File::options().write(true).open(p).unwrap().set_modified(t).unwrap();
}

fn raylet_out() -> PathBuf {
    logs_dir(&fixture("ray-2.60-text")).join("raylet.out")
}

#[test]
fn gz_file_gives_the_plain_files_records() {
    let tmp = TempDir::new("gz");
    let bytes = std::fs::read(raylet_out()).unwrap();
    let (plain_dir, gz_dir) = (tmp.path().join("plain"), tmp.path().join("gz"));
    std::fs::create_dir_all(&plain_dir).unwrap();
    std::fs::create_dir_all(&gz_dir).unwrap();
    let plain = plain_dir.join("raylet.out");
    let gz = gz_dir.join("raylet.out.gz");
    std::fs::write(&plain, &bytes).unwrap();
    std::fs::write(&gz, gzip(&bytes)).unwrap();
    set_mtime(&plain);
    set_mtime(&gz);
    let a = parse([plain.as_os_str()]);
    let b = parse([gz.as_os_str()]);
    assert_eq!(a.code, 0, "{}", a.stderr);
    assert_eq!(b.code, 0, "{}", b.stderr);
    let (ra, rb) = (a.records(), b.records());
    assert!(ra.len() > 10);
    let msgs = |v: &[Value]| -> Vec<String> { v.iter().map(|r| s(r, "message").unwrap().to_string()).collect() };
    assert_eq!(msgs(&ra), msgs(&rb), "messages differ between plain and .gz");
    for r in &rb {
        assert_eq!(s(r, "file"), Some("raylet.out"), "{r}");
        assert_eq!(s(r, "component"), Some("raylet"), "{r}");
    }
    // The decompressed offsets are the plain file's offsets, and nothing else differs.
    assert_eq!(ra, rb, "records differ between plain and .gz");
}

#[test]
fn truncated_gz_keeps_records_before_the_damage() {
    let tmp = TempDir::new("gzcut");
    let bytes = std::fs::read(raylet_out()).unwrap();
    let gz = gzip(&bytes);
    let cut = tmp.path().join("raylet.out.gz");
    std::fs::write(&cut, &gz[..gz.len() / 2]).unwrap();
    let r = parse([cut.as_os_str()]);
    assert_eq!(r.code, 2, "stderr: {}", r.stderr);
    assert!(r.stderr.contains(&cut.display().to_string()), "stderr does not name {}: {}", cut.display(), r.stderr);
    let recs = r.records();
    assert!(!recs.is_empty(), "no records kept before the damage");
    // What was kept is a prefix of the real file's records.
    let full = parse([raylet_out().as_os_str()]).records();
    let n = recs.len();
    for (got, want) in recs.iter().zip(&full).take(n.saturating_sub(1)) {
        assert_eq!(s(got, "message"), s(want, "message"));
        assert_eq!(got.get("offset"), want.get("offset"));
    }
}

/// (file, offset, message, actor_id) of every record, sorted: a multiset to compare.
fn keys(recs: &[Value]) -> Vec<(String, u64, String, String)> {
    let mut v: Vec<_> = recs
        .iter()
        .map(|r| {
            (
                s(r, "file").unwrap_or("").to_string(),
                r.get("offset").and_then(Value::as_u64).unwrap(),
                s(r, "message").unwrap_or("").to_string(),
                s(r, "actor_id").unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn tar_gz_gives_the_same_records_as_the_dir() {
    let tmp = TempDir::new("tgz");
    for dir in fixture_dirs() {
        let logs = logs_dir(&dir);
        let session = logs.parent().unwrap();
        let archive = tmp.path().join(format!("{}.tgz", name_of(&dir)));
        {
            let f = std::fs::File::create(&archive).unwrap();
            let enc = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
            let mut b = tar::Builder::new(enc);
            b.append_dir_all(name_of(session), session).unwrap();
            b.into_inner().unwrap().finish().unwrap();
        }
        let from_dir = parse([dir.as_os_str()]);
        let from_tar = parse([archive.as_os_str()]);
        assert_eq!(from_dir.code, 0, "{}", from_dir.stderr);
        assert_eq!(from_tar.code, 0, "{}", from_tar.stderr);
        let (a, b) = (keys(&from_dir.records()), keys(&from_tar.records()));
        assert!(!a.is_empty());
        if a != b {
            let sa: BTreeSet<_> = a.iter().collect();
            let sb: BTreeSet<_> = b.iter().collect();
            panic!(
                "{}: dir has {} records, tarball {}; only in dir: {:#?}\nonly in tarball: {:#?}",
                dir.display(),
                a.len(),
                b.len(),
                sa.difference(&sb).take(5).collect::<Vec<_>>(),
                sb.difference(&sa).take(5).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn stdin_with_a_name() {
    let f = std::fs::File::open(raylet_out()).unwrap();
    let r = finish(
        Command::new(env!("CARGO_BIN_EXE_raylog"))
            .args(["parse", "-", "--stdin-name", "raylet.out"])
            .stdin(Stdio::from(f))
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let recs = r.records();
    assert!(recs.len() > 10, "{} records", recs.len());
    for v in &recs {
        assert_eq!(s(v, "component"), Some("raylet"), "{v}");
        assert!(s(v, "level").is_some(), "no level: {v}");
    }
}

/// Runs `raylog parse <ray-2.60-text> <extra…>` and returns its records.
fn parse_text(extra: &[&str]) -> Run {
    let dir = fixture("ray-2.60-text");
    let mut args: Vec<&OsStr> = vec![dir.as_os_str()];
    args.extend(extra.iter().map(OsStr::new));
    parse(args)
}

#[test]
fn pretty_format_one_line_per_line_of_message() {
    let nd = parse_text(&[]);
    let pretty = parse_text(&["--format", "pretty"]);
    assert_eq!(nd.code, 0);
    assert_eq!(pretty.code, 0, "{}", pretty.stderr);
    let recs = nd.records();
    let mut lines = pretty.stdout.lines();
    let mut single = 0;
    for v in &recs {
        let msg = s(v, "message").unwrap();
        let n = msg.split('\n').count();
        single += (n == 1) as usize;
        let first = lines.next().unwrap_or_else(|| panic!("pretty output ends before {v}"));
        let comp = s(v, "component").unwrap();
        assert!(first.contains(comp), "{first:?} lacks component {comp}");
        if let Some(l) = s(v, "level") {
            assert!(first.contains(l), "{first:?} lacks level {l}");
        }
        let head = msg.split('\n').next().unwrap();
        assert!(first.contains(head), "{first:?} lacks message {head:?}");
        for _ in 1..n {
            let cont = lines.next().expect("continuation line");
            assert!(cont.starts_with(' '), "{cont:?}");
        }
    }
    assert!(lines.next().is_none(), "pretty output has extra lines");
    assert!(single > 100);
    assert!(!pretty.stdout.contains('\x1b'), "colour when not a terminal");
}

#[test]
fn level_filter() {
    let r = parse_text(&["--level", "ERROR"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = r.records();
    assert!(!recs.is_empty());
    for v in &recs {
        assert!(matches!(s(v, "level"), Some("ERROR" | "FATAL")), "--level ERROR let through {v}");
    }
}

#[test]
fn grep_filter() {
    let pat = "Phoenix|actor_id=[0-9a-f]{4}";
    let re = Regex::new(pat).unwrap();
    let r = parse_text(&["--grep", pat]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = r.records();
    assert!(recs.len() > 5);
    for v in &recs {
        assert!(re.is_match(s(v, "message").unwrap()), "{v}");
    }
    let all = parse_text(&[]).records();
    let want = all.iter().filter(|v| re.is_match(s(v, "message").unwrap())).count();
    assert_eq!(recs.len(), want);
}

fn ts(v: &Value) -> Option<jiff::Timestamp> {
    s(v, "timestamp").map(|t| t.parse().unwrap())
}

#[test]
fn since_until_bound_timestamps() {
    let all = parse_text(&[]).records();
    let mut times: Vec<jiff::Timestamp> = all.iter().filter_map(ts).collect();
    times.sort();
    let (lo, hi) = (times[times.len() / 4], times[times.len() * 3 / 4]);
    assert!(lo < hi);
    let r = parse_text(&["--since", &lo.to_string(), "--until", &hi.to_string()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = r.records();
    for v in &recs {
        let t = ts(v).unwrap_or_else(|| panic!("no timestamp: {v}"));
        assert!(lo <= t && t <= hi, "{t} outside [{lo}, {hi}]: {v}");
    }
    let want = all.iter().filter(|v| ts(v).is_some_and(|t| lo <= t && t <= hi)).count();
    assert_eq!(recs.len(), want);
    assert!(want > 10);
}

#[test]
fn component_filter() {
    let r = parse_text(&["--component", "raylet,gcs_server"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let recs = r.records();
    let comps: BTreeSet<&str> = recs.iter().filter_map(|v| s(v, "component")).collect();
    assert_eq!(comps, BTreeSet::from(["gcs_server", "raylet"]));
}

#[test]
fn invalid_utf8_and_giant_lines() {
    let tmp = TempDir::new("bytes");
    let wid = "ab".repeat(28);
    let f = tmp.path().join(format!("worker-{wid}-01000000-42.out"));
    let mut bytes = b":job_id:01000000\n".to_vec();
    bytes.extend_from_slice(b"bad \xff\xfe bytes \xc3\n");
    bytes.extend(std::iter::repeat_n(b'x', 3 << 20));
    bytes.push(b'\n');
    bytes.extend_from_slice(b"a normal line\n");
    std::fs::write(&f, &bytes).unwrap();
    let r = parse([f.as_os_str(), OsStr::new("--max-line-bytes"), OsStr::new("1048576")]);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    let recs = r.records();
    assert_eq!(recs.len(), 3, "{}", r.stdout.chars().take(2000).collect::<String>());
    let bad = s(&recs[0], "message").unwrap();
    assert!(bad.contains('\u{FFFD}'), "{bad:?}");
    assert!(bad.starts_with("bad "), "{bad:?}");
    assert_eq!(recs[1].get("truncated"), Some(&Value::Bool(true)), "giant line not flagged");
    let giant = s(&recs[1], "message").unwrap();
    assert!(giant.len() <= 1 << 20, "giant message is {} bytes", giant.len());
    assert!(giant.len() > 1000);
    assert_eq!(s(&recs[2], "message"), Some("a normal line"));
    assert!(recs[2].get("truncated").is_none());
    for v in &recs {
        assert_eq!(s(v, "job_id"), Some("01000000"), "{v}");
        assert_eq!(s(v, "worker_id"), Some(wid.as_str()), "{v}");
    }
    let name = name_of(&f);
    assert!(
        r.stderr.lines().filter(|l| l.contains(&name)).count() >= 2,
        "stderr should warn about invalid UTF-8 and cut lines, naming the file: {}",
        r.stderr
    );
    assert!(r.stderr.to_lowercase().contains("utf-8"), "{}", r.stderr);
}

/// `raylog ship --once | head -1`: once stdout's reader is gone there is nobody to
/// deliver to, so the agent exits quietly instead of retrying the write forever.
#[test]
fn ship_to_a_closed_stdout_exits() {
    use std::io::BufRead;
    let tmp = TempDir::new("ship-head");
    let cfg = tmp.0.join("raylog.toml");
    let paths = serde_json::to_string(&[fixture("ray-2.60-text")]).unwrap();
    let state = serde_json::to_string(&tmp.0.join("state")).unwrap();
    std::fs::write(&cfg, format!("[source]\npaths = {paths}\nstate_dir = {state}\n[api]\naddress = \"\"\n")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_raylog"))
        .args(["ship", "--once", "--config"])
        .arg(&cfg)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let log = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let mut first = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with('{'), "{first}");
    // The reader (and the pipe) dropped here; 451 records do not fit in the pipe.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("raylog ship kept running after its stdout was closed");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status}");
    // The orderly shutdown ran (a process::exit in the sink would skip it).
    let log = log.join().unwrap();
    assert!(log.contains("stdout was closed by its reader") && log.contains("checkpoints saved"), "{log}");
}

/// raylog's own log lines as `kubectl logs` and a log pipeline see them: no escape
/// codes off a terminal, and with `RAYLOG_LOG_FORMAT=json` (or `--log-format json`)
/// one JSON object per line.
#[test]
fn own_logs_are_plain_off_a_terminal_and_json_on_request() {
    let run = |tag: &str, envs: &[(&str, &str)], args: &[&str]| {
        let tmp = TempDir::new(tag);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_raylog"));
        cmd.args(["ship", "--once", "--path"]).arg(fixture("ray-2.60-text")).arg("--state-dir").arg(tmp.0.join("st"));
        cmd.args(args).env_remove("RAYLOG_LOG_FORMAT").env_remove("NO_COLOR").env_remove("RUST_LOG");
        cmd.envs(envs.iter().copied());
        let out = cmd.stdin(Stdio::null()).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stderr).unwrap()
    };
    let text = run("log-text", &[], &[]);
    assert!(text.contains("checkpoints saved"), "{text}");
    assert!(!text.contains('\x1b'), "escape codes in a pipe: {text:?}");
    for (tag, envs, args) in [
        ("log-json-env", &[("RAYLOG_LOG_FORMAT", "json")][..], &[][..]),
        ("log-json-flag", &[], &["--log-format", "json"]),
    ] {
        let json = run(tag, envs, args);
        let lines: Vec<Value> = json
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{tag}: not JSON ({e}): {l}")))
            .collect();
        let bye = lines.iter().find(|v| s(v, "message") == Some("checkpoints saved; bye")).expect("the last line");
        assert_eq!(s(bye, "level"), Some("INFO"));
        assert!(bye["entries"].as_u64().is_some_and(|n| n > 0), "fields are members: {bye}");
        assert!(bye["timestamp"].is_string());
    }
    let bad = raylog(["ship", "--log-format", "xml"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("--log-format") && bad.stderr.contains("json"), "{}", bad.stderr);
}

/// `raylog completions <shell>` completes every subcommand and its flags, and
/// `raylog man <dir>` writes a page per command, each naming its flags: both come
/// from the clap definitions, so a new flag shows up in them by itself.
#[test]
fn completions_and_man_pages_cover_every_command() {
    let help = raylog(["--help"]).stdout;
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("--help lists the commands")
        .lines()
        .take_while(|l| !l.starts_with("Options:"))
        // A command's line is indented by two; its wrapped help by more.
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| *w != "help")
        .collect();
    assert!(commands.contains(&"parse") && commands.contains(&"completions"), "{commands:?}");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let run = raylog(["completions", shell]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        for c in &commands {
            assert!(run.stdout.contains(c), "{shell} completion lacks {c}");
        }
        assert!(run.stdout.contains("actor-id"), "{shell} completion lacks parse's --actor-id");
    }
    let bad = raylog(["completions", "tcsh"]);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("bash"), "names the shells it knows: {}", bad.stderr);
    let dir = tempfile_dir("man");
    let run = raylog([OsStr::new("man"), dir.as_os_str()]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let page = std::fs::read_to_string(dir.join("raylog-parse.1")).unwrap();
    assert!(page.contains(".TH") && page.contains("actor\\-id"), "a roff page naming --actor-id");
    for c in &commands {
        assert!(dir.join(format!("raylog-{c}.1")).is_file(), "no page for {c}");
    }
    assert!(dir.join("raylog.1").is_file());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--version` names the commit the binary was built from (this checkout's HEAD
/// when git is here).
#[test]
fn version_names_the_commit() {
    let out = raylog(["--version"]).stdout;
    let head = Command::new("git").args(["rev-parse", "HEAD"]).current_dir(env!("CARGO_MANIFEST_DIR")).output();
    match head {
        Ok(h) if h.status.success() => {
            let commit = out.split("(commit ").nth(1).and_then(|s| s.split(')').next()).unwrap_or_default();
            assert!(commit.len() >= 7 && String::from_utf8_lossy(&h.stdout).starts_with(commit), "{out}");
        }
        _ => assert!(out.contains("commit unknown"), "{out}"),
    }
}

fn tempfile_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("raylog-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}
