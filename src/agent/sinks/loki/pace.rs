//! Pacing pushes under Loki's ingestion rate limits.
//!
//! Loki refuses a push over its tenant's `ingestion_rate_mb` (4 MB/s, burst 6 MB by
//! default) or a stream's `per_stream_rate_limit` with 429, and counts the refused
//! entries as discarded even though raylog sends them again. A backfill reads far
//! faster than that, so the sink paces itself: at `max_bytes_per_second` (3 MiB/s by
//! default, under a stock Loki's limit), and at 90 % of any lower limit Loki states
//! in a 429 (`limit: 4194304 bytes/sec`, `limit: 3MB/sec`). A token bucket allows
//! bursts of one second, and a push larger than a second's worth is split: Loki
//! refuses whole any push over its burst, however often it is sent.
//!
//! Each stream is paced too ([`StreamPacer`]), under Loki's automatic stream
//! sharding: a stream that takes more than `shard_streams.desired_rate` (1536KB/s by
//! default, counting the last second's bytes plus the push's) is split by Loki over
//! streams labelled `__stream_shard__`, assigning entries by their place in the push.
//! An entry sent again (after a crash, or a retry of a push Loki half stored) then
//! lands in another shard, a distinct stream, and is stored twice.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A token bucket in bytes.
#[derive(Debug)]
pub struct Pacer {
    rate: Option<f64>,
    tokens: f64,
    last: Instant,
}

impl Pacer {
    /// A pacer at `rate` bytes per second (`None`: not pacing until a 429 says how).
    pub fn new(rate: Option<u64>) -> Pacer {
        Pacer { rate: rate.map(|r| r as f64), tokens: rate.unwrap_or(0) as f64, last: Instant::now() }
    }

    /// Whether a push of `bytes` is more than a second's worth: Loki would refuse it
    /// whole every time if it is over the limit's burst, so it is sent in parts.
    pub fn too_big(&self, bytes: usize) -> bool {
        self.rate.is_some_and(|r| bytes as f64 > r)
    }

    /// The most a request may carry without being [`Pacer::too_big`], if pacing.
    pub fn max_bytes(&self) -> Option<usize> {
        self.rate.map(|r| r as usize)
    }

    /// How long to wait before sending `bytes`, taking them from the bucket.
    pub fn wait_for(&mut self, bytes: usize) -> Duration {
        let Some(rate) = self.rate else { return Duration::ZERO };
        let now = Instant::now();
        self.tokens = (self.tokens + now.duration_since(self.last).as_secs_f64() * rate).min(rate);
        self.last = now;
        // A push larger than a second's worth still goes, after a full bucket.
        let cost = (bytes as f64).min(rate);
        let wait = if self.tokens >= cost { 0.0 } else { (cost - self.tokens) / rate };
        self.tokens -= cost;
        Duration::from_secs_f64(wait)
    }

    /// Learns the limit from a 429 answer; true when it now paces slower.
    pub fn learn(&mut self, body: &str) -> bool {
        let Some(limit) = stated_limit(body) else { return false };
        let rate = 0.9 * limit;
        if self.rate.is_some_and(|r| r <= rate) {
            return false;
        }
        tracing::info!(
            bytes_per_second = rate as u64,
            "Loki rate-limits this tenant or stream: pacing pushes below it (set max_bytes_per_second to start there)"
        );
        self.rate = Some(rate);
        self.tokens = 0.0;
        self.last = Instant::now();
        true
    }
}

/// Token buckets per stream (keyed by a hash of its label string) at
/// `max_stream_bytes_per_second`, with a burst of an eighth of a second's worth.
/// A stream then sends at most `rate + burst` in any second, and at most `burst` in
/// one push: 1.25 × `rate`, which at the 1 MiB/s default stays under the 1536KB
/// Loki shards at.
#[derive(Debug)]
pub struct StreamPacer {
    rate: Option<f64>,
    buckets: HashMap<u64, (f64, Instant)>,
}

/// Streams remembered before idle (refilled) buckets are dropped.
const BUCKETS_KEPT: usize = 4096;

impl StreamPacer {
    pub fn new(rate: Option<u64>) -> StreamPacer {
        StreamPacer { rate: rate.map(|r| r as f64), buckets: HashMap::new() }
    }

