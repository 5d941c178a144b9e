//! The `raylog` binary: argument parsing and exit codes; everything else is in the
//! library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = raylog::cli::Cli::parse();
    match raylog::cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("raylog: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
