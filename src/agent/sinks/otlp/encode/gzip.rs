//! A gzip writer that compresses only what the encoder knows repeats.
//!
//! An OTLP `LogRecord` carries every attribute of its record: the ids, the
//! component, session, file name and path, pid. From one record of a file to the
//! next those are the same bytes, and they are three quarters of the body (906 of
//! the ~1,200 bytes of a record of a typical Ray tree, whose line is ~220). A
//! general compressor (zlib's fastest level) spends 40% of the agent's CPU finding
//! those repeats by hashing every position. The encoder already knows where they
//! are: it compares each record's attributes with those of the last record of the
//! same file ([`Copy`]). This writer emits each known repeat as a deflate match and
//! everything else (the message, times, offsets, record ids) as stored (raw)
//! blocks: a memcpy, and a CRC-32 over the whole body.
//!
//! The output is plain RFC 1951/1952 gzip, readable by any decoder; it is larger
//! than zlib's (the text is not entropy-coded), about the size of the logs
//! themselves. `compression_level` picks zlib for fewer bytes at more CPU.
//!
//! Blocks: a stored block for each run of literals (at most 65,535 bytes), a block
//! with the fixed Huffman codes of RFC 1951 §3.2.6 for each match, and an empty
//! final stored block.

/// `len` bytes at `at` of the body are the bytes `dist` before them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Copy {
    pub at: usize,
    pub len: usize,
    pub dist: usize,
}

/// Deflate's window: a match reaches at most this far back.
pub const WINDOW: usize = 32 * 1024;
/// Shorter repeats cost more as a match block than as literals.
pub const MIN_COPY: usize = 16;
const MAX_MATCH: usize = 258;
const MAX_STORED: usize = 65_535;

/// Writes `raw` gzipped into `out`, with `copies` (in order, not overlapping, each
/// within [`WINDOW`] and at least 3 bytes, as [`copies_ok`] checks in debug builds).
pub fn write(raw: &[u8], copies: &[Copy], out: &mut Vec<u8>) {
    debug_assert!(copies_ok(raw, copies));
    // ID1 ID2, deflate, no flags, no mtime, no extra flags, OS unknown.
    out.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff]);
    let mut w = Bits { out, acc: 0, n: 0 };
    let mut at = 0;
    for c in copies {
        w.stored(&raw[at..c.at]);
        w.matches(c.len, c.dist);
        at = c.at + c.len;
    }
    w.stored(&raw[at..]);
    // The final block: stored and empty.
    w.put(1, 3);
    w.align();
    w.out.extend_from_slice(&[0, 0, 0xff, 0xff]);
    let crc = crc32fast::hash(raw);
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&(raw.len() as u32).to_le_bytes());
}

/// Whether `copies` are in order, apart, in the window and true of `raw`.
pub fn copies_ok(raw: &[u8], copies: &[Copy]) -> bool {
    let mut end = 0;
    copies.iter().all(|c| {
        let ok = c.at >= end
            && c.len >= 3
            && (1..=WINDOW).contains(&c.dist)
            && c.dist <= c.at
            && c.at + c.len <= raw.len()
            && (0..c.len).all(|i| raw[c.at + i] == raw[c.at + i - c.dist]);
        end = c.at + c.len;
        ok
    })
}

/// Deflate's bit stream: least significant bit first.
struct Bits<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits<'_> {
    fn put(&mut self, bits: u64, n: u32) {
        debug_assert!(n <= 32 && bits < 1 << n);
        self.acc |= bits << self.n;
        self.n += n;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Pads to a byte boundary (stored blocks start on one).
    fn align(&mut self) {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        (self.acc, self.n) = (0, 0);
    }

    /// Non-final stored blocks holding `lit`.
    fn stored(&mut self, lit: &[u8]) {
        for chunk in lit.chunks(MAX_STORED) {
            self.put(0, 3);
            self.align();
            let n = chunk.len() as u16;
            self.out.extend_from_slice(&n.to_le_bytes());
            self.out.extend_from_slice(&(!n).to_le_bytes());
            self.out.extend_from_slice(chunk);
        }
    }

    /// A non-final block of fixed codes: matches of `len` in all at `dist`.
    fn matches(&mut self, mut len: usize, dist: usize) {
        self.put(0b010, 3);
        while len > 0 {
            // A match is 3 to 258 bytes: never leave 1 or 2 for the last one.
            let take = if len <= MAX_MATCH {
                len
            } else if len - MAX_MATCH < 3 {
                len - 3
            } else {
                MAX_MATCH
            };
            self.length(take);
            self.distance(dist);
            len -= take;
        }
        // End of block: symbol 256, seven zero bits.
        self.put(0, 7);
    }

    fn length(&mut self, len: usize) {
        let (sym, extra, bits) = length_code(len);
        // Fixed codes: 257..=279 are 7 bits (sym - 256), 280..=287 8 bits (0xC0 + sym - 280).
        let (code, n) = if sym < 280 { (sym - 256, 7) } else { (0xC0 + sym - 280, 8) };
        self.put(reverse(code, n) as u64, n);
        self.put(extra as u64, bits);
    }

    fn distance(&mut self, dist: usize) {
        let (sym, extra, bits) = distance_code(dist);
        self.put(reverse(sym, 5) as u64, 5);
        self.put(extra as u64, bits);
    }
}

