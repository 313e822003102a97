//! Connections to origins: `[upstream]`, the pool every request goes through (`pool.rs`:
//! HTTP/1.1 or h2 by ALPN, TLS verified against webpki + system roots + `[upstream]
//! extra_ca_files`), TCP for passthrough tunnels, the cap on all of them together
//! (`sockets.rs`, `[upstream] max_connections`, by default derived from the open-file limit),
//! and turning their failures into `ProxyError`s that name the host and the cause. Every TCP
//! connection goes through the guarded connector (`resolve`), so nothing here can reach an
//! address the network guard refused.
//!
//! Never retries over plain HTTP or without verification, never rewrites headers (see
//! `headers`), never writes a response.

use std::error::Error as StdError;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use http::uri::Authority;
use http::{HeaderMap, Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use serde::Deserialize;
use tokio::net::TcpStream;

use super::error::{ProxyError, StartError};
use super::headers::Upgrade;
pub(crate) use super::pool::PooledBody;
use super::pool::{ConnectFailure, Key, Pool, PoolSettings, Reuse, SendError};
use super::resolve::GuardedConnector;
use super::sockets::Counted;
use crate::error_chain::error_chain;
use crate::fetch::{PolicyTransport, TransportFuture};
use crate::metrics::UpstreamMetrics;
use crate::net::GuardError;
use crate::policy::FetchError;
use crate::setting::{duration, nonzero_timeouts};

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
    /// open-file limit, [`UpstreamConfig::max_connections_for`]).
    pub max_connections: Option<usize>,
    /// Most idle pooled HTTP/1.1 connections kept per origin; 0 keeps none (default 4).
    pub max_idle_per_host: usize,
    /// How long a new connection waits for a socket when every one under `max_connections`
    /// is busy, before its request is answered 503 (default `2s`).
    #[serde(deserialize_with = "duration")]
    pub connect_queue_timeout: Duration,
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            extra_ca_files: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
            max_connections: None,
            max_idle_per_host: 4,
            connect_queue_timeout: Duration::from_secs(2),
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

/// The connections to origins; one per proxy, shared by every connection.
pub(crate) struct Upstream {
    pool: Pool,
}

impl Upstream {
    /// The pool from `[upstream]`, with `agents` (`[connections] max_connections`) for the
    /// derived cap, opening every TCP connection through `tcp` and counting in `metrics`.
    ///
    /// # Errors
    /// [`StartError::UpstreamClient`] when an extra CA file cannot be read.
    pub(crate) fn new(
        config: &UpstreamConfig,
        agents: usize,
        tcp: GuardedConnector,
        metrics: UpstreamMetrics,
    ) -> Result<Self, StartError> {
        let tls = crate::tls::upstream::client_config(&config.extra_ca_files)
            .map_err(|source| StartError::UpstreamClient { source })?;
        let soft_limit = open_file_limits().map(|(soft, _)| soft);
        let max_connections = config.max_connections_for(soft_limit, agents);
        tracing::debug!(max_connections, open_file_limit = ?soft_limit, "connections to origins capped");
        let settings = PoolSettings {
            max_connections,
            connect_queue_timeout: config.connect_queue_timeout,
            max_idle_per_host: config.max_idle_per_host,
            idle_timeout: config.idle_timeout,
            connect_timeout: config.connect_timeout,
        };
        Ok(Upstream { pool: Pool::new(&settings, tcp, tls, metrics) })
    }

    /// Sends `request` (absolute URI on `authority`, hop-by-hop fields already rewritten) and
    /// returns the response head; the body streams afterwards and gives its connection back
    /// to the pool when it ends.
    ///
    /// # Errors
    /// The `Upstream*` variants of [`ProxyError`], naming `authority` and the whole cause.
    pub(crate) async fn send(
        &self,
        authority: &Authority,
        request: Request<Incoming>,
        upgrade: Upgrade,
    ) -> Result<Response<PooledBody>, ProxyError> {
        let Some(key) = Key::of(request.uri()) else {
            return Err(ProxyError::UnsupportedScheme { uri: super::error::shown_target(request.uri()) });
        };
        let reuse = match upgrade {
            Upgrade::Keep => Reuse::Upgrade,
            Upgrade::Drop => Reuse::Pool,
        };
        let request = request.map(BodyExt::boxed_unsync);
        self.pool.send(&key, request, reuse).await.map_err(|error| classify(authority, &error))
    }

    /// Opens a TCP connection to `authority` for a passthrough tunnel, counted under the cap.
    ///
    /// # Errors
    /// [`ProxyError::DestinationRefused`], [`ProxyError::UpstreamResolve`],
    /// [`ProxyError::UpstreamConnect`], [`ProxyError::UpstreamTimeout`] or
    /// [`ProxyError::UpstreamAtCapacity`], naming `authority`.
    pub(crate) async fn open_tunnel(&self, authority: &Authority) -> Result<Counted<TcpStream>, ProxyError> {
        let port = authority.port_u16().unwrap_or(443);
        self.pool.dial_tunnel(authority.host(), port).await.map_err(|error| classify(authority, &error))
    }
}

/// Policy files are fetched through the same pool as proxied traffic: one budget, one
/// resolver (where the SSRF guard sits) and one trust store. A fetch uses a pooled connection
/// when one is there and gives it back; a connection opened for it is closed when the fetch
/// ends, so fetches never leave idle connections behind (docs/upstream.md).
impl PolicyTransport for Upstream {
    fn get(&self, url: Uri, headers: HeaderMap) -> TransportFuture<'_> {
        Box::pin(async move {
            let Some(key) = Key::of(&url) else {
                return Err(FetchError::Network(format!("{url}: not an absolute URL")));
            };
            let mut request = Request::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
            *request.uri_mut() = url.clone();
            *request.headers_mut() = headers;
            match self.pool.send(&key, request, Reuse::Borrow).await {
                Ok(response) => Ok(response.map(BodyExt::boxed_unsync)),
                Err(error) => Err(fetch_error(&url, &error)),
            }
        })
    }
}

