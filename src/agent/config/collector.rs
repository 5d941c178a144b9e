//! The KubeRay History Server collector's mode: the operator starts the image set as
//! `spec.historyServerOptions.collectorOptions.image` with its default command, the
//! cluster's identity and the storage settings in the environment, and nothing but
//! the Ray logs `emptyDir` at `/tmp/ray` mounted. With `STORAGE_BACKEND` and
//! `RAY_CLUSTER_NAME` set and a config that names no sink (the image's default), raylog
//! runs as that collector: one `object_store` sink from the environment, Ray's events
//! received on `0.0.0.0:$EVENTS_PORT` (8084, where the operator points Ray), and its
//! state under `/tmp/ray/raylog`, the only volume there is, and 25 s for the last
//! round at SIGTERM (`retry.shutdown_grace`; Kubernetes' grace period is 30 s).

use std::path::PathBuf;

use super::{RawConfig, SinkRaw};

/// The image's state dir, which the collector's pod does not mount.
const IMAGE_STATE_DIR: &str = "/var/lib/raylog";
pub const COLLECTOR_STATE_DIR: &str = "/tmp/ray/raylog";

/// Turns `raw` into the collector's config when the environment asks for it;
/// returns whether it did.
pub fn as_collector(raw: &mut RawConfig, var: &dyn Fn(&str) -> Option<String>) -> bool {
    let set = |k: &str| var(k).is_some_and(|v| !v.trim().is_empty());
    if !raw.sinks.is_empty() || !set("STORAGE_BACKEND") || !set("RAY_CLUSTER_NAME") {
        return false;
    }
    raw.sinks.push(SinkRaw::ObjectStore(Default::default()));
    if raw.events.address.is_none() {
        let port = var("EVENTS_PORT").filter(|p| !p.trim().is_empty()).unwrap_or_else(|| "8084".into());
        raw.events.address = Some(format!("0.0.0.0:{}", port.trim()));
    }
    if raw.source.state_dir.as_deref().is_none_or(|d| d == std::path::Path::new(IMAGE_STATE_DIR)) {
        raw.source.state_dir = Some(PathBuf::from(COLLECTOR_STATE_DIR));
    }
    // The last round at SIGTERM: within Kubernetes' default 30 s grace period.
    if raw.retry.shutdown_grace.is_none() {
        raw.retry.shutdown_grace = Some(super::values::DurationValue::Text("25s".into()));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    #[test]
    fn the_operators_environment_makes_the_image_its_collector() {
        let mut raw: RawConfig = toml::from_str(include_str!("../../../examples/docker/raylog.toml")).unwrap();
        let e = env(&[("STORAGE_BACKEND", "s3"), ("RAY_CLUSTER_NAME", "rc"), ("EVENTS_PORT", "8084")]);
        assert!(as_collector(&mut raw, &e));
        assert!(matches!(raw.sinks[..], [SinkRaw::ObjectStore(_)]));
        assert_eq!(raw.events.address.as_deref(), Some("0.0.0.0:8084"));
        assert_eq!(raw.source.state_dir.as_deref(), Some(std::path::Path::new(COLLECTOR_STATE_DIR)));
        // A config with sinks of its own, or no storage backend: left as it is.
        let mut loki: RawConfig = toml::from_str("[[sinks]]\ntype = \"loki\"\nendpoint = \"http://l:3100\"\n").unwrap();
        assert!(!as_collector(&mut loki, &e));
        let mut plain = RawConfig::default();
        assert!(!as_collector(&mut plain, &env(&[("RAY_CLUSTER_NAME", "rc")])));
    }
}
