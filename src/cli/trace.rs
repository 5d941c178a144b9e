//! `raylog trace`: the story of one actor, task, job or worker across components.

use anyhow::Result;
use clap::Args;

use super::InputArgs;

#[derive(Args, Debug)]
#[command(about = "Show the life of one actor, task, job or worker across every component, in time order")]
pub struct TraceArgs {
    #[command(flatten)]
    pub input: InputArgs,
}

/// Runs `raylog trace`.
pub fn run(_a: TraceArgs) -> Result<u8> {
    anyhow::bail!("raylog trace is not implemented yet")
}
