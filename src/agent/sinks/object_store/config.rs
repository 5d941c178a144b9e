//! `type = "object_store"`: keys, defaults, validation, and the History Server
//! collector's environment each key falls back to.
//!
//! KubeRay's operator starts the collector image with the cluster's identity in its
//! environment (`RAY_CLUSTER_NAME`, `RAY_CLUSTER_NAMESPACE`, `RAY_ROLE`,
//! `OWNER_KIND`, `OWNER_NAME`) and the user's storage settings (`STORAGE_BACKEND`,
//! `STORAGE_ROOT_DIR`, `S3_BUCKET`, `S3_ENDPOINT`, `S3_REGION`, `S3FORCE_PATH_STYLE`,
//! `S3DISABLE_SSL`, `GCS_BUCKET`, `AZURE_STORAGE_CONTAINER`,
//! `AZURE_STORAGE_ACCOUNT_URL`), a JSON file named by `STORAGE_BACKEND_CONFIG_PATH`
//! overriding the storage ones as the collector's does (`s3Bucket`, `s3Endpoint`,
//! `s3Region`, `s3ForcePathStyle`, `s3DisableSSL`, `gcsBucket`, `azureContainer`,
//! `azureAccountURL`). A key written in the config wins over both.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::encode::{Layout, Owner};
use crate::agent::config::values::{DurationValue, Problems, SizeValue, HOUR, SEC};

/// The sink as written.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ObjectStoreRaw {
    pub name: Option<String>,
    /// `s3://bucket[/root]`, `gs://bucket[/root]` or `az://container[/root]`; the root
    /// is the History Server's `STORAGE_ROOT_DIR`.
    pub url: Option<String>,
    /// An S3-compatible server's URL (MinIO, SeaweedFS, Ceph...). Default
    /// `$S3_ENDPOINT`, else `$AWS_ENDPOINT_URL`; an `http://` one is allowed.
    pub endpoint: Option<String>,
    /// The S3 region. Default `$S3_REGION`, `$AWS_REGION`, else `us-east-1`.
    pub region: Option<String>,
    /// The RayCluster's namespace. Default `$RAY_CLUSTER_NAMESPACE`, else `default`.
    pub namespace: Option<String>,
    /// `"head"` (writes the session marker) or `"worker"`. Default `$RAY_ROLE`, else
    /// the pod label `ray.io/node-type` (`[node] labels_file`), else worker.
    pub role: Option<String>,
    /// `"rayjob"` or `"rayservice"` when one owns the cluster. Default `$OWNER_KIND`,
    /// else the pod label `ray.io/originated-from-crd`.
    pub owner_kind: Option<String>,
    /// The RayJob's or RayService's name. Default `$OWNER_NAME`, else the pod label
    /// `ray.io/originated-from-cr-name`.
    pub owner_name: Option<String>,
    /// The node's id (hex), for every session; default: what each session's raylet
    /// announces in `raylet.out` (`Setting node ID node_id=…`).
    pub node_id: Option<String>,
    /// An active file is uploaded again at most this often when it changed. Default
    /// `$PUSH_INTERVAL` (the collector's, which it parses and never uses), else `"1m"`.
    pub upload_interval: Option<DurationValue>,
    /// Past this size an active file is uploaded only at rotation and shutdown.
    /// Default `"256MiB"`.
    pub max_active_upload_bytes: Option<SizeValue>,
}

/// What `[node]` says of the pod: its cluster, and its labels.
#[derive(Clone, Copy)]
pub struct Node<'a> {
    pub cluster: Option<&'a str>,
    pub labels: &'a std::collections::BTreeMap<String, String>,
}

/// Which store the URL names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    S3,
    Gcs,
    Azure,
}

/// The validated sink.
#[derive(Clone, Debug)]
pub struct ObjectStoreConfig {
    pub name: String,
    pub backend: Backend,
    /// The bucket (or Azure container).
    pub bucket: String,
    pub endpoint: Option<String>,
    pub region: Option<String>,
    /// `S3FORCE_PATH_STYLE=false`: virtual-hosted-style requests.
    pub virtual_hosted: bool,
    /// The endpoint is plain http (`S3DISABLE_SSL`, or an `http://` endpoint).
    pub allow_http: bool,
    pub azure_account_url: Option<String>,
    pub layout: Layout,
    /// `node_id`, lowercase hex.
    pub node_id: Option<String>,
    /// The head writes the session marker.
    pub head: bool,
    pub upload_interval: Duration,
    pub max_active_upload_bytes: u64,
}

