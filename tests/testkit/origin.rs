//! A real local origin: a hyper server (HTTP/1.1 and h2, auto-detected) on `127.0.0.1:0`,
//! over plain TCP or TLS with a certificate from a test CA. It counts the TCP connections it
//! accepts (and those that ended, and on request the most its clients held open at once), keeps how each TLS handshake went (full or resumed), and
//! reports, in response headers, what it saw of each request.
//!
//! Routes: `/echo` (method, version, `Host`, `Via`, hop-by-hop fields seen; the body streamed
//! back), `/hello` (a fixed body with a length, for HEAD), `/bytes/<n>` (n pattern bytes made
//! on the fly), `/sink` (checks an uploaded pattern body), `/status/204`, `/etag` (304 on a
//! matching `If-None-Match`), `/ws` (WebSocket echo), `/hold` (answers only once released),
//! `/trickle` (one chunk, then the rest once released), `/trickle-upload` (signals after the
//! first uploaded chunk), `/seen` (what a signature verifier reads: authority, method, path
//! and every header, as JSON).
//!
//! Every origin serves the files a test sets with [`Origin::serve`] (chosen status, headers
//! and body per path, held until [`Origin::release_all`] or endless if asked; a `304` with no
//! body when the request's `If-None-Match` names the file's `ETag` or its `If-Modified-Since`
//! is the file's `Last-Modified`, counting those conditional requests and the 304s), counts the
//! requests for every path and keeps each request's `User-Agent`, so a test can tell how
//! often and as whom each policy file was fetched. An origin started with a [`Site`] starts
//! with the site's files, answers `/hold-all` (every request waits until
//! [`Origin::release_all`]), and answers any other unknown path with a `200` page that lists
//! the request headers it saw.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::{HandshakeKind, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::TestResult;
use super::pattern::{PatternBody, PatternCheck};
use super::pki::TestCa;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type OriginBody = UnsyncBoxBody<Bytes, BoxError>;

/// Request fields that must never reach an origin through the proxy (hop-by-hop,
/// RFC 9110 §7.6.1). `Transfer-Encoding` is left out: the proxy may frame a body as chunked;
/// so is `TE`, which may arrive as `trailers` (reported in `x-te`).
const HOP_BY_HOP: [&str; 6] =
    ["connection", "keep-alive", "proxy-connection", "proxy-authorization", "trailer", "x-named-in-connection"];

/// One file an origin serves: status, extra headers, body.
#[derive(Clone, Debug)]
pub struct Served {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// Wait like `/hold-all` before answering (proves requests overlap; never released, a
    /// request that is never answered).
    pub held: bool,
    /// Send pattern bytes forever instead of `body`.
    pub endless: bool,
}

impl Served {
    /// `200` with `body` and no extra headers.
    pub fn ok(body: impl Into<Vec<u8>>) -> Self {
        Served { status: 200, headers: Vec::new(), body: body.into(), held: false, endless: false }
    }

    /// `status` with an empty body.
    pub fn status(status: u16) -> Self {
        Served { status, ..Served::ok("") }
    }

    /// `status` redirecting to `location`.
    pub fn redirect(status: u16, location: impl Into<String>) -> Self {
        Served::status(status).with("location", location)
    }

    /// With the header `name: value` added.
    pub fn with(mut self, name: &str, value: impl Into<String>) -> Self {
        self.headers.push((name.to_owned(), value.into()));
        self
    }

    /// With `Cache-Control: max-age=<seconds>`.
    pub fn max_age(self, seconds: u64) -> Self {
        self.with("cache-control", format!("max-age={seconds}"))
    }

    /// Held until [`Origin::release_all`].
    pub fn held(self) -> Self {
        Served { held: true, ..self }
    }

    /// The value of header `name` (case-insensitive), when served.
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }

    /// True when a conditional request with these validators is answered `304`: the
    /// `If-None-Match` list names this file's `ETag` (weak comparison, RFC 9110 §13.1.2), or,
    /// without `If-None-Match`, `If-Modified-Since` is this file's `Last-Modified` exactly.
    fn matches(&self, if_none_match: Option<&[u8]>, if_modified_since: Option<&[u8]>) -> bool {
        let weak = |tag: &str| tag.trim().trim_start_matches("W/").to_owned();
        match (if_none_match, self.header("etag")) {
            (Some(list), Some(etag)) => {
                String::from_utf8_lossy(list).split(',').any(|tag| tag.trim() == "*" || weak(tag) == weak(etag))
            }
            (Some(_), None) => false,
            (None, _) => if_modified_since.zip(self.header("last-modified")).is_some_and(|(a, b)| a == b.as_bytes()),
        }
    }

    /// A body that never ends.
    pub fn endless(self) -> Self {
        Served { endless: true, ..self }
    }
}

