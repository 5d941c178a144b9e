//! Reconciliation against the raw fixture files.
//!
//! Every check here computes its expectation from the bytes on disk, independently
//! of the parser (own line splitting, own marker counting, a `regex` ground truth for
//! which worker hosts which actor), and compares it with what `raylog::scan` produced.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};

use raylog::discover::discover;
use raylog::scan::{scan, ScanConfig};
use raylog_parsers::ndjson::write_record;
use raylog_parsers::record::Ids;
use raylog_parsers::{FileKind, Level, Record, Timestamp};
use regex::Regex;

use crate::util::{fixed_mtime, fixture_dirs, logs_dir, parse_ndjson};

/// What the tests keep of one record (a [`Record`] only lives during the callback).
#[derive(Debug)]
struct Rec {
    rel: String,
    kind: FileKind,
    component: String,
    offset: u64,
    lines: u32,
    ids: Ids,
    timestamp: Option<Timestamp>,
    inferred: bool,
    level: Option<Level>,
    json: String,
}

/// Parses a fixture dir through the library's scan API, keeping every record.
fn scan_records(dir: &Path) -> Vec<Rec> {
    let disc = discover(&[dir.to_path_buf()]);
    let cfg = ScanConfig { fixed_mtime: Some(fixed_mtime()), ..ScanConfig::default() };
    let mut recs = vec![];
    let mut buf = vec![];
    let report = scan(&disc, &cfg, &mut |_| {}, &mut |r: &Record<'_>| {
        buf.clear();
        write_record(&mut buf, r);
        recs.push(Rec {
            rel: r.file.rel_path.clone(),
            kind: r.file.kind,
            component: r.file.component.clone(),
            offset: r.offset,
            lines: r.lines,
            ids: *r.ids,
            timestamp: r.timestamp,
            inferred: r.timestamp_inferred,
            level: r.level,
            json: String::from_utf8_lossy(&buf).trim_end().to_string(),
        });
    });
    assert!(report.failures.is_empty(), "{}: {:?}", dir.display(), report.failures);
    recs
}

/// Every regular file under `logs` (recursively), as (path relative to `logs`, path).
fn raw_files(logs: &Path) -> Vec<(String, PathBuf)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                walk(root, &p, out);
            } else if ft.is_file() {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().replace('\\', "/");
                out.push((rel, p));
            }
        }
    }
    let mut v = vec![];
    walk(logs, logs, &mut v);
    v.sort();
    v
}

/// Physical lines of `bytes` with their start offsets: split on `\n`; a last line
/// without `\n` counts when non-empty; a trailing `\n` adds no empty line.
fn physical_lines(bytes: &[u8]) -> Vec<(u64, &[u8])> {
    let mut out = vec![];
    let mut start = 0usize;
    for (i, &b) in bytes.iter().enumerate() {
        if b == b'\n' {
            out.push((start as u64, &bytes[start..i]));
            start = i + 1;
        }
    }
    if start < bytes.len() {
        out.push((start as u64, &bytes[start..]));
    }
    out
}

const MARKERS: [&str; 5] = [":job_id:", ":actor_name:", ":task_name:", ":task_attempt_start:", ":task_attempt_end:"];

/// File name (last path component) of a `/`-separated relative path.
fn file_name(rel: &str) -> &str {
    rel.rsplit('/').next().unwrap_or(rel)
}

/// A worker's captured stdout/stderr (`worker-…`/`io_worker-…` `.out`/`.err`, maybe rotated).
fn is_worker_stream_file(rel: &str) -> bool {
    let re = Regex::new(r"^(io_)?worker-[^/]*\.(out|err)(\.\d+)?$").unwrap();
    re.is_match(file_name(rel))
}

