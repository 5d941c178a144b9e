//! `type = "stdout"` and `type = "file"`: NDJSON lines, one per record.
//!
//! The default sink when none is configured, so `raylog ship` runs on a laptop with
//! nothing else installed. Writes are synchronous and flushed per batch: a batch is
//! acknowledged only once its bytes are handed to the OS. When stdout's reader goes
//! away (`raylog ship --once | head`), there is nobody left to deliver to: the agent
//! stops quietly, as other Unix tools do, through the same orderly shutdown as on
//! SIGTERM (checkpoints saved, exit 0), and the undelivered batches keep their
//! checkpoints back for the next run.

use std::io::Write;
use std::path::Path;

use super::{Delivery, SendError};
use crate::agent::batch::Batch;

/// Writes NDJSON to stdout or to a file.
pub struct NdjsonSink {
    out: Box<dyn Write + Send>,
    buf: Vec<u8>,
    is_stdout: bool,
}

impl NdjsonSink {
    pub fn stdout() -> NdjsonSink {
        NdjsonSink { out: Box::new(std::io::stdout()), buf: Vec::new(), is_stdout: true }
    }

    /// Appends to `path`, creating it.
    pub fn file(path: &Path) -> std::io::Result<NdjsonSink> {
        let f = std::fs::OpenOptions::new().create(true).append(true).open(path)?;
        Ok(NdjsonSink { out: Box::new(f), buf: Vec::new(), is_stdout: false })
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
        let written = self.out.write_all(&self.buf).and_then(|_| self.out.flush());
        if let Err(e) = written {
            if self.is_stdout && e.kind() == std::io::ErrorKind::BrokenPipe {
                return Err(SendError::Gone("stdout was closed by its reader".into()));
            }
            return Err(SendError::Transient(format!("write failed: {e}")));
        }
        Ok((Delivery::default(), self.buf.len()))
    }
}