/// What an origin serves besides its fixed routes: files at chosen paths (policy files,
/// mostly), and a `200` page for every other unknown path.
#[derive(Clone, Debug, Default)]
pub struct Site {
    files: HashMap<String, Served>,
}

/// The policy files the proxy fetches, as [`Origin::policy_fetches`] counts them.
pub const POLICY_PATHS: [&str; 5] =
    ["/robots.txt", "/agents.txt", "/AGENTS.md", "/.well-known/agents.md", "/automation-preferences.txt"];

impl Site {
    /// A site with no files: every policy file is a 404.
    pub fn new() -> Self {
        Site::default()
    }

    /// Serves `body` at `path` with 200 and `Content-Type: text/plain`.
    pub fn file(self, path: &str, body: impl Into<Vec<u8>>) -> Self {
        self.serve(path, 200, &[("content-type", "text/plain; charset=utf-8")], body)
    }

    /// Serves `body` at `path` with `status` and `headers`.
    pub fn serve(mut self, path: &str, status: u16, headers: &[(&str, &str)], body: impl Into<Vec<u8>>) -> Self {
        let served = headers.iter().fold(Served { status, ..Served::ok(body) }, |served, (n, v)| served.with(n, *v));
        self.files.insert(path.to_owned(), served);
        self
    }
}

struct OriginState {
    connections: AtomicUsize,
    /// Whether each accept counts the client sockets held open to the origin's port.
    watch_held: std::sync::atomic::AtomicBool,
    /// The most client sockets held open at once, at an accept, once watched.
    peak_held: AtomicUsize,
    /// Connections that have ended, and a signal on every end.
    closed: AtomicUsize,
    closed_changed: Notify,
    /// How each TLS handshake that completed went, in completion order.
    handshakes: Mutex<Vec<HandshakeKind>>,
    arrived: Notify,
    release: Notify,
    /// Whether the origin was started with a site (`/hold-all`, pages for unknown paths).
    site: bool,
    /// The files served, by path.
    files: Mutex<HashMap<String, Served>>,
    /// Requests per path (query left out).
    hits: Mutex<HashMap<String, usize>>,
    /// Requests for a served file carrying `If-None-Match` or `If-Modified-Since`, per path.
    conditional: Mutex<HashMap<String, usize>>,
    /// `304 Not Modified` answers (no body) per path.
    not_modified: Mutex<HashMap<String, usize>>,
    /// The `User-Agent` of every request, in arrival order (empty when absent).
    user_agents: Mutex<Vec<String>>,
    /// `/hold-all` requests waiting, and a signal on every arrival.
    held: AtomicUsize,
    held_changed: Notify,
    /// Closed by `release_all`: every `/hold-all` request then goes on.
    hold_gate: Semaphore,
}

impl OriginState {
    fn new(site: Option<Site>) -> Self {
        OriginState {
            connections: AtomicUsize::new(0),
            watch_held: std::sync::atomic::AtomicBool::new(false),
            peak_held: AtomicUsize::new(0),
            closed: AtomicUsize::new(0),
            closed_changed: Notify::new(),
            handshakes: Mutex::default(),
            arrived: Notify::new(),
            release: Notify::new(),
            site: site.is_some(),
            files: Mutex::new(site.map(|site| site.files).unwrap_or_default()),
            hits: Mutex::default(),
            conditional: Mutex::default(),
            not_modified: Mutex::default(),
            user_agents: Mutex::default(),
            held: AtomicUsize::new(0),
            held_changed: Notify::new(),
            hold_gate: Semaphore::new(0),
        }
    }
}