/// Huffman codes are sent most significant bit first.
fn reverse(code: u32, n: u32) -> u32 {
    code.reverse_bits() >> (32 - n)
}

/// Length `len` (3..=258): its symbol, the extra bits' value and their count.
fn length_code(len: usize) -> (u32, u32, u32) {
    if len == MAX_MATCH {
        return (285, 0, 0);
    }
    let v = len as u32 - 3;
    if v < 8 {
        return (257 + v, 0, 0);
    }
    // Groups of four symbols per extra bit: 265.. take 1 bit, 269.. 2, and so on.
    let bits = 31 - v.leading_zeros() - 2;
    let sym = 257 + 4 * (bits + 1) + ((v >> bits) & 3);
    (sym, v & ((1 << bits) - 1), bits)
}

/// Distance `dist` (1..=32768): its symbol, the extra bits' value and their count.
fn distance_code(dist: usize) -> (u32, u32, u32) {
    let v = dist as u32 - 1;
    if v < 4 {
        return (v, 0, 0);
    }
    let bits = 31 - v.leading_zeros() - 1;
    let sym = 2 * (bits + 1) + ((v >> bits) & 1);
    (sym, v & ((1 << bits) - 1), bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn gunzip(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(body).read_to_end(&mut out).expect("valid gzip");
        out
    }

    #[test]
    fn length_and_distance_codes_follow_rfc_1951() {
        // Spot values from the tables of RFC 1951 §3.2.5.
        assert_eq!(length_code(3), (257, 0, 0));
        assert_eq!(length_code(10), (264, 0, 0));
        assert_eq!(length_code(11), (265, 0, 1));
        assert_eq!(length_code(12), (265, 1, 1));
        assert_eq!(length_code(19), (269, 0, 2));
        assert_eq!(length_code(34), (272, 3, 2));
        assert_eq!(length_code(35), (273, 0, 3));
        assert_eq!(length_code(130), (280, 15, 4));
        assert_eq!(length_code(131), (281, 0, 5));
        assert_eq!(length_code(257), (284, 30, 5));
        assert_eq!(length_code(258), (285, 0, 0));
        assert_eq!(distance_code(1), (0, 0, 0));
        assert_eq!(distance_code(4), (3, 0, 0));
        assert_eq!(distance_code(5), (4, 0, 1));
        assert_eq!(distance_code(8), (5, 1, 1));
        assert_eq!(distance_code(9), (6, 0, 2));
        assert_eq!(distance_code(24577), (29, 0, 13));
        assert_eq!(distance_code(32768), (29, 8191, 13));
    }

    #[test]
    fn every_length_and_distance_round_trips_through_a_real_decoder() {
        let mut raw: Vec<u8> = (0..WINDOW + 1).map(|i| (i * 7 % 251) as u8).collect();
        let mut copies = Vec::new();
        for (len, dist) in [(3, 1), (4, 2), (258, 258), (259, 3), (260, 100), (261, 7), (1000, WINDOW), (17, 5)] {
            let at = raw.len();
            for i in 0..len {
                let b = raw[at + i - dist];
                raw.push(b);
            }
            copies.push(Copy { at, len, dist });
            raw.extend_from_slice(b"literal run between copies");
        }
        assert!(copies_ok(&raw, &copies));
        let mut out = Vec::new();
        write(&raw, &copies, &mut out);
        assert_eq!(gunzip(&out), raw);
        assert!(out.len() < raw.len(), "the copies were sent as matches");
    }

    #[test]
    fn bodies_without_copies_and_empty_ones_are_valid_gzip() {
        for raw in [Vec::new(), b"x".to_vec(), vec![0xAB; 3 * MAX_STORED + 17]] {
            let mut out = Vec::new();
            write(&raw, &[], &mut out);
            assert_eq!(gunzip(&out), raw);
        }
    }

    #[test]
    fn a_false_copy_is_caught() {
        let raw = b"abcdefabcdeX";
        assert!(copies_ok(raw, &[Copy { at: 6, len: 5, dist: 6 }]));
        assert!(!copies_ok(raw, &[Copy { at: 6, len: 6, dist: 6 }]));
        assert!(!copies_ok(raw, &[Copy { at: 6, len: 2, dist: 6 }]));
    }
}
