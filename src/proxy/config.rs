//! The proxy's config tables: `[connections]` (agents' connections to the proxy: timeouts
//! and caps), `[upstream]` (connections from the proxy to origins: trust, timeouts, the pool
//! and the cap on sockets), `[mitm]` (which tunnels are intercepted, the leaf cache) and
//! `[transparent]` (listeners for redirected connections). Each table has its serde
//! attributes and defaults written once here, and checks itself (`problems`, naming the key,
//! the value and the fix); `crate::config` composes them into `Config` and checks values
//! across tables.
//!
//! Never reads a socket, a certificate or a file (except the open-file limit the
//! `[upstream]` cap is derived from).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::net::{canonical_host, canonical_pattern, is_host_pattern};
use crate::policy::operator::host_matches;
use crate::setting::{duration, nonzero_caps, nonzero_timeouts, socket_addrs};

/// `[connections]`: how long agents' connections may stay silent, and how many may be open.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionsConfig {
    /// How long a new connection (on the proxy port, or inside a tunnel once it is set up) may
    /// stay silent before its first byte (default `10s`).
    #[serde(deserialize_with = "duration")]
    pub first_byte_timeout: Duration,
    /// How long an HTTP/1.1 client may take to send a complete request head, counted from
    /// the end of the previous response: also the keep-alive idle timeout (default `30s`).
    #[serde(deserialize_with = "duration")]
    pub header_read_timeout: Duration,
    /// How long a connection (HTTP/1.1 or h2, on the proxy port or inside a tunnel) may have
    /// no request in flight before it is closed gracefully (h2: GOAWAY); a long download is
    /// a request in flight (default `30s`).
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// How long the TLS handshake inside an intercepted CONNECT tunnel may take (default `10s`).
    #[serde(deserialize_with = "duration")]
    pub tls_handshake_timeout: Duration,
    /// Connections open at once on the proxy port; past it new ones are closed (default 10000).
    pub max_connections: usize,
    /// Connections open at once from one client address (default 1000).
    pub max_connections_per_client: usize,
}

impl Default for ConnectionsConfig {
    fn default() -> Self {
        Self {
            first_byte_timeout: Duration::from_secs(10),
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(30),
            tls_handshake_timeout: Duration::from_secs(10),
            max_connections: 10_000,
            max_connections_per_client: 1_000,
        }
    }
}

impl ConnectionsConfig {
    /// Problems in `[connections]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        nonzero_timeouts(
            problems,
            &[
                ("[connections] first_byte_timeout", self.first_byte_timeout),
                ("[connections] header_read_timeout", self.header_read_timeout),
                ("[connections] idle_timeout", self.idle_timeout),
                ("[connections] tls_handshake_timeout", self.tls_handshake_timeout),
            ],
        );
        let default = Self::default();
        nonzero_caps(
            problems,
            &[
                ("[connections] max_connections", self.max_connections, default.max_connections),
                (
                    "[connections] max_connections_per_client",
                    self.max_connections_per_client,
                    default.max_connections_per_client,
                ),
            ],
        );
    }
}

/// `[upstream]`: connections from the proxy to origins.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UpstreamConfig {
    /// PEM files with extra CAs to trust for origins, on top of the webpki and system roots (default none).
    pub extra_ca_files: Vec<PathBuf>,
    /// How long to wait for a TCP + TLS connection to an origin (default `10s`).
    #[serde(deserialize_with = "duration")]
    pub connect_timeout: Duration,
    /// How long an idle pooled connection to an origin is kept (default `90s`).
    #[serde(deserialize_with = "duration")]
    pub idle_timeout: Duration,
    /// Most TCP connections to origins open at once, every kind counted: pooled (busy or
    /// idle), policy fetches, WebSocket, passthrough tunnels (default: derived from the
    /// open-file limit, `UpstreamConfig::max_connections_for`).
    pub max_connections: Option<usize>,
    /// Most idle pooled HTTP/1.1 connections kept per origin; 0 keeps none (default 64:
    /// docs/upstream.md, "Idle connections per origin").
    pub max_idle_per_host: usize,
    /// How long a new connection waits for a socket when every one under `max_connections`
    /// is busy, before its request is answered 503 (default `2s`).
    #[serde(deserialize_with = "duration")]
    pub connect_queue_timeout: Duration,
    /// A parent proxy every connection to an origin goes through, `http://host:port` or
    /// `http://user@host:port` (default none: origins are dialled directly). See
    /// `super::parent` and docs/operator-guide.md.
    pub parent: Option<String>,
    /// The environment variable holding the password of the user in `parent` (sent as
    /// `Proxy-Authorization: Basic`); default none.
    pub parent_password_env: Option<String>,
    /// Hosts reached directly, not through `parent`: patterns as in `allow_hosts`
    /// (`example.com`, `*.example.com`, `*`). Default none.
    pub parent_bypass: Vec<String>,
    /// What agentgate asks the parent to connect to: the address the network guard vetted
    /// (default) or the name, trusting the parent's resolver.
    pub parent_connect: ParentConnect,
}

