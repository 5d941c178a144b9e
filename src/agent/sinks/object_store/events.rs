//! Ray's events, from the spool to the History Server's event objects.
//!
//! Each flush reads the spool from the saved cursor (whole posts, at most
//! [`FLUSH_BYTES`]), files every event by session, job and hour, and writes one
//! object per group, keyed by the spool position of its first event: a flush
//! retried after a crash starts from the same cursor and writes the same keys again
//! (with the same events, or more), never new ones beside them. The cursor is saved
//! once every object is written; then the spool may delete what is behind it.
//!
//! Ray posts at least once: an event id already uploaded within the last hour, from
//! another spool position, is dropped and counted (within a run: a restart forgets).

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, SeekFrom};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::encode::{place, Layout};
use crate::agent::events::spool::{unwrap_line, Cursor, Spool};

/// Spool bytes one flush reads at most.
pub const FLUSH_BYTES: u64 = 32 << 20;
const DEDUP_WINDOW: Duration = Duration::from_secs(3600);
const DEDUP_MAX: usize = 1 << 20;

/// One events object to write.
#[derive(Debug, PartialEq, Eq)]
pub struct Group {
    pub key: String,
    pub body: Vec<u8>,
    pub events: u64,
}

/// What a flush read.
#[derive(Debug, Default)]
pub struct Flush {
    pub groups: Vec<Group>,
    /// Where the cursor goes once every group is written.
    pub next: Option<Cursor>,
    pub duplicates: u64,
    /// Events with no session or time: logged and counted, not written.
    pub unplaceable: u64,
    /// A session whose node is not known yet, for an event that names none: the
    /// flush stops before it.
    pub waiting: Option<String>,
}

/// (session, node, job, hour) → (the `<n>` of its key, its lines, how many events).
type Groups = BTreeMap<(String, String, Option<String>, String), (u64, Vec<u8>, u64)>;

/// Event ids seen, for Ray's re-posts.
#[derive(Debug, Default)]
pub struct Seen(HashMap<String, (Instant, Cursor)>);

impl Seen {
    /// Whether `id` was uploaded from another position within the window.
    fn repeat(&mut self, id: &str, at: Cursor, now: Instant) -> bool {
        if let Some((t, c)) = self.0.get(id) {
            if now.duration_since(*t) < DEDUP_WINDOW && *c != at {
                return true;
            }
        }
        if self.0.len() >= DEDUP_MAX {
            self.0.retain(|_, (t, _)| now.duration_since(*t) < DEDUP_WINDOW);
            if self.0.len() >= DEDUP_MAX {
                self.0.clear();
            }
        }
        self.0.insert(id.to_string(), (now, at));
        false
    }
}

/// The spool position as the `<n>` of a key.
fn number(c: Cursor) -> u64 {
    c.seq * 1_000_000_000_000 + c.offset
}

/// Reads what follows `from` in the spool into groups. `node` names each session's
/// node (hex), when known.
pub fn read(
    spool: &Arc<Mutex<Spool>>,
    from: Cursor,
    layout: &Layout,
    node: &dyn Fn(&str) -> Option<String>,
    seen: &mut Seen,
) -> Flush {
    let segments = spool.lock().unwrap_or_else(|e| e.into_inner()).readable(from);
    let mut groups = Groups::new();
    let mut out = Flush::default();
    let mut budget = FLUSH_BYTES;
    let now = Instant::now();
    'segments: for (seq, path, size, sealed) in segments {
        let start = if seq == from.seq { from.offset } else { 0 };
        let take = (size.saturating_sub(start)).min(budget);
        let mut bytes = Vec::with_capacity(take as usize);
        let got = std::fs::File::open(&path).and_then(|mut f| {
            f.seek(SeekFrom::Start(start))?;
            f.take(take).read_to_end(&mut bytes)
        });
        if let Err(e) = got {
            tracing::warn!(path = %path.display(), error = %e, "cannot read a spool segment; events wait");
            break;
        }
        let mut at = 0usize;
        while let Some(nl) = memchr::memchr(b'\n', &bytes[at..]) {
            let pos = Cursor { seq, offset: start + at as u64 };
            let line = std::str::from_utf8(&bytes[at..at + nl]).unwrap_or("");
            match file_event(line, pos, node, seen, now, &mut groups) {
                Filed::Waiting(session) => {
                    out.waiting = Some(session);
                    out.next = Some(pos);
                    break 'segments;
                }
                Filed::Duplicate => out.duplicates += 1,
                Filed::Unplaceable => out.unplaceable += 1,
                Filed::Yes => {}
            }
            at += nl + 1;
        }
        budget -= at as u64;
        let end = Cursor { seq, offset: start + at as u64 };
        out.next = Some(if sealed && end.offset >= size { Cursor { seq: seq + 1, offset: 0 } } else { end });
        if budget == 0 || end.offset < size {
            break;
        }
    }
    out.groups = (groups.into_iter())
        .map(|((session, node, job, hour), (n, body, events))| Group {
            key: layout.events(&session, &node, job.as_deref(), &hour, n),
            body,
            events,
        })
        .collect();
    out
}

enum Filed {
    Yes,
    Duplicate,
    Unplaceable,
    Waiting(String),
}

fn file_event(
    line: &str,
    pos: Cursor,
    node: &dyn Fn(&str) -> Option<String>,
    seen: &mut Seen,
    now: Instant,
    groups: &mut Groups,
) -> Filed {
    let Some((_, event)) = unwrap_line(line) else { return Filed::Unplaceable };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(event) else { return Filed::Unplaceable };
    let Ok(p) = place(&v) else { return Filed::Unplaceable };
    // The node of the session's logs (the History Server reads a node's events
    // beside its logs), else the one the event names.
    let Some(node) = node(&p.session).or(p.node) else { return Filed::Waiting(p.session) };
    if p.event_id.as_deref().is_some_and(|id| seen.repeat(id, pos, now)) {
        return Filed::Duplicate;
    }
    let g = groups.entry((p.session, node, p.job, p.hour)).or_insert_with(|| (number(pos), vec![], 0));
    g.1.extend_from_slice(event.as_bytes());
    g.1.push(b'\n');
    g.2 += 1;
    Filed::Yes
}
