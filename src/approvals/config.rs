//! `[approvals]`: whether a request that needs a human's approval is refused at once or held
//! for one, for how long, and how many may wait at once; and whether the held requests and
//! the grants are shared by a fleet through Redis (`store`, `[approvals.redis]`, by default on
//! `[limits.redis]`'s connection). Owned here, composed into the config by `crate::config`
//! (docs/layering.md); live on reload (`crate::reload`) but for `store` and
//! `[approvals.redis]`, which need a restart.
//!
//! Never: holds a request (`super::queue` and the proxy do) or connects to Redis
//! (`super::fleet` does).

use std::time::Duration;

use serde::Deserialize;

use crate::limits::{LimitsConfig, RedisConfig, Store};
use crate::redis_connection::Connection;
use crate::setting::{duration, nonzero_caps};

/// The longest `[approvals] timeout`: past that an agent's connection (and its concurrency
/// slot at the origin's side of the proxy) is held for nothing anybody is watching.
const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// What a `needs_approval` request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// 403 at once (`agents_md.requires_human_approval`): nobody is asked.
    Deny,
    /// Held until an operator approves or denies it, or `timeout` passes.
    Hold,
}

/// `[approvals] store`: where the held requests and grants live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalsStore {
    /// This replica's memory: each replica lists and answers its own (the default).
    #[default]
    Memory,
    /// Shared by every replica through Redis (`[approvals.redis]`).
    Redis,
}

/// `[approvals.redis]`: the Redis a fleet shares its approvals through; unset keys are
/// `[limits.redis]`'s.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FleetRedisConfig {
    /// `redis://…` or `rediss://…` (TLS); unset: `[limits.redis] url`, when `[limits] store =
    /// "redis"` uses it.
    pub url: Option<String>,
    /// The environment variable holding the password; unset: `[limits.redis] password_env`.
    pub password_env: Option<String>,
    /// Prepended to every key (default `agentgate:`).
    pub key_prefix: String,
    /// How long one Redis call may take before the replica goes on alone (default `500ms`).
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
}

impl Default for FleetRedisConfig {
    fn default() -> Self {
        FleetRedisConfig {
            url: None,
            password_env: None,
            key_prefix: "agentgate:".to_owned(),
            timeout: Duration::from_millis(500),
        }
    }
}

impl FleetRedisConfig {
    /// The connection settings: these, the unset ones from `limits` (`[limits.redis]`).
    pub(crate) fn connection<'a>(&'a self, limits: &'a RedisConfig) -> Connection<'a> {
        Connection {
            table: "[approvals.redis]",
            url: self.url.as_deref().unwrap_or(&limits.url),
            password_env: self.password_env.as_deref().unwrap_or(&limits.password_env),
            key_prefix: &self.key_prefix,
            timeout: self.timeout,
        }
    }
}

/// `[approvals]` (`docs/approvals.md`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// `deny` (the default: 403 at once) or `hold` (wait for an operator).
    pub mode: ApprovalMode,
    /// How long a held request waits for an answer before it is refused (default `60s`).
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// How many requests may be held at once; past it a new one is refused at once (default 100).
    pub max_pending: usize,
    /// `memory` (the default: each replica its own) or `redis` (shared by the fleet).
    pub store: ApprovalsStore,
    /// The Redis of `store = "redis"`.
    pub redis: FleetRedisConfig,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            mode: ApprovalMode::Deny,
            timeout: Duration::from_secs(60),
            max_pending: 100,
            store: ApprovalsStore::Memory,
            redis: FleetRedisConfig::default(),
        }
    }
}

