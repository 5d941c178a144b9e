//! A finished span, as the OTLP sink sends it, and the ids every node derives alone.
//!
//! The ids are FNV-1a hashes ([`crate::agent::fnv`]) of what names the thing, so the
//! agent of each node, the same agent after a restart, and a log record carrying a
//! task attempt all compute the same id without talking to each other:
//! - trace id: 128-bit FNV-1a of `raylog/trace/<job id hex>` (one trace per job);
//! - span id: the low 64 bits of the 128-bit FNV-1a of
//!   `raylog/span/<task id hex>/<attempt>/<kind>`, `kind` being `schedule` or `run`.
//!
//! These functions must never change: ids sent before an upgrade must still join.

use serde::{Deserialize, Serialize};

use crate::agent::fnv::{hash128, OFFSET_128};

/// Which part of an attempt a span covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// The owner's node: pending states up to `SUBMITTED_TO_WORKER`.
    Schedule,
    /// The executing node: `RUNNING` to `FINISHED` or `FAILED`.
    Run,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Schedule => "schedule",
            Kind::Run => "run",
        }
    }
}

/// The trace id of job `job` (hex).
pub fn trace_id(job: &str) -> [u8; 16] {
    let h = hash128(hash128(OFFSET_128, b"raylog/trace/"), job.as_bytes());
    nonzero16(h.to_be_bytes())
}

/// The span id of `kind` of attempt `attempt` of task `task` (hex).
pub fn span_id(task: &str, attempt: u32, kind: Kind) -> [u8; 8] {
    let mut num = itoa::Buffer::new();
    let mut h = hash128(OFFSET_128, b"raylog/span/");
    for part in [task.as_bytes(), b"/", num.format(attempt).as_bytes(), b"/", kind.as_str().as_bytes()] {
        h = hash128(h, part);
    }
    let b = (h as u64).to_be_bytes();
    if b == [0; 8] {
        [0, 0, 0, 0, 0, 0, 0, 1]
    } else {
        b
    }
}

/// The job of a task id (hex): Ray's task id ends with its job's 4 bytes.
pub fn job_of_task(task: &str) -> Option<&str> {
    (task.len() >= 8).then(|| &task[task.len() - 8..])
}

/// The id of job `job`'s driver task: 20 bytes of `ff` and the job id, as Ray makes it
/// (`TaskID::ForDriverTask`); its tasks name it as their parent.
pub fn driver_task(job: &str) -> String {
    let mut s = "f".repeat(40);
    s.push_str(job);
    s
}

/// The trace id and `run` span id a record printed by attempt `attempt` of task
/// `task` (hex) joins: its job's trace (the job is the task id's last 4 bytes) and the
/// attempt's `run` span.
pub fn record_ids(task: &str, attempt: u32) -> ([u8; 16], [u8; 8]) {
    (trace_id(job_of_task(task).unwrap_or("")), span_id(task, attempt, Kind::Run))
}

/// Lowercase hex of `bytes` into `out` (twice as long).
pub fn hex_into<'a>(bytes: &[u8], out: &'a mut [u8]) -> &'a str {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (i, b) in bytes.iter().enumerate() {
        out[2 * i] = DIGITS[(b >> 4) as usize];
        out[2 * i + 1] = DIGITS[(b & 15) as usize];
    }
    std::str::from_utf8(&out[..2 * bytes.len()]).unwrap_or("")
}

/// OTLP calls an all-zero trace id invalid.
fn nonzero16(b: [u8; 16]) -> [u8; 16] {
    if b == [0; 16] {
        let mut b = b;
        b[15] = 1;
        b
    } else {
        b
    }
}

/// A span attribute value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AttrValue {
    Int(i64),
    Str(String),
}

/// One finished span of a task attempt (or of a job's driver).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskSpan {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub parent: Option<[u8; 8]>,
    pub name: String,
    pub kind: Kind,
    pub start_ns: i64,
    pub end_ns: i64,
    /// Status ERROR with this message (`rayErrorInfo`'s type and message); else UNSET.
    pub error: Option<String>,
    pub attrs: Vec<(String, AttrValue)>,
    /// The state transitions, as span events: name and time.
    pub events: Vec<(String, i64)>,
    /// Linked spans (a retry's previous attempt), in the same trace.
    pub links: Vec<[u8; 8]>,
}

impl TaskSpan {
    /// The string attribute `key`, if set.
    pub fn attr(&self, key: &str) -> Option<&AttrValue> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// Lowercase hex of `bytes` (ids as Loki metadata and in tests).
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_and_apart() {
        // Pinned: a change here breaks the join with spans and logs sent before it.
        assert_eq!(hex(&trace_id("01000000")), hex(&trace_id("01000000")));
        assert_ne!(trace_id("01000000"), trace_id("02000000"));
        let t = "c8ef45ccd0112571ffffffffffffffffffffffff01000000";
        assert_ne!(span_id(t, 0, Kind::Run), span_id(t, 0, Kind::Schedule));
        assert_ne!(span_id(t, 0, Kind::Run), span_id(t, 1, Kind::Run));
        assert_eq!(job_of_task(t), Some("01000000"));
        assert_eq!(driver_task("01000000"), "ffffffffffffffffffffffffffffffffffffffff01000000");
        // Computed once by hand from the definition (FNV-1a 128 over the bytes).
        let want = hash128(OFFSET_128, b"raylog/trace/01000000").to_be_bytes();
        assert_eq!(trace_id("01000000"), want);
        let want = (hash128(OFFSET_128, format!("raylog/span/{t}/0/run").as_bytes()) as u64).to_be_bytes();
        assert_eq!(span_id(t, 0, Kind::Run), want);
    }
}
