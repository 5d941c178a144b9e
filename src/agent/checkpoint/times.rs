//! The times given to records that carry none, written ahead of their delivery.
//!
//! A print has no time of its own: the reader dates it from the file's last timed
//! line, the worker's core-worker log, or the file's mtime, as far as it has read
//! them (see `raylog_parsers::parser`). Read again after a restart, the same print
//! would get another time, and Loki stores an entry with another time as a new
//! one. So before a batch goes to the sinks, the times its untimed records got are
//! appended here and fsynced, as runs (a file's records from one offset to another,
//! one time); a restart gives the records it reads again the times they were sent
//! with (`crate::agent::enrich::times`).
//!
//! Files `times.G.journal`, one line a run: `[dev, ino, "seed", start, end, time_ns,
//! born, starts]` (seed: the file's document-id seed in hex, so a run never dates
//! another file on the same inode; born: its incarnation, see `checkpoint::born`;
//! starts: how many starts carried it; the last two absent in journals written
//! before they were kept). A torn last line (a crash mid-write) is ignored. A generation is
//! closed at [`ROLL_BYTES`] and deleted once every batch written to it is
//! checkpointed ([`TimesLog::prune`]); at start the runs found are written again
//! into the new first generation, and the old files deleted.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{CheckpointError, FileKey};

/// A generation is closed past this size.
const ROLL_BYTES: u64 = 4 << 20;

/// A file's untimed records from `start` to `end` (offsets of their first lines,
/// both included) went out dated `time_ns`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub key: FileKey,
    pub seed: u128,
    pub start: u64,
    pub end: u64,
    pub time_ns: i64,
    /// The file's incarnation (`checkpoint::born`; `UNKNOWN` when not known).
    pub born: u32,
    /// How many starts carried it into a new generation.
    pub starts: u8,
}

/// A run behind its file's checkpoint is carried through this many starts: the
/// checkpoint may be of what the file held before it was truncated in place (the
/// run's records, of the new content, not yet checkpointed), which no field of a
/// checkpoint tells apart. Past that it is dropped, so the journal stays small.
const CARRY_BEHIND: u8 = 3;

/// The journal of runs, appended to by the reader before each batch is sent.
#[derive(Debug)]
pub struct TimesLog {
    dir: PathBuf,
    file: Option<File>,
    generation: u64,
    bytes: u64,
    /// The last batch written to the open generation.
    last_seq: u64,
    /// Closed generations and the last batch written to each.
    closed: Vec<(u64, u64)>,
    line: Vec<u8>,
    /// What the start found, until the reader takes it.
    found: Vec<Run>,
    /// The last batch checkpointed (see `CheckpointStore::saved_batch`).
    saved: Option<std::sync::Arc<std::sync::atomic::AtomicU64>>,
}

fn io(path: &Path, source: std::io::Error) -> CheckpointError {
    CheckpointError::Io { path: path.display().to_string(), source }
}

fn path_of(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("times.{generation}.journal"))
}

