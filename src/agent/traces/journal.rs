//! The open spans (task attempts under way, and those just sent), written ahead of
//! the batch that carries their events.
//!
//! A span is built from several events that come in several batches: `RUNNING` in
//! one, `FINISHED` seconds or hours later. Once a batch is acknowledged its spool
//! segment goes, so a restart would not read `RUNNING` again and could never send
//! the span. So every attempt that changed is appended here and fsynced before the
//! batch goes to the sinks (with the times and task ranges journals), and a start
//! gives them back to the tracer ([`crate::agent::traces`]). An attempt keeps how it
//! cut the spans it sent: a batch lost in a crash is read again after the restart,
//! and its events send those spans again, the same ids with the same content.
//!
//! `traces.journal`, one JSON line each: `{"a":{attempt}}` (a later line of the same
//! task and attempt replaces an earlier one), `{"d":["task",attempt]}` (forgotten),
//! `{"j":{"trace id":spans sent}}` (the per-job counts). A torn last line is ignored. The
//! journal is rewritten whole from what the tracer keeps (bounded) at start and past
//! [`ROLL_BYTES`] ([`LineJournal`]).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::attempt::Attempt;
use crate::agent::checkpoint::lines::LineJournal;
use crate::agent::checkpoint::CheckpointError;

/// Past this size the journal is rewritten from what is kept.
const ROLL_BYTES: u64 = 8 << 20;

const NAME: &str = "traces.journal";

/// One journal line, as read.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub enum Line {
    #[serde(rename = "a")]
    Attempt(Box<Attempt>),
    #[serde(rename = "d")]
    Forget(String, u32),
    #[serde(rename = "j")]
    Jobs(BTreeMap<String, u64>),
}

/// One journal line, as written: [`Line`] borrowing what it says, so nothing is
/// copied to be written.
#[derive(Serialize)]
pub enum LineRef<'a> {
    #[serde(rename = "a")]
    Attempt(&'a Attempt),
    #[serde(rename = "d")]
    Forget(&'a str, u32),
    #[serde(rename = "j")]
    Jobs(&'a BTreeMap<String, u64>),
}

impl LineRef<'_> {
    /// Writes the line to `out`.
    pub fn write(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        serde_json::to_writer(&mut *out, self)?;
        out.write_all(b"\n")
    }
}

/// The journal of open spans, appended to by the reader before each batch is sent.
#[derive(Debug)]
pub struct TracesLog(LineJournal);

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
        let (mut journal, bytes) = LineJournal::open(dir.join(NAME), ROLL_BYTES)?;
        let Some(bytes) = bytes else { return Ok((TracesLog(journal), Found::default())) };
        let found = read(&bytes);
        journal.rewrite(|w| write_all(found.attempts.iter(), &found.jobs, w))?;
        Ok((TracesLog(journal), found))
    }

    /// Appends `lines` (written by [`LineRef::write`]) and fsyncs; rewrites the
    /// journal with what `all` writes instead when it grew past [`ROLL_BYTES`].
    pub fn append(
        &mut self,
        lines: &[u8],
        all: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
    ) -> Result<(), CheckpointError> {
        self.0.append(lines, all)
    }
}

/// The lines that rebuild `attempts` and `jobs`.
pub fn write_all<'a>(
    attempts: impl Iterator<Item = &'a Attempt>,
    jobs: &BTreeMap<String, u64>,
    out: &mut dyn std::io::Write,
) -> std::io::Result<()> {
    for a in attempts {
        LineRef::Attempt(a).write(out)?;
    }
    if !jobs.is_empty() {
        LineRef::Jobs(jobs).write(out)?;
    }
    Ok(())
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
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::path::PathBuf;

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
        let lines = |ls: &[LineRef<'_>]| {
            let mut buf = Vec::new();
            ls.iter().for_each(|l| l.write(&mut buf).unwrap());
            buf
        };
        log.append(&lines(&[LineRef::Attempt(&a), LineRef::Attempt(&b)]), |_| Ok(())).unwrap();
        a.states.push(("RUNNING".into(), 42));
        let jobs = BTreeMap::from([("01000000".to_string(), 3u64)]);
        log.append(&lines(&[LineRef::Attempt(&a), LineRef::Jobs(&jobs)]), |_| Ok(())).unwrap();
        log.append(&lines(&[LineRef::Forget(&b.task, 1)]), |_| Ok(())).unwrap();
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
