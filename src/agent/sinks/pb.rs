//! Protobuf wire encoding, hand-written: just what the sinks send (Loki's
//! `PushRequest`, OTLP's `ExportLogsServiceRequest`). proto3: empty strings and zero
//! scalars are left out, except where a `oneof` needs them (`AnyValue`).

use std::mem::MaybeUninit;

pub const VARINT: u8 = 0;
pub const LEN: u8 = 2;

pub fn varint_len(v: u64) -> usize {
    // ceil(bits / 7) without a division: called per field of every record.
    let bits = 64 - (v | 1).leading_zeros() as usize;
    (bits * 9 + 64) / 64
}

pub fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Field numbers here are all below 16: one byte.
pub fn key(out: &mut Vec<u8>, field: u8, wire: u8) {
    out.push(field << 3 | wire);
}

/// A length-delimited field whose body `body` writes. `guess` bytes are reserved
/// for the length, so the body is written once; when the length needs another
/// size the body is moved, keeping the canonical (shortest) varint.
pub fn nested(out: &mut Vec<u8>, field: u8, guess: usize, body: impl FnOnce(&mut Vec<u8>)) {
    key(out, field, LEN);
    let at = out.len();
    out.resize(at + guess, 0);
    body(out);
    let n = out.len() - at - guess;
    let need = varint_len(n as u64);
    if need != guess {
        if need > guess {
            out.resize(out.len() + need - guess, 0);
        }
        out.copy_within(at + guess..at + guess + n, at + need);
        out.truncate(at + need + n);
    }
    let mut v = n as u64;
    for b in &mut out[at..at + need] {
        *b = v as u8 & 0x7f | if v >= 0x80 { 0x80 } else { 0 };
        v >>= 7;
    }
}

/// Size of a nested message field whose body is `n` bytes.
pub fn msg_field_len(n: usize) -> usize {
    1 + varint_len(n as u64) + n
}

pub fn str_field_len(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        msg_field_len(n)
    }
}

pub fn str_field(out: &mut Vec<u8>, field: u8, s: &[u8]) {
    if !s.is_empty() {
        key(out, field, LEN);
        varint(out, s.len() as u64);
        out.extend_from_slice(s);
    }
}

/// `google.protobuf.Timestamp`: seconds and non-negative nanos.
fn split(ns: i64) -> (i64, i64) {
    (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000))
}

pub fn timestamp_len(ns: i64) -> usize {
    let (s, n) = split(ns);
    let part = |v: i64| if v == 0 { 0 } else { 1 + varint_len(v as u64) };
    part(s) + part(n)
}

pub fn timestamp(out: &mut Vec<u8>, ns: i64) {
    let (s, n) = split(ns);
    for (field, v) in [(1, s), (2, n)] {
        if v != 0 {
            key(out, field, VARINT);
            // int64: negative values are their two's complement, ten bytes.
            varint(out, v as u64);
        }
    }
}

/// Writes into capacity reserved beforehand, for the hot paths. A byte pushed to a
/// `Vec<u8>` makes the compiler load the vector's pointer and length again after
/// every store (a byte store may alias them); this slice and index stay in registers.
/// Every write is bounds-checked against what [`write_with`] reserved.
pub struct Writer<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    /// Bytes written; every byte before it is initialized.
    at: usize,
}

/// Appends to `out` what `f` writes, at most `max` bytes (more panics).
#[inline]
pub fn write_with(out: &mut Vec<u8>, max: usize, f: impl FnOnce(&mut Writer<'_>)) {
    out.reserve(max);
    let len = out.len();
    let mut w = Writer { buf: &mut out.spare_capacity_mut()[..max], at: 0 };
    f(&mut w);
    let n = w.at;
    // SAFETY: the writer's methods initialize bytes before moving `at` past them, so
    // the first `n` bytes of the spare capacity are initialized.
    unsafe { out.set_len(len + n) };
}

/// `src` into `dst` (of the same length; the compiler makes it a memcpy).
/// `<[MaybeUninit<u8>]>::write_copy_of_slice` is newer than the crate's MSRV.
#[inline]
fn copy(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        d.write(*s);
    }
}