#[test]
fn line_counts_offsets_reconcile_with_raw_files() {
    let mut failures = vec![];
    for dir in fixture_dirs() {
        let logs = logs_dir(&dir);
        let recs = scan_records(&dir);
        let mut by_file: BTreeMap<&str, Vec<&Rec>> = BTreeMap::new();
        for r in &recs {
            by_file.entry(r.rel.as_str()).or_default().push(r);
        }
        let files = raw_files(&logs);
        let known: HashSet<&str> = files.iter().map(|(rel, _)| rel.as_str()).collect();
        for rel in by_file.keys() {
            if !known.contains(rel) {
                failures.push(format!("{}: records for {rel:?}, which is not a file of the logs dir", dir.display()));
            }
        }
        for (rel, path) in &files {
            let bytes = std::fs::read(path).unwrap();
            let lines = physical_lines(&bytes);
            let worker = is_worker_stream_file(rel);
            let markers = if worker {
                lines.iter().filter(|(_, l)| MARKERS.iter().any(|m| l.starts_with(m.as_bytes()))).count()
            } else {
                0
            };
            let file_recs = by_file.get(rel.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let rec_lines: u64 = file_recs.iter().map(|r| r.lines as u64).sum();
            if rec_lines + markers as u64 != lines.len() as u64 {
                failures.push(format!(
                    "{}/{rel}: {} physical lines, but records span {rec_lines} lines + {markers} marker lines = {}",
                    logs.display(),
                    lines.len(),
                    rec_lines + markers as u64
                ));
            }
            if worker {
                for r in file_recs {
                    if r.component != "worker" {
                        failures.push(format!("{rel}: worker stream file has component {:?}", r.component));
                        break;
                    }
                }
            }
            let starts: HashSet<u64> = lines.iter().map(|(o, _)| *o).collect();
            let mut prev: Option<u64> = None;
            for r in file_recs {
                if let Some(p) = prev {
                    if r.offset <= p {
                        failures.push(format!(
                            "{rel}: offsets not strictly increasing: {p} then {} ({})",
                            r.offset, r.json
                        ));
                    }
                }
                prev = Some(r.offset);
                if !starts.contains(&r.offset) {
                    failures.push(format!("{rel}: offset {} is not the start of a line ({})", r.offset, r.json));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} reconciliation failure(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn timestamped_formats_have_parsed_timestamp_and_level() {
    let mut failures = vec![];
    for dir in fixture_dirs() {
        let recs = scan_records(&dir);
        let timestamped: Vec<&Rec> = recs
            .iter()
            .filter(|r| matches!(r.kind, FileKind::Cpp | FileKind::PythonComponent | FileKind::Serve | FileKind::Event))
            .collect();
        assert!(!timestamped.is_empty(), "{}: no timestamped records", dir.display());
        // A file that starts mid-record (rotation cut the header off into a deleted
        // file) has one headerless first record; it is flagged, and it must be the
        // only record of its file without a header.
        let (headerless, timestamped): (Vec<&Rec>, Vec<&Rec>) =
            timestamped.into_iter().partition(|r| r.json.contains("\"headerless\":true"));
        for r in &headerless {
            assert_eq!(r.offset, 0, "headerless record not at the start of {}: {}", r.rel, r.json);
        }
        let bad: Vec<&&Rec> =
            timestamped.iter().filter(|r| r.timestamp.is_none() || r.inferred || r.level.is_none()).collect();
        let ok = timestamped.len() - bad.len();
        let ratio = ok as f64 / timestamped.len() as f64;
        if ratio < 0.999 {
            let mut msg = format!(
                "{}: only {ok}/{} ({:.3}%) records of timestamped formats have a parsed timestamp and a level; offending records:",
                dir.display(),
                timestamped.len(),
                ratio * 100.0
            );
            for r in &bad {
                msg.push_str(&format!("\n  [{}:{} kind={:?} lines={}] {}", r.rel, r.offset, r.kind, r.lines, r.json));
            }
            failures.push(msg);
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A raw line as JSON, when it is a JSON object.
fn json_line(line: &str) -> Option<serde_json::Value> {
    line.starts_with('{').then(|| serde_json::from_str(line).ok()).flatten()
}

/// Ground truth worker id → actor id, from the raw files with regexes (not the parser).
fn actor_truth(logs: &Path) -> BTreeMap<String, String> {
    let core_name = Regex::new(r"^python-core-worker-([0-9a-f]{56})_\d+(\.\d+)?\.log(\.\d+)?$").unwrap();
    let creating = Regex::new(r"Creating actor(?: actor_id=|: )([0-9a-f]{32})").unwrap();
    let gcs_name = Regex::new(r"^gcs_server\.out(\.\d+)?$").unwrap();
    let submitting =
        Regex::new(r"Submitting actor creation task to worker\. actor_id=([0-9a-f]{32}) worker_id=([0-9a-f]{56})")
            .unwrap();
    let start = Regex::new(r"Start creating actor ([0-9a-f]{32}) on worker ([0-9a-f]{56})").unwrap();
    let mut truth: BTreeMap<String, String> = BTreeMap::new();
    let mut add = |w: &str, a: &str, src: &str| {
        if let Some(prev) = truth.insert(w.to_string(), a.to_string()) {
            assert_eq!(prev, a, "ground truth conflict for worker {w} (from {src}): two actors");
        }
    };
    for (rel, path) in raw_files(logs) {
        let name = file_name(&rel).to_string();
        if let Some(c) = core_name.captures(&name) {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            for line in text.lines() {
                if let Some(m) = creating.captures(line) {
                    add(&c[1], &m[1], &rel);
                }
                // RAY_BACKEND_LOG_JSON=1: {"message":"Creating actor",…,"actor_id":"…"}
                if let Some(v) = json_line(line).filter(|v| v["message"] == "Creating actor") {
                    add(&c[1], v["actor_id"].as_str().unwrap(), &rel);
                }
            }
        } else if gcs_name.is_match(&name) {
            let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
            for line in text.lines() {
                if let Some(m) = submitting.captures(line) {
                    add(&m[2], &m[1], &rel);
                }
                if let Some(m) = start.captures(line) {
                    add(&m[2], &m[1], &rel);
                }
                if let Some(v) = json_line(line)
                    .filter(|v| v["message"].as_str().is_some_and(|m| m.starts_with("Submitting actor creation task")))
                {
                    add(v["worker_id"].as_str().unwrap(), v["actor_id"].as_str().unwrap(), &rel);
                }
            }
        }
    }
    truth
}

/// The worker id a worker stream file or core-worker log is named after.
fn owning_worker(rel: &str) -> Option<String> {
    let re = Regex::new(r"^(?:worker-([0-9a-f]{56})-|python-core-worker-([0-9a-f]{56})_)").unwrap();
    let c = re.captures(file_name(rel))?;
    c.get(1).or(c.get(2)).map(|m| m.as_str().to_string())
}

#[test]
fn actor_worker_records_carry_their_actor_id() {
    let mut failures = vec![];
    for dir in fixture_dirs() {
        let logs = logs_dir(&dir);
        let truth = actor_truth(&logs);
        let mut checked: BTreeMap<&str, usize> = BTreeMap::new();
        let recs = scan_records(&dir);
        for r in &recs {
            let Some(w) = owning_worker(&r.rel) else {
                continue;
            };
            let Some(want) = truth.get(&w) else {
                continue;
            };
            *checked.entry(want.as_str()).or_default() += 1;
            let got = r.ids.actor_id.map(|a| a.as_str().to_string());
            if got.as_deref() != Some(want.as_str()) {
                failures.push(format!(
                    "{}: {}:{}: expected actor_id {want} (worker {w}), got {got:?}: {}",
                    dir.display(),
                    r.rel,
                    r.offset,
                    r.json
                ));
            }
        }
        if truth.is_empty() || checked.is_empty() {
            failures.push(format!(
                "{}: no actor worker found (truth: {truth:?}) or none of its files has records",
                dir.display()
            ));
        }
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn worker_records_carry_worker_and_job_ids() {
    let mut failures = vec![];
    for dir in fixture_dirs() {
        let recs = scan_records(&dir);
        let mut n = 0;
        for r in recs.iter().filter(|r| r.component == "worker") {
            n += 1;
            // Spill/restore IO workers (`io_worker-<wid>-<pid>.err`) serve the raylet,
            // not a job: their file names and lines carry no job (ray-2.40-health has
            // their copies of `Failed to connect to GCS …`).
            let jobless = r.rel.rsplit('/').next().is_some_and(|f| f.starts_with("io_worker-"));
            if r.ids.worker_id.is_none() || (r.ids.job_id.is_none() && !jobless) {
                failures.push(format!(
                    "{}: {}:{}: worker_id={:?} job_id={:?}: {}",
                    dir.display(),
                    r.rel,
                    r.offset,
                    r.ids.worker_id.map(|i| i.as_str().to_string()),
                    r.ids.job_id.map(|i| i.as_str().to_string()),
                    r.json
                ));
            }
        }
        assert!(n > 0, "{}: no worker records", dir.display());
    }
    assert!(failures.is_empty(), "{} failure(s):\n{}", failures.len(), failures.join("\n"));
}

/// Symmetric difference of two NDJSON multisets, for a readable failure.
fn diff(a: &[String], b: &[String]) -> String {
    let sa: BTreeSet<&String> = a.iter().collect();
    let sb: BTreeSet<&String> = b.iter().collect();
    let only_a: Vec<_> = sa.difference(&sb).take(5).collect();
    let only_b: Vec<_> = sb.difference(&sa).take(5).collect();
    format!(
        "{} vs {} lines; only in first (up to 5): {only_a:#?}\nonly in second (up to 5): {only_b:#?}",
        a.len(),
        b.len()
    )
}

#[test]
fn file_order_does_not_change_records() {
    for dir in fixture_dirs() {
        let logs = logs_dir(&dir);
        let sorted: Vec<PathBuf> = raw_files(&logs).into_iter().map(|(_, p)| p).collect();
        let reversed: Vec<PathBuf> = sorted.iter().rev().cloned().collect();
        let (mut a, ra) = parse_ndjson(&sorted);
        let (mut b, rb) = parse_ndjson(&reversed);
        assert!(ra.failures.is_empty(), "{:?}", ra.failures);
        assert!(rb.failures.is_empty(), "{:?}", rb.failures);
        assert!(!a.is_empty(), "{}: no records", dir.display());
        a.sort();
        b.sort();
        assert!(a == b, "{}: sorted vs reverse-sorted file order differ: {}", dir.display(), diff(&a, &b));
    }
}

#[test]
fn single_files_give_the_same_records_as_their_dir() {
    for dir in fixture_dirs() {
        let logs = logs_dir(&dir);
        let files: Vec<PathBuf> = raw_files(&logs).into_iter().map(|(_, p)| p).collect();
        let (mut a, _) = parse_ndjson(std::slice::from_ref(&dir));
        let (mut b, _) = parse_ndjson(&files);
        a.sort();
        b.sort();
        assert!(a == b, "{}: dir vs its files given one by one differ: {}", dir.display(), diff(&a, &b));
    }
}

/// Guards the helpers above against off-by-one mistakes.
#[test]
fn physical_line_helper() {
    let n = |b: &[u8]| physical_lines(b).len();
    assert_eq!(n(b""), 0);
    assert_eq!(n(b"a"), 1);
    assert_eq!(n(b"a\n"), 1);
    assert_eq!(n(b"a\nb"), 2);
    assert_eq!(n(b"\n\n"), 2);
    assert_eq!(physical_lines(b"ab\ncd").iter().map(|l| l.0).collect::<Vec<_>>(), vec![0, 3]);
    assert!(is_worker_stream_file("worker-0b082b171e070fa2789d0ae9c2755947634fe92cb01139f0b5b8912e-01000000-3897.err"));
    assert!(!is_worker_stream_file("python-core-worker-x_1.log"));
}
