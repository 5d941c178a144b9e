//! The store, and the writes: a file streamed to its object (one request up to a
//! part, a multipart upload past it), a server-side copy, an events object.
//!
//! Memory is bounded by [`CONCURRENCY`] × the part size, whatever the files' sizes:
//! a file is read a part at a time and exactly up to the size the round saw (the
//! object is then the file's bytes at that moment; later appends go next round).

use std::sync::{Arc, Mutex};

use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as Key;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use tokio::io::AsyncReadExt;

use super::config::{Backend, ObjectStoreConfig};
use super::state::{Held, Pending, State};

/// The user metadata key of a file's mtime (ns since the epoch); S3 sends it as
/// `x-amz-meta-raylog-mtime-ns`. Multipart uploads carry none (`object_store`'s
/// multipart API takes no attributes): their objects' own time stands in.
pub const MTIME: &str = "raylog-mtime-ns";

/// Uploads under way at once.
pub const CONCURRENCY: usize = 4;
/// Part size: S3's minimum is 5 MiB, and at most 10,000 parts make an object.
const PART: u64 = 8 << 20;

/// One store, seen both ways.
#[derive(Clone)]
pub struct Store {
    pub objects: Arc<dyn ObjectStore>,
    pub multipart: Arc<dyn MultipartStore>,
}

/// Why a write failed: the key, and the store's own words.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("{key}: {}", brief(source))]
    Store { key: String, source: object_store::Error },
    #[error("{path}: {source}")]
    Read { path: String, source: std::io::Error },
    #[error("{path} shrank while it was uploaded (truncated?); it goes again next round")]
    Shrank { path: String },
    /// Another file took the name between the round's listing and the upload (a
    /// rotation): not a failure, the next round sees both where they are now.
    #[error("{path} was rotated before its upload; it goes next round")]
    Moved { path: String },
    #[error("{path}: cannot save the upload's id in the state dir: {source}")]
    State { path: String, source: std::io::Error },
}

