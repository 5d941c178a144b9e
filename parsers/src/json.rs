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
}

impl<'a> Value<'a> {
    /// The raw JSON text of a value (strings with their quotes).
    pub fn raw(&self) -> &'a str {
        match *self {
            Value::Str(s, _) | Value::Raw(s) => s,
        }
    }

    /// A string's content between the quotes, escapes left in place.
    pub fn str_inner(&self) -> Option<&'a str> {
        match *self {
            Value::Str(s, _) => Some(&s[1..s.len() - 1]),
            Value::Raw(_) => None,
        }
    }

    /// A string without escapes, borrowed; `None` for other values or escaped text.
    pub fn plain_str(&self) -> Option<&'a str> {
        match *self {
            Value::Str(s, false) => Some(&s[1..s.len() - 1]),
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
/// and whether it holds escapes.
fn string_end(b: &[u8], i: usize) -> Result<(usize, bool), NotJson> {
    let mut j = i + 1;
    let mut esc = false;
    loop {
        let k = memchr::memchr2(b'"', b'\\', &b[j..]).ok_or(NotJson)? + j;
        if b[k] == b'\\' {
            esc = true;
            j = k + 2;
            if j > b.len() {
                return Err(NotJson);
            }
        } else {
            return Ok((k + 1, esc));
        }
    }
}

/// End of the value starting at `b[i]`.
fn value_end(b: &[u8], i: usize) -> Result<usize, NotJson> {
    match b.get(i).ok_or(NotJson)? {
        b'"' => Ok(string_end(b, i)?.0),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j)?.0;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Ok(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            Err(NotJson)
        }
        _ => {
            let n = b[i..]
                .iter()
                .position(|&c| matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n'))
                .unwrap_or(b.len() - i);
            if n == 0 {
                Err(NotJson)
            } else {
                Ok(i + n)
            }
        }
    }
}

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
        let vend = value_end(b, i)?;
        let v = if b[i] == b'"' {
            let (_, esc) = string_end(b, i)?;
            Value::Str(&s[i..vend], esc)
        } else {
            Value::Raw(&s[i..vend])
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
        for bad in [
            r#"{"a": "#,
            r#"{"a" 1}"#,
            "not json",
            r#"{"a": 1} tail"#,
            r#"{"a": "unterminated}"#,
        ] {
            assert_eq!(members(bad, |_, _| {}), Err(NotJson), "{bad}");
        }
    }

    #[test]
    fn unescapes() {
        let mut s = String::new();
        unescape_into(r#"a\nb\t\u00e9\ud83d\ude00\\ \q"#, &mut s);
        assert_eq!(s, "a\nb\té😀\\ \\q");
    }
}
