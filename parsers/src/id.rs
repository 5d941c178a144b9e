//! Ray ids: small hex strings held on the stack, and what their layout implies.
//!
//! Ray ids are hex renderings of little binary blobs (see the crate's `FORMATS.md`):
//! JobID 4 bytes, ActorID 16 (12 unique + JobID), TaskID 24 (8 unique + ActorID),
//! WorkerID/NodeID 28 (random). An id made only of `f` is Ray's nil value and is
//! treated as absent everywhere. [`Id`] is `Copy` and never allocates, so the hot
//! path can pass ids around freely.

use std::fmt;

/// Hex length of a JobID.
pub const JOB_HEX: usize = 8;
/// Hex length of an ActorID.
pub const ACTOR_HEX: usize = 32;
/// Hex length of a TaskID.
pub const TASK_HEX: usize = 48;
/// Hex length of a WorkerID or NodeID.
pub const WORKER_HEX: usize = 56;
/// Longest id kept (WorkerID/NodeID); longer hex (LeaseID) is not an id we tag.
const MAX_HEX: usize = 56;

/// Maps hex digits (either case) to lowercase; 0 for anything else.
static LOWER_HEX: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        let c = i as u8;
        t[i] = match c {
            b'0'..=b'9' | b'a'..=b'f' => c,
            b'A'..=b'F' => c + 32,
            _ => 0,
        };
        i += 1;
    }
    t
};

const LO: u64 = 0x0101_0101_0101_0101;
const HI: u64 = 0x8080_8080_8080_8080;

/// True when all 8 bytes of `w` are `0-9` or `a-f` (SWAR: no lane can carry into
/// the next because every lane is below 0x80 before the additions).
#[inline]
pub(crate) fn word_is_lower_hex(w: u64) -> bool {
    hex_lanes(w) == HI
}

/// The high bit of each byte lane of `w` that holds `0-9` or `a-f`.
#[inline]
pub(crate) fn hex_lanes(w: u64) -> u64 {
    // Lanes at or above 0x80 are never hex; clearing their high bit first keeps
    // the additions below from carrying into the next lane.
    let ascii = !w & HI;
    let v = w & !HI;
    let ge = |c: u8| v.wrapping_add(LO * (0x80 - c as u64));
    let digit = ge(b'0') & !ge(b'9' + 1);
    let letter = ge(b'a') & !ge(b'f' + 1);
    (digit | letter) & ascii & HI
}

/// Parses an id that is already lowercase (what Ray writes) a word or a vector at
/// a time. `None` means "use the slow path"; `Some(None)` means "valid hex, but nil".
#[inline]
fn parse_lower_fast(s: &[u8], buf: &mut [u8; MAX_HEX]) -> Option<Option<Id>> {
    #[cfg(target_arch = "x86_64")]
    if s.len() >= 16 {
        return sse2::parse_lower(s, buf);
    }
    if s.len() % 8 != 0 {
        return None;
    }
    let mut not_f = false;
    for (i, c) in s.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(c.try_into().ok()?);
        if !word_is_lower_hex(w) {
            return None;
        }
        not_f |= w != LO * b'f' as u64;
        buf[i * 8..i * 8 + 8].copy_from_slice(c);
    }
    Some(not_f.then_some(Id { len: s.len() as u8, buf: *buf }))
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    //! Sixteen bytes per step with SSE2, which every x86_64 CPU has: most ids are
    //! 32 to 56 characters and parsed several times per record.
    use super::{Id, MAX_HEX};
    use std::arch::x86_64::*;

    /// [`super::parse_lower_fast`] for `16 <= s.len() <= MAX_HEX`: checks and copies
    /// 16-byte blocks, the last one overlapping the one before instead of a tail.
    #[inline]
    pub fn parse_lower(s: &[u8], buf: &mut [u8; MAX_HEX]) -> Option<Option<Id>> {
        let n = s.len();
        debug_assert!((16..=MAX_HEX).contains(&n));
        // SAFETY: SSE2 is part of the x86_64 baseline; every load and store covers 16
        // bytes at `o <= n - 16`, inside `s` and, as `n <= MAX_HEX`, inside `buf`.
        unsafe {
            let mut ok = _mm_set1_epi8(-1);
            let mut all_f = _mm_set1_epi8(-1);
            let mut at = 0;
            while at < n {
                let o = at.min(n - 16);
                let v = _mm_loadu_si128(s.as_ptr().add(o) as *const __m128i);
                // Unsigned range checks `c - lo <= hi - lo` as `min(x, k) == x`.
                let d = _mm_sub_epi8(v, _mm_set1_epi8(b'0' as i8));
                let l = _mm_sub_epi8(v, _mm_set1_epi8(b'a' as i8));
                let digit = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d);
                let letter = _mm_cmpeq_epi8(_mm_min_epu8(l, _mm_set1_epi8(5)), l);
                ok = _mm_and_si128(ok, _mm_or_si128(digit, letter));
                all_f = _mm_and_si128(all_f, _mm_cmpeq_epi8(v, _mm_set1_epi8(b'f' as i8)));
                _mm_storeu_si128(buf.as_mut_ptr().add(o) as *mut __m128i, v);
                at += 16;
            }
            if _mm_movemask_epi8(ok) != 0xffff {
                return None;
            }
            Some((_mm_movemask_epi8(all_f) != 0xffff).then_some(Id { len: n as u8, buf: *buf }))
        }
    }
}

