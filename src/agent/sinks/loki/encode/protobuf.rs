//! The protobuf push body: `logproto.PushRequest` with one `StreamAdapter` per
//! stream and one `EntryAdapter` per record (the encoder's hot path), written with
//! the wire helpers of [`super::super::pb`].

use super::*;
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
    /// encoder's hot path.
    fn write_entry(&self, raw: &mut Vec<u8>, long_line: &mut Vec<u8>, batch: &Batch, e: &BatchRecord, ts: i64) {
        let (line, cut) = Self::line(self.max_line, self.line_format, long_line, batch, e);
        // Entries of 128 B to 16 KiB take a 2-byte length.
        pb::nested(raw, 2, 2, |raw| {
            pb::key(raw, 1, pb::LEN);
            pb::varint(raw, pb::timestamp_len(ts) as u64);
            pb::timestamp(raw, ts);
            pb::str_field(raw, 2, line);
            let mut digits = [0u8; 20];
            for m in &self.metadata {
                let v = match m.field {
                    Field::Pid => e.pid.map_or(&[][..], |p| format_u64(&mut digits, p as u64)),
                    f => {
                        let t = f.text(batch, e);
                        &t.as_bytes()[..floor_char_boundary(t, MAX_META_VALUE)]
                    }
                };
                if v.is_empty() {
                    continue;
                }
                let n = m.name_field_len();
                raw.reserve(24 + v.len());
                pb::key(raw, 3, pb::LEN);
                pb::varint(raw, (n + pb::str_field_len(v.len())) as u64);
                // A fixed 16-byte copy (no call to memcpy), then the padding is cut off.
                raw.extend_from_slice(&m.name_field);
                raw.truncate(raw.len() - (16 - n));
                pb::str_field(raw, 2, v);
            }
            if cut {
                pb::nested(raw, 3, 1, |raw| {
                    pb::str_field(raw, 1, b"truncated");
                    pb::str_field(raw, 2, b"true");
                });
            }
        });
    }
}
