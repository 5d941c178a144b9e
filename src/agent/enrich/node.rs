//! The node a logs dir belongs to, from its raylet log: raylet names its node id in
//! its first lines, while GCS and the dashboard (on the head node) may write before
//! it starts. Until then, the dir's records wait in the [`super::hold::Hold`].

use std::io::Read;
use std::path::Path;

use raylog_parsers::Id;

/// How far into `raylet.out` the node id is looked for.
pub const RAYLET_NODE_SCAN: u64 = 1 << 20;

/// The node id in the first [`RAYLET_NODE_SCAN`] bytes of the raylet log at `path`,
/// if it is there yet.
pub fn from_raylet_head(path: &Path) -> Option<Id> {
    let mut head = Vec::new();
    let f = std::fs::File::open(path).ok()?;
    let _ = f.take(RAYLET_NODE_SCAN).read_to_end(&mut head);
    raylog_parsers::correlate::node_id_from_raylet(&head)
}
