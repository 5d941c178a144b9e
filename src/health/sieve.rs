//! Sieve: which records can change a [`Collector`](super::Collector), so that on
//! many threads the parse workers copy only those to the thread that runs it.
//!
//! Most records of an archive change nothing: a `Collector` counts errors, the
//! events [`detect`](super::detect()) finds, `Event stats:` blocks and node
//! liveness, and it learns a worker's pid, a task's name and an actor's class from
//! the first record that states them. A worker sifts the records of its segment (a
//! run of the serial order) through [`needed`]; of the learning kind it keeps the
//! first per id (the segment's [`Seen`]), which is as early as any the collector
//! could learn from, and only its facts ([`Kept::Facts`]) when that is all it does:
//! [`Collector::learn`](super::Collector::learn) reads no message or pairs but an
//! actor definition's. The report is the same as from every record: a test feeds
//! the fixtures both ways, cut into runs of many sizes.

use raylog_parsers::{Level, Record};

use crate::scan::{Kept, Seen};

/// `Seen` kinds: what a first record per id teaches.
const PID: u8 = 0;
const TASK_NAME: u8 = 1;
const CLASS: u8 = 2;

/// How much of `r` a `Collector` that took the records before it may change on:
/// all of it, its facts (it only teaches a name), or nothing. `seen` holds what
/// the records of `r`'s run before it taught.
pub fn needed(r: &Record<'_>, seen: &mut Seen) -> Kept {
    // Every `first` is asked, whatever else the record is: a record kept for one
    // reason teaches the others too, so it must count as their first.
    let learns = teaches(r, seen);
    let counted = r.level >= Some(Level::Error)
        || r.ids.actor_id.is_some() && defines_actor(r)
        || super::latency::observes(r)
        || super::latency::node_liveness(r).is_some()
        || super::detect(r).is_some();
    match (counted, learns) {
        (true, _) => Kept::Whole,
        (false, true) => Kept::Facts,
        (false, false) => Kept::No,
    }
}

/// Whether `r` is the first of its run to teach what `Collector::learn` takes from it.
fn teaches(r: &Record<'_>, seen: &mut Seen) -> bool {
    let mut new = false;
    if let (Some(w), Some(_)) = (r.ids.worker_id, r.pid) {
        if names_pid(r) {
            new |= seen.first(PID, w);
        }
    }
    if let (Some(t), Some(_)) = (r.ids.task_id, r.task_name) {
        new |= seen.first(TASK_NAME, t);
    }
    if let Some(a) = r.ids.actor_id {
        if defines_actor(r) {
            return true;
        }
        if r.component() == "worker" && worker_class(r).is_some() {
            new |= seen.first(CLASS, a);
        }
    }
    new
}

/// A record whose worker id and pid a `Collector` takes as that worker's pid.
pub(super) fn names_pid(r: &Record<'_>) -> bool {
    // A Ray event names a worker's pid first hand (its definition, an actor's ALIVE).
    matches!(r.component(), "worker" | "core_worker" | "ray_event")
}

/// An exported actor definition: it names the class and the name (and overrides
/// what worker files suggested).
pub(super) fn defines_actor(r: &Record<'_>) -> bool {
    let comp = r.component();
    comp == "export_event" && r.message.starts_with("EXPORT_ACTOR")
        || comp == "ray_event" && r.message.starts_with("ACTOR_DEFINITION_EVENT")
}

/// The class a worker file's record suggests: an actor task's name starts with it
/// (`Phoenix.hello`); without one, the `:actor_name:` marker names it.
pub(super) fn worker_class<'a>(r: &Record<'a>) -> Option<&'a str> {
    r.task_name.and_then(|t| t.split_once('.')).map(|(c, _)| c).or(r.actor_name)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use raylog_parsers::record::Fields;
    use raylog_parsers::{Options, Timestamp};

    use super::*;
    use crate::discover::discover;
    use crate::health::Collector;
    use crate::scan::{scan, ScanConfig};

    /// The JSON report of `dir` from every record (`run` `None`), or from those
    /// [`needed`] keeps of runs of `run` records; and how many records it took.
    fn report(dir: &Path, run: Option<usize>) -> (String, usize) {
        let cfg = ScanConfig {
            opts: Options::default(),
            stdin_name: None,
            fixed_mtime: Some(Timestamp::from_secs(1_767_225_600)),
            threads: 1,
        };
        let mut c = Collector::default();
        let (mut seen, mut at, mut took) = (Seen::default(), 0, 0);
        scan(&discover(&[dir.to_path_buf()]), &cfg, &mut |_| {}, &mut |r| {
            if let Some(n) = run {
                if at % n == 0 {
                    seen = Seen::default();
                }
                at += 1;
                match needed(r, &mut seen) {
                    Kept::No => return,
                    // As a batch replays it.
                    Kept::Facts => {
                        took += 1;
                        let none = Fields::default();
                        return c.learn(&Record { message: "", fields: &none, ..*r });
                    }
                    Kept::Whole => {}
                }
            }
            took += 1;
            c.observe(r);
        });
        (serde_json::to_string_pretty(&c.finish()).expect("a report"), took)
    }

    #[test]
    fn the_records_kept_give_the_report_of_all() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
        let mut dirs: Vec<PathBuf> =
            std::fs::read_dir(&root).expect("fixtures").flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
        dirs.sort();
        assert!(dirs.len() >= 4, "{dirs:?}");
        let (mut all, mut kept) = (0, 0);
        for d in &dirs {
            let (want, n) = report(d, None);
            all += n;
            for run in [1, 2, 3, 7, 64, 1000, usize::MAX] {
                let (got, k) = report(d, Some(run));
                assert_eq!(got, want, "{} sifted in runs of {run}", d.display());
                if run == usize::MAX {
                    kept += k;
                }
            }
        }
        // The sieve leaves most records behind, or it buys nothing.
        assert!(kept * 4 < all, "{kept} of {all} records kept");
    }
}
