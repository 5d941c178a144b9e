//! The agent (`raylog ship`): discover → tail → parse → enrich → batch → sink.
//!
//! - [`config`]: the TOML file, validated once.
//! - [`source`]: finds sessions and files, tails them across rotation, parses them
//!   with the `raylog-parsers` crate, holds actor-worker output until its actor is
//!   known, and cuts [`batch::Batch`]es.
//! - [`sinks`]: Loki, Elasticsearch, stdout, file; retries and dead letters.
//! - [`checkpoint`]: per-file offsets, advanced only when every sink acknowledged
//!   everything before them, written atomically.
//! - [`api`] and [`metrics`]: `/metrics`, `/healthz`, `/readyz`.

pub mod api;
pub mod batch;
pub mod checkpoint;
pub mod config;
pub mod metrics;
pub mod pipeline;
pub mod run;
pub mod sinks;
pub mod source;
