//! The connection pool to origins, over hyper's own client connections
//! (`hyper::client::conn::{http1, http2}`): one per proxy, shared by proxied requests,
//! WebSocket upgrades and policy fetches. It opens each connection under the socket budget
//! (`conn::sockets`) through the guarded connector (`resolve.rs`), with TLS verified against the
//! upstream roots (ALPN `h2` and `http/1.1`, or `http/1.1` alone for an upgrade), and keeps
//! exact lists of what is idle: per origin at most `[upstream] max_idle_per_host` HTTP/1.1
//! connections, newest reused first, and one shared h2 connection; across origins, one list
//! from least to most recently used, from which the budget closes to make room and the
//! reaper closes what has been idle for `[upstream] idle_timeout`.
//!
//! A connection is idle from the end of its last response (HTTP/1.1), or of the last of its
//! responses in flight (h2), until a request takes it: the response body handed out carries
//! the connection back ([`PooledBody`]). A body dropped before its end closes an HTTP/1.1
//! connection instead (its framing is unknown). See `docs/upstream.md` for why the pool is
//! agentgate's own rather than hyper-util's.
//!
//! This module takes a connection for each request and gives it back; its parts: `dial`
//! opens one (TCP, TLS, handshake), `shared` holds what the bodies, the budget and the
//! reaper share (the idle lists of `lru` behind one lock), `lease` carries a connection back
//! when its response ends, and `turn` lets one origin's policy fetches take turns.
//!
//! Never: decides, rewrites headers beyond what HTTP/1.1 needs (`Host`, origin-form), retries
//! a request that reached the origin, or opens a socket outside the budget.

use std::hash::{Hash, Hasher};
use std::io;
use std::sync::Arc;
use std::time::Duration;

use http::header::{HOST, HeaderValue};
use http::uri::{Authority, Parts, Scheme};
use http::{Request, Response, Uri};
use hyper::client::conn::{http1, http2};
use tokio::net::TcpStream;
use tracing::debug;

mod dial;
mod lease;
mod lru;
mod shared;
mod turn;

use self::dial::Dialer;
pub(crate) use self::lease::PooledBody;
use self::lease::{Back, Lease};
use self::lru::{Found, Liveness};
use self::shared::Shared;
use self::turn::{FETCH_TURN_WAIT, Turn};
use super::body::ProxyBody;
use super::conn::{AtCapacity, Counted};
use super::parent::ParentError;
use super::resolve::{ConnectError, GuardedConnector};
use crate::error_chain::error_chain;
use crate::metrics::UpstreamMetrics;
use crate::net::GuardError;

type H1 = http1::SendRequest<ProxyBody>;

/// The most body bytes a policy fetch's HTTP/1.1 connection may carry and still be kept: a
/// connection keeps a read buffer as large as the largest body it read, so one that read a
/// 400 KiB robots.txt would hold that much idle (docs/upstream.md, "Policy fetches").
pub(crate) const FETCH_KEEP_WITHIN: usize = 16 * 1024;
type H2 = http2::SendRequest<ProxyBody>;

/// An origin as the pool keys it: the scheme and the authority the request named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Key {
    scheme: Scheme,
    authority: Authority,
}

/// As `Authority` compares (ASCII case ignored), but the authority is handed to the hasher
/// lowercased a chunk at a time: `Authority`'s own `Hash` writes it a byte at a time, a
/// hashing round per byte, and the pool's maps hash a key several times per request.
impl Hash for Key {
    fn hash<H: Hasher>(&self, state: &mut H) {
        const CHUNK: usize = 32;
        self.scheme.hash(state);
        let bytes = self.authority.as_str().as_bytes();
        state.write_usize(bytes.len());
        let mut lower = [0u8; CHUNK];
        for chunk in bytes.chunks(CHUNK) {
            let lower = &mut lower[..chunk.len()];
            lower.copy_from_slice(chunk);
            lower.make_ascii_lowercase();
            state.write(lower);
        }
    }
}

impl Key {
    /// The key of an absolute `uri`; `None` without a scheme or an authority.
    pub(crate) fn of(uri: &Uri) -> Option<Key> {
        Some(Key { scheme: uri.scheme()?.clone(), authority: uri.authority()?.clone() })
    }

