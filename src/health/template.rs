//! Template: an ERROR message with its variable parts replaced, so the same error
//! from a thousand workers groups into one line of `top_errors`.
//!
//! Replaced, in this order: quoted strings (`'…'`, `"…"`) by `<str>`, paths (a word
//! holding `/` that starts with `/`, `./`, `~` or a drive) by `<path>`, hex ids (8+
//! hex digits with at least one digit, so plain words like `deadbeef`… still group)
//! by `<id>`, IP addresses and ports by `<ip>`, and other numbers by `<n>`. Context
//! pairs Ray appends (` worker_id=…`) become `key=<id>`. Only the first line counts:
//! a traceback's frames differ by line number but the exception line is the point.

/// The template of `message`, at most `MAX` characters.
pub fn template(message: &str) -> String {
    const MAX: usize = 200;
    let line = message.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim();
    let mut out = String::with_capacity(line.len().min(MAX) + 8);
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        if out.chars().count() >= MAX {
            out.push('…');
            break;
        }
        if c == '\'' || c == '"' {
            // An unclosed quote runs past the first line: the rest is the string.
            let end = rest[1..].find(c).map_or(rest.len(), |e| e + 2);
            out.push_str("<str>");
            rest = &rest[end..];
            continue;
        }
        if c.is_whitespace() || is_punct(c) {
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        // A double quote ends a word too (`key:"value"`); an apostrophe does not (`can't`).
        let end = rest.find(|ch: char| ch.is_whitespace() || is_punct(ch) || ch == '"').unwrap_or(rest.len());
        let word = &rest[..end];
        out.push_str(&word_template(word));
        rest = &rest[end..];
    }
    out
}

/// Characters that end a word, but not `.`, `/`, `:` or `=`, which live inside
/// paths, addresses, numbers and pairs.
fn is_punct(c: char) -> bool {
    matches!(c, ',' | ';' | '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>' | '|' | '!' | '?' | '`')
}

fn word_template(word: &str) -> String {
    if let Some((k, v)) = word.split_once('=') {
        if !k.is_empty() && !v.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return format!("{k}={}", value_template(v));
        }
    }
    value_template(word)
}

fn value_template(w: &str) -> String {
    let core = w.trim_end_matches([':', '.']);
    let tail = &w[core.len()..];
    let t = if is_path(core) {
        "<path>".to_string()
    } else if is_ip(core) {
        "<ip>".to_string()
    } else if is_hex_id(core) {
        "<id>".to_string()
    } else if core.bytes().any(|b| b.is_ascii_digit()) {
        numbers(core)
    } else {
        core.to_string()
    };
    t + tail
}

fn is_path(w: &str) -> bool {
    w.contains('/') && (w.starts_with('/') || w.starts_with("./") || w.starts_with('~') || w.contains(":/"))
}

fn is_ip(w: &str) -> bool {
    let host = w.rsplit_once(':').map_or(w, |(h, p)| if p.bytes().all(|b| b.is_ascii_digit()) { h } else { w });
    let host = host.strip_prefix("ipv4:").unwrap_or(host);
    let parts: Vec<&str> = host.split('.').collect();
    parts.len() == 4 && parts.iter().all(|p| !p.is_empty() && p.len() <= 3 && p.bytes().all(|b| b.is_ascii_digit()))
}

fn is_hex_id(w: &str) -> bool {
    w.len() >= 8 && w.bytes().all(|b| b.is_ascii_hexdigit()) && w.bytes().any(|b| b.is_ascii_digit())
}

/// Every run of digits (with `.` inside it) becomes `<n>`: `4302ms` → `<n>ms`.
fn numbers(w: &str) -> String {
    let mut out = String::with_capacity(w.len());
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
    out
}

#[cfg(test)]
mod tests {
    use super::template;

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
        let a =
            "Failed to export metrics. Result: 1 worker_id=354b6a02805d6d179cf7bb798749cd2c73ef5011302c96fb4a690562";
        let b =
            "Failed to export metrics. Result: 14 worker_id=78858d8b5465e97a63167f14411e5b7eef6432391a4bf71a583a5995";
        assert_eq!(template(a), template(b));
        assert_ne!(template(a), template("Failed to import metrics. Result: 1"));
        assert_eq!(template("Unknown error: deadbeef"), "Unknown error: deadbeef", "a word, not an id");
        assert_eq!(template("can't bind: {\"port\":\"8265\"}"), "can't bind: {<str>:<str>}");
        // fixtures/ray-2.60-text/.../dashboard_agent.log: a list whose string runs on.
        assert_eq!(template("Report event failed: ['{\"a\": 1"), "Report event failed: [<str>");
    }
}
