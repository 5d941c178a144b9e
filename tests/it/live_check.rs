//! The assertions of the live test (`live.rs`) on what the servers received, kept
//! apart from the orchestration. Each check appends readable failures instead of
//! panicking at the first, so one run shows everything that is wrong.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use raylog::testkit::elasticsearch::Doc;
use raylog::testkit::loki::ReceivedEntry;
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

const IDS: [&str; 5] = ["node_id", "job_id", "worker_id", "actor_id", "task_id"];

/// One row of the workload's manifest: a token it wrote and the ids Ray reported.
#[derive(Debug, Deserialize)]
pub struct Row {
    pub tok: String,
    pub kind: String,
    pub job_id: Option<String>,
    pub worker_id: Option<String>,
    pub node_id: Option<String>,
    pub task_id: Option<String>,
    pub actor_id: Option<String>,
}

impl Row {
    fn id(&self, key: &str) -> Option<&str> {
        match key {
            "job_id" => self.job_id.as_deref(),
            "worker_id" => self.worker_id.as_deref(),
            "node_id" => self.node_id.as_deref(),
            "task_id" => self.task_id.as_deref(),
            "actor_id" => self.actor_id.as_deref(),
            _ => None,
        }
    }
}

/// A received record, whichever server it came from.
#[derive(Debug)]
pub struct Got {
    pub message: String,
    pub component: String,
    pub ids: BTreeMap<String, String>,
}

impl Got {
    pub fn from_loki(e: &ReceivedEntry) -> Got {
        let ids = IDS.iter().filter_map(|k| Some((k.to_string(), e.metadata.get(*k)?.clone()))).collect();
        Got { message: e.line.clone(), component: e.labels.get("component").cloned().unwrap_or_default(), ids }
    }

    /// An entry a real Loki returned: its line and its stream labels, with the
    /// structured metadata merged in.
    pub fn from_labels(line: String, labels: &BTreeMap<String, String>) -> Got {
        let ids = IDS.iter().filter_map(|k| Some((k.to_string(), labels.get(*k)?.clone()))).collect();
        Got { message: line, component: labels.get("component").cloned().unwrap_or_default(), ids }
    }

    pub fn from_es(src: &Value) -> Got {
        let s = |k: &str| src[k].as_str().unwrap_or_default().to_string();
        let ids = IDS.iter().filter_map(|k| Some((k.to_string(), src[*k].as_str()?.to_string()))).collect();
        Got { message: s("message"), component: s("component"), ids }
    }

    fn id(&self, key: &str) -> Option<&str> {
        self.ids.get(key).map(String::as_str)
    }
}

/// Every manifest token arrived exactly as often as the workload wrote it, with the
/// ids Ray's runtime context reported for the code that wrote it.
pub fn check_manifest(sink: &str, got: &[Got], rows: &[Row], failures: &mut Vec<String>) {
    let mut by_tok: BTreeMap<&str, Vec<&Row>> = BTreeMap::new();
    for r in rows {
        by_tok.entry(&r.tok).or_default().push(r);
    }
    assert!(by_tok.len() > 100, "the manifest is too small to mean anything: {} tokens", by_tok.len());
    for (tok, rows) in &by_tok {
        let needle = format!("raylog-live {tok} ");
        let recs: Vec<&Got> = got.iter().filter(|g| g.message.contains(&needle)).collect();
        let kind = rows[0].kind.as_str();
        if kind == "task-error" {
            check_traceback(sink, tok, &recs, failures);
            continue;
        }
        // A lossy line may be missing on disk too (`check_on_disk` covers it then).
        let (kind, lossy) = kind.strip_suffix("-lossy").map_or((kind, false), |k| (k, true));
        if recs.len() != rows.len() && !(lossy && recs.len() < rows.len()) {
            failures.push(format!("{sink}: {tok} ({kind}) arrived {} times, written {} times", recs.len(), rows.len()));
        }
        let must: &[&str] = match kind {
            "actor-print" => &["actor_id"],
            // No task_id required: this run rotates worker files
            // (RAY_ROTATION_MAX_BYTES), and then Ray 2.60 posts no `taskLogInfo`.
            "task-print" => &["job_id", "worker_id", "node_id"],
            _ => &["job_id", "task_id", "worker_id", "node_id"], // structured logs
        };
        for g in &recs {
            for key in IDS {
                let want = rows.iter().find_map(|r| r.id(key));
                let required = must.contains(&key) || (kind.starts_with("struct") && key == "actor_id");
                match (g.id(key), want) {
                    (None, Some(_)) if !required => {}
                    (have, want) if have == want || (want.is_none() && !required) => {}
                    (have, want) => failures
                        .push(format!("{sink}: {tok} ({kind}, {}) has {key}={have:?}, Ray says {want:?}", g.component)),
                }
            }
        }
    }
}

