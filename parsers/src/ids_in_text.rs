//! Ray ids in free text and `key=value` suffixes.
//!
//! Newer Ray appends context as trailing ` key=value` pairs; older Ray writes ids in
//! prose (`Creating actor: <id>`, `Worker <wid> on node <nid> exits`, `for actor
//! <aid>, job id = 01000000`, `Worker ID: <wid>`). Worker and node ids are both 56 hex
//! characters, so an id is assigned by the word before it, never by length alone.

use crate::id::{hex_lanes, Id, ACTOR_HEX, JOB_HEX, TASK_HEX, WORKER_HEX};
use crate::record::Ids;

/// Which id field a key or prose word names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdKind {
    Node,
    Job,
    Worker,
    Actor,
    Task,
}

impl IdKind {
    /// The hex length an id of this kind has.
    pub fn hex_len(self) -> usize {
        match self {
            IdKind::Node | IdKind::Worker => WORKER_HEX,
            IdKind::Job => JOB_HEX,
            IdKind::Actor => ACTOR_HEX,
            IdKind::Task => TASK_HEX,
        }
    }

    /// The kind a structured key names (`worker_id`, `actor_id`...).
    #[inline]
    pub fn from_key(key: &str) -> Option<IdKind> {
        Some(match key {
            "node_id" => IdKind::Node,
            "job_id" => IdKind::Job,
            "worker_id" => IdKind::Worker,
            "actor_id" => IdKind::Actor,
            "task_id" => IdKind::Task,
            _ => return None,
        })
    }

    /// Stores `id` into the matching slot of `ids` if that slot is empty and the
    /// length fits the kind. Returns whether it was stored.
    pub fn store(self, ids: &mut Ids, id: Option<Id>) -> bool {
        let Some(id) = id.filter(|i| i.len() == self.hex_len()) else {
            return false;
        };
        let slot = match self {
            IdKind::Node => &mut ids.node_id,
            IdKind::Job => &mut ids.job_id,
            IdKind::Worker => &mut ids.worker_id,
            IdKind::Actor => &mut ids.actor_id,
            IdKind::Task => &mut ids.task_id,
        };
        if slot.is_none() {
            *slot = Some(id);
            true
        } else {
            false
        }
    }
}

/// Where the trailing ` key=value` pairs of `msg` start, and calls `f` for each pair
/// (right to left). A pair is `[a-z0-9_]+=` followed by a value without spaces. Stops at
/// the first token that is not a pair.
pub fn trailing_pairs<'a>(msg: &'a str, mut f: impl FnMut(&'a str, &'a str)) -> usize {
    let b = msg.as_bytes();
    let mut end = b.len();
    while end > 0 && b[end - 1] == b' ' {
        end -= 1;
    }
    let mut start_of_pairs = msg.len();
    loop {
        let tok_start = memchr::memrchr(b' ', &b[..end]).map_or(0, |p| p + 1);
        // The key runs up to the token's first `=`: measuring it forward stops at the
        // first byte that is not a key byte, without searching the value for `=`.
        let key_len = b[tok_start..end].iter().position(|&c| !KEY_BYTE[c as usize]).unwrap_or(end - tok_start);
        let eq = tok_start + key_len;
        if key_len == 0 || eq == end || b[eq] != b'=' {
            break;
        }
        f(&msg[tok_start..eq], &msg[eq + 1..end]);
        start_of_pairs = tok_start;
        if tok_start == 0 {
            break;
        }
        end = tok_start - 1;
        // `key=value, other=x` keeps the comma on the value; pairs separated by
        // more spaces are still pairs.
        while end > 0 && b[end - 1] == b' ' {
            end -= 1;
        }
    }
    start_of_pairs
}

/// Bytes of a pair's key: `[a-z0-9_]`.
static KEY_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = matches!(i as u8, b'a'..=b'z' | b'0'..=b'9' | b'_');
        i += 1;
    }
    t
};

static HEX: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = matches!(i as u8, b'0'..=b'9' | b'a'..=b'f');
        i += 1;
    }
    t
};

#[inline]
fn is_hex(c: u8) -> bool {
    HEX[c as usize]
}

/// The id kind named by the text right before an id at `b[..pos]`, e.g.
/// `actor_id=`, `Worker ID: `, `for actor `, `node id = `, `task_id: `.
fn kind_before(b: &[u8], pos: usize) -> Option<IdKind> {
    let from = pos.saturating_sub(14);
    let mut ctx = [0u8; 14];
    let n = pos - from;
    for (d, s) in ctx.iter_mut().zip(&b[from..pos]) {
        *d = s.to_ascii_lowercase();
    }
    let mut t = &ctx[..n];
    while let [rest @ .., b' ' | b'=' | b':' | b'(' | b'\'' | b'"'] = t {
        t = rest;
    }
    let t = t.strip_suffix(b"_id").or_else(|| t.strip_suffix(b" id")).unwrap_or(t);
    let word_start = t.iter().rposition(|c| !c.is_ascii_alphabetic()).map_or(0, |p| p + 1);
    Some(match &t[word_start..] {
        b"node" | b"nodeid" => IdKind::Node,
        b"job" | b"jobid" => IdKind::Job,
        b"worker" | b"workerid" => IdKind::Worker,
        b"actor" | b"actorid" => IdKind::Actor,
        b"task" | b"taskid" => IdKind::Task,
        _ => return None,
    })
}

