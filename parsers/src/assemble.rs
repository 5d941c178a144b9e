//! Multi-line joining: which physical lines belong to the record before them.
//!
//! Two rules, picked by [`FileKind::headered`]:
//! - Timestamped logs (C++, Python components, Serve): a line that does not start
//!   with a recognised header continues the previous record (state dumps,
//!   `*** StackTrace Information ***`, tracebacks after `logger.exception`).
//! - Stdout-like files (worker `.out`/`.err`, drivers, unknown files): every line is a
//!   record of its own, except Python tracebacks, which join the line before them
//!   (the logging line, `Exception in thread …:`, or a bare `logger.exception`
//!   message): `Traceback (most recent call last):`, its indented frames and 3.11+
//!   caret lines, the exception line, and chained sections ("During handling of the
//!   above exception…", "The above exception was the direct cause…").
//!
//! Worker files also carry marker lines (`:job_id:…`), which are context, not records
//! ([`Marker`]).

use crate::classify::FileKind;
use crate::formats::{starts_with_date, LineFormat};

const TRACEBACK: &[u8] = b"Traceback (most recent call last):";
/// Python's faulthandler (`Fatal Python error: …`, then `Stack (most recent call
/// first):` or `Current thread 0x… (most recent call first):` and indented frames).
const FAULT_STACK_SUFFIX: &[u8] = b"(most recent call first):";
const CHAINS: [&[u8]; 2] = [
    b"During handling of the above exception, another exception occurred:",
    b"The above exception was the direct cause of the following exception:",
];

/// Where the joiner is inside a Python traceback.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tb {
    #[default]
    Outside,
    /// After `Traceback (…)`: frames until the exception line.
    Frames,
    /// After the exception line: a blank line or a chain header may follow.
    AfterException,
    /// Indented frames after an exception line: a Ray task error
    /// (`ray.exceptions.RayTaskError(ValueError): ray::f() (pid=…)`) carries the
    /// remote traceback's frames, then the remote exception line.
    Remote,
    /// After a chain header: blank lines, then the next `Traceback`.
    Chain,
    /// Inside a native crash dump: absl's `*** SIGSEGV received … ***` with its
    /// `PC: @` and `    @ 0x…` frames, or faulthandler's stacks.
    Crash,
}

/// Decides, line by line, whether a line continues the current record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Joiner {
    tb: Tb,
}

impl Joiner {
    /// Forgets traceback state (at a marker or a new file).
    pub fn reset(&mut self) {
        self.tb = Tb::Outside;
    }

    /// Whether `line` would open a traceback outside any other (the point where it
    /// may or may not belong to the line before it).
    pub fn opens_traceback(&self, line: &[u8]) -> bool {
        self.tb == Tb::Outside && line == TRACEBACK
    }

    /// Returns true when `line` continues the open record. `has_record` says whether
    /// there is an open record to continue.
    #[inline]
    pub fn continues(&mut self, kind: FileKind, line: &[u8], has_record: bool) -> bool {
        if kind.headered() {
            return has_record && !LineFormat::is_header(kind, line);
        }
        let joined = self.step(line);
        joined && has_record
    }

