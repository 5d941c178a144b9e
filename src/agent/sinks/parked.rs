//! Parked batches: what a sink could not deliver before the shutdown grace ended,
//! kept in `state_dir/parked/<sink>/` and sent first at the next start.
//!
//! Without them, records not delivered at a stop keep their checkpoint back and
//! are read again at the next start, which works only while their file is still
//! there and unchanged: a worker's file deleted with its job, or a record that
//! waited in the hold, cannot be read again. So when the grace ends, the sink
//! writes each undelivered batch (only its entries not yet stored, see
//! [`crate::agent::batch::park`]) to a file here, fsyncs it and its directory,
//! and only then acknowledges the batch, which lets the checkpoint pass it. The
//! next start sends those files before anything new, as they were (same times,
//! labels, ids), and deletes each once delivered.
//!
//! Files are named by when they were written, so they are sent in that order. A
//! file is written under a `.tmp` name and renamed, so a crash mid-write leaves
//! no half batch to send (the `.tmp` is removed at the next start; its records
//! were not acknowledged, so their checkpoints stayed behind them). A file that
//! cannot be read back is renamed `.bad`, logged with its path, and left for a
//! person to look at: never sent half, never deleted unread.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use super::{deliver, Ack, Progress, SinkTask};
use crate::agent::batch::{park, Batch, Needs};

/// One sink's parked batches.
#[derive(Clone, Debug)]
pub struct Parking {
    dir: PathBuf,
    written: Arc<AtomicU64>,
}

impl Parking {
    /// The parked batches of the sink named `sink` under `state_dir`.
    pub fn new(state_dir: &Path, sink: &str) -> Parking {
        Parking { dir: state_dir.join("parked").join(dir_name(sink)), written: Arc::default() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `bytes` as a new parked batch and makes it durable (the file, then
    /// its directory entry) before returning. Blocking.
    pub fn put(&self, bytes: &[u8]) -> std::io::Result<PathBuf> {
        let created = !self.dir.exists();
        std::fs::create_dir_all(&self.dir)?;
        if created {
            if let Some(parent) = self.dir.parent() {
                sync_dir(parent)?;
            }
        }
        let nanos = jiff::Timestamp::now().as_nanosecond().max(0) as u128;
        let n = self.written.fetch_add(1, Relaxed);
        let path = self.dir.join(format!("{nanos:020}-{n:06}.batch"));
        let tmp = path.with_extension("tmp");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &path)?;
        sync_dir(&self.dir)?;
        Ok(path)
    }

    /// The parked batches, oldest first; removes what a crash left half written.
    /// None when the directory does not exist. Blocking.
    pub fn list(&self) -> std::io::Result<Vec<PathBuf>> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
            Err(e) => return Err(e),
        };
        let mut out = vec![];
        for entry in rd {
            let path = entry?.path();
            match path.extension().and_then(|e| e.to_str()) {
                Some("batch") => out.push(path),
                Some("tmp") => std::fs::remove_file(&path)?,
                _ => {}
            }
        }
        out.sort();
        Ok(out)
    }

    /// Deletes a parked batch once delivered. Blocking.
    pub fn remove(&self, path: &Path) -> std::io::Result<()> {
        std::fs::remove_file(path)?;
        sync_dir(&self.dir)
    }

    /// Sets a batch that cannot be read back aside as `.bad`. Blocking.
    pub fn set_aside(&self, path: &Path) -> std::io::Result<PathBuf> {
        let bad = path.with_extension("bad");
        std::fs::rename(path, &bad)?;
        Ok(bad)
    }
}

/// A sink's directory under `parked/`: its name is free text, a directory's is not.
fn dir_name(sink: &str) -> String {
    sink.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect()
}

