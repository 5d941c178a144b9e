//! The instruction-count guard (`bench/instructions.py`): `raylog parse` on a fixed
//! 16 MiB tree, run under callgrind, stays within 5 % of the instructions per MiB
//! recorded in `bench/instructions.json`. It counts instructions, not seconds: the
//! same binary gives the same figure on a busy machine, so the guard cannot flake.
//! The figure is the release profile's, so other profiles skip it. It needs valgrind
//! and `RAYLOG_BENCH_DIR` (for raycorpus.py), so it is `#[ignore]`d; run with
//! `--include-ignored` and without them, it fails saying what is missing.

use std::process::Command;

#[test]
#[ignore = "needs valgrind, RAYLOG_BENCH_DIR (raycorpus.py), --release: apt-get install valgrind; ../shared/bench"]
fn parse_instructions_per_mib_stay_within_5_percent_of_the_recorded_figure() {
    const TEST: &str = "parse_instructions_per_mib_stay_within_5_percent_of_the_recorded_figure";
    if cfg!(debug_assertions) {
        eprintln!("SKIPPED {TEST}: bench/instructions.json holds the release profile's figure");
        return;
    }
    let bench = crate::otlp::bench_dir(TEST);
    assert!(
        Command::new("valgrind").arg("--version").output().is_ok(),
        "{TEST} needs valgrind: apt-get install valgrind (.ci/run installs it)"
    );
    let root = env!("CARGO_MANIFEST_DIR");
    let out = Command::new("python3")
        .arg(format!("{root}/bench/instructions.py"))
        .args(["--raylog", env!("CARGO_BIN_EXE_raylog")])
        .env("RAYLOG_BENCH_DIR", bench)
        .output()
        .expect("python3");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("per MiB"), "{text}");
}
