//! Records the git commit the binary is built from, for `raylog --version`
//! (`RAYLOG_COMMIT`). Where there is no git checkout (a source archive, a crate
//! from a registry, a container build without `.git`) it says so instead of
//! guessing; `RAYLOG_BUILD_COMMIT` in the build's environment names it then.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=RAYLOG_BUILD_COMMIT");
    let from_env = std::env::var("RAYLOG_BUILD_COMMIT").ok().filter(|s| !s.is_empty());
    let commit = from_env.or_else(|| {
        // Only this crate's own checkout: a source archive unpacked inside some other
        // repository (a home dir under git) must not take that repository's commit.
        let top = git(&["rev-parse", "--show-toplevel"])?;
        let here = std::env::var("CARGO_MANIFEST_DIR").ok()?;
        if Path::new(&top).canonicalize().ok()? != Path::new(&here).canonicalize().ok()? {
            return None;
        }
        let commit = git(&["rev-parse", "--short=10", "HEAD"])?;
        // Rebuild when HEAD moves: HEAD itself, the branch it names, packed refs.
        if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
            println!("cargo:rerun-if-changed={}", Path::new(&dir).join("HEAD").display());
        }
        if let (Some(common), Some(branch)) =
            (git(&["rev-parse", "--git-common-dir"]), git(&["symbolic-ref", "-q", "HEAD"]))
        {
            println!("cargo:rerun-if-changed={}", Path::new(&common).join(branch).display());
            println!("cargo:rerun-if-changed={}", Path::new(&common).join("packed-refs").display());
        }
        Some(commit)
    });
    let version = env!("CARGO_PKG_VERSION");
    let full = match commit {
        Some(c) => format!("{version} (commit {c})"),
        None => format!("{version} (commit unknown: built outside a git checkout)"),
    };
    println!("cargo:rustc-env=RAYLOG_VERSION={full}");
}