/// `[upstream] parent_connect`: what a CONNECT to the parent names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ParentConnect {
    /// The address the network guard vetted (`CONNECT 203.0.113.5:443`): the parent's DNS
    /// cannot lead anywhere the guard refused.
    #[default]
    Address,
    /// The name the agent asked for (`CONNECT example.com:443`), after the guard vetted its
    /// resolution: for parents whose rules need names; trusts the parent's resolver.
    Name,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            extra_ca_files: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            max_connections: None,
            max_idle_per_host: 64,
            connect_queue_timeout: Duration::from_secs(2),
            parent: None,
            parent_password_env: None,
            parent_bypass: Vec::new(),
            parent_connect: ParentConnect::Address,
        }
    }
}

impl UpstreamConfig {
    /// Problems in `[upstream]`, each naming the key, its value and the fix; `agents` is
    /// `[connections] max_connections`, which the cap must leave room for under the hard
    /// open-file limit.
    pub(crate) fn problems(&self, agents: usize, problems: &mut Vec<String>) {
        nonzero_timeouts(
            problems,
            &[
                ("[upstream] connect_timeout", self.connect_timeout),
                ("[upstream] idle_timeout", self.idle_timeout),
                ("[upstream] connect_queue_timeout", self.connect_queue_timeout),
            ],
        );
        self.problems_with_limit(agents, open_file_limits().map(|(_, hard)| hard), problems);
        super::parent::problems(self, problems);
    }
}

/// Open-file descriptors kept back from the derived `[upstream] max_connections` for
/// everything that is neither an agent's nor an origin's socket: listeners, the decision
/// log, the admin API, DNS, Redis.
pub(crate) const RESERVED_FDS: u64 = 256;

/// The cap when the open-file limit cannot be read (or is unlimited).
const FALLBACK_MAX_CONNECTIONS: usize = 1024;

impl UpstreamConfig {
    /// The cap on connections to origins: `max_connections` as written, else derived from
    /// the open-file limit `limit` (the soft limit in force, which `run` raises to the hard
    /// limit first) and the agents' cap: half of what the limit leaves after
    /// `[connections] max_connections` and [`RESERVED_FDS`], and never less than a quarter of
    /// the limit (docs/upstream.md).
    pub(crate) fn max_connections_for(&self, limit: Option<u64>, agents: usize) -> usize {
        if let Some(max) = self.max_connections {
            return max;
        }
        let Some(limit) = limit.filter(|limit| *limit != rlimit::INFINITY) else {
            return FALLBACK_MAX_CONNECTIONS;
        };
        let left = limit.saturating_sub(agents as u64).saturating_sub(RESERVED_FDS);
        let derived = (left / 2).max(limit / 4).max(1);
        usize::try_from(derived).unwrap_or(usize::MAX)
    }

    /// Problems in `[upstream]` against the hard open-file limit `limit` (what `run` raises
    /// its soft limit to; `None` when unknown or unlimited) and the agents' cap `agents`,
    /// each naming the key, its value and the fix.
    pub(crate) fn problems_with_limit(&self, agents: usize, limit: Option<u64>, problems: &mut Vec<String>) {
        match self.max_connections {
            Some(0) => problems.push(
                "[upstream] max_connections = 0: must be at least 1; leave it out to derive it from the open-file limit"
                    .to_owned(),
            ),
            Some(max) => {
                if let Some(limit) = limit.filter(|limit| *limit != rlimit::INFINITY) {
                    let needed = (max as u64).saturating_add(agents as u64).saturating_add(RESERVED_FDS);
                    if needed > limit {
                        problems.push(format!(
                            "[upstream] max_connections = {max}: with [connections] max_connections = {agents} and \
                             {RESERVED_FDS} descriptors kept for listeners and files, that is {needed} open files, more \
                             than the open-file limit of {limit}, so agents could no longer be accepted; lower either \
                             cap, leave [upstream] max_connections out to derive it, or raise the limit (ulimit -Hn, \
                             systemd LimitNOFILE=)"
                        ));
                    }
                }
            }
            None => {}
        }
    }
}

