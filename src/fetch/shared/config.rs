//! `[cache] store` and `[cache.redis]`: whether the policy cache shares its copies through
//! Redis, where that Redis is (by default the one of `[limits.redis]`), and how long a
//! replica waits for it and for another replica's fetch; each bad value named with its fix.
//!
//! Never: connects to Redis (`super` does).

use std::time::Duration;

use serde::Deserialize;

use crate::limits::RedisConfig;
use crate::redis_connection::Connection;
use crate::setting::duration;

/// The longest `wait` accepted: a first request to a new origin waits at most this for
/// another replica's fetch before fetching itself.
const MAX_WAIT: Duration = Duration::from_secs(60);

/// `[cache] store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheStore {
    /// Each replica keeps and fetches its own copies (the default).
    #[default]
    Memory,
    /// Copies shared by every replica through Redis (`[cache.redis]`).
    Redis,
}

/// `[cache.redis]`: the shared policy store.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SharedConfig {
    /// `redis://…` or `rediss://…` (TLS); unset: `[limits.redis] url`.
    pub url: Option<String>,
    /// The environment variable holding the password; unset: `[limits.redis] password_env`.
    pub password_env: Option<String>,
    /// Prepended to every key (default `agentgate:`).
    pub key_prefix: String,
    /// How long one Redis call may take before the replica fetches for itself (default `500ms`).
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// How long a replica waits for another replica's fetch of an origin (its lease) before
    /// it fetches itself (default `12s`: one file's fetch timeout and a little more).
    #[serde(deserialize_with = "duration")]
    pub wait: Duration,
}

impl Default for SharedConfig {
    fn default() -> Self {
        SharedConfig {
            url: None,
            password_env: None,
            key_prefix: "agentgate:".to_owned(),
            timeout: Duration::from_millis(500),
            wait: Duration::from_secs(12),
        }
    }
}

impl SharedConfig {
    /// The connection settings: these, the unset ones from `limits` (`[limits.redis]`).
    pub(crate) fn connection<'a>(&'a self, limits: &'a RedisConfig) -> Connection<'a> {
        Connection {
            table: "[cache.redis]",
            url: self.url.as_deref().unwrap_or(&limits.url),
            password_env: self.password_env.as_deref().unwrap_or(&limits.password_env),
            key_prefix: &self.key_prefix,
            timeout: self.timeout,
        }
    }

    /// Problems in `[cache.redis]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        // Unset keys are `[limits.redis]`'s, checked under that table.
        self.connection(&RedisConfig::default()).problems(problems);
        if self.wait.is_zero() || self.wait > MAX_WAIT {
            problems.push(format!(
                "[cache.redis] wait = \"{}\": must be more than 0s and at most 60s; the default is \"12s\"",
                humantime::format_duration(self.wait)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_keys_come_from_limits_redis_and_bad_values_are_named() {
        let limits = RedisConfig { url: "redis://10.0.0.5:6379".into(), ..RedisConfig::default() };
        assert_eq!(SharedConfig::default().connection(&limits).url, "redis://10.0.0.5:6379");
        let own = SharedConfig { url: Some("rediss://cache.internal:6380".into()), ..SharedConfig::default() };
        assert_eq!(own.connection(&limits).url, "rediss://cache.internal:6380");
        let mut problems = Vec::new();
        SharedConfig { url: Some("http://x".into()), wait: Duration::ZERO, ..SharedConfig::default() }
            .problems(&mut problems);
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("[cache.redis] url"), "{problems:?}");
        assert!(problems[1].starts_with("[cache.redis] wait"), "{problems:?}");
    }

    #[test]
    fn the_keys_parse_from_the_config_and_bad_ones_fail_it() {
        let text = "[cache]\nstore = \"redis\"\n[cache.redis]\nurl = \"redis://10.0.0.7:6379\"\nwait = \"3s\"\n";
        let config = crate::config::Config::from_toml_str(text, "t.toml").unwrap();
        assert_eq!(config.cache.store, CacheStore::Redis);
        assert_eq!(config.cache.redis.wait, Duration::from_secs(3));
        assert_eq!(config.cache.redis.connection(&config.limits.redis).url, "redis://10.0.0.7:6379");
        let error = crate::config::Config::from_toml_str("[cache.redis]\ntimeout = \"10s\"\n", "t.toml").unwrap_err();
        assert!(error.to_string().contains("[cache.redis] timeout"), "{error}");
        assert!(crate::config::Config::from_toml_str("[cache]\nstore = \"disk\"\n", "t.toml").is_err());
    }
}