/// A lowercase hex id of at most 56 characters, stored inline.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Id {
    len: u8,
    buf: [u8; MAX_HEX],
}

impl Id {
    /// Parses `s` as an id of exactly `len` hex characters. Uppercase is folded to
    /// lowercase; nil ids (all `f`) and anything else return `None`.
    #[inline]
    pub fn parse_len(s: &[u8], len: usize) -> Option<Id> {
        if s.len() != len {
            return None;
        }
        Id::parse(s)
    }

    /// Parses `s` as a hex id of any length up to 56; `None` when empty, too long,
    /// not hex, or nil (all `f`, which is also how `NIL_ID` renders).
    #[inline]
    pub fn parse(s: &[u8]) -> Option<Id> {
        if s.is_empty() || s.len() > MAX_HEX {
            return None;
        }
        let mut buf = [0u8; MAX_HEX];
        if let Some(id) = parse_lower_fast(s, &mut buf) {
            return id;
        }
        let mut bad = 0u8;
        let mut not_f = 0u8;
        for (dst, &b) in buf.iter_mut().zip(s) {
            let c = LOWER_HEX[b as usize];
            bad |= (c == 0) as u8;
            not_f |= (c != b'f') as u8;
            *dst = c;
        }
        if bad != 0 || not_f == 0 {
            return None;
        }
        Some(Id { len: s.len() as u8, buf })
    }

    /// Builds an id from raw bytes (as found base64-encoded in export events).
    pub fn from_bytes(bytes: &[u8]) -> Option<Id> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        if bytes.is_empty() || bytes.len() * 2 > MAX_HEX {
            return None;
        }
        let mut buf = [0u8; MAX_HEX];
        for (i, b) in bytes.iter().enumerate() {
            buf[2 * i] = HEX[(b >> 4) as usize];
            buf[2 * i + 1] = HEX[(b & 15) as usize];
        }
        Id::parse(&buf[..bytes.len() * 2])
    }

    /// The id as a `&str` (always ASCII lowercase hex).
    #[inline]
    pub fn as_str(&self) -> &str {
        let b = &self.buf[..self.len as usize];
        debug_assert!(b.is_ascii());
        // SAFETY: every constructor stores only ASCII hex digits (checked by `parse`
        // or produced from a nibble table), so the bytes are valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(b) }
    }

    /// The id's ASCII bytes.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    /// Appends the id to `out`. Copies the whole fixed-size buffer and trims, which
    /// compiles to a few vector moves instead of a variable-length `memcpy` call.
    #[inline]
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.buf);
        out.truncate(out.len() - (MAX_HEX - self.len as usize));
    }

    /// Number of hex characters.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Never true for a constructed id; present for API symmetry with `len`.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The last `n` characters, unless they are nil. No re-validation: they are hex.
    fn suffix(&self, n: usize) -> Option<Id> {
        let l = self.len as usize;
        if l < n || self.buf[l - n..l].iter().all(|&c| c == b'f') {
            return None;
        }
        let mut buf = [0u8; MAX_HEX];
        buf[..n].copy_from_slice(&self.buf[l - n..l]);
        Some(Id { len: n as u8, buf })
    }

    /// The job an actor or task id names: its last 8 hex characters. (A driver's
    /// worker id names its job too, at the front: [`Id::job_of_driver_worker`].)
    pub fn job_of_actor_or_task(&self) -> Option<Id> {
        matches!(self.len(), ACTOR_HEX | TASK_HEX).then(|| self.suffix(JOB_HEX)).flatten()
    }

    /// The actor a task id names: its last 32 hex characters, unless the actor's
    /// unique part is nil (a normal task, not an actor task).
    pub fn actor_of_task(&self) -> Option<Id> {
        if self.len() != TASK_HEX {
            return None;
        }
        let unique = &self.buf[16..16 + 24];
        if unique.iter().all(|&b| b == b'f') {
            return None;
        }
        self.suffix(ACTOR_HEX)
    }

    /// A driver's worker id is its job id followed by `f` padding
    /// (`01000000ffff…`); returns that job id.
    pub fn job_of_driver_worker(&self) -> Option<Id> {
        if self.len() != WORKER_HEX || !self.buf[JOB_HEX..WORKER_HEX].iter().all(|&b| b == b'f') {
            return None;
        }
        Id::parse(&self.buf[..JOB_HEX])
    }
}