/// A running origin; stops accepting when dropped.
pub struct Origin {
    /// Where it listens.
    pub addr: SocketAddr,
    tls: bool,
    state: Arc<OriginState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Origin {
    /// An origin over plain HTTP (HTTP/1.1; h2 only with prior knowledge).
    pub async fn http() -> TestResult<Origin> {
        Origin::start(None).await
    }

    /// An origin over TLS with a certificate signed by `ca` (ALPN h2 and http/1.1).
    pub async fn https(ca: &TestCa) -> TestResult<Origin> {
        Origin::start(Some(TlsAcceptor::from(ca.origin_server_config()?))).await
    }

    /// An origin over plain HTTP serving `site`.
    pub async fn http_site(site: Site) -> TestResult<Origin> {
        Origin::start_site(None, Some(site)).await
    }

    /// An origin over TLS (certificate from `ca`) serving `site`.
    pub async fn https_site(ca: &TestCa, site: Site) -> TestResult<Origin> {
        Origin::start_site(Some(TlsAcceptor::from(ca.origin_server_config()?)), Some(site)).await
    }

    /// An origin serving `site` on `listener`, bound by the caller (in another network
    /// namespace, say), over TLS with `tls` when given.
    pub fn on_listener(
        listener: std::net::TcpListener,
        tls: Option<Arc<ServerConfig>>,
        site: Site,
    ) -> TestResult<Origin> {
        listener.set_nonblocking(true)?;
        let listener = TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(OriginState::new(Some(site)));
        let tls = tls.map(TlsAcceptor::from);
        let task = tokio::spawn(accept_loop(listener, tls.clone(), Arc::clone(&state)));
        Ok(Origin { addr, tls: tls.is_some(), state, task })
    }

    async fn start(tls: Option<TlsAcceptor>) -> TestResult<Origin> {
        Origin::start_site(tls, None).await
    }

    async fn start_site(tls: Option<TlsAcceptor>, site: Option<Site>) -> TestResult<Origin> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = Arc::new(OriginState::new(site));
        let task = tokio::spawn(accept_loop(listener, tls.clone(), Arc::clone(&state)));
        Ok(Origin { addr, tls: tls.is_some(), state, task })
    }

    /// `http://127.0.0.1:<port><path>` or `https://localhost:<port><path>` (a name, so the
    /// client sends SNI).
    pub fn url(&self, path: &str) -> String {
        let port = self.addr.port();
        if self.tls { format!("https://localhost:{port}{path}") } else { format!("http://127.0.0.1:{port}{path}") }
    }

