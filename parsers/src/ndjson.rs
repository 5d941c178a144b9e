//! Writes a [`Record`] as one line of JSON (the record schema of README.md).
//!
//! Hand-written rather than derived with serde because it runs once per record on
//! the hot path: fields are appended straight into a reused `Vec<u8>`, absent fields
//! are omitted (never `null`), and escaping copies runs of safe bytes at once.

use crate::id::Id;
use crate::record::{FieldValue, Record};

/// Which bytes need escaping inside a JSON string.
static ESCAPE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t[0x7f] = true;
    t
};

/// Appends `s` as a quoted JSON string.
#[inline]
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let b = s.as_bytes();
    let mut start = 0;
    for (i, &c) in b.iter().enumerate() {
        if !ESCAPE[c as usize] {
            continue;
        }
        out.extend_from_slice(&b[start..i]);
        match c {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.extend_from_slice(b"\\u00");
                out.push(HEX[(c >> 4) as usize]);
                out.push(HEX[(c & 15) as usize]);
            }
        }
        start = i + 1;
    }
    out.extend_from_slice(&b[start..]);
    out.push(b'"');
}

#[inline]
fn key(out: &mut Vec<u8>, k: &str) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(k.as_bytes());
    out.extend_from_slice(b"\":");
}

fn id(out: &mut Vec<u8>, k: &str, v: Option<Id>) {
    if let Some(v) = v {
        key(out, k);
        out.push(b'"');
        out.extend_from_slice(v.as_str().as_bytes());
        out.push(b'"');
    }
}

fn opt_str(out: &mut Vec<u8>, k: &str, v: Option<&str>) {
    if let Some(v) = v {
        key(out, k);
        write_str(out, v);
    }
}

fn num(out: &mut Vec<u8>, n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    let mut n = n;
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&buf[i..]);
}

/// Appends `rec` as a JSON object followed by `\n`.
pub fn write_record(out: &mut Vec<u8>, rec: &Record<'_>) {
    out.push(b'{');
    if let Some(t) = rec.timestamp {
        key(out, "timestamp");
        out.push(b'"');
        t.write_rfc3339(out);
        out.push(b'"');
    }
    if rec.timestamp_inferred {
        out.extend_from_slice(b",\"timestamp_inferred\":true");
    }
    opt_str(out, "level", rec.level.map(|l| l.as_str()));
    key(out, "message");
    write_str(out, rec.message);
    let f = rec.file;
    key(out, "component");
    write_str(out, &f.component);
    opt_str(out, "stream", f.stream.map(|s| s.as_str()));
    key(out, "file");
    write_str(out, &f.rel_path);
    key(out, "offset");
    num(out, rec.offset);
    opt_str(out, "session", f.session.as_deref());
    id(out, "node_id", rec.ids.node_id);
    id(out, "job_id", rec.ids.job_id);
    id(out, "worker_id", rec.ids.worker_id);
    id(out, "actor_id", rec.ids.actor_id);
    id(out, "task_id", rec.ids.task_id);
    if let Some(p) = rec.pid {
        key(out, "pid");
        num(out, p as u64);
    }
    opt_str(out, "task_name", rec.task_name);
    opt_str(out, "actor_name", rec.actor_name);
    opt_str(out, "submission_id", f.submission_id.as_deref());
    if !rec.fields.is_empty() {
        key(out, "fields");
        let mut first = true;
        for fld in rec.fields.iter() {
            out.push(if first { b'{' } else { b',' });
            first = false;
            write_str(out, fld.key);
            out.push(b':');
            match fld.value {
                FieldValue::Str(s) => write_str(out, s),
                FieldValue::Json(j) => out.extend_from_slice(j.as_bytes()),
            }
        }
        out.push(b'}');
    }
    if rec.truncated {
        out.extend_from_slice(b",\"truncated\":true");
    }
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        let mut v = vec![];
        write_str(&mut v, "a\"b\\c\nd\u{1}é");
        assert_eq!(String::from_utf8(v).unwrap(), r#""a\"b\\c\nd\u0001é""#);
    }
}
