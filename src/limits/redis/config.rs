//! `[limits.redis]`: where the shared limits store is, how long a check may take, and what a
//! check does when Redis does not answer; each bad value named with its fix.
//!
//! Never: connects to Redis (`super` does, through `crate::redis_connection`, which also
//! checks the connection keys).

use std::time::Duration;

use serde::Deserialize;

use crate::redis_connection::Connection;
use crate::setting::duration;

/// The shortest and longest `lease` accepted.
const LEASE_RANGE: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(3600));
/// `timeout`'s default. A healthy check is one round trip of a small script: well under a
/// millisecond on a LAN, 1.4 ms at p99 with 50 checks in flight on the project's loaded 2-core
/// machine (docs/scale-out.md, Speed). The timeout must also cover a replica whose runtime
/// polls the answer late because its threads are busy, and a reconnect after Redis restarted
/// (a TCP or TLS handshake and a script load); 50 ms did not on a loaded host (two fresh replicas overshot a shared limit). It
/// is also what every limited request waits while Redis hangs, before `on_failure` answers:
/// half a second stays a delay an agent barely notices.
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(500);

/// `[limits.redis]`: where the shared store is and what to do when it does not answer.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RedisConfig {
    /// `redis://[user[:password]@]host[:port][/db]`, or `rediss://` for TLS (default
    /// `redis://127.0.0.1:6379`).
    pub url: String,
    /// The environment variable holding the password, if not in the URL ("" for none).
    pub password_env: String,
    /// Prepended to every key (default `agentgate:`).
    pub key_prefix: String,
    /// How long a check may wait for Redis before `on_failure` applies (default `500ms`).
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// What a check does when Redis does not answer (default `local`).
    pub on_failure: OnFailure,
    /// How long a concurrency slot outlives a replica that stopped renewing it (default `30s`).
    #[serde(deserialize_with = "duration")]
    pub lease: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            url: "redis://127.0.0.1:6379".to_owned(),
            password_env: String::new(),
            key_prefix: "agentgate:".to_owned(),
            timeout: DEFAULT_TIMEOUT,
            on_failure: OnFailure::Local,
            lease: Duration::from_secs(30),
        }
    }
}

/// What a check does when Redis does not answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Counts the request in this replica's own store (each replica then allows the full
    /// budget); back to Redis on the next check that it answers.
    Local,
    /// Refuses every request that has a limit: 503, `limits.store_unavailable`.
    Deny,
    /// Lets every request through uncounted.
    Allow,
}

impl OnFailure {
    /// What the store does meanwhile, for its log lines.
    pub(super) fn meaning(self) -> &'static str {
        match self {
            OnFailure::Local => "counting in this replica only (on_failure = \"local\")",
            OnFailure::Deny => "refusing limited requests (on_failure = \"deny\")",
            OnFailure::Allow => "letting limited requests through uncounted (on_failure = \"allow\")",
        }
    }
}

impl RedisConfig {
    /// The connection settings, as `[limits.redis]`'s.
    pub(crate) fn connection(&self) -> Connection<'_> {
        Connection {
            table: "[limits.redis]",
            url: &self.url,
            password_env: &self.password_env,
            key_prefix: &self.key_prefix,
            timeout: self.timeout,
        }
    }

    /// Problems in `[limits.redis]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        self.connection().problems(problems);
        if self.lease < LEASE_RANGE.0 || self.lease > LEASE_RANGE.1 {
            problems.push(format!(
                "[limits.redis] lease = \"{}\": must be at least 1s and at most 1h; the default is \"30s\"",
                humantime::format_duration(self.lease)
            ));
        }
    }
}
