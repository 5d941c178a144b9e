//! The one integration-test binary: golden files, reconciliation against the raw
//! fixture files, the CLI's contract, property tests on arbitrary bytes, and the
//! deployment examples and configuration reference checked against the code.

mod cli;
mod config_reference;
mod examples;
mod golden;
mod live;
mod live_check;
mod props;
mod reconcile;
mod ship;
mod trace;
mod util;
