//! The parsing core of raylog: Ray log bytes in, records tagged with Ray ids out.
//!
//! This crate is synchronous and has no async runtime, so the agent (`raylog ship`)
//! and the CLI (`raylog parse`, `raylog trace`) share it unchanged. The pipeline for
//! one file:
//!
//! 1. [`classify`]: the path says what the file is (component, worker id, pid, job,
//!    rotation) and which format family its lines follow.
//! 2. [`parser::FileParser`]: splits lines, recognises markers, joins multi-line
//!    records ([`assemble`]) and decodes each record with the parser for its shape
//!    ([`formats`]), finding ids in structured pairs and prose ([`ids_in_text`]).
//! 3. [`correlate`]: fills in what the file itself cannot say, chiefly which actor a
//!    worker hosts, so an actor's `print`s carry its `actor_id`.
//! 4. [`ndjson`]: writes the [`record::Record`] as one JSON line.
//!
//! The Ray log formats this relies on (file names, line shapes, times, id layouts,
//! rotation) are described in the crate's `FORMATS.md`; each module's docs say which
//! of them it handles and how.

pub mod assemble;
pub mod classify;
pub mod correlate;
pub mod event_stats;
pub mod formats;
pub mod id;
pub mod ids_in_text;
pub mod json;
mod json_str;
mod keyset;
pub mod ndjson;
pub mod parser;
pub mod record;
pub mod task_logs;
pub mod time;
mod workers;

pub use classify::{classify, FileKind, FileMeta};
pub use correlate::Correlator;
pub use id::Id;
pub use parser::{untimed_first, FileParser, FileStats, Options};
pub use record::{Level, Record};
pub use time::{Timestamp, Zone};