    /// `http(s)://127.0.0.1:<port><path>`: an IP target, for which TLS clients send no SNI.
    pub fn ip_url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}{path}", self.addr.port())
    }

    /// `host:port` as a CONNECT target or `Host` value.
    pub fn authority(&self) -> String {
        let port = self.addr.port();
        if self.tls { format!("localhost:{port}") } else { format!("127.0.0.1:{port}") }
    }

    /// How many TCP connections the origin has accepted.
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// How many TCP connections are open now (accepted and not yet ended).
    pub fn open(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst) - self.state.closed.load(Ordering::SeqCst)
    }

    /// From now on, every accept counts the client-side sockets connected to this origin's
    /// port that a process still holds, in the kernel's table (`/proc/net/tcp`, Linux): a
    /// socket its client closed loses its inode there at once, before this origin has read
    /// the close, so the count is exactly what clients hold open.
    pub fn watch_held(&self) {
        self.state.watch_held.store(true, Ordering::SeqCst);
    }

    /// The most client sockets held open at once at an accept since
    /// [`watch_held`](Self::watch_held).
    pub fn peak_held(&self) -> usize {
        self.state.peak_held.load(Ordering::SeqCst)
    }

    /// How each completed TLS handshake went (full or resumed), in completion order.
    pub fn handshakes(&self) -> Vec<HandshakeKind> {
        self.state.handshakes.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Waits until `/hold`, `/trickle` or `/trickle-upload` reached its waiting point.
    pub async fn arrived(&self) {
        self.state.arrived.notified().await;
    }

    /// Lets a waiting `/hold` or `/trickle` go on.
    pub fn release(&self) {
        self.state.release.notify_one();
    }

    /// Serves `served` at `path` from now on, in place of what was there.
    pub fn serve(&self, path: &str, served: Served) -> &Self {
        self.state.files.lock().unwrap_or_else(PoisonError::into_inner).insert(path.to_owned(), served);
        self
    }

    /// The `User-Agent` of every request so far, in arrival order.
    pub fn user_agents(&self) -> Vec<String> {
        self.state.user_agents.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many requests arrived, for every path together.
    pub fn requests(&self) -> usize {
        self.state.hits.lock().unwrap_or_else(PoisonError::into_inner).values().sum()
    }

    /// Stops accepting: the listener closes, so a connection attempt is refused; the counts
    /// stay readable.
    pub fn stop(&self) {
        self.task.abort();
    }

    /// How many requests for `path` (query left out) arrived, whatever their method.
    pub fn hits(&self, path: &str) -> usize {
        self.state.hits.lock().unwrap_or_else(PoisonError::into_inner).get(path).copied().unwrap_or(0)
    }

    /// How many requests for the served file at `path` were conditional (`If-None-Match` or
    /// `If-Modified-Since`).
    pub fn conditional(&self, path: &str) -> usize {
        self.state.conditional.lock().unwrap_or_else(PoisonError::into_inner).get(path).copied().unwrap_or(0)
    }

    /// How many `304 Not Modified` answers (no body) the served file at `path` got.
    pub fn not_modified(&self, path: &str) -> usize {
        self.state.not_modified.lock().unwrap_or_else(PoisonError::into_inner).get(path).copied().unwrap_or(0)
    }

    /// Requests for each policy file, in [`POLICY_PATHS`] order.
    pub fn policy_fetches(&self) -> Vec<(&'static str, usize)> {
        POLICY_PATHS.iter().map(|path| (*path, self.hits(path))).collect()
    }

    /// Waits until `n` requests for `/hold-all` or a held file are waiting.
    pub async fn held(&self, n: usize) {
        reach(&self.state.held, &self.state.held_changed, n).await;
    }

    /// Waits until `n` connections to the origin have ended.
    pub async fn closed(&self, n: usize) {
        reach(&self.state.closed, &self.state.closed_changed, n).await;
    }

    /// Lets every `/hold-all` request and held file, waiting or still to come, go on.
    pub fn release_all(&self) {
        self.state.hold_gate.close();
    }
}

/// IPv4 TCP sockets connected to `addr` (the clients' side) that a process still holds
/// (inode not 0), from `/proc/net/tcp`; 0 where it cannot be read. The whole address is
/// matched, not the port alone: another process's origin on another loopback address may
/// have the same port number.
fn held_open_to(addr: SocketAddr) -> usize {
    let Ok(table) = std::fs::read_to_string("/proc/net/tcp") else { return 0 };
    let std::net::IpAddr::V4(ip) = addr.ip() else { return 0 };
    // The kernel writes the address as the hex of its 32 bits in host (little-endian) order.
    let remote = format!("{:08X}:{:04X}", u32::from_le_bytes(ip.octets()), addr.port());
    table
        .lines()
        .skip(1)
        .filter(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() > 9 && fields[2] == remote && fields[9] != "0"
        })
        .count()
}

/// Waits until `count`, which signals `changed` on every change, is at least `n`.
async fn reach(count: &AtomicUsize, changed: &Notify, n: usize) {
    loop {
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if count.load(Ordering::SeqCst) >= n {
            return;
        }
        notified.await;
    }
}

async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, state: Arc<OriginState>) {
    while let Ok((tcp, _)) = listener.accept().await {
        state.connections.fetch_add(1, Ordering::SeqCst);
        if state.watch_held.load(Ordering::SeqCst)
            && let Ok(addr) = listener.local_addr()
        {
            state.peak_held.fetch_max(held_open_to(addr), Ordering::SeqCst);
        }
        let (tls, state) = (tls.clone(), Arc::clone(&state));
        tokio::spawn(async move {
            match tls {
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(tcp).await {
                        if let Some(kind) = stream.get_ref().1.handshake_kind() {
                            state.handshakes.lock().unwrap_or_else(PoisonError::into_inner).push(kind);
                        }
                        serve(stream, Arc::clone(&state)).await;
                    }
                }
                None => serve(tcp, Arc::clone(&state)).await,
            }
            state.closed.fetch_add(1, Ordering::SeqCst);
            state.closed_changed.notify_waiters();
        });
    }
}

async fn serve<I: AsyncRead + AsyncWrite + Unpin + Send + 'static>(io: I, state: Arc<OriginState>) {
    let service = service_fn(move |request| route(Arc::clone(&state), request));
    let builder = auto::Builder::new(TokioExecutor::new());
    let _ = builder.serve_connection_with_upgrades(TokioIo::new(io), service).await;
}

fn full(text: impl Into<Bytes>) -> OriginBody {
    Full::new(text.into()).map_err(|never| match never {}).boxed_unsync()
}

