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
//! Never: decides, rewrites headers beyond what HTTP/1.1 needs (`Host`, origin-form), retries
//! a request that reached the origin, or opens a socket outside the budget.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use foldhash::fast::RandomState;
use http::header::{HOST, HeaderValue};
use http::uri::{Authority, Parts, Scheme};
use http::{Request, Response, Uri};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tracing::debug;

use super::body::ProxyBody;
use super::conn::{AtCapacity, CloseIdle, Counted, Sockets};
use super::resolve::{ConnectError, GuardedConnector};
use crate::error_chain::error_chain;
use crate::metrics::UpstreamMetrics;
use crate::net::GuardError;

type H1 = http1::SendRequest<ProxyBody>;
type H2 = http2::SendRequest<ProxyBody>;

/// An origin as the pool keys it: the scheme and the authority the request named.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    scheme: Scheme,
    authority: Authority,
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
    /// Policy fetches: a pooled connection when there is one, given back as by `Pool`; a
    /// connection opened for the fetch is closed when its response ends, so fetches never
    /// leave idle connections behind.
    Borrow,
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
}

impl From<ConnectError> for ConnectFailure {
    fn from(error: ConnectError) -> Self {
        match error {
            ConnectError::Guard(error) => ConnectFailure::Guard(error),
            ConnectError::Io(error) => ConnectFailure::Tcp(error),
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

/// The pool: the connector, TLS, and what is shared with the bodies it hands out.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    tcp: GuardedConnector,
    /// ALPN `h2`, `http/1.1`: the origin picks.
    tls: TlsConnector,
    /// ALPN `http/1.1` only: for upgrades, which have no meaning over h2.
    tls_h1: TlsConnector,
    connect_timeout: Duration,
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
        let shared = Arc::new_cyclic(|shared: &Weak<Shared>| {
            let idle: Weak<dyn CloseIdle> = shared.clone();
            Shared {
                sockets: Sockets::new(settings.max_connections, settings.connect_queue_timeout, idle, metrics),
                idle: Mutex::new(Idle::default()),
                max_idle_per_host: settings.max_idle_per_host,
                idle_timeout: settings.idle_timeout,
                wake: Arc::new(Notify::new()),
                reaper_started: AtomicBool::new(false),
            }
        });
        // Both share `tls`'s session store: a new connection resumes whichever was before.
        let with_alpn = |protocols: &[&[u8]]| {
            let mut config = tls.clone();
            config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
            TlsConnector::from(Arc::new(config))
        };
        Pool {
            shared,
            tcp,
            tls: with_alpn(&[b"h2", b"http/1.1"]),
            tls_h1: with_alpn(&[b"http/1.1"]),
            connect_timeout: settings.connect_timeout,
        }
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
        match tokio::time::timeout(self.connect_timeout, self.tcp.connect(permit, host, port)).await {
            Ok(connected) => connected.map_err(|error| SendError::Connect(error.into())),
            Err(_elapsed) => Err(SendError::Connect(ConnectFailure::TimedOut(self.connect_timeout))),
        }
    }

    /// A connection for one request to `key`, its lease (what goes back to the pool, and
    /// when), and whether it was pooled before.
    async fn connection(&self, key: &Key, reuse: Reuse) -> Result<(Conn, Lease, bool), SendError> {
        if reuse != Reuse::Upgrade {
            while let Some(found) = self.shared.take(key) {
                match found {
                    Found::H2 { id, sender } => return Ok((Conn::H2(sender), self.lease(key, Back::Shared(id)), true)),
                    // Ready at once unless its last response has only just ended; an error
                    // means it closed meanwhile, and the next one is tried.
                    Found::H1(mut sender) => {
                        if sender.ready().await.is_ok() {
                            return Ok((Conn::H1(sender), self.lease(key, Back::Pool), true));
                        }
                    }
                }
            }
        }
        // Boxed: a new connection (TCP, TLS, handshake) is the cold path, and every request's
        // future would otherwise carry its state (issue 11).
        let conn = Box::pin(self.open(key, reuse)).await?;
        let back = match (&conn, reuse) {
            (Conn::H1(_), Reuse::Pool) => Back::Pool,
            (Conn::H2(sender), Reuse::Pool) => match self.shared.share_h2(key, sender) {
                Some(id) => Back::Shared(id),
                // Another request's new h2 connection became the origin's first.
                None => Back::Close,
            },
            (_, Reuse::Borrow | Reuse::Upgrade) => Back::Close,
        };
        Ok((conn, self.lease(key, back), false))
    }

    /// Opens a new connection to `key`: a socket under the budget, TCP through the guard,
    /// TLS for `https`, then hyper's HTTP/1.1 or h2 by ALPN, its task spawned.
    async fn open(&self, key: &Key, reuse: Reuse) -> Result<Conn, SendError> {
        let permit = self.shared.sockets.acquire().await.map_err(SendError::AtCapacity)?;
        let host = key.authority.host();
        let connecting = async {
            let tcp = self.tcp.connect(permit, host, key.port()).await.map_err(ConnectFailure::from)?;
            if !key.https() {
                return Ok((Stream::Plain(tcp), false));
            }
            let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_owned())
                .map_err(|error| ConnectFailure::Tls(io::Error::new(io::ErrorKind::InvalidInput, error)))?;
            let tls = if reuse == Reuse::Upgrade { &self.tls_h1 } else { &self.tls };
            let stream = tls.connect(name, tcp).await.map_err(ConnectFailure::Tls)?;
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            Ok((Stream::Tls(Box::new(stream)), h2))
        };
        let (stream, h2) = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(connected) => connected.map_err(SendError::Connect)?,
            Err(_elapsed) => return Err(SendError::Connect(ConnectFailure::TimedOut(self.connect_timeout))),
        };
        let io = TokioIo::new(stream);
        let handshake = |error| SendError::Connect(ConnectFailure::Handshake(error));
        if h2 {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new());
            let (mut sender, connection) = builder.handshake(io).await.map_err(handshake)?;
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    debug!(error = %error_chain(&error), "upstream h2 connection ended with an error");
                }
            });
            sender.ready().await.map_err(handshake)?;
            Ok(Conn::H2(sender))
        } else {
            let (mut sender, connection) = http1::Builder::new().handshake(io).await.map_err(handshake)?;
            tokio::spawn(async move {
                if let Err(error) = connection.with_upgrades().await {
                    debug!(error = %error_chain(&error), "upstream connection ended with an error");
                }
            });
            sender.ready().await.map_err(handshake)?;
            Ok(Conn::H1(sender))
        }
    }

    fn lease(&self, key: &Key, back: Back) -> Lease {
        Lease { shared: Arc::clone(&self.shared), key: key.clone(), back, h1: None, clean: false, discard: false }
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
            Some(port) if port != default_port => HeaderValue::from_str(&format!("{host}:{port}")),
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

/// What happens to a connection when its response ends.
#[derive(Clone, Copy)]
enum Back {
    /// Closed.
    Close,
    /// Back to the origin's idle HTTP/1.1 connections.
    Pool,
    /// One request fewer on the origin's shared h2 connection (this id).
    Shared(u64),
}

/// One request's hold on a connection, from taking it until its response body ends (the
/// body carries it): then the connection goes back as `back` says. Dropped early (the
/// request failed, or its future was dropped: the agent hung up), it gives back an h2
/// connection's slot all the same, and an HTTP/1.1 connection is closed instead, its framing
/// then unknown. Dropping an HTTP/1.1 sender closes the connection once its response is
/// done; an h2 connection nobody shares closes when its last stream does.
struct Lease {
    shared: Arc<Shared>,
    key: Key,
    back: Back,
    /// The HTTP/1.1 sender, once the response head is in.
    h1: Option<H1>,
    /// The response ended cleanly: an HTTP/1.1 connection can carry another request.
    clean: bool,
    /// The connection refused a request unsent: not used again.
    discard: bool,
}

impl Drop for Lease {
    fn drop(&mut self) {
        match self.back {
            Back::Pool => {
                if let Some(sender) = self.h1.take().filter(|_| self.clean && !self.discard) {
                    self.shared.put_h1(&self.key, sender);
                }
            }
            Back::Shared(id) => self.shared.finish_h2(&self.key, id, self.discard),
            Back::Close => {}
        }
    }
}

/// An origin's response body, streamed as hyper hands it over; when it ends it gives its
/// connection back to the pool (or closes it, [`Reuse`]).
pub(crate) struct PooledBody {
    inner: Incoming,
    lease: Option<Lease>,
}

impl PooledBody {
    /// Gives the connection back now that the body is over: cleanly when it reached its end.
    fn finish(&mut self, clean: bool) {
        if let Some(mut lease) = self.lease.take() {
            lease.clean = clean;
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => this.finish(true),
            Poll::Ready(Some(Err(_))) => this.finish(false),
            // hyper's server stops polling a body that says it has ended.
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.finish(true),
            Poll::Ready(Some(Ok(_))) | Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // An empty body (HEAD, 204, 304) is never polled: it ended all the same.
        let clean = self.inner.is_end_stream();
        self.finish(clean);
    }
}

/// A socket to an origin, with TLS or without.
enum Stream {
    Plain(Counted<TcpStream>),
    Tls(Box<TlsStream<Counted<TcpStream>>>),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}

/// What the pool's bodies, the budget and the reaper share: the idle lists behind one lock.
struct Shared {
    sockets: Sockets,
    idle: Mutex<Idle<H1, H2>>,
    max_idle_per_host: usize,
    idle_timeout: Duration,
    /// Wakes the reaper when the idle list stops being empty, and when the pool goes.
    wake: Arc<Notify>,
    reaper_started: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Idle<H1, H2>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle connection to `key`, or its shared h2 connection; closed ones are dropped.
    fn take(&self, key: &Key) -> Option<Found<H1, H2>> {
        let mut idle = self.lock();
        let found = idle.take(key);
        self.sockets.metrics().set_idle(idle.len());
        found
    }

    /// Makes `sender` the shared h2 connection of `key` (one request in flight) unless it
    /// already has one; the id its lease gives back.
    fn share_h2(&self, key: &Key, sender: &H2) -> Option<u64> {
        self.lock().share_h2(key, sender)
    }

    /// An HTTP/1.1 connection whose response ended cleanly, idle from now.
    fn put_h1(self: &Arc<Self>, key: &Key, sender: H1) {
        let (evicted, first) = {
            let mut idle = self.lock();
            let first = idle.is_empty();
            let evicted = idle.put_h1(key, sender, self.max_idle_per_host, Instant::now());
            self.sockets.metrics().set_idle(idle.len());
            (evicted, first && !idle.is_empty())
        };
        drop(evicted);
        self.went_idle(first);
    }

    /// One request fewer on `key`'s shared h2 connection `id`: idle from now when it was
    /// the last (closed then when no idle connection may be kept); closed at once when
    /// `discard`.
    fn finish_h2(self: &Arc<Self>, key: &Key, id: u64, discard: bool) {
        let (dropped, first) = {
            let mut idle = self.lock();
            let first = idle.is_empty();
            let dropped = idle.finish_h2(key, id, discard, self.max_idle_per_host, Instant::now());
            self.sockets.metrics().set_idle(idle.len());
            (dropped, first && !idle.is_empty())
        };
        drop(dropped);
        self.went_idle(first);
    }

    /// After a connection went idle: the reaper learns of the first, and a connection
    /// waiting for a socket gets one closed for it.
    fn went_idle(self: &Arc<Self>, first: bool) {
        if first {
            if self.reaper_started.load(Ordering::Acquire) {
                self.wake.notify_one();
            } else if let Ok(runtime) = tokio::runtime::Handle::try_current()
                && !self.reaper_started.swap(true, Ordering::AcqRel)
            {
                runtime.spawn(reap(Arc::downgrade(self), Arc::clone(&self.wake)));
            }
        }
        self.sockets.went_idle();
    }

    /// Closes what has been idle for `idle_timeout` at `now`; how long until the next one is
    /// due, `None` when nothing is idle.
    fn expire(&self, now: Instant) -> Option<Duration> {
        loop {
            let closed = {
                let mut idle = self.lock();
                let since = idle.oldest_since()?;
                let due = since + self.idle_timeout;
                if due > now {
                    return Some(due - now);
                }
                let closed = idle.close_oldest();
                self.sockets.metrics().set_idle(idle.len());
                closed
            };
            drop(closed);
        }
    }
}

impl CloseIdle for Shared {
    fn close_least_recent(&self) -> bool {
        loop {
            let closed = {
                let mut idle = self.lock();
                let closed = idle.close_oldest();
                self.sockets.metrics().set_idle(idle.len());
                closed
            };
            match closed {
                None => return false,
                // Already closed by the origin: its socket was given back then.
                Some(closed) if closed.is_closed() => {}
                Some(closed) => {
                    drop(closed);
                    return true;
                }
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The reaper holds only a weak reference: this lets it see the pool is gone.
        self.wake.notify_one();
    }
}

/// Closes idle connections once they have been idle for `[upstream] idle_timeout`, the
/// least recently used first; sleeps until the next is due, or until one goes idle.
async fn reap(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let next = match shared.upgrade() {
            Some(shared) => shared.expire(Instant::now()),
            None => return,
        };
        match next {
            Some(due) => tokio::time::sleep(due).await,
            None => wake.notified().await,
        }
    }
}

/// Whether a connection handle's connection has closed.
trait Liveness {
    fn is_closed(&self) -> bool;
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

/// What [`Idle::take`] found.
enum Found<C1, C2> {
    H1(C1),
    H2 { id: u64, sender: C2 },
}

/// A connection [`Idle`] let go of, to be dropped outside the lock.
enum Closed<C1, C2> {
    H1(C1),
    H2(C2),
}

impl<C1: Liveness, C2: Liveness> Closed<C1, C2> {
    fn is_closed(&self) -> bool {
        match self {
            Closed::H1(conn) => conn.is_closed(),
            Closed::H2(conn) => conn.is_closed(),
        }
    }
}

/// The idle lists: per origin, its idle HTTP/1.1 connections (oldest to newest) and its
/// shared h2 connection; across origins, every idle connection from least to most recently
/// used. Nodes live in a slab and are linked both ways in both lists, so taking, giving
/// back, capping per origin and closing the least recently used are each a few index
/// updates, with no allocation once the slab has grown. Generic over the connection handles
/// so the unit tests can use stand-ins.
struct Idle<C1, C2> {
    /// foldhash under a per-process random seed, as for limit keys (`crate::limits`): the
    /// map is looked up a few times per request, and SipHash over the authority, byte by
    /// byte, was the pool's largest cost.
    origins: HashMap<Key, Origin<C2>, RandomState>,
    nodes: Vec<Option<Node<C1>>>,
    free: Vec<usize>,
    oldest: Option<usize>,
    newest: Option<usize>,
    len: usize,
    next_id: u64,
}

impl<C1, C2> Default for Idle<C1, C2> {
    fn default() -> Self {
        Idle {
            origins: HashMap::with_hasher(RandomState::default()),
            nodes: Vec::new(),
            free: Vec::new(),
            oldest: None,
            newest: None,
            len: 0,
            next_id: 0,
        }
    }
}

/// One origin's entry; removed once it has neither idle nor shared connections.
struct Origin<C2> {
    oldest: Option<usize>,
    newest: Option<usize>,
    h1: usize,
    h2: Option<SharedH2<C2>>,
}

impl<C2> Default for Origin<C2> {
    fn default() -> Self {
        Origin { oldest: None, newest: None, h1: 0, h2: None }
    }
}

impl<C2> Origin<C2> {
    fn is_empty(&self) -> bool {
        self.h1 == 0 && self.h2.is_none()
    }
}

/// An origin's h2 connection, shared by its requests in flight; idle (in the list, at
/// `idle`) when none is.
struct SharedH2<C2> {
    id: u64,
    sender: C2,
    in_flight: usize,
    idle: Option<usize>,
}

/// An idle connection: an HTTP/1.1 sender, or the mark of its origin's idle h2 connection.
enum IdleConn<C1> {
    H1(C1),
    H2,
}

struct Node<C1> {
    key: Key,
    conn: IdleConn<C1>,
    since: Instant,
    /// The list across origins.
    older: Option<usize>,
    newer: Option<usize>,
    /// The origin's own list (HTTP/1.1 only).
    origin_older: Option<usize>,
    origin_newer: Option<usize>,
}

impl<C1: Liveness, C2: Liveness + Clone> Idle<C1, C2> {
    fn len(&self) -> usize {
        self.len
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn node(&mut self, slot: usize) -> &mut Node<C1> {
        self.nodes[slot].as_mut().expect("a linked slot holds a node")
    }

    /// The shared h2 connection of `key` (one more request in flight), else its newest idle
    /// HTTP/1.1 connection; closed ones are dropped on the way.
    fn take(&mut self, key: &Key) -> Option<Found<C1, C2>> {
        loop {
            let origin = self.origins.get_mut(key)?;
            if let Some(h2) = &mut origin.h2 {
                if !h2.sender.is_closed() {
                    h2.in_flight += 1;
                    let (id, sender, idle) = (h2.id, h2.sender.clone(), h2.idle.take());
                    if let Some(slot) = idle {
                        self.unlink(slot);
                    }
                    return Some(Found::H2 { id, sender });
                }
                let idle = origin.h2.take().and_then(|h2| h2.idle);
                if let Some(slot) = idle {
                    self.unlink(slot);
                }
                self.prune(key);
                continue;
            }
            let slot = origin.newest?;
            match self.unlink(slot).conn {
                IdleConn::H1(conn) if !conn.is_closed() => return Some(Found::H1(conn)),
                IdleConn::H1(_) | IdleConn::H2 => {}
            }
        }
    }

    /// Adds an idle HTTP/1.1 connection to `key`, newest; returns the connection closed to
    /// keep the origin within `max_per_host` (its oldest), or `conn` itself when closed.
    fn put_h1(&mut self, key: &Key, conn: C1, max_per_host: usize, now: Instant) -> Option<C1> {
        if conn.is_closed() || max_per_host == 0 {
            return Some(conn);
        }
        let origin = self.origins.entry(key.clone()).or_default();
        let evicted = match origin.oldest {
            Some(oldest) if origin.h1 >= max_per_host => match self.unlink(oldest).conn {
                IdleConn::H1(conn) => Some(conn),
                IdleConn::H2 => None,
            },
            _ => None,
        };
        let slot = self.insert(Node {
            key: key.clone(),
            conn: IdleConn::H1(conn),
            since: now,
            older: None,
            newer: None,
            origin_older: None,
            origin_newer: None,
        });
        let origin = self.origins.entry(key.clone()).or_default();
        let previous = origin.newest.replace(slot);
        if previous.is_none() {
            origin.oldest = Some(slot);
        }
        origin.h1 += 1;
        if let Some(previous) = previous {
            self.node(previous).origin_newer = Some(slot);
        }
        self.node(slot).origin_older = previous;
        evicted
    }

    /// Makes `sender` the shared h2 connection of `key`, one request in flight, unless a
    /// live one is there; its id.
    fn share_h2(&mut self, key: &Key, sender: &C2) -> Option<u64> {
        let origin = self.origins.entry(key.clone()).or_default();
        if origin.h2.as_ref().is_some_and(|h2| !h2.sender.is_closed()) {
            return None;
        }
        let dead_idle = origin.h2.take().and_then(|h2| h2.idle);
        let id = self.next_id;
        self.next_id += 1;
        let origin = self.origins.entry(key.clone()).or_default();
        origin.h2 = Some(SharedH2 { id, sender: sender.clone(), in_flight: 1, idle: None });
        if let Some(slot) = dead_idle {
            self.unlink(slot);
        }
        Some(id)
    }

    /// One request fewer on `key`'s shared h2 connection `id`; idle from `now` when none is
    /// left, or let go of then when `max_per_host` is 0. With `discard` the connection is let
    /// go of at once. What is let go of is returned, to be dropped.
    fn finish_h2(&mut self, key: &Key, id: u64, discard: bool, max_per_host: usize, now: Instant) -> Option<C2> {
        let origin = self.origins.get_mut(key)?;
        let h2 = origin.h2.as_mut().filter(|h2| h2.id == id)?;
        h2.in_flight = h2.in_flight.saturating_sub(1);
        if discard || (h2.in_flight == 0 && max_per_host == 0) {
            let h2 = origin.h2.take()?;
            if let Some(slot) = h2.idle {
                self.unlink(slot);
            }
            self.prune(key);
            return Some(h2.sender);
        }
        if h2.in_flight > 0 || h2.idle.is_some() {
            return None;
        }
        let slot = self.insert(Node {
            key: key.clone(),
            conn: IdleConn::H2,
            since: now,
            older: None,
            newer: None,
            origin_older: None,
            origin_newer: None,
        });
        if let Some(h2) = self.origins.get_mut(key).and_then(|origin| origin.h2.as_mut()) {
            h2.idle = Some(slot);
        }
        None
    }

    /// When the least recently used idle connection went idle.
    fn oldest_since(&self) -> Option<Instant> {
        let slot = self.oldest?;
        self.nodes[slot].as_ref().map(|node| node.since)
    }

    /// Lets go of the least recently used idle connection.
    fn close_oldest(&mut self) -> Option<Closed<C1, C2>> {
        let slot = self.oldest?;
        let node = self.unlink(slot);
        match node.conn {
            IdleConn::H1(conn) => Some(Closed::H1(conn)),
            IdleConn::H2 => {
                let h2 = self.origins.get_mut(&node.key).and_then(|origin| origin.h2.take());
                self.prune(&node.key);
                h2.map(|h2| Closed::H2(h2.sender))
            }
        }
    }

    /// Puts `node` in a free slot, newest in the list across origins.
    fn insert(&mut self, mut node: Node<C1>) -> usize {
        node.older = self.newest;
        node.newer = None;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.nodes[slot] = Some(node);
                slot
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        match self.newest.replace(slot) {
            Some(previous) => self.node(previous).newer = Some(slot),
            None => self.oldest = Some(slot),
        }
        self.len += 1;
        slot
    }

    /// Takes the node at `slot` out of both lists and frees its slot; an origin left with
    /// nothing is removed, and an h2 mark clears its origin's `idle`.
    fn unlink(&mut self, slot: usize) -> Node<C1> {
        let node = self.nodes[slot].take().expect("a linked slot holds a node");
        self.free.push(slot);
        self.len -= 1;
        match node.older {
            Some(older) => self.node(older).newer = node.newer,
            None => self.oldest = node.newer,
        }
        match node.newer {
            Some(newer) => self.node(newer).older = node.older,
            None => self.newest = node.older,
        }
        if let IdleConn::H1(_) = node.conn {
            if let Some(older) = node.origin_older {
                self.node(older).origin_newer = node.origin_newer;
            }
            if let Some(newer) = node.origin_newer {
                self.node(newer).origin_older = node.origin_older;
            }
            if let Some(origin) = self.origins.get_mut(&node.key) {
                if node.origin_older.is_none() {
                    origin.oldest = node.origin_newer;
                }
                if node.origin_newer.is_none() {
                    origin.newest = node.origin_older;
                }
                origin.h1 -= 1;
            }
        } else if let Some(h2) = self.origins.get_mut(&node.key).and_then(|origin| origin.h2.as_mut()) {
            h2.idle = None;
        }
        self.prune(&node.key);
        node
    }

    /// Removes `key`'s entry when it holds nothing.
    fn prune(&mut self, key: &Key) {
        if self.origins.get(key).is_some_and(Origin::is_empty) {
            self.origins.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt as _;

    use super::*;

    /// A connection handle whose closing the test controls.
    #[derive(Clone, Debug)]
    struct Fake {
        name: &'static str,
        closed: Arc<AtomicBool>,
    }

    impl Fake {
        fn new(name: &'static str) -> Self {
            Fake { name, closed: Arc::new(AtomicBool::new(false)) }
        }

        fn close(&self) {
            self.closed.store(true, Ordering::SeqCst);
        }
    }

    impl Liveness for Fake {
        fn is_closed(&self) -> bool {
            self.closed.load(Ordering::SeqCst)
        }
    }

    fn key(authority: &'static str) -> Key {
        Key { scheme: Scheme::HTTP, authority: Authority::from_static(authority) }
    }

    fn name(found: Option<Found<Fake, Fake>>) -> Option<&'static str> {
        found.map(|found| match found {
            Found::H1(conn) | Found::H2 { sender: conn, .. } => conn.name,
        })
    }

    fn closed_name(closed: Option<Closed<Fake, Fake>>) -> Option<&'static str> {
        closed.map(|closed| match closed {
            Closed::H1(conn) | Closed::H2(conn) => conn.name,
        })
    }

    /// Every link agrees with the counts: both lists, walked both ways.
    fn check(idle: &Idle<Fake, Fake>) {
        let mut forward = Vec::new();
        let mut at = idle.oldest;
        while let Some(slot) = at {
            forward.push(slot);
            at = idle.nodes[slot].as_ref().expect("linked").newer;
        }
        let mut backward = Vec::new();
        let mut at = idle.newest;
        while let Some(slot) = at {
            backward.push(slot);
            at = idle.nodes[slot].as_ref().expect("linked").older;
        }
        backward.reverse();
        assert_eq!(forward, backward);
        assert_eq!(forward.len(), idle.len);
        let h1: usize = idle.origins.values().map(|origin| origin.h1).sum();
        let h2 = idle.origins.values().filter(|origin| origin.h2.as_ref().is_some_and(|h2| h2.idle.is_some())).count();
        assert_eq!(h1 + h2, idle.len);
        assert!(idle.origins.values().all(|origin| !origin.is_empty()), "no empty origin is kept");
    }

    #[test]
    fn the_newest_idle_connection_of_an_origin_is_reused_first() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        assert!(idle.put_h1(&key("a.test"), Fake::new("a1"), 4, now).is_none());
        assert!(idle.put_h1(&key("b.test"), Fake::new("b1"), 4, now).is_none());
        assert!(idle.put_h1(&key("a.test"), Fake::new("a2"), 4, now).is_none());
        check(&idle);
        assert_eq!(name(idle.take(&key("a.test"))), Some("a2"));
        assert_eq!(name(idle.take(&key("a.test"))), Some("a1"));
        assert_eq!(name(idle.take(&key("a.test"))), None);
        check(&idle);
        assert_eq!(idle.len(), 1);
    }

    #[test]
    fn an_origin_keeps_at_most_max_idle_per_host_and_loses_its_oldest() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        for conn in ["a1", "a2"] {
            assert!(idle.put_h1(&key("a.test"), Fake::new(conn), 2, now).is_none());
        }
        let evicted = idle.put_h1(&key("a.test"), Fake::new("a3"), 2, now);
        assert_eq!(evicted.map(|conn| conn.name), Some("a1"));
        check(&idle);
        assert_eq!(idle.len(), 2);
        assert_eq!(idle.put_h1(&key("b.test"), Fake::new("b1"), 0, now).map(|conn| conn.name), Some("b1"));
    }

    #[test]
    fn the_least_recently_used_across_origins_is_closed_first() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        idle.put_h1(&key("a.test"), Fake::new("a1"), 4, now);
        idle.put_h1(&key("b.test"), Fake::new("b1"), 4, now);
        idle.put_h1(&key("a.test"), Fake::new("a2"), 4, now);
        assert_eq!(closed_name(idle.close_oldest()), Some("a1"));
        check(&idle);
        assert_eq!(closed_name(idle.close_oldest()), Some("b1"));
        assert!(!idle.origins.contains_key(&key("b.test")), "an origin with nothing left is removed");
        assert_eq!(closed_name(idle.close_oldest()), Some("a2"));
        assert!(idle.close_oldest().is_none());
        assert!(idle.origins.is_empty());
        check(&idle);
    }

    #[test]
    fn closed_connections_are_never_handed_out() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        let (old, dead) = (Fake::new("old"), Fake::new("dead"));
        idle.put_h1(&key("a.test"), old, 4, now);
        idle.put_h1(&key("a.test"), dead.clone(), 4, now);
        dead.close();
        assert_eq!(name(idle.take(&key("a.test"))), Some("old"));
        check(&idle);
        let closing = Fake::new("closing");
        closing.close();
        assert_eq!(idle.put_h1(&key("a.test"), closing, 4, now).map(|conn| conn.name), Some("closing"));
        assert!(idle.is_empty());
    }

    #[test]
    fn a_shared_h2_connection_is_idle_only_with_nothing_in_flight() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        let h2 = Fake::new("h2");
        let id = idle.share_h2(&key("a.test"), &h2).expect("the origin's first h2 connection");
        assert!(idle.share_h2(&key("a.test"), &Fake::new("other")).is_none(), "one shared h2 per origin");
        assert!(matches!(idle.take(&key("a.test")), Some(Found::H2 { id: taken, .. }) if taken == id));
        assert!(idle.is_empty(), "two requests in flight");
        assert!(idle.finish_h2(&key("a.test"), id, false, 4, now).is_none());
        assert!(idle.is_empty(), "one request still in flight");
        assert!(idle.finish_h2(&key("a.test"), id, false, 4, now).is_none());
        assert_eq!(idle.len(), 1, "idle once nothing is in flight");
        check(&idle);
        assert!(matches!(idle.take(&key("a.test")), Some(Found::H2 { .. })));
        assert!(idle.is_empty(), "busy again");
        idle.finish_h2(&key("a.test"), id, false, 4, now);
        assert_eq!(closed_name(idle.close_oldest()), Some("h2"));
        assert!(idle.origins.is_empty());
        assert!(
            idle.finish_h2(&key("a.test"), id, false, 4, now).is_none(),
            "a lease of a closed connection is a no-op"
        );
        check(&idle);
    }

    #[test]
    fn a_closed_or_discarded_h2_connection_is_replaced() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        let first = Fake::new("first");
        let id = idle.share_h2(&key("a.test"), &first).expect("first");
        idle.finish_h2(&key("a.test"), id, false, 4, now);
        first.close();
        assert!(idle.take(&key("a.test")).is_none(), "a closed h2 connection is not handed out");
        check(&idle);
        let second = Fake::new("second");
        let id = idle.share_h2(&key("a.test"), &second).expect("replaces the closed one");
        assert_eq!(idle.finish_h2(&key("a.test"), id, true, 4, now).map(|conn| conn.name), Some("second"));
        assert!(idle.origins.is_empty());
        check(&idle);
        // With no idle connection allowed, the h2 connection goes once its last request ends.
        let third = Fake::new("third");
        let id = idle.share_h2(&key("a.test"), &third).expect("the origin has none");
        assert!(matches!(idle.take(&key("a.test")), Some(Found::H2 { .. })));
        assert!(idle.finish_h2(&key("a.test"), id, false, 0, now).is_none(), "one request still in flight");
        assert_eq!(idle.finish_h2(&key("a.test"), id, false, 0, now).map(|conn| conn.name), Some("third"));
        assert!(idle.is_empty() && idle.origins.is_empty());
    }

    #[test]
    fn the_oldest_idle_connection_says_when_it_is_due() {
        let mut idle = Idle::<Fake, Fake>::default();
        let early = Instant::now();
        let later = early + Duration::from_secs(1);
        idle.put_h1(&key("a.test"), Fake::new("a1"), 4, early);
        idle.put_h1(&key("a.test"), Fake::new("a2"), 4, later);
        assert_eq!(idle.oldest_since(), Some(early));
        idle.close_oldest();
        assert_eq!(idle.oldest_since(), Some(later));
    }

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
}