/// The open-file limit as `(soft, hard)`; `None` where it cannot be read.
pub(crate) fn open_file_limits() -> Option<(u64, u64)> {
    rlimit::Resource::NOFILE.get().ok()
}

/// `[mitm]`: which CONNECT tunnels are intercepted, and the leaf certificate cache.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(from = "MitmTable")]
pub struct MitmConfig {
    /// Hosts whose tunnels are spliced through without interception: `example.com` (that host
    /// only) or `*.example.com` (its subdomains, not the apex). Default none.
    passthrough_hosts: Vec<String>,
    /// How many per-host leaf certificates are kept (default 10000).
    pub cert_cache_size: u64,
    /// `passthrough_hosts` in canonical form (`crate::net::canonical_pattern`), made once when
    /// the table is read: [`MitmConfig::is_passthrough`] runs on every CONNECT.
    canonical_passthrough: Vec<String>,
}

/// `[mitm]` as written, before its patterns are made canonical.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct MitmTable {
    passthrough_hosts: Vec<String>,
    cert_cache_size: u64,
}

impl Default for MitmTable {
    fn default() -> Self {
        Self { passthrough_hosts: Vec::new(), cert_cache_size: 10_000 }
    }
}

impl From<MitmTable> for MitmConfig {
    fn from(table: MitmTable) -> Self {
        MitmConfig::new(table.passthrough_hosts, table.cert_cache_size)
    }
}

impl Default for MitmConfig {
    fn default() -> Self {
        MitmTable::default().into()
    }
}

impl MitmConfig {
    /// `[mitm]` with these passthrough hosts and leaf cache size.
    pub fn new(passthrough_hosts: Vec<String>, cert_cache_size: u64) -> Self {
        let canonical_passthrough = passthrough_hosts.iter().map(|p| canonical_pattern(p)).collect();
        MitmConfig { passthrough_hosts, cert_cache_size, canonical_passthrough }
    }

    /// `passthrough_hosts` as written.
    pub fn passthrough_hosts(&self) -> &[String] {
        &self.passthrough_hosts
    }

    /// Sets `passthrough_hosts`, and their canonical form with them (a field set alone would
    /// leave [`is_passthrough`](Self::is_passthrough) matching the old list).
    pub fn set_passthrough_hosts(&mut self, hosts: Vec<String>) {
        *self = MitmConfig::new(hosts, self.cert_cache_size);
    }

    /// Whether the CONNECT tunnel to `host` is spliced through without interception.
    ///
    /// Matches case-insensitively, ignoring a trailing dot and IPv6 brackets: `example.com`
    /// matches that host only, `*.example.com` matches `a.example.com` and `a.b.example.com`
    /// but not `example.com` itself.
    /// Both sides are compared in canonical form (`crate::net::host`), so `0x7f.1` matches
    /// a `127.0.0.1` entry and `bücher.example` its A-label.
    pub fn is_passthrough(&self, host: &str) -> bool {
        if self.canonical_passthrough.is_empty() {
            return false;
        }
        let host = canonical_host(host).unwrap_or_else(|_| host.to_ascii_lowercase().into());
        self.canonical_passthrough.iter().any(|p| host_matches(p, &host))
    }

    /// Problems in `[mitm]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        let default = Self::default().cert_cache_size;
        nonzero_caps(problems, &[("[mitm] cert_cache_size", self.cert_cache_size, default)]);
        for pattern in &self.passthrough_hosts {
            if !is_host_pattern(pattern) {
                problems.push(format!(
                    "[mitm] passthrough_hosts entry {pattern:?}: not a host name or `*.suffix`; write e.g. \"bank.example\" or \"*.bank.example\" (no scheme, port or path)"
                ));
            }
        }
    }
}

/// `[transparent]`: listeners for connections the kernel redirects to agentgate.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransparentConfig {
    /// Addresses to accept redirected connections on, e.g. `["0.0.0.0:8443"]`; TLS or plain
    /// HTTP is told by the first bytes, not the port. Default none: transparent mode off.
    #[serde(deserialize_with = "socket_addrs")]
    pub listen: Vec<SocketAddr>,
}

