//! File classification: what a Ray log file is, from its path alone.
//!
//! Ray encodes a lot in file names: `worker-<worker_id>-<job_id>-<pid>.err` names the
//! worker, its job and pid; `python-core-worker-<worker_id>_<pid>.log.2` is the second
//! rotated copy of a core-worker log; `events/event_CORE_WORKER_<pid>.log` holds one
//! process's events. [`classify`] turns a path relative to a logs dir into a
//! [`FileMeta`], which picks the line format ([`FileKind`]) and the ids every record of
//! the file inherits. Both rotation styles are understood (`raylet.out.1` and 2.40's
//! `python-core-worker-<wid>_<pid>.1.log`), and `old/` (where log_monitor moves dead
//! workers' files) is transparent.

use crate::id::{Id, PackedId, JOB_HEX, WORKER_HEX};

/// The format family of a file, which decides how lines join into records and
/// which line parsers apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// C++ spdlog logs: raylet, GCS, core worker and driver. Header lines start records.
    Cpp,
    /// Python component logs (`date\tLEVEL file:N -- msg`).
    PythonComponent,
    /// A worker's stdout/stderr: markers, prints, structured logging, tracebacks.
    Worker,
    /// A Jobs API driver's stdout (`job-driver-<id>.log`): prints and Python lines.
    JobDriver,
    /// `events/*.log`: one Ray event JSON object per line.
    Event,
    /// `export_events/*.log`: one export event per line, ids in base64.
    ExportEvent,
    /// raylog's spool of Ray's exported events (`ray_events-<seq>.ndjson`): one
    /// `RayEvent` per line, ids in base64.
    RayEvent,
    /// `serve/*.log`: Ray Serve's `LEVEL date time name replica -- msg`.
    Serve,
    /// Anything else: one record per line, tracebacks joined.
    Plain,
}

impl FileKind {
    /// Whether a line without a recognised header continues the previous record
    /// (timestamped logs) rather than starting its own (stdout-like files).
    pub fn headered(self) -> bool {
        matches!(self, FileKind::Cpp | FileKind::PythonComponent | FileKind::Serve)
    }
}

/// Which standard stream a file captured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// What the path of a file says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileMeta {
    /// Path relative to the logs dir, `/`-separated (`events/event_GCS.log`).
    pub rel_path: String,
    pub kind: FileKind,
    /// The schema's `component` value.
    pub component: String,
    pub stream: Option<Stream>,
    pub worker_id: Option<Id>,
    /// `worker_id` packed, made once for the lookups of every record
    /// ([`FileMeta::worker_key`]; a `worker_id` set later is packed on each call,
    /// one changed later only by debug builds, which check it on each call).
    worker_key: Option<PackedId>,
    pub pid: Option<u32>,
    /// Never the `ffffffff` placeholder.
    pub job_id: Option<Id>,
    /// Jobs API submission id, from `job-driver-<id>.log` / `supervisor-<id>.log`.
    pub submission_id: Option<String>,
    /// Rotation index: 1 for `raylet.out.1` or `x_pid.1.log`; `None` for the live file.
    pub rotation: Option<u32>,
    /// `session_<date>_<pid>` the logs dir belongs to, when known.
    pub session: Option<String>,
    /// The file's full path, when the reader knows it (the agent sets it): OTLP's
    /// `log.file.path`. Not a record field: the record has `file`.
    pub path: Option<String>,
    /// The JSON members every record of this file shares, rendered once (see
    /// [`FileMeta::json_members`]).
    json_members: std::sync::OnceLock<Vec<u8>>,
}

impl FileMeta {
    /// The file's worker id, packed as the correlator keys workers (packed again if
    /// `worker_id` was set after [`classify`]).
    #[inline]
    pub fn worker_key(&self) -> Option<PackedId> {
        match (&self.worker_key, &self.worker_id) {
            (Some(k), Some(w)) if cfg!(not(debug_assertions)) || *k == w.packed() => Some(*k),
            (_, w) => w.as_ref().map(Id::packed),
        }
    }

