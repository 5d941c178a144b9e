//! `s3://`, `gs://` and `az://` inputs: a History Server layout in a bucket, read
//! back by `parse`, `trace` and `health`.
//!
//! The objects under the given prefix (a bucket root, a cluster, a session or a
//! node) are streamed, several at once, into a scratch dir laid out as the commands
//! read a node (`<node>/<session>/logs/…`, and the node's event objects as a spool
//! beside it: `<node>/ray_events/ray_events-….ndjson`), which is removed afterwards.
//! Only the logs and events are fetched: markers and `fetched_endpoints/` are not
//! logs. Credentials come the standard way (environment, web identity, instance
//! role); an S3-compatible server is named by `AWS_ENDPOINT_URL` (or the History
//! Server collector's `S3_ENDPOINT`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use futures_util::{StreamExt, TryStreamExt};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt};
use tokio::io::AsyncWriteExt;

use crate::agent::sinks::object_store::config::{parse_url, Backend};
use crate::agent::sinks::object_store::service::{brief, MTIME};

/// Objects fetched at once.
const PARALLEL: usize = 16;

/// Whether `p` names a bucket rather than a local path.
pub fn is_remote(p: &Path) -> bool {
    let s = p.to_string_lossy();
    ["s3://", "s3a://", "gs://", "gcs://", "az://", "azure://", "abfs://"].iter().any(|x| s.starts_with(x))
}

/// The scratch dir of the fetched objects; removed when dropped.
pub struct Fetched(Option<PathBuf>);

impl Drop for Fetched {
    fn drop(&mut self) {
        if let Some(d) = self.0.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// Replaces every bucket URL in `paths` by the local copy of what it holds.
pub fn localize(paths: &mut [PathBuf]) -> Result<Fetched> {
    if !paths.iter().any(|p| is_remote(p)) {
        return Ok(Fetched(None));
    }
    // One per call: the Python module may fetch for several calls of one process.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let scratch = std::env::temp_dir().join(format!("raylog-fetch-{}-{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let guard = Fetched(Some(scratch.clone()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    for (i, p) in paths.iter_mut().filter(|p| is_remote(p)).enumerate() {
        let url = p.to_string_lossy().into_owned();
        let dir = scratch.join(i.to_string());
        let n = rt.block_on(fetch(&url, &dir))?;
        if n == 0 {
            anyhow::bail!("{url}: no logs or events under this prefix; give a cluster, session or node prefix of the History Server layout (…/cluster-history/raycluster/<ns>/<cluster>[/<session>[/<node>]])");
        }
        *p = dir;
    }
    Ok(guard)
}

fn store_for(url: &str) -> Result<(Arc<dyn ObjectStore>, String)> {
    let (backend, bucket, root) = parse_url(url).map_err(anyhow::Error::msg)?;
    let store: Arc<dyn ObjectStore> = match backend {
        Backend::S3 => {
            let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(&bucket);
            let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
            if let Some(e) = env("AWS_ENDPOINT_URL").or_else(|| env("S3_ENDPOINT")) {
                b = b.with_allow_http(e.starts_with("http://")).with_endpoint(e);
            }
            if let Some(r) = env("AWS_REGION").or_else(|| env("S3_REGION")) {
                b = b.with_region(r);
            }
            Arc::new(b.build().with_context(|| format!("{url}: cannot set up the S3 client"))?)
        }
        Backend::Gcs => Arc::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(&bucket)
                .build()
                .with_context(|| format!("{url}: cannot set up the GCS client"))?,
        ),
        Backend::Azure => Arc::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_container_name(&bucket)
                .build()
                .with_context(|| format!("{url}: cannot set up the Azure client"))?,
        ),
    };
    Ok((store, root))
}