/// Loads 8 bytes at `i` (zero-padded past the end).
#[inline]
fn word_at(b: &[u8], i: usize) -> u64 {
    if let Some(w) = b.get(i..i + 8) {
        return u64::from_le_bytes(w.try_into().unwrap_or([0; 8]));
    }
    let mut w = [0u8; 8];
    let n = b.len().saturating_sub(i).min(8);
    w[..n].copy_from_slice(&b[i..i + n]);
    u64::from_le_bytes(w)
}

/// Start of the hex run that ends at `end` (exclusive), 8 bytes per step.
#[inline]
fn run_start(b: &[u8], end: usize) -> usize {
    let mut start = end;
    while start >= 8 {
        let lanes = hex_lanes(word_at(b, start - 8));
        // Count hex lanes from the top (the bytes nearest `start`).
        let n = ((!lanes & HI_BITS).leading_zeros() / 8) as usize;
        start -= n;
        if n < 8 {
            return start;
        }
    }
    while start > 0 && is_hex(b[start - 1]) {
        start -= 1;
    }
    start
}

/// End (exclusive) of the hex run that starts at `start`, 8 bytes per step.
#[inline]
fn run_end(b: &[u8], start: usize) -> usize {
    let mut end = start;
    while end < b.len() {
        let lanes = hex_lanes(word_at(b, end));
        let n = (((!lanes & HI_BITS).trailing_zeros() / 8) as usize).min(b.len() - end);
        end += n;
        if n < 8 {
            break;
        }
    }
    end
}

const HI_BITS: u64 = 0x8080_8080_8080_8080;

/// Scans free text for hex ids introduced by a naming word and stores each in the
/// empty slot of `ids` it names. Returns true if anything was found.
///
/// Ids are at least 8 hex characters, so the scan probes every 8th byte and only
/// looks closer around a hex byte, measuring the run 8 bytes at a time: most prose
/// is skipped without touching each byte.
pub fn scan_prose(text: &str, ids: &mut Ids) -> bool {
    let b = text.as_bytes();
    let mut found = false;
    let mut probe = JOB_HEX - 1;
    while probe < b.len() {
        if !is_hex(b[probe]) {
            probe += JOB_HEX;
            continue;
        }
        let start = run_start(b, probe);
        let end = run_end(b, probe);
        probe = end + JOB_HEX;
        if end - start < JOB_HEX {
            continue;
        }
        let bounded = (start == 0 || !b[start - 1].is_ascii_alphanumeric())
            && (end == b.len() || !(b[end].is_ascii_alphanumeric() || b[end] == b'_'));
        if bounded && matches!(end - start, JOB_HEX | ACTOR_HEX | TASK_HEX | WORKER_HEX) {
            if let Some(kind) = kind_before(b, start) {
                found |= kind.store(ids, Id::parse(&b[start..end]));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: &str = "78d4630a58840d032a9dd87f4bf08d0f07a48465f2b862515c3b4935";
    const N: &str = "695e461fb0f54d6e7375eeaf092edbcbcbd997954cab95dbf3635b7a";

    #[test]
    fn prose_ids_by_meaning() {
        let mut ids = Ids::default();
        scan_prose(&format!("Worker {W} on node {N} exits, type=SYSTEM_ERROR"), &mut ids);
        assert_eq!(ids.worker_id.unwrap().as_str(), W);
        assert_eq!(ids.node_id.unwrap().as_str(), N);
        let mut ids = Ids::default();
        scan_prose(
            &format!("Finished leasing worker from {N} for actor c849596ab2d001ad77a3612801000000, job id = 01000000"),
            &mut ids,
        );
        assert_eq!(ids.node_id, None, "`from` does not say what the id is");
        assert_eq!(ids.actor_id.unwrap().as_str(), "c849596ab2d001ad77a3612801000000");
        assert_eq!(ids.job_id.unwrap().as_str(), "01000000");
        let mut ids = Ids::default();
        scan_prose(&format!("Lease ID: 01000000f3 Worker ID: {W} Node ID: {N} Worker PID: 4748"), &mut ids);
        assert_eq!(ids.worker_id.unwrap().as_str(), W);
        assert_eq!(ids.node_id.unwrap().as_str(), N);
        let mut ids = Ids::default();
        scan_prose("Creating actor: 750d082651ea8a01532ff64101000000", &mut ids);
        assert_eq!(ids.actor_id.unwrap().as_str(), "750d082651ea8a01532ff64101000000");
    }

    #[test]
    fn runs_measured_by_words_match_bytewise() {
        let text = "x 0123abcd-ff z deadbeefdeadbeefdeadbeefdeadbeef! é1234567890abcdef";
        let b = text.as_bytes();
        for i in 0..b.len() {
            if !is_hex(b[i]) {
                continue;
            }
            let (mut s, mut e) = (i, i);
            while s > 0 && is_hex(b[s - 1]) {
                s -= 1;
            }
            while e < b.len() && is_hex(b[e]) {
                e += 1;
            }
            assert_eq!((run_start(b, i), run_end(b, i)), (s, e), "at {i}");
        }
    }

    #[test]
    fn pairs_from_the_right() {
        let mut got = vec![];
        let at = trailing_pairs("Creating actor x=1 actor_id=750d job_id=01000000", |k, v| got.push((k, v)));
        assert_eq!(got, vec![("job_id", "01000000"), ("actor_id", "750d"), ("x", "1")]);
        assert_eq!(at, "Creating actor ".len());
        assert_eq!(trailing_pairs("no pairs here", |_, _| panic!()), "no pairs here".len());
    }
}