    /// `"component":…,"stream":…,"file":…,"session":…,"submission_id":…` as JSON
    /// members, rendered on first use: they are the same for every record of the file,
    /// so the NDJSON writer copies them instead of escaping them again per record.
    /// The fields above must not change after this is first called.
    pub fn json_members(&self) -> &[u8] {
        self.json_members.get_or_init(|| {
            use crate::json_str::write_str;
            let mut v = Vec::with_capacity(128);
            v.extend_from_slice(b"\"component\":");
            write_str(&mut v, &self.component);
            if let Some(s) = self.stream {
                v.extend_from_slice(b",\"stream\":");
                write_str(&mut v, s.as_str());
            }
            v.extend_from_slice(b",\"file\":");
            write_str(&mut v, &self.rel_path);
            if let Some(s) = &self.session {
                v.extend_from_slice(b",\"session\":");
                write_str(&mut v, s);
            }
            if let Some(s) = &self.submission_id {
                v.extend_from_slice(b",\"submission_id\":");
                write_str(&mut v, s);
            }
            v
        })
    }
}

/// Splits a rotation number off a file name in either style, returning the name
/// of the live file and the index: `raylet.out.1` → (`raylet.out`, 1),
/// `x_12.2.log` → (`x_12.log`, 2).
pub fn split_rotation(name: &str) -> (std::borrow::Cow<'_, str>, Option<u32>) {
    if let Some((base, n)) = name.rsplit_once('.') {
        if !n.is_empty() && n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()) && base.contains('.') {
            return (base.into(), n.parse().ok());
        }
    }
    if let Some(stem) = name.strip_suffix(".log") {
        if let Some((base, n)) = stem.rsplit_once('.') {
            if !n.is_empty() && n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()) {
                return (format!("{base}.log").into(), n.parse().ok());
            }
        }
    }
    (name.into(), None)
}

/// Returns `name` without its extension (`.log`, `.out`, `.err`, `.txt`).
fn stem(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(s, _)| s)
}

fn is_session_dir(name: &str) -> bool {
    name.starts_with("session_") && name != "session_latest"
}

/// Classifies `rel_path` (relative to a logs dir). `session` is the session dir name,
/// when the caller knows it.
pub fn classify(rel_path: &str, session: Option<&str>) -> FileMeta {
    let rel = rel_path.trim_start_matches("./");
    let mut parts: Vec<&str> = rel.split('/').filter(|p| !p.is_empty()).collect();
    let file_name = parts.pop().unwrap_or("");
    let dir = parts.iter().rev().find(|p| **p != "old").copied().unwrap_or("");
    let (live, rotation) = split_rotation(file_name);
    let ext = live.rsplit_once('.').map_or("", |(_, e)| e);
    let mut m = FileMeta {
        rel_path: rel.to_string(),
        kind: FileKind::Plain,
        component: stem(&live).to_string(),
        stream: match ext {
            "out" => Some(Stream::Stdout),
            "err" => Some(Stream::Stderr),
            _ => None,
        },
        worker_id: None,
        worker_key: None,
        pid: None,
        job_id: None,
        submission_id: None,
        rotation,
        session: session.map(str::to_string),
        path: None,
        json_members: std::sync::OnceLock::new(),
    };
    match dir {
        "events" => classify_event(&live, &mut m, "event", FileKind::Event),
        "export_events" => classify_event(&live, &mut m, "export_event", FileKind::ExportEvent),
        "serve" => {
            m.kind = FileKind::Serve;
            m.component = "serve".into();
            m.pid = stem(&live).rsplit_once('_').and_then(|(_, p)| p.parse().ok());
        }
        "jobs" => classify_jobs(&live, &mut m),
        _ => classify_top(&live, &mut m),
    }
    m.worker_key = m.worker_id.map(|w| w.packed());
    m
}

fn classify_event(name: &str, m: &mut FileMeta, component: &str, kind: FileKind) {
    m.kind = kind;
    m.component = component.into();
    m.pid = stem(name).rsplit_once('_').and_then(|(_, p)| p.parse().ok());
}

fn classify_jobs(name: &str, m: &mut FileMeta) {
    if let Some(id) = stem(name).strip_prefix("supervisor-") {
        m.component = "job_supervisor".into();
        m.submission_id = Some(id.to_string());
    }
    m.kind = FileKind::PythonComponent;
}