/// The failing task's traceback, as the job driver printed it, is one record.
fn check_traceback(sink: &str, tok: &str, recs: &[&Got], failures: &mut Vec<String>) {
    let whole = recs.iter().any(|g| {
        g.message.starts_with("Traceback (most recent call last):")
            && g.message.contains("RayTaskError(ValueError)")
            && g.message.contains(&format!("ValueError: raylog-live {tok} "))
    });
    if !whole {
        let shown: Vec<&str> = recs.iter().map(|g| g.message.as_str()).collect();
        failures.push(format!("{sink}: no single record holds the traceback of {tok}; records with it: {shown:#?}"));
    }
}

/// Every workload line in any file Ray left on disk arrived, exactly once.
pub fn check_on_disk(sink: &str, got: &[Got], ray_dir: &Path, failures: &mut Vec<String>) {
    let re = Regex::new(r"raylog-live (?:filler )?LIVE-[a-z]+-[A-Za-z0-9-]+(?: \d{5})?").unwrap();
    let mut on_disk: HashMap<String, usize> = HashMap::new();
    let mut files = 0;
    for path in files_under(ray_dir) {
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap_or_default()).into_owned();
        files += 1;
        for m in re.find_iter(&text) {
            *on_disk.entry(m.as_str().to_string()).or_default() += 1;
        }
    }
    let mut received: HashMap<String, usize> = HashMap::new();
    for g in got {
        for m in re.find_iter(&g.message) {
            *received.entry(m.as_str().to_string()).or_default() += 1;
        }
    }
    assert!(on_disk.len() > 1000, "only {} workload lines in {files} files under {}", on_disk.len(), ray_dir.display());
    let mut bad: Vec<String> = on_disk
        .iter()
        .filter(|(k, n)| received.get(*k) != Some(n))
        .map(|(k, n)| format!("{k:?}: {n} on disk, {} received", received.get(k).copied().unwrap_or(0)))
        .collect();
    bad.extend(
        received
            .iter()
            .filter(|(k, _)| !on_disk.contains_key(*k))
            .map(|(k, n)| format!("{k:?}: {n} received, not on disk")),
    );
    if !bad.is_empty() {
        bad.sort();
        failures.push(format!(
            "{sink}: {} workload lines differ from disk, e.g. {:?}",
            bad.len(),
            &bad[..bad.len().min(8)]
        ));
    }
}

fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = vec![];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() && e.file_name() != "session_latest" {
                stack.push(e.path());
            } else if ft.is_file() && e.path().components().any(|c| c.as_os_str() == "logs") {
                out.push(e.path());
            }
        }
    }
    out
}

/// The live documents and those of `ship --once` over the finished dir are the same
/// set (same `_id`s) with the same content, but for what legitimately differs: the
/// file name (`x` became `x.1` by rotation), times that were inferred, and ids or
/// names the archive run learned from lines written *after* a record (its prescan
/// reads the whole dir first; live, a pool worker's first lines are read before any
/// job or actor is assigned to it). Live must never contradict the archive, only know
/// less; how many records that concerns is returned as a figure.
pub fn check_archive(live: &[Doc], archive: &[Doc], failures: &mut Vec<String>) -> usize {
    let norm = |d: &Doc| {
        let mut v = d.source.clone();
        let m = v.as_object_mut().unwrap();
        m.remove("file");
        if m.get("timestamp_inferred") == Some(&Value::Bool(true)) {
            m.remove("timestamp");
            m.remove("@timestamp");
        }
        (d.id.clone(), v)
    };
    let live: BTreeMap<String, Value> = live.iter().map(norm).collect();
    let archive: BTreeMap<String, Value> = archive.iter().map(norm).collect();
    let mut only_live: BTreeSet<&String> = live.keys().filter(|k| !archive.contains_key(*k)).collect();
    let mut only_archive: Vec<&Value> =
        archive.iter().filter(|(k, _)| !live.contains_key(*k)).map(|(_, v)| v).collect();
    let split = explain_splits(&live, &mut only_live, &mut only_archive);
    if split > 0 {
        println!("live: {split} multi-line records were emitted in pieces live (a writer paused over `idle_flush`)");
    }
    if !only_live.is_empty() || !only_archive.is_empty() {
        failures.push(format!(
            "live vs --once: {} documents only live, e.g. {:?}; {} only in the archive run, e.g. {:?}",
            only_live.len(),
            only_live.iter().take(3).map(|k| &live[*k]).collect::<Vec<_>>(),
            only_archive.len(),
            only_archive.iter().take(3).collect::<Vec<_>>()
        ));
    }
    let (mut knows_more, mut differ) = (0, vec![]);
    for (k, l) in &live {
        let Some(a) = archive.get(k) else { continue };
        match compare(l, a) {
            Agreement::Same => {}
            Agreement::ArchiveKnowsMore => knows_more += 1,
            Agreement::Differ => differ.push((l, a)),
        }
    }
    if !differ.is_empty() {
        failures.push(format!(
            "live vs --once: {} documents differ, e.g. {:#?}",
            differ.len(),
            &differ[..differ.len().min(3)]
        ));
    }
    knows_more
}

