//! raylog: parse, trace and ship Ray's log files as records tagged with Ray ids.
//!
//! The pipeline is visible in the tree: [`discover`] finds log files under the paths
//! given, [`scan`] (plain files, `.gz` and tarballs) reads them through the
//! `raylog-parsers` crate, which classifies, parses, joins and correlates, and the
//! [`cli`] filters ([`filter`]) and prints ([`pretty`], NDJSON) the records;
//! [`embed`] runs the same for the Python module (`python/`).

pub mod agent;
#[cfg(target_os = "linux")]
pub mod bigalloc;
pub mod cli;
pub mod discover;
pub mod embed;
pub mod filter;
pub mod health;
pub mod lines;
pub mod prescan;
pub mod pretty;
pub mod progress;
pub mod scan;
/// In-process Loki and Elasticsearch servers for tests: only with the `testkit`
/// feature (which the integration tests enable through a dev-dependency on this
/// crate), so the binary and the library users get never carry them.
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod trace;

/// Every program built on this library (the binary, its tests) maps its big blocks
/// on their own (see [`bigalloc`]).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOC: bigalloc::BigAlloc = bigalloc::BigAlloc;
