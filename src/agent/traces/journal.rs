//! The open spans (task attempts under way, and those just sent), written ahead of
//! the batch that carries their events.
//!
//! A span is built from several events that come in several batches: `RUNNING` in
//! one, `FINISHED` seconds or hours later. Once a batch is acknowledged its spool
//! segment goes, so a restart would not read `RUNNING` again and could never send
//! the span. So every attempt that changed is appended here and fsynced before the
//! batch goes to the sinks (with the times and task ranges journals), and a start
//! gives them back to the tracer ([`crate::agent::traces`]). An attempt keeps the
//! spans it sent: a batch lost in a crash is read again after the restart, and its
//! events send those spans again, the same ids with the same content.
//!
//! `traces.journal`, one JSON line each: `{"a":{attempt}}` (a later line of the same
//! task and attempt replaces an earlier one), `{"d":["task",attempt]}` (forgotten),
//! `{"j":{"job":spans sent}}` (the per-job counts). A torn last line is ignored. The
//! journal is rewritten whole from what the tracer keeps (bounded) at start and past
//! [`ROLL_BYTES`], through a temporary file renamed over it.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::attempt::Attempt;
use crate::agent::checkpoint::CheckpointError;

/// Past this size the journal is rewritten from what is kept.
const ROLL_BYTES: u64 = 8 << 20;

const NAME: &str = "traces.journal";

fn io(path: &Path, source: std::io::Error) -> CheckpointError {
    CheckpointError::Io { path: path.display().to_string(), source }
}

/// One journal line.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub enum Line {
    #[serde(rename = "a")]
    Attempt(Box<Attempt>),
    #[serde(rename = "d")]
    Forget(String, u32),
    #[serde(rename = "j")]
    Jobs(BTreeMap<String, u64>),
}

/// The journal of open spans, appended to by the reader before each batch is sent.
#[derive(Debug)]
pub struct TracesLog {
    path: PathBuf,
    file: Option<File>,
    bytes: u64,
}

/// What a journal holds: the attempts (last line of each wins, forgotten ones out)
/// and the per-job counts.
#[derive(Debug, Default)]
pub struct Found {
    pub attempts: Vec<Attempt>,
    pub jobs: BTreeMap<String, u64>,
}

impl TracesLog {
    /// Opens the journal in `dir`, with what it holds (compacted first).
    pub fn open(dir: &Path) -> Result<(TracesLog, Found), CheckpointError> {
        let path = dir.join(NAME);
        let mut log = TracesLog { path, file: None, bytes: 0 };
        let found = match std::fs::read(&log.path) {
            Ok(bytes) => read(&bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((log, Found::default())),
            Err(e) => return Err(io(&log.path, e)),
        };
        log.rewrite(&lines_of(&found))?;
        Ok((log, found))
    }

    /// Appends `changed` and fsyncs; rewrites the journal from `all` instead when it
    /// grew past [`ROLL_BYTES`].
    pub fn append(&mut self, changed: &[Line], all: impl FnOnce() -> Vec<Line>) -> Result<(), CheckpointError> {
        if changed.is_empty() {
            return Ok(());
        }
        if self.bytes >= ROLL_BYTES {
            return self.rewrite(&all());
        }
        let buf = encode(changed);
        let fresh = self.file.is_none();
        if fresh {
            let f = OpenOptions::new().create(true).append(true).open(&self.path).map_err(|e| io(&self.path, e))?;
            self.bytes = f.metadata().map_or(0, |m| m.len());
            self.file = Some(f);
        }
        let Some(f) = self.file.as_mut() else { return Ok(()) };
        f.write_all(&buf).and_then(|()| f.sync_data()).map_err(|e| io(&self.path, e))?;
        if fresh {
            sync_parent(&self.path)?;
        }
        self.bytes += buf.len() as u64;
        Ok(())
    }

    fn rewrite(&mut self, lines: &[Line]) -> Result<(), CheckpointError> {
        let tmp = self.path.with_extension("journal.new");
        let buf = encode(lines);
        let write = || -> std::io::Result<File> {
            let mut f = File::create(&tmp)?;
            f.write_all(&buf)?;
            f.sync_data()?;
            std::fs::rename(&tmp, &self.path)?;
            Ok(f)
        };
        self.file = None;
        let f = write().map_err(|e| io(&tmp, e))?;
        sync_parent(&self.path)?;
        self.file = Some(f);
        self.bytes = buf.len() as u64;
        Ok(())
    }
}

fn sync_parent(path: &Path) -> Result<(), CheckpointError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io(dir, e))
}