/// An [`Id`] packed two hex digits to a byte, its length in byte 28: 32 bytes where
/// an `Id` takes 57, for tables of a million workers ([`crate::workers`]).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PackedId([u8; 32]);

impl std::hash::Hash for PackedId {
    #[inline]
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(&self.0);
    }
}

impl fmt::Debug for PackedId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PackedId({:02x?})", &self.0[..29])
    }
}

impl Id {
    /// Packs the id (lossless: the digits and the length), a word of 8 digits at a
    /// time. Digits past the length are zero bytes, which pack to zero.
    #[inline]
    pub fn packed(&self) -> PackedId {
        let mut out = [0u8; 32];
        for (i, c) in self.buf.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            // Each lane's digit value: `0`-`9` are 0x30-0x39, `a`-`f` 0x61-0x66 (bit 6 set).
            let nib = (w & (LO * 0x0f)) + ((w >> 6) & LO) * 9;
            // Even lanes: a digit in the high nibble, the next one in the low.
            let pairs = ((nib << 4) | (nib >> 8)) & 0x00ff_00ff_00ff_00ff;
            let half = (pairs | (pairs >> 8)) & 0x0000_ffff_0000_ffff;
            let four = (half | (half >> 16)) as u32;
            out[i * 4..i * 4 + 4].copy_from_slice(&four.to_le_bytes());
        }
        out[28] = self.len;
        PackedId(out)
    }
}

impl std::hash::Hash for Id {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write(&self.buf[..self.len as usize]);
    }
}

/// A fast hasher for maps keyed by [`Id`]: a multiply-xor over 8-byte words, then a
/// full avalanche in `finish`. Ray's ids are random hex, but job ids count up and a
/// test harness may number workers: without the final mix, ids that differ only in
/// their last characters (the high bytes of the last word) differ only in the high
/// bits of the state, and the map's bucket index (its low bits) is the same for all
/// of them — one bucket, O(n) per insert. SipHash's DoS resistance buys nothing here.
#[derive(Default, Clone, Copy)]
pub struct IdHasher(u64);

impl IdHasher {
    #[inline]
    fn mix(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        // Whole words are loaded directly (a padded copy per word would be a memcpy
        // call each); a short tail is zero-padded, as if by `chunks(8)`.
        let mut words = bytes.chunks_exact(8);
        for c in &mut words {
            self.mix(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        }
        let tail = words.remainder();
        if !tail.is_empty() {
            let mut w = [0u8; 8];
            w[..tail.len()].copy_from_slice(tail);
            self.mix(u64::from_le_bytes(w));
        }
    }

    /// MurmurHash3's `fmix64`: every input bit reaches every output bit.
    #[inline]
    fn finish(&self) -> u64 {
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 33;
        x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        x ^ (x >> 33)
    }
}

/// `HashMap` state for [`Id`] keys.
pub type IdMapState = std::hash::BuildHasherDefault<IdHasher>;

impl fmt::Debug for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Id({})", self.as_str())
    }
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Decodes standard base64 (with or without padding) into `out`; returns the
/// number of bytes written, or `None` on an invalid character or overflow.
pub fn base64_decode(input: &[u8], out: &mut [u8]) -> Option<usize> {
    fn val(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' | b'-' => 62,
            b'/' | b'_' => 63,
            _ => return None,
        } as u32)
    }
    let input = match input.iter().position(|&c| c == b'=') {
        Some(p) => &input[..p],
        None => input,
    };
    let (mut acc, mut bits, mut n) = (0u32, 0u32, 0usize);
    for &c in input {
        acc = (acc << 6) | val(c)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            *out.get_mut(n)? = (acc >> bits) as u8;
            n += 1;
        }
    }
    Some(n)
}

