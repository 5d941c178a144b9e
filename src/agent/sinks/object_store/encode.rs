//! The object keys of KubeRay's History Server (ray-project/kuberay,
//! `historyserver/pkg/storage/clusterlogs`, `clustermetadata` and
//! `pkg/collector/eventcollector`), and which keys an event goes to.
//!
//! - Cluster prefix `P`: `[root/]cluster-history/raycluster/<ns>/<cluster>`, or
//!   `[root/]cluster-history/{rayjob|rayservice}/<ns>/<owner>/<cluster>`.
//! - Session marker: an empty object at
//!   `[root/]cluster-metadata/<kind>/<ns>_[<owner>_]<cluster>/<session>`: the reader
//!   lists these, and a session without one is invisible.
//! - Logs: `P/<session>/<nodeIdHex>/logs/<path under the session's logs dir>`.
//! - Events: `P/<session>/<nodeIdHex>/node_events/<nodeIdHex>-<YYYY-MM-DD-HH>-<n>.jsonl`
//!   for node events and events of no job, `…/job_events/<jobIdHex>/<same name>` for
//!   the others; one event per line. The reader takes any `<n>`: raylog's is the
//!   spool position of the object's first event (`seq × 10¹² + offset`), so an upload
//!   retried after a crash writes the same key again. The hour is the event's own.

/// Who owns the RayCluster, when not itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Owner {
    RayJob,
    RayService,
}

impl Owner {
    pub fn named(self, name: String) -> (Owner, String) {
        (self, name)
    }

    fn kind(self) -> &'static str {
        match self {
            Owner::RayJob => "rayjob",
            Owner::RayService => "rayservice",
        }
    }
}

/// Where one cluster's objects go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `STORAGE_ROOT_DIR`, without slashes at its ends (may be empty).
    pub root: String,
    pub namespace: String,
    pub owner: Option<(Owner, String)>,
    pub cluster: String,
}

impl Layout {
    fn join(&self, rest: &str) -> String {
        if self.root.is_empty() {
            rest.to_string()
        } else {
            format!("{}/{rest}", self.root)
        }
    }

    /// `P`: the cluster's prefix.
    pub fn prefix(&self) -> String {
        match &self.owner {
            None => self.join(&format!("cluster-history/raycluster/{}/{}", self.namespace, self.cluster)),
            Some((o, name)) => {
                self.join(&format!("cluster-history/{}/{}/{name}/{}", o.kind(), self.namespace, self.cluster))
            }
        }
    }

    /// The session marker's key.
    pub fn marker(&self, session: &str) -> String {
        match &self.owner {
            None => self.join(&format!("cluster-metadata/raycluster/{}_{}/{session}", self.namespace, self.cluster)),
            Some((o, name)) => self.join(&format!(
                "cluster-metadata/{}/{}_{name}_{}/{session}",
                o.kind(),
                self.namespace,
                self.cluster
            )),
        }
    }

    /// A log file's key; `rel` is its path under the session's logs dir.
    pub fn log(&self, session: &str, node: &str, rel: &str) -> String {
        format!("{}/{session}/{node}/logs/{rel}", self.prefix())
    }

    /// An events object's key: `job` is the job's hex id, `None` for node events.
    pub fn events(&self, session: &str, node: &str, job: Option<&str>, hour: &str, n: u64) -> String {
        let dir = match job {
            None => "node_events".to_string(),
            Some(j) => format!("job_events/{j}"),
        };
        format!("{}/{session}/{node}/{dir}/{node}-{hour}-{n}.jsonl", self.prefix())
    }
}

/// An id as the History Server names it: lowercase hex, whether Ray sent it as hex
/// or (in its events) as base64.
pub fn hex_id(id: &str) -> Option<String> {
    if !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Some(id.to_ascii_lowercase());
    }
    // Ray's base64 is standard; the collector also takes the URL-safe alphabet.
    let std: String = id
        .chars()
        .map(|c| match c {
            '-' => '+',
            '_' => '/',
            c => c,
        })
        .collect();
    raylog_parsers::id::id_from_base64(std.as_bytes()).map(|i| i.as_str().to_string())
}

/// The payloads whose `jobId` files an event under its job, in the collector's order.
const JOB_PAYLOADS: [&str; 7] = [
    "driverJobDefinitionEvent",
    "driverJobLifecycleEvent",
    "taskDefinitionEvent",
    "taskLifecycleEvent",
    "taskProfileEvents",
    "actorTaskDefinitionEvent",
    "actorDefinitionEvent",
];

/// Where one event goes, read from it as the collector reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct EventPlace {
    pub session: String,
    /// The job's hex id; `None`: node events.
    pub job: Option<String>,
    /// `YYYY-MM-DD-HH` of its `timestamp` (UTC, as Ray writes it).
    pub hour: String,
    pub event_id: Option<String>,
    /// The node the event names (`nodeId`, hex), for a session whose logs this
    /// node does not mirror.
    pub node: Option<String>,
}