/// What a failed policy fetch was: only a connection that never opened says the origin is
/// down; anything later (a certificate, the protocol) is the origin answering badly. The
/// connect timeout covers TCP and the TLS handshake together (docs/fetch-and-cache.md).
fn fetch_error(url: &Uri, error: &SendError) -> FetchError {
    let Some(authority) = url.authority() else {
        return FetchError::Network(format!("{url}: not an absolute URL"));
    };
    let connecting = matches!(
        error,
        SendError::Connect(ConnectFailure::Guard(_) | ConnectFailure::Tcp(_) | ConnectFailure::TimedOut(_))
    ) && !reached(error);
    let proxy_error = classify(authority, error);
    match proxy_error {
        ProxyError::UpstreamAtCapacity { .. } => FetchError::AtCapacity { cause: proxy_error.to_string() },
        ProxyError::UpstreamConnect { .. } | ProxyError::UpstreamResolve { .. } if connecting => {
            FetchError::Unreachable { timed_out: false, cause: proxy_error.to_string() }
        }
        ProxyError::UpstreamTimeout { .. } if connecting => {
            FetchError::Unreachable { timed_out: true, cause: proxy_error.to_string() }
        }
        _ => FetchError::Network(format!("{url}: {proxy_error}")),
    }
}

/// True when a failed connection got as far as the origin: TLS spoke (a rustls error), or
/// the peer reset or closed an open connection. Refused, unroutable and timed-out
/// connections never reached it.
fn reached(error: &SendError) -> bool {
    let io = match error {
        SendError::Connect(ConnectFailure::Tcp(io) | ConnectFailure::Tls(io)) => io,
        SendError::Connect(ConnectFailure::Handshake(_)) | SendError::Exchange(_) => return true,
        SendError::Connect(ConnectFailure::Guard(_) | ConnectFailure::TimedOut(_)) | SendError::AtCapacity(_) => {
            return false;
        }
    };
    causes(io).iter().any(|e| {
        e.downcast_ref::<rustls::Error>().is_some()
            || e.downcast_ref::<io::Error>().is_some_and(|io| {
                matches!(
                    io.kind(),
                    io::ErrorKind::ConnectionReset
                        | io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::UnexpectedEof
                        | io::ErrorKind::BrokenPipe
                        | io::ErrorKind::InvalidData
                )
            })
    })
}

