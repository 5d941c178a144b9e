//! A minimal borrowed JSON object scanner for one-object-per-line logs.
//!
//! Ray's JSON lines (structured logging, C++ JSON, events, export events) are flat
//! objects whose few interesting members are strings. Building a `serde_json::Value`
//! per line would allocate a map per line; instead [`members`] walks the top-level
//! members and hands out raw slices, and [`unescape_into`] decodes a string only when
//! it is actually needed, into a reused buffer. Nested values are returned raw, which
//! is already valid JSON for the output's `fields`.

/// A top-level member value.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    /// A string: its raw JSON text including the quotes, and whether it holds escapes.
    Str(&'a str, bool),
    /// Any other value, as its raw JSON text (number, bool, null, object, array).
    Raw(&'a str),
    /// A bare word that is not JSON but that Python writes (`NaN`, `Infinity`):
    /// kept as text.
    Bare(&'a str),
}

impl<'a> Value<'a> {
    /// The raw JSON text of a value (strings with their quotes).
    pub fn raw(&self) -> &'a str {
        match *self {
            Value::Str(s, _) | Value::Raw(s) | Value::Bare(s) => s,
        }
    }

    /// The value as a record field: text where it is plain text, raw JSON otherwise.
    pub fn to_field(self) -> crate::record::FieldValue<'a> {
        use crate::record::FieldValue;
        match self {
            Value::Str(s, false) => FieldValue::Str(&s[1..s.len() - 1]),
            Value::Str(s, true) | Value::Raw(s) => FieldValue::Json(s),
            Value::Bare(s) => FieldValue::Str(s),
        }
    }

    /// A string's content between the quotes, escapes left in place.
    pub fn str_inner(&self) -> Option<&'a str> {
        match *self {
            Value::Str(s, _) => Some(&s[1..s.len() - 1]),
            Value::Raw(_) | Value::Bare(_) => None,
        }
    }

    /// A string without escapes, borrowed; `None` for other values or escaped text.
    pub fn plain_str(&self) -> Option<&'a str> {
        match *self {
            Value::Str(s, false) => Some(&s[1..s.len() - 1]),
            Value::Bare(s) => Some(s),
            _ => None,
        }
    }
}

/// Error from [`members`]: the line is not one well-formed JSON object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotJson;

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\r' | b'\n') {
        i += 1;
    }
    i
}

/// End (exclusive, after the closing quote) of the string starting at `b[i] == '"'`,
/// and whether it holds escapes. Rejects raw control characters and bad escapes, so a
/// raw string can be copied into the output as valid JSON.
fn string_end(b: &[u8], i: usize) -> Result<(usize, bool), NotJson> {
    let mut j = i + 1;
    let mut esc = false;
    loop {
        let k = crate::json_str::next_escape(b, j).ok_or(NotJson)?;
        match b[k] {
            b'"' => return Ok((k + 1, esc)),
            b'\\' => {
                esc = true;
                j = match b.get(k + 1).ok_or(NotJson)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => k + 2,
                    b'u' if b.get(k + 2..k + 6).is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) => k + 6,
                    _ => return Err(NotJson),
                };
            }
            _ => return Err(NotJson),
        }
    }
}

/// End of a JSON number or literal starting at `b[i]`.
fn scalar_end(b: &[u8], i: usize) -> Result<usize, NotJson> {
    for lit in [&b"true"[..], b"false", b"null"] {
        if b[i..].starts_with(lit) {
            return Ok(i + lit.len());
        }
    }
    let mut j = i + (b[i] == b'-') as usize;
    let digits = |j: &mut usize| {
        let s = *j;
        while *j < b.len() && b[*j].is_ascii_digit() {
            *j += 1;
        }
        *j > s
    };
    if b.get(j) == Some(&b'0') {
        j += 1;
    } else if !digits(&mut j) {
        return Err(NotJson);
    }
    if b.get(j) == Some(&b'.') {
        j += 1;
        if !digits(&mut j) {
            return Err(NotJson);
        }
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        if !digits(&mut j) {
            return Err(NotJson);
        }
    }
    Ok(j)
}

/// Nesting beyond this is refused rather than recursed into.
const MAX_DEPTH: u32 = 64;

/// End of the (validated) value starting at `b[i]`.
fn value_end(b: &[u8], i: usize, depth: u32) -> Result<usize, NotJson> {
    match *b.get(i).ok_or(NotJson)? {
        b'"' => Ok(string_end(b, i)?.0),
        open @ (b'{' | b'[') => {
            if depth >= MAX_DEPTH {
                return Err(NotJson);
            }
            let close = if open == b'{' { b'}' } else { b']' };
            let mut j = skip_ws(b, i + 1);
            if b.get(j) == Some(&close) {
                return Ok(j + 1);
            }
            loop {
                if open == b'{' {
                    if b.get(j) != Some(&b'"') {
                        return Err(NotJson);
                    }
                    j = skip_ws(b, string_end(b, j)?.0);
                    if b.get(j) != Some(&b':') {
                        return Err(NotJson);
                    }
                    j = skip_ws(b, j + 1);
                }
                j = skip_ws(b, value_end(b, j, depth + 1)?);
                match b.get(j) {
                    Some(b',') => j = skip_ws(b, j + 1),
                    Some(&c) if c == close => return Ok(j + 1),
                    _ => return Err(NotJson),
                }
            }
        }
        _ => scalar_end(b, i),
    }
}

/// Python's `json` writes these for non-finite floats; they are not JSON.
const BARE_WORDS: [&str; 3] = ["NaN", "Infinity", "-Infinity"];

