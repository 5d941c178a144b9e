//! Discover: turn the paths a user gives into log files grouped by logs dir.
//!
//! A path may be a Ray temp root holding several `session_*` dirs, one session dir,
//! a `logs` dir (or any flat folder of Ray logs), a single file, a `.gz` file, a
//! `.tar`/`.tar.gz`/`.tgz` archive, or `-` for stdin. Inside a temp root only
//! `session_*/logs/` is read (sessions also hold sockets and runtime files), and the
//! `session_latest` symlink is skipped so no session is read twice. Every file is
//! attached to a [`LogsDir`], because the records of one logs dir share a node and
//! a session, and their `file` field is relative to it.

use std::path::{Path, PathBuf};

use raylog_parsers::classify::session_of_path;

/// One logs dir: a node's `session_*/logs`, or a folder given as such.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogsDir {
    /// What to call it in messages (the path as the user would recognise it).
    pub label: String,
    pub session: Option<String>,
}

/// Where a file's bytes come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    File(PathBuf),
    /// A gzip-compressed file; classified by its name without `.gz`.
    Gzip(PathBuf),
    Stdin,
}

/// One file to parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFile {
    pub origin: Origin,
    /// Path relative to its logs dir (`events/event_GCS.log`), `.gz` removed.
    pub rel: String,
    /// Index into [`Discovered::dirs`].
    pub dir: usize,
    pub size: u64,
}

/// A tar archive, read entry by entry (it cannot be listed without reading it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Archive {
    pub path: PathBuf,
    pub gzip: bool,
    pub size: u64,
}

/// Everything found under the given paths.
#[derive(Debug, Default)]
pub struct Discovered {
    pub dirs: Vec<LogsDir>,
    pub files: Vec<LogFile>,
    pub archives: Vec<Archive>,
    /// Paths that could not be read, with the reason (already phrased for a user).
    pub failures: Vec<(String, String)>,
}

impl Discovered {
    /// Total bytes of plain files and archives, for the progress bar.
    pub fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.size).sum::<u64>() + self.archives.iter().map(|a| a.size).sum::<u64>()
    }

    fn dir_index(&mut self, label: String, session: Option<String>) -> usize {
        if let Some(i) = self.dirs.iter().position(|d| d.label == label) {
            return i;
        }
        self.dirs.push(LogsDir { label, session });
        self.dirs.len() - 1
    }

    fn fail(&mut self, path: &Path, why: impl std::fmt::Display) {
        self.failures.push((path.display().to_string(), why.to_string()));
    }
}

/// A file name without a rotation suffix (`raylet.out.1` → `raylet.out`).
pub fn strip_rotation(name: &str) -> std::borrow::Cow<'_, str> {
    raylog_parsers::classify::split_rotation(name).0
}

/// Lowercased name checks for archives and gzip files.
fn archive_kind(name: &str) -> Option<bool> {
    if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        Some(true)
    } else if name.ends_with(".tar") {
        Some(false)
    } else {
        None
    }
}

/// Expands the user's paths. Unreadable paths are recorded, not fatal.
pub fn discover(paths: &[PathBuf]) -> Discovered {
    let mut d = Discovered::default();
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        if p.as_os_str() == "-" {
            let i = d.dir_index("-".into(), None);
            d.files.push(LogFile { origin: Origin::Stdin, rel: String::new(), dir: i, size: 0 });
            continue;
        }
        let canon = match p.canonicalize() {
            Ok(c) => c,
            Err(e) => {
                d.fail(p, format!("cannot open: {e}"));
                continue;
            }
        };
        if !seen.insert(canon.clone()) {
            continue;
        }
        if canon.is_dir() {
            discover_dir(&canon, p, &mut d);
        } else {
            add_single_file(&canon, p, &mut d);
        }
    }
    d
}