/// Where an object goes in the scratch dir, if it is a log or an events object.
pub fn local_path(key: &str) -> Option<PathBuf> {
    let parts: Vec<&str> = key.split('/').collect();
    if let Some(i) = parts.iter().position(|p| *p == "logs").filter(|i| *i >= 2) {
        let (session, node) = (parts[i - 2], parts[i - 1]);
        if session.starts_with("session_") && i + 1 < parts.len() {
            return Some(PathBuf::from(node).join(session).join("logs").join(parts[i + 1..].join("/")));
        }
    }
    let i = parts.iter().position(|p| *p == "node_events" || *p == "job_events").filter(|i| *i >= 2)?;
    let (session, node, name) = (parts[i - 2], parts[i - 1], parts.last()?);
    if !session.starts_with("session_") {
        return None;
    }
    let stem = name.trim_end_matches(".gz").trim_end_matches(".jsonl");
    let job = if parts[i] == "job_events" { parts.get(i + 1).copied().unwrap_or("") } else { "node" };
    Some(PathBuf::from(node).join("ray_events").join(format!("ray_events-{session}-{job}-{stem}.ndjson")))
}

/// Fetches what lies under `url` into `dir`; returns how many objects.
async fn fetch(url: &str, dir: &Path) -> Result<u64> {
    let (store, root) = store_for(url)?;
    let prefix = (!root.is_empty()).then(|| Key::from(root.as_str()));
    let metas: Vec<object_store::ObjectMeta> = store.list(prefix.as_ref()).try_collect().await.map_err(|e| {
        anyhow::anyhow!(
            "{url}: cannot list the objects: {} (an S3-compatible server is named by AWS_ENDPOINT_URL)",
            brief(&e)
        )
    })?;
    let wanted: Vec<(String, PathBuf)> = metas
        .iter()
        .filter_map(|m| local_path(m.location.as_ref()).map(|p| (m.location.to_string(), dir.join(p))))
        .collect();
    let n = wanted.len() as u64;
    let mut jobs = futures_util::stream::iter(wanted.into_iter().map(|(key, to)| {
        let store = store.clone();
        async move { get(&*store, &key, &to).await.with_context(|| format!("{key}: cannot fetch it")) }
    }))
    .buffer_unordered(PARALLEL);
    while let Some(r) = jobs.next().await {
        r?;
    }
    Ok(n)
}

/// Streams one object to `to` (gunzipped when it is a `.gz` events object).
async fn get(store: &dyn ObjectStore, key: &str, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let got = store.get(&Key::from(key)).await.map_err(|e| anyhow::anyhow!(brief(&e)))?;
    // The file's mtime on the node, where the agent kept it; else the object's time.
    let mtime = got
        .attributes
        .get(&object_store::Attribute::Metadata(MTIME.into()))
        .and_then(|v| v.parse::<i64>().ok())
        .map(|ns| std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns.max(0) as u64))
        .unwrap_or_else(|| got.meta.last_modified.into());
    let mut stream = got.into_stream();
    let mut f = tokio::fs::File::create(to).await?;
    if key.ends_with(".gz") {
        // Events objects are small (the collector's are 100 MB at most): gunzipped whole.
        let mut all = vec![];
        while let Some(chunk) = stream.next().await {
            all.extend_from_slice(&chunk.map_err(|e| anyhow::anyhow!(brief(&e)))?);
        }
        let mut text = vec![];
        std::io::Read::read_to_end(&mut flate2::read::MultiGzDecoder::new(&all[..]), &mut text)?;
        f.write_all(&text).await?;
    } else {
        while let Some(chunk) = stream.next().await {
            f.write_all(&chunk.map_err(|e| anyhow::anyhow!(brief(&e)))?).await?;
        }
    }
    f.flush().await?;
    f.into_std().await.set_modified(mtime)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_the_layout_land_where_the_commands_read_a_node() {
        let p = "root/cluster-history/raycluster/ns/c1/session_2026_x/ab12/logs/events/event_GCS.log";
        assert_eq!(local_path(p).unwrap(), PathBuf::from("ab12/session_2026_x/logs/events/event_GCS.log"));
        let e = "cluster-history/raycluster/ns/c1/session_2026_x/ab12/job_events/01000000/ab12-2026-12-01-19-5.jsonl";
        assert_eq!(
            local_path(e).unwrap(),
            PathBuf::from("ab12/ray_events/ray_events-session_2026_x-01000000-ab12-2026-12-01-19-5.ndjson")
        );
        assert!(local_path("cluster-metadata/raycluster/ns_c1/session_2026_x").is_none());
        assert!(
            local_path("cluster-history/raycluster/ns/c1/session_2026_x/fetched_endpoints/restful__timezone").is_none()
        );
    }
}
