//! Connections to origins: the pooled HTTP client (HTTP/1.1 or h2 by ALPN, TLS verified
//! against webpki + system roots + `[upstream] extra_ca_files`), the HTTP/1.1-only client for
//! protocol upgrades, TCP for passthrough tunnels, and turning their failures into
//! `ProxyError`s that name the host and the cause. Every TCP connection goes through the
//! guarded connector (`resolve`), so nothing here can reach an address the network guard
//! refused.
//!
//! Never retries over plain HTTP or without verification, never rewrites headers (see
//! `headers`), never writes a response.

use std::error::Error as StdError;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http::uri::Authority;
use http::{HeaderMap, Request, Response, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder, MaybeHttpsStream};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use serde::Deserialize;
use tokio::net::TcpStream;

use super::ProxyBody;
use super::error::{ProxyError, StartError};
use super::headers::Upgrade;
use super::resolve::{ConnectError, GuardedConnector};
use crate::error_chain::error_chain;
use crate::fetch::{PolicyTransport, TransportFuture};
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
}

impl Default for UpstreamConfig {
    fn default() -> Self {
        Self {
            extra_ca_files: Vec::new(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(90),
        }
    }
}
impl UpstreamConfig {
    /// Problems in `[upstream]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        nonzero_timeouts(
            problems,
            &[("[upstream] connect_timeout", self.connect_timeout), ("[upstream] idle_timeout", self.idle_timeout)],
        );
    }
}

type PooledClient = Client<TimeoutConnector, ProxyBody>;
type BoxError = Box<dyn StdError + Send + Sync>;

/// The clients to origins; one per proxy, shared by every connection.
pub(crate) struct Upstream {
    /// h2 or HTTP/1.1, whichever the origin picks by ALPN; connections are kept alive.
    pooled: PooledClient,
    /// HTTP/1.1 only: an `Upgrade` request has no meaning over h2, so it must not land on a
    /// pooled h2 connection.
    upgrades: PooledClient,
    connect_timeout: Duration,
    tcp: GuardedConnector,
}

impl Upstream {
    /// Builds both clients from `[upstream]`, opening every TCP connection through `tcp`.
    ///
    /// # Errors
    /// [`StartError::UpstreamClient`] when an extra CA file cannot be read.
    pub(crate) fn new(config: &UpstreamConfig, tcp: GuardedConnector) -> Result<Self, StartError> {
        let tls = crate::tls::upstream::client_config(&config.extra_ca_files)
            .map_err(|source| StartError::UpstreamClient { source })?;
        let connector = |http2: bool| {
            // The HTTPS connector picks TLS from the scheme; the guarded one only opens TCP.
            let http = tcp.clone();
            let builder = HttpsConnectorBuilder::new().with_tls_config(tls.clone()).https_or_http().enable_http1();
            let https = if http2 { builder.enable_http2().wrap_connector(http) } else { builder.wrap_connector(http) };
            TimeoutConnector { inner: https, timeout: config.connect_timeout }
        };
        let client = |connector| {
            Client::builder(TokioExecutor::new())
                // Without a timer, idle connections are only evicted at checkout.
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .pool_idle_timeout(config.idle_timeout)
                .build(connector)
        };
        Ok(Upstream {
            pooled: client(connector(true)),
            upgrades: client(connector(false)),
            connect_timeout: config.connect_timeout,
            tcp,
        })
    }

    /// Sends `request` (absolute URI, hop-by-hop fields already rewritten) to `authority` and
    /// returns the response head; the body streams afterwards.
    ///
    /// # Errors
    /// The `Upstream*` variants of [`ProxyError`], naming `authority` and the whole cause.
    pub(crate) async fn send(
        &self,
        authority: &Authority,
        request: Request<Incoming>,
        upgrade: Upgrade,
    ) -> Result<Response<Incoming>, ProxyError> {
        let client = match upgrade {
            Upgrade::Keep => &self.upgrades,
            Upgrade::Drop => &self.pooled,
        };
        let request = request.map(BodyExt::boxed_unsync);
        client.request(request).await.map_err(|error| classify(authority, &error))
    }

    /// Opens a TCP connection to `authority` for a passthrough tunnel.
    ///
    /// # Errors
    /// [`ProxyError::DestinationRefused`], [`ProxyError::UpstreamResolve`],
    /// [`ProxyError::UpstreamConnect`] or [`ProxyError::UpstreamTimeout`], naming `authority`.
    pub(crate) async fn open_tunnel(&self, authority: &Authority) -> Result<TcpStream, ProxyError> {
        let host = authority.to_string();
        let port = authority.port_u16().unwrap_or(443);
        let connect = self.tcp.connect(authority.host(), port);
        match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(ConnectError::Guard(error))) => Err(guard_error(host, &error)),
            Ok(Err(ConnectError::Io(error))) => Err(ProxyError::UpstreamConnect { host, cause: error_chain(&error) }),
            Err(_elapsed) => {
                let cause = format!("no connection after {:?} ([upstream] connect_timeout)", self.connect_timeout);
                Err(ProxyError::UpstreamTimeout { host, cause })
            }
        }
    }
}