    fn https(&self) -> bool {
        self.scheme == Scheme::HTTPS
    }

    fn port(&self) -> u16 {
        self.authority.port_u16().unwrap_or(if self.https() { 443 } else { 80 })
    }
}

/// How a request uses the pool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reuse {
    /// Proxied requests: an idle connection (or the origin's shared h2 connection) when
    /// there is one, else a new one; either goes back to the pool when the response ends.
    Pool,
    /// Policy fetches: in turn per origin ([`turn`]), a pooled connection when there is one,
    /// else a new one; either goes back to the pool as by `Pool` unless its response body
    /// passed [`FETCH_KEEP_WITHIN`] bytes (HTTP/1.1: hyper's read buffer stays as large as the
    /// body, so the connection is closed). A fetch that waited [`turn::FETCH_TURN_WAIT`] for
    /// its turn without getting it opens a connection closed when it ends.
    Fetch,
    /// Upgrades: a new connection offering HTTP/1.1 only, never pooled; after a `101` the
    /// socket belongs to the upgraded stream.
    Upgrade,
}

/// Why a request got no response.
#[derive(Debug)]
pub(crate) enum SendError {
    /// No socket came free under `[upstream] max_connections`; nothing was sent.
    AtCapacity(AtCapacity),
    /// The connection could not be opened.
    Connect(ConnectFailure),
    /// The connection was open and the exchange failed.
    Exchange(hyper::Error),
}

/// Why a new connection did not open.
#[derive(Debug)]
pub(crate) enum ConnectFailure {
    /// The guard gave no address.
    Guard(GuardError),
    /// Every address refused or failed the TCP connect.
    Tcp(io::Error),
    /// TCP connected, then TLS failed (the origin answered: a certificate, an alert, a reset).
    Tls(io::Error),
    /// TCP and TLS together took longer than `[upstream] connect_timeout`.
    TimedOut(Duration),
    /// hyper could not start the connection (the h2 preface was refused).
    Handshake(hyper::Error),
    /// The parent proxy (`[upstream] parent`) could not be reached or refused the tunnel.
    Parent(ParentError),
}

impl From<ConnectError> for ConnectFailure {
    fn from(error: ConnectError) -> Self {
        match error {
            ConnectError::Guard(error) => ConnectFailure::Guard(error),
            ConnectError::Io(error) => ConnectFailure::Tcp(error),
            ConnectError::Parent(error) => ConnectFailure::Parent(error),
        }
    }
}

/// What the pool is built from (`[upstream]`, with the cap resolved).
pub(crate) struct PoolSettings {
    pub(crate) max_connections: usize,
    pub(crate) connect_queue_timeout: Duration,
    pub(crate) max_idle_per_host: usize,
    pub(crate) idle_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

/// The pool: what opens connections, and what is shared with the bodies it hands out.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    dialer: Dialer,
}

impl Pool {
    /// A pool dialling through `tcp` with `tls` (no ALPN set; the pool sets it), counted in
    /// `metrics`.
    pub(crate) fn new(
        settings: &PoolSettings,
        tcp: GuardedConnector,
        tls: rustls::ClientConfig,
        metrics: UpstreamMetrics,
    ) -> Self {
        Pool { shared: Shared::new(settings, metrics), dialer: Dialer::new(tcp, &tls, settings.connect_timeout) }
    }

