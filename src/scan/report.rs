//! What a scan is told and what it reports: shared by the scan of plain files and
//! the scan of archives.

use std::io;

use raylog_parsers::{FileStats, Options, Timestamp};

/// How to scan.
#[derive(Clone, Debug, Default)]
pub struct ScanConfig {
    pub opts: Options,
    /// Classify stdin as if it were a file of this name (`raylet.out`...).
    pub stdin_name: Option<String>,
    /// Use this instead of file mtimes for records without a time (golden tests).
    pub fixed_mtime: Option<Timestamp>,
    /// Threads that parse; 0 or 1 reads on the calling thread (see [`super::parallel`]).
    pub threads: usize,
}

/// What happened, for the exit code and the closing summary.
#[derive(Debug, Default)]
pub struct ScanReport {
    /// `(path, reason)` for every input that could not be (fully) read.
    pub failures: Vec<(String, String)>,
    pub files: u64,
    pub totals: FileStats,
    /// One line per file with invalid UTF-8 or cut lines.
    pub warnings: Vec<String>,
}

impl ScanReport {
    pub(crate) fn add(&mut self, label: &str, s: &FileStats) {
        self.files += 1;
        self.totals.add(s);
        if s.invalid_utf8 > 0 {
            self.warnings.push(format!(
                "{label}: {} record(s) had invalid UTF-8; kept with U+FFFD replacement characters",
                s.invalid_utf8
            ));
        }
        if s.truncated_lines > 0 {
            self.warnings.push(format!(
                "{label}: {} line(s) longer than --max-line-bytes were cut (records flagged \"truncated\": true)",
                s.truncated_lines
            ));
        }
        if s.task_untagged > 0 {
            self.warnings.push(format!(
                "{label}: {} task print(s) fall in no task attempt's byte range of the events given, and have no task_id; give the whole event spool (state_dir/ray_events) to tag them",
                s.task_untagged
            ));
        }
    }
}

/// Phrases an I/O error for a user, naming truncated compressed input as such.
pub fn read_error(e: &io::Error, offset: u64) -> String {
    match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            format!("truncated compressed data after {offset} bytes; the records before that point were kept")
        }
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput => {
            format!("corrupt data after {offset} bytes ({e}); the records before that point were kept")
        }
        _ => format!("read failed after {offset} bytes: {e}"),
    }
}
