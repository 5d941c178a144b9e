//! The parser's fields of a batch's records, kept for the OTLP sink (see [`Pairs`]).

use raylog_parsers::record::FieldValue;

/// A record's parser fields, as [`super::Batch::push`] keeps them for the OTLP
/// sink: each is a tag (0 text, 1 raw JSON), the key's and the value's lengths (u32,
/// little endian) and their bytes. The sink reads them back as they were, where a
/// JSON object would be escaped on the way in and scanned on the way out (5 % of
/// the OTLP path's instructions).
pub struct Pairs<'a> {
    pub(super) rest: &'a [u8],
}

impl Pairs<'_> {
    pub(super) fn push(out: &mut Vec<u8>, key: &str, value: FieldValue<'_>) {
        let (tag, v) = match value {
            FieldValue::Str(s) => (0, s),
            FieldValue::Json(j) => (1, j),
        };
        out.push(tag);
        out.extend_from_slice(&(key.len() as u32).to_le_bytes());
        out.extend_from_slice(&(v.len() as u32).to_le_bytes());
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(v.as_bytes());
    }
}

impl<'a> Iterator for Pairs<'a> {
    type Item = (&'a str, FieldValue<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let (&tag, rest) = self.rest.split_first()?;
        let len = |at: usize| u32::from_le_bytes([rest[at], rest[at + 1], rest[at + 2], rest[at + 3]]) as usize;
        let (kl, vl) = (len(0), len(4));
        let (k, rest) = rest[8..].split_at(kl);
        let (v, rest) = rest.split_at(vl);
        self.rest = rest;
        debug_assert!(std::str::from_utf8(k).is_ok() && std::str::from_utf8(v).is_ok());
        // SAFETY: `Pairs::push` wrote both from `&str`s, whole, and nothing else
        // writes to `Batch::pairs`.
        let (k, v) = unsafe { (std::str::from_utf8_unchecked(k), std::str::from_utf8_unchecked(v)) };
        Some((k, if tag == 0 { FieldValue::Str(v) } else { FieldValue::Json(v) }))
    }
}
