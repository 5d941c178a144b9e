//! `type = "elasticsearch"`: the Elasticsearch `_bulk` API.
//!
//! - [`config`]: keys and validation (data stream or index, auth, TLS).
//! - [`encode`]: a batch → `_bulk` NDJSON of `create` actions (+gzip).
//! - [`service`]: the HTTP client: per-item results, retry of 429/5xx items.

pub mod config;
pub mod encode;
pub mod runs;
pub mod service;

#[cfg(test)]
mod tests;
