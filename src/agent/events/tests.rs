//! The spool's crash safety and bound, the receiver's answers and the forwarder, on
//! the posts Ray 2.60 really sent (`fixtures/ray-2.60-events/posts`).

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};

use super::receiver::{spool_lines, Refusal};
use super::spool::{complete_posts, post_id, Cursor, Delivered, Spool, SpoolError};
use super::*;
use crate::agent::checkpoint::{FileCheckpoint, FileKey, Resume};
use crate::agent::checkpoint::{Fingerprint, Observer};

mod fuzz;

/// `source.max_line_bytes` by default.
const MAX_LINE: usize = raylog_parsers::parser::DEFAULT_MAX_LINE_BYTES;

/// The posts Ray 2.60 sent (`fixtures/ray-2.60-events/posts`), in order.
pub(crate) fn posts() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/ray-2.60-events/posts");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    assert!(files.len() >= 5);
    files.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("raylog-spool-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn open(dir: &Path, max: u64, delivered: &Arc<Delivered>, saved: &[FileCheckpoint]) -> Spool {
    let saved = crate::agent::checkpoint::Resume::from_entries(saved.to_vec());
    Spool::open(dir, max, delivered.clone(), &saved, None).unwrap()
}

fn segments(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| is_segment_name(&e.file_name().to_string_lossy()))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    v.sort();
    v
}

/// The events of the spooled lines of `dir`, as Ray's JSON values, in order.
fn spooled_events(dir: &Path) -> Vec<serde_json::Value> {
    let mut v = vec![];
    for (_, bytes) in segments(dir) {
        for line in String::from_utf8(bytes).unwrap().lines() {
            let w: serde_json::Value = serde_json::from_str(line).unwrap();
            v.push(w["event"].clone());
        }
    }
    v
}

/// The checkpoint the source gives file `key` holding `file`, delivered to `offset`.
fn checkpoint(key: FileKey, file: &[u8], offset: u64) -> FileCheckpoint {
    FileCheckpoint {
        key,
        fingerprint: fingerprint(file),
        offset,
        context: None,
        last_time_ns: None,
        updated: 0,
        born: 0,
        gone_since: 0,
    }
}

fn key_of(p: &Path) -> FileKey {
    FileKey::of(&std::fs::metadata(p).unwrap())
}

