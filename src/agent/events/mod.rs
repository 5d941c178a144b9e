//! Ray's exported events, received next to the logs (`[events]`).
//!
//! Ray 2.60 can export task, actor, worker, node and job lifecycle events: with
//! `RAY_enable_ray_event=1` (and `RAY_enable_core_worker_ray_event_to_aggregator=1`
//! for task events) each node's dashboard agent POSTs them in batches to
//! `RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR`. raylog takes them there:
//!
//! - [`receiver`]: the HTTP endpoint on `events.address`; a post is answered 2xx
//!   only once it is in the [`spool`] and fsynced.
//! - [`spool`]: `<state_dir>/ray_events/ray_events-<seq>.ndjson`, bounded by
//!   `events.spool_max_bytes`. The source tails it like a log file (component
//!   `ray_event`, parsed by `raylog_parsers::formats::ray_event`): same records,
//!   sinks, checkpoints and acknowledgements as the logs, so an `actor_id` query
//!   returns the actor's log lines and its lifecycle events together, and the
//!   events' worker → actor links reach the correlator.
//! - [`forward`]: every accepted post, unchanged, to `events.forward_to`.
//!
//! Their counters ([`EventMetrics`], in `counters.rs`) belong to this stage; `/metrics`
//! renders them through `Metrics::stage`.
//!
//! A sealed segment is deleted once every sink acknowledged it and the forwarder
//! passed it; the checkpoint store tells the spool what was acknowledged
//! ([`spool::Delivered`]).

mod counters;
pub mod forward;
pub mod receiver;
pub mod spool;
#[cfg(test)]
pub(crate) mod tests;

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::agent::checkpoint::Resume;
use crate::agent::config::{EventsConfig, RetryConfig};
use crate::agent::metrics::Metrics;
pub use counters::EventMetrics;
pub use spool::{is_segment_name, Cursor, Delivered, Spool, SpoolError};

/// Why the receiver could not start.
#[derive(Debug, thiserror::Error)]
pub enum EventsError {
    #[error(transparent)]
    Spool(#[from] SpoolError),
    #[error("events.address {addr}: cannot listen: {source}; pick a free port or remove events.address")]
    Bind { addr: SocketAddr, source: std::io::Error },
}

/// The running receiver.
pub struct Events {
    pub bound: SocketAddr,
    pub delivered: Arc<Delivered>,
    pub spool: Arc<Mutex<Spool>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Events {
    /// Stops forwarding (what is not forwarded yet stays in the spool).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// Who else reads the spool: the object store from its saved cursor, and the
/// source when there are record sinks.
#[derive(Clone, Copy, Debug)]
pub struct SpoolReaders {
    pub uploaded: Option<Cursor>,
    pub records: bool,
}

/// Opens the spool (recovering it with the checkpoints in `resume`), binds the
/// receiver and starts the forwarder and the spool's janitor. `max_line_bytes` is
/// `source.max_line_bytes`: an event whose spool line is longer is refused (413)
/// rather than spooled for the source to cut.
pub async fn start(
    cfg: &EventsConfig,
    retry: &RetryConfig,
    resume: &Resume,
    metrics: Arc<Metrics>,
    max_line_bytes: usize,
    readers: SpoolReaders,
) -> Result<Events, EventsError> {
    let delivered = Arc::new(Delivered::default());
    let cursor = cfg.forward_to.as_ref().map(|_| forward::load_cursor(&cfg.spool_dir).unwrap_or_default());
    let readers = spool::Readers { forwarded: cursor, uploaded: readers.uploaded, records: readers.records };
    let spool = Spool::open_with(&cfg.spool_dir, cfg.spool_max_bytes, delivered.clone(), resume, readers)?;
    let spool = Arc::new(Mutex::new(spool));
    let listener = tokio::net::TcpListener::bind(cfg.address)
        .await
        .map_err(|source| EventsError::Bind { addr: cfg.address, source })?;
    let bound = listener.local_addr().map_err(|source| EventsError::Bind { addr: cfg.address, source })?;
    let metrics = metrics.stage::<EventMetrics>();
    metrics.enabled.store(true, Relaxed);
    let appended = Arc::new(tokio::sync::Notify::new());
    let app = receiver::router(spool.clone(), metrics.clone(), appended.clone(), cfg.max_body_bytes, max_line_bytes);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "the event receiver stopped");
        }
    });
    let (stop, stopped) = tokio::sync::watch::channel(false);
    if let Some(url) = cfg.forward_to.clone() {
        let (s, r, m, a) = (spool.clone(), retry.clone(), metrics.clone(), appended.clone());
        tokio::spawn(forward::run(s, url, r, m, a, stopped.clone()));
    }
    tokio::spawn(janitor(spool.clone(), metrics, stopped));
    Ok(Events { bound, delivered, spool, stop })
}

/// Deletes what was delivered and updates the spool gauge, every second.
async fn janitor(spool: Arc<Mutex<Spool>>, metrics: Arc<EventMetrics>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.changed() => return,
        }
        let s = spool.clone();
        let pending = tokio::task::spawn_blocking(move || {
            let mut s = s.lock().unwrap_or_else(|e| e.into_inner());
            s.clean();
            s.pending()
        })
        .await
        .unwrap_or(0);
        metrics.spool_bytes.store(pending as i64, Relaxed);
    }
}