fn add_single_file(canon: &Path, shown: &Path, d: &mut Discovered) {
    let name = canon.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let size = std::fs::metadata(canon).map(|m| m.len()).unwrap_or(0);
    if let Some(gzip) = archive_kind(name) {
        d.archives.push(Archive { path: canon.to_path_buf(), gzip, size });
        return;
    }
    // A single file: its logs dir is its folder, or the folder above `events/` etc.
    let parent = canon.parent().unwrap_or(Path::new("/"));
    let (root, rel) = match parent.file_name().and_then(|n| n.to_str()) {
        Some(sub @ ("events" | "export_events" | "serve" | "old" | "jobs")) => {
            (parent.parent().unwrap_or(parent), format!("{sub}/{name}"))
        }
        _ => (parent, name.to_string()),
    };
    let i = d.dir_index(root.display().to_string(), session_of_path(canon));
    push_file(d, canon.to_path_buf(), rel, i, size);
    let _ = shown;
}

fn push_file(d: &mut Discovered, path: PathBuf, rel: String, dir: usize, size: u64) {
    let (origin, rel) = match rel.strip_suffix(".gz") {
        Some(stripped) => (Origin::Gzip(path), stripped.to_string()),
        None => (Origin::File(path), rel),
    };
    d.files.push(LogFile { origin, rel, dir, size });
}

/// Finds `session_*` dirs with a `logs/` inside, up to a few levels down.
fn find_sessions(root: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let name = root.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if name.starts_with("session_") && name != "session_latest" && root.join("logs").is_dir() {
        out.push(root.to_path_buf());
        return;
    }
    if depth == 0 {
        return;
    }
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    let mut subdirs: Vec<PathBuf> =
        rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()).collect();
    subdirs.sort();
    for s in subdirs {
        find_sessions(&s, depth - 1, out);
    }
}

fn discover_dir(canon: &Path, shown: &Path, d: &mut Discovered) {
    // `…/session_x/logs` given directly.
    if canon.file_name().is_some_and(|n| n == "logs") {
        let i = d.dir_index(canon.display().to_string(), session_of_path(canon));
        walk(canon, canon, i, d);
        return;
    }
    let mut sessions = vec![];
    find_sessions(canon, 4, &mut sessions);
    if sessions.is_empty() {
        // A flat folder of logs.
        let i = d.dir_index(canon.display().to_string(), session_of_path(canon));
        walk(canon, canon, i, d);
        if d.files.iter().all(|f| f.dir != i) && !d.archives.iter().any(|a| a.path.starts_with(canon)) {
            d.fail(shown, "no log files found in this directory");
        }
        return;
    }
    for s in sessions {
        let logs = s.join("logs");
        let i = d.dir_index(logs.display().to_string(), session_of_path(&logs));
        walk(&logs, &logs, i, d);
    }
    // raylog's spool of Ray's events kept beside the sessions (an agent's
    // `state_dir/ray_events` copied with the logs): its task events tag the prints.
    let mut spools = vec![];
    find_spools(canon, 4, &mut spools);
    for dir in spools {
        let i = d.dir_index(dir.display().to_string(), None);
        walk(&dir, &dir, i, d);
    }
}

/// Finds dirs holding raylog's event spool (`ray_events-<seq>.ndjson`), up to a few
/// levels down, outside `session_*` dirs (whose logs are read whole anyway).
fn find_spools(root: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(root) else { return };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    let mut holds = false;
    for e in entries {
        let name = e.file_name();
        let name = name.to_string_lossy();
        match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 && !name.starts_with("session_") => find_spools(&e.path(), depth - 1, out),
            // As `raylog_parsers::classify` names the spool's segments.
            Ok(t) if t.is_file() => holds |= name.starts_with("ray_events-") && name.ends_with(".ndjson"),
            _ => {}
        }
    }
    if holds {
        out.push(root.to_path_buf());
    }
}

/// Adds every regular file under `dir` (recursively, symlinks not followed).
fn walk(root: &Path, dir: &Path, idx: usize, d: &mut Discovered) {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => {
            d.fail(dir, format!("cannot list directory: {e}"));
            return;
        }
    };
    let mut entries: Vec<_> = rd.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let Ok(ft) = e.file_type() else { continue };
        let path = e.path();
        if ft.is_dir() {
            walk(root, &path, idx, d);
        } else if ft.is_file() {
            let rel = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            let size = e.metadata().map(|m| m.len()).unwrap_or(0);
            if let Some(gzip) = archive_kind(&rel) {
                d.archives.push(Archive { path, gzip, size });
            } else {
                push_file(d, path, rel, idx, size);
            }
        }
    }
}

