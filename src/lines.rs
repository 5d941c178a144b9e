//! Reading in chunks that end on line boundaries, with one buffer per thread: how
//! every reader of whole files (the CLI's scan, archives, the agent's prescan) feeds
//! the parsers.

use std::io::{self, Read};

const CHUNK: usize = 256 * 1024;

/// Feeds `reader` to `f` in chunks that end on a line boundary (the last chunk may not).
pub fn for_each_line_chunk(reader: impl Read, f: impl FnMut(&[u8])) -> io::Result<()> {
    thread_local! {
        /// The read buffer, kept between files: allocating and zeroing a fresh one
        /// per file costs more than parsing a small file.
        static BUF: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
    }
    // Taken, not borrowed, so a nested call just gets a buffer of its own.
    let mut buf = BUF.take();
    buf.resize(CHUNK, 0);
    let result = line_chunks(reader, &mut buf, f);
    BUF.set(buf);
    result
}

fn line_chunks(mut reader: impl Read, buf: &mut [u8], mut f: impl FnMut(&[u8])) -> io::Result<()> {
    let mut filled = 0;
    loop {
        if filled == buf.len() {
            // One line longer than the buffer: hand it over as is.
            f(&buf[..filled]);
            filled = 0;
        }
        let n = match reader.read(&mut buf[filled..]) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                f(&buf[..filled]);
                return Err(e);
            }
        };
        if n == 0 {
            f(&buf[..filled]);
            return Ok(());
        }
        filled += n;
        if let Some(last) = memchr::memrchr(b'\n', &buf[..filled]) {
            f(&buf[..=last]);
            buf.copy_within(last + 1..filled, 0);
            filled -= last + 1;
        }
    }
}