    fn burst(&self) -> Option<f64> {
        self.rate.map(|r| r / 8.0)
    }

    /// Whether one stream's `bytes` are more than a push may carry for it.
    pub fn too_big(&self, bytes: usize) -> bool {
        self.burst().is_some_and(|b| bytes as f64 > b)
    }

    /// How long to wait before a push holding `streams` (label hash, bytes), taking
    /// the bytes from each stream's bucket: the longest of their waits.
    pub fn wait_for(&mut self, streams: impl Iterator<Item = (u64, usize)>) -> Duration {
        let (Some(rate), Some(burst)) = (self.rate, self.burst()) else { return Duration::ZERO };
        let now = Instant::now();
        if self.buckets.len() > BUCKETS_KEPT {
            self.buckets.retain(|_, (tokens, last)| *tokens + now.duration_since(*last).as_secs_f64() * rate < burst);
        }
        let mut wait: f64 = 0.0;
        for (hash, bytes) in streams {
            let (tokens, last) = self.buckets.entry(hash).or_insert((burst, now));
            *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
            *last = now;
            let cost = (bytes as f64).min(burst);
            if *tokens < cost {
                wait = wait.max((cost - *tokens) / rate);
            }
            *tokens -= cost;
        }
        Duration::from_secs_f64(wait)
    }
}

/// The rate in a Loki 429 text: `(limit: 4194304 bytes/sec)` or `(limit: 3MB/sec)`.
fn stated_limit(body: &str) -> Option<f64> {
    let after = body.split("limit: ").nth(1)?;
    let spec = after.split("/sec").next()?.trim();
    let digits = spec.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(spec.len());
    let n: f64 = spec[..digits].parse().ok()?;
    let unit = match spec[digits..].trim().to_ascii_lowercase().as_str() {
        "" | "b" | "bytes" => 1.0,
        "kb" => 1e3,
        "kib" => 1024.0,
        "mb" => 1e6,
        "mib" => 1024.0 * 1024.0,
        "gb" => 1e9,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    (n > 0.0).then_some(n * unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_limit_loki_states() {
        // Loki 3.4.5's tenant limit, and its per-stream one.
        let tenant = "HTTP 429 Too Many Requests: Ingestion rate limit exceeded for user fake (limit: 4194304 bytes/sec) while attempting to ingest '5901' lines totaling '1903787' bytes, reduce log volume or contact your Loki administrator to see if the limit can be increased";
        assert_eq!(stated_limit(tenant), Some(4_194_304.0));
        assert_eq!(stated_limit("Per stream rate limit exceeded (limit: 3MB/sec) while attempting"), Some(3e6));
        assert_eq!(stated_limit("too many requests"), None);
    }

    #[test]
    fn a_learned_limit_spaces_pushes() {
        let mut p = Pacer::new(None);
        assert_eq!(p.wait_for(10 << 20), Duration::ZERO, "no pacing before Loki says");
        assert!(p.learn("(limit: 1000000 bytes/sec)"));
        assert!(!p.learn("(limit: 2000000 bytes/sec)"), "only ever slower");
        let w = p.wait_for(450_000);
        assert!(w > Duration::from_millis(400) && w < Duration::from_millis(600), "{w:?}");
    }

    #[test]
    fn each_stream_is_paced_on_its_own() {
        let mut p = StreamPacer::new(Some(800_000));
        assert!(p.too_big(100_001) && !p.too_big(100_000), "a push carries an eighth of a second per stream");
        assert_eq!(p.wait_for([(1, 100_000), (2, 100_000)].into_iter()), Duration::ZERO, "the burst is free");
        // Stream 1 owes 50 KB at 800 KB/s; stream 3 is new and waits for nothing.
        let w = p.wait_for([(1, 50_000), (3, 100_000)].into_iter());
        assert!(w > Duration::from_millis(55) && w < Duration::from_millis(65), "{w:?}");
        // A second's worth more, pushed at once, is due a second from now.
        let mut due = Duration::ZERO;
        for _ in 0..16 {
            due = p.wait_for([(2, 50_000)].into_iter());
        }
        assert!(due > Duration::from_millis(950) && due < Duration::from_millis(1050), "{due:?}");
        assert_eq!(StreamPacer::new(None).wait_for([(1, 1 << 30)].into_iter()), Duration::ZERO);
    }
}