/// Names directly in the logs dir (or its `old/`).
fn classify_top(name: &str, m: &mut FileMeta) {
    let st = stem(name);
    let is_log = name.ends_with(".log");
    // `python-core-spill_worker-` / `python-core-restore_worker-`: the core-worker
    // logs of the IO workers that spill and restore objects (2.60; their stdout and
    // stderr are `io_worker-<wid>-<pid>.{out,err}`).
    if let Some(rest) = [
        "python-core-worker-",
        "java-core-worker-",
        "cpp-core-worker-",
        "python-core-spill_worker-",
        "python-core-restore_worker-",
    ]
    .iter()
    .find_map(|p| st.strip_prefix(p))
    {
        core_log(rest, m, "core_worker");
    } else if let Some(rest) =
        ["python-core-driver-", "java-core-driver-", "cpp-core-driver-"].iter().find_map(|p| st.strip_prefix(p))
    {
        core_log(rest, m, "core_driver");
    } else if let Some(rest) = st.strip_prefix("worker-").filter(|_| !is_log) {
        worker_out(rest, m);
    } else if let Some(rest) = st.strip_prefix("io_worker-").filter(|_| !is_log) {
        m.kind = FileKind::Worker;
        m.component = "worker".into();
        let mut it = rest.split('-');
        m.worker_id = it.next().and_then(|w| Id::parse_len(w.as_bytes(), WORKER_HEX));
        m.pid = it.next().and_then(|p| p.parse().ok());
    } else if let Some(id) = st.strip_prefix("job-driver-") {
        m.kind = FileKind::JobDriver;
        m.component = "driver".into();
        m.submission_id = Some(id.to_string());
    } else if let Some(job) = st.strip_prefix("runtime_env_setup-") {
        m.kind = FileKind::PythonComponent;
        m.component = "runtime_env_setup".into();
        m.job_id = Id::parse_len(job.as_bytes(), JOB_HEX);
    } else if st.starts_with("ray_events-") && name.ends_with(".ndjson") {
        m.kind = FileKind::RayEvent;
        m.component = "ray_event".into();
    } else if st.starts_with("raylet") || st.starts_with("gcs_server") {
        m.kind = FileKind::Cpp;
        m.component = if st.starts_with("raylet") { "raylet" } else { "gcs_server" }.into();
    } else {
        python_component(st, is_log, m);
    }
}

fn python_component(st: &str, is_log: bool, m: &mut FileMeta) {
    let comp = if st == "dashboard_agent" {
        "dashboard_agent"
    } else if st == "dashboard" || st.starts_with("dashboard_") {
        "dashboard"
    } else if st.starts_with("ray_client_server") {
        "ray_client_server"
    } else {
        match st {
            "runtime_env_agent" | "log_monitor" | "monitor" => st,
            _ => {
                // Unknown file: the stem, with a stdout-like format unless it is a `.log`
                // that turns out to carry Python headers (handled per line anyway).
                m.kind = if is_log { FileKind::PythonComponent } else { FileKind::Plain };
                return;
            }
        }
    };
    m.component = comp.into();
    m.kind = if is_log { FileKind::PythonComponent } else { FileKind::Plain };
}

/// `<worker_id>_<pid>` of a core-worker or core-driver log.
fn core_log(rest: &str, m: &mut FileMeta, component: &str) {
    m.kind = FileKind::Cpp;
    m.component = component.into();
    if let Some((wid, pid)) = rest.rsplit_once('_') {
        m.worker_id = Id::parse_len(wid.as_bytes(), WORKER_HEX);
        m.pid = pid.parse().ok();
    }
    m.job_id = m.worker_id.and_then(|w| w.job_of_driver_worker());
    if component == "core_driver" && m.job_id.is_none() {
        m.job_id = rest.get(..JOB_HEX).and_then(|j| Id::parse_len(j.as_bytes(), JOB_HEX));
    }
}

/// `<worker_id>-<job_id>-<pid>` of a worker's `.out`/`.err`.
fn worker_out(rest: &str, m: &mut FileMeta) {
    m.kind = FileKind::Worker;
    m.component = "worker".into();
    let mut it = rest.split('-');
    m.worker_id = it.next().and_then(|w| Id::parse_len(w.as_bytes(), WORKER_HEX));
    m.job_id = it.next().and_then(|j| Id::parse_len(j.as_bytes(), JOB_HEX));
    m.pid = it.next().and_then(|p| p.parse().ok());
}