/// Takes out of `only_live` and `only_archive` each archive record that the live
/// agent emitted in pieces, and returns how many there were. A writer that pauses
/// longer than `idle_flush` in the middle of a multi-line record (raylet's and the
/// driver's stats dumps are written in several writes; a loaded machine has paused
/// one for over a second) has its record emitted as it stood: documented behaviour,
/// not a loss. The pieces must be the archive record's lines exactly, in order,
/// with nothing left over: a piece missing, altered or extra is still a failure.
fn explain_splits(
    live: &BTreeMap<String, Value>,
    only_live: &mut BTreeSet<&String>,
    only_archive: &mut Vec<&Value>,
) -> usize {
    let msg = |v: &Value| v["message"].as_str().unwrap_or_default().to_string();
    let mut explained = 0;
    only_archive.retain(|a| {
        let whole = msg(a);
        if !whole.contains('\n') {
            return true;
        }
        let mut pieces: Vec<(usize, &String, String)> = only_live
            .iter()
            .map(|k| (*k, msg(&live[*k])))
            .filter(|(_, m)| !m.is_empty() && whole.contains(m.as_str()))
            .filter_map(|(k, m)| Some((whole.find(m.as_str())?, k, m)))
            .collect();
        pieces.sort();
        let (mut at, mut used) = (0, vec![]);
        for (start, k, m) in &pieces {
            if *start == at {
                at += m.len();
                // The agent trims a record's trailing blank lines; the whole keeps them inside.
                at = whole.len() - whole[at..].trim_start().len();
                used.push(*k);
            }
        }
        if used.len() < 2 || at != whole.len() {
            return true;
        }
        for k in used {
            only_live.remove(k);
        }
        explained += 1;
        false
    });
    explained
}

enum Agreement {
    Same,
    ArchiveKnowsMore,
    Differ,
}

/// Compares one document of each run: equal but for ids and names the live one lacks.
fn compare(live: &Value, archive: &Value) -> Agreement {
    let learnable = |k: &str| IDS.contains(&k) || k == "actor_name" || k == "task_name";
    let (l, a) = (live.as_object().unwrap(), archive.as_object().unwrap());
    let mut more = false;
    for key in l.keys().chain(a.keys().filter(|k| !l.contains_key(*k))) {
        match (l.get(key), a.get(key)) {
            (x, y) if x == y => {}
            (None, Some(_)) if learnable(key) => more = true,
            _ => return Agreement::Differ,
        }
    }
    if more {
        Agreement::ArchiveKnowsMore
    } else {
        Agreement::Same
    }
}

/// Prints the run's figures: records per component, delivery latency.
pub fn report(es_docs: &[Got], loki: &[ReceivedEntry], workload_secs: f64, archive_knows_more: usize) {
    let mut per: BTreeMap<&str, usize> = BTreeMap::new();
    for g in es_docs {
        *per.entry(g.component.as_str()).or_default() += 1;
    }
    let at = Regex::new(r"^raylog-live \S+ .* at (\d{19})$").unwrap();
    let mut lat: Vec<f64> = loki
        .iter()
        .filter_map(|e| Some((e.received_ns - at.captures(&e.line)?[1].parse::<i64>().ok()?) as f64 / 1e6))
        .collect();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(f64::NAN);
    println!("live: {} records in {workload_secs:.0} s of Ray workload; per component: {per:?}", es_docs.len());
    println!("live: {archive_knows_more} records got more ids from `ship --once` (learned from later lines)");
    println!(
        "live: write→Loki latency over {} timed lines: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        lat.len(),
        pct(0.5),
        pct(0.99),
        pct(1.0)
    );
}

#[test]
fn a_record_emitted_in_pieces_live_is_explained_only_when_the_pieces_are_its_lines() {
    let doc = |id: &str, m: &str| Doc { index: "i".into(), id: id.into(), source: serde_json::json!({ "message": m }) };
    let archive = [doc("a", "Event stats:\n\nGlobal stats: 12\nQueueing: 3")];
    let mut failures = vec![];
    let pieces = [doc("l1", "Event stats:"), doc("l2", "Global stats: 12\nQueueing: 3")];
    check_archive(&pieces, &archive, &mut failures);
    assert!(failures.is_empty(), "{failures:?}");
    for bad in [
        vec![doc("l1", "Event stats:\n")],
        vec![doc("l1", "Event stats:\n"), doc("l2", "Global stats: 12\nQueueing: 4")],
        vec![doc("l1", "Event stats:\n"), doc("l2", "Global stats: 12\nQueueing: 3"), doc("l3", "extra")],
    ] {
        let mut failures = vec![];
        check_archive(&bad, &archive, &mut failures);
        assert_eq!(failures.len(), 1, "{bad:?} passed");
    }
}
