//! One checkpoint as one flat JSON array (format version 3), so a node with a
//! million files keeps its checkpoints in tens of bytes per file:
//!
//! `[dev, ino, fingerprint_len, fingerprint_hash, offset, updated, gone_since,
//! last_time_ns, job_id, actor_name, task_name, task_id, actor_id, node_id]`
//!
//! `fingerprint_len` carries the file's incarnation ([`super::born`]) above its
//! low 16 bits (a length is at most 1,025; `u64::MAX` marks a file to read whole
//! and carries none), so that knowing it costs no element: a checkpoint whose
//! length is under 65,536 has none ([`born::UNKNOWN`]: unknown to the file system,
//! or written by a raylog that kept none; both resume as [`born::LEGACY`]).
//!
//! The first six are always there. The rest default to `0`, `null`, and no context,
//! and trailing defaults are left out: a finished worker file is
//! `[65024,1204225,160,12682285201321962832,160,1796216213]`, 56 bytes where version 2's
//! named object took 123. Reading also takes version 2's object form, so a journal
//! begun by an older raylog, then appended to by this one, reads whole.

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};

use super::{born, FileCheckpoint, FileKey, Fingerprint, SavedContext};

/// Bits of `fingerprint_len` below the incarnation.
const LEN_BITS: u32 = 16;

/// Writes a checkpoint in the flat form.
pub struct Flat<'a>(pub &'a FileCheckpoint);

impl Serialize for Flat<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let cp = self.0;
        let ctx = cp.context.as_deref();
        let text = |f: fn(&SavedContext) -> &Option<Box<str>>| ctx.and_then(|c| f(c).as_deref());
        let tail = [
            text(|c| &c.job_id),
            text(|c| &c.actor_name),
            text(|c| &c.task_name),
            text(|c| &c.task_id),
            text(|c| &c.actor_id),
            text(|c| &c.node_id),
        ];
        // How many of the optional elements to write: up to the last one set.
        let ctx_len = tail.iter().rposition(Option::is_some).map_or(0, |i| i + 1);
        let optional = if ctx_len > 0 {
            2 + ctx_len
        } else if cp.last_time_ns.is_some() {
            2
        } else {
            usize::from(cp.gone_since != 0)
        };
        let mut seq = s.serialize_seq(Some(6 + optional))?;
        let len = match cp.fingerprint.len {
            u64::MAX => u64::MAX,
            len => len | (cp.born as u64) << LEN_BITS,
        };
        for n in [cp.key.dev, cp.key.ino, len, cp.fingerprint.hash, cp.offset, cp.updated] {
            seq.serialize_element(&n)?;
        }
        if optional > 0 {
            seq.serialize_element(&cp.gone_since)?;
        }
        if optional > 1 {
            seq.serialize_element(&cp.last_time_ns)?;
        }
        for t in &tail[..ctx_len] {
            seq.serialize_element(t)?;
        }
        seq.end()
    }
}

/// Reads a checkpoint in either form: the flat array, or version 2's object.
pub struct Entry(pub FileCheckpoint);

impl<'de> Deserialize<'de> for Entry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Entry, D::Error> {
        d.deserialize_any(EntryVisitor)
    }
}

struct EntryVisitor;

impl<'de> Visitor<'de> for EntryVisitor {
    type Value = Entry;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a checkpoint: [dev, ino, fingerprint_len, fingerprint_hash, offset, updated, …]")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Entry, A::Error> {
        FileCheckpoint::deserialize(de::value::MapAccessDeserializer::new(map)).map(Entry)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entry, A::Error> {
        let mut fixed = [0u64; 6];
        for (i, n) in fixed.iter_mut().enumerate() {
            *n = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(i, &self))?;
        }
        let [dev, ino, len, hash, offset, updated] = fixed;
        let (len, born) = match len {
            u64::MAX => (len, born::UNKNOWN),
            _ if len >> LEN_BITS == 0 => (len, born::UNKNOWN),
            _ => (len & ((1 << LEN_BITS) - 1), (len >> LEN_BITS) as u32),
        };
        let gone_since = seq.next_element()?.unwrap_or(0);
        let last_time_ns = seq.next_element::<Option<i64>>()?.flatten();
        let mut text = || seq.next_element::<Option<Box<str>>>().map(Option::flatten);
        let ctx = SavedContext {
            job_id: text()?,
            actor_name: text()?,
            task_name: text()?,
            task_id: text()?,
            actor_id: text()?,
            node_id: text()?,
        };
        if seq.next_element::<de::IgnoredAny>()?.is_some() {
            return Err(de::Error::invalid_length(15, &self));
        }
        Ok(Entry(FileCheckpoint {
            key: FileKey { dev, ino },
            fingerprint: Fingerprint { len, hash },
            offset,
            context: (ctx != SavedContext::default()).then(|| std::sync::Arc::new(ctx)),
            last_time_ns,
            updated,
            born,
            gone_since,
        }))
    }
}
