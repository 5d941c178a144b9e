//! Plain lines: prints in worker stdout/stderr, drivers' output, anything unknown.
//!
//! The whole text is the message. Two cheap, common shapes are still recognised:
//! Ray's driver-side copies of worker output, `\x1b[36m(Aggregator pid=7845)\x1b[0m msg`
//! (the prefix gives the pid and the actor or task name), and Python's default
//! `logging` format `ERROR:name:msg` (gives the level).

use super::{Draft, ParseCtx};
use crate::record::{FieldValue, Level};

/// Fills `d` from plain text. Always succeeds.
pub fn parse<'a>(text: &'a str, _cx: &ParseCtx<'_>, d: &mut Draft<'a>) -> bool {
    let mut msg = text;
    if let Some((origin, pid, rest)) = worker_prefix(text) {
        d.pid = Some(pid);
        d.fields.push("origin", FieldValue::Str(origin));
        msg = rest;
    }
    if let Some(colon) = msg.as_bytes().iter().take(9).position(|&c| c == b':') {
        if let Some(level) = Level::from_name(&msg.as_bytes()[..colon]) {
            if msg[..colon].bytes().all(|c| c.is_ascii_uppercase()) {
                d.level = Some(level);
            }
        }
    }
    d.message = msg;
    true
}

/// Splits `\x1b[36m(Name pid=123)\x1b[0m ` (colours optional) off a driver line.
fn worker_prefix(text: &str) -> Option<(&str, u32, &str)> {
    let mut s = text;
    if let Some(rest) = s.strip_prefix('\x1b') {
        s = &rest[rest.find('m')? + 1..];
    }
    let inner_end = s.strip_prefix('(')?.find(')')? + 1;
    let inner = &s[1..inner_end];
    let (origin, pid) = inner.rsplit_once(" pid=")?;
    let pid: u32 = pid.split(',').next()?.parse().ok()?;
    let mut rest = &s[inner_end + 1..];
    if let Some(r) = rest.strip_prefix("\x1b[0m") {
        rest = r;
    }
    Some((origin, pid, rest.strip_prefix(' ').unwrap_or(rest)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::FileKind;
    use crate::time::Zone;

    fn run(text: &str) -> Draft<'_> {
        let cx = ParseCtx { zone: &Zone::Utc, kind: FileKind::JobDriver };
        let mut d = Draft::default();
        parse(text, &cx, &mut d);
        d
    }

    #[test]
    fn driver_copy_of_worker_output() {
        let d = run("\x1b[36m(Aggregator pid=7845)\x1b[0m aggregated 0 total 0");
        assert_eq!(d.pid, Some(7845));
        assert_eq!(d.message, "aggregated 0 total 0");
        assert_eq!(d.fields.get("origin"), Some(FieldValue::Str("Aggregator")));
    }

    #[test]
    fn python_default_format_level() {
        assert_eq!(run("ERROR:etl:partition 2 failed").level, Some(Level::Error));
        assert_eq!(run("Note: nothing").level, None);
        assert_eq!(run("square task got 0").message, "square task got 0");
    }
}
