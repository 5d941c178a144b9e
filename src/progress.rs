//! A progress bar on stderr for large inputs, only when stderr is a terminal.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressStyle};

/// Inputs smaller than this finish too fast for a bar to help.
const MIN_BYTES: u64 = 64 << 20;

/// A byte-count bar for `total` bytes, or `None` when it would only be noise.
pub fn bar(total: u64) -> Option<ProgressBar> {
    if total < MIN_BYTES || !std::io::stderr().is_terminal() {
        return None;
    }
    let b = ProgressBar::new(total);
    let style = ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    b.set_style(style);
    Some(b)
}