/// Policy files are fetched through the same pooled client as proxied traffic: one pool, one
/// resolver (where the SSRF guard will sit) and one trust store.
impl PolicyTransport for Upstream {
    fn get(&self, url: Uri, headers: HeaderMap) -> TransportFuture<'_> {
        Box::pin(async move {
            let mut request = Request::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
            *request.uri_mut() = url.clone();
            *request.headers_mut() = headers;
            self.pooled.request(request).await.map_err(|error| {
                let Some(authority) = url.authority() else {
                    return FetchError::Network(format!("{url}: {}", error_chain(&error)));
                };
                let connecting = error.is_connect() && !reached(&error);
                let error = classify(authority, &error);
                // Only a connection that never opened says the origin is down; anything later
                // (a certificate, the protocol) is the origin answering badly. The connect
                // timeout covers TCP and the TLS handshake together (docs/fetch-and-cache.md).
                match error {
                    ProxyError::UpstreamConnect { .. } | ProxyError::UpstreamResolve { .. } if connecting => {
                        FetchError::Unreachable { timed_out: false, cause: error.to_string() }
                    }
                    ProxyError::UpstreamTimeout { .. } if connecting => {
                        FetchError::Unreachable { timed_out: true, cause: error.to_string() }
                    }
                    _ => FetchError::Network(format!("{url}: {error}")),
                }
            })
        })
    }
}

/// True when a failed connection got as far as the origin: TLS spoke (a rustls error), or
/// the peer reset or closed an open connection. Refused, unroutable and timed-out
/// connections never reached it.
fn reached(error: &(dyn StdError + 'static)) -> bool {
    causes(error).iter().any(|e| {
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

/// The HTTPS connector with `[upstream] connect_timeout` over TCP and TLS together:
/// `HttpConnector`'s own timeout stops at TCP, and an origin that accepts but never answers
/// the handshake would otherwise hold the request forever.
#[derive(Clone)]
struct TimeoutConnector {
    inner: HttpsConnector<GuardedConnector>,
    timeout: Duration,
}

impl tower_service::Service<Uri> for TimeoutConnector {
    type Response = MaybeHttpsStream<TokioIo<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let timeout = self.timeout;
        let connecting = self.inner.call(uri);
        Box::pin(async move {
            match tokio::time::timeout(timeout, connecting).await {
                Ok(result) => result,
                Err(_elapsed) => Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no connection after {timeout:?} ([upstream] connect_timeout)"),
                )
                .into()),
            }
        })
    }
}

/// Turns a client failure into the variant that names its cause: certificate, DNS, timeout,
/// connect, or anything else once connected.
fn classify(authority: &Authority, error: &hyper_util::client::legacy::Error) -> ProxyError {
    let host = authority.to_string();
    // The top level is hyper-util's `client error (Connect)`; the cause is below it.
    let cause = error.source().map_or_else(|| error.to_string(), error_chain);
    let causes = causes(error);
    if let Some(guard) = causes.iter().find_map(|e| e.downcast_ref::<GuardError>()) {
        return guard_error(host, guard);
    }
    let tls = causes.iter().find_map(|e| e.downcast_ref::<rustls::Error>());
    if let Some(rustls::Error::InvalidCertificate(_)) = tls {
        return ProxyError::UpstreamCertificate { host, cause };
    }
    // hyper reports a failing request body as a user error ("error from user's Body stream")
    // whose cause is the server side's read error: the client sent a bad or short body.
    if causes.iter().filter_map(|e| e.downcast_ref::<hyper::Error>()).any(hyper::Error::is_user) {
        return ProxyError::ClientBody { host, cause };
    }
    let timed_out =
        causes.iter().filter_map(|e| e.downcast_ref::<io::Error>()).any(|e| e.kind() == io::ErrorKind::TimedOut);
    if timed_out {
        return ProxyError::UpstreamTimeout { host, cause };
    }
    if error.is_connect() {
        return ProxyError::UpstreamConnect { host, cause };
    }
    ProxyError::Upstream { host, cause }
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
/// wraps (`io::Error::source` skips the wrapped error itself, and connectors wrap rustls's).
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
