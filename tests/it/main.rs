//! The one integration-test binary: golden files, reconciliation against the raw
//! fixture files, the CLI's contract, property tests on arbitrary bytes, the agent
//! against changing files and against a real Loki, and the deployment examples and
//! configuration reference checked against the code.

mod alerts;
mod bucket;
mod bucket_live;
mod cli;
mod config_reference;
mod events;
mod examples;
mod golden;
mod health;
mod import_loops;
mod instructions;
mod live;
mod live_check;
mod live_events;
mod live_kill;
mod live_traces;
mod loki_real;
mod manyfiles;
mod otlp;
mod props;
mod python;
mod ray_metrics;
mod reconcile;
mod scale;
mod ship;
mod ship_loki;
mod shutdown;
mod threads;
mod trace;
mod tree;
mod util;
