//! `type = "stdout"` and `type = "file"`: NDJSON lines, one per record.
//!
//! The default sink when none is configured, so `raylog ship` runs on a laptop with
//! nothing else installed. Writes are synchronous and flushed per batch: a batch is
//! acknowledged only once its bytes are handed to the OS.

use std::io::Write;
use std::path::Path;

use super::{Delivery, SendError};
use crate::agent::batch::Batch;

/// Writes NDJSON to stdout or to a file.
pub struct StdoutSink {
    out: Box<dyn Write + Send>,
    buf: Vec<u8>,
}

impl StdoutSink {
    pub fn stdout() -> StdoutSink {
        StdoutSink { out: Box::new(std::io::stdout()), buf: Vec::new() }
    }

    /// Appends to `path`, creating it.
    pub fn file(path: &Path) -> std::io::Result<StdoutSink> {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(StdoutSink { out: Box::new(f), buf: Vec::new() })
    }

    pub fn send(&mut self, batch: &Batch, only: Option<&[u32]>) -> Result<(Delivery, usize), SendError> {
        self.buf.clear();
        let mut push = |i: usize| {
            self.buf.extend_from_slice(batch.json_of(&batch.entries[i]).as_bytes());
            self.buf.push(b'\n');
        };
        match only {
            Some(o) => o.iter().for_each(|&i| push(i as usize)),
            None => (0..batch.len()).for_each(push),
        }
        self.out
            .write_all(&self.buf)
            .and_then(|_| self.out.flush())
            .map_err(|e| SendError::Transient(format!("write failed: {e}")))?;
        Ok((Delivery::default(), self.buf.len()))
    }
}