fn respond(status: StatusCode, body: OriginBody) -> Response<OriginBody> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

async fn route(state: Arc<OriginState>, request: Request<Incoming>) -> Result<Response<OriginBody>, Infallible> {
    let path = request.uri().path().to_owned();
    *state.hits.lock().unwrap_or_else(PoisonError::into_inner).entry(path.clone()).or_default() += 1;
    let user_agent = request.headers().get(http::header::USER_AGENT).map(|v| String::from_utf8_lossy(v.as_bytes()));
    state.user_agents.lock().unwrap_or_else(PoisonError::into_inner).push(user_agent.unwrap_or_default().into_owned());
    let served = state.files.lock().unwrap_or_else(PoisonError::into_inner).get(&path).cloned();
    if let Some(served) = served {
        if served.held {
            hold(&state).await;
        }
        let header = |name| request.headers().get(name).map(|v: &HeaderValue| v.as_bytes().to_vec());
        let (if_none_match, if_modified_since) =
            (header(http::header::IF_NONE_MATCH), header(http::header::IF_MODIFIED_SINCE));
        if if_none_match.is_some() || if_modified_since.is_some() {
            *state.conditional.lock().unwrap_or_else(PoisonError::into_inner).entry(path.clone()).or_default() += 1;
            if served.matches(if_none_match.as_deref(), if_modified_since.as_deref()) {
                *state.not_modified.lock().unwrap_or_else(PoisonError::into_inner).entry(path).or_default() += 1;
                return Ok(serve_file(&Served { status: 304, body: Vec::new(), ..served }));
            }
        }
        return Ok(serve_file(&served));
    }
    if state.site && path == "/hold-all" {
        hold(&state).await;
        return Ok(respond(StatusCode::OK, full("released")));
    }
    let mut response = match path.as_str() {
        "/echo" => echo(request),
        "/reflect" => reflect(&request),
        "/hello" => hello(&request),
        "/sink" => sink(request).await,
        "/status/204" => respond(StatusCode::NO_CONTENT, Empty::new().map_err(|never| match never {}).boxed_unsync()),
        "/etag" => etag(&request),
        "/ws" => websocket(request),
        "/h2c" => h2c(&request),
        "/hold" => {
            state.arrived.notify_one();
            state.release.notified().await;
            respond(StatusCode::OK, full("released"))
        }
        "/trickle" => trickle(state),
        "/trickle-upload" => trickle_upload(state, request).await,
        "/seen" => seen(&request),
        other => match other.strip_prefix("/bytes/").and_then(|n| n.parse::<u64>().ok()) {
            Some(len) => respond(StatusCode::OK, PatternBody::new(len).map_err(|never| match never {}).boxed_unsync()),
            None if state.site => page(&request),
            None => respond(StatusCode::NOT_FOUND, full("no such route")),
        },
    };
    response.headers_mut().insert("x-origin", HeaderValue::from_static("test-origin"));
    Ok(response)
}

/// Counts a held request, then waits until `release_all`.
async fn hold(state: &OriginState) {
    state.held.fetch_add(1, Ordering::SeqCst);
    state.held_changed.notify_waiters();
    // Closed by `release_all`; the error is the signal to go on.
    let _ = state.hold_gate.acquire().await;
}

/// A served file, as configured.
fn serve_file(served: &Served) -> Response<OriginBody> {
    let body = if served.endless {
        PatternBody::new(u64::MAX).map_err(|never| match never {}).boxed_unsync()
    } else {
        full(served.body.clone())
    };
    let mut response = respond(StatusCode::from_u16(served.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), body);
    for (name, value) in &served.headers {
        if let (Ok(name), Ok(value)) =
            (http::HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str()))
        {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// Any other page of a site: `page <METHOD> <path>`, then one `name: value` line per request
/// header the origin saw (names lower case).
fn page(request: &Request<Incoming>) -> Response<OriginBody> {
    let mut text = format!("page {} {}\n", request.method(), request.uri().path());
    for (name, value) in request.headers() {
        text.push_str(&format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())));
    }
    respond(StatusCode::OK, full(text))
}