impl TimesLog {
    /// Opens the journal in `dir`, with the runs an earlier run left that `keep`
    /// says may still be read again ([`TimesLog::take_found`]). They are written
    /// into the new generation before the old files go, so a crash now loses none.
    pub fn open(dir: &Path, keep: impl Fn(&Run) -> bool) -> Result<TimesLog, CheckpointError> {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let mut old = vec![];
        for e in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let name = e.map_err(|e| io(dir, e))?.file_name();
            let g = name.to_str().and_then(|n| n.strip_prefix("times.")?.strip_suffix(".journal")?.parse().ok());
            if let Some(g) = g {
                old.push(g);
            }
        }
        old.sort_unstable();
        let mut runs = vec![];
        for &g in &old {
            let p = path_of(dir, g);
            let bytes = std::fs::read(&p).map_err(|e| io(&p, e))?;
            runs.extend(bytes.split(|&b| b == b'\n').filter_map(parse_line).filter(|r| keep(r)));
        }
        for r in &mut runs {
            r.starts = r.starts.saturating_add(1);
        }
        let generation = old.last().map_or(0, |g| g + 1);
        let mut log = TimesLog {
            dir: dir.to_path_buf(),
            file: None,
            generation,
            bytes: 0,
            last_seq: 0,
            closed: vec![],
            line: vec![],
            found: vec![],
            saved: None,
        };
        if !runs.is_empty() {
            log.append(0, &runs).map_err(|e| io(&path_of(dir, generation), e))?;
        }
        for g in old {
            let _ = std::fs::remove_file(path_of(dir, g));
        }
        log.found = runs;
        Ok(log)
    }

    /// Opens the journal of `state_dir` for a reader resuming from `resume`: a run
    /// before its file's checkpoint is not read again, unless that checkpoint is of
    /// another file on the same inode (another incarnation: a new file on a reused
    /// inode, sent and not yet checkpointed, must keep its times through restarts),
    /// or may be of the file's content before a truncation ([`CARRY_BEHIND`]).
    pub fn for_resume(state_dir: &Path, resume: &super::Resume) -> Result<TimesLog, CheckpointError> {
        use super::born;
        TimesLog::open(state_dir, |r| {
            resume.get(&r.key).is_none_or(|cp| {
                cp.offset <= r.end || (born::known(r.born) && r.born != cp.born) || r.starts < CARRY_BEHIND
            })
        })
    }

    /// Prunes as batches are checkpointed: `saved` is the last one that is.
    pub fn watching(mut self, saved: std::sync::Arc<std::sync::atomic::AtomicU64>) -> TimesLog {
        self.saved = Some(saved);
        self
    }

    /// The runs the start found.
    pub fn take_found(&mut self) -> Vec<Run> {
        std::mem::take(&mut self.found)
    }

    /// Appends batch `seq`'s runs and fsyncs them: they are on disk when this
    /// returns. `carry` gives the runs of earlier generations still needed, written
    /// again when a new generation starts.
    pub fn append_carrying(&mut self, seq: u64, runs: &[Run], carry: impl FnOnce() -> Vec<Run>) -> std::io::Result<()> {
        if self.bytes >= ROLL_BYTES {
            self.closed.push((self.generation, self.last_seq));
            (self.generation, self.bytes, self.file) = (self.generation + 1, 0, None);
            let carried = carry();
            self.append(seq, &carried)?;
        }
        self.append(seq, runs)
    }

    fn append(&mut self, seq: u64, runs: &[Run]) -> std::io::Result<()> {
        if runs.is_empty() {
            return Ok(());
        }
        self.line.clear();
        for r in runs {
            let _ = writeln!(
                self.line,
                "[{},{},\"{:032x}\",{},{},{},{},{}]",
                r.key.dev, r.key.ino, r.seed, r.start, r.end, r.time_ns, r.born, r.starts
            );
        }
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let p = path_of(&self.dir, self.generation);
                let f = std::fs::OpenOptions::new().create(true).append(true).open(&p)?;
                // Its name must survive a power loss as its lines do.
                File::open(&self.dir)?.sync_all()?;
                self.file.insert(f)
            }
        };
        file.write_all(&self.line)?;
        file.sync_data()?;
        self.bytes += self.line.len() as u64;
        self.last_seq = self.last_seq.max(seq);
        Ok(())
    }

    /// Deletes the closed generations whose every batch is checkpointed.
    pub fn prune_saved(&mut self) {
        if let Some(saved) = self.saved.as_ref().map(|s| s.load(std::sync::atomic::Ordering::Relaxed)) {
            self.prune(saved);
        }
    }

    /// Deletes the closed generations whose every batch is checkpointed (all
    /// batches up to `saved_seq` are).
    pub fn prune(&mut self, saved_seq: u64) {
        let dir = &self.dir;
        self.closed.retain(|&(g, last)| {
            let done = last <= saved_seq;
            if done {
                let _ = std::fs::remove_file(path_of(dir, g));
            }
            !done
        });
    }

    /// Generations on disk (tests).
    pub fn generations(&self) -> usize {
        self.closed.len() + usize::from(self.file.is_some())
    }
}

