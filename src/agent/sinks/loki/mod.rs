//! `type = "loki"`: the Loki push API (`/loki/api/v1/push`).
//!
//! - [`config`]: keys and validation (labels, structured metadata, auth, TLS).
//! - [`encode`]: a batch → streams grouped by label set → protobuf+snappy or JSON(+gzip).
//! - [`service`]: the HTTP client: headers, auth, status handling.

pub mod config;
pub mod encode;
pub mod service;

#[cfg(test)]
mod tests;