/// `/seen`: the request as a verifier of an HTTP message signature reads it, as JSON:
/// `authority` (h2's `:authority`, else `Host`), `method`, `path` (no query) and `headers`
/// (`[name, value]` pairs, names lower case, repeats kept).
fn seen(request: &Request<Incoming>) -> Response<OriginBody> {
    let authority = request
        .uri()
        .authority()
        .map(ToString::to_string)
        .or_else(|| {
            request.headers().get(http::header::HOST).map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        })
        .unwrap_or_default();
    let headers: Vec<[String; 2]> = request
        .headers()
        .iter()
        .map(|(name, value)| [name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()])
        .collect();
    let body = serde_json::json!({
        "authority": authority,
        "method": request.method().as_str(),
        "path": request.uri().path(),
        "headers": headers,
    });
    respond(StatusCode::OK, full(body.to_string()))
}

/// An origin that switches to h2c whenever it is asked (RFC 7540 §3.2): `101` when the
/// request carries `Upgrade`, else `page`'s list of the headers it saw.
fn h2c(request: &Request<Incoming>) -> Response<OriginBody> {
    if !request.headers().contains_key(http::header::UPGRADE) {
        return page(request);
    }
    let mut response = respond(StatusCode::SWITCHING_PROTOCOLS, full(""));
    response.headers_mut().insert(http::header::UPGRADE, HeaderValue::from_static("h2c"));
    response.headers_mut().insert(http::header::CONNECTION, HeaderValue::from_static("upgrade"));
    response
}

/// Reflects the request as an echo endpoint does (httpbin's `/anything`): its query and
/// headers in the body, its `Authorization` in a header, and the SHA-256 of both (so a test
/// can tell what arrived without the value in the answer). With `x-reflect-gzip: 1` the body
/// is gzip'd whatever the request accepts.
fn reflect(request: &Request<Incoming>) -> Response<OriginBody> {
    use sha2::Digest;
    let query = request.uri().query().unwrap_or("").to_owned();
    let authorization = header_text(request.headers(), http::header::AUTHORIZATION);
    let mut text = format!("query: {query}\n");
    for (name, value) in request.headers() {
        text.push_str(&format!("{name}: {}\n", String::from_utf8_lossy(value.as_bytes())));
    }
    let gzip = request.headers().get("x-reflect-gzip").is_some_and(|v| v == "1");
    // `x-reflect-codings: identity, gzip` applies each coding in turn, each named on a
    // `Content-Encoding` line of its own; `x-reflect-transfer: gzip` then sends the body as
    // `Transfer-Encoding: gzip, chunked` (hyper adds `chunked`).
    let codings: Vec<String> =
        header_text(request.headers(), http::header::HeaderName::from_static("x-reflect-codings"))
            .split(',')
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect();
    let transfer = header_text(request.headers(), http::header::HeaderName::from_static("x-reflect-transfer"));
    let mut body = if gzip { encode("gzip", text.as_bytes()) } else { text.into_bytes() };
    for coding in codings.iter().chain(std::iter::once(&transfer).filter(|t| !t.is_empty())) {
        body = encode(coding, &body);
    }
    let mut response = respond(StatusCode::OK, full(body));
    let headers = response.headers_mut();
    let pairs = [
        ("x-authorization", authorization.clone()),
        ("x-authorization-sha256", hex::encode(sha2::Sha256::digest(authorization.as_bytes()))),
        ("x-query-sha256", hex::encode(sha2::Sha256::digest(query.as_bytes()))),
    ];
    for (name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    if gzip {
        headers.insert(http::header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    for coding in &codings {
        if let Ok(value) = HeaderValue::from_str(coding) {
            headers.append(http::header::CONTENT_ENCODING, value);
        }
    }
    if let Ok(value) = HeaderValue::from_str(&transfer)
        && !transfer.is_empty()
    {
        headers.insert(http::header::TRANSFER_ENCODING, value);
    }
    response
}

/// `bytes` in `coding`: `gzip`, `deflate` (zlib) or, for any other name (`identity`, `br`),
/// as they are.
fn encode(coding: &str, bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let compression = flate2::Compression::default();
    match coding {
        "gzip" => {
            let mut encoder = flate2::write::GzEncoder::new(Vec::new(), compression);
            let _ = encoder.write_all(bytes);
            encoder.finish().unwrap_or_default()
        }
        "deflate" => {
            let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), compression);
            let _ = encoder.write_all(bytes);
            encoder.finish().unwrap_or_default()
        }
        _ => bytes.to_vec(),
    }
}

/// Reports what arrived in response headers and streams the body back.
fn echo(request: Request<Incoming>) -> Response<OriginBody> {
    let (parts, body) = request.into_parts();
    let host = parts
        .headers
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()))
        .unwrap_or_default();
    let hop: Vec<&str> = HOP_BY_HOP.iter().copied().filter(|name| parts.headers.contains_key(*name)).collect();
    let mut response = respond(StatusCode::OK, body.map_err(BoxError::from).boxed_unsync());
    let headers = response.headers_mut();
    let pairs = [
        ("x-method", parts.method.to_string()),
        ("x-version", format!("{:?}", parts.version)),
        ("x-host", host),
        ("x-via", header_text(&parts.headers, http::header::VIA)),
        ("x-hop-by-hop", hop.join(",")),
        ("x-te", header_text(&parts.headers, http::header::TE)),
    ];
    for (name, value) in pairs {
        if let Ok(value) = HeaderValue::from_str(&value) {
            headers.insert(name, value);
        }
    }
    response
}

