//! Ray Serve logs (`serve/controller_<pid>.log`, `proxy_<ip>.log`, `replica_…log`).
//!
//! `INFO 2026-11-30 09:31:14,371 default_Greeter ypwxh5oi <request_id> -- message`:
//! level first, then the time, the deployment (or `controller`/`proxy`), the replica
//! (or pid/ip), an optional request id, then ` -- ` and the message.

use super::{starts_with_date, Draft, ParseCtx};
use crate::record::{FieldValue, Level};
use crate::time::parse_civil;

/// True when `line` starts like a Serve header (`LEVEL YYYY-MM-DD`).
pub fn is_header(line: &[u8]) -> bool {
    let sp = line.iter().take(9).position(|&c| c == b' ');
    sp.is_some_and(|p| Level::from_name(&line[..p]).is_some() && starts_with_date(&line[p + 1..]))
}

/// Parses one Serve record. Returns false when the header is not there.
pub fn parse<'a>(text: &'a str, cx: &ParseCtx<'_>, d: &mut Draft<'a>) -> bool {
    let b = text.as_bytes();
    let Some(sp) = b.iter().take(9).position(|&c| c == b' ') else {
        return false;
    };
    let Some(level) = Level::from_name(&b[..sp]) else {
        return false;
    };
    let Some((civil, n)) = parse_civil(&b[sp + 1..]) else {
        return false;
    };
    let head_start = sp + 1 + n;
    let first_end = memchr::memchr(b'\n', b).unwrap_or(b.len());
    let Some(sep) = super::find_separator(&b[head_start..first_end]) else {
        return false;
    };
    let mut parts = text[head_start..head_start + sep].split_ascii_whitespace();
    let names = ["deployment", "replica", "request_id"];
    for (name, v) in names.iter().zip(parts.by_ref()) {
        d.fields.push(name, FieldValue::Str(v));
    }
    d.civil_time(cx.zone, civil);
    d.level = Some(level);
    d.message = &text[head_start + sep + 4..];
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FileKind;
    use crate::time::Zone;

    #[test]
    fn replica_line() {
        let line = "INFO 2026-11-30 09:32:09,553 default_Greeter i0dv6vqa f597d2c9-c6b0 -- greeting alice";
        assert!(is_header(line.as_bytes()));
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::Serve };
        let mut d = Draft::default();
        assert!(parse(line, &cx, &mut d));
        assert_eq!(d.message, "greeting alice");
        assert_eq!(d.fields.get("request_id"), Some(FieldValue::Str("f597d2c9-c6b0")));
        assert_eq!(d.fields.get("deployment"), Some(FieldValue::Str("default_Greeter")));
        assert!(!is_header(b"Traceback (most recent call last):"));
    }
}