fn parse_line(line: &[u8]) -> Option<Run> {
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Line {
        Now(u64, u64, String, u64, u64, i64, u32, u8),
        Before(u64, u64, String, u64, u64, i64),
    }
    let (dev, ino, seed, start, end, time_ns, born, starts) = match serde_json::from_slice(line).ok()? {
        Line::Now(d, i, s, a, b, t, born, starts) => (d, i, s, a, b, t, born, starts),
        Line::Before(d, i, s, a, b, t) => (d, i, s, a, b, t, super::born::UNKNOWN, 0),
    };
    let seed = u128::from_str_radix(&seed, 16).ok()?;
    Some(Run { key: FileKey { dev, ino }, seed, start, end, time_ns, born, starts })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(ino: u64, start: u64, time_ns: i64) -> Run {
        Run {
            key: FileKey { dev: 7, ino },
            seed: (ino as u128) << 64 | 0xabc,
            start,
            end: start + 10,
            time_ns,
            born: 0,
            starts: 0,
        }
    }

    /// Runs without their count of starts.
    fn plain(v: Vec<Run>) -> Vec<Run> {
        v.into_iter().map(|r| Run { starts: 0, ..r }).collect()
    }

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("raylog-times-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// What was appended is there at the next start (a torn last line left out),
    /// minus what `keep` refuses; the old files are replaced by the new generation.
    #[test]
    fn runs_survive_a_restart_and_a_torn_line_is_ignored() {
        let d = dir("restart");
        let mut log = TimesLog::open(&d, |_| true).unwrap();
        assert!(log.take_found().is_empty());
        log.append_carrying(1, &[run(1, 0, -5), run(2, 100, 1_796_000_000_000_000_000)], Vec::new).unwrap();
        log.append_carrying(2, &[run(3, 7, 9)], Vec::new).unwrap();
        drop(log);
        let p = path_of(&d, 0);
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"[7,4,\"00").unwrap();
        let mut log = TimesLog::open(&d, |r| r.key.ino != 3).unwrap();
        let found = plain(log.take_found());
        assert_eq!(found, vec![run(1, 0, -5), run(2, 100, 1_796_000_000_000_000_000)]);
        assert!(!p.exists(), "the old generation is gone");
        assert_eq!(log.generations(), 1);
        drop(log);
        let again = TimesLog::open(&d, |_| true).unwrap().take_found();
        assert_eq!(plain(again.clone()), found, "written again into the new generation");
        assert!(again.iter().all(|r| r.starts == 2), "carried by two starts: {again:?}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A run behind its file's checkpoint is dropped at a start, unless the
    /// checkpoint is another incarnation's (a new file on a reused inode, its
    /// records sent and not yet checkpointed), or it was carried by fewer than
    /// [`CARRY_BEHIND`] starts (the checkpoint may be of the file's content before a
    /// truncation in place). Both found by the model test (#57: a print read again
    /// after restarts had lost its time). A journal line written before these were
    /// kept is read.
    #[test]
    fn a_run_behind_the_checkpoint_of_its_inode_is_kept_while_it_may_be_another_contents() {
        let d = dir("born");
        let cp = |ino, born| crate::agent::checkpoint::FileCheckpoint {
            key: FileKey { dev: 7, ino },
            fingerprint: Default::default(),
            offset: 100,
            context: None,
            last_time_ns: None,
            updated: 0,
            born,
            gone_since: 0,
        };
        // Every file checkpointed past its runs; ino 2 by another incarnation.
        let resume = super::super::Resume::from_entries(vec![cp(1, 3), cp(2, 3), cp(3, 0), cp(4, 0)]);
        let mut log = TimesLog::open(&d, |_| true).unwrap();
        let (old, new) = (Run { born: 3, ..run(1, 0, 11) }, Run { born: 5, ..run(2, 0, 22) });
        log.append_carrying(1, &[old, new, run(3, 0, 33)], Vec::new).unwrap();
        drop(log);
        let mut f = std::fs::OpenOptions::new().append(true).open(path_of(&d, 0)).unwrap();
        f.write_all(b"[7,4,\"00000000000000040000000000000abc\",0,10,44]\n").unwrap();
        drop(f);
        let mut kept = vec![];
        for _ in 0..CARRY_BEHIND + 2 {
            kept.push(plain(TimesLog::for_resume(&d, &resume).unwrap().take_found()));
        }
        let all = vec![old, new, run(3, 0, 33), run(4, 0, 44)];
        for (start, found) in kept.iter().take(CARRY_BEHIND as usize).enumerate() {
            assert_eq!(*found, all, "start {start}: every run carried");
        }
        assert_eq!(kept[CARRY_BEHIND as usize], vec![new], "then only the other incarnation's");
        assert_eq!(kept[CARRY_BEHIND as usize + 1], vec![new]);
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A full generation is closed, carrying what is still needed, and deleted only
    /// once every batch written to it is checkpointed.
    #[test]
    fn a_closed_generation_goes_once_its_batches_are_saved() {
        let d = dir("roll");
        let mut log = TimesLog::open(&d, |_| true).unwrap();
        let many: Vec<Run> = (0..80_000).map(|i| run(i, i, 1)).collect();
        log.append_carrying(5, &many, Vec::new).unwrap();
        log.append_carrying(6, &[run(1, 1, 1)], || vec![run(99, 99, 99)]).unwrap();
        assert_eq!(log.generations(), 2);
        log.prune(4);
        assert!(path_of(&d, 0).exists(), "batch 5 is not saved");
        log.prune(5);
        assert!(!path_of(&d, 0).exists());
        drop(log);
        let found = plain(TimesLog::open(&d, |_| true).unwrap().take_found());
        assert_eq!(found, vec![run(99, 99, 99), run(1, 1, 1)], "the carried run, then batch 6's");
        let _ = std::fs::remove_dir_all(&d);
    }
}
