//! The Python package (python/): its API against the command line on the fixtures,
//! and `raylog.ray.read_logs` on a local Ray 2.60 cluster, run by pytest in a venv
//! that holds the wheel (`RAYLOG_PYTHON`, printed by python/test-venv.sh after
//! python/build-wheel.sh; .ci/run does both).

use std::path::PathBuf;
use std::process::Command;

#[test]
#[ignore = "needs RAYLOG_PYTHON: RAYLOG_PYTHON=$(bash python/test-venv.sh) after bash python/build-wheel.sh"]
fn python_api_matches_the_command_line() {
    let Some(python) = std::env::var_os("RAYLOG_PYTHON") else {
        panic!(
            "RAYLOG_PYTHON is not set: bash python/build-wheel.sh && export RAYLOG_PYTHON=$(bash python/test-venv.sh)"
        );
    };
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(python)
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "python/tests"])
        .current_dir(&repo)
        .status()
        .expect("RAYLOG_PYTHON runs");
    assert!(status.success(), "pytest python/tests failed (its output is above)");
}
