//! The dead-letter file: records a sink refused for good, one JSON object per line
//! (`{"sink","kind","reason","record"}`), shared by all sinks, in `state_dir`.
//!
//! It is the only copy of those records, so a record is acknowledged (and its
//! checkpoint allowed past it) only once its line is durable: each append is
//! fsynced (one fsync for all the lines of a send, not one per line) before it
//! returns, and a newly created file's directory entry too, since the checkpoint
//! that acknowledges the records is itself fsynced and would otherwise outlive
//! them in a crash. A failed append is retried by the sink's driver. The file
//! rotates at `dead_letter.max_bytes`: `dead-letter.ndjson` becomes
//! `dead-letter.ndjson.1` (replacing the previous one), so at most twice that is kept.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::DeadReason;
use crate::agent::batch::Batch;

/// The shared dead-letter file.
#[derive(Clone)]
pub struct DeadLetter {
    path: PathBuf,
    max_bytes: u64,
    file: Arc<Mutex<Option<(std::fs::File, u64)>>>,
    durable: Arc<Durable>,
}

/// What this process made durable: what a crash cannot take back.
#[derive(Default)]
struct Durable {
    bytes: AtomicU64,
    fsyncs: AtomicU64,
}

impl DeadLetter {
    pub fn new(state_dir: &Path, max_bytes: u64) -> DeadLetter {
        DeadLetter {
            path: state_dir.join("dead-letter.ndjson"),
            max_bytes,
            file: Arc::new(Mutex::new(None)),
            durable: Arc::default(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes this process appended to the file and fsynced, and the fsyncs that took.
    pub fn durable(&self) -> (u64, u64) {
        (self.durable.bytes.load(Relaxed), self.durable.fsyncs.load(Relaxed))
    }

    /// The lines for the rejected records of `batch` (no I/O: cheap enough for the
    /// async runtime, so only [`DeadLetter::append`] goes to a blocking thread).
    pub fn encode(sink: &str, batch: &Batch, rejected: &[(u32, DeadReason, String)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, kind, reason) in rejected {
            let Some(e) = batch.entries.get(*i as usize) else { continue };
            out.extend_from_slice(b"{\"sink\":");
            raylog_parsers::ndjson::write_str(&mut out, sink);
            out.extend_from_slice(b",\"kind\":\"");
            out.extend_from_slice(kind.as_str().as_bytes());
            out.extend_from_slice(b"\",\"reason\":");
            raylog_parsers::ndjson::write_str(&mut out, reason);
            out.extend_from_slice(b",\"record\":");
            if batch.needs.json {
                out.extend_from_slice(batch.json_of(e).as_bytes());
            } else {
                batch.write_fields_json(e, &mut out, usize::MAX);
            }
            out.extend_from_slice(b"}\n");
        }
        out
    }

    /// Appends `lines` (from [`DeadLetter::encode`]) and fsyncs them, rotating first
    /// if they would take the file past its bound. Blocking: call it off the runtime.
    pub fn append(&self, lines: &[u8]) -> std::io::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(self.open()?);
        }
        let size = guard.as_ref().map_or(0, |f| f.1);
        if size > 0 && size + lines.len() as u64 > self.max_bytes {
            *guard = None;
            std::fs::rename(&self.path, self.path.with_extension("ndjson.1"))?;
            *guard = Some(self.open()?);
        }
        let (f, len) = guard.as_mut().expect("opened above");
        // sync_data: the size changes with every append, so it is written too.
        let res = f.write_all(lines).and_then(|_| f.sync_data());
        if res.is_err() {
            // Reopen next time: the descriptor may be what failed. What was written
            // may be written again: a duplicate line, never a missing one.
            *guard = None;
        } else {
            *len += lines.len() as u64;
            self.durable.bytes.fetch_add(lines.len() as u64, Relaxed);
            self.durable.fsyncs.fetch_add(1, Relaxed);
        }
        res
    }

    /// Opens the file for appending, with its current size, and makes its directory
    /// entry durable (it may have just been created, or renamed away by a rotation).
    fn open(&self) -> std::io::Result<(std::fs::File, u64)> {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        let len = f.metadata()?.len();
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok((f, len))
    }
}
