//! A batch written to bytes and read back whole: how a sink keeps, in `state_dir`,
//! the records it could not deliver before the shutdown grace ended (see
//! [`crate::agent::sinks::parked`]).
//!
//! The bytes are the batch as it was built (its arenas, and each entry's fixed
//! fields little endian), so the records sent at the next start are the very ones
//! the first attempt sent: the same time, labels, metadata and document id. Only
//! the chosen entries are kept. Reading back checks every span against its arena
//! and as UTF-8 (the sinks read arenas unchecked), and a CRC-32 over the whole
//! guards against a torn or damaged file; any failure is an [`Unparkable`] error,
//! never a panic.

use std::sync::Arc;

use raylog_parsers::ndjson::Pieces;
use raylog_parsers::record::{Level, Stream};

use super::{Batch, BatchRecord, Needs, NodeIdentity, Span};

/// What starts every parked batch (and says its format): version 3 adds the task
/// spans the batch carries (JSON, before the entries); version 2 each entry's task
/// attempt; versions 1 and 2, which raylogs before them parked, are still read.
const MAGIC: &[u8; 8] = b"RLPARK3\n";
const MAGIC_V2: &[u8; 8] = b"RLPARK2\n";
const MAGIC_V1: &[u8; 8] = b"RLPARK1\n";
/// Bytes of one entry of version 1: 2 i64, 3 flag/option bytes, pid, offset,
/// json range, pieces, 14 spans, doc id.
const ENTRY_V1: usize = 16 + 3 + 4 + 8 + 8 + 16 + 14 * 8 + 16 + 1;
/// Version 2's: version 1's and the task attempt.
const ENTRY: usize = ENTRY_V1 + 4;

