//! Tests of [`super::template`]: real messages, and the byte-wise scanner against the
//! character-wise one it replaced (kept here as the reference) on every message of
//! the fixtures and on arbitrary text.

use proptest::prelude::*;

use super::{template, template_into};

#[test]
fn ids_numbers_paths_and_quotes_are_replaced() {
    // fixtures/ray-2.60-text/.../raylet.out (a real W line, with its context pair).
    let m = "DisconnectClient: failed to send SIGTERM to process group 4302: No such process, errno=3 worker_id=354b6a02805d6d179cf7bb798749cd2c73ef5011302c96fb4a690562";
    assert_eq!(
        template(m),
        "DisconnectClient: failed to send SIGTERM to process group <n>: No such process, errno=<n> worker_id=<id>"
    );
    // fixtures/ray-2.60-text/.../worker-f940b79c…-4202.err
    let t = "Traceback (most recent call last):\n  File \"/home/ray/x.py\", line 3";
    assert_eq!(template(t), "Traceback (most recent call last):");
    assert_eq!(template("open '/tmp/ray/a b' failed at /tmp/ray/session_1/x.log"), "open <str> failed at <path>");
    assert_eq!(
        template("RpcError: connect to 192.0.2.2:42717 failed after 1.5s"),
        "RpcError: connect to <ip> failed after <n>s"
    );
}

#[test]
fn two_workers_same_error_same_template() {
    let a = "Failed to export metrics. Result: 1 worker_id=354b6a02805d6d179cf7bb798749cd2c73ef5011302c96fb4a690562";
    let b = "Failed to export metrics. Result: 14 worker_id=78858d8b5465e97a63167f14411e5b7eef6432391a4bf71a583a5995";
    assert_eq!(template(a), template(b));
    assert_ne!(template(a), template("Failed to import metrics. Result: 1"));
    assert_eq!(template("Unknown error: deadbeef"), "Unknown error: deadbeef", "a word, not an id");
    assert_eq!(template("can't bind: {\"port\":\"8265\"}"), "can't bind: {<str>:<str>}");
    // fixtures/ray-2.60-text/.../dashboard_agent.log: a list whose string runs on.
    assert_eq!(template("Report event failed: ['{\"a\": 1"), "Report event failed: [<str>");
}

#[test]
fn long_messages_stop_at_two_hundred_characters() {
    // Counted in characters, not bytes, of the template (ids count as `<id>`).
    let word = "été ".repeat(80);
    let t = template(&word);
    assert_eq!(t.chars().count(), 201, "{t}");
    assert!(t.ends_with('…') && t.starts_with("été été"));
    let ids = "deadbeef01 ".repeat(60);
    assert_eq!(template(&ids), format!("{}…", "<id> ".repeat(40)));
    // Into a buffer that holds something already: only the template counts.
    let mut out = "x".repeat(500);
    template_into(&word, &mut out);
    assert_eq!(out[500..], t);
}

/// The templating before it went byte-wise: a character at a time, `str::find`
/// with a closure for each word's end, and every classifier asked of every word.
fn reference_into(message: &str, out: &mut String) {
    const MAX: usize = 200;
    let line = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    out.reserve(line.len().min(MAX) + 8);
    // Characters of the template so far.
    let mut chars = 0;
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        if chars >= MAX {
            out.push('…');
            break;
        }
        if c == '\'' || c == '"' {
            // An unclosed quote runs past the first line: the rest is the string.
            let end = rest[1..].find(c).map_or(rest.len(), |e| e + 2);
            out.push_str("<str>");
            chars += 5;
            rest = &rest[end..];
            continue;
        }
        if c.is_whitespace() || reference_punct(c) {
            out.push(c);
            chars += 1;
            rest = &rest[c.len_utf8()..];
            continue;
        }
        // A double quote ends a word too (`key:"value"`); an apostrophe does not (`can't`).
        let end = rest.find(|ch: char| ch.is_whitespace() || reference_punct(ch) || ch == '"').unwrap_or(rest.len());
        let start = out.len();
        reference_word(&rest[..end], out);
        chars += out[start..].chars().count();
        rest = &rest[end..];
    }
}

/// Characters that end a word, but not `.`, `/`, `:` or `=`, which live inside
/// paths, addresses, numbers and pairs.
fn reference_punct(c: char) -> bool {
    matches!(c, ',' | ';' | '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>' | '|' | '!' | '?' | '`')
}