impl ApprovalsConfig {
    /// Problems in `[approvals]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            problems.push(format!(
                "[approvals] timeout = \"{}\": must be more than 0s and at most 1h; the default is \"60s\"",
                humantime::format_duration(self.timeout)
            ));
        }
        let default = Self::default().max_pending;
        nonzero_caps(problems, &[("[approvals] max_pending", self.max_pending, default)]);
        // Unset keys are `[limits.redis]`'s, checked under that table.
        self.redis.connection(&RedisConfig::default()).problems(problems);
    }

    /// The connection of `store = "redis"`, or `None` with `store = "memory"`.
    pub(crate) fn fleet_connection<'a>(&'a self, limits: &'a LimitsConfig) -> Option<Connection<'a>> {
        (self.store == ApprovalsStore::Redis).then(|| self.redis.connection(&limits.redis))
    }

    /// `store = "redis"` needs a Redis: its own `url`, or `[limits.redis]` in use.
    pub(crate) fn fleet_problems(&self, limits: &LimitsConfig, problems: &mut Vec<String>) {
        if self.store == ApprovalsStore::Redis && self.redis.url.is_none() && limits.store != Store::Redis {
            problems.push(
                "[approvals] store = \"redis\" shares held requests and grants through Redis, but names none: \
                 set [approvals.redis] url (e.g. \"redis://127.0.0.1:6379\"), or use [limits] store = \"redis\" \
                 whose [limits.redis] connection it then shares, or set store = \"memory\""
                    .to_owned(),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::problems;
    use crate::config::{Config, ConfigError, Problem};

    /// `[admin]` with a token (`printf %s admin-secret | sha256sum`), which holding needs.
    const ADMIN_TOKEN: &str =
        "[admin]\ntoken_sha256 = \"16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01\"\n";

    #[test]
    fn every_key_parses_and_defaults_are_the_documented_ones() {
        let config = Config::from_toml_str(
            &format!("[approvals]\nmode = \"hold\"\ntimeout = \"90s\"\nmax_pending = 3\n{ADMIN_TOKEN}"),
            "agentgate.toml",
        )
        .expect("a valid [approvals] table");
        assert_eq!(
            config.approvals,
            ApprovalsConfig {
                mode: ApprovalMode::Hold,
                timeout: Duration::from_secs(90),
                max_pending: 3,
                ..ApprovalsConfig::default()
            }
        );
        let default = ApprovalsConfig::default();
        assert_eq!(
            (default.mode, default.timeout, default.max_pending),
            (ApprovalMode::Deny, Duration::from_secs(60), 100)
        );
    }

    #[test]
    fn timeout_and_max_pending_name_key_value_and_fix() {
        assert_eq!(
            problems("[approvals]\ntimeout = \"0s\"\nmax_pending = 0\n"),
            [
                "[approvals] timeout = \"0s\": must be more than 0s and at most 1h; the default is \"60s\"",
                "[approvals] max_pending = 0: must be at least 1; the default is 100",
            ]
        );
        assert_eq!(
            problems("[approvals]\ntimeout = \"2h\"\n"),
            ["[approvals] timeout = \"2h\": must be more than 0s and at most 1h; the default is \"60s\""]
        );
        assert!(problems("[approvals]\ntimeout = \"1h\"\nmax_pending = 1\n").is_empty());
    }

    #[test]
    fn hold_needs_an_admin_token() {
        let found = problems("[approvals]\nmode = \"hold\"\n");
        assert_eq!(found.len(), 1, "{found:?}");
        for part in [
            "[approvals] mode = \"hold\" holds requests for a human's approval, but no admin token is configured",
            "the agent itself included, could approve its own request",
            "set [admin] token_sha256 (or add [[admin.tokens]]) to the output of `printf %s TOKEN | sha256sum`",
            "or set it to \"deny\"",
        ] {
            assert!(found[0].contains(part), "{part:?} in {found:?}");
        }
        assert!(problems(&format!("[approvals]\nmode = \"hold\"\n{ADMIN_TOKEN}")).is_empty());
        let named = "[approvals]\nmode = \"hold\"\n[[admin.tokens]]\nname = \"alice\"\n\
                     sha256 = \"0c848abb03307b06cf70cd4e29c157dc81af5e94ab3eb1d0c59a120269572376\"\n";
        assert!(problems(named).is_empty(), "a named token is a token");
        assert!(problems("[approvals]\nmode = \"deny\"\n").is_empty(), "nothing is held: no token needed");
    }

    #[test]
    fn hold_needs_an_admin_api_to_answer_on() {
        let found = problems(&format!("[approvals]\nmode = \"hold\"\n{ADMIN_TOKEN}listen = \"off\"\n"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("but [admin] listen = \"off\": nobody could answer them"), "{found:?}");
    }

    #[test]
    fn a_redis_store_shares_limits_redis_unless_it_names_its_own_and_needs_one() {
        let text =
            "[approvals]\nstore = \"redis\"\n[approvals.redis]\nurl = \"redis://10.0.0.7:6379\"\ntimeout = \"200ms\"\n";
        let config = Config::from_toml_str(text, "agentgate.toml").expect("valid");
        let connection = config.approvals.fleet_connection(&config.limits).expect("a fleet store");
        assert_eq!((connection.url, connection.timeout), ("redis://10.0.0.7:6379", Duration::from_millis(200)));
        let shared = "[limits]\nstore = \"redis\"\n[limits.redis]\nurl = \"redis://10.0.0.5:6379\"\n\
                      [approvals]\nstore = \"redis\"\n";
        let config = Config::from_toml_str(shared, "agentgate.toml").expect("valid");
        let connection = config.approvals.fleet_connection(&config.limits).expect("a fleet store");
        assert_eq!((connection.url, connection.table), ("redis://10.0.0.5:6379", "[approvals.redis]"));
        assert!(ApprovalsConfig::default().fleet_connection(&config.limits).is_none(), "memory by default");
        let found = problems("[approvals]\nstore = \"redis\"\n");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("[approvals] store = \"redis\" shares held requests"), "{found:?}");
        let bad = problems("[approvals.redis]\nurl = \"http://x\"\ntimeout = \"10s\"\n");
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad.iter().all(|p| p.starts_with("[approvals.redis] ")), "{bad:?}");
    }

    #[test]
    fn an_unknown_mode_or_key_is_a_located_problem() {
        for text in [
            "[approvals]\nmode = \"ask\"\n",
            "[approvals]\nmax_pendng = 3\n",
            "[approvals]\nstore = \"disk\"\n",
            "[approvals.redis]\nurll = \"redis://x\"\n",
        ] {
            let err = Config::from_toml_str(text, "agentgate.toml").expect_err("rejected");
            let located = |problems: &[Problem]| problems.len() == 1 && problems[0].location.is_some();
            assert!(matches!(&err, ConfigError::Invalid { problems, .. } if located(problems)), "{err}");
            assert!(err.to_string().contains("[approvals"), "{err}");
        }
    }
}