/// A logs dir the agent follows: where it is, and what to call it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogsRoot {
    pub root: PathBuf,
    pub dir: LogsDir,
}

/// The logs dirs under the agent's `paths`, found the way [`discover`] finds them
/// (a temp root's `session_*/logs`, a session dir, a logs dir, a flat folder), without
/// listing their files. Unreadable paths come back as failures.
pub fn logs_roots(paths: &[PathBuf]) -> (Vec<LogsRoot>, Vec<(String, String)>) {
    let (mut roots, mut failures) = (Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        let canon = match p.canonicalize() {
            Ok(c) if c.is_dir() => c,
            Ok(_) => {
                failures.push((
                    p.display().to_string(),
                    "not a directory; give a Ray temp root, session or logs dir".into(),
                ));
                continue;
            }
            Err(e) => {
                failures.push((p.display().to_string(), format!("cannot open: {e}")));
                continue;
            }
        };
        let mut found = vec![];
        if canon.file_name().is_some_and(|n| n == "logs") {
            found.push(canon.clone());
        } else {
            let mut sessions = vec![];
            find_sessions(&canon, 4, &mut sessions);
            found.extend(sessions.into_iter().map(|s| s.join("logs")));
            // A flat folder of logs, but not a temp root before Ray made its first
            // session (its sessions will be found by a later call).
            if found.is_empty() && holds_logs(&canon) {
                found.push(canon.clone());
            }
        }
        for root in found {
            if seen.insert(root.clone()) {
                let dir = LogsDir { label: root.display().to_string(), session: session_of_path(&root) };
                roots.push(LogsRoot { root, dir });
            }
        }
    }
    (roots, failures)
}

/// Whether `dir` directly holds a file named like a log (`.log`, `.out`, `.err`)
/// or a segment of raylog's Ray event spool.
fn holds_logs(dir: &Path) -> bool {
    std::fs::read_dir(dir).into_iter().flatten().flatten().any(|e| {
        let name = e.file_name();
        let name = name.to_string_lossy();
        e.file_type().is_ok_and(|t| t.is_file())
            && ([".log", ".out", ".err"].iter().any(|x| crate::discover::strip_rotation(&name).ends_with(x))
                || raylog_parsers::classify(&name, None).kind == raylog_parsers::FileKind::RayEvent)
    })
}

/// Whether the agent skips a file of this name: compressed files and archives are
/// for `raylog parse`, not for tailing.
pub fn not_tailed(name: &str) -> bool {
    name.ends_with(".gz") || archive_kind(name).is_some()
}

/// For a path inside an archive: the logs-dir prefix (to group by) and the path
/// relative to it. `…/session_x/logs/events/a.log` → (`…/session_x/logs`,
/// `events/a.log`); a path without that shape is relative to a `logs/` component if
/// one exists, else to the archive root.
pub fn split_archive_path(p: &str) -> (String, String, Option<String>) {
    let p = p.trim_start_matches("./");
    let parts: Vec<&str> = p.split('/').collect();
    let mut cut = None;
    let mut session = None;
    for i in 1..parts.len().saturating_sub(1) {
        if parts[i] == "logs" {
            cut = Some(i);
            if parts[i - 1].starts_with("session_") {
                session = Some(parts[i - 1].to_string());
                break;
            }
        }
    }
    if parts.first() == Some(&"logs") && cut.is_none() && parts.len() > 1 {
        cut = Some(0);
    }
    match cut {
        Some(i) => (parts[..=i].join("/"), parts[i + 1..].join("/"), session),
        None => (String::new(), p.to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_paths() {
        assert_eq!(
            split_archive_path("tmp/ray/session_2026_1/logs/events/e.log"),
            ("tmp/ray/session_2026_1/logs".into(), "events/e.log".into(), Some("session_2026_1".into()))
        );
        assert_eq!(split_archive_path("logs/raylet.out"), ("logs".into(), "raylet.out".into(), None));
        assert_eq!(split_archive_path("./raylet.out"), ("".into(), "raylet.out".into(), None));
    }
}
