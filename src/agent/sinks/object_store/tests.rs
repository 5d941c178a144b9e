//! The mirror against an in-memory store, on a real Ray 2.60 session
//! (`fixtures/ray-2.60-events`: its logs dir and the posts Ray sent). Expected keys
//! and contents come from the files and from Ray's posts, decoded here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::TryStreamExt;
use object_store::path::Path as Key;
use object_store::ObjectStoreExt;

use super::config::{Backend, ObjectStoreConfig};
use super::encode::Layout;
use super::service::Store;
use super::*;
use crate::agent::checkpoint::Resume;
use crate::agent::events::spool::{post_id, Delivered, Readers};
use crate::agent::events::tests::posts;

const SESSION: &str = "session_2026-12-01_19-45-51_773160_3103";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ray-2.60-events")
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("raylog-os-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A copy of the fixture's session under `root/`.
fn session_copy(root: &Path) -> PathBuf {
    let logs = root.join(SESSION).join("logs");
    let from = fixture().join(SESSION).join("logs");
    let mut stack = vec![from.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let rel = e.path().strip_prefix(&from).unwrap().to_path_buf();
            if e.file_type().unwrap().is_dir() {
                std::fs::create_dir_all(logs.join(&rel)).unwrap();
                stack.push(e.path());
            } else {
                std::fs::create_dir_all(logs.join(&rel).parent().unwrap()).unwrap();
                std::fs::copy(e.path(), logs.join(&rel)).unwrap();
            }
        }
    }
    logs
}

fn config(head: bool) -> ObjectStoreConfig {
    ObjectStoreConfig {
        name: "bucket".into(),
        backend: Backend::S3,
        bucket: "b".into(),
        endpoint: None,
        region: None,
        virtual_hosted: false,
        allow_http: false,
        azure_account_url: None,
        layout: Layout { root: "root".into(), namespace: "ns".into(), owner: None, cluster: "c1".into() },
        node_id: None,
        head,
        upload_interval: Duration::from_secs(60),
        max_active_upload_bytes: 256 << 20,
    }
}

/// Standard base64, decoded here and not by the crate.
fn b64_hex(s: &str) -> String {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let (mut acc, mut bits, mut out) = (0u32, 0, String::new());
    for c in s.bytes().filter(|c| *c != b'=') {
        acc = (acc << 6) | alphabet.iter().position(|a| *a == c).unwrap() as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push_str(&format!("{:02x}", (acc >> bits) & 0xff));
        }
    }
    out
}

/// The node id Ray's own NODE_DEFINITION_EVENT gives.
fn node_from_posts() -> String {
    for p in posts() {
        for e in serde_json::from_slice::<Vec<serde_json::Value>>(&p).unwrap() {
            if e["eventType"] == "NODE_DEFINITION_EVENT" {
                return b64_hex(e["nodeDefinitionEvent"]["nodeId"].as_str().unwrap());
            }
        }
    }
    panic!("no NODE_DEFINITION_EVENT in the fixture's posts");
}

async fn objects(store: &Store) -> BTreeMap<String, Vec<u8>> {
    let metas: Vec<_> = store.objects.list(None).try_collect().await.unwrap();
    let mut out = BTreeMap::new();
    for m in metas {
        let bytes = store.objects.get(&m.location).await.unwrap().bytes().await.unwrap();
        out.insert(m.location.to_string(), bytes.to_vec());
    }
    out
}

fn mirror(store: &Store, root: &Path, state: &Path, head: bool, spool: Option<Arc<Mutex<Spool>>>) -> Mirror {
    let cfg = config(head);
    Mirror::new(cfg, store.clone(), vec![root.to_path_buf()], state, spool, Arc::new(ObjectStoreMetrics::default()))
}