    /// Advances the traceback state machine; true when the line is part of the
    /// traceback started by an earlier line.
    fn step(&mut self, line: &[u8]) -> bool {
        let indented = matches!(line.first(), Some(b' ' | b'\t'));
        match self.tb {
            Tb::Outside => {
                if line == TRACEBACK {
                    self.tb = Tb::Frames;
                    return true;
                }
                if line.ends_with(FAULT_STACK_SUFFIX) {
                    self.tb = Tb::Crash;
                    return true;
                }
                if is_crash_header(line) {
                    // Opens its own record; its frames follow.
                    self.tb = Tb::Crash;
                }
                false
            }
            Tb::Crash => {
                if indented || line.starts_with(b"PC: @") || line.ends_with(FAULT_STACK_SUFFIX) || line.is_empty() {
                    true
                } else {
                    self.tb = Tb::Outside;
                    self.step(line)
                }
            }
            Tb::Frames => {
                if indented || line == TRACEBACK {
                    true
                } else if line.is_empty() || starts_with_date(line) || line.first() == Some(&b'{') {
                    // A new log line: the traceback was cut short.
                    self.tb = Tb::Outside;
                    self.step(line)
                } else {
                    self.tb = Tb::AfterException;
                    true
                }
            }
            Tb::Remote if indented => true,
            Tb::Remote if is_exception_line(line) => {
                self.tb = Tb::AfterException;
                true
            }
            Tb::AfterException if indented => {
                self.tb = Tb::Remote;
                true
            }
            Tb::AfterException | Tb::Chain | Tb::Remote => {
                if line.is_empty() {
                    true
                } else if CHAINS.contains(&line) {
                    self.tb = Tb::Chain;
                    true
                } else if line == TRACEBACK {
                    self.tb = Tb::Frames;
                    true
                } else {
                    self.tb = Tb::Outside;
                    self.step(line)
                }
            }
        }
    }
}

