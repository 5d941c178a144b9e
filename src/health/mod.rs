//! Health: what went wrong in a Ray cluster, read from Ray's own logs.
//!
//! [`detect`] recognises failure events in single records (worker deaths with their
//! exit type, memory-monitor kills, actor failures and restarts, node removals, GCS
//! health-check failures, failed tasks, failed jobs, spilling), and [`ray_event`]
//! the same in Ray's exported events; the agent calls it
//! per record to count them, `raylog health` feeds every record of an archive to a
//! [`report::Collector`] which merges, groups and counts them, and [`text`] or
//! serde (JSON) print the [`report::Report`]. [`template`] turns ERROR messages into
//! groupable templates for `top_errors`. [`latency`] reads GCS's and the raylets'
//! `Event stats:` blocks into the report's `latency` section.

pub mod detect;
pub mod latency;
pub mod ray_event;
pub mod report;
pub mod template;
pub mod text;

pub use detect::{detect, Event};
pub use report::{Collector, Report};