/// Where a value that the config leaves out comes from: the process environment,
/// overridden by `STORAGE_BACKEND_CONFIG_PATH`'s JSON for the storage keys.
pub struct Env<'a> {
    var: &'a dyn Fn(&str) -> Option<String>,
    json: serde_json::Map<String, serde_json::Value>,
}

impl<'a> Env<'a> {
    /// `var` reads one environment variable (`std::env::var` in the agent).
    pub fn new(var: &'a dyn Fn(&str) -> Option<String>, p: &mut Problems) -> Env<'a> {
        let mut json = serde_json::Map::new();
        if let Some(path) = var("STORAGE_BACKEND_CONFIG_PATH").filter(|s| !s.is_empty()) {
            match std::fs::read_to_string(&path).map_err(|e| e.to_string()).and_then(|t| {
                serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&t).map_err(|e| e.to_string())
            }) {
                Ok(m) => json = m,
                Err(e) => p.add(
                    "STORAGE_BACKEND_CONFIG_PATH",
                    format!("{path}: {e} (expected a JSON object such as {{\"s3Bucket\": \"logs\"}})"),
                ),
            }
        }
        Env { var, json }
    }

    fn var(&self, name: &str) -> Option<String> {
        (self.var)(name).map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
    }

    /// A storage setting: the JSON file's `key` when there is a file (the collector
    /// then ignores the environment for it), else `$name`.
    fn storage(&self, key: &str, name: &str) -> Option<String> {
        if self.json.is_empty() {
            return self.var(name);
        }
        match self.json.get(key)? {
            serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
            serde_json::Value::Bool(b) => Some(b.to_string()),
            _ => None,
        }
    }
}

impl ObjectStoreRaw {
    /// `node` gives the cluster's name and, in a pod with the downward-API labels
    /// file, KubeRay's labels: `ray.io/node-type` for the role, and
    /// `ray.io/originated-from-crd`/`-cr-name` for the owner.
    pub fn validate(&self, key: &str, node: Node<'_>, env: &Env<'_>, p: &mut Problems) -> ObjectStoreConfig {
        let label = |k: &str| node.labels.get(k).cloned().filter(|v| !v.is_empty());
        let cluster = node.cluster;
        let url = self.url.clone().or_else(|| url_from_env(env, key, p)).unwrap_or_default();
        let (backend, bucket, root) = parse_url(&url).unwrap_or_else(|e| {
            p.add(&format!("{key}.url"), e);
            (Backend::S3, String::new(), String::new())
        });
        let endpoint = (self.endpoint.clone())
            .or_else(|| env.storage("s3Endpoint", "S3_ENDPOINT"))
            .or_else(|| env.var("AWS_ENDPOINT_URL"))
            .or_else(|| env.var("AWS_ENDPOINT"));
        let insecure = env.storage("s3DisableSSL", "S3DISABLE_SSL").is_some_and(|v| v == "true")
            || env.var("AWS_ALLOW_HTTP").is_some_and(|v| v == "true");
        let allow_http = insecure || endpoint.as_deref().is_some_and(|e| e.starts_with("http://"));
        let endpoint = endpoint.map(|e| {
            if e.contains("://") {
                e
            } else {
                format!("{}://{e}", ["https", "http"][allow_http as usize])
            }
        });
        let region =
            self.region.clone().or_else(|| env.storage("s3Region", "S3_REGION")).or_else(|| env.var("AWS_REGION"));
        let virtual_hosted = env.storage("s3ForcePathStyle", "S3FORCE_PATH_STYLE").is_some_and(|v| v == "false");
        let role = (self.role.clone())
            .or_else(|| env.var("RAY_ROLE"))
            .or_else(|| label("ray.io/node-type"))
            .unwrap_or_else(|| "worker".into());
        let head = match role.to_ascii_lowercase().as_str() {
            "head" => true,
            "worker" => false,
            other => {
                p.add(&format!("{key}.role"), format!("{other:?} is neither \"head\" nor \"worker\" (RAY_ROLE)"));
                false
            }
        };
        let cluster = cluster.unwrap_or_else(|| {
            p.add(
                "node.cluster",
                "the object_store sink needs the cluster's name: set node.cluster or RAY_CLUSTER_NAME",
            );
            ""
        });
        let layout = Layout {
            root,
            namespace: self
                .namespace
                .clone()
                .or_else(|| env.var("RAY_CLUSTER_NAMESPACE"))
                .unwrap_or_else(|| "default".into()),
            owner: self.owner(key, env, &label, p),
            cluster: cluster.to_string(),
        };
        ObjectStoreConfig {
            name: self.name.clone().unwrap_or_else(|| "object_store".into()),
            backend,
            bucket,
            endpoint,
            region,
            virtual_hosted,
            allow_http,
            azure_account_url: env.storage("azureAccountURL", "AZURE_STORAGE_ACCOUNT_URL"),
            layout,
            node_id: self.node_id.as_deref().and_then(|n| {
                let hex = super::encode::hex_id(n).filter(|h| h.len() == 56 && n.len() == 56);
                if hex.is_none() {
                    p.add(
                        &format!("{key}.node_id"),
                        format!("{n:?} is not a node id (56 hex digits, as raylet.out prints it)"),
                    );
                }
                hex
            }),
            head,
            upload_interval: (self.upload_interval.clone())
                .or_else(|| env.var("PUSH_INTERVAL").map(DurationValue::Text))
                .map_or(60 * SEC, |v| v.get(&format!("{key}.upload_interval"), SEC..=24 * HOUR, p)),
            max_active_upload_bytes: (self.max_active_upload_bytes.as_ref())
                .map_or(256 << 20, |v| v.get(&format!("{key}.max_active_upload_bytes"), 0..=1 << 40, p)),
        }
    }

