//! Writes a [`Record`] as one line of JSON (the record schema of README.md).
//!
//! Hand-written rather than derived with serde because it runs once per record on
//! the hot path: fields are appended straight into a reused `Vec<u8>`, absent fields
//! are omitted (never `null`), and escaping copies runs of safe bytes at once.

use crate::id::Id;
use crate::record::{FieldValue, Fields, Level, Record};

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

/// Index of the first byte at or after `i` that needs escaping.
#[inline]
pub(crate) fn next_escape(b: &[u8], i: usize) -> Option<usize> {
    #[cfg(target_arch = "x86_64")]
    if b.len() >= 16 {
        return sse2::next_escape(b, i);
    }
    next_escape_swar(b, i)
}

/// [`next_escape`] eight bytes at a time, for short strings.
#[inline]
fn next_escape_swar(b: &[u8], mut i: usize) -> Option<usize> {
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

    /// Bit per byte of the 16 at `p` that needs escaping.
    ///
    /// SAFETY: the caller guarantees 16 readable bytes at `p`; SSE2 is part of the
    /// x86_64 baseline and the load is unaligned.
    #[inline]
    unsafe fn escape_mask(p: *const u8) -> u32 {
        let v = _mm_loadu_si128(p as *const __m128i);
        // Unsigned `v <= 0x1f` as `min(v, 0x1f) == v`.
        let ctrl = _mm_cmpeq_epi8(_mm_min_epu8(v, _mm_set1_epi8(0x1f)), v);
        let quote = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'"' as i8));
        let bslash = _mm_cmpeq_epi8(v, _mm_set1_epi8(b'\\' as i8));
        _mm_movemask_epi8(_mm_or_si128(ctrl, _mm_or_si128(quote, bslash))) as u32
    }

    /// [`super::next_escape`] for `b.len() >= 16`: whole blocks, then one last block
    /// that overlaps the previous one instead of a byte-by-byte tail.
    #[inline]
    pub fn next_escape(b: &[u8], mut i: usize) -> Option<usize> {
        debug_assert!(b.len() >= 16);
        // SAFETY: every load reads 16 bytes at an offset `o` with `o + 16 <= b.len()`.
        unsafe {
            while i + 16 <= b.len() {
                let m = escape_mask(b.as_ptr().add(i));
                if m != 0 {
                    return Some(i + m.trailing_zeros() as usize);
                }
                i += 16;
            }
            if i >= b.len() {
                return None;
            }
            let base = b.len() - 16;
            // Bytes before `i` were already checked.
            let m = escape_mask(b.as_ptr().add(base)) >> (i - base);
            (m != 0).then(|| i + m.trailing_zeros() as usize)
        }
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

/// Separates a member from the previous one unless it is the object's first.
#[inline]
fn sep(out: &mut Vec<u8>) {
    if out.last() != Some(&b'{') {
        out.push(b',');
    }
}

/// Writes `key` (the member's `,"name":"` prefix, as one literal) and the id.
#[inline]
fn id(out: &mut Vec<u8>, key: &[u8], v: &Option<Id>) {
    if let Some(v) = v {
        out.extend_from_slice(key);
        v.write_to(out);
        out.push(b'"');
    }
}

/// Writes `key` (the member's `,"name":` prefix) and the string.
#[inline]
fn opt_str(out: &mut Vec<u8>, key: &[u8], v: Option<&str>) {
    if let Some(v) = v {
        out.extend_from_slice(key);
        write_str(out, v);
    }
}

#[inline]
fn num(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// The whole `"level":"…"` member: levels never need escaping.
fn level_member(l: Level) -> &'static [u8] {
    match l {
        Level::Trace => b"\"level\":\"TRACE\"",
        Level::Debug => b"\"level\":\"DEBUG\"",
        Level::Info => b"\"level\":\"INFO\"",
        Level::Warning => b"\"level\":\"WARNING\"",
        Level::Error => b"\"level\":\"ERROR\"",
        Level::Fatal => b"\"level\":\"FATAL\"",
    }
}

/// Appends `rec` as a JSON object followed by `\n`.
///
/// Member names are written as literals together with their separators: this runs
/// once per record and the output is larger than the input, so every push counts.
pub fn write_record(out: &mut Vec<u8>, rec: &Record<'_>) {
    out.push(b'{');
    if let Some(t) = rec.timestamp {
        out.extend_from_slice(b"\"timestamp\":\"");
        t.write_rfc3339(out);
        out.push(b'"');
    }
    if rec.timestamp_inferred {
        out.extend_from_slice(b",\"timestamp_inferred\":true");
    }
    if rec.timestamp_estimated {
        out.extend_from_slice(b",\"timestamp_estimated\":true");
    }
    if let Some(l) = rec.level {
        sep(out);
        out.extend_from_slice(level_member(l));
    }
    sep(out);
    out.extend_from_slice(b"\"message\":");
    write_str(out, rec.message);
    out.push(b',');
    out.extend_from_slice(rec.file.json_members());
    out.extend_from_slice(b",\"offset\":");
    num(out, rec.offset);
    let ids = rec.ids;
    id(out, b",\"node_id\":\"", &ids.node_id);
    id(out, b",\"job_id\":\"", &ids.job_id);
    id(out, b",\"worker_id\":\"", &ids.worker_id);
    id(out, b",\"actor_id\":\"", &ids.actor_id);
    id(out, b",\"task_id\":\"", &ids.task_id);
    if let Some(p) = rec.pid {
        out.extend_from_slice(b",\"pid\":");
        num(out, p as u64);
    }
    opt_str(out, b",\"task_name\":", rec.task_name);
    opt_str(out, b",\"actor_name\":", rec.actor_name);
    if !rec.fields.is_empty() {
        write_fields(out, rec.fields);
    }
    if rec.truncated {
        out.extend_from_slice(b",\"truncated\":true");
    }
    out.extend_from_slice(b"}\n");
}

/// The `,"fields":{…}` member.
fn write_fields(out: &mut Vec<u8>, fields: &Fields<'_>) {
    out.extend_from_slice(b",\"fields\":");
    let mut open = b'{';
    for fld in fields.iter() {
        out.push(open);
        open = b',';
        write_str(out, fld.key);
        out.push(b':');
        match fld.value {
            FieldValue::Str(s) => write_str(out, s),
            FieldValue::Json(j) => out.extend_from_slice(j.as_bytes()),
        }
    }
    out.push(b'}');
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

    #[test]
    fn next_escape_matches_bytewise() {
        for len in 0..50 {
            for at in 0..=len {
                let mut b = vec![b'a'; len];
                if at < len {
                    b[at] = b'"';
                }
                for from in 0..=len {
                    let want = b[from..].iter().position(|&c| ESCAPE[c as usize]).map(|p| p + from);
                    assert_eq!(next_escape(&b, from), want, "len {len} at {at} from {from}");
                }
            }
        }
    }
}