    /// Sends `request` (absolute URI on `key`, hop-by-hop fields already removed, no `Host`)
    /// and returns the response head; the body streams afterwards and gives the connection
    /// back as `reuse` says. A request that a pooled connection refused unsent (it had just
    /// closed) is sent again on another connection; nothing that reached an origin is resent.
    ///
    /// # Errors
    /// [`SendError`]: no socket under the cap, no connection, or a failed exchange.
    pub(crate) async fn send(
        &self,
        key: &Key,
        mut request: Request<ProxyBody>,
        reuse: Reuse,
    ) -> Result<Response<PooledBody>, SendError> {
        let absolute = request.uri().clone();
        let mut first = true;
        loop {
            // From here on the lease gives the connection back whatever happens, this future
            // being dropped (the agent hung up) included.
            let (mut conn, mut lease, reused) = self.connection(key, reuse).await?;
            if !first {
                *request.uri_mut() = absolute.clone();
                request.headers_mut().remove(HOST);
            }
            first = false;
            let sent = match &mut conn {
                Conn::H1(sender) => {
                    to_http1(&mut request, &absolute);
                    sender.try_send_request(request).await
                }
                Conn::H2(sender) => sender.try_send_request(request).await,
            };
            match sent {
                Ok(response) => {
                    // The body carries an HTTP/1.1 sender back; an h2 one stays with its
                    // connection (dropping a clone closes nothing).
                    if let Conn::H1(sender) = conn {
                        lease.h1 = Some(sender);
                    }
                    return Ok(response.map(|inner| PooledBody { inner, lease: Some(lease) }));
                }
                Err(mut failed) => match failed.take_message() {
                    Some(unsent) if reused => {
                        debug!(origin = %key.authority, error = %error_chain(failed.error()), "pooled connection closed before the request was sent; trying another");
                        lease.discard = true;
                        request = unsent;
                    }
                    _ => return Err(SendError::Exchange(failed.into_error())),
                },
            }
        }
    }

    /// A TCP connection to `host:port` for a passthrough tunnel, under the budget and within
    /// `[upstream] connect_timeout`; never pooled.
    ///
    /// # Errors
    /// [`SendError::AtCapacity`] or [`SendError::Connect`].
    pub(crate) async fn dial_tunnel(&self, host: &str, port: u16) -> Result<Counted<TcpStream>, SendError> {
        let permit = self.shared.sockets.acquire().await.map_err(SendError::AtCapacity)?;
        self.dialer.tunnel(permit, host, port).await.map_err(SendError::Connect)
    }

    /// A connection for one request to `key`, its lease (what goes back to the pool, and
    /// when), and whether it was pooled before. A policy fetch first waits for its turn on
    /// the origin ([`Turns`](turn::Turns)), so the fetches of one origin share one connection.
    async fn connection(&self, key: &Key, reuse: Reuse) -> Result<(Conn, Lease, bool), SendError> {
        let turn = match reuse {
            Reuse::Fetch => self.shared.turns.take(key, FETCH_TURN_WAIT).await,
            Reuse::Pool | Reuse::Upgrade => None,
        };
        if reuse != Reuse::Upgrade {
            while let Some(found) = self.shared.take(key) {
                match found {
                    // h2 multiplexes: the next fetch need not wait for this one.
                    Found::H2 { id, sender } => {
                        return Ok((Conn::H2(sender), self.lease(key, Back::Shared(id), reuse, None), true));
                    }
                    // Ready at once unless its last response has only just ended; an error
                    // means it closed meanwhile, and the next one is tried.
                    Found::H1(mut sender) => {
                        if sender.ready().await.is_ok() {
                            return Ok((Conn::H1(sender), self.lease(key, Back::Pool, reuse, turn), true));
                        }
                    }
                }
            }
        }
        // Boxed: a new connection (TCP, TLS, handshake) is the cold path, and every request's
        // future would otherwise carry its state (the hot path, `docs/request-flow.md`).
        let permit = self.shared.sockets.acquire().await.map_err(SendError::AtCapacity)?;
        let conn =
            Box::pin(self.dialer.open(permit, key, reuse == Reuse::Upgrade)).await.map_err(SendError::Connect)?;
        let back = match (&conn, reuse) {
            (Conn::H1(_), Reuse::Pool) => Back::Pool,
            // The origin's one fetch connection, kept for the agent's own request.
            (Conn::H1(_), Reuse::Fetch) if turn.is_some() => Back::Pool,
            (Conn::H2(sender), Reuse::Pool | Reuse::Fetch) => match self.shared.share_h2(key, sender) {
                Some(id) => Back::Shared(id),
                // Another request's new h2 connection became the origin's first.
                None => Back::Close,
            },
            (_, Reuse::Fetch | Reuse::Upgrade) => Back::Close,
        };
        let turn = turn.filter(|_| matches!(conn, Conn::H1(_)));
        Ok((conn, self.lease(key, back, reuse, turn), false))
    }