impl Store {
    /// Builds the client; credentials come from the environment, web identity or
    /// the instance's role, as `object_store` finds them.
    pub fn build(c: &ObjectStoreConfig) -> Result<Store, object_store::Error> {
        let retry = object_store::RetryConfig {
            max_retries: 5,
            retry_timeout: std::time::Duration::from_secs(60),
            ..Default::default()
        };
        match c.backend {
            Backend::S3 => {
                let mut b = object_store::aws::AmazonS3Builder::from_env()
                    .with_bucket_name(&c.bucket)
                    .with_allow_http(c.allow_http)
                    .with_virtual_hosted_style_request(c.virtual_hosted)
                    .with_retry(retry)
                    .with_region(c.region.clone().unwrap_or_else(|| "us-east-1".into()));
                if let Some(e) = &c.endpoint {
                    b = b.with_endpoint(e);
                }
                let s = Arc::new(b.build()?);
                Ok(Store { objects: s.clone(), multipart: s })
            }
            Backend::Gcs => {
                let s = Arc::new(
                    object_store::gcp::GoogleCloudStorageBuilder::from_env()
                        .with_bucket_name(&c.bucket)
                        .with_retry(retry)
                        .build()?,
                );
                Ok(Store { objects: s.clone(), multipart: s })
            }
            Backend::Azure => {
                let mut b = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_container_name(&c.bucket)
                    .with_allow_http(c.allow_http)
                    .with_retry(retry);
                if let Some(u) = &c.azure_account_url {
                    b = b.with_endpoint(u.clone());
                }
                // The collector's AZURE_STORAGE_CONNECTION_STRING, which object_store
                // does not read itself: its account, key and endpoint.
                if let Ok(cs) = std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
                    for (k, v) in cs.split(';').filter_map(|kv| kv.split_once('=')) {
                        b = match k.trim() {
                            "AccountName" => b.with_account(v),
                            "AccountKey" => b.with_access_key(v),
                            "BlobEndpoint" => b.with_endpoint(v.to_string()),
                            _ => b,
                        };
                    }
                }
                let s = Arc::new(b.build()?);
                Ok(Store { objects: s.clone(), multipart: s })
            }
        }
    }

    /// An in-memory store, for tests.
    pub fn memory() -> Store {
        let s = Arc::new(object_store::memory::InMemory::new());
        Store { objects: s.clone(), multipart: s }
    }

    pub async fn put(&self, key: &str, bytes: Vec<u8>) -> Result<(), WriteError> {
        let err = |source| WriteError::Store { key: key.to_string(), source };
        self.objects.put(&Key::from(key), PutPayload::from(bytes)).await.map_err(err)?;
        Ok(())
    }

    /// A file's bytes, with its mtime as user metadata ([`MTIME`]): `raylog parse
    /// s3://…` gives the fetched copy that mtime, so a record with no time of its own
    /// gets the time it gets on the node.
    async fn put_file(&self, key: &str, bytes: Vec<u8>, mtime_ns: i64) -> Result<(), WriteError> {
        let err = |source| WriteError::Store { key: key.to_string(), source };
        let mut opts = object_store::PutOptions::default();
        opts.attributes.insert(object_store::Attribute::Metadata(MTIME.into()), mtime_ns.to_string().into());
        self.objects.put_opts(&Key::from(key), PutPayload::from(bytes), opts).await.map_err(err)?;
        Ok(())
    }

    pub async fn copy(&self, from: &str, to: &str) -> Result<(), WriteError> {
        let err = |source| WriteError::Store { key: format!("{from} → {to}"), source };
        self.objects.copy(&Key::from(from), &Key::from(to)).await.map_err(err)
    }

    /// Aborts the multipart uploads a killed run left (their ids are in `state`).
    pub async fn abort_left(&self, state: &Mutex<State>) {
        let left: Vec<Pending> = lock(state).uploads.iter().cloned().collect();
        for p in left {
            match self.multipart.abort_multipart(&Key::from(p.key.as_str()), &p.id).await {
                Ok(()) => tracing::info!(key = %p.key, "aborted a multipart upload a stopped raylog left"),
                Err(e) => {
                    tracing::warn!(key = %p.key, error = %e, "cannot abort a multipart upload a stopped raylog left (gone already?); forgetting it")
                }
            }
            lock(state).uploads.remove(&p);
        }
    }

    /// Streams the first `size` bytes of `path` to `key`.
    pub async fn upload_file(
        &self,
        path: &std::path::Path,
        key: &str,
        held: Held,
        state: &Mutex<State>,
    ) -> Result<u64, WriteError> {
        let size = held.size;
        let shown = || path.display().to_string();
        let mut f = tokio::fs::File::open(path).await.map_err(|source| WriteError::Read { path: shown(), source })?;
        // The file opened must be the one the round listed: what the object is said
        // to hold (and what a later copy after a rename relies on) is that file.
        let md = f.metadata().await.map_err(|source| WriteError::Read { path: shown(), source })?;
        if !super::mirror::held_of(&md).same_file(&held) {
            return Err(WriteError::Moved { path: shown() });
        }
        let part = PART.max(size.div_ceil(9_000));
        if size <= part {
            let buf = read_part(&mut f, size, path).await?;
            self.put_file(key, buf, held.mtime_ns).await?;
            return Ok(size);
        }
        let k = Key::from(key);
        let err = |source| WriteError::Store { key: key.to_string(), source };
        let id = self.multipart.create_multipart(&k).await.map_err(err)?;
        let pending = Pending { key: key.to_string(), id: id.clone() };
        {
            // Written ahead: a SIGKILL from here on leaves an id the next start aborts.
            let mut s = lock(state);
            s.uploads.insert(pending.clone());
            s.save().map_err(|source| WriteError::State { path: s.path().display().to_string(), source })?;
        }
        let done = self.parts(&mut f, path, &k, &id, size, part).await;
        let out = match done {
            Ok(parts) => self.multipart.complete_multipart(&k, &id, parts).await.map(|_| size).map_err(err),
            Err(e) => Err(e),
        };
        if out.is_err() {
            let _ = self.multipart.abort_multipart(&k, &id).await;
        }
        // An id completed or aborted needs no abort at the next start; the state is
        // saved with the round.
        lock(state).uploads.remove(&pending);
        out
    }

    async fn parts(
        &self,
        f: &mut tokio::fs::File,
        path: &std::path::Path,
        k: &Key,
        id: &String,
        size: u64,
        part: u64,
    ) -> Result<Vec<PartId>, WriteError> {
        let mut parts = vec![];
        let mut at = 0;
        while at < size {
            let n = part.min(size - at);
            let buf = read_part(f, n, path).await?;
            let put = self.multipart.put_part(k, id, parts.len(), PutPayload::from(buf)).await;
            parts.push(put.map_err(|source| WriteError::Store { key: k.to_string(), source })?);
            at += n;
        }
        Ok(parts)
    }
}

async fn read_part(f: &mut tokio::fs::File, n: u64, path: &std::path::Path) -> Result<Vec<u8>, WriteError> {
    let mut buf = Vec::with_capacity(n as usize);
    let got = (&mut *f)
        .take(n)
        .read_to_end(&mut buf)
        .await
        .map_err(|source| WriteError::Read { path: path.display().to_string(), source })?;
    if (got as u64) < n {
        return Err(WriteError::Shrank { path: path.display().to_string() });
    }
    Ok(buf)
}

/// A store error in one line: the status and the store's code and message where
/// its answer has them (`object_store` repeats the whole answer once per layer),
/// and what to check.
pub fn brief(e: &object_store::Error) -> String {
    let text = e.to_string();
    let between = |a: &str, b: &str| text.split_once(a).and_then(|(_, r)| r.split_once(b)).map(|(m, _)| m.to_string());
    let status = text.split_once("status code: ").map(|(_, r)| r.split(':').next().unwrap_or("").trim().to_string());
    let hint = match e {
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
            " (check the credentials: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, web identity or the instance role, and the bucket's policy)"
        }
        _ if text.contains("NoSuchBucket") => " (create the bucket, or fix the URL's bucket name)",
        _ => "",
    };
    match (status, between("<Code>", "</Code>"), between("<Message>", "</Message>")) {
        (Some(s), Some(c), Some(m)) => format!("{s}: {c}: {m}{hint}"),
        _ => format!("{}{hint}", text.lines().next().unwrap_or("").chars().take(400).collect::<String>()),
    }
}

pub fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}
