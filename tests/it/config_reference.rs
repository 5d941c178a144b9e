//! The configuration reference in docs/configuration.md and the commented `examples/raylog.toml`
//! against the config structs.
//!
//! The structs refuse unknown keys (`deny_unknown_fields`), and serde's refusal names
//! every key the struct accepts. Probing each table with an unknown key therefore
//! reads the real key list from the code, with nothing listed by hand here: a key
//! added to a struct and not documented fails, and so does a documented key that no
//! struct has.

use std::collections::BTreeSet;
use std::path::Path;

use raylog::agent::config;

/// The keys serde expects, from its "unknown field `zzz`, expected one of `a`, `b`"
/// (or "expected `a` or `b`", "expected `a`") answer to `probe`.
fn expected_keys(probe: &str) -> Vec<String> {
    let err = match config::parse(probe, "probe") {
        Ok(_) => panic!("the unknown key in {probe:?} was accepted"),
        Err(e) => e.to_string(),
    };
    let tail = err.split("expected").nth(1).unwrap_or_else(|| panic!("no key list in: {err}"));
    let tail = tail.split('\n').next().unwrap_or("");
    tail.split('`').skip(1).step_by(2).map(str::to_string).collect()
}

/// Every leaf key of the config, dotted: `source.paths`, `sinks.loki.tls.ca_file`.
/// Sink keys are named by sink type; a nested table's keys replace the table's own.
fn struct_keys() -> BTreeSet<String> {
    let mut keys = BTreeSet::new();
    for section in expected_keys("zzz_unknown = 1\n") {
        if section == "sinks" {
            continue;
        }
        for k in expected_keys(&format!("[{section}]\nzzz_unknown = 1\n")) {
            keys.insert(format!("{section}.{k}"));
        }
    }
    let types = expected_keys("[[sinks]]\ntype = \"zzz_unknown\"\n");
    assert!(types.len() >= 4, "sink types: {types:?}");
    for t in types {
        let base = format!("[[sinks]]\ntype = \"{t}\"\n");
        for k in expected_keys(&format!("{base}zzz_unknown = 1\n")) {
            let nested = match k.as_str() {
                "tls" => Some("tls = { zzz_unknown = 1 }\n"),
                "basic_auth" => Some("basic_auth = { username = \"u\", password = \"p\", zzz_unknown = 1 }\n"),
                _ => None,
            };
            match nested {
                Some(n) => {
                    for sub in expected_keys(&format!("{base}{n}")) {
                        keys.insert(format!("sinks.{t}.{k}.{sub}"));
                    }
                }
                None => {
                    keys.insert(format!("sinks.{t}.{k}"));
                }
            }
        }
    }
    keys
}

fn repo_file(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// The keys in the first column of the tables of docs/configuration.md, the page under
/// its "# Configuration reference" title (its "## Agent" and "## Sinks" sections).
fn reference_keys() -> BTreeSet<String> {
    let page = repo_file("docs/configuration.md");
    assert!(
        page.starts_with("# Configuration reference\n"),
        "docs/configuration.md does not start with '# Configuration reference'"
    );
    let sinks = page.find("\n## Sinks\n").expect("docs/configuration.md has no '## Sinks'");
    assert!(page[..sinks].contains("\n## Agent\n"), "docs/configuration.md has no '## Agent' before '## Sinks'");
    page.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|k| k.contains('.'))
        .map(str::to_string)
        .collect()
}

#[test]
fn probes_find_the_keys() {
    let keys = struct_keys();
    for k in ["source.paths", "node.labels_file", "sinks.loki.structured_metadata", "sinks.elasticsearch.tls.ca_file"] {
        assert!(keys.contains(k), "{k} missing from {keys:?}");
    }
}

#[test]
fn reference_lists_exactly_the_config_keys() {
    let code = struct_keys();
    let doc = reference_keys();
    let undocumented: Vec<_> = code.difference(&doc).collect();
    let unknown: Vec<_> = doc.difference(&code).collect();
    assert!(undocumented.is_empty(), "keys missing from docs/configuration.md: {undocumented:?}");
    assert!(unknown.is_empty(), "docs/configuration.md lists keys no config struct has: {unknown:?}");
}

#[test]
fn example_config_mentions_every_key() {
    let example = repo_file("examples/raylog.toml");
    let mentioned = |leaf: &str| {
        example.lines().any(|l| {
            let l = l.trim_start_matches(['#', ' ']);
            l.starts_with(&format!("{leaf} ="))
                || l.contains(&format!(" {leaf} = "))
                || l.contains(&format!("{{ {leaf} = "))
        })
    };
    for key in struct_keys() {
        let leaf = key.rsplit('.').next().unwrap();
        assert!(mentioned(leaf), "examples/raylog.toml does not mention {key} (as `{leaf} = …`, commented or not)");
    }
}

/// examples/raylog.toml says it shows every default: what it sets must be what an
/// empty config gets, section by section, as `check-config` prints them.
#[test]
fn example_config_shows_the_defaults() {
    let (raw, cfg) = config::parse(&repo_file("examples/raylog.toml"), "examples/raylog.toml").unwrap();
    let example = config::effective_toml(&raw, &cfg);
    let (raw, cfg) = config::default_config();
    let defaults = config::effective_toml(&raw, &cfg);
    // A section's key lines, up to the next table header (comments and blanks aside).
    let section = |text: &str, name: &str| -> Vec<String> {
        let start = text.find(&format!("[{name}]\n")).unwrap_or_else(|| panic!("no [{name}] in:\n{text}"));
        text[start..]
            .lines()
            .enumerate()
            .take_while(|(i, l)| *i == 0 || !l.starts_with('['))
            .map(|(_, l)| l.to_string())
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect()
    };
    for name in ["source", "batch", "retry", "api"] {
        assert_eq!(
            section(&example, name),
            section(&defaults, name),
            "examples/raylog.toml [{name}] differs from the defaults"
        );
    }
}
