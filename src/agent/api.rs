//! The agent's own HTTP endpoints: `/metrics` (Prometheus), `/healthz` (alive),
//! `/readyz` (started and not shutting down).

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