/// Directories under `state_dir/parked` holding parked batches of no sink in
/// `sinks` (a sink renamed or removed since they were parked), with how many each
/// holds. Nothing sends them; the caller says so, once, at the start.
pub fn orphans<'a>(state_dir: &Path, sinks: impl IntoIterator<Item = &'a str>) -> Vec<(PathBuf, usize)> {
    let known: Vec<String> = sinks.into_iter().map(dir_name).collect();
    let Ok(dirs) = std::fs::read_dir(state_dir.join("parked")) else { return vec![] };
    let mut out: Vec<(PathBuf, usize)> = dirs
        .flatten()
        .filter(|d| !known.iter().any(|k| d.file_name() == k.as_str()))
        .filter_map(|d| {
            let n = std::fs::read_dir(d.path())
                .ok()?
                .flatten()
                .filter(|f| f.path().extension().is_some_and(|x| x == "batch"))
                .count();
            (n > 0).then(|| (d.path(), n))
        })
        .collect();
    out.sort();
    out
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// Sends the batches parked at the last stop, oldest first, deleting each once
/// delivered. False if the grace ended first (what is left stays parked).
pub(super) async fn replay(t: &mut SinkTask) -> bool {
    let Some(p) = t.parking.clone() else { return true };
    let files = match blocking({
        let p = p.clone();
        move || p.list()
    })
    .await
    {
        Ok(files) => files,
        Err(e) => {
            tracing::error!(dir = %p.dir().display(), error = %e, "cannot list the parked batches; they are left where they are for a later start (check state_dir's permissions)");
            return true;
        }
    };
    if !files.is_empty() {
        tracing::info!(sink = %t.name, batches = files.len(), dir = %p.dir().display(), "sending first what was parked at the last stop");
    }
    for path in files {
        let Some(batch) = read(t.needs, &p, &path).await else { continue };
        if deliver(t, &batch, Progress::none()).await.is_err() {
            return false;
        }
        t.metrics.sinks[t.index].unparked.fetch_add(batch.len() as u64, Relaxed);
        let gone = blocking({
            let (p, path) = (p.clone(), path.clone());
            move || p.remove(&path)
        });
        if let Err(e) = gone.await {
            tracing::warn!(path = %path.display(), error = %e, "a parked batch was delivered but cannot be deleted: the next start sends it again (Loki and Elasticsearch keep one copy); delete it by hand");
        }
    }
    true
}

/// A parked batch read back, or `None` (logged) when it cannot be: then it is set
/// aside as `.bad` if it is damaged or no longer fits the sink.
async fn read(needs: Needs, p: &Parking, path: &Path) -> Option<Batch> {
    let bytes = match blocking({
        let path = path.to_path_buf();
        move || std::fs::read(path)
    })
    .await
    {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "cannot read a parked batch; it is left where it is for a later start");
            return None;
        }
    };
    let why = match park::unpark(&bytes, 0) {
        Ok(b) if covers(b.needs, needs) => return Some(b),
        Ok(_) => "it was parked for a sink that read less of each record (its type or line_format changed)".to_string(),
        Err(e) => e.to_string(),
    };
    let moved = blocking({
        let (p, path) = (p.clone(), path.to_path_buf());
        move || p.set_aside(&path)
    });
    let bad = moved.await.map_or_else(|e| format!("(could not rename it: {e})"), |b| b.display().to_string());
    tracing::error!(path = %path.display(), %bad, error = %why, "a parked batch cannot be sent; set aside, its records are not shipped (look at it, or delete it)");
    None
}

/// Whether a batch built with `have` holds what a sink needing `need` reads.
fn covers(have: Needs, need: Needs) -> bool {
    (have.json || !need.json) && (have.fields || !need.fields) && (have.extra || !need.extra)
}

/// Parks the entries `left` of `batch`, then every batch still queued for the
/// sink, acknowledging each once its file is durable. On a write error the rest
/// keeps its checkpoints back (read again at the next start where files remain).
pub(super) async fn park_rest(t: &mut SinkTask, batch: Arc<Batch>, left: Vec<u32>) {
    let Some(p) = t.parking.clone() else { return };
    if !park_one(t, &p, &batch, Some(&left)).await {
        return;
    }
    while let Some((b, _)) = t.batches.recv().await {
        if !park_one(t, &p, &b, None).await {
            return;
        }
    }
}

async fn park_one(t: &mut SinkTask, p: &Parking, batch: &Arc<Batch>, only: Option<&[u32]>) -> bool {
    let n = only.map_or(batch.len(), <[u32]>::len) as u64;
    if n > 0 {
        let bytes = park::park(batch, only);
        let put = blocking({
            let p = p.clone();
            move || p.put(&bytes)
        });
        if let Err(e) = put.await {
            tracing::error!(sink = %t.name, dir = %p.dir().display(), error = %e, "cannot park undelivered records; their checkpoints stay behind them, so the next start reads them again where their files remain (check state_dir's disk)");
            return false;
        }
        t.metrics.sinks[t.index].parked.fetch_add(n, Relaxed);
    }
    t.acks.send(Ack { seq: batch.seq, sink: t.index, upto: None }).await.is_ok()
}

/// Runs file I/O off the async runtime.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> std::io::Result<T> + Send + 'static) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f).await.unwrap_or_else(|e| Err(std::io::Error::other(e.to_string())))
}