#[test]
fn every_real_post_is_spooled_event_for_event() {
    let dir = scratch("real");
    let delivered = Arc::new(Delivered::default());
    let mut spool = open(&dir, 1 << 30, &delivered, &[]);
    let mut want = vec![];
    for body in posts() {
        let (lines, n) = spool_lines(&body, &post_id(), MAX_LINE).unwrap().unwrap();
        let events: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
        assert_eq!(n as usize, events.len());
        want.extend(events);
        spool.append(&lines).unwrap();
    }
    assert_eq!(want.len(), 105);
    assert_eq!(spooled_events(&dir), want, "each event kept as Ray sent it, in order");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_torn_post_is_cut_off_at_restart_and_complete_ones_stay() {
    let dir = scratch("torn");
    let delivered = Arc::new(Delivered::default());
    let bodies = posts();
    let mut spool = open(&dir, 1 << 30, &delivered, &[]);
    let (first, _) = spool_lines(&bodies[1], &post_id(), MAX_LINE).unwrap().unwrap();
    spool.append(&first).unwrap();
    let (second, n) = spool_lines(&bodies[2], &post_id(), MAX_LINE).unwrap().unwrap();
    assert!(n >= 2, "a post of several events");
    drop(spool);
    // A crash in the middle of writing the second post: its first line and half
    // of the next are on disk, no 2xx was sent.
    let (name, _) = segments(&dir).pop().unwrap();
    let seg = dir.join(&name);
    let cut = memchr::memchr(b'\n', &second).unwrap() + 1 + 20;
    std::fs::OpenOptions::new().append(true).open(&seg).unwrap().write_all(&second[..cut]).unwrap();
    assert_eq!(complete_posts(&std::fs::read(&seg).unwrap()), first.len() as u64);

    let spool = open(&dir, 1 << 30, &delivered, &[]);
    assert_eq!(std::fs::read(&seg).unwrap(), first, "cut back to the end of the first post");
    let segs = segments(&dir);
    assert_eq!(segs.len(), 2, "a new segment for this run");
    assert!(segs[1].1.is_empty());
    drop(spool);

    // If the sinks already had bytes past the cut (a partial line shipped after
    // partial_line_timeout), nothing is cut: what was delivered stays true.
    let (name2, _) = segments(&dir).pop().unwrap();
    let seg2 = dir.join(&name2);
    std::fs::OpenOptions::new().append(true).open(&seg2).unwrap().write_all(&second[..cut]).unwrap();
    let k2 = key_of(&seg2);
    // Delivered past the last complete post (at 0), not to the end: kept, uncut.
    let at = cut as u64 - 5;
    let spool = open(&dir, 1 << 30, &Arc::new(Delivered::default()), &[checkpoint(k2, &second[..cut], at)]);
    assert_eq!(std::fs::read(&seg2).unwrap(), &second[..cut]);
    assert_eq!(spool.pending(), first.len() as u64 + 5, "the first post, and the 5 bytes not yet delivered");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_bound_refuses_until_what_was_delivered_is_deleted() {
    let dir = scratch("bound");
    let delivered = Arc::new(Delivered::default());
    let bodies = posts();
    let mut spool = open(&dir, 64 << 10, &delivered, &[]);
    let mut sizes = 0u64;
    let full = loop {
        let (lines, _) = spool_lines(&bodies[3], &post_id(), MAX_LINE).unwrap().unwrap();
        match spool.append(&lines) {
            Ok(()) => sizes += lines.len() as u64,
            Err(e) => break e,
        }
    };
    assert!(matches!(full, SpoolError::Full { max, .. } if max == 64 << 10), "{full}");
    assert_eq!(spool.pending(), sizes);
    assert!(sizes <= 64 << 10 && sizes > 32 << 10);
    drop(spool);
    // Restart: the old segment is sealed. The sinks acknowledge half of it: still full.
    let (name, bytes) = segments(&dir).pop().unwrap();
    let key = key_of(&dir.join(&name));
    let mut spool = open(&dir, 64 << 10, &delivered, &[]);
    let (lines, _) = spool_lines(&bodies[3], &post_id(), MAX_LINE).unwrap().unwrap();
    let (size, post) = (bytes.len() as u64, lines.len() as u64);
    let part = size + post - (64 << 10) - 1;
    assert!(part > 0 && part < size);
    delivered.note(&checkpoint(key, &bytes, part));
    assert!(matches!(spool.append(&lines), Err(SpoolError::Full { .. })), "one byte short of room");
    assert_eq!(spool.pending(), size - part);
    assert!(dir.join(&name).exists(), "partly delivered: kept");
    // All of it acknowledged: deleted, and there is room again.
    delivered.note(&checkpoint(key, &bytes, bytes.len() as u64));
    spool.append(&lines).unwrap();
    spool.clean(); // the janitor's round
    assert!(!dir.join(&name).exists(), "a delivered sealed segment is deleted");
    assert_eq!(spool.pending(), lines.len() as u64);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bodies_that_are_not_ray_events_are_refused_with_the_reason() {
    let cases: [(&[u8], &str); 6] = [
        (b"{\"eventType\":\"X\"}", "not a JSON array"),
        (b"[{\"eventType\":\"X\"}", "not a JSON array"),
        (b"[{\"eventType\":\"X\"}, 3]", "element 1 of the array is not a JSON object"),
        (b"[{\"message\":\"x\"}]", "element 0 of the array has no eventType"),
        (b"[\xff]", "not UTF-8 (at byte 1)"),
        (b"", "not a JSON array"),
    ];
    for (body, why) in cases {
        let err = spool_lines(body, "p", MAX_LINE).unwrap_err();
        assert!(matches!(&err, Refusal::Malformed(m) if m.contains(why)), "{body:?}: {err}");
    }
    assert_eq!(spool_lines(b" [ ] ", "p", MAX_LINE).unwrap(), None);
    // Line breaks between tokens become spaces: one line per event.
    let (lines, n) =
        spool_lines(b"[\n {\"eventType\":\n \"A\"},\r\n{\"eventType\":\"B\"}\n]", "p", MAX_LINE).unwrap().unwrap();
    assert_eq!(n, 2);
    assert_eq!(String::from_utf8(lines).unwrap().lines().count(), 2);
}

/// The receiver on port 0 over a fresh spool, and the spool.
async fn receiver(
    tag: &str,
    max_body: u64,
    max_spool: u64,
    max_line: usize,
) -> (SocketAddr, Arc<Mutex<Spool>>, Arc<Metrics>, PathBuf) {
    let dir = scratch(tag);
    let spool = Arc::new(Mutex::new(
        Spool::open(&dir, max_spool, Arc::new(Delivered::default()), &Resume::default(), None).unwrap(),
    ));
    let metrics = Arc::new(Metrics::new(&["s"]));
    metrics.stage::<EventMetrics>().enabled.store(true, Relaxed);
    let app =
        receiver::router(spool.clone(), metrics.stage(), Arc::new(tokio::sync::Notify::new()), max_body, max_line);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, spool, metrics, dir)
}

async fn post(addr: SocketAddr, body: Vec<u8>, ct: &str) -> (u16, String) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/"))
        .header("content-type", ct)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn the_receiver_answers_200_400_413_415_and_503() {
    let bodies = posts();
    let (addr, _spool, metrics, dir) = receiver("http", 64 << 10, 1 << 20, MAX_LINE).await;
    let (code, _) = post(addr, bodies[0].clone(), "application/json").await;
    assert_eq!(code, 200);
    assert_eq!(spooled_events(&dir), serde_json::from_slice::<Vec<serde_json::Value>>(&bodies[0]).unwrap());
    let (code, why) = post(addr, b"[{\"message\":1}]".to_vec(), "application/json").await;
    assert_eq!((code, why.trim()), (400, "element 0 of the array has no eventType: not a Ray event"));
    let (code, _) = post(addr, bodies[0].clone(), "text/plain").await;
    assert_eq!(code, 415);
    let mut huge = b"[".to_vec();
    huge.extend(std::iter::repeat_n(b' ', 70 << 10));
    huge.push(b']');
    let (code, _) = post(addr, huge, "application/json").await;
    assert_eq!(code, 413);
    // Fill the 1 MiB spool: nothing is delivered, so it ends in 503s.
    let mut codes = vec![];
    for _ in 0..200 {
        codes.push(post(addr, bodies[3].clone(), "application/json").await.0);
        if codes.last() == Some(&503) {
            break;
        }
    }
    assert_eq!(codes.last(), Some(&503), "{codes:?}");
    assert!(codes[..codes.len() - 1].iter().all(|c| *c == 200));
    let spooled = spooled_events(&dir).len();
    let per_post = serde_json::from_slice::<Vec<serde_json::Value>>(&bodies[3]).unwrap().len();
    assert_eq!(
        spooled,
        serde_json::from_slice::<Vec<serde_json::Value>>(&bodies[0]).unwrap().len() + per_post * (codes.len() - 1),
        "a refused post leaves nothing behind"
    );
    let text = metrics.render();
    assert!(text.contains("raylog_events_posts_refused_total{reason=\"spool_full\"} 1"), "{text}");
    assert!(text.contains("raylog_events_posts_refused_total{reason=\"malformed\"} 2"), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A forward target that answers each POST with the next status of `script`
/// (then 200), keeping the bodies it answered 200.
async fn target(script: Vec<u16>) -> (reqwest::Url, Arc<Mutex<Vec<Vec<u8>>>>) {
    use axum::http::StatusCode;
    let got = Arc::new(Mutex::new(vec![]));
    let script = Arc::new(Mutex::new(script.into_iter()));
    let (g, s) = (got.clone(), script.clone());
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(move |body: axum::body::Bytes| {
            let (g, s) = (g.clone(), s.clone());
            async move {
                let code = s.lock().unwrap().next().unwrap_or(200);
                if code == 200 {
                    g.lock().unwrap().push(body.to_vec());
                }
                StatusCode::from_u16(code).unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/").parse().unwrap(), got)
}

#[tokio::test]
async fn the_forwarder_sends_every_post_byte_for_byte_retrying_and_skipping_refusals() {
    let bodies = posts();
    let dir = scratch("fwd");
    let delivered = Arc::new(Delivered::default());
    let spool = Spool::open(&dir, 1 << 30, delivered.clone(), &Resume::default(), Some(Cursor::default())).unwrap();
    let spool = Arc::new(Mutex::new(spool));
    // 503 then a reset-like 500 are retried; the 400 drops the 3rd post.
    let (url, got) = target(vec![200, 503, 500, 200, 400]).await;
    let metrics = Arc::new(Metrics::new(&["s"]));
    let retry = crate::agent::config::RetryConfig {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        shutdown_grace: Duration::ZERO,
    };
    let appended = Arc::new(tokio::sync::Notify::new());
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(forward::run(spool.clone(), url, retry, metrics.stage(), appended.clone(), stop));
    for body in &bodies {
        let mut s = spool.lock().unwrap();
        let (lines, _) = spool_lines(body, &post_id(), MAX_LINE).unwrap().unwrap();
        s.append(&lines).unwrap();
        drop(s);
        appended.notify_one();
    }
    let want: Vec<Vec<u8>> = bodies.iter().enumerate().filter(|(i, _)| *i != 2).map(|(_, b)| b.clone()).collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while got.lock().unwrap().len() < want.len() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*got.lock().unwrap(), want, "Ray's bodies, byte for byte, in order, the refused one skipped");
    assert_eq!(metrics.stage::<EventMetrics>().forward_retries.load(Relaxed), 2);
    let dropped = serde_json::from_slice::<Vec<serde_json::Value>>(&bodies[2]).unwrap().len() as u64;
    assert_eq!(metrics.stage::<EventMetrics>().forward_dropped.load(Relaxed), dropped);
    let _ = stop_tx.send(true);
    task.await.unwrap();
    // The cursor was saved: a restart forwards nothing again.
    let saved = forward::load_cursor(&dir).unwrap();
    assert_eq!(saved, spool.lock().unwrap().forward_cursor().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A Ray event of about `bytes` bytes (a long error message in its payload).
fn big_event(bytes: usize) -> String {
    let pad = "x".repeat(bytes.saturating_sub(120));
    format!(
        r#"{{"eventType":"TASK_LIFECYCLE_EVENT","taskLifecycleEvent":{{"rayErrorInfo":{{"errorMessage":"{pad}"}}}}}}"#
    )
}

/// The records the source makes of the spool in `dir` with `max_line`:
/// (message, uncut, event_type field) of each.
fn read_back(dir: &Path, max_line: usize) -> Vec<(String, bool, Option<String>)> {
    let opts = raylog_parsers::Options { max_line_bytes: max_line, ..Default::default() };
    let mut got = vec![];
    for (name, bytes) in segments(dir) {
        let meta = raylog_parsers::classify(&format!("ray_events/{name}"), None);
        let mut p = raylog_parsers::FileParser::new(meta, None, None);
        let mut corr = raylog_parsers::Correlator::new();
        let mut keep = |r: &raylog_parsers::Record<'_>| {
            let t = r.fields.get("event_type").map(|v| match v {
                raylog_parsers::record::FieldValue::Str(s) | raylog_parsers::record::FieldValue::Json(s) => {
                    s.to_string()
                }
            });
            got.push((r.message.to_string(), !r.truncated, t));
        };
        p.push(&bytes, &mut corr, &opts, &mut keep);
        p.finish(&mut corr, &opts, &mut keep);
    }
    got
}

#[test]
fn an_event_is_refused_exactly_when_its_spool_line_is_past_max_line_bytes() {
    let event = big_event(4000);
    let body = format!("[{}, {event}]", big_event(300));
    // The line of element 1: the wrapper, the event, the closing brace.
    let line = format!(r#"{{"post":"p","i":1,"n":2,"event":{event}}}"#).len();
    let (lines, n) = spool_lines(body.as_bytes(), "p", line).unwrap().unwrap();
    assert_eq!(n, 2);
    assert_eq!(lines.split(|b| *b == b'\n').nth(1).map(<[u8]>::len), Some(line), "the line the check measured");
    let err = spool_lines(body.as_bytes(), "p", line - 1).unwrap_err();
    assert_eq!(err, Refusal::TooLong { index: 1, event: event.len(), line, max: line - 1 });
    let why = err.to_string();
    for part in [
        format!("element 1 of the array is a Ray event of {} bytes", event.len()),
        format!("a spool line of {line} bytes"),
        format!("source.max_line_bytes ({} bytes)", line - 1),
        format!("Raise source.max_line_bytes to at least {line}"),
    ] {
        assert!(why.contains(&part), "{part:?} in {why}");
    }
    // The wrapper counts: an event of exactly the limit does not fit.
    assert!(matches!(
        spool_lines(format!("[{event}]").as_bytes(), "p", event.len()),
        Err(Refusal::TooLong { index: 0, .. })
    ));
}

#[tokio::test]
async fn an_event_past_max_line_bytes_is_refused_with_413_and_nothing_is_spooled() {
    let (addr, _spool, metrics, dir) = receiver("longline", 32 << 20, 64 << 20, MAX_LINE).await;
    // The default source.max_line_bytes is 1 MiB: the source would cut this line.
    let big = big_event(2 << 20);
    let body = format!("[{}, {big}]", big_event(200));
    let (code, why) = post(addr, body.into_bytes(), "application/json").await;
    assert_eq!(code, 413, "{why}");
    assert!(why.contains(&format!("element 1 of the array is a Ray event of {} bytes", big.len())), "{why}");
    assert!(why.contains(&format!("over source.max_line_bytes ({MAX_LINE} bytes)")), "{why}");
    assert!(spooled_events(&dir).is_empty(), "nothing of a refused post is kept");
    let text = metrics.render();
    assert!(text.contains("raylog_events_posts_refused_total{reason=\"event_too_large\"} 1"), "{text}");
    // Just within the limit: spooled whole, and read back as one uncut record.
    let fits = big_event(MAX_LINE - 100);
    let (code, why) = post(addr, format!("[{fits}]").into_bytes(), "application/json").await;
    assert_eq!(code, 200, "{why}");
    let want: serde_json::Value = serde_json::from_str(&fits).unwrap();
    assert_eq!(spooled_events(&dir), [want]);
    let records = read_back(&dir, MAX_LINE);
    assert_eq!(records.len(), 1);
    let (message, uncut, event_type) = &records[0];
    assert!(*uncut && message.starts_with("TASK_LIFECYCLE_EVENT"), "{}", &message[..100.min(message.len())]);
    assert_eq!(event_type.as_deref(), Some("TASK_LIFECYCLE_EVENT"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The fingerprint the source gives a file whose first bytes are `bytes`.
fn fingerprint(bytes: &[u8]) -> Fingerprint {
    let len = bytes.len().min(crate::agent::checkpoint::FINGERPRINT_MAX as usize);
    Fingerprint { len: len as u64, hash: crate::agent::fnv::hash64(&bytes[..len]) }
}

/// A segment `ray_events-…1` holding one real post, sealed by a restart (so the
/// janitor may delete it), the spool, and the segment's path and bytes.
fn sealed_segment(tag: &str, delivered: &Arc<Delivered>) -> (PathBuf, Spool, PathBuf, Vec<u8>) {
    let dir = scratch(tag);
    let mut spool = open(&dir, 1 << 30, &Arc::new(Delivered::default()), &[]);
    let (lines, _) = spool_lines(&posts()[1], &post_id(), MAX_LINE).unwrap().unwrap();
    spool.append(&lines).unwrap();
    drop(spool);
    let (name, bytes) = segments(&dir).remove(0);
    assert_eq!(bytes, lines);
    let spool = open(&dir, 1 << 30, delivered, &[]);
    (dir.clone(), spool, dir.join(name), bytes)
}

/// What an old, deleted segment that had the same inode held: another post.
fn other_segment() -> Vec<u8> {
    spool_lines(&posts()[1], &post_id(), MAX_LINE).unwrap().unwrap().0
}

#[test]
fn a_checkpoint_of_a_deleted_segment_does_not_deliver_the_new_one_on_its_inode() {
    let delivered = Arc::new(Delivered::default());
    let (dir, mut spool, seg, bytes) = sealed_segment("reuse-note", &delivered);
    let key = key_of(&seg);
    let size = bytes.len() as u64;
    // The deleted segment's acknowledgement arrives with the new one's (dev, ino).
    let old = other_segment();
    assert_ne!(fingerprint(&old), fingerprint(&bytes));
    delivered.note(&checkpoint(key, &old, old.len() as u64 + size));
    spool.clean();
    assert!(seg.exists(), "not delivered: kept");
    assert_eq!(spool.pending(), size);
    // Its own acknowledgement, up to its end, does delete it.
    delivered.note(&checkpoint(key, &bytes, size));
    spool.clean();
    assert!(!seg.exists(), "delivered: deleted");
    assert_eq!(spool.pending(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_saved_checkpoint_of_a_deleted_segment_does_not_deliver_the_new_one_at_start() {
    let delivered = Arc::new(Delivered::default());
    let (dir, spool, seg, bytes) = sealed_segment("reuse-open", &delivered);
    drop(spool);
    let key = key_of(&seg);
    let size = bytes.len() as u64;
    // The checkpoints of the last run hold the deleted segment's under this inode.
    let old = other_segment();
    let spool = open(&dir, 1 << 30, &Arc::new(Delivered::default()), &[checkpoint(key, &old, size)]);
    assert!(seg.exists(), "not delivered: kept");
    assert_eq!(spool.pending(), size);
    assert_eq!(std::fs::read(&seg).unwrap(), bytes);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn acknowledgements_of_the_segment_being_written_count_only_with_its_own_first_bytes() {
    let dir = scratch("grow");
    let delivered = Arc::new(Delivered::default());
    let mut spool = open(&dir, 1 << 30, &delivered, &[]);
    let (name, _) = segments(&dir).remove(0);
    let key = key_of(&dir.join(&name));
    let post = |i: usize| {
        let body = format!(r#"[{{"eventType":"NODE_LIFECYCLE_EVENT","eventId":"{i}"}}]"#);
        spool_lines(body.as_bytes(), &post_id(), MAX_LINE).unwrap().unwrap().0
    };
    let mut written = vec![];
    for i in 0..20 {
        let lines = post(i);
        spool.append(&lines).unwrap();
        written.extend_from_slice(&lines);
        // What the source read and fingerprinted, acknowledged: it counts.
        delivered.note(&checkpoint(key, &written, written.len() as u64));
        assert_eq!(spool.pending(), 0, "after post {i}");
    }
    assert!(written.len() as u64 > crate::agent::checkpoint::FINGERPRINT_MAX, "past what a fingerprint covers");
    let lines = post(20);
    spool.append(&lines).unwrap();
    let end = (written.len() + lines.len()) as u64;
    written.extend_from_slice(&lines);
    // A fingerprint of nothing, or of other bytes, proves nothing.
    let blind = FileCheckpoint { fingerprint: Fingerprint::default(), ..checkpoint(key, &written, end) };
    let mut other = written.clone();
    other[10] ^= 1;
    for cp in [blind, checkpoint(key, &other, end)] {
        delivered.note(&cp);
        assert_eq!(spool.pending(), lines.len() as u64, "{cp:?}");
    }
    delivered.note(&checkpoint(key, &written, end));
    assert_eq!(spool.pending(), 0);
    let _ = std::fs::remove_dir_all(&dir);
}
