//! The agent's own HTTP endpoints: `/metrics` (Prometheus), `/healthz` (alive),
//! `/readyz` (started and not shutting down), and `POST /drain` (a pod's `preStop`,
//! through `raylog drain`: the object store's last round now, answered when done).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::agent::metrics::Metrics;

/// What the endpoints report.
#[derive(Default)]
pub struct Health {
    pub ready: AtomicBool,
    /// Asks the object store for a last round now; the answer is its summary.
    pub drain: std::sync::Mutex<Option<tokio::sync::mpsc::Sender<tokio::sync::oneshot::Sender<String>>>>,
}

#[derive(Clone)]
struct Shared {
    metrics: Arc<Metrics>,
    health: Arc<Health>,
}

/// Binds `addr` and serves until the runtime stops. Returns the bound address.
pub async fn serve(addr: SocketAddr, metrics: Arc<Metrics>, health: Arc<Health>) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("api.address {addr}: cannot listen: {e}; pick a free port or set address = \"\""),
        )
    })?;
    let bound = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/drain", axum::routing::post(drain))
        .with_state(Shared { metrics, health });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "api server stopped");
        }
    });
    Ok(bound)
}

async fn render_metrics(State(s): State<Shared>) -> impl IntoResponse {
    ([("content-type", "text/plain; version=0.0.4")], s.metrics.render())
}

async fn readyz(State(s): State<Shared>) -> impl IntoResponse {
    if s.health.ready.load(Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready\n")
    }
}

/// Runs the object store's last round now and answers with its summary when it is
/// done: 200 when every write went, 500 when some failed, 404 with no object store.
async fn drain(State(s): State<Shared>) -> impl IntoResponse {
    let tx = s.health.drain.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let Some(tx) = tx else {
        return (StatusCode::NOT_FOUND, "no object_store sink: nothing to drain\n".to_string());
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    if tx.send(reply).await.is_err() {
        return (StatusCode::SERVICE_UNAVAILABLE, "the object store is stopping\n".to_string());
    }
    match answer.await {
        Ok(summary) if summary.contains("\"failures\":0") => (StatusCode::OK, summary),
        Ok(summary) => (StatusCode::INTERNAL_SERVER_ERROR, summary),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "the object store stopped\n".to_string()),
    }
}
