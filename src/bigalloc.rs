//! The global allocator: glibc's, except for blocks of [`BIG`] and more, which get
//! mappings of their own.
//!
//! A node with a million files has a few such blocks, and all of them large: the
//! file table's slab, its name arena, a restart's loaded checkpoints (80 MiB) and
//! the listing's vectors. Left to glibc, each such block freed raises its mapping
//! threshold (up to 32 MiB), so the next ones of tens of MiB come from the heap,
//! whose holes stay resident: after a restart at a million files the agent held
//! 147 MiB where the catch-up had left 132, and peaked at 166. Fixing glibc's
//! threshold instead (`mallopt`) costs the busy path: at 1 MiB each batch buffer
//! was mapped anew (4.7 % more CPU into Loki, 12.8 % into Elasticsearch), at 4 MiB
//! they stayed in the heap. Here glibc keeps its adaptive threshold for everything
//! smaller, the big blocks go back to the system when freed, grow and shrink in
//! place with `mremap` (no copy, no second block resident while it grows), and come
//! zeroed for free.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks this large or larger are mapped on their own: above any batch buffer
/// (`batch.max_bytes` is at most a few MiB), below the table's big vectors.
pub const BIG: usize = 8 << 20;

/// Mappings are page-aligned: larger alignments go to the system allocator.
const PAGE: usize = 4096;

pub struct BigAlloc;

fn big(layout: Layout) -> bool {
    layout.size() >= BIG && layout.align() <= PAGE
}

unsafe fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping has no preconditions.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p.cast()
    }
}

// SAFETY: every block is either the system allocator's (below BIG, or aligned past a
// page) or a mapping of exactly its layout's size; which one is decided by the
// layout alone, which the caller passes back unchanged to free or resize it.
unsafe impl GlobalAlloc for BigAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if big(layout) {
            unsafe { map(layout.size()) }
        } else {
            unsafe { System.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if big(layout) {
            // Fresh anonymous pages read as zero: nothing to clear or touch.
            unsafe { map(layout.size()) }
        } else {
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if big(layout) {
            unsafe { libc::munmap(ptr.cast(), layout.size()) };
        } else {
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (big(layout), big(new)) {
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                let p = unsafe { libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE) };
                if p == libc::MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    p.cast()
                }
            }
            // From one kind to the other: a new block, the bytes copied, the old freed.
            _ => unsafe {
                let p = self.alloc(new);
                if !p.is_null() {
                    std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                    self.dealloc(ptr, layout);
                }
                p
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes written survive every kind of resize, across the threshold both ways,
    /// and zeroed blocks read zero.
    #[test]
    fn blocks_keep_their_bytes_across_the_threshold() {
        let a = BigAlloc;
        let sizes = [100, BIG - 1, BIG, 3 * BIG + 5, BIG + 4096, 64, 2 * BIG];
        unsafe {
            let mut layout = Layout::from_size_align(sizes[0], 8).unwrap();
            let mut p = a.alloc(layout);
            assert!(!p.is_null());
            p.write_bytes(0xA5, sizes[0]);
            let mut filled = sizes[0];
            for &size in &sizes[1..] {
                p = a.realloc(p, layout, size);
                assert!(!p.is_null(), "resize to {size}");
                let kept = filled.min(size);
                assert!(
                    (0..kept).step_by(997).chain([kept - 1]).all(|i| *p.add(i) == 0xA5),
                    "resize to {size} lost bytes"
                );
                p.write_bytes(0xA5, size);
                (layout, filled) = (Layout::from_size_align(size, 8).unwrap(), size);
            }
            a.dealloc(p, layout);
            let z = Layout::from_size_align(2 * BIG, 64).unwrap();
            let q = a.alloc_zeroed(z);
            assert!((0..2 * BIG).step_by(4093).all(|i| *q.add(i) == 0));
            a.dealloc(q, z);
        }
    }

    /// A vector grown well past the threshold and shrunk back keeps its elements.
    #[test]
    fn a_vector_grows_and_shrinks_through_big_blocks() {
        let mut v: Vec<u64> = Vec::new();
        for i in 0..3_000_000u64 {
            v.push(i);
        }
        v.truncate(1000);
        v.shrink_to_fit();
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u64));
        let z = vec![0u32; 5_000_000];
        assert!(z.iter().all(|&x| x == 0));
    }
}
