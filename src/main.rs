//! The `raylog` binary: argument parsing and exit codes; everything else is in the
//! library.

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    fixed_mmap_threshold();
    let cli = raylog::cli::Cli::parse();
    match raylog::cli::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            eprintln!("raylog: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Blocks of 1 MiB and more come from their own mappings, given back whole when
/// freed (a shrinking one shrinks in place). glibc would raise that threshold to
/// the size of each such block freed, up to 32 MiB: after a restart's million
/// checkpoints are loaded and let go, the file table's slab, name arena and indices
/// (tens of MiB, grown step by step) then landed in the heap, whose holes stay
/// resident, 16 MiB a million files.
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets a tunable of the allocator; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20);
    }
}
