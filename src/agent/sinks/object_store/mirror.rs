//! The bucket mirrors the node's logs dirs: what each round finds, and what it
//! uploads or copies.
//!
//! - A file whose object already holds it (same file, size and mtime) is left alone.
//! - A file whose bytes are already in the bucket under another key (a rename
//!   rotation: `x` → `x.1`, `x.1` → `x.2`) is copied there server-side; copies run
//!   before uploads, each after those that read its destination, so `x.2` gets
//!   `x.1`'s old bytes before `x.1` gets `x`'s.
//! - A finished file (a rotated backup, or one unchanged for `upload_interval`) is
//!   uploaded once.
//! - An active file is uploaded again when it changed, at most every
//!   `upload_interval`; past `max_active_upload_bytes` only once finished or at
//!   shutdown.
//!
//! Objects of files that are gone stay: the bucket is what outlives the node. A
//! backup Ray deletes keeps its object until a rotation renames another file onto
//! its name; then the object takes that file's bytes, as the node's file did.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::state::{Held, State};

/// One file found in a session's logs dir.
#[derive(Clone, Debug)]
pub struct Found {
    pub path: PathBuf,
    pub session: String,
    /// Path under the logs dir.
    pub rel: String,
    pub held: Held,
    /// A rotated backup (`raylet.out.1`, `worker-….2.out`): Ray no longer writes it.
    pub backup: bool,
}

/// One session's logs dir.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogsDir {
    pub session: String,
    pub path: PathBuf,
}

/// The `session_*/logs` dirs under `paths` (a Ray temp root, a session dir or a
/// logs dir each). The `session_latest` link is skipped: its session is listed
/// under its own name.
pub fn logs_dirs(paths: &[PathBuf]) -> Vec<LogsDir> {
    let mut out = vec![];
    for p in paths {
        // `session_latest` (a link) names no session: its target does.
        let p = &std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        let parent = p.parent().and_then(|d| d.file_name()).and_then(|n| n.to_str()).unwrap_or("");
        if name == "logs" && parent.starts_with("session_") {
            out.push(LogsDir { session: parent.to_string(), path: p.clone() });
        } else if name.starts_with("session_") && name != "session_latest" {
            out.push(LogsDir { session: name.to_string(), path: p.join("logs") });
        } else if let Ok(rd) = std::fs::read_dir(p) {
            for e in rd.flatten() {
                let n = e.file_name().to_string_lossy().into_owned();
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if n.starts_with("session_") && n != "session_latest" && is_dir {
                    out.push(LogsDir { session: n, path: e.path().join("logs") });
                }
            }
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out.dedup();
    out
}

/// Every regular file under `dir` (not following links), into `out`.
pub fn walk(dir: &LogsDir, out: &mut Vec<Found>) {
    let mut stack = vec![dir.path.clone()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            let path = e.path();
            if t.is_dir() {
                stack.push(path);
                continue;
            }
            if !t.is_file() {
                continue;
            }
            let Ok(md) = e.metadata() else { continue };
            let Ok(rel) = path.strip_prefix(&dir.path) else { continue };
            let rel = rel.to_string_lossy().into_owned();
            let name = e.file_name().to_string_lossy().into_owned();
            let backup = raylog_parsers::classify::split_rotation(&name).1.is_some();
            out.push(Found { held: held_of(&md), path, session: dir.session.clone(), rel, backup });
        }
    }
}

pub fn held_of(md: &std::fs::Metadata) -> Held {
    use std::os::unix::fs::MetadataExt;
    Held {
        dev: md.dev(),
        ino: md.ino(),
        born: crate::agent::checkpoint::born::of_metadata(md),
        size: md.len(),
        mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
    }
}

/// A change to the bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    Copy { from: String, to: String, held: Held },
    Upload { path: PathBuf, key: String, held: Held },
}

/// What a round knows of each file between rounds.
#[derive(Debug, Default)]
pub struct Memo {
    files: HashMap<(u64, u64, u32), Seen>,
}

#[derive(Debug)]
struct Seen {
    size: u64,
    mtime_ns: i64,
    /// When its size or mtime last changed.
    changed: Instant,
    uploaded: Option<Instant>,
    round: u64,
}

