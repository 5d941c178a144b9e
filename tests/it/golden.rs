//! Golden files: every fixture dir's records must equal its `expected.ndjson`.
//!
//! Regenerate after an intended change with `RAYLOG_BLESS=1 cargo test golden`, then
//! review the diff like code: it is the parser's behaviour on real Ray logs.

use crate::util::{fixture_dirs, parse_ndjson};

#[test]
fn every_fixture_matches_its_golden_file() {
    let bless = std::env::var_os("RAYLOG_BLESS").is_some();
    let mut failures = vec![];
    for dir in fixture_dirs() {
        let (lines, report) = parse_ndjson(std::slice::from_ref(&dir));
        assert!(report.failures.is_empty(), "{}: {:?}", dir.display(), report.failures);
        let got = lines.join("\n") + "\n";
        let golden = dir.join("expected.ndjson");
        if bless {
            std::fs::write(&golden, &got).unwrap();
            continue;
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_else(|e| {
            panic!("{}: {e}; run `RAYLOG_BLESS=1 cargo test golden` to create it", golden.display())
        });
        if got != want {
            let (g, w): (Vec<_>, Vec<_>) = (got.lines().collect(), want.lines().collect());
            let first = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(g.len().min(w.len()));
            failures.push(format!(
                "{}: {} records, golden has {}; first difference at record {first}:\n  got:  {}\n  want: {}",
                dir.display(),
                g.len(),
                w.len(),
                g.get(first).unwrap_or(&"<none>"),
                w.get(first).unwrap_or(&"<none>")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
