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
//! - [`traces`]: Ray's task events, as read, made into OpenTelemetry spans.

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
pub mod traces;
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
/// Call before any thread starts.
///
/// glibc's mapping threshold is left to adapt: fixed at 4 MiB, vectors freed after
/// a million-file listing went back to the system (1-2 MiB less at its peak), but
/// the batch buffers of a busy agent stayed in the heap (peak 33-35 MiB where 28.5
/// on the 256 MiB tree); fixed at 1 MiB, they were mapped anew for each batch (4.7 %
/// more CPU into Loki, 12.8 % into Elasticsearch). The big blocks are mapped on
/// their own by [`crate::bigalloc`] instead, without glibc.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; called before threads start.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
}
