//! A journal of lines written ahead of a batch: appended and fsynced, and rewritten
//! whole (through a temporary file renamed over it) when it grew past a bound. What
//! the lines say is the caller's: `tasks.journal` ([`super::tasks`]) and
//! `traces.journal` (`crate::agent::traces::journal`) keep their own formats.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::CheckpointError;

fn io(path: &Path, source: std::io::Error) -> CheckpointError {
    CheckpointError::Io { path: path.display().to_string(), source }
}

/// One journal file. Created at the first append: a node that never has anything
/// to write never has one.
#[derive(Debug)]
pub struct LineJournal {
    path: PathBuf,
    file: Option<File>,
    bytes: u64,
    /// Past this size an append rewrites the journal from what is kept instead.
    roll_bytes: u64,
}

impl LineJournal {
    /// The journal at `path`, and its bytes (`None` when there is none yet).
    pub fn open(path: PathBuf, roll_bytes: u64) -> Result<(LineJournal, Option<Vec<u8>>), CheckpointError> {
        let found = match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(io(&path, e)),
        };
        Ok((LineJournal { path, file: None, bytes: 0, roll_bytes }, found))
    }

    /// Appends `lines` and fsyncs; when the journal grew past its bound, rewrites it
    /// with what `all` writes instead. Nothing to append writes nothing.
    pub fn append(
        &mut self,
        lines: &[u8],
        all: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), CheckpointError> {
        if lines.is_empty() {
            return Ok(());
        }
        if self.bytes >= self.roll_bytes {
            return self.rewrite(all);
        }
        let fresh = self.file.is_none();
        if fresh {
            let f = OpenOptions::new().create(true).append(true).open(&self.path).map_err(|e| io(&self.path, e))?;
            self.bytes = f.metadata().map_or(0, |m| m.len());
            self.file = Some(f);
        }
        let Some(f) = self.file.as_mut() else { return Ok(()) };
        f.write_all(lines).and_then(|()| f.sync_data()).map_err(|e| io(&self.path, e))?;
        if fresh {
            sync_parent(&self.path)?;
        }
        self.bytes += lines.len() as u64;
        Ok(())
    }

    /// Tests: takes the journal to be `n` bytes long (to reach its bound quickly).
    #[cfg(test)]
    pub fn pretend_len(&mut self, n: u64) {
        self.bytes = n;
    }

    /// Replaces the journal with what `lines` writes (streamed to a temporary
    /// file, fsynced, renamed over it: the whole is never in memory).
    pub fn rewrite(
        &mut self,
        lines: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<(), CheckpointError> {
        let tmp = self.path.with_extension("journal.new");
        let write = || -> std::io::Result<File> {
            let mut w = std::io::BufWriter::with_capacity(1 << 16, File::create(&tmp)?);
            lines(&mut w)?;
            let f = w.into_inner().map_err(|e| e.into_error())?;
            f.sync_data()?;
            std::fs::rename(&tmp, &self.path)?;
            Ok(f)
        };
        self.file = None;
        let f = write().map_err(|e| io(&tmp, e))?;
        sync_parent(&self.path)?;
        self.bytes = f.metadata().map_or(0, |m| m.len());
        // Appends go to the renamed file: the descriptor follows it.
        self.file = Some(f);
        Ok(())
    }
}

fn sync_parent(path: &Path) -> Result<(), CheckpointError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io(dir, e))
}
