//! `type = "otlp"`: OpenTelemetry logs over OTLP/HTTP (`/v1/logs`), for a Collector,
//! a vendor's gateway, Loki 3's `/otlp` or Elasticsearch's `/_otlp`.
//!
//! - [`config`]: keys and validation (encoding, compression, headers, resource).
//! - [`attrs`]: the mapping of a record onto a `LogRecord`: severity, attributes.
//! - [`encode`]: a batch → `ExportLogsServiceRequest`, protobuf or OTLP/JSON (+gzip).
//! - [`response`]: reading partial successes and error statuses.
//! - [`service`]: the HTTP client: what the receiver did with each record.
//! - [`traces`]: with `traces = true`, a batch's task spans → `ExportTraceServiceRequest`.

pub mod attrs;
pub mod config;
pub mod encode;
pub mod response;
pub mod service;
pub mod traces;

#[cfg(test)]
mod tests;
