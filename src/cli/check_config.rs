//! `raylog check-config FILE`: validate a config and print the effective settings,
//! or every problem with the key it concerns (exit 2).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::agent::config;

#[derive(Args, Debug)]
#[command(about = "Validate a raylog.toml: print the effective config, or every error with its key")]
pub struct CheckConfigArgs {
    /// The config file to check.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

/// Runs `raylog check-config`.
pub fn run(a: CheckConfigArgs) -> Result<u8> {
    match config::load(&a.file) {
        Ok((raw, cfg)) => {
            print!("{}", config::effective_toml(&raw, &cfg));
            Ok(0)
        }
        Err(e) => {
            eprintln!("raylog: error: {e}");
            Ok(2)
        }
    }
}
