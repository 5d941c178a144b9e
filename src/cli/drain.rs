//! `raylog drain`: a pod's `preStop` hook. The raylog image has no shell, so the hook
//! runs this binary: it asks the running agent (`POST /drain` on its api port) for
//! the object store's last round now, and returns when the round is done, before
//! Kubernetes sends SIGTERM. Exit 0 when every write went, 1 otherwise.

use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

#[derive(Args, Debug)]
#[command(
    about = "Upload everything to the object store now and wait (a pod's preStop hook)",
    long_about = "Upload everything to the object store now and wait (a pod's preStop hook).\n\n\
Asks the running `raylog ship` (POST /drain on its api.address) for the object store's last \
round: every file that changed, whatever its size, and the events spooled so far. Prints the \
round's summary and exits 0 when every write went, 1 when some failed or the agent cannot be \
reached. The agent keeps running; SIGTERM then stops it with little left to do.",
    after_help = "Examples:\n  raylog drain\n  raylog drain --api 127.0.0.1:9095 --timeout 5m\n\n\
Kubernetes:\n  lifecycle:\n    preStop:\n      exec:\n        command: [\"/usr/local/bin/raylog\", \"drain\"]"
)]
pub struct DrainArgs {
    /// The agent's api.address.
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9095")]
    pub api: String,
    /// Give up after this long (the pod's terminationGracePeriodSeconds bounds it anyway).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = crate::agent::config::values::parse_duration)]
    pub timeout: Duration,
}

/// Runs `raylog drain`.
pub fn run(a: DrainArgs) -> Result<u8> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")?;
    let url = format!("http://{}/drain", a.api);
    let answer = rt.block_on(async {
        let client = reqwest::Client::builder().timeout(a.timeout).build()?;
        let r = client.post(&url).send().await?;
        Ok::<_, reqwest::Error>((r.status(), r.text().await.unwrap_or_default()))
    });
    match answer {
        Ok((status, text)) if status.is_success() => {
            print!("{text}");
            Ok(0)
        }
        // An agent without an object store: its records go out at SIGTERM, within
        // retry.shutdown_grace; nothing is left for a preStop to do.
        Ok((reqwest::StatusCode::NOT_FOUND, text)) => {
            print!("{text}");
            Ok(0)
        }
        Ok((status, text)) => {
            eprintln!("raylog: drain: {url} answered {status}: {}", text.trim());
            Ok(1)
        }
        Err(e) => {
            eprintln!("raylog: drain: cannot reach the agent at {url}: {e} (is `raylog ship` running with api.address = \"{}\"?)", a.api);
            Ok(1)
        }
    }
}
