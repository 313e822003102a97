//! A connection to Redis as agentgate's two shared stores make it: the limits
//! (`[limits.redis]`, `crate::limits::redis`) and the policy files (`[cache.redis]`,
//! `crate::fetch`). Owns what the two have alike: the URL, AUTH from `password_env`,
//! `rediss://` trusting the system's roots and `[upstream] extra_ca_files`
//! ([`crate::tls::upstream::trusted_roots_pem`]), the connect and response timeouts, the
//! problems of those keys (named under the table they were written in), and the server's
//! addresses, which the network guard refuses as an agent destination: a store that counts
//! an agent's budget or decides its policy must never be reachable by that agent through
//! the proxy. Also shared: [`FailureLog`], which lets a failing store's WARN through at most
//! once a second.
//!
//! Never: runs a command, decides what a store does when Redis fails, logs the URL (it may
//! hold a password).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionAddr, IntoConnectionInfo, TlsCertificates};

/// The longest `timeout` either store accepts: a check or a lookup waits at most this.
const MAX_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest `key_prefix` either store accepts.
const MAX_PREFIX: usize = 64;

/// How often a store's failure is logged at most.
const WARN_INTERVAL: Duration = Duration::from_secs(1);

/// Lets a store's failure line through at most once per `WARN_INTERVAL`, so a Redis that is
/// down cannot flood the log; the failures themselves are counted by each store's metrics.
#[derive(Debug)]
pub struct FailureLog {
    started: Instant,
    /// When the last line went out, in ms since `started` (0: never).
    last_ms: AtomicU64,
}

impl Default for FailureLog {
    fn default() -> Self {
        FailureLog { started: Instant::now(), last_ms: AtomicU64::new(0) }
    }
}

impl FailureLog {
    /// True for the one caller whose failure should be logged now.
    pub fn due(&self) -> bool {
        let now_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX).max(1);
        let last = self.last_ms.load(Ordering::Relaxed);
        let interval = u64::try_from(WARN_INTERVAL.as_millis()).unwrap_or(u64::MAX);
        (last == 0 || now_ms.saturating_sub(last) >= interval)
            && self.last_ms.compare_exchange(last, now_ms, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}

/// One store's connection settings, as written under `table`.
#[derive(Debug, Clone, Copy)]
pub struct Connection<'a> {
    /// Where they were written (`[limits.redis]`, `[cache.redis]`), for messages.
    pub table: &'static str,
    /// `redis://…` or `rediss://…`.
    pub url: &'a str,
    /// The environment variable holding the password ("" for none).
    pub password_env: &'a str,
    /// Prepended to every key of the store.
    pub key_prefix: &'a str,
    /// How long one call may take (the connect, then each answer).
    pub timeout: Duration,
}

/// Why a store's connection cannot be set up. Each message names the table and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// `password_env` names a variable that is not set (or not UTF-8).
    #[error(
        "{table} password_env = {name:?}: the environment variable is not set; set it to the Redis password or remove the key"
    )]
    PasswordEnv {
        /// The table it was written in.
        table: &'static str,
        /// The variable's name.
        name: String,
    },
    /// An `[upstream] extra_ca_files` entry cannot be used to trust a `rediss://` server.
    #[error("{table} url: cannot trust the Redis server's certificate: {source}")]
    Trust {
        /// The table the URL was written in.
        table: &'static str,
        /// What is wrong with the CA file (it names the file).
        source: crate::tls::TlsError,
    },
    /// The Redis client refused the URL or its settings.
    #[error("{table} url: the Redis client refused it: {source}; write e.g. \"redis://127.0.0.1:6379\"")]
    Client {
        /// The table the URL was written in.
        table: &'static str,
        /// The client's error.
        source: redis::RedisError,
    },
}