impl Writer<'_> {
    #[inline]
    pub fn byte(&mut self, b: u8) {
        self.buf[self.at].write(b);
        self.at += 1;
    }

    #[inline]
    pub fn bytes(&mut self, s: &[u8]) {
        copy(&mut self.buf[self.at..self.at + s.len()], s);
        self.at += s.len();
    }

    /// The first `n` bytes of `block`, written as one fixed-size copy (no call to
    /// memcpy): needs 16 bytes of room whatever `n`.
    #[inline]
    pub fn block16(&mut self, block: &[u8; 16], n: usize) {
        assert!(n <= 16);
        copy(&mut self.buf[self.at..self.at + 16], block);
        self.at += n;
    }

    #[inline]
    pub fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.byte(v as u8 | 0x80);
            v >>= 7;
        }
        self.byte(v as u8);
    }

    #[inline]
    pub fn key(&mut self, field: u8, wire: u8) {
        self.byte(field << 3 | wire);
    }

    /// [`str_field`]'s bytes.
    #[inline]
    pub fn str_field(&mut self, field: u8, s: &[u8]) {
        if !s.is_empty() {
            self.key(field, LEN);
            self.varint(s.len() as u64);
            self.bytes(s);
        }
    }

    /// Starts a length-delimited field whose length is not known yet, keeping
    /// `guess` bytes for it (as [`nested`] does). Returns where its body starts,
    /// for [`Writer::close`].
    #[inline]
    pub fn open(&mut self, field: u8, guess: usize) -> usize {
        self.key(field, LEN);
        for _ in 0..guess {
            self.byte(0);
        }
        self.at
    }

    /// Ends the field [`Writer::open`] started (its body at `body`, `guess` bytes
    /// kept for its length): writes the length, moving the body when the length
    /// takes another number of bytes (the shortest varint, as protobuf writes it).
    #[inline]
    pub fn close(&mut self, body: usize, guess: usize) {
        let n = self.at - body;
        let need = varint_len(n as u64);
        let at = body - guess;
        if need != guess {
            // Every byte below the new end is initialized: the body is copied whole.
            self.buf.copy_within(body..body + n, at + need);
            self.at = at + need + n;
        }
        let mut v = n as u64;
        for b in &mut self.buf[at..at + need] {
            b.write(v as u8 & 0x7f | if v >= 0x80 { 0x80 } else { 0 });
            v >>= 7;
        }
    }

    /// [`timestamp`]'s bytes.
    #[inline]
    pub fn timestamp(&mut self, ns: i64) {
        let (s, n) = split(ns);
        for (field, v) in [(1, s), (2, n)] {
            if v != 0 {
                self.key(field, VARINT);
                self.varint(v as u64);
            }
        }
    }
}

/// Wire type of `fixed64` and `double`.
pub const I64: u8 = 1;

/// A `fixed64` field (OTLP's times), always written: a time of 0 means unknown.
pub fn fixed64(out: &mut Vec<u8>, field: u8, v: u64) {
    key(out, field, I64);
    out.extend_from_slice(&v.to_le_bytes());
}

/// A length-delimited field written even when empty (a `oneof` member: its presence
/// is the value).
pub fn bytes_always(out: &mut Vec<u8>, field: u8, s: &[u8]) {
    key(out, field, LEN);
    varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

#[cfg(test)]
mod tests {
    #[test]
    fn varint_len_is_the_written_length() {
        for bits in 0..64 {
            for v in [1u64 << bits, (1u64 << bits) - 1, (1u64 << bits) + 1, u64::MAX >> (63 - bits)] {
                let mut out = Vec::new();
                super::varint(&mut out, v);
                assert_eq!(super::varint_len(v), out.len(), "{v}");
            }
        }
        assert_eq!(super::varint_len(0), 1);
    }
}
