//! CRC-32 (gzip's) of bytes already summed once: a stream's CRC carried past a
//! piece whose own CRC is kept, without reading the piece again.
//!
//! The gzip writer ([`crate::agent::sinks::gzip`]) must sum every byte of a body,
//! and most of an OTLP body is the runs of attributes a record repeats from the
//! last record of its file: the same few hundred bytes, summed again for every
//! record (a twentieth of the OTLP sink's CPU). A CRC is linear, so the CRC of a
//! stream followed by piece `B` is the stream's CRC times `x^(8·|B|)` modulo the
//! polynomial, plus `B`'s own CRC (zlib's `crc32_combine`). [`Piece`] keeps `B`'s
//! CRC and that power, computed once while `B` stays the same; [`Piece::append`]
//! is then one carry-less multiplication (`pclmulqdq` where the CPU has it) and
//! four table steps, whatever `B`'s length.

/// The reflected CRC-32 polynomial (bit 31 is `x^0`).
const POLY: u32 = 0xedb8_8320;
/// `x^0` in the reflected form.
const ONE: u32 = 1 << 31;

/// Bytes whose CRC-32 is known: their CRC and `x^(8·len)` mod the polynomial.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    crc: u32,
    shift: u32,
}

impl Piece {
    pub fn of(bytes: &[u8]) -> Piece {
        Piece { crc: crc32fast::hash(bytes), shift: x_pow_8n(bytes.len() as u64) }
    }

    /// The CRC of the bytes summed by `crc`, followed by this piece's.
    pub fn append(&self, crc: u32) -> u32 {
        mul(crc, self.shift) ^ self.crc
    }
}

/// The CRC of bytes summed by `crc` followed by `bytes`.
pub fn update(crc: u32, bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new_with_initial(crc);
    h.update(bytes);
    h.finalize()
}

/// The CRC of bytes summed by `crc` followed by `len` bytes summed by `next`.
pub fn combine(crc: u32, next: u32, len: u64) -> u32 {
    Piece { crc: next, shift: x_pow_8n(len) }.append(crc)
}

/// `x^(8·n)` mod the polynomial.
fn x_pow_8n(n: u64) -> u32 {
    if n < 64 * 64 {
        // Most pieces: one product of two table entries.
        return mul(LOW[(n % 64) as usize], HIGH[(n / 64) as usize]);
    }
    let (mut p, mut n, mut k) = (ONE, n, 0);
    while n > 0 {
        if n & 1 == 1 {
            p = mul(p, SQUARES[k]);
        }
        n >>= 1;
        k += 1;
    }
    p
}

/// `x^(8·i)` and `x^(8·64·i)` mod the polynomial, for `i` below 64.
static LOW: [u32; 64] = powers(SQUARES[0]);
static HIGH: [u32; 64] = powers(SQUARES[6]);

/// `1, x, x^2, …, x^63` for `x`.
const fn powers(x: u32) -> [u32; 64] {
    let mut t = [ONE; 64];
    let mut i = 1;
    while i < 64 {
        t[i] = mul_const(t[i - 1], x);
        i += 1;
    }
    t
}

/// `x^(8·2^k)` mod the polynomial for each `k`.
static SQUARES: [u32; 64] = {
    // `x^1`, squared three times: `x^8`.
    let mut sq = 1 << 30;
    let mut i = 0;
    while i < 3 {
        sq = mul_const(sq, sq);
        i += 1;
    }
    let mut t = [0u32; 64];
    let mut k = 0;
    while k < 64 {
        t[k] = sq;
        sq = mul_const(sq, sq);
        k += 1;
    }
    t
};

/// [`mul`] bit by bit (zlib's `multmodp`), for the tables.
const fn mul_const(a: u32, mut b: u32) -> u32 {
    let (mut m, mut p) = (ONE, 0);
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        m >>= 1;
        b = if b & 1 == 1 { (b >> 1) ^ POLY } else { b >> 1 };
    }
    p
}

/// `a·b` mod the polynomial, both reflected.
fn mul(a: u32, b: u32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("pclmulqdq") {
        // SAFETY: the CPU has the instruction (checked just above).
        return unsafe { mul_x86(a, b) };
    }
    reduce(clmul_soft(a, b))
}

/// [`mul`] with the instruction: one call, inlined within.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "pclmulqdq")]
unsafe fn mul_x86(a: u32, b: u32) -> u32 {
    use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_cvtsi128_si64, _mm_cvtsi64_si128};
    let r = _mm_clmulepi64_si128(_mm_cvtsi64_si128(a as i64), _mm_cvtsi64_si128(b as i64), 0);
    reduce(_mm_cvtsi128_si64(r) as u64)
}

/// The carry-less product `v` of two reflected values, mod the polynomial.
#[inline(always)]
fn reduce(v: u64) -> u32 {
    // The product's degree `d` lands at bit `62 - d`: shifted up one, bit 63 is `x^0`
    // and the low half holds `x^32..x^63`, which four zero bytes through the CRC
    // reduce (slicing by four: the four lookups do not wait on each other).
    let v = v << 1;
    let low = v as u32;
    let t = &TABLES;
    (v >> 32) as u32
        ^ t[3][(low & 0xff) as usize]
        ^ t[2][(low >> 8 & 0xff) as usize]
        ^ t[1][(low >> 16 & 0xff) as usize]
        ^ t[0][(low >> 24) as usize]
}

/// The carry-less product of `a` and `b`, bit by bit.
fn clmul_soft(a: u32, b: u32) -> u64 {
    (0..32).fold(0u64, |p, i| p ^ ((b as u64) << i) & 0u64.wrapping_sub((a as u64 >> i) & 1))
}

/// `TABLES[k][b]`: the CRC state `b` after `k + 1` zero bytes (`TABLES[0]` is the
/// byte-at-a-time CRC table).
static TABLES: [[u32; 256]; 4] = {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ POLY } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 4 {
        let mut i = 0;
        while i < 256 {
            let c = t[k - 1][i];
            t[k][i] = (c >> 8) ^ t[0][(c & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_carried_past_a_piece_has_the_crc_of_both() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for (cut, end) in [
            (0, 0),
            (0, 7),
            (3, 3),
            (1, 2),
            (100, 357),
            (17, 4999),
            (2500, 5000),
            (4999, 5000),
            (10, 70_000),
            (1, 300_000),
            (65_536, 200_001),
        ] {
            let (a, b) = (&data[..cut], &data[cut..end]);
            let want = crc32fast::hash(&data[..end]);
            assert_eq!(Piece::of(b).append(crc32fast::hash(a)), want, "{cut}..{end}");
            assert_eq!(update(crc32fast::hash(a), b), want, "update {cut}..{end}");
            assert_eq!(combine(crc32fast::hash(a), crc32fast::hash(b), b.len() as u64), want, "{cut}..{end}");
        }
    }

    #[test]
    fn both_products_are_zlibs() {
        assert_eq!(clmul_soft(0b101, 0b11), 0b1111);
        let values = [0, 1, ONE, 1 << 30, u32::MAX, 0x8000_0001, 0x1234_5678, 0xdead_beef, 0x0bad_f00d];
        for a in values {
            for b in values {
                assert_eq!(mul(a, b), mul_const(a, b), "{a:x} {b:x}");
                assert_eq!(reduce(clmul_soft(a, b)), mul_const(a, b), "{a:x} {b:x}");
            }
        }
    }
}
