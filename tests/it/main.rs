//! The one integration-test binary: golden files, reconciliation against the raw
//! fixture files, the CLI's contract, and property tests on arbitrary bytes.

mod cli;
mod golden;
mod live;
mod live_check;
mod props;
mod reconcile;
mod ship;
mod trace;
mod util;
