//! `[events]`: the receiver of Ray's exported events (see [`crate::agent::events`]).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::values::{Problems, SizeValue};

/// `[events]` as written.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct EventsRaw {
    /// `host:port` to receive Ray's event POSTs on (Ray's
    /// `RAY_DASHBOARD_AGGREGATOR_AGENT_EVENTS_EXPORT_ADDR` points here). Unset or
    /// `""`: no receiver.
    pub address: Option<String>,
    /// A URL that gets every accepted batch unchanged (e.g. KubeRay's history-server
    /// collector), since Ray posts to one address only.
    pub forward_to: Option<String>,
    /// Larger POST bodies are refused with 413. Default `"32MiB"`.
    pub max_body_bytes: Option<SizeValue>,
    /// Events accepted but not yet delivered (and forwarded) at most; beyond it Ray
    /// is answered 503 and retries. Default `"256MiB"`.
    pub spool_max_bytes: Option<SizeValue>,
}

/// Validated `[events]`.
#[derive(Clone, Debug)]
pub struct EventsConfig {
    pub address: SocketAddr,
    pub forward_to: Option<reqwest::Url>,
    pub max_body_bytes: u64,
    pub spool_max_bytes: u64,
    /// `<state_dir>/ray_events`.
    pub spool_dir: PathBuf,
}

/// `None` when the receiver is off (no `events.address`).
pub fn validate_events(e: &EventsRaw, state_dir: &Path, p: &mut Problems) -> Option<EventsConfig> {
    let forward_to = e.forward_to.as_deref().and_then(|u| match reqwest::Url::parse(u) {
        Ok(url) if matches!(url.scheme(), "http" | "https") => Some(url),
        Ok(url) => {
            p.add("events.forward_to", format!("scheme {:?} is not http or https", url.scheme()));
            None
        }
        Err(err) => {
            p.add("events.forward_to", format!("{u:?} is not a URL ({err}); e.g. \"http://history-server:8080/\""));
            None
        }
    });
    let max_body_bytes =
        e.max_body_bytes.as_ref().map_or(32 << 20, |v| v.get("events.max_body_bytes", 64 << 10..=1 << 30, p));
    let spool_max_bytes =
        e.spool_max_bytes.as_ref().map_or(256 << 20, |v| v.get("events.spool_max_bytes", 1 << 20..=1 << 40, p));
    if spool_max_bytes < max_body_bytes {
        p.add(
            "events.spool_max_bytes",
            "must be at least events.max_body_bytes, or no POST of that size could ever be taken".to_string(),
        );
    }
    let address = match e.address.as_deref().unwrap_or("") {
        "" => {
            if e.forward_to.is_some() {
                p.add(
                    "events.forward_to",
                    "needs events.address: only events raylog receives are forwarded".to_string(),
                );
            }
            return None;
        }
        a => match a.parse() {
            Ok(addr) => addr,
            Err(err) => {
                p.add(
                    "events.address",
                    format!("{a:?} is not host:port ({err}); e.g. \"0.0.0.0:8084\", or \"\" to disable"),
                );
                return None;
            }
        },
    };
    Some(EventsConfig { address, forward_to, max_body_bytes, spool_max_bytes, spool_dir: state_dir.join("ray_events") })
}
