//! A file's incarnation: what tells a file from an earlier one on the same inode.
//!
//! ext4 hands a freed inode straight back, so `(device, inode)` names a file only
//! for as long as it lives. A new worker file on the inode of a deleted one, with
//! the same banner, passed the reopen's check of its first bytes and was read from
//! the old file's offset (records skipped), and shared its document ids (a 409 from
//! Elasticsearch for a record never stored). The incarnation is a 32-bit digest of
//! something a reused inode cannot repeat:
//!
//! - the birth time statx gives (ext4 with 256-byte inodes, xfs, btrfs, tmpfs
//!   since Linux 5.x, and overlayfs over those), read with every stat;
//! - else the inode's generation number (`FS_IOC_GETVERSION`: ext4 with 128-byte
//!   inodes, ext2/3), which needs a descriptor, so it is read when the file is
//!   opened;
//! - else nothing ([`UNKNOWN`]: NFS, older tmpfs). Then, as before, only the first
//!   KiB of the file tells two incarnations apart, and two with the same first
//!   KiB (or fewer bytes, if the old file was shorter) pass for one.
//!
//! [`LEGACY`] marks a checkpoint written before raylog kept incarnations: such a
//! file is checked as an unknown one, and its document ids keep the form they had
//! (see `enrich::route::identity`), so an upgrade sends nothing under a new id.

use std::fs::{File, Metadata};

/// No incarnation known.
pub const UNKNOWN: u32 = 0;
/// From a checkpoint that had none (an older raylog).
pub const LEGACY: u32 = 1;

/// Whether `born` is a real incarnation (not [`UNKNOWN`] or [`LEGACY`]).
pub fn known(born: u32) -> bool {
    born > LEGACY
}

/// Whether `a` and `b` are known and differ: two files on one inode.
pub fn differ(a: u32, b: u32) -> bool {
    known(a) && known(b) && a != b
}

/// The incarnation a stat gives: from the birth time, where the file system keeps one.
pub fn of_metadata(md: &Metadata) -> u32 {
    #[cfg(test)]
    if tests::no_birth_time() {
        return UNKNOWN;
    }
    let Ok(t) = md.created() else { return UNKNOWN };
    let Ok(d) = t.duration_since(std::time::UNIX_EPOCH) else { return UNKNOWN };
    digest(b'b', d.as_secs(), d.subsec_nanos() as u64)
}

/// The incarnation of open file `f`: its birth time, else its inode's generation.
pub fn of_file(f: &File, md: &Metadata) -> u32 {
    match of_metadata(md) {
        UNKNOWN => generation(f).map_or(UNKNOWN, |g| digest(b'g', g, 0)),
        born => born,
    }
}

/// The inode's generation number (`FS_IOC_GETVERSION`), where the file system
/// gives one (it is 0, or the call fails, where it does not).
fn generation(f: &File) -> Option<u64> {
    use std::os::fd::AsRawFd;
    let mut g: libc::c_long = 0;
    // SAFETY: FS_IOC_GETVERSION writes one `long` through the pointer, which
    // points at `g`, alive for the call.
    let rc = unsafe { libc::ioctl(f.as_raw_fd(), libc::FS_IOC_GETVERSION, &mut g as *mut libc::c_long) };
    (rc == 0 && g != 0).then_some(g as u64)
}

/// 32 bits of `(kind, a, b)`, never [`UNKNOWN`] or [`LEGACY`].
fn digest(kind: u8, a: u64, b: u64) -> u32 {
    let mut bytes = [0u8; 17];
    bytes[0] = kind;
    bytes[1..9].copy_from_slice(&a.to_le_bytes());
    bytes[9..].copy_from_slice(&b.to_le_bytes());
    let h = crate::agent::fnv::hash64(&bytes);
    ((h ^ (h >> 32)) as u32).max(LEGACY + 1)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;

    thread_local! {
        static NO_BIRTH_TIME: Cell<bool> = const { Cell::new(false) };
    }

    /// Tests: this thread's stats give no birth time (as on ext4 with 128-byte
    /// inodes), until the guard drops.
    pub(crate) fn without_birth_time() -> impl Drop {
        struct Guard;
        impl Drop for Guard {
            fn drop(&mut self) {
                NO_BIRTH_TIME.with(|c| c.set(false));
            }
        }
        NO_BIRTH_TIME.with(|c| c.set(true));
        Guard
    }

    pub(super) fn no_birth_time() -> bool {
        NO_BIRTH_TIME.with(|c| c.get())
    }

    #[test]
    fn a_new_file_on_a_freed_inode_is_another_incarnation() {
        let dir = std::env::temp_dir().join(format!("raylog-born-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x");
        std::fs::write(&path, "a").unwrap();
        let md = std::fs::metadata(&path).unwrap();
        let first = super::of_file(&std::fs::File::open(&path).unwrap(), &md);
        if !super::known(super::of_metadata(&md)) {
            eprintln!("SKIPPED: this file system keeps no birth times");
            return;
        }
        assert_eq!(first, super::of_metadata(&md));
        // Birth times tick with the kernel's coarse clock (a few ms).
        std::thread::sleep(std::time::Duration::from_millis(30));
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, "a").unwrap();
        let md2 = std::fs::metadata(&path).unwrap();
        assert!(super::differ(first, super::of_metadata(&md2)), "born later, another incarnation");
        let _g = without_birth_time();
        assert_eq!(super::of_metadata(&md2), super::UNKNOWN);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
