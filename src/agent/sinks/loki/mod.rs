//! `type = "loki"`: the Loki push API (`/loki/api/v1/push`).
//!
//! - [`config`]: keys and validation (labels, structured metadata, auth, TLS).
//! - [`encode`]: a batch → streams grouped by label set → protobuf+snappy or JSON(+gzip).
//! - [`service`]: the HTTP client: headers, auth, and what Loki did with each entry.
//! - [`refusal`]: reading Loki's partial refusals; dead-letter reasons.
//! - [`pace`]: staying under Loki's ingestion rate limits.

pub mod config;
pub mod encode;
mod fields;
pub mod pace;
pub mod refusal;
pub mod service;

#[cfg(test)]
mod tests;