fn encode(lines: &[Line]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(lines.len() * 512);
    for l in lines {
        // Strings, numbers and byte arrays always serialize.
        let _ = serde_json::to_writer(&mut buf, l);
        buf.push(b'\n');
    }
    buf
}

/// The lines that rebuild `found`.
pub fn lines_of(found: &Found) -> Vec<Line> {
    let mut out: Vec<Line> = found.attempts.iter().map(|a| Line::Attempt(Box::new(a.clone()))).collect();
    if !found.jobs.is_empty() {
        out.push(Line::Jobs(found.jobs.clone()));
    }
    out
}

/// What the lines of a journal say, skipping any that do not read (a torn last
/// line: open spans are a help, never a reason not to start).
fn read(bytes: &[u8]) -> Found {
    let mut attempts: BTreeMap<(String, u32), (usize, Attempt)> = BTreeMap::new();
    let mut found = Found::default();
    for (i, l) in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()).enumerate() {
        match serde_json::from_slice::<Line>(l) {
            Ok(Line::Attempt(a)) => {
                let first = attempts.get(&(a.task.clone(), a.attempt)).map_or(i, |(f, _)| *f);
                attempts.insert((a.task.clone(), a.attempt), (first, *a));
            }
            Ok(Line::Forget(t, n)) => {
                attempts.remove(&(t, n));
            }
            Ok(Line::Jobs(j)) => found.jobs = j,
            Err(_) => {}
        }
    }
    // In the order they first came: the oldest sent are forgotten first.
    let mut v: Vec<(usize, Attempt)> = attempts.into_values().collect();
    v.sort_by_key(|(i, _)| *i);
    found.attempts = v.into_iter().map(|(_, a)| a).collect();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("raylog-traces-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn the_last_line_of_an_attempt_wins_and_a_torn_line_is_ignored() {
        let dir = tmpdir("last");
        let (mut log, found) = TracesLog::open(&dir).unwrap();
        assert!(found.attempts.is_empty());
        let mut a = Attempt::new("c8ef45ccd0112571ffffffffffffffffffffffff01000000", 0, 5);
        let b = Attempt::new("e0dc174c83599034ffffffffffffffffffffffff01000000", 1, 6);
        log.append(&[Line::Attempt(Box::new(a.clone())), Line::Attempt(Box::new(b.clone()))], Vec::new).unwrap();
        a.states.push(("RUNNING".into(), 42));
        let jobs = BTreeMap::from([("01000000".to_string(), 3u64)]);
        log.append(&[Line::Attempt(Box::new(a.clone())), Line::Jobs(jobs.clone())], Vec::new).unwrap();
        log.append(&[Line::Forget(b.task.clone(), 1)], Vec::new).unwrap();
        drop(log);
        let mut f = OpenOptions::new().append(true).open(dir.join(NAME)).unwrap();
        f.write_all(b"{\"a\":{\"task\":\"to").unwrap();
        let (_, found) = TracesLog::open(&dir).unwrap();
        assert_eq!(found.attempts, vec![a.clone()]);
        assert_eq!(found.jobs, jobs);
        // Compacted at the open: the same again, from a smaller file.
        let (_, again) = TracesLog::open(&dir).unwrap();
        assert_eq!(again.attempts, vec![a]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
