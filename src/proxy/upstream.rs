//! Connections to origins: `[upstream]`, the pool every request goes through (`pool.rs`:
//! HTTP/1.1 or h2 by ALPN, TLS verified against webpki + system roots + `[upstream]
//! extra_ca_files`), TCP for passthrough tunnels, the cap on all of them together
//! (`conn::sockets`, `[upstream] max_connections`, by default derived from the open-file limit),
//! and turning their failures into `ProxyError`s that name the host and the cause. Every TCP
//! connection goes through the guarded connector (`resolve`), so nothing here can reach an
//! address the network guard refused.
//!
//! Never retries over plain HTTP or without verification, never rewrites headers (see
//! `headers`), never writes a response.

use std::error::Error as StdError;
use std::io;
use std::sync::Arc;

use http::uri::Authority;
use http::{HeaderMap, Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use tokio::net::TcpStream;

use super::body::ProxyBody;
use super::config::{UpstreamConfig, open_file_limits};
use super::conn::Counted;
use super::error::{ProxyError, StartError};
use super::headers::Upgrade;
use super::parent::Parent;
pub(crate) use super::pool::PooledBody;
use super::pool::{ConnectFailure, Key, Pool, PoolSettings, Reuse, SendError};
use super::resolve::GuardedConnector;
use crate::error_chain::error_chain;
use crate::fetch::{PolicyTransport, TransportFuture};
use crate::metrics::UpstreamMetrics;
use crate::net::GuardError;
use crate::policy::FetchError;

/// The connections to origins; one per proxy, shared by every connection.
pub(crate) struct Upstream {
    pool: Pool,
}

impl Upstream {
    /// The pool from `[upstream]`, with `agents` (`[connections] max_connections`) for the
    /// derived cap, opening every TCP connection through `tcp` and counting in `metrics`.
    ///
    /// # Errors
    /// [`StartError::UpstreamClient`] when an extra CA file cannot be read;
    /// [`StartError::Parent`] when `[upstream] parent` cannot be used (its password's
    /// variable not set).
    pub(crate) fn new(
        config: &UpstreamConfig,
        agents: usize,
        tcp: GuardedConnector,
        metrics: UpstreamMetrics,
    ) -> Result<Self, StartError> {
        let tls = crate::tls::upstream::client_config(&config.extra_ca_files)
            .map_err(|source| StartError::UpstreamClient { source })?;
        let parent = Parent::from_config(config).map_err(|source| StartError::Parent { source })?;
        let tcp = GuardedConnector { parent: parent.map(Arc::new), ..tcp };
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
        request: Request<ProxyBody>,
        upgrade: Upgrade,
    ) -> Result<Response<PooledBody>, ProxyError> {
        let Some(key) = Key::of(request.uri()) else {
            return Err(ProxyError::UnsupportedScheme { uri: super::error::shown_target(request.uri()) });
        };
        let reuse = match upgrade {
            Upgrade::Keep => Reuse::Upgrade,
            Upgrade::Drop => Reuse::Pool,
        };
        self.pool.send(&key, request, reuse).await.map_err(|error| classify(authority, &error))
    }

    /// Opens a TCP connection to `authority` for a passthrough tunnel, counted under the cap
    /// (through the parent proxy when there is one, as every connection to an origin).
    ///
    /// # Errors
    /// [`ProxyError::DestinationRefused`], [`ProxyError::UpstreamResolve`],
    /// [`ProxyError::UpstreamConnect`], [`ProxyError::UpstreamTimeout`],
    /// [`ProxyError::Parent`] or [`ProxyError::UpstreamAtCapacity`], naming `authority`.
    pub(crate) async fn open_tunnel(&self, authority: &Authority) -> Result<Counted<TcpStream>, ProxyError> {
        let port = authority.port_u16().unwrap_or(443);
        self.pool.dial_tunnel(authority.host(), port).await.map_err(|error| classify(authority, &error))
    }
}

/// Policy files are fetched through the same pool as proxied traffic: one budget, one
/// resolver (where the SSRF guard sits) and one trust store. The fetches of one origin take
/// turns on one connection, which is then pooled for the agent's own request unless it
/// carried a large body (`Reuse::Fetch`, docs/upstream.md).
impl PolicyTransport for Upstream {
    fn get(&self, url: Uri, headers: HeaderMap) -> TransportFuture<'_> {
        Box::pin(async move {
            let Some(key) = Key::of(&url) else {
                return Err(FetchError::Network(format!("{url}: not an absolute URL")));
            };
            let mut request = Request::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
            *request.uri_mut() = url.clone();
            *request.headers_mut() = headers;
            match self.pool.send(&key, request, Reuse::Fetch).await {
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
        ProxyError::Parent { refused, .. } => FetchError::Parent { refused, cause: proxy_error.to_string() },
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
        SendError::Connect(ConnectFailure::Guard(_) | ConnectFailure::TimedOut(_) | ConnectFailure::Parent(_))
        | SendError::AtCapacity(_) => {
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
        SendError::Connect(ConnectFailure::Parent(parent)) => {
            ProxyError::Parent { host, cause: parent.to_string(), refused: parent.refused() }
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
}