/// The knobs of a round.
#[derive(Clone, Copy, Debug)]
pub struct Knobs {
    pub upload_interval: Duration,
    pub max_active_upload_bytes: u64,
    /// Shutdown (or `--once`): everything that changed goes, whatever its size.
    pub last: bool,
}

/// What the round plans, and what it leaves for later.
#[derive(Debug, Default)]
pub struct Plan {
    /// Copies first (in order), then uploads.
    pub actions: Vec<Action>,
    /// Files past `max_active_upload_bytes` left for their rotation or the shutdown.
    pub deferred: u64,
}

impl Memo {
    /// The files the last round found.
    pub fn files(&self) -> std::collections::HashSet<(u64, u64, u32)> {
        self.files.keys().copied().collect()
    }

    /// Plans one round over `found` (`key` names each file's object).
    pub fn plan(&mut self, found: &[(String, Found)], state: &State, now: Instant, k: Knobs, round: u64) -> Plan {
        let mut where_held: HashMap<Held, &str> = HashMap::new();
        for (key, h) in &state.objects {
            where_held.entry(*h).or_insert(key);
        }
        let (mut copies, mut uploads, mut deferred) = (vec![], vec![], 0);
        for (key, f) in found {
            let h = f.held;
            let seen = self.files.entry((h.dev, h.ino, h.born)).or_insert(Seen {
                size: h.size,
                mtime_ns: h.mtime_ns,
                changed: now,
                uploaded: None,
                round,
            });
            if (seen.size, seen.mtime_ns) != (h.size, h.mtime_ns) {
                (seen.size, seen.mtime_ns, seen.changed) = (h.size, h.mtime_ns, now);
            }
            seen.round = round;
            if state.objects.get(key) == Some(&h) {
                continue;
            }
            if let Some(from) = where_held.get(&h).filter(|f| **f != key.as_str()) {
                copies.push(Action::Copy { from: from.to_string(), to: key.clone(), held: h });
                continue;
            }
            let finished = f.backup || now.duration_since(seen.changed) >= k.upload_interval;
            let due = seen.uploaded.is_none_or(|t| now.duration_since(t) >= k.upload_interval);
            if !(k.last || finished || due) {
                continue;
            }
            if h.size > k.max_active_upload_bytes && !(k.last || finished) {
                deferred += 1;
                continue;
            }
            seen.uploaded = Some(now);
            uploads.push(Action::Upload { path: f.path.clone(), key: key.clone(), held: h });
        }
        // Files not found this round are gone.
        self.files.retain(|_, s| s.round == round);
        let mut actions = order_copies(copies);
        actions.extend(uploads);
        Plan { actions, deferred }
    }
}

/// Orders copies so that none overwrites an object another still has to read; a
/// cycle (never made by a rotation) is broken by uploading its files instead...
/// which the next round does, as their objects then differ.
fn order_copies(mut left: Vec<Action>) -> Vec<Action> {
    let mut out = Vec::with_capacity(left.len());
    while !left.is_empty() {
        let sources: std::collections::HashSet<String> = left
            .iter()
            .filter_map(|a| match a {
                Action::Copy { from, .. } => Some(from.clone()),
                Action::Upload { .. } => None,
            })
            .collect();
        let (ready, rest): (Vec<Action>, Vec<Action>) =
            left.into_iter().partition(|a| matches!(a, Action::Copy { to, .. } if !sources.contains(to)));
        if ready.is_empty() {
            break;
        }
        out.extend(ready);
        left = rest;
    }
    out
}

/// The key of a found file.
pub fn key_of(layout: &super::encode::Layout, node: &str, f: &Found) -> String {
    layout.log(&f.session, node, &f.rel)
}

/// The node id a session's raylet logs announce, from `raylet.out` or a rotated
/// backup of it (the announcement is in the first lines Ray writes).
pub fn node_of(logs: &Path) -> Option<String> {
    let mut names: Vec<String> = std::fs::read_dir(logs)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| raylog_parsers::classify::split_rotation(n).0 == "raylet.out")
        .collect();
    names.sort();
    names.iter().find_map(|n| {
        use std::io::Read;
        let mut head = Vec::new();
        std::fs::File::open(logs.join(n)).ok()?.take(1 << 20).read_to_end(&mut head).ok()?;
        raylog_parsers::correlate::node_id_from_raylet(&head).map(|id| id.as_str().to_string())
    })
}
