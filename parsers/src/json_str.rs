//! JSON string escaping, on its own so that both the NDJSON writer ([`crate::ndjson`])
//! and the members a [`crate::FileMeta`] renders once can use it without depending on
//! each other: escaping runs for every string of every record, so it scans for the
//! bytes that need it many at a time and copies the runs between them whole.

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