/// Whether `line` reads like Python's exception line: a dotted name, optionally with
/// a parenthesised cause, then `:` or the end (`ValueError: bad`, `KeyError`,
/// `ray.exceptions.RayTaskError(ValueError): …`).
fn is_exception_line(line: &[u8]) -> bool {
    let name = line.iter().take_while(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.')).count();
    if name == 0 || !line[0].is_ascii_alphabetic() {
        return false;
    }
    let mut rest = &line[name..];
    if rest.first() == Some(&b'(') {
        match memchr::memchr(b')', rest) {
            Some(close) => rest = &rest[close + 1..],
            None => return false,
        }
    }
    rest.is_empty() || rest[0] == b':'
}

/// `*** SIGSEGV received at time=… ***` (absl) or `Fatal Python error: …` (faulthandler).
fn is_crash_header(line: &[u8]) -> bool {
    (line.starts_with(b"*** SIG") && line.ends_with(b"***")) || line.starts_with(b"Fatal Python error: ")
}

/// A marker line in a worker's stdout/stderr.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker<'a> {
    JobId(&'a [u8]),
    ActorName(&'a [u8]),
    TaskName(&'a [u8]),
    /// `<task_id>-<attempt>`
    TaskAttemptStart(&'a [u8], Option<u32>),
    TaskAttemptEnd(&'a [u8]),
}

impl<'a> Marker<'a> {
    /// Recognises a marker line; `None` for any other line.
    #[inline]
    pub fn parse(line: &'a [u8]) -> Option<Marker<'a>> {
        if line.first() != Some(&b':') {
            return None;
        }
        let rest = &line[1..];
        let colon = memchr::memchr(b':', rest)?;
        let (name, value) = (&rest[..colon], &rest[colon + 1..]);
        Some(match name {
            b"job_id" => Marker::JobId(value),
            b"actor_name" => Marker::ActorName(value),
            b"task_name" => Marker::TaskName(value),
            b"task_attempt_start" => {
                let (tid, attempt) = split_attempt(value);
                Marker::TaskAttemptStart(tid, attempt)
            }
            b"task_attempt_end" => Marker::TaskAttemptEnd(split_attempt(value).0),
            _ => return None,
        })
    }
}

fn split_attempt(v: &[u8]) -> (&[u8], Option<u32>) {
    match memchr::memrchr(b'-', v) {
        Some(p) => (&v[..p], std::str::from_utf8(&v[p + 1..]).ok().and_then(|s| s.parse().ok())),
        None => (v, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Groups lines into records with the joiner, as the parser does.
    fn group(kind: FileKind, text: &str) -> Vec<String> {
        let mut j = Joiner::default();
        let mut out: Vec<String> = vec![];
        for line in text.split('\n') {
            if j.continues(kind, line.as_bytes(), !out.is_empty()) {
                let last = out.last_mut().unwrap();
                last.push('\n');
                last.push_str(line);
            } else {
                out.push(line.to_string());
            }
        }
        out
    }

    #[test]
    fn chained_traceback_with_carets_is_one_record() {
        let text = "lookup failed\nTraceback (most recent call last):\n  File \"w.py\", line 3, in f\n    x = d[\"a\"][\"b\"]\n        ~~~~~~^^^^^\nKeyError: 'b'\n\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\n  File \"w.py\", line 5, in f\n    1/0\n    ~^~\nZeroDivisionError: division by zero\nnext print";
        let recs = group(FileKind::Worker, text);
        assert_eq!(recs.len(), 2, "{recs:#?}");
        assert!(recs[0].starts_with("lookup failed\nTraceback"));
        assert!(recs[0].ends_with("ZeroDivisionError: division by zero"));
        assert_eq!(recs[1], "next print");
    }

    #[test]
    fn native_crash_dumps_are_one_record() {
        let text = "about to crash\n*** SIGSEGV received at time=1796036059 on cpu 0 ***\nPC: @     0x7fb17705a267  (unknown)  kill\n    @     0x7fb17705a050  (unknown)  (unknown)\nFatal Python error: Segmentation fault\n\nStack (most recent call first):\n  File \"w.py\", line 65 in segv\n  File \"w.py\", line 9 in main\nafter";
        let recs = group(FileKind::Worker, text);
        assert_eq!(recs.len(), 4, "{recs:#?}");
        assert_eq!(recs[0], "about to crash");
        assert!(recs[1].starts_with("*** SIGSEGV") && recs[1].ends_with("(unknown)  (unknown)"));
        assert!(recs[2].starts_with("Fatal Python error") && recs[2].ends_with("line 9 in main"));
        assert_eq!(recs[3], "after");
    }

    #[test]
    fn ray_task_error_with_its_remote_traceback_is_one_record() {
        let text = concat!(
            "Traceback (most recent call last):\n",
            "  File \"main.py\", line 9, in <module>\n",
            "    ray.get(f.remote())\n",
            "ray.exceptions.RayTaskError(ValueError): ray::f() (pid=7, ip=10.0.0.1)\n",
            "  File \"main.py\", line 5, in f\n",
            "    raise ValueError(\"bad\")\n",
            "ValueError: bad\n",
            "next print"
        );
        let g = group(FileKind::JobDriver, text);
        assert_eq!(g.len(), 2, "{g:#?}");
        assert!(g[0].ends_with("ValueError: bad"), "{g:#?}");
        assert_eq!(g[1], "next print");
    }

    #[test]
    fn exception_lines() {
        for yes in ["ValueError: bad", "KeyError", "ray.exceptions.RayTaskError(ValueError): ray::f()", "a.B:"] {
            assert!(is_exception_line(yes.as_bytes()), "{yes}");
        }
        for no in ["next print", "(x): y", "2026-11-30 10:00:00 INFO", "Value Error: x", ""] {
            assert!(!is_exception_line(no.as_bytes()), "{no}");
        }
    }

    #[test]
    fn prints_are_separate_records() {
        let recs = group(FileKind::Worker, "a\n\nb\n  indented print");
        assert_eq!(recs, vec!["a", "", "b", "  indented print"]);
    }

    #[test]
    fn cpp_continuations() {
        let text = "[2026-11-30 09:05:33,150 I 1 1] (raylet) x.cc:1: dump\nEvent stats:\n\tA - 1 total\n[2026-11-30 09:05:33,151 I 1 1] (raylet) x.cc:2: next";
        assert_eq!(group(FileKind::Cpp, text).len(), 2);
    }

    #[test]
    fn markers() {
        assert_eq!(Marker::parse(b":job_id:01000000"), Some(Marker::JobId(b"01000000")));
        assert_eq!(
            Marker::parse(b":task_attempt_start:16310a0f0a45af5cffffffffffffffffffffffff01000000-2"),
            Some(Marker::TaskAttemptStart(b"16310a0f0a45af5cffffffffffffffffffffffff01000000", Some(2)))
        );
        assert_eq!(Marker::parse(b":unknown:x"), None);
        assert_eq!(Marker::parse(b"job_id:1"), None);
    }
}