/// Calls `f(key, value)` for each top-level member of the object in `s`, in order.
/// Keys are raw (escapes left in place; Ray's keys have none).
pub fn members<'a>(s: &'a str, mut f: impl FnMut(&'a str, Value<'a>)) -> Result<(), NotJson> {
    let b = s.as_bytes();
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err(NotJson);
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return trailing_ok(b, i + 1);
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return Err(NotJson);
        }
        let (kend, _) = string_end(b, i)?;
        let key = &s[i + 1..kend - 1];
        i = skip_ws(b, kend);
        if b.get(i) != Some(&b':') {
            return Err(NotJson);
        }
        i = skip_ws(b, i + 1);
        let (v, vend) = if b.get(i) == Some(&b'"') {
            let (vend, esc) = string_end(b, i)?;
            (Value::Str(&s[i..vend], esc), vend)
        } else if let Some(w) = BARE_WORDS.iter().find(|w| s[i..].starts_with(**w)) {
            (Value::Bare(w), i + w.len())
        } else {
            let vend = value_end(b, i, 0)?;
            (Value::Raw(&s[i..vend]), vend)
        };
        f(key, v);
        i = skip_ws(b, vend);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return trailing_ok(b, i + 1),
            _ => return Err(NotJson),
        }
    }
}

/// Calls `f` with the raw text of each element of the JSON array in `s`, in order,
/// after checking the whole array is well-formed JSON (so nothing is handed out from
/// a body that turns out to be broken further on). Returns the number of elements.
pub fn elements<'a>(s: &'a str, mut f: impl FnMut(&'a str)) -> Result<usize, NotJson> {
    let b = s.as_bytes();
    let start = skip_ws(b, 0);
    if b.get(start) != Some(&b'[') {
        return Err(NotJson);
    }
    trailing_ok(b, value_end(b, start, 0)?)?;
    let (mut i, mut n) = (skip_ws(b, start + 1), 0);
    if b.get(i) == Some(&b']') {
        return Ok(0);
    }
    loop {
        let end = value_end(b, i, 1)?;
        f(&s[i..end]);
        n += 1;
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            _ => return Ok(n),
        }
    }
}

fn trailing_ok(b: &[u8], i: usize) -> Result<(), NotJson> {
    if skip_ws(b, i) == b.len() {
        Ok(())
    } else {
        Err(NotJson)
    }
}

fn hex4(b: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(b.get(..4)?).ok()?;
    u32::from_str_radix(s, 16).ok()
}

/// Appends the decoded form of raw string content `raw` (between quotes) to `out`.
/// Bad escapes are kept literally rather than failing the record.
pub fn unescape_into(raw: &str, out: &mut String) {
    let b = raw.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let Some(k) = memchr::memchr(b'\\', &b[i..]) else {
            out.push_str(&raw[i..]);
            return;
        };
        out.push_str(&raw[i..i + k]);
        i += k;
        let c = b.get(i + 1).copied().unwrap_or(b'\\');
        i += 2;
        match c {
            b'n' => out.push('\n'),
            b't' => out.push('\t'),
            b'r' => out.push('\r'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'u' => i = unicode_escape(b, i, out),
            b'"' | b'\\' | b'/' => out.push(c as char),
            _ => {
                out.push('\\');
                i -= 1;
            }
        }
    }
}

/// Decodes the 4 hex digits at `b[i..]` (and a following low surrogate), returning
/// the index after them.
fn unicode_escape(b: &[u8], i: usize, out: &mut String) -> usize {
    let Some(hi) = hex4(&b[i.min(b.len())..]) else {
        out.push_str("\\u");
        return i;
    };
    if (0xD800..0xDC00).contains(&hi) && b.get(i + 4..i + 6) == Some(b"\\u") {
        if let Some(lo) = hex4(&b[i + 6..]).filter(|lo| (0xDC00..0xE000).contains(lo)) {
            let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
            out.push(char::from_u32(c).unwrap_or('\u{FFFD}'));
            return i + 10;
        }
    }
    out.push(char::from_u32(hi).unwrap_or('\u{FFFD}'));
    i + 4
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_members() {
        let line = r#"{"a": "x\"y", "n": 12, "o": {"k": [1, "}"]}, "b": true}"#;
        let mut got = vec![];
        members(line, |k, v| got.push((k, v))).unwrap();
        assert_eq!(
            got,
            vec![
                ("a", Value::Str(r#""x\"y""#, true)),
                ("n", Value::Raw("12")),
                ("o", Value::Raw(r#"{"k": [1, "}"]}"#)),
                ("b", Value::Raw("true")),
            ]
        );
    }

    #[test]
    fn rejects_broken() {
        for bad in [r#"{"a": "#, r#"{"a" 1}"#, "not json", r#"{"a": 1} tail"#, r#"{"a": "unterminated}"#] {
            assert_eq!(members(bad, |_, _| {}), Err(NotJson), "{bad}");
        }
    }

    #[test]
    fn python_non_finite_floats_are_text() {
        let mut got = vec![];
        members(r#"{"loss": NaN, "x": -Infinity, "n": -1.5e3}"#, |k, v| got.push((k, v))).unwrap();
        assert_eq!(
            got,
            vec![("loss", Value::Bare("NaN")), ("x", Value::Bare("-Infinity")), ("n", Value::Raw("-1.5e3"))]
        );
    }

    #[test]
    fn unescapes() {
        let mut s = String::new();
        unescape_into(r#"a\nb\t\u00e9\ud83d\ude00\\ \q"#, &mut s);
        assert_eq!(s, "a\nb\té😀\\ \\q");
    }
}
