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
    let mut out = String::new();
    template_into(message, &mut out);
    out
}

/// [`template`], appended to `out` (no allocation per word: `health` makes one for
/// every error record).
pub fn template_into(message: &str, out: &mut String) {
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
        if c.is_whitespace() || is_punct(c) {
            out.push(c);
            chars += 1;
            rest = &rest[c.len_utf8()..];
            continue;
        }
        // A double quote ends a word too (`key:"value"`); an apostrophe does not (`can't`).
        let end = rest.find(|ch: char| ch.is_whitespace() || is_punct(ch) || ch == '"').unwrap_or(rest.len());
        let start = out.len();
        word_template(&rest[..end], out);
        chars += out[start..].chars().count();
        rest = &rest[end..];
    }
}

/// Characters that end a word, but not `.`, `/`, `:` or `=`, which live inside
/// paths, addresses, numbers and pairs.
fn is_punct(c: char) -> bool {
    matches!(c, ',' | ';' | '(' | ')' | '[' | ']' | '{' | '}' | '<' | '>' | '|' | '!' | '?' | '`')
}

fn word_template(word: &str, out: &mut String) {
    if let Some((k, v)) = word.split_once('=') {
        if !k.is_empty() && !v.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            out.push_str(k);
            out.push('=');
            return value_template(v, out);
        }
    }
    value_template(word, out)
}

fn value_template(w: &str, out: &mut String) {
    let core = w.trim_end_matches([':', '.']);
    let tail = &w[core.len()..];
    if is_path(core) {
        out.push_str("<path>");
    } else if is_ip(core) {
        out.push_str("<ip>");
    } else if is_hex_id(core) {
        out.push_str("<id>");
    } else if core.bytes().any(|b| b.is_ascii_digit()) {
        numbers(core, out);
    } else {
        out.push_str(core);
    }
    out.push_str(tail);
}

fn is_path(w: &str) -> bool {
    w.contains('/') && (w.starts_with('/') || w.starts_with("./") || w.starts_with('~') || w.contains(":/"))
}

fn is_ip(w: &str) -> bool {
    let host = w.rsplit_once(':').map_or(w, |(h, p)| if p.bytes().all(|b| b.is_ascii_digit()) { h } else { w });
    let host = host.strip_prefix("ipv4:").unwrap_or(host);
    let mut parts = 0;
    for p in host.split('.') {
        parts += 1;
        if parts > 4 || p.is_empty() || p.len() > 3 || !p.bytes().all(|b| b.is_ascii_digit()) {
            return false;
        }
    }
    parts == 4
}

fn is_hex_id(w: &str) -> bool {
    w.len() >= 8 && w.bytes().all(|b| b.is_ascii_hexdigit()) && w.bytes().any(|b| b.is_ascii_digit())
}

/// Every run of digits (with `.` inside it) becomes `<n>`: `4302ms` → `<n>ms`.
fn numbers(w: &str, out: &mut String) {
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
        super::template_into(&word, &mut out);
        assert_eq!(out[500..], t);
    }
}
