//! Forwarding: every accepted post, unchanged, to `events.forward_to`.
//!
//! Ray exports to one address per node, so raylog passes what it accepts on (to
//! KubeRay's history-server collector, say) instead of being chosen over it. The
//! forwarder reads the spool from its own cursor, rebuilds each post from its lines
//! (`[` + the events as Ray sent them, joined by `, ` + `]`: Ray's own bytes) and
//! POSTs it with Ray's content type, in order, one at a time. A connection error,
//! a timeout, 408, 429 or 5xx is retried with backoff (`retry.*`), for as long as
//! it takes: the spool's bound then pushes back on Ray. Any other 4xx will not
//! change on retry: the post is logged and skipped (`raylog_events_forward_dropped_total`).
//! The cursor is saved (temp → fsync → rename) after each delivered post, so a
//! restart forwards nothing twice but the post in flight.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::counters::EventMetrics;
use super::spool::{unwrap_line, Cursor, Spool};
use crate::agent::config::RetryConfig;

/// Beside the spool dir, not in it: the source reads every file in there.
const CURSOR_FILE: &str = "ray_events.forward.json";

fn cursor_path(spool_dir: &Path) -> PathBuf {
    spool_dir.parent().unwrap_or(spool_dir).join(CURSOR_FILE)
}

/// The saved cursor of the spool in `dir`, if any.
pub fn load_cursor(dir: &Path) -> Option<Cursor> {
    let text = std::fs::read_to_string(cursor_path(dir)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    (v["version"] == 1).then_some(())?;
    Some(Cursor { seq: v["segment"].as_u64()?, offset: v["offset"].as_u64()? })
}

fn save_cursor(dir: &Path, c: Cursor) -> std::io::Result<()> {
    use std::io::Write;
    let path = cursor_path(dir);
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    writeln!(f, "{{\"version\":1,\"segment\":{},\"offset\":{}}}", c.seq, c.offset)?;
    f.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(path.parent().unwrap_or(dir))?.sync_all()
}

/// One post read back from the spool.
struct Post {
    body: Vec<u8>,
    events: u64,
    /// Where the cursor goes once it is delivered.
    next: Cursor,
}

/// Runs until `stop` fires: forwards each post as soon as it is spooled.
pub async fn run(
    spool: Arc<Mutex<Spool>>,
    url: reqwest::Url,
    retry: RetryConfig,
    metrics: Arc<EventMetrics>,
    appended: Arc<tokio::sync::Notify>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap_or_default();
    let dir = spool.lock().unwrap_or_else(|e| e.into_inner()).dir().to_path_buf();
    let mut logged_failure = false;
    while !*stop.borrow() {
        let next = {
            let spool = spool.clone();
            tokio::task::spawn_blocking(move || next_post(&spool)).await.ok().flatten()
        };
        let Some(post) = next else {
            tokio::select! {
                _ = appended.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => {}
            }
            continue;
        };
        if post.events > 0 && !deliver(&client, &url, &post, &retry, &metrics, &mut stop, &mut logged_failure).await {
            return; // stopping; the cursor stays before this post
        }
        if let Err(e) = save_cursor(&dir, post.next) {
            tracing::warn!(path = %cursor_path(&dir).display(), error = %e, "cannot save the forward cursor; a restart would forward again from the last saved one");
        }
        let mut s = spool.lock().unwrap_or_else(|e| e.into_inner());
        s.forwarded(post.next);
        s.clean();
    }
}

/// Sends one post until the target takes it, refuses it for good, or `stop`.
/// False only when stopping.
async fn deliver(
    client: &reqwest::Client,
    url: &reqwest::Url,
    post: &Post,
    retry: &RetryConfig,
    metrics: &EventMetrics,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    logged: &mut bool,
) -> bool {
    let mut backoff = retry.initial_backoff;
    loop {
        let sent = client
            .post(url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(post.body.clone())
            .send()
            .await;
        let why = match sent {
            Ok(r) if r.status().is_success() => {
                metrics.forwarded.fetch_add(post.events, Relaxed);
                if std::mem::take(logged) {
                    tracing::info!(%url, "forwarding Ray's events again");
                }
                return true;
            }
            Ok(r) if r.status().is_client_error() && !matches!(r.status().as_u16(), 408 | 429) => {
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                metrics.forward_dropped.fetch_add(post.events, Relaxed);
                tracing::warn!(%url, %status, answer = %text.chars().take(300).collect::<String>(), events = post.events, "events.forward_to refused a post for good; skipped it (the records still go to the sinks)");
                return true;
            }
            Ok(r) => format!("answered {}", r.status()),
            Err(e) => e.to_string(),
        };
        metrics.forward_retries.fetch_add(1, Relaxed);
        if !std::mem::replace(logged, true) {
            tracing::warn!(%url, error = %why, "cannot forward Ray's events; retrying with backoff (the spool fills meanwhile)");
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => return false,
        }
        backoff = (backoff * 2).min(retry.max_backoff);
    }
}

/// The next whole post at or after the spool's forward cursor, if one is there.
fn next_post(spool: &Mutex<Spool>) -> Option<Post> {
    let (from, segments) = {
        let s = spool.lock().unwrap_or_else(|e| e.into_inner());
        let from = s.forward_cursor()?;
        (from, s.readable(from))
    };
    for (seq, path, size, sealed) in segments {
        let offset = if seq == from.seq { from.offset } else { 0 };
        if offset < size {
            return read_post(&path, seq, offset, size);
        }
        if !sealed {
            return None;
        }
        // A finished segment: move the cursor past it so it can be deleted.
        let mut s = spool.lock().unwrap_or_else(|e| e.into_inner());
        s.forwarded(Cursor { seq: seq + 1, offset: 0 });
    }
    None
}

/// Reads the post starting at `offset` of segment `seq` (whose whole posts end at
/// `size`), line by line: a backlog of many posts is read once, not once per post.
fn read_post(path: &PathBuf, seq: u64, offset: u64, size: u64) -> Option<Post> {
    use std::io::BufRead;
    let mut f = std::fs::File::open(path).ok()?;
    f.seek(SeekFrom::Start(offset)).ok()?;
    let mut r = std::io::BufReader::new(f.take(size - offset));
    let (mut body, mut line, mut at, mut events) = (b"[".to_vec(), Vec::new(), offset, 0u64);
    loop {
        line.clear();
        let n = r.read_until(b'\n', &mut line).ok()?;
        if n == 0 || line.last() != Some(&b'\n') {
            return None;
        }
        at += n as u64;
        let text = std::str::from_utf8(&line[..n - 1]).unwrap_or("");
        let Some(((_, i, count), event)) = unwrap_line(text) else {
            // Not a line raylog wrote: skipped (with the post it was in), never
            // allowed to stall the forwarder.
            tracing::warn!(path = %path.display(), offset = at - n as u64, "a spool line is not a wrapped Ray event; not forwarding it");
            return Some(Post { body: vec![], events: 0, next: Cursor { seq, offset: at } });
        };
        if events > 0 {
            body.extend_from_slice(b", ");
        }
        body.extend_from_slice(event.as_bytes());
        events += 1;
        if i + 1 == count {
            body.push(b']');
            return Some(Post { body, events, next: Cursor { seq, offset: at } });
        }
    }
}
