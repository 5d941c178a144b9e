//! A gzip writer that compresses only what the encoder knows repeats, written as
//! the encoder goes.
//!
//! Used by the OTLP sink ([`crate::agent::sinks::otlp::encode`]) and the
//! Elasticsearch sink ([`crate::agent::sinks::elasticsearch::runs`]).
//!
//! An OTLP `LogRecord` carries every attribute of its record: the ids, the
//! component, session, file name and path, pid. From one record of a file to the
//! next those are the same bytes, and they are three quarters of the body (906 of
//! the ~1,200 bytes of a record of a typical Ray tree, whose line is ~220). A
//! general compressor (zlib's fastest level) spends 40% of the agent's CPU finding
//! those repeats by hashing every position. The encoder already knows them: a
//! record whose file's attributes are those of the last record of the same file
//! says so ([`GzWriter::repeat`]), and they go out as a deflate match without ever
//! being written out; everything else (the message, times, offsets, record ids) is
//! written straight into stored (raw) blocks ([`GzWriter::lit`]). What is left is a
//! CRC-32 over the whole body and the bytes themselves; a caller that keeps the CRC
//! of what it repeats ([`GzWriter::repeat_known`], [`crate::agent::sinks::crc`])
//! saves reading the repeats for it too.
//!
//! The output is plain RFC 1951/1952 gzip, readable by any decoder; it is larger
//! than zlib's (the text is not entropy-coded), about the size of the logs
//! themselves. `compression_level` picks zlib for fewer bytes at more CPU.
//!
//! Blocks: a stored block for each run of literals (at most 65,535 bytes), a block
//! with the fixed Huffman codes of RFC 1951 §3.2.6 for each run of matches, and an
//! empty final stored block. The request's head (whose lengths count every record)
//! is written last, into room left before the records, as stored blocks of its own.

use crate::agent::sinks::crc::{self, Piece};

