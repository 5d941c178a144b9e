//! The agent (`raylog ship`): discover → tail → parse → enrich → batch → sink.
//!
//! - [`config`]: the TOML file, validated once.
//! - [`source`]: finds sessions and files, tails them across rotation, parses them
//!   with the `raylog-parsers` crate, and cuts [`batch::Batch`]es.
//! - [`enrich`]: between parse and batch: records that wait for an id not known
//!   yet (an actor worker's output for its actor, a new session's for its node).
//! - [`batch`] and [`pipeline`]: batches fanned out to the sinks' bounded channels,
//!   checkpoints advanced on acknowledgement.
//! - [`sinks`]: Loki, Elasticsearch, OTLP, stdout, file; retries and dead letters.
//! - [`checkpoint`]: per-file offsets, advanced only when every sink acknowledged
//!   everything before them, written atomically.
//! - [`api`] and [`metrics`]: `/metrics`, `/healthz`, `/readyz`.
//! - [`events`]: Ray's exported events, received over HTTP, spooled, read like a
//!   log file, and forwarded.

pub mod api;
pub mod batch;
pub mod checkpoint;
pub mod config;
pub mod enrich;
pub mod events;
pub mod fnv;
pub mod metrics;
pub mod pipeline;
pub mod ray_latency;
pub mod ray_metrics;
pub mod run;
pub mod sinks;
pub mod source;
pub mod watch;

/// Gives freed heap memory back to the OS. glibc keeps freed small blocks for
/// reuse, so a transient peak (a first scan of 100,000 files, a checkpoint merge)
/// would otherwise stay in the agent's RSS for good.
pub fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases free memory of the allocator's own arenas.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Arenas glibc's allocator may create. By default it makes up to 8 per core, one
/// per thread that meets contention, and memory freed in one is not reused by
/// another: on a node tracking 100,000 files that cost about 20 MiB of resident
/// memory after a catch-up (one arena: 67 MiB instead of 89; two: 77). The agent
/// allocates nothing per line on the hot path, so threads rarely meet in the
/// allocator. `MALLOC_ARENA_MAX`, if set, wins.
///
/// Blocks of [`MMAP_THRESHOLD`] or more are mapped on their own, so freeing one gives
/// its pages back at once. glibc raises that threshold to the size of each mapped
/// block freed (up to 32 MiB), and a first listing of a million files frees a 16 MiB
/// one at its start: the vectors that grew and were freed after it (the backlog as
/// it drains, a checkpoint merge's index) then stayed in the heap, 8 MiB more at
/// the peak of a million-file catch-up and after a restart. `MALLOC_MMAP_THRESHOLD_`,
/// if set, wins. Call before any thread starts.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before threads start.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_none() {
        // SAFETY: as above.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as i32);
        }
    }
}

/// See [`limit_arenas`]: above the 1-2 MiB a batch's buffers take, which are reused.
#[cfg_attr(not(all(target_os = "linux", target_env = "gnu")), allow(dead_code))]
const MMAP_THRESHOLD: usize = 4 << 20;
