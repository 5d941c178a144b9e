//! The task attempt byte ranges learned from Ray's task events, written ahead of the
//! batch that carries their event.
//!
//! A print is tagged with the attempt whose range holds it (see
//! `raylog_parsers::task_logs`). The range comes in an event, in the spool; once the
//! batch carrying the event is acknowledged, the spool segment goes, and a restart
//! reads only what was not checkpointed. A print read after the restart (one not
//! sent yet, or one sent again) would find no range and go out without its
//! `task_id`, or with another tag than the first time. So every range learned or
//! changed is appended here and fsynced before the batch goes to the sinks (with the
//! times journal, [`super::times`]), and a start gives them back to the correlator.
//!
//! `tasks.journal`, one line a range: `["session", "file", "task id hex", attempt,
//! start, end or null]`; a later line of the same (session, file, task, attempt)
//! completes an earlier one. A torn last line (a crash mid-write) is ignored. The
//! journal is rewritten whole from what the correlator keeps (itself bounded, see
//! `TaskRanges`) at start and when it passes [`ROLL_BYTES`], through a temporary
//! file renamed over it, so it stays small. Created at the first range: a cluster
//! without task events never has one.

use std::path::Path;

use raylog_parsers::task_logs::SavedRange;
use raylog_parsers::Id;

use super::lines::LineJournal;
use super::CheckpointError;

/// Past this size the journal is rewritten from what is kept.
const ROLL_BYTES: u64 = 8 << 20;

const NAME: &str = "tasks.journal";

/// The journal of task ranges, appended to by the reader before each batch is sent.
#[derive(Debug)]
pub struct TasksLog(LineJournal);

impl TasksLog {
    /// Opens the journal in `dir`, with the ranges it holds (compacted into a
    /// fresh journal first when there are any).
    pub fn open(dir: &Path) -> Result<(TasksLog, Vec<SavedRange>), CheckpointError> {
        let (mut journal, bytes) = LineJournal::open(dir.join(NAME), ROLL_BYTES)?;
        let Some(bytes) = bytes else { return Ok((TasksLog(journal), Vec::new())) };
        let found = read(&bytes);
        journal.rewrite(|w| w.write_all(&lines(&found)))?;
        Ok((TasksLog(journal), found))
    }

    /// Appends `changed` and fsyncs; rewrites the journal from `all` (what is kept
    /// now) instead when it grew past [`ROLL_BYTES`].
    pub fn append(
        &mut self,
        changed: &[SavedRange],
        all: impl FnOnce() -> Vec<SavedRange>,
    ) -> Result<(), CheckpointError> {
        self.0.append(&lines(changed), |w| w.write_all(&lines(&all())))
    }
}

fn lines(ranges: &[SavedRange]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(ranges.len() * 128);
    for r in ranges {
        line(&mut buf, r);
    }
    buf
}

/// One range as a journal line.
fn line(out: &mut Vec<u8>, r: &SavedRange) {
    let v = serde_json::json!([&*r.session, &*r.file, r.task_id.as_str(), r.attempt, r.start, r.end]);
    // A Value of strings and numbers always serializes.
    let _ = serde_json::to_writer(&mut *out, &v);
    out.push(b'\n');
}

/// The ranges of a journal's lines, skipping any that do not read (a torn last
/// line, or damage: the ranges are a help to tagging, never a reason not to start).
fn read(bytes: &[u8]) -> Vec<SavedRange> {
    let mut out = Vec::new();
    for l in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let Ok(serde_json::Value::Array(v)) = serde_json::from_slice::<serde_json::Value>(l) else { continue };
        let parsed = (|| {
            let task_id = Id::parse(v.get(2)?.as_str()?.as_bytes())?;
            Some(SavedRange {
                session: v.first()?.as_str()?.into(),
                file: v.get(1)?.as_str()?.into(),
                task_id,
                attempt: u32::try_from(v.get(3)?.as_u64()?).ok()?,
                start: v.get(4)?.as_u64()?,
                end: v.get(5).and_then(serde_json::Value::as_u64),
            })
        })();
        out.extend(parsed);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::path::PathBuf;

    fn tmpdir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("raylog-tasks-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn range(attempt: u32, start: u64, end: Option<u64>) -> SavedRange {
        SavedRange {
            session: "session_2026-12-01_19-45-51_773160_3103".into(),
            file: "worker-05bda0a4ef1f108c80eeef15850f054eca23ae47a8851b0f54432278-ffffffff-3272.out".into(),
            task_id: Id::parse(b"e0dc174c83599034ffffffffffffffffffffffff01000000").unwrap(),
            attempt,
            start,
            end,
        }
    }

    #[test]
    fn ranges_written_come_back_at_the_next_start_and_a_torn_line_is_ignored() {
        let dir = tmpdir("torn");
        let (mut log, found) = TasksLog::open(&dir).unwrap();
        assert!(found.is_empty());
        assert!(!dir.join(NAME).exists(), "no range, no journal");
        log.append(&[range(0, 10, None)], Vec::new).unwrap();
        log.append(&[range(0, 10, Some(40)), range(1, 40, None)], Vec::new).unwrap();
        drop(log);
        // A crash in the middle of a line.
        let mut f = OpenOptions::new().append(true).open(dir.join(NAME)).unwrap();
        f.write_all(b"[\"session_x\",\"worker-1.out\",\"e0dc").unwrap();
        let (_, found) = TasksLog::open(&dir).unwrap();
        assert_eq!(found, vec![range(0, 10, None), range(0, 10, Some(40)), range(1, 40, None)]);
        // The start compacted it: the torn line is gone.
        let text = std::fs::read_to_string(dir.join(NAME)).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
    }

    #[test]
    fn past_its_roll_size_the_journal_is_rewritten_from_what_is_kept() {
        let dir = tmpdir("roll");
        let (mut log, _) = TasksLog::open(&dir).unwrap();
        log.append(&[range(0, 10, None)], Vec::new).unwrap();
        log.0.pretend_len(ROLL_BYTES);
        log.append(&[range(0, 10, Some(20))], || vec![range(0, 10, Some(20))]).unwrap();
        log.append(&[range(1, 20, None)], Vec::new).unwrap();
        let (_, found) = TasksLog::open(&dir).unwrap();
        assert_eq!(found, vec![range(0, 10, Some(20)), range(1, 20, None)]);
    }
}
