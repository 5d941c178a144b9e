//! The dead-letter file: records a sink refused for good, one JSON object per line
//! (`{"sink","kind","reason","record"}`), shared by all sinks, in `state_dir`.
//!
//! It is the only copy of those records, so a record is acknowledged (and its
//! checkpoint allowed past it) only once its line is written; a failed write is
//! retried by the sink's driver. The file rotates at `dead_letter.max_bytes`:
//! `dead-letter.ndjson` becomes `dead-letter.ndjson.1` (replacing the previous one),
//! so at most twice that is kept.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::DeadReason;
use crate::agent::batch::Batch;

/// The shared dead-letter file.
#[derive(Clone)]
pub struct DeadLetter {
    path: PathBuf,
    max_bytes: u64,
    file: Arc<Mutex<Option<(std::fs::File, u64)>>>,
}

impl DeadLetter {
    pub fn new(state_dir: &Path, max_bytes: u64) -> DeadLetter {
        DeadLetter { path: state_dir.join("dead-letter.ndjson"), max_bytes, file: Arc::new(Mutex::new(None)) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends the rejected records of `batch`, rotating first if they would take
    /// the file past its bound.
    pub fn write(&self, sink: &str, batch: &Batch, rejected: &[(u32, DeadReason, String)]) -> std::io::Result<()> {
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
        let mut guard = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(self.open()?);
        }
        let size = guard.as_ref().map_or(0, |f| f.1);
        if size > 0 && size + out.len() as u64 > self.max_bytes {
            *guard = None;
            std::fs::rename(&self.path, self.path.with_extension("ndjson.1"))?;
            *guard = Some(self.open()?);
        }
        let (f, len) = guard.as_mut().expect("opened above");
        let res = f.write_all(&out).and_then(|_| f.flush());
        if res.is_err() {
            // Reopen next time: the descriptor may be what failed.
            *guard = None;
        } else {
            *len += out.len() as u64;
        }
        res
    }

    /// Opens the file for appending, with its current size.
    fn open(&self) -> std::io::Result<(std::fs::File, u64)> {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(&self.path)?;
        let len = f.metadata()?.len();
        Ok((f, len))
    }
}
