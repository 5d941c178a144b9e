//! The protobuf push body: `logproto.PushRequest` with one `StreamAdapter` per
//! stream and one `EntryAdapter` per record (the encoder's hot path), written with
//! the wire helpers of [`super::super::pb`].

use super::*;
use crate::agent::sinks::loki::fields::text_spans;
use crate::agent::sinks::pb;

impl LokiEncoder {
    pub(super) fn write_protobuf(&mut self, batch: &Batch) {
        let mut raw = std::mem::take(&mut self.raw);
        let mut long_line = std::mem::take(&mut self.long_line);
        for slot in 0..self.slots.len() {
            let run = self.run(slot);
            let (start, len) = self.slots[slot].labels;
            let labels = &self.arena[start as usize..(start + len) as usize];
            let before = raw.len();
            // Streams of 16 KiB to 2 MiB take a 3-byte length.
            pb::nested(&mut raw, 1, 3, |raw| {
                pb::str_field(raw, 1, labels);
                for &(_, ts, i) in &self.order[run] {
                    self.write_entry(raw, &mut long_line, batch, &batch.entries[i as usize], ts);
                }
            });
            self.slots[slot].bytes = (raw.len() - before) as u32;
        }
        self.raw = raw;
        self.long_line = long_line;
    }

    /// One `EntryAdapter` field (tag 2): this runs once per record and is the
    /// encoder's hot path. Room for the longest entry the line allows is reserved
    /// first (reserving writes nothing), so its bytes go in without a check of the
    /// vector's capacity each.
    fn write_entry(&self, raw: &mut Vec<u8>, long_line: &mut Vec<u8>, batch: &Batch, e: &BatchRecord, ts: i64) {
        let (line, cut) = Self::line(self.max_line, self.line_format, long_line, batch, e);
        pb::write_with(raw, ENTRY_ROOM + line.len() + self.metadata_room, |w| {
            // Entries of 128 B to 16 KiB take a 2-byte length.
            let body = w.open(2, 2);
            w.key(1, pb::LEN);
            // At most 22 bytes: a 1-byte length.
            w.byte(pb::timestamp_len(ts) as u8);
            w.timestamp(ts);
            w.str_field(2, line);
            let mut digits = [0u8; 20];
            let mut hex = [0u8; 32];
            let spans = text_spans(e);
            for m in &self.metadata {
                let v = match (m.slot, m.field) {
                    (Some(k), _) => meta_value(batch.str(spans[k])),
                    // At most 20 ASCII digits: never cut, and no UTF-8 to check.
                    (None, Field::Pid) => e.pid.map_or(&[][..], |p| format_u64(&mut digits, p as u64)),
                    (None, Field::TaskAttempt) => e.task_attempt.map_or(&[][..], |a| format_u64(&mut digits, a as u64)),
                    (None, f @ (Field::TraceId | Field::SpanId)) => f.value(batch, e, &mut hex).as_bytes(),
                    (None, f) => meta_value(f.text(batch, e)),
                };
                if !v.is_empty() {
                    w.key(3, pb::LEN);
                    w.varint(m.pair_len(v.len()) as u64);
                    w.block16(&m.name_field, m.name_field_len());
                    w.str_field(2, v);
                }
            }
            if cut {
                w.bytes(&TRUNCATED);
            }
            w.close(body, 2);
        });
    }
}

/// A metadata value as sent: cut at [`MAX_META_VALUE`] on a character boundary.
#[inline]
fn meta_value(t: &str) -> &[u8] {
    &t.as_bytes()[..floor_char_boundary(t, MAX_META_VALUE)]
}

/// The most an entry takes besides its line and metadata: its key and length, the
/// timestamp field (key, length, at most 22 bytes), the line's key and length, the
/// `truncated` pair. A length is counted at a varint's longest (10 bytes), so that
/// no line `max_line_bytes` allows can outgrow the room (the writer would panic).
const ENTRY_ROOM: usize = (1 + 10) + 24 + (1 + 10) + TRUNCATED.len();

/// The pair `truncated="true"` (a `LabelPairAdapter` field, tag 3) of a line cut.
const TRUNCATED: [u8; 19] = *b"\x1a\x11\x0a\x09truncated\x12\x04true";