/// Where `event` goes, or why it cannot go anywhere.
pub fn place(event: &serde_json::Value) -> Result<EventPlace, &'static str> {
    let session = event["sessionName"].as_str().filter(|s| safe(s)).ok_or("no sessionName")?;
    let ts = event["timestamp"].as_str().ok_or("no timestamp")?;
    let hour = hour_of(ts).ok_or("a timestamp that is not RFC 3339")?;
    let node_event = matches!(event["eventType"].as_str(), Some("NODE_LIFECYCLE_EVENT" | "NODE_DEFINITION_EVENT"));
    let job = (!node_event)
        .then(|| {
            JOB_PAYLOADS.iter().find_map(|k| event[*k]["jobId"].as_str().filter(|j| !j.is_empty()).and_then(hex_id))
        })
        .flatten()
        .filter(|j| safe(j));
    let event_id = event["eventId"].as_str().map(str::to_string);
    let node = event["nodeId"].as_str().and_then(hex_id).filter(|n| safe(n));
    Ok(EventPlace { session: session.to_string(), job, hour, event_id, node })
}

/// A name the reader accepts as one path segment (`^[A-Za-z0-9._-]+$`, not `.`/`..`).
fn safe(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// `2026-11-30T09:05:36.39Z` → `2026-11-30-09`.
fn hour_of(ts: &str) -> Option<String> {
    let t: jiff::Timestamp = ts.parse().ok()?;
    Some(t.strftime("%Y-%m-%d-%H").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(owner: Option<(Owner, String)>, root: &str) -> Layout {
        Layout { root: root.into(), namespace: "ns".into(), owner, cluster: "c1".into() }
    }

    // The keys as kuberay's own tests spell them (clusterlogs_test.go,
    // clustermetadata_test.go, eventcollector_test.go at feeaf72).
    #[test]
    fn keys_follow_the_history_servers_layout() {
        let l = layout(None, "");
        assert_eq!(l.prefix(), "cluster-history/raycluster/ns/c1");
        assert_eq!(l.marker("session_x"), "cluster-metadata/raycluster/ns_c1/session_x");
        assert_eq!(
            l.log("session_x", "ab", "events/event_GCS.log"),
            "cluster-history/raycluster/ns/c1/session_x/ab/logs/events/event_GCS.log"
        );
        let j = layout(Some((Owner::RayJob, "myjob".into())), "root/dir");
        assert_eq!(j.prefix(), "root/dir/cluster-history/rayjob/ns/myjob/c1");
        assert_eq!(j.marker("s"), "root/dir/cluster-metadata/rayjob/ns_myjob_c1/s");
        assert_eq!(
            j.events("s", "ab", Some("01000000"), "2026-11-30-09", 7),
            "root/dir/cluster-history/rayjob/ns/myjob/c1/s/ab/job_events/01000000/ab-2026-11-30-09-7.jsonl"
        );
        assert_eq!(
            j.events("s", "ab", None, "2026-11-30-09", 7),
            "root/dir/cluster-history/rayjob/ns/myjob/c1/s/ab/node_events/ab-2026-11-30-09-7.jsonl"
        );
    }

    #[test]
    fn events_go_where_the_collector_puts_them() {
        let task = serde_json::json!({"eventType": "TASK_DEFINITION_EVENT", "sessionName": "session_1", "timestamp": "2026-11-30T09:05:36.393944816Z", "eventId": "e1", "taskDefinitionEvent": {"jobId": "AQAAAA=="}});
        let p = place(&task).unwrap();
        assert_eq!(
            (p.session.as_str(), p.job.as_deref(), p.hour.as_str()),
            ("session_1", Some("01000000"), "2026-11-30-09")
        );
        let node = serde_json::json!({"eventType": "NODE_DEFINITION_EVENT", "sessionName": "session_1", "timestamp": "2026-11-30T23:59:59Z", "nodeDefinitionEvent": {"jobId": "AQAAAA=="}});
        assert_eq!(place(&node).unwrap().job, None);
        // ACTOR_LIFECYCLE_EVENT's payload is not one the collector files under a job.
        let actor = serde_json::json!({"eventType": "ACTOR_LIFECYCLE_EVENT", "sessionName": "session_1", "timestamp": "2026-11-30T09:00:00Z", "actorLifecycleEvent": {"jobId": "AQAAAA=="}});
        assert_eq!(place(&actor).unwrap().job, None);
        assert!(place(&serde_json::json!({"timestamp": "2026-11-30T09:00:00Z"})).is_err());
        assert_eq!(hex_id("AQAAAA==").as_deref(), Some("01000000"));
        assert_eq!(hex_id("ABCDEF").as_deref(), Some("abcdef"));
    }
}