/// Decodes a base64 protobuf id (export events) to a hex [`Id`].
pub fn id_from_base64(s: &[u8]) -> Option<Id> {
    let mut raw = [0u8; MAX_HEX / 2];
    let n = base64_decode(s, &mut raw)?;
    Id::from_bytes(&raw[..n])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A packed id is its digits two to a byte (as hex-decoding them gives) and its
    /// length: ids of every length, sequential or sharing prefixes, never collide.
    #[test]
    fn packed_ids_are_the_digits_and_the_length() {
        let hex = "0123456789abcdef";
        let mut x: u64 = 7;
        let mut seen = std::collections::HashSet::new();
        for len in 1..=MAX_HEX {
            for i in 0..200u64 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let s: String = match i % 3 {
                    0 => format!("{i:0len$x}"),
                    1 => (0..len).map(|k| hex.as_bytes()[((x >> (k % 60)) & 15) as usize] as char).collect(),
                    _ => format!("{}{i:x}", "0".repeat(len.saturating_sub(format!("{i:x}").len()))),
                };
                let Some(id) = Id::parse(&s.as_bytes()[s.len() - len.min(s.len())..]) else { continue };
                let p = id.packed();
                let digits = id.as_bytes();
                for (k, pair) in digits.chunks(2).enumerate() {
                    let v = |c: u8| (c as char).to_digit(16).unwrap() as u8;
                    let want = (v(pair[0]) << 4) | pair.get(1).map_or(0, |&c| v(c));
                    assert_eq!(p.0[k], want, "{s}: byte {k}");
                }
                assert_eq!(p.0[28] as usize, id.len());
                assert!(p.0[digits.len().div_ceil(2)..28].iter().all(|&b| b == 0), "{s}");
                seen.insert((id, p));
            }
        }
        let ids: std::collections::HashSet<Id> = seen.iter().map(|(i, _)| *i).collect();
        let packed: std::collections::HashSet<PackedId> = seen.iter().map(|(_, p)| *p).collect();
        assert_eq!(ids.len(), packed.len(), "one packed id per id");
        assert!(packed.len() > 10_000);
    }

    #[test]
    fn nil_and_case() {
        assert!(Id::parse(b"ffffffff").is_none());
        assert!(Id::parse(b"FFFF").is_none());
        assert!(Id::parse(b"NIL_ID").is_none());
        assert_eq!(Id::parse(b"01AB0000").unwrap().as_str(), "01ab0000");
        assert_eq!(Id::parse(b"0123456789abcdef").unwrap().as_str(), "0123456789abcdef");
        for bad in [&b"0123456g"[..], b"0123 567", b"/123456:", b"`abcdefa", b"\xff1234567"] {
            assert!(Id::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn layout_derivations() {
        let task = Id::parse(b"d695f922effe6d99750d082651ea8a01532ff64101000000").unwrap();
        assert_eq!(task.actor_of_task().unwrap().as_str(), "750d082651ea8a01532ff64101000000");
        assert_eq!(task.job_of_actor_or_task().unwrap().as_str(), "01000000");
        let normal = Id::parse(b"16310a0f0a45af5cffffffffffffffffffffffff01000000").unwrap();
        assert!(normal.actor_of_task().is_none());
        assert_eq!(normal.job_of_actor_or_task().unwrap().as_str(), "01000000");
        let driver = Id::parse(b"01000000ffffffffffffffffffffffffffffffffffffffffffffffff").unwrap();
        assert_eq!(driver.job_of_driver_worker().unwrap().as_str(), "01000000");
    }

    #[test]
    fn base64_ids() {
        assert_eq!(id_from_base64(b"AQAAAA==").unwrap().as_str(), "01000000");
        assert_eq!(id_from_base64(b"G364jcMdJAL2/CeoAQAAAA==").unwrap().as_str(), "1b7eb88dc31d2402f6fc27a801000000");
        assert!(id_from_base64(b"").is_none());
        assert!(id_from_base64(b"!!").is_none());
    }

    /// A million structured ids (counting up, sharing a prefix, sharing a suffix)
    /// spread over a table's buckets like random ones: the bucket index is the
    /// hash's low bits (hashbrown's), and its 7-bit tag the high ones.
    #[test]
    fn structured_ids_spread_over_the_buckets() {
        use std::hash::BuildHasher;
        const N: usize = 1 << 20;
        let layouts: [fn(usize) -> String; 4] = [
            |i| format!("{i:056x}"),
            |i| format!("{i:08x}"),
            |i| format!("{:0>56}", format!("{i:x}ffffffff")),
            |i| format!("{i:032x}01000000"),
        ];
        for (n, layout) in layouts.iter().enumerate() {
            let (mut low, mut tag) = (vec![false; N], [0usize; 128]);
            for i in 0..N {
                let id = Id::parse(layout(i).as_bytes()).expect("hex");
                let h = IdMapState::default().hash_one(id);
                low[h as usize & (N - 1)] = true;
                tag[(h >> 57) as usize] += 1;
            }
            // N keys thrown at random into N buckets fill 1 - 1/e of them (63.2 %).
            let used = low.iter().filter(|&&u| u).count() as f64 / N as f64;
            assert!(used > 0.62, "layout {n}: {:.1} % of buckets used", used * 100.0);
            let (min, max) = (tag.iter().min().unwrap(), tag.iter().max().unwrap());
            assert!(*min > N / 128 * 9 / 10 && *max < N / 128 * 11 / 10, "layout {n}: tags {min}..{max}");
        }
    }
}
