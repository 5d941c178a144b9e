//! The JSON push body (`{"streams":[{"stream":{labels},"values":[[ts,line,{meta}]]}]}`),
//! for `encoding = "json"` (optionally gzip-compressed by the service).

use super::*;

impl LokiEncoder {
    pub(super) fn write_json(&mut self, batch: &Batch) {
        let mut raw = std::mem::take(&mut self.raw);
        let mut long_line = std::mem::take(&mut self.long_line);
        raw.extend_from_slice(b"{\"streams\":[");
        for slot in 0..self.slots.len() {
            if slot > 0 {
                raw.push(b',');
            }
            let run = self.run(slot);
            let before = raw.len();
            raw.extend_from_slice(b"{\"stream\":{");
            let first = &batch.entries[self.slots[slot].first as usize];
            write_json_labels(&self.labels, &mut self.value, &mut raw, batch, first);
            raw.extend_from_slice(b"},\"values\":[");
            for (j, &(_, ts, i)) in self.order[run].iter().enumerate() {
                if j > 0 {
                    raw.push(b',');
                }
                self.write_json_value(&mut raw, &mut long_line, batch, &batch.entries[i as usize], ts);
            }
            raw.extend_from_slice(b"]}");
            self.slots[slot].bytes = (raw.len() - before) as u32;
        }
        raw.extend_from_slice(b"]}");
        self.raw = raw;
        self.long_line = long_line;
    }

    /// `["<ns>","<line>",{<metadata>}]`, the metadata object only when non-empty.
    fn write_json_value(&self, raw: &mut Vec<u8>, long_line: &mut Vec<u8>, batch: &Batch, e: &BatchRecord, ts: i64) {
        raw.extend_from_slice(b"[\"");
        push_i64(raw, ts);
        raw.extend_from_slice(b"\",");
        let (line, cut) = Self::line(self.max_line, self.line_format, long_line, batch, e);
        // Cut on a character, so still UTF-8.
        write_str(raw, std::str::from_utf8(line).unwrap_or_default());
        let open = raw.len();
        raw.extend_from_slice(b",{");
        let mut first = true;
        each_meta(&self.metadata, batch, e, cut, |name, v| {
            if !first {
                raw.push(b',');
            }
            first = false;
            write_str(raw, name);
            raw.push(b':');
            write_str(raw, v);
        });
        if first {
            raw.truncate(open);
        } else {
            raw.push(b'}');
        }
        raw.push(b']');
    }
}

/// The stream's labels as JSON members (same rules as the label string).
fn write_json_labels(labels: &[Label], value: &mut String, raw: &mut Vec<u8>, batch: &Batch, e: &BatchRecord) {
    let mut any = false;
    for label in labels {
        LokiEncoder::render_value(value, label, batch, e);
        if !value.is_empty() {
            if any {
                raw.push(b',');
            }
            any = true;
            write_str(raw, &label.name);
            raw.push(b':');
            write_str(raw, value);
        }
    }
    if !any {
        write_str(raw, FALLBACK_LABEL.0);
        raw.push(b':');
        write_str(raw, FALLBACK_LABEL.1);
    }
}