impl Connection<'_> {
    /// A lazily connecting, reconnecting connection (nothing is dialled until the first
    /// command), giving up on a connect or an answer after `timeout`.
    ///
    /// # Errors
    /// [`ConnectError`] when the password variable is unset, an extra CA file cannot be
    /// used, or the client refuses the URL.
    pub fn connect(&self, extra_ca_files: &[PathBuf]) -> Result<ConnectionManager, ConnectError> {
        let table = self.table;
        let client_error = |source| ConnectError::Client { table, source };
        let mut info = self.url.into_connection_info().map_err(client_error)?;
        if !self.password_env.is_empty() {
            let password = std::env::var(self.password_env)
                .map_err(|_| ConnectError::PasswordEnv { table, name: self.password_env.to_owned() })?;
            let settings = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(settings);
        }
        let client = if self.url.starts_with("rediss://") {
            let roots = crate::tls::upstream::trusted_roots_pem(extra_ca_files)
                .map_err(|source| ConnectError::Trust { table, source })?;
            Client::build_with_tls(info, TlsCertificates { client_tls: None, root_cert: Some(roots.into_bytes()) })
        } else {
            Client::open(info)
        }
        .map_err(client_error)?;
        let manager_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            // Reconnect quickly and give up soon: the next call tries again anyway.
            .set_number_of_retries(1)
            .set_max_delay(self.timeout);
        ConnectionManager::new_lazy_with_config(client, manager_config).map_err(client_error)
    }

    /// The server's addresses, for the network guard to refuse as an agent destination: the
    /// host when an IP address, else what it resolves to now (a name that does not resolve
    /// gives none; `[network] deny_cidrs` covers a store whose address changes).
    pub fn addresses(&self) -> Vec<SocketAddr> {
        let Ok(info) = self.url.into_connection_info() else { return Vec::new() };
        let (host, port) = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => (host, *port),
            _ => return Vec::new(),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => (host, port).to_socket_addrs().map(Iterator::collect).unwrap_or_default(),
        }
    }

    /// Problems in these keys, each naming the table, the key, its value and the fix.
    pub fn problems(&self, problems: &mut Vec<String>) {
        let table = self.table;
        match self.url.split_once("://").map(|(scheme, _)| scheme) {
            Some("rediss") if self.url.contains('#') => problems.push(format!(
                "{table} url: rediss:// takes no #fragment (#insecure would skip certificate checks); \
                 add the Redis server's CA to [upstream] extra_ca_files instead"
            )),
            Some("redis" | "rediss") => {
                if let Err(err) = self.url.into_connection_info() {
                    problems
                        .push(format!("{table} url: not a Redis URL ({err}); write e.g. \"redis://127.0.0.1:6379\""));
                }
            }
            // Never echo the URL: it may hold a password.
            _ => problems.push(format!(
                "{table} url: must start with redis:// or rediss:// (TLS), e.g. \"redis://127.0.0.1:6379\""
            )),
        }
        let env = self.password_env;
        if !env.is_empty()
            && (env.starts_with(|c: char| c.is_ascii_digit())
                || !env.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        {
            problems.push(format!(
                "{table} password_env = {env:?}: not an environment variable name; write e.g. \"REDIS_PASSWORD\""
            ));
        }
        let prefix = self.key_prefix;
        if prefix.len() > MAX_PREFIX || prefix.chars().any(|c| c.is_whitespace() || c.is_control()) {
            problems.push(format!(
                "{table} key_prefix = {prefix:?}: at most {MAX_PREFIX} bytes, no spaces or control characters; \
                 the default is \"agentgate:\""
            ));
        }
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            problems.push(format!(
                "{table} timeout = \"{}\": must be more than 0s and at most 5s; the default is \"500ms\"",
                humantime::format_duration(self.timeout)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(url: &str) -> Connection<'_> {
        Connection {
            table: "[cache.redis]",
            url,
            password_env: "",
            key_prefix: "agentgate:",
            timeout: Duration::from_millis(500),
        }
    }

    #[test]
    fn addresses_are_the_ip_host_and_port_or_none_for_a_socket_or_a_bad_url() {
        assert_eq!(connection("redis://127.0.0.9:6390").addresses(), vec!["127.0.0.9:6390".parse().unwrap()]);
        assert_eq!(connection("rediss://[::1]:6380/2").addresses(), vec!["[::1]:6380".parse().unwrap()]);
        assert!(connection("redis+unix:///run/redis.sock").addresses().is_empty());
        assert!(connection("not a url").addresses().is_empty());
    }

    #[test]
    fn every_bad_key_is_named_under_its_table_and_the_url_is_never_echoed() {
        let bad = Connection {
            url: "http://user:hunter2@x",
            password_env: "1BAD",
            key_prefix: "a b",
            timeout: Duration::ZERO,
            ..connection("")
        };
        let mut problems = Vec::new();
        bad.problems(&mut problems);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems.iter().all(|p| p.starts_with("[cache.redis] ")), "{problems:?}");
        assert!(!problems.join("\n").contains("hunter2"), "{problems:?}");
        let mut none = Vec::new();
        connection("rediss://cache.internal:6380").problems(&mut none);
        assert!(none.is_empty(), "{none:?}");
    }

    #[test]
    fn a_failure_is_logged_once_then_not_again_within_the_interval() {
        let log = FailureLog::default();
        assert!(log.due(), "the first failure is logged");
        assert!(!log.due() && !log.due(), "the next ones within a second are not");
        // Logged last at 1 ms after a start a whole interval ago: due again.
        let later = FailureLog { started: Instant::now() - WARN_INTERVAL - WARN_INTERVAL, last_ms: AtomicU64::new(1) };
        assert!(later.due(), "a second later it is logged again");
        assert!(!later.due(), "and then not again at once");
    }

    #[test]
    fn an_unset_password_variable_is_named_with_its_table() {
        let unset =
            Connection { password_env: "AGENTGATE_TEST_SURELY_UNSET_VARIABLE", ..connection("redis://127.0.0.1") };
        let err = unset.connect(&[]).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(err.starts_with("[cache.redis] password_env = \"AGENTGATE_TEST_SURELY_UNSET_VARIABLE\""), "{err}");
    }
}
