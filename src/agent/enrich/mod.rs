//! Enrich: the stage between parse and batch, where a record gains the ids its own
//! line does not carry.
//!
//! Most of it happens as each line is parsed, in the parsers crate:
//! `raylog_parsers::correlate` learns which worker hosts which actor and which job,
//! and [`raylog_parsers::Correlator::tag`] gives every record the ids its file, its
//! marker lines and what was learned imply. The CLI's two-pass scan needs nothing
//! more: pass one ([`crate::prescan`]) learns before anything is parsed.
//!
//! The agent reads as files grow, so a record can arrive before what names its ids.
//! This module is the agent's half:
//! - [`route`]: the stage as one value ([`Enrich`]: batch, hold, Ray counters),
//!   which the source owns and hands each parsed record; the record goes into the
//!   batch with its document id, or into the hold when an id it must carry is not
//!   known yet;
//! - [`hold`]: an actor worker's output waits (bounded in count and time) for the
//!   line naming its actor, a new session's first records for raylet to name the
//!   node; late correlation never turns into loss: on timeout they go out as they are;
//! - [`node`]: the node id a raylet log announces, read from its head.

pub mod hold;
pub mod node;
pub mod route;
pub mod times;

pub use hold::Hold;
pub use route::{Enrich, FileRoute, Router};

#[cfg(test)]
mod tests;