impl TransparentConfig {
    /// Problems in `[transparent]`, each naming the key, its value and the fix (a listen
    /// address colliding with `listen` or `[admin] listen` is checked in `crate::config`).
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        if !self.listen.is_empty() && !cfg!(target_os = "linux") {
            problems.push(format!(
                "[transparent] listen = {:?}: transparent mode needs Linux (the kernel's SO_ORIGINAL_DST); remove the key, or set HTTPS_PROXY in the agents instead",
                self.listen
            ));
        }
        for (i, addr) in self.listen.iter().enumerate() {
            if self.listen[..i].contains(addr) && addr.port() != 0 {
                problems.push(format!("[transparent] listen entry \"{addr}\": listed twice; keep one"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transparent_mode_is_off_by_default_and_linux_only() {
        let mut problems = Vec::new();
        TransparentConfig::default().problems(&mut problems);
        assert!(problems.is_empty());
        let on = TransparentConfig { listen: vec!["0.0.0.0:8443".parse().expect("a socket address")] };
        on.problems(&mut problems);
        assert_eq!(problems.is_empty(), cfg!(target_os = "linux"), "{problems:?}");
    }

    #[test]
    fn the_derived_cap_leaves_room_for_agents_and_is_never_tiny() {
        let derived = |limit, agents| UpstreamConfig::default().max_connections_for(Some(limit), agents);
        // Half of what is left after the agents' cap and the reserve...
        assert_eq!(derived(1_048_576, 10_000), (1_048_576 - 10_000 - 256) / 2);
        assert_eq!(derived(65_536, 10_000), (65_536 - 10_000 - 256) / 2);
        // ...and at least a quarter of the limit when the agents' cap takes most of it.
        assert_eq!(derived(20_000, 10_000), 5_000);
        assert_eq!(derived(1_024, 10_000), 256);
        assert_eq!(UpstreamConfig::default().max_connections_for(None, 10_000), FALLBACK_MAX_CONNECTIONS);
        let written = UpstreamConfig { max_connections: Some(64), ..UpstreamConfig::default() };
        assert_eq!(written.max_connections_for(Some(1_024), 10_000), 64);
    }

    #[test]
    fn config_check_refuses_a_cap_over_the_hard_open_file_limit() {
        // Where the limit is unknown or unlimited there is nothing to compare with.
        let Some((_, hard)) = open_file_limits().filter(|(_, hard)| *hard != rlimit::INFINITY) else { return };
        let text = format!("[upstream]\nmax_connections = {hard}\n");
        let error = crate::config::Config::from_toml_str(&text, "agentgate.toml").expect_err("no room for agents");
        let message = error.to_string();
        assert!(message.contains(&format!("[upstream] max_connections = {hard}:")), "{message}");
        assert!(message.contains("open-file limit"), "{message}");
    }

    #[test]
    fn a_cap_that_leaves_no_room_for_agents_is_refused() {
        let problems = |max, agents, limit| {
            let config = UpstreamConfig { max_connections: Some(max), ..UpstreamConfig::default() };
            let mut problems = Vec::new();
            config.problems_with_limit(agents, limit, &mut problems);
            problems
        };
        assert!(problems(5_000, 10_000, Some(20_000)).is_empty());
        let refused = problems(10_000, 10_000, Some(20_000));
        assert_eq!(refused.len(), 1, "{refused:?}");
        for part in ["[upstream] max_connections = 10000", "[connections] max_connections = 10000", "20000", "ulimit"] {
            assert!(refused[0].contains(part), "{part}: {}", refused[0]);
        }
        assert!(problems(10_000, 10_000, None).is_empty(), "an unknown limit is not guessed");
        assert!(problems(0, 10, Some(20_000))[0].contains("must be at least 1"));
    }

    #[test]
    fn passthrough_hosts_are_made_canonical_when_the_table_is_read() {
        let text = "[mitm]\npassthrough_hosts = [\"Bank.Example.\", \"*.Bücher.example\", \"0x7f.1\"]\n";
        let config = crate::config::Config::from_toml_str(text, "agentgate.toml").expect("a valid [mitm]");
        let mitm = &config.mitm;
        assert_eq!(mitm.passthrough_hosts, ["Bank.Example.", "*.Bücher.example", "0x7f.1"], "kept as written");
        assert_eq!(mitm.canonical_passthrough, ["bank.example", "*.xn--bcher-kva.example", "127.0.0.1"]);
        for host in ["bank.example", "BANK.example.", "a.b\u{fc}cher.example", "127.0.0.1", "0177.0.0.1"] {
            assert!(mitm.is_passthrough(host), "{host}");
        }
        assert!(!MitmConfig::default().is_passthrough("bank.example"));
        let unknown = crate::config::Config::from_toml_str("[mitm]\npasthrough = []\n", "agentgate.toml");
        let message = unknown.expect_err("an unknown key").to_string();
        assert!(message.contains("`passthrough_hosts`"), "{message}");
    }
}
