//! raylog: parse, trace and ship Ray's log files as records tagged with Ray ids.
//!
//! The pipeline is visible in the tree: [`discover`] finds log files under the paths
//! given, [`scan`] (plain files, `.gz` and tarballs) reads them through the
//! `raylog-parsers` crate, which classifies, parses, joins and correlates, and the
//! [`cli`] filters ([`filter`]) and prints ([`pretty`], NDJSON) the records.

pub mod agent;
pub mod cli;
pub mod discover;
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