/// Turns a pool failure into the variant that names its cause: the cap, the guard, DNS, a
/// certificate, a timeout, the connect, the client's body, or anything else once connected.
fn classify(authority: &Authority, error: &SendError) -> ProxyError {
    let host = authority.to_string();
    match error {
        SendError::AtCapacity(at_capacity) => ProxyError::UpstreamAtCapacity { host, cause: at_capacity.to_string() },
        SendError::Connect(ConnectFailure::Guard(guard)) => guard_error(host, guard),
        SendError::Connect(ConnectFailure::TimedOut(timeout)) => ProxyError::UpstreamTimeout {
            host,
            cause: format!("no connection after {timeout:?} ([upstream] connect_timeout)"),
        },
        SendError::Connect(ConnectFailure::Tcp(io)) => ProxyError::UpstreamConnect { host, cause: error_chain(io) },
        SendError::Connect(ConnectFailure::Tls(io)) => {
            let cause = error_chain(io);
            let certificate = causes(io)
                .iter()
                .any(|e| matches!(e.downcast_ref::<rustls::Error>(), Some(rustls::Error::InvalidCertificate(_))));
            if certificate {
                ProxyError::UpstreamCertificate { host, cause }
            } else {
                ProxyError::UpstreamConnect { host, cause }
            }
        }
        SendError::Connect(ConnectFailure::Handshake(hyper)) => {
            ProxyError::UpstreamConnect { host, cause: error_chain(hyper) }
        }
        SendError::Exchange(hyper) => {
            let cause = error_chain(hyper);
            // hyper reports a failing request body as a user error ("error from user's Body
            // stream") whose cause is the server side's read error: the client sent a bad or
            // short body.
            let causes = causes(hyper);
            if causes.iter().filter_map(|e| e.downcast_ref::<hyper::Error>()).any(hyper::Error::is_user) {
                return ProxyError::ClientBody { host, cause };
            }
            let timed_out = causes
                .iter()
                .filter_map(|e| e.downcast_ref::<io::Error>())
                .any(|e| e.kind() == io::ErrorKind::TimedOut);
            if timed_out {
                return ProxyError::UpstreamTimeout { host, cause };
            }
            ProxyError::Upstream { host, cause }
        }
    }
}

/// The error for a connection the guard gave no address for.
fn guard_error(host: String, error: &GuardError) -> ProxyError {
    match error {
        GuardError::Refused(refusal) => ProxyError::DestinationRefused { host, cause: refusal.to_string() },
        GuardError::Resolve { source, .. } => ProxyError::UpstreamResolve { host, cause: error_chain(source) },
        GuardError::BadHost(bad) => ProxyError::UpstreamResolve { host, cause: bad.to_string() },
    }
}

/// Every error below `error`, looking through both `source()` and the error an `io::Error`
/// wraps (`io::Error::source` skips the wrapped error itself, and TLS wraps rustls's).
fn causes<'a>(error: &'a (dyn StdError + 'static)) -> Vec<&'a (dyn StdError + 'static)> {
    let mut found = Vec::new();
    let mut pending = vec![error];
    while let Some(next) = pending.pop() {
        found.push(next);
        if let Some(inner) = next.downcast_ref::<io::Error>().and_then(|io| io.get_ref()) {
            pending.push(inner);
        }
        if let Some(source) = next.source() {
            pending.push(source);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_look_inside_wrapped_io_errors() {
        let tls = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
        let wrapped = io::Error::other(io::Error::new(io::ErrorKind::InvalidData, tls));
        let found = causes(&wrapped);
        assert!(found.iter().any(|e| e.downcast_ref::<rustls::Error>().is_some()));
    }

    #[test]
    fn issue_25_the_derived_cap_leaves_room_for_agents_and_is_never_tiny() {
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
    fn issue_25_config_check_refuses_a_cap_over_the_hard_open_file_limit() {
        // Where the limit is unknown or unlimited there is nothing to compare with.
        let Some((_, hard)) = open_file_limits().filter(|(_, hard)| *hard != rlimit::INFINITY) else { return };
        let text = format!("[upstream]\nmax_connections = {hard}\n");
        let error = crate::config::Config::from_toml_str(&text, "agentgate.toml").expect_err("no room for agents");
        let message = error.to_string();
        assert!(message.contains(&format!("[upstream] max_connections = {hard}:")), "{message}");
        assert!(message.contains("open-file limit"), "{message}");
    }

    #[test]
    fn issue_25_a_cap_that_leaves_no_room_for_agents_is_refused() {
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
}