/// Finds the session dir name in a path (`…/session_2026-…_3908/logs/x`).
pub fn session_of_path(path: &std::path::Path) -> Option<String> {
    path.ancestors().filter_map(|p| p.file_name()?.to_str()).find(|n| is_session_dir(n)).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WID: &str = "abf3474d7b88f65c72864c3eca4a671f80505a668156e6c2df8064e2";

    #[test]
    fn worker_files() {
        let m = classify(&format!("worker-{WID}-ffffffff-4468.out"), None);
        assert_eq!(m.kind, FileKind::Worker);
        assert_eq!(m.component, "worker");
        assert_eq!(m.stream, Some(Stream::Stdout));
        assert_eq!(m.worker_id.unwrap().as_str(), WID);
        assert_eq!(m.job_id, None, "ffffffff is a placeholder, not a job");
        assert_eq!(m.pid, Some(4468));
        let m = classify(&format!("old/worker-{WID}-01000000-4468.err"), Some("session_x"));
        assert_eq!(m.job_id.unwrap().as_str(), "01000000");
        assert_eq!(m.stream, Some(Stream::Stderr));
        assert_eq!(m.session.as_deref(), Some("session_x"));
    }

    #[test]
    fn core_logs_and_rotation() {
        for name in [
            format!("python-core-worker-{WID}_4468.log"),
            format!("python-core-worker-{WID}_4468.log.2"),
            format!("python-core-worker-{WID}_4468.2.log"),
        ] {
            let m = classify(&name, None);
            assert_eq!(m.kind, FileKind::Cpp, "{name}");
            assert_eq!(m.component, "core_worker");
            assert_eq!(m.pid, Some(4468), "{name}");
            assert_eq!(m.worker_id.unwrap().as_str(), WID);
        }
        assert_eq!(classify(&format!("python-core-worker-{WID}_4468.log.2"), None).rotation, Some(2));
        let d = classify("python-core-driver-01000000ffffffffffffffffffffffffffffffffffffffffffffffff_3908.log", None);
        assert_eq!(d.component, "core_driver");
        assert_eq!(d.job_id.unwrap().as_str(), "01000000");
        // IO workers' core logs (fixtures/ray-2.60-health): core-worker logs too.
        for io in ["spill_worker", "restore_worker"] {
            let m = classify(&format!("python-core-{io}-{WID}_6329.log"), None);
            assert_eq!((m.component.as_str(), m.kind, m.pid), ("core_worker", FileKind::Cpp, Some(6329)), "{io}");
            assert_eq!(m.worker_id.unwrap().as_str(), WID);
        }
        let r = classify("raylet.out.1", None);
        assert_eq!((r.component.as_str(), r.kind, r.rotation), ("raylet", FileKind::Cpp, Some(1)));
        assert_eq!(r.stream, Some(Stream::Stdout));
    }

    #[test]
    fn events_serve_jobs() {
        let e = classify("events/event_CORE_WORKER_4469.log", None);
        assert_eq!((e.component.as_str(), e.kind, e.pid), ("event", FileKind::Event, Some(4469)));
        let e = classify("events/event_GCS.1.log", None);
        assert_eq!((e.kind, e.rotation), (FileKind::Event, Some(1)));
        let x = classify("export_events/event_EXPORT_TASK_7845.log", None);
        assert_eq!((x.component.as_str(), x.pid), ("export_event", Some(7845)));
        let s = classify("serve/controller_7659.log", None);
        assert_eq!((s.component.as_str(), s.pid), ("serve", Some(7659)));
        let j = classify("job-driver-raysubmit_etl_001.log", None);
        assert_eq!(j.component, "driver");
        assert_eq!(j.submission_id.as_deref(), Some("raysubmit_etl_001"));
        assert_eq!(classify("dashboard_JobHead.log", None).component, "dashboard");
        assert_eq!(classify("dashboard_agent.log.3", None).component, "dashboard_agent");
        assert_eq!(classify("monitor.log", None).kind, FileKind::PythonComponent);
        assert_eq!(classify("monitor.out", None).kind, FileKind::Plain);
        assert_eq!(classify("debug_state.txt", None).component, "debug_state");
        assert_eq!(classify("runtime_env_setup-02000000.log", None).job_id.unwrap().as_str(), "02000000");
    }

    #[test]
    fn session_name() {
        let p = std::path::Path::new("/tmp/ray/session_2026-11-30_09-05-30_825917_3908/logs/raylet.out");
        assert_eq!(session_of_path(p).as_deref(), Some("session_2026-11-30_09-05-30_825917_3908"));
    }
}
