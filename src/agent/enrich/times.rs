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

/// A file's runs in the order they were written, as runs that do not overlap,
/// sorted by start: where two cover the same records (sent twice: a run carried
/// from an earlier start, and the records' resend, which may have stopped short of
/// its end), the later one counts for those and the earlier keeps the rest.
fn later_wins(written: Vec<Run>) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::with_capacity(written.len());
    for r in written {
        let mut kept = Vec::with_capacity(out.len() + 2);
        for o in out.drain(..) {
            if o.end < r.start || o.start > r.end {
                kept.push(o);
                continue;
            }
            if o.start < r.start {
                kept.push(Run { end: r.start - 1, ..o });
            }
            if o.end > r.end {
                kept.push(Run { start: r.end + 1, ..o });
            }
        }
        kept.push(r);
        kept.sort_by_key(|x| x.start);
        out = kept;
    }
    out
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
            *runs = later_wins(std::mem::take(runs));
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
        // Its incarnation is set when the batch's runs are written (the source knows it).
        self.runs.push(Run { key, seed, start: r.offset, end: r.offset, time_ns, born: 0, starts: 0 });
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start: u64, end: u64, time_ns: i64) -> Run {
        Run { key: FileKey { dev: 1, ino: 2 }, seed: 9, start, end, time_ns, born: 0, starts: 0 }
    }

    /// A run carried from an earlier start and the resend of its first records
    /// (cut short by another restart): the records past the resend keep the
    /// carried run's time. Found by the model test (#57): they lost it, and Loki
    /// would have stored them twice.
    #[test]
    fn a_shorter_resend_keeps_the_rest_of_the_run_it_repeats() {
        assert_eq!(later_wins(vec![run(0, 15, 7), run(0, 0, 7)]), vec![run(0, 0, 7), run(1, 15, 7)]);
        // Inside, over the end, and apart.
        assert_eq!(later_wins(vec![run(0, 30, 1), run(10, 20, 2)]), vec![run(0, 9, 1), run(10, 20, 2), run(21, 30, 1)]);
        assert_eq!(later_wins(vec![run(0, 30, 1), run(20, 40, 2)]), vec![run(0, 19, 1), run(20, 40, 2)]);
        assert_eq!(later_wins(vec![run(50, 60, 1), run(0, 10, 2)]), vec![run(0, 10, 2), run(50, 60, 1)]);
    }
}