/// Why bytes are not a parked batch.
#[derive(Debug, thiserror::Error)]
#[error("not a parked batch ({0}); it is left where it is")]
pub struct Unparkable(pub &'static str);

/// `batch`'s entries `only` (every one when `None`), as bytes [`unpark`] reads.
pub fn park(batch: &Batch, only: Option<&[u32]>) -> Vec<u8> {
    let all: Vec<u32>;
    let only = match only {
        Some(o) => o,
        None => {
            all = (0..batch.entries.len() as u32).collect();
            &all
        }
    };
    let mut out = Vec::with_capacity(64 + only.len() * ENTRY + batch.json.len() + batch.text.len() + batch.pairs.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&[0; 4]); // the CRC, once the rest is written
    let node = &batch.node;
    put_str(&mut out, &node.name);
    put_str(&mut out, node.cluster.as_deref().unwrap_or(""));
    out.push(node.cluster.is_some() as u8);
    put_u32(&mut out, node.labels.len() as u32);
    for (k, v) in &node.labels {
        put_str(&mut out, k);
        put_str(&mut out, v);
    }
    out.push(batch.needs.json as u8 | (batch.needs.fields as u8) << 1 | (batch.needs.extra as u8) << 2);
    // The arenas whole: entries share spans (a file's members), so cutting them
    // per entry would copy more than it saves, and a parked batch is rare.
    for arena in [&batch.json, &batch.text, &batch.pairs] {
        put_u32(&mut out, arena.len() as u32);
        out.extend_from_slice(arena);
    }
    // The spans whole, whatever `only` keeps: the sink may not have sent them yet,
    // and a span sent twice is the same span.
    let spans = serde_json::to_vec(&batch.spans).unwrap_or_else(|_| b"[]".to_vec());
    put_u32(&mut out, spans.len() as u32);
    out.extend_from_slice(&spans);
    let kept: Vec<&BatchRecord> = only.iter().filter_map(|&i| batch.entries.get(i as usize)).collect();
    put_u32(&mut out, kept.len() as u32);
    for e in kept {
        put_entry(&mut out, e);
    }
    let crc = crc32fast::hash(&out[12..]);
    out[8..12].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The batch [`park`] wrote, numbered `seq`, after checking it whole.
pub fn unpark(bytes: &[u8], seq: u64) -> Result<Batch, Unparkable> {
    let (v2, v3) = match bytes.get(..8) {
        Some(m) if m == MAGIC => (true, true),
        Some(m) if m == MAGIC_V2 => (true, false),
        Some(m) if m == MAGIC_V1 => (false, false),
        _ => return Err(Unparkable("it does not start as one")),
    };
    if bytes.len() < 12 {
        return Err(Unparkable("it does not start as one"));
    }
    if crc32fast::hash(&bytes[12..]).to_le_bytes() != bytes[8..12] {
        return Err(Unparkable("its checksum does not match: torn or damaged"));
    }
    let mut r = Reader { rest: &bytes[12..] };
    let name = r.str()?.to_string();
    let cluster = r.str()?.to_string();
    let cluster = (r.u8()? == 1).then_some(cluster);
    let mut labels = std::collections::BTreeMap::new();
    for _ in 0..r.u32()? {
        let k = r.str()?.to_string();
        labels.insert(k, r.str()?.to_string());
    }
    let n = r.u8()?;
    let needs = Needs { json: n & 1 != 0, fields: n & 2 != 0, extra: n & 4 != 0 };
    let mut b = Batch::new(seq, Arc::new(NodeIdentity::new(name, cluster, labels))).needing(needs);
    b.json = r.bytes()?.to_vec();
    b.text = r.bytes()?.to_vec();
    b.pairs = r.bytes()?.to_vec();
    if v3 {
        b.spans = serde_json::from_slice(r.bytes()?).map_err(|_| Unparkable("its spans do not read"))?;
    }
    let count = r.u32()? as usize;
    if count.saturating_mul(if v2 { ENTRY } else { ENTRY_V1 }) != r.rest.len() {
        return Err(Unparkable("its entries are not whole"));
    }
    b.entries.reserve(count);
    for _ in 0..count {
        let e = r.entry(v2)?;
        check(&b, &e)?;
        b.entries.push(e);
    }
    Ok(b)
}

/// Every range of `e` lies in its arena and is UTF-8 where the sinks read text.
fn check(b: &Batch, e: &BatchRecord) -> Result<(), Unparkable> {
    let text = |s: Span, arena: &[u8]| -> Result<(), Unparkable> {
        let end = s.start as usize + s.len as usize;
        match arena.get(s.start as usize..end) {
            Some(t) if std::str::from_utf8(t).is_ok() => Ok(()),
            _ => Err(Unparkable("a span lies outside its arena or is not UTF-8")),
        }
    };
    text(Span { start: e.json.0, len: e.json.1 }, &b.json)?;
    let p = &e.pieces;
    if [p.members, p.digits, p.ids, p.fields].iter().any(|&at| at > e.json.1) {
        return Err(Unparkable("a piece lies outside its record"));
    }
    for s in [e.message, e.component, e.file, e.session, e.submission_id, e.task_name, e.actor_name, e.path] {
        text(s, &b.text)?;
    }
    for s in e.ids {
        text(s, &b.text)?;
    }
    let Some(mut rest) = b.pairs.get(e.extra.start as usize..e.extra.start as usize + e.extra.len as usize) else {
        return Err(Unparkable("fields lie outside their arena"));
    };
    // The layout `Pairs` reads: tag, key length, value length, key, value.
    while !rest.is_empty() {
        let len = |at: usize| rest.get(at..at + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
        let (Some(kl), Some(vl)) = (len(1), len(5)) else { return Err(Unparkable("a field is cut")) };
        let Some(kv) = rest.get(9..9 + kl + vl) else { return Err(Unparkable("a field is cut")) };
        if std::str::from_utf8(&kv[..kl]).is_err() || std::str::from_utf8(&kv[kl..]).is_err() {
            return Err(Unparkable("a field is not UTF-8"));
        }
        rest = &rest[9 + kl + vl..];
    }
    Ok(())
}

fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_u32(out, s.len() as u32);
    out.extend_from_slice(s.as_bytes());
}

fn spans(e: &BatchRecord) -> [Span; 14] {
    let [a, b, c, d, f] = e.ids;
    [
        e.message,
        e.component,
        e.file,
        e.session,
        e.submission_id,
        e.task_name,
        e.actor_name,
        a,
        b,
        c,
        d,
        f,
        e.extra,
        e.path,
    ]
}

fn put_entry(out: &mut Vec<u8>, e: &BatchRecord) {
    out.extend_from_slice(&e.timestamp_ns.to_le_bytes());
    out.extend_from_slice(&e.observed_ns.to_le_bytes());
    out.push(e.level.map_or(0, |l| l as u8 + 1));
    out.push(match e.stream {
        None => 0,
        Some(Stream::Stdout) => 1,
        Some(Stream::Stderr) => 2,
    });
    let flags = e.truncated as u8
        | (e.inferred as u8) << 1
        | (e.estimated as u8) << 2
        | (e.pid.is_some() as u8) << 3
        | (e.task_attempt.is_some() as u8) << 4;
    out.push(flags);
    put_u32(out, e.pid.unwrap_or(0));
    put_u32(out, e.task_attempt.unwrap_or(0));
    out.extend_from_slice(&e.offset.to_le_bytes());
    put_u32(out, e.json.0);
    put_u32(out, e.json.1);
    let p = &e.pieces;
    for v in [p.members, p.digits, p.ids, p.fields] {
        put_u32(out, v);
    }
    for s in spans(e) {
        put_u32(out, s.start);
        put_u32(out, s.len);
    }
    out.extend_from_slice(&e.doc_id.to_le_bytes());
    out.push(b'\n'); // ends each entry: one more check that the sizes line up
}

/// Reads what `put_*` wrote, failing (never panicking) on short input.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Unparkable> {
        if self.rest.len() < n {
            return Err(Unparkable("it ends early"));
        }
        let (a, b) = self.rest.split_at(n);
        self.rest = b;
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, Unparkable> {
        Ok(self.take(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, Unparkable> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().unwrap_or_default()))
    }

    fn u64(&mut self) -> Result<u64, Unparkable> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().unwrap_or_default()))
    }

    fn bytes(&mut self) -> Result<&'a [u8], Unparkable> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    fn str(&mut self) -> Result<&'a str, Unparkable> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Unparkable("a name is not UTF-8"))
    }

    fn span(&mut self) -> Result<Span, Unparkable> {
        Ok(Span { start: self.u32()?, len: self.u32()? })
    }

    fn entry(&mut self, v2: bool) -> Result<BatchRecord, Unparkable> {
        const LEVELS: [Level; 6] =
            [Level::Trace, Level::Debug, Level::Info, Level::Warning, Level::Error, Level::Fatal];
        let timestamp_ns = self.u64()? as i64;
        let observed_ns = self.u64()? as i64;
        let level = match self.u8()? {
            0 => None,
            l => Some(*LEVELS.get(l as usize - 1).ok_or(Unparkable("an unknown level"))?),
        };
        let stream = match self.u8()? {
            0 => None,
            1 => Some(Stream::Stdout),
            2 => Some(Stream::Stderr),
            _ => return Err(Unparkable("an unknown stream")),
        };
        let flags = self.u8()?;
        let pid = self.u32()?;
        let attempt = if v2 { self.u32()? } else { 0 };
        let offset = self.u64()?;
        let json = (self.u32()?, self.u32()?);
        let pieces = Pieces { members: self.u32()?, digits: self.u32()?, ids: self.u32()?, fields: self.u32()? };
        let mut s = [Span::default(); 14];
        for slot in &mut s {
            *slot = self.span()?;
        }
        let doc_id = u128::from_le_bytes(self.take(16)?.try_into().unwrap_or_default());
        if self.u8()? != b'\n' {
            return Err(Unparkable("an entry does not end where it should"));
        }
        Ok(BatchRecord {
            timestamp_ns,
            observed_ns,
            level,
            stream,
            pid: (flags & 8 != 0).then_some(pid),
            task_attempt: (flags & 16 != 0).then_some(attempt),
            offset,
            json,
            pieces,
            message: s[0],
            component: s[1],
            file: s[2],
            session: s[3],
            submission_id: s[4],
            task_name: s[5],
            actor_name: s[6],
            ids: [s[7], s[8], s[9], s[10], s[11]],
            extra: s[12],
            path: s[13],
            doc_id,
            truncated: flags & 1 != 0,
            inferred: flags & 2 != 0,
            estimated: flags & 4 != 0,
        })
    }
}

#[cfg(test)]
mod tests;
