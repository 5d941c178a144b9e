//! Health: what went wrong in a Ray cluster, read from Ray's own logs.
//!
//! [`detect()`] recognises failure events in single records (worker deaths with their
//! exit type, memory-monitor kills, actor failures and restarts, node removals, GCS
//! health-check failures, failed tasks, failed jobs, spilling): [`log_line`] in Ray's
//! log lines, [`ray_event`] in Ray's exported events, both as the types of
//! [`mod@detect`], which depends on neither. The agent calls it per record to count
//! them, `raylog health` feeds every record of an archive to a [`report::Collector`]
//! which merges, groups and counts them, and [`text`] or serde (JSON) print the
//! [`report::Report`]. [`template`] turns ERROR messages into groupable templates,
//! which [`errors`] counts for `top_errors`. [`latency`] reads GCS's and the
//! raylets' `Event stats:` blocks into the report's `latency` section. [`sieve`]
//! says which records can change a collector, so parse workers hand over only those
//! (or only the names they teach).

pub mod detect;
pub mod errors;
pub mod latency;
pub mod log_line;
pub mod ray_event;
pub mod report;
pub mod sieve;
pub mod template;
pub mod text;

pub use detect::Event;
pub use report::{Collector, Report};

use raylog_parsers::Record;

/// What record `r` says went wrong, if anything: asked of the source of detections
/// that reads its kind of record.
pub fn detect<'a>(r: &Record<'a>) -> Option<Event<'a>> {
    match r.file.component.as_str() {
        // An empty message says nothing, whatever the source.
        "ray_event" if !r.message.is_empty() => ray_event::detect(r),
        _ => log_line::detect(r),
    }
}