/// `hello` with its length; for HEAD the length alone (hyper's h2 server would otherwise send
/// the body on a HEAD response).
fn hello(request: &Request<Incoming>) -> Response<OriginBody> {
    let body = if request.method() == http::Method::HEAD { "" } else { "hello" };
    let mut response = respond(StatusCode::OK, full(body));
    response.headers_mut().insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("5"));
    response
}

/// Every value of `name`, joined with `, `.
fn header_text(headers: &http::HeaderMap, name: http::header::HeaderName) -> String {
    let values: Vec<&str> = headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
    values.join(", ")
}

async fn sink(request: Request<Incoming>) -> Response<OriginBody> {
    let mut body = request.into_body();
    let mut check = PatternCheck::new();
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    check.feed(data);
                }
            }
            Err(error) => return respond(StatusCode::BAD_REQUEST, full(format!("body failed: {error}"))),
        }
    }
    respond(StatusCode::OK, full(format!("received {} bytes, intact={}", check.len, check.intact)))
}

fn etag(request: &Request<Incoming>) -> Response<OriginBody> {
    let matches = request.headers().get(http::header::IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == b"\"v1\"");
    let mut response =
        if matches { respond(StatusCode::NOT_MODIFIED, full("")) } else { respond(StatusCode::OK, full("versioned")) };
    response.headers_mut().insert(http::header::ETAG, HeaderValue::from_static("\"v1\""));
    response
}

fn websocket(mut request: Request<Incoming>) -> Response<OriginBody> {
    let Some(key) = request.headers().get("sec-websocket-key").map(|k| derive_accept_key(k.as_bytes())) else {
        return respond(StatusCode::BAD_REQUEST, full("not a websocket handshake"));
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else { return };
        let mut ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        while let Some(Ok(message)) = ws.next().await {
            if message.is_close() || ((message.is_text() || message.is_binary()) && ws.send(message).await.is_err()) {
                break;
            }
        }
    });
    let mut response = respond(StatusCode::SWITCHING_PROTOCOLS, full(""));
    let headers = response.headers_mut();
    headers.insert(http::header::UPGRADE, HeaderValue::from_static("websocket"));
    headers.insert(http::header::CONNECTION, HeaderValue::from_static("upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&key) {
        headers.insert("sec-websocket-accept", accept);
    }
    response
}

/// Sends `first;`, then waits for `release` before sending `rest` and ending the body.
fn trickle(state: Arc<OriginState>) -> Response<OriginBody> {
    let chunks = futures_util::stream::unfold(0u8, move |step| {
        let state = Arc::clone(&state);
        async move {
            match step {
                0 => Some((Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"first;"))), 1)),
                1 => {
                    state.arrived.notify_one();
                    state.release.notified().await;
                    Some((Ok(Frame::data(Bytes::from_static(b"rest"))), 2))
                }
                _ => None,
            }
        }
    });
    respond(StatusCode::OK, StreamBody::new(chunks).boxed_unsync())
}

/// Reads the first chunk of the upload, signals `arrived`, then reads the rest.
async fn trickle_upload(state: Arc<OriginState>, request: Request<Incoming>) -> Response<OriginBody> {
    let mut body = request.into_body();
    let mut received = Vec::new();
    let mut signalled = false;
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { return respond(StatusCode::BAD_REQUEST, full("body failed")) };
        if let Some(data) = frame.data_ref() {
            received.extend_from_slice(data);
            if !signalled {
                state.arrived.notify_one();
                signalled = true;
            }
        }
    }
    respond(StatusCode::OK, full(received))
}