/// Deflate's window: a match reaches at most this far back.
pub const WINDOW: usize = 32 * 1024;
/// Shorter repeats cost more as a match block than as literals.
pub const MIN_COPY: usize = 16;
const MAX_MATCH: usize = 258;
const MAX_STORED: usize = 65_535;
/// A stored block this long is closed at the next [`GzWriter::lit`], so blocks
/// rarely need splitting.
const CLOSE_STORED: usize = 32 * 1024;
/// gzip's header: ID1 ID2, deflate, no flags, no mtime, no extra flags, OS unknown.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// Room [`GzWriter::finish`] needs before the first record for a head of `n` bytes.
pub fn front_for(n: usize) -> usize {
    HEADER.len() + n + 5 * n.div_ceil(MAX_STORED).max(1)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Block {
    /// Between blocks, on a byte boundary.
    None,
    /// A stored block whose data starts at `GzWriter::data`.
    Stored,
    /// A block of fixed codes, its end not written yet.
    Fixed,
}

/// A gzip stream written as the encoder goes. The records go after `front` bytes
/// left free for what precedes them (the request's head, whose lengths are known
/// only at the end: [`GzWriter::finish`]).
pub struct GzWriter {
    bits: Bits,
    block: Block,
    /// Where the open stored block's data starts in `bits.out`.
    data: usize,
    front: usize,
    /// The CRC-32 of the closed blocks and matches.
    crc: u32,
    /// Uncompressed bytes of the closed blocks and matches.
    done: usize,
    /// The match being written (length, distance): repeats of one distance in a
    /// row are one match.
    pending: (usize, usize),
}

impl GzWriter {
    pub fn new(mut out: Vec<u8>, front: usize) -> GzWriter {
        out.clear();
        out.resize(front, 0);
        let bits = Bits { out, acc: 0, n: 0 };
        GzWriter { bits, block: Block::None, data: 0, front, crc: 0, done: 0, pending: (0, 0) }
    }

    /// The stream, to append literal bytes to.
    pub fn lit(&mut self) -> &mut Vec<u8> {
        if self.block == Block::Stored && self.bits.out.len() - self.data >= CLOSE_STORED {
            self.close_stored();
        }
        if self.block != Block::Stored {
            if self.block == Block::Fixed {
                self.end_fixed();
            }
            self.bits.put(0, 3);
            self.bits.align();
            self.bits.out.extend_from_slice(&[0; 4]);
            self.data = self.bits.out.len();
            self.block = Block::Stored;
        }
        &mut self.bits.out
    }

    /// Appends `bytes`, which are the bytes written `dist` before: a match. `dist`
    /// within [`WINDOW`] and at least `bytes.len()`; at least 3 bytes, unless they
    /// continue a repeat of the same distance just made (one match of both).
    pub fn repeat(&mut self, bytes: &[u8], dist: usize) {
        self.matched(bytes.len(), dist);
        self.crc = crc::update(self.crc, bytes);
    }

    /// [`GzWriter::repeat`] of bytes whose CRC is known: they are `pieces` one
    /// after the other, and are not read again.
    pub fn repeat_known(&mut self, bytes: &[u8], dist: usize, pieces: &[Piece]) {
        self.matched(bytes.len(), dist);
        let crc = self.crc;
        self.crc = pieces.iter().fold(self.crc, |crc, p| p.append(crc));
        debug_assert_eq!(self.crc, crc::update(crc, bytes), "the pieces are the bytes");
    }

    /// `len` bytes matched at `dist` (the caller sums them after: this closes the
    /// stored block before them).
    fn matched(&mut self, len: usize, dist: usize) {
        debug_assert!((len.max(1)..=WINDOW).contains(&dist) && dist <= self.raw_len());
        debug_assert!(len >= 3 || (self.block == Block::Fixed && self.pending.1 == dist));
        if self.block == Block::Stored {
            self.close_stored();
        }
        if self.block == Block::None {
            self.bits.put(0b010, 3);
            self.block = Block::Fixed;
        }
        match &mut self.pending {
            (pending, d) if *d == dist => *pending += len,
            pending => {
                self.bits.matches(pending.0, pending.1);
                *pending = (len, dist);
            }
        }
        self.done += len;
    }

    /// Ends the open block of fixed codes.
    fn end_fixed(&mut self) {
        let (len, dist) = std::mem::take(&mut self.pending);
        self.bits.matches(len, dist);
        self.bits.end_of_block();
        self.block = Block::None;
    }

    /// Bytes written, before compression.
    pub fn raw_len(&self) -> usize {
        self.done + if self.block == Block::Stored { self.bits.out.len() - self.data } else { 0 }
    }

    /// Ends the open stored block, split in blocks of at most [`MAX_STORED`].
    fn close_stored(&mut self) {
        let out = &mut self.bits.out;
        let n = out.len() - self.data;
        self.crc = crc::update(self.crc, &out[self.data..]);
        self.done += n;
        self.block = Block::None;
        if n <= MAX_STORED {
            stored_len(&mut out[self.data - 4..self.data], n);
            return;
        }
        // Rare (a record of more than 32 KiB): the first block's header byte holds
        // bits of the block before; the next ones are a whole zero byte each.
        let tail = out.split_off(self.data);
        out.truncate(self.data - 4);
        for (i, chunk) in tail.chunks(MAX_STORED).enumerate() {
            if i > 0 {
                out.push(0);
            }
            let at = out.len();
            out.extend_from_slice(&[0; 4]);
            stored_len(&mut out[at..], chunk.len());
            out.extend_from_slice(chunk);
        }
    }

    /// The whole gzip member: `head` (the bytes before the records) in stored blocks
    /// in the free room, then the records, the final block and the trailer.
    /// Returns the buffer and where the member starts in it.
    pub fn finish(mut self, head: &[u8]) -> (Vec<u8>, usize) {
        match self.block {
            Block::Stored => self.close_stored(),
            Block::Fixed => self.end_fixed(),
            Block::None => {}
        }
        // The final block: stored and empty.
        self.bits.put(1, 3);
        self.bits.align();
        self.bits.out.extend_from_slice(&[0, 0, 0xff, 0xff]);
        let mut front = Vec::with_capacity(front_for(head.len()));
        front.extend_from_slice(&HEADER);
        for chunk in head.chunks(MAX_STORED) {
            front.extend_from_slice(&[0; 5]);
            let at = front.len() - 4;
            stored_len(&mut front[at..], chunk.len());
            front.extend_from_slice(chunk);
        }
        assert!(front.len() <= self.front, "room for the head was reserved");
        let crc = crc::combine(crc32fast::hash(head), self.crc, self.done as u64);
        let total = head.len() + self.done;
        let mut out = self.bits.out;
        out.extend_from_slice(&crc.to_le_bytes());
        // ISIZE is the length modulo 2^32.
        out.extend_from_slice(&(total as u32).to_le_bytes());
        let start = self.front - front.len();
        out[start..self.front].copy_from_slice(&front);
        (out, start)
    }
}

/// A stored block's LEN and NLEN.
fn stored_len(at: &mut [u8], n: usize) {
    let n = n as u16;
    at[..2].copy_from_slice(&n.to_le_bytes());
    at[2..4].copy_from_slice(&(!n).to_le_bytes());
}

/// Deflate's bit stream: least significant bit first.
struct Bits {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl Bits {
    /// Appends `n` bits (at most 32); whole 32-bit words go out as they fill.
    #[inline]
    fn put(&mut self, bits: u64, n: u32) {
        debug_assert!(n <= 32 && bits < 1 << n && self.n < 32);
        self.acc |= bits << self.n;
        self.n += n;
        if self.n >= 32 {
            self.out.extend_from_slice(&(self.acc as u32).to_le_bytes());
            self.acc >>= 32;
            self.n -= 32;
        }
    }

    /// Pads to a byte boundary (stored blocks start on one) and writes out every bit.
    fn align(&mut self) {
        while self.n > 0 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n = self.n.saturating_sub(8);
        }
        self.acc = 0;
    }

    /// Matches of `len` in all at `dist`, in the open block of fixed codes: each
    /// match's length and distance codes go out as one group of bits.
    fn matches(&mut self, mut len: usize, dist: usize) {
        debug_assert!(len == 0 || len >= 3, "a match is 3 bytes or more");
        if len == 0 {
            return;
        }
        let (sym, extra, bits) = distance_code(dist);
        let (d, dn) = ((reverse(sym, 5) | extra << 5) as u64, 5 + bits);
        while len > 0 {
            // A match is 3 to 258 bytes: never leave 1 or 2 for the last one.
            let take = if len <= MAX_MATCH {
                len
            } else if len - MAX_MATCH < 3 {
                len - 3
            } else {
                MAX_MATCH
            };
            let (l, ln) = length_bits(take);
            self.put(l | d << ln, ln + dn);
            len -= take;
        }
    }

    /// End of a block of fixed codes: symbol 256, seven zero bits.
    fn end_of_block(&mut self) {
        self.put(0, 7);
    }
}

/// The fixed code of length `len` (3..=258) with its extra bits, and their count
/// (at most 13).
#[inline]
fn length_bits(len: usize) -> (u64, u32) {
    let (bits, n) = LENGTH_BITS[len];
    (bits as u64, n as u32)
}

/// [`length_bits`] of every length, worked out at compile time.
static LENGTH_BITS: [(u16, u8); MAX_MATCH + 1] = {
    let mut t = [(0, 0); MAX_MATCH + 1];
    let mut len = 3;
    while len <= MAX_MATCH {
        let (sym, extra, bits) = length_code(len);
        // Fixed codes: 257..=279 are 7 bits (sym - 256), 280..=287 8 bits (0xC0 + sym - 280).
        let (code, n) = if sym < 280 { (sym - 256, 7) } else { (0xC0 + sym - 280, 8) };
        t[len] = ((reverse(code, n) | extra << n) as u16, (n + bits) as u8);
        len += 1;
    }
    t
};

/// Huffman codes are sent most significant bit first.
const fn reverse(code: u32, n: u32) -> u32 {
    code.reverse_bits() >> (32 - n)
}

/// Length `len` (3..=258): its symbol, the extra bits' value and their count.
const fn length_code(len: usize) -> (u32, u32, u32) {
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
pub(crate) mod tests {
    use super::*;
    use std::io::Read;

    /// `body` decoded by a real gzip decoder (flate2's), which must take it.
    pub(crate) fn gunzip(body: &[u8]) -> Vec<u8> {
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

    /// What to write: literal bytes, or a repeat of `len` bytes from `dist` back.
    enum Op<'a> {
        Lit(&'a [u8]),
        Rep(usize, usize),
    }

    /// The gzip member of `head` then `ops`, checked to be in `front`, and the bytes
    /// it should hold.
    fn write(head: &[u8], ops: &[Op<'_>]) -> (Vec<u8>, Vec<u8>) {
        let front = front_for(head.len());
        let mut w = GzWriter::new(vec![7; 3], front);
        let mut raw = Vec::new();
        for op in ops {
            match *op {
                Op::Lit(b) => {
                    w.lit().extend_from_slice(b);
                    raw.extend_from_slice(b);
                }
                Op::Rep(len, dist) => {
                    let bytes = raw[raw.len() - dist..][..len].to_vec();
                    w.repeat(&bytes, dist);
                    raw.extend_from_slice(&bytes);
                }
            }
            assert_eq!(w.raw_len(), raw.len());
        }
        let (out, start) = w.finish(head);
        assert!(start <= front);
        let mut want = head.to_vec();
        want.extend_from_slice(&raw);
        (out[start..].to_vec(), want)
    }

    #[test]
    fn every_length_and_distance_round_trips_through_a_real_decoder() {
        let base: Vec<u8> = (0..WINDOW + 1).map(|i| (i * 7 % 251) as u8).collect();
        let mut ops = vec![Op::Lit(&base)];
        for (len, dist) in [(3, 3), (4, 4), (258, 258), (259, 300), (260, 1000), (261, 700), (1000, WINDOW), (17, 17)] {
            ops.push(Op::Rep(len, dist));
            ops.push(Op::Lit(b"literal run between repeats"));
        }
        // Repeats in a row share one block of fixed codes, and one match when their
        // distance is the same (here 300 bytes in all, more than one match holds).
        ops.extend([Op::Rep(20, 40), Op::Rep(30, 300), Op::Rep(250, 300), Op::Rep(20, 300), Op::Lit(b"end")]);
        let (out, raw) = write(b"head", &ops);
        assert_eq!(gunzip(&out), raw);
        assert!(out.len() < raw.len(), "the repeats were sent as matches");
    }

    #[test]
    fn long_literals_empty_bodies_and_long_heads_are_valid_gzip() {
        let long = vec![0xAB; 3 * MAX_STORED + 17];
        let cases: [(&[u8], Vec<Op<'_>>); 5] = [
            (b"", vec![]),
            (b"h", vec![Op::Lit(b"x")]),
            (b"h", vec![Op::Lit(&long)]),
            (&long, vec![Op::Lit(b"abcdef"), Op::Rep(3, 6)]),
            // A literal run that crosses the size at which blocks close.
            (b"h", vec![Op::Lit(&long[..CLOSE_STORED - 1]), Op::Lit(b"xy"), Op::Lit(&long[..MAX_STORED + 1])]),
        ];
        for (head, ops) in cases {
            let (out, raw) = write(head, &ops);
            assert_eq!(gunzip(&out), raw, "head {} bytes, {} ops", head.len(), ops.len());
        }
    }

    #[test]
    fn a_member_within_a_larger_buffer_is_checked_by_its_trailer() {
        // A flipped byte in the records must fail the CRC: it covers head and records.
        let (mut out, _) = write(b"head", &[Op::Lit(b"0123456789abcdef0123"), Op::Rep(16, 20)]);
        let at = out.iter().position(|&b| b == b'5').unwrap();
        out[at] = b'X';
        let mut sink = Vec::new();
        assert!(flate2::read::GzDecoder::new(&out[..]).read_to_end(&mut sink).is_err());
    }
}
