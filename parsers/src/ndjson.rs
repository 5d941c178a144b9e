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
    t
};

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// True when any byte of `w` is a control character, `"` or `\\` (SWAR: eight bytes
/// per step, because messages are long and almost never need escaping).
#[inline]
fn word_needs_escape(w: u64) -> bool {
    let ctrl = w.wrapping_sub(LO * 0x20) & !w;
    let quote = (w ^ (LO * b'"' as u64)).wrapping_sub(LO) & !(w ^ (LO * b'"' as u64));
    let bslash = (w ^ (LO * b'\\' as u64)).wrapping_sub(LO) & !(w ^ (LO * b'\\' as u64));
    (ctrl | quote | bslash) & HI != 0
}

/// Index of the first byte at or after `from` that needs escaping.
#[inline]
pub(crate) fn next_escape(b: &[u8], mut i: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    {
        i = sse2::skip_clean(b, i);
    }
    while i + 8 <= b.len() {
        let w = u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        if word_needs_escape(w) {
            break;
        }
        i += 8;
    }
    b[i..].iter().position(|&c| ESCAPE[c as usize]).map(|p| p + i)
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    //! Sixteen bytes per step with SSE2, which every x86_64 CPU has.
    use std::arch::x86_64::*;

    /// Advances `i` past 16-byte blocks that need no escaping.
    #[inline]
    pub fn skip_clean(b: &[u8], mut i: usize) -> usize {
        // SAFETY: SSE2 is part of the x86_64 baseline; loads are unaligned and stay
        // within `b` because `i + 16 <= b.len()` is checked before each one.
        unsafe {
            let quote = _mm_set1_epi8(b'"' as i8);
            let bslash = _mm_set1_epi8(b'\\' as i8);
            let ctrl_max = _mm_set1_epi8(0x1f);
            while i + 16 <= b.len() {
                let v = _mm_loadu_si128(b.as_ptr().add(i) as *const __m128i);
                // Unsigned `v <= 0x1f` as `min(v, 0x1f) == v`.
                let ctrl = _mm_cmpeq_epi8(_mm_min_epu8(v, ctrl_max), v);
                let hit = _mm_or_si128(ctrl, _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, bslash)));
                if _mm_movemask_epi8(hit) != 0 {
                    break;
                }
                i += 16;
            }
        }
        i
    }
}

/// Appends `s` as a quoted JSON string.
#[inline]
pub fn write_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let b = s.as_bytes();
    let mut start = 0;
    while let Some(i) = next_escape(b, start) {
        out.extend_from_slice(&b[start..i]);
        let c = b[i];
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
        v.write_to(out);
        out.push(b'"');
    }
}

fn opt_str(out: &mut Vec<u8>, k: &str, v: Option<&str>) {
    if let Some(v) = v {
        key(out, k);
        write_str(out, v);
    }
}

#[inline]
fn num(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
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
    out.push(b',');
    out.extend_from_slice(rec.file.json_members());
    key(out, "offset");
    num(out, rec.offset);
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
        for s in ["plain ascii text that is long enough", "x\u{1f}yyyyyyyyyyyy", "yyyyyyyy\"", "ünïcode ✓ \\ tail", ""]
        {
            let mut got = vec![];
            write_str(&mut got, s);
            let back: String = serde_json::from_slice(&got).unwrap();
            assert_eq!(back, s);
        }
    }
}
