//! Pass one, shared by the CLI's scan and the agent: what a file's first bytes say
//! before it is parsed. The correlator learns which worker hosts which actor
//! (core-worker, GCS and raylet logs), raylet names its node, and a worker file's
//! first timed line gives a time hint for the prints before it. Parsing (pass two)
//! then tags every record, whatever the order files are read in.

use raylog_parsers::correlate::node_id_from_raylet;
use raylog_parsers::{Correlator, FileMeta, Id, Timestamp, Zone};

/// What pass one learns about a file besides correlation.
#[derive(Clone, Copy, Debug, Default)]
pub struct Prescanned {
    /// The node id a raylet log announces.
    pub node: Option<Id>,
    /// The time of a worker file's first line that has one, within its first
    /// [`TIME_HINT_WINDOW`] bytes (see `FileParser::set_time_hint`).
    pub time_hint: Option<Timestamp>,
    /// Bytes of the file seen so far.
    pub seen: u64,
}

/// How far into a worker file its first timed line is looked for: a fixed window,
/// so the hint is the same however the file is read.
pub const TIME_HINT_WINDOW: u64 = 64 << 10;

pub fn prescan_bytes(meta: &FileMeta, chunk: &[u8], corr: &mut Correlator, found: &mut Prescanned) {
    corr.prescan(meta, chunk);
    prescan_own(meta, chunk, corr.zone(), found);
}

/// What [`prescan_bytes`] learns about the file itself (its node id, its time hint),
/// without teaching the correlator anything: for a file whose markers no other
/// file needs (see the agent's `source::quiet`).
pub fn prescan_own(meta: &FileMeta, chunk: &[u8], zone: &Zone, found: &mut Prescanned) {
    if meta.component == "raylet" && found.node.is_none() {
        found.node = node_id_from_raylet(chunk);
    }
    if meta.component == "worker" && found.time_hint.is_none() && found.seen < TIME_HINT_WINDOW {
        let window = &chunk[..chunk.len().min((TIME_HINT_WINDOW - found.seen) as usize)];
        // Only whole lines: one cut by the window's end is not looked at.
        found.time_hint = first_line_time(meta, window, zone);
    }
    found.seen += chunk.len() as u64;
}

/// The time of the first whole line of `chunk` that has one (a line cut by the
/// chunk's end is not looked at).
pub fn first_line_time(meta: &FileMeta, chunk: &[u8], zone: &Zone) -> Option<Timestamp> {
    let whole = memchr::memrchr(b'\n', chunk).map_or(&chunk[..0], |nl| &chunk[..nl]);
    whole.split(|&b| b == b'\n').find_map(|line| raylog_parsers::formats::line_time(meta.kind, line, zone))
}

/// Whether pass one needs this file.
pub fn wanted_by_prescan(meta: &FileMeta) -> bool {
    matches!(meta.component.as_str(), "core_worker" | "gcs_server" | "raylet" | "worker" | "ray_event")
}

/// How much of a file pass one reads: worker files carry their markers at the top
/// (and the first 64 KiB are searched for a time, see [`Prescanned::time_hint`]),
/// raylet announces its node id at start-up; core-worker and GCS logs are read whole
/// because the lines naming actors can be anywhere.
pub fn prescan_limit(meta: &FileMeta) -> u64 {
    match meta.component.as_str() {
        "worker" => TIME_HINT_WINDOW,
        "raylet" => 1 << 20,
        _ => u64::MAX,
    }
}
