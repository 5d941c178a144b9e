//! The `raylog` binary: everything, argument parsing and exit codes included, is in
//! the library ([`raylog::cli::main`]), which the Python module's `raylog` command
//! runs too.

use std::process::ExitCode;

fn main() -> ExitCode {
    ExitCode::from(raylog::cli::main(std::env::args_os()))
}