fn reference_word(word: &str, out: &mut String) {
    if let Some((k, v)) = word.split_once('=') {
        if !k.is_empty() && !v.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            out.push_str(k);
            out.push('=');
            return reference_value(v, out);
        }
    }
    reference_value(word, out)
}

fn reference_value(w: &str, out: &mut String) {
    let core = w.trim_end_matches([':', '.']);
    let tail = &w[core.len()..];
    if super::is_path(core) {
        out.push_str("<path>");
    } else if super::is_ip(core) {
        out.push_str("<ip>");
    } else if super::is_hex_id(core) {
        out.push_str("<id>");
    } else if core.bytes().any(|b| b.is_ascii_digit()) {
        reference_numbers(core, out);
    } else {
        out.push_str(core);
    }
    out.push_str(tail);
}

#[test]
fn the_ascii_classes_are_the_characters_own() {
    for b in 0u8..128 {
        let c = b as char;
        let sep = c.is_whitespace() || reference_punct(c);
        assert_eq!(super::CLASS[b as usize] == super::SEP, sep, "{b:#x}");
        assert_eq!(super::CLASS[b as usize] == super::QUOTE, c == '"', "{b:#x}");
    }
}

fn reference_numbers(w: &str, out: &mut String) {
    let mut in_num = false;
    for c in w.chars() {
        let digitish = c.is_ascii_digit() || (in_num && c == '.');
        if digitish && !in_num {
            out.push_str("<n>");
        }
        if !digitish {
            out.push(c);
        }
        in_num = digitish;
    }
}

/// The template as the reference scanner makes it.
fn reference(message: &str) -> String {
    let mut out = String::new();
    reference_into(message, &mut out);
    out
}

/// Every record's message in the fixtures, errors or not: the more shapes the better.
fn fixture_messages() -> Vec<String> {
    use raylog_parsers::Options;

    use crate::discover::discover;
    use crate::scan::{scan, ScanConfig};
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let cfg = ScanConfig { opts: Options::default(), stdin_name: None, fixed_mtime: None, threads: 1 };
    let mut all = Vec::new();
    scan(&discover(&[root]), &cfg, &mut |_| {}, &mut |r| all.push(r.message.to_string()));
    all
}

#[test]
fn the_byte_scanner_gives_the_reference_templates_of_every_fixture_message() {
    let messages = fixture_messages();
    assert!(messages.len() > 5_000, "{} messages", messages.len());
    let (mut ids, mut paths, mut numbers) = (0, 0, 0);
    for m in &messages {
        let t = template(m);
        assert_eq!(t, reference(m), "{m:?}");
        ids += t.contains("<id>") as usize;
        paths += t.contains("<path>") as usize;
        numbers += t.contains("<n>") as usize;
    }
    // The messages exercise every replacement, not only the plain words.
    assert!(ids > 100 && paths > 10 && numbers > 100, "ids {ids}, paths {paths}, numbers {numbers}");
}

/// Words, separators, quotes, digits, hex, paths, addresses, pairs and non-ASCII
/// whitespace and letters, mixed.
fn pieces() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        Just(" "),
        Just("\t"),
        Just("\u{a0}"),
        Just("\u{3000}"),
        Just("\u{85}"),
        Just("\u{b}"),
        Just("é"),
        Just("ü"),
        Just("'"),
        Just("\""),
        Just(","),
        Just("("),
        Just(")"),
        Just("["),
        Just("{"),
        Just("`"),
        Just("."),
        Just(":"),
        Just("="),
        Just("/"),
        Just("./"),
        Just("~"),
        Just("C:/"),
        Just("ipv4:"),
        Just("0"),
        Just("12"),
        Just("192.0.2.1"),
        Just(":8080"),
        Just("deadbeef"),
        Just("354b6a02805d6d17"),
        Just("key"),
        Just("worker_id"),
        Just("Error"),
        Just("\n"),
        Just("x"),
    ];
    prop::collection::vec(piece, 0..60).prop_map(|v| v.concat())
}

proptest! {
    #[test]
    fn the_byte_scanner_gives_the_reference_templates(m in pieces()) {
        prop_assert_eq!(template(&m), reference(&m));
    }

    #[test]
    fn any_text_too(m in any::<String>()) {
        prop_assert_eq!(template(&m), reference(&m));
    }
}
