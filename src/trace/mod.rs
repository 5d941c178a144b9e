//! `raylog trace`: the story of one actor, task, job or worker, from every file of
//! every node given, in time order.
//!
//! The steps mirror `raylog parse`, with a buffer in the middle because a story is
//! told sorted and summarised: [`select`] decides which records belong to the
//! target (learning which workers hosted an actor or ran a task), [`collect`] scans
//! the inputs once or twice and keeps owned copies ([`entry`]) of the chosen records
//! plus `--context` lines, [`summary`] (with [`life`], [`task`] and [`facts`]) reads
//! the lifecycle out of them, and [`text`] / [`view`] print it.

pub mod collect;
pub mod entry;
pub mod facts;
pub mod json;
pub mod life;
pub mod select;
pub mod summary;
pub mod task;
pub mod text;
pub mod view;

pub use collect::{collect, Collected};
pub use select::{Kind, Target};
pub use summary::{summarize, Summary};
