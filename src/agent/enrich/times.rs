//! The times of untimed records: noted as they enter the batch (to be written
//! ahead of its delivery, see [`crate::agent::checkpoint::times`]), and given back
//! to the same records when a restart reads them again.
//!
//! A record's time is inferred when its line has none (a print; see
//! `Record::timestamp_inferred`). Such records are noted as runs: consecutive
//! records of one file that got one time make one run, so a batch of prints costs a
//! few runs per file, not one per line.

use std::collections::HashMap;

use raylog_parsers::{Record, Timestamp};

use crate::agent::checkpoint::times::Run;
use crate::agent::checkpoint::FileKey;

/// Runs noted for the batch being filled, and those a restart found.
#[derive(Debug, Default)]
pub struct Times {
    runs: Vec<Run>,
    /// By file seed, sorted by start: the times records read again get.
    restored: HashMap<u128, Vec<Run>>,
}

/// Whether `r`'s time is not its own (the only times a restart could change).
pub fn inferred(r: &Record<'_>) -> bool {
    r.timestamp_inferred || r.timestamp.is_none()
}

impl Times {
    /// With the runs an earlier run of the agent wrote.
    pub fn restoring(found: Vec<Run>) -> Times {
        let mut restored: HashMap<u128, Vec<Run>> = HashMap::new();
        for r in found {
            restored.entry(r.seed).or_default().push(r);
        }
        for runs in restored.values_mut() {
            // Of two runs from one start (sent twice), the later counts.
            runs.reverse();
            runs.sort_by_key(|r| r.start);
            runs.dedup_by_key(|r| r.start);
        }
        Times { runs: vec![], restored }
    }

    /// The time record `r` of the file with `seed` went out with before a restart,
    /// if it did; a run is forgotten once its last record is read again.
    pub fn restored(&mut self, seed: u128, r: &Record<'_>) -> Option<Timestamp> {
        if self.restored.is_empty() || !inferred(r) {
            return None;
        }
        let runs = self.restored.get_mut(&seed)?;
        let i = runs.partition_point(|run| run.start <= r.offset).checked_sub(1)?;
        let run = runs[i];
        if r.offset > run.end {
            return None;
        }
        if r.offset == run.end {
            runs.remove(i);
            if runs.is_empty() {
                self.restored.remove(&seed);
            }
        }
        Some(Timestamp(run.time_ns))
    }

    /// Notes that `r` of file `key` (`seed`) entered the batch dated `time_ns`.
    pub fn note(&mut self, key: FileKey, seed: u128, r: &Record<'_>, time_ns: i64) {
        if !inferred(r) {
            return;
        }
        if let Some(last) = self.runs.last_mut() {
            if last.seed == seed && last.key == key && last.time_ns == time_ns && last.end < r.offset {
                last.end = r.offset;
                return;
            }
        }
        self.runs.push(Run { key, seed, start: r.offset, end: r.offset, time_ns });
    }

    /// The runs of the batch just cut.
    pub fn take(&mut self) -> Vec<Run> {
        std::mem::take(&mut self.runs)
    }

    /// The runs a restart found that no record has been read again under yet.
    pub fn still_restored(&self) -> Vec<Run> {
        self.restored.values().flatten().copied().collect()
    }
}