    fn owner(
        &self,
        key: &str,
        env: &Env<'_>,
        label: &dyn Fn(&str) -> Option<String>,
        p: &mut Problems,
    ) -> Option<(Owner, String)> {
        let kind =
            (self.owner_kind.clone()).or_else(|| env.var("OWNER_KIND")).or_else(|| label("ray.io/originated-from-crd"));
        let name = (self.owner_name.clone())
            .or_else(|| env.var("OWNER_NAME"))
            .or_else(|| label("ray.io/originated-from-cr-name"));
        let kind = match kind.as_deref().map(str::to_ascii_lowercase).as_deref() {
            None | Some("raycluster") => None,
            Some("rayjob") => Some(Owner::RayJob),
            Some("rayservice") => Some(Owner::RayService),
            Some(other) => {
                p.add(&format!("{key}.owner_kind"), format!("{other:?}: expected \"rayjob\" or \"rayservice\" (OWNER_KIND), or none for a RayCluster of its own"));
                None
            }
        };
        match (kind, name) {
            (Some(k), Some(n)) => Some(k.named(n)),
            (None, None) => None,
            (None, Some(_)) if self.owner_name.is_some() => {
                p.add(&format!("{key}.owner_name"), "needs owner_kind (OWNER_KIND): \"rayjob\" or \"rayservice\"");
                None
            }
            (None, Some(_)) => None,
            (Some(_), None) => {
                p.add(&format!("{key}.owner_kind"), "needs owner_name (OWNER_NAME): the RayJob's or RayService's name");
                None
            }
        }
    }
}

/// The URL the collector's `STORAGE_BACKEND` and bucket variables describe.
fn url_from_env(env: &Env<'_>, key: &str, p: &mut Problems) -> Option<String> {
    let backend = env.var("STORAGE_BACKEND")?.to_ascii_lowercase();
    let root = env.var("STORAGE_ROOT_DIR").unwrap_or_default();
    let bucket = match backend.as_str() {
        "s3" => ("s3", env.storage("s3Bucket", "S3_BUCKET").unwrap_or_else(|| "ray-historyserver".into())),
        "gcs" => ("gs", env.storage("gcsBucket", "GCS_BUCKET").unwrap_or_default()),
        "azureblob" => (
            "az",
            env.storage("azureContainer", "AZURE_STORAGE_CONTAINER").unwrap_or_else(|| "ray-historyserver".into()),
        ),
        other => {
            p.add(
                &format!("{key}.url"),
                format!("STORAGE_BACKEND={other:?} is not one raylog writes to: s3, gcs or azureblob"),
            );
            return None;
        }
    };
    Some(format!("{}://{}/{}", bucket.0, bucket.1, root.trim_matches('/')))
}

/// `(backend, bucket, root)` of a store URL; the root without slashes at its ends.
pub fn parse_url(url: &str) -> Result<(Backend, String, String), String> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("{url:?} is not a store URL; e.g. \"s3://bucket/root\", \"gs://bucket\", \"az://container\" (or set STORAGE_BACKEND and its bucket variable)"));
    };
    let backend = match scheme {
        "s3" | "s3a" => Backend::S3,
        "gs" | "gcs" => Backend::Gcs,
        "az" | "azure" | "abfs" => Backend::Azure,
        other => return Err(format!("{other}:// is not a store raylog writes to: s3://, gs:// or az://")),
    };
    let (bucket, root) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(format!("{url:?} names no bucket"));
    }
    Ok((backend, bucket.to_string(), root.trim_matches('/').to_string()))
}
