//! Helpers shared by the integration tests.

use std::path::{Path, PathBuf};

use raylog::discover::discover;
use raylog::scan::{scan, ScanConfig, ScanReport};
use raylog_parsers::ndjson::write_record;
use raylog_parsers::Timestamp;

/// The repo's `fixtures/` folder.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures")
}

/// Every fixture dir (one recorded Ray session each).
pub fn fixture_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> =
        std::fs::read_dir(fixtures()).unwrap().flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect();
    v.sort();
    assert!(v.len() >= 4, "fixtures missing: {v:?}");
    v
}

/// The mtime used for records without any time, so goldens do not depend on checkout time.
pub fn fixed_mtime() -> Timestamp {
    Timestamp::from_secs(1_767_225_600) // 2026-01-01T00:00:00Z
}

/// Parses `paths` as `raylog parse` would and returns the NDJSON lines.
pub fn parse_ndjson(paths: &[PathBuf]) -> (Vec<String>, ScanReport) {
    let disc = discover(paths);
    let cfg = ScanConfig { fixed_mtime: Some(fixed_mtime()), ..ScanConfig::default() };
    let mut lines = vec![];
    let mut buf = vec![];
    let report = scan(&disc, &cfg, &mut |_| {}, &mut |r| {
        buf.clear();
        write_record(&mut buf, r);
        lines.push(String::from_utf8(buf.clone()).unwrap().trim_end().to_string());
    });
    (lines, report)
}

/// The logs dir (`session_*/logs`) inside a fixture dir.
pub fn logs_dir(fixture: &Path) -> PathBuf {
    std::fs::read_dir(fixture)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("session_"))
        .expect("session dir")
        .join("logs")
}