#[tokio::test]
async fn every_file_of_a_real_session_lands_byte_identical_under_its_node() {
    let dir = scratch("files");
    let logs = session_copy(&dir.join("ray"));
    let store = Store::memory();
    let node = node_from_posts();
    let mut m = mirror(&store, &dir.join("ray"), &dir.join("state"), true, None);
    let r = m.round(false).await;
    let got = objects(&store).await;
    let prefix = format!("root/cluster-history/raycluster/ns/c1/{SESSION}/{node}/logs/");
    let mut files = vec![];
    mirror::walk(&mirror::LogsDir { session: SESSION.into(), path: logs.clone() }, &mut files);
    assert!(files.len() > 20);
    for f in &files {
        let want = std::fs::read(&f.path).unwrap();
        assert_eq!(got.get(&format!("{prefix}{}", f.rel)), Some(&want), "{}", f.rel);
    }
    assert_eq!(r.uploads as usize, files.len());
    // The head's marker, empty; then nothing more.
    assert_eq!(got.get(&format!("root/cluster-metadata/raycluster/ns_c1/{SESSION}")), Some(&vec![]));
    assert_eq!(got.len(), files.len() + 1);
    // Nothing changed: the next round writes nothing, and neither does a restart.
    assert_eq!(m.round(false).await, Round::default());
    let mut again = mirror(&store, &dir.join("ray"), &dir.join("state"), true, None);
    assert_eq!(again.round(false).await, Round::default());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_rename_rotation_is_followed_by_copies_and_an_active_file_waits_its_interval() {
    let dir = scratch("rotate");
    let logs = session_copy(&dir.join("ray"));
    let store = Store::memory();
    let node = node_from_posts();
    let key = |rel: &str| format!("root/cluster-history/raycluster/ns/c1/{SESSION}/{node}/logs/{rel}");
    let mut m = mirror(&store, &dir.join("ray"), &dir.join("state"), false, None);
    std::fs::write(logs.join("app.log.1"), b"one\n").unwrap();
    std::fs::write(logs.join("app.log"), b"two\n").unwrap();
    m.round(false).await;
    // An append within the interval waits; the rotation goes at once.
    std::fs::write(logs.join("app.log"), b"two\nthree\n").unwrap();
    let r = m.round(false).await;
    assert_eq!(r.uploads, 0, "an active file changed within upload_interval waits");
    std::fs::rename(logs.join("app.log.1"), logs.join("app.log.2")).unwrap();
    std::fs::rename(logs.join("app.log"), logs.join("app.log.1")).unwrap();
    std::fs::write(logs.join("app.log"), b"four\n").unwrap();
    let r = m.round(false).await;
    let got = objects(&store).await;
    assert_eq!(got[&key("app.log.2")], b"one\n");
    assert_eq!(got[&key("app.log.1")], b"two\nthree\n");
    assert_eq!(got[&key("app.log")], b"four\n");
    // app.log.2 by copy; app.log.1 had grown since its upload (uploaded), app.log is new.
    assert_eq!((r.copies, r.uploads), (1, 2));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn past_max_active_upload_bytes_a_file_waits_for_the_last_round_and_multipart_is_used() {
    let dir = scratch("big");
    let logs = session_copy(&dir.join("ray"));
    let store = Store::memory();
    let node = node_from_posts();
    let mut cfg = config(false);
    cfg.max_active_upload_bytes = 1 << 20;
    let metrics = Arc::new(ObjectStoreMetrics::default());
    let mut m = Mirror::new(cfg, store.clone(), vec![dir.join("ray")], &dir.join("state"), None, metrics.clone());
    // 20 MiB of distinct lines: three parts.
    let big: Vec<u8> = (0..400_000u32).flat_map(|i| format!("line {i:045}\n").into_bytes()).collect();
    std::fs::write(logs.join("big.log"), &big).unwrap();
    m.round(false).await;
    let key = format!("root/cluster-history/raycluster/ns/c1/{SESSION}/{node}/logs/big.log");
    assert!(!objects(&store).await.contains_key(&key));
    assert_eq!(metrics.deferred.load(Relaxed), 1);
    let r = m.round(true).await;
    assert_eq!(r.failures, 0);
    assert_eq!(objects(&store).await[&key], big);
    assert!(lock(&m.state).uploads.is_empty(), "a completed upload's id is forgotten");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_multipart_upload_a_kill_left_is_aborted_at_the_next_start() {
    let dir = scratch("abort");
    let store = Store::memory();
    let k = Key::from("root/x");
    let id = store.multipart.create_multipart(&k).await.unwrap();
    let mut s = State::load(&dir, "bucket");
    s.uploads.insert(state::Pending { key: "root/x".into(), id: id.clone() });
    s.save().unwrap();
    let m = mirror(&store, &dir.join("none"), &dir, false, None);
    store.abort_left(&m.state).await;
    // The in-memory store forgets an aborted upload: a part put to it now fails.
    let part = store.multipart.put_part(&k, &id, 0, vec![1u8].into()).await;
    assert!(part.is_err(), "the upload should be gone");
    assert!(lock(&m.state).uploads.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

fn spool_posts(dir: &Path, bodies: &[Vec<u8>]) -> Arc<Mutex<Spool>> {
    let readers = Readers { forwarded: None, uploaded: Some(Default::default()), records: false };
    let mut spool =
        Spool::open_with(dir, 1 << 30, Arc::new(Delivered::default()), &Resume::default(), readers).unwrap();
    for b in bodies {
        let (lines, _) = crate::agent::events::receiver::spool_lines(b, &post_id(), 1 << 20).unwrap().unwrap();
        spool.append(&lines).unwrap();
    }
    Arc::new(Mutex::new(spool))
}

/// Event id → the keys holding it.
fn event_places(got: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (k, body) in got.iter().filter(|(k, _)| k.contains("_events/")) {
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            let v: serde_json::Value = serde_json::from_slice(line).unwrap();
            out.entry(v["eventId"].as_str().unwrap().to_string()).or_default().push(k.clone());
        }
    }
    out
}

#[tokio::test]
async fn rays_events_go_to_node_and_job_keys_once_even_when_posted_twice_or_retried() {
    let dir = scratch("events");
    session_copy(&dir.join("ray"));
    let store = Store::memory();
    let node = node_from_posts();
    let mut bodies = posts();
    // Ray posts at least once: the first post again.
    bodies.push(bodies[0].clone());
    let spool = spool_posts(&dir.join("spool"), &bodies);
    let mut m = mirror(&store, &dir.join("ray"), &dir.join("state"), false, Some(spool.clone()));
    let r = m.round(false).await;
    let got = objects(&store).await;
    let places = event_places(&got);
    let mut want: BTreeMap<String, Option<String>> = BTreeMap::new();
    for p in &bodies {
        for e in serde_json::from_slice::<Vec<serde_json::Value>>(p).unwrap() {
            let ty = e["eventType"].as_str().unwrap();
            let payload = [
                "driverJobDefinitionEvent",
                "driverJobLifecycleEvent",
                "taskDefinitionEvent",
                "taskLifecycleEvent",
                "taskProfileEvents",
                "actorTaskDefinitionEvent",
                "actorDefinitionEvent",
            ];
            let job = (!ty.starts_with("NODE_"))
                .then(|| payload.iter().find_map(|k| e[*k]["jobId"].as_str().map(b64_hex)))
                .flatten();
            want.insert(e["eventId"].as_str().unwrap().to_string(), job);
        }
    }
    assert_eq!(places.len(), want.len(), "every event id once");
    let prefix = format!("root/cluster-history/raycluster/ns/c1/{SESSION}/{node}/");
    for (id, job) in &want {
        let keys = &places[id];
        assert_eq!(keys.len(), 1, "{id} in {keys:?}");
        let dir = match job {
            Some(j) => format!("{prefix}job_events/{j}/{node}-"),
            None => format!("{prefix}node_events/{node}-"),
        };
        assert!(keys[0].starts_with(&dir) && keys[0].ends_with(".jsonl"), "{} not under {dir}", keys[0]);
    }
    assert_eq!(r.events as usize, want.len());
    assert!(m.metrics.event_duplicates.load(Relaxed) > 0);
    // A crash before the cursor was saved: the same flush again writes the same keys.
    let before: Vec<String> = got.keys().cloned().collect();
    lock(&m.state).events = None;
    m.seen = Default::default();
    m.round(false).await;
    let after: Vec<String> = objects(&store).await.keys().cloned().collect();
    assert_eq!(before, after);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_file_rotated_between_listing_and_upload_is_not_uploaded_under_its_old_identity() {
    let dir = scratch("moved");
    std::fs::write(dir.join("x"), b"old bytes\n").unwrap();
    let held = mirror::held_of(&std::fs::metadata(dir.join("x")).unwrap());
    // Ray rotates: `x` is renamed away and a new `x` (another inode) takes its name.
    std::fs::rename(dir.join("x"), dir.join("x.1")).unwrap();
    std::fs::write(dir.join("x"), b"new bytes, longer\n").unwrap();
    let store = Store::memory();
    let state = Mutex::new(State::load(&dir, "bucket"));
    let out = store.upload_file(&dir.join("x"), "k", held, &state).await;
    assert!(matches!(out, Err(service::WriteError::Moved { .. })), "{out:?}");
    assert!(objects(&store).await.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The planner's bytes per hour for one log growing 1 MB/s with the defaults, Ray's
/// rotation at 512 MiB (`RAY_ROTATION_MAX_BYTES`) and 5 backups: the rounds run on
/// virtual time, each planned write counted as done. The figure (docs/object-store.md,
/// "When files go up") is printed; the bound is what the policy allows: each active
/// upload is at most `max_active_upload_bytes`, one every `upload_interval`, plus
/// each rotated file once.
#[test]
fn bytes_uploaded_per_hour_for_a_log_growing_1_mb_per_second() {
    let (rate, rotate_at, backups) = (1_000_000u64, 512u64 << 20, 5u64);
    let k = mirror::Knobs { upload_interval: Duration::from_secs(60), max_active_upload_bytes: 256 << 20, last: false };
    let t0 = std::time::Instant::now();
    let (mut memo, mut state) = (mirror::Memo::default(), State::default());
    // Files by name: (inode, size). The active one is "x"; backups "x.1".."x.5".
    let mut files: Vec<(String, u64, u64)> = vec![("x".into(), 1, 0)];
    let (mut next_ino, mut uploaded, mut copied, mut written) = (2u64, 0u64, 0u64, 0u64);
    for round in 1..=360u64 {
        let now = t0 + Duration::from_secs(round * 10);
        written += 10 * rate;
        files[0].2 += 10 * rate;
        if files[0].2 >= rotate_at {
            // Ray's rename rotation: x.4 → x.5 … x → x.1, then a new x.
            let mut renamed: Vec<(String, u64, u64)> = files
                .iter()
                .filter_map(|(name, ino, size)| {
                    let n = if name == "x" { 0 } else { name[2..].parse::<u64>().unwrap() };
                    (n < backups).then(|| (format!("x.{}", n + 1), *ino, *size))
                })
                .collect();
            renamed.insert(0, ("x".into(), next_ino, 0));
            next_ino += 1;
            files = renamed;
        }
        let found: Vec<(String, mirror::Found)> = files
            .iter()
            .map(|(name, ino, size)| {
                // A file's mtime is the time of its last write: backups keep theirs.
                let held = state::Held {
                    dev: 1,
                    ino: *ino,
                    born: 7,
                    size: *size,
                    mtime_ns: (*size / rate) as i64 + *ino as i64 * 1_000_000,
                };
                let f = mirror::Found {
                    path: name.into(),
                    session: "s".into(),
                    rel: name.clone(),
                    held,
                    backup: name != "x",
                };
                (name.clone(), f)
            })
            .collect();
        let plan = memo.plan(&found, &state, now, k, round);
        for a in plan.actions {
            match a {
                mirror::Action::Upload { key, held, .. } => {
                    uploaded += held.size;
                    state.objects.insert(key, held);
                }
                mirror::Action::Copy { to, held, .. } => {
                    copied += 1;
                    state.objects.insert(to, held);
                }
            }
        }
    }
    let ratio = uploaded as f64 / written as f64;
    eprintln!(
        "1 MB/s for an hour: {:.2} GB written, {:.2} GB uploaded ({ratio:.2}x), {copied} server-side copies",
        written as f64 / 1e9,
        uploaded as f64 / 1e9
    );
    // Per rotation cycle: at most four active uploads under 256 MiB (one a minute)
    // plus the rotated file once; an hour holds under seven cycles.
    let cycle = 4 * (256u64 << 20) + rotate_at;
    assert!(uploaded <= 7 * cycle, "{uploaded} bytes uploaded");
    assert!(copied > 0, "rotations should be followed by copies");
}

#[tokio::test]
async fn events_of_a_session_whose_logs_are_not_here_go_under_the_node_they_name() {
    let dir = scratch("events-alone");
    let store = Store::memory();
    let spool = spool_posts(&dir.join("spool"), &posts());
    // No logs dir at all: the events' own nodeId names the node.
    let mut m = mirror(&store, &dir.join("no-ray"), &dir.join("state"), false, Some(spool));
    let r = m.round(false).await;
    let got = objects(&store).await;
    let node = node_from_posts();
    assert!(r.events > 0);
    let prefix = format!("root/cluster-history/raycluster/ns/c1/{SESSION}/{node}/");
    assert!(got.keys().all(|k| k.starts_with(&prefix)), "{:?}", got.keys().collect::<Vec<_>>());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn session_latest_names_its_target_session() {
    let dir = scratch("latest");
    let logs = session_copy(&dir.join("ray"));
    std::os::unix::fs::symlink(dir.join("ray").join(SESSION), dir.join("ray").join("session_latest")).unwrap();
    let want = vec![mirror::LogsDir { session: SESSION.into(), path: std::fs::canonicalize(&logs).unwrap() }];
    for p in [dir.join("ray"), dir.join("ray/session_latest"), dir.join("ray/session_latest/logs")] {
        let got = mirror::logs_dirs(std::slice::from_ref(&p));
        assert_eq!(got.iter().map(|d| &d.session).collect::<Vec<_>>(), vec![SESSION], "{}", p.display());
        if p.ends_with("logs") {
            assert_eq!(got, want);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
