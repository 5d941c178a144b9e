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
    let bytes = line.as_bytes();
    // Characters of the template so far.
    let (mut chars, mut at) = (0, 0);
    while at < bytes.len() {
        if chars >= MAX {
            out.push('…');
            break;
        }
        let b = bytes[at];
        if b == b'\'' || b == b'"' {
            // An unclosed quote runs past the first line: the rest is the string.
            at = memchr::memchr(b, &bytes[at + 1..]).map_or(bytes.len(), |e| at + e + 2);
            out.push_str("<str>");
            chars += 5;
            continue;
        }
        if b < 0x80 && CLASS[b as usize] == SEP {
            out.push(b as char);
            chars += 1;
            at += 1;
            continue;
        }
        if let Some(len) = separator(line, at) {
            out.push_str(&line[at..at + len]);
            chars += 1;
            at += len;
            continue;
        }
        let (end, ascii) = word_end(line, at);
        let start = out.len();
        word_template(&line[at..end], out);
        // What replaces a word is ASCII: an ASCII word's template is too.
        chars += if ascii { out.len() - start } else { out[start..].chars().count() };
        at = end;
    }
}

/// A [`CLASS`]: whitespace or [`is_punct`].
const SEP: u8 = 1;
/// A [`CLASS`]: a double quote, which ends a word too (`key:"value"`; an apostrophe
/// does not: `can't`).
const QUOTE: u8 = 2;
/// What each ASCII byte is to a template: [`SEP`], [`QUOTE`], or 0 (part of a word).
static CLASS: [u8; 128] = {
    let mut t = [0u8; 128];
    let mut c = 0;
    while c < 128 {
        let ch = c as u8 as char;
        // `char::is_whitespace` of ASCII (not `is_ascii_whitespace`, which leaves out
        // the vertical tab); not called here: it is `const` only since Rust 1.87.
        let space = matches!(c, 0x09..=0x0d | 0x20);
        if space || is_punct(ch) {
            t[c] = SEP;
        } else if ch == '"' {
            t[c] = QUOTE;
        }
        c += 1;
    }
    t
};

/// The length of the separator character at byte `at` of `line`, if it is one. A
/// non-ASCII character is decoded (here and in [`word_end`]) to ask whether it is
/// Unicode whitespace, which separates too.
fn separator(line: &str, at: usize) -> Option<usize> {
    let b = line.as_bytes()[at];
    if b < 0x80 {
        return (CLASS[b as usize] == SEP).then_some(1);
    }
    let c = line[at..].chars().next()?;
    c.is_whitespace().then(|| c.len_utf8())
}

/// Where the word starting at byte `at` of `line` ends (at a separator or a double
/// quote), and whether it is ASCII. Its first character is not a separator or a
/// quote (the caller saw to that), and is passed over unasked, so a word is never
/// empty and the scan always moves on.
fn word_end(line: &str, at: usize) -> (usize, bool) {
    let bytes = line.as_bytes();
    let first = line[at..].chars().next().map_or(0, char::len_utf8);
    let (mut at, mut ascii) = (at + first, first == 1);
    while at < bytes.len() {
        let b = bytes[at];
        if b < 0x80 {
            if CLASS[b as usize] != 0 {
                return (at, ascii);
            }
            at += 1;
            continue;
        }
        let c = line[at..].chars().next().expect("at a character boundary");
        if c.is_whitespace() {
            return (at, false);
        }
        (at, ascii) = (at + c.len_utf8(), false);
    }
    (at, ascii)
}

/// Characters that end a word, but not `.`, `/`, `:` or `=`, which live inside
/// paths, addresses, numbers and pairs.
const fn is_punct(c: char) -> bool {
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
    // `trim_end_matches([':', '.'])`, a byte at a time: both are ASCII.
    let core = &w[..w.bytes().rposition(|b| b != b':' && b != b'.').map_or(0, |i| i + 1)];
    let tail = &w[core.len()..];
    // Paths hold a `/`, addresses, ids and numbers a digit: most words have neither
    // and are kept as they are.
    let (digit, slash) = core.bytes().fold((false, false), |(d, s), b| (d || b.is_ascii_digit(), s || b == b'/'));
    if slash && is_path(core) {
        out.push_str("<path>");
    } else if !digit {
        out.push_str(core);
    } else if is_ip(core) {
        out.push_str("<ip>");
    } else if is_hex_id(core) {
        out.push_str("<id>");
    } else {
        numbers(core, out);
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
    let bytes = w.as_bytes();
    let (mut at, mut kept) = (0, 0);
    while at < bytes.len() {
        if !bytes[at].is_ascii_digit() {
            at += 1;
            continue;
        }
        out.push_str(&w[kept..at]);
        out.push_str("<n>");
        at += 1;
        while at < bytes.len() && (bytes[at].is_ascii_digit() || bytes[at] == b'.') {
            at += 1;
        }
        kept = at;
    }
    out.push_str(&w[kept..]);
}

#[cfg(test)]
#[path = "template_tests.rs"]
mod tests;