    /// The lease of a connection to `key` taken for `reuse`; a fetch's HTTP/1.1 lease holds
    /// its `turn` and keeps the connection only within [`FETCH_KEEP_WITHIN`].
    fn lease(&self, key: &Key, back: Back, reuse: Reuse, turn: Option<Turn>) -> Lease {
        let keep_within = (reuse == Reuse::Fetch && matches!(back, Back::Pool)).then_some(FETCH_KEEP_WITHIN);
        Lease {
            shared: Arc::clone(&self.shared),
            key: key.clone(),
            back,
            h1: None,
            clean: false,
            discard: false,
            keep_within,
            _turn: turn,
        }
    }
}

/// The request as an HTTP/1.1 connection sends it: origin-form, with `Host` from the URI
/// (its port only when it is not the scheme's default), as hyper-util's client did.
fn to_http1(request: &mut Request<ProxyBody>, absolute: &Uri) {
    if !request.headers().contains_key(HOST)
        && let Some(host) = absolute.host()
    {
        let default_port = if absolute.scheme() == Some(&Scheme::HTTPS) { 443 } else { 80 };
        let value = match absolute.port_u16() {
            Some(port) if port != default_port => {
                // Written once, and the header takes the text as it is (no copy).
                let mut text = String::with_capacity(host.len() + 6);
                text.push_str(host);
                text.push(':');
                text.push_str(itoa::Buffer::new().format(port));
                HeaderValue::from_maybe_shared(bytes::Bytes::from(text))
            }
            _ => HeaderValue::from_str(host),
        };
        if let Ok(value) = value {
            request.headers_mut().insert(HOST, value);
        }
    }
    let origin_form = match absolute.path_and_query() {
        Some(path) if path.as_str() != "/" => {
            let mut parts = Parts::default();
            parts.path_and_query = Some(path.clone());
            Uri::from_parts(parts).unwrap_or_default()
        }
        _ => Uri::default(),
    };
    *request.uri_mut() = origin_form;
}

/// A live connection to an origin.
enum Conn {
    H1(H1),
    H2(H2),
}

impl Liveness for H1 {
    fn is_closed(&self) -> bool {
        http1::SendRequest::is_closed(self)
    }
}

impl Liveness for H2 {
    fn is_closed(&self) -> bool {
        http2::SendRequest::is_closed(self)
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    #[test]
    fn http1_requests_are_origin_form_with_host() {
        let body = || http_body_util::Empty::new().map_err(|never| match never {}).boxed_unsync();
        for (uri, host, target) in [
            ("http://example.test/a?b=1", "example.test", "/a?b=1"),
            ("http://example.test:80/", "example.test", "/"),
            ("https://example.test:443/x", "example.test", "/x"),
            ("https://example.test:8443/x", "example.test:8443", "/x"),
            ("http://[::1]:8080/", "[::1]:8080", "/"),
        ] {
            let absolute: Uri = uri.parse().expect("uri");
            let mut request = Request::new(body());
            *request.uri_mut() = absolute.clone();
            to_http1(&mut request, &absolute);
            assert_eq!(request.headers()[HOST], host, "{uri}");
            assert_eq!(request.uri().to_string(), target, "{uri}");
        }
    }

    #[test]
    fn keys_equal_as_authorities_compare_hash_alike() {
        let hash = |key: &Key| {
            let mut hasher = std::hash::DefaultHasher::new();
            key.hash(&mut hasher);
            hasher.finish()
        };
        let key = |uri: &str| Key::of(&uri.parse().expect("uri")).expect("absolute");
        let long = format!("https://{}.example.test:8443/", "Sub".repeat(20));
        for (a, b) in [
            ("https://Example.TEST:8443/", "https://example.test:8443/x"),
            ("http://[::1]:8080/", "http://[::1]:8080/other"),
            (long.as_str(), long.to_ascii_lowercase().as_str()),
        ] {
            let (a, b) = (key(a), key(b));
            assert_eq!(a, b);
            assert_eq!(hash(&a), hash(&b), "{a:?} and {b:?}");
        }
        let distinct = [key("https://example.test/"), key("http://example.test/"), key("https://example.test:8443/")];
        for (i, a) in distinct.iter().enumerate() {
            for b in &distinct[i + 1..] {
                assert_ne!(hash(a), hash(b), "{a:?} and {b:?}");
            }
        }
    }
}
