//! The benchmark origin for `bench/run.sh`: serves `/bench/1k` (1 KiB) and `/bench/1m`
//! (1 MiB) and the four policy files of `bench/origin/policy/` over HTTP and HTTPS, on
//! loopback only, so every request agentgate forwards is really evaluated. `/bench/usage/1k`
//! is the same 1 KiB with the site's usage preferences (docs/usage.md) stated twice, as the
//! "everything on" configuration reads them: a `Content-Usage` line for `/bench/usage/` in
//! robots.txt and a [`CONTENT_USAGE`] response header, both allowing `ai-input`.
//!
//! Listeners (all on 127.0.0.0/8, never anything else):
//! - the main origin on 127.0.0.2: HTTP and HTTPS on free ports, and HTTPS on 443 when it
//!   can be bound, which is where agentgate fetches AGENTS.md for an `http://` origin;
//! - `--unseen N` origins for the first-request scenarios: 127.1.x.y, HTTP on one free port
//!   and HTTPS on 443 (when bindable), each its own origin to agentgate's policy cache. The
//!   first half are the HTTP scenario's (`DIR/unseen-urls.txt`), the second half the HTTPS
//!   one's (`DIR/unseen-https-urls.txt`, when 443 could be bound), so neither finds a
//!   connection or a policy the other left. Their connections keep alive, as real origins'
//!   do (agentgate's policy fetches take turns on one connection and its request reuses it),
//!   and each is closed gracefully [`UNSEEN_CONNECTION_LIFETIME`] after it opened: a client
//!   that pools its connections to every origin it has seen (agentgate keeps them
//!   `[upstream] idle_timeout`) would otherwise hold thousands open here and exhaust this
//!   process's open-file limit.
//!
//! It makes a CA at start with rcgen (written to `DIR/origin-ca.pem`, which run.sh gives
//! agentgate as `[upstream] extra_ca_files`) and a leaf certificate per listening address.
//! When all listeners are bound it writes `DIR/origin.env` (shell assignments) and
//! `DIR/unseen-urls.txt`. `GET /stats` answers how many robots.txt the unseen origins
//! served, that is how many distinct unseen origins agentgate really fetched.
//!
//! Never: listens beyond loopback, or reads anything from the network but HTTP requests.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

mod pki;

use pki::{BoxError, Pki};

/// `--net K` (0 unless given) moves every address: the main origin to 127.0.K.2 and the
/// unseen origins to 127.(1+K).x.y, so two origins (two benchmarks at once) never compete
/// for the same port 443.
static NET: AtomicU8 = AtomicU8::new(0);

fn main_ip() -> Ipv4Addr {
    Ipv4Addr::new(127, 0, NET.load(Ordering::Relaxed), 2)
}

/// How long an unseen origin keeps a connection: long enough for one first request (its
/// policy fetches and the request itself), short enough that a run's connections do not
/// pile up here. Closed gracefully: an answer in flight is finished first.
const UNSEEN_CONNECTION_LIFETIME: Duration = Duration::from_secs(2);

const ROBOTS: &str = include_str!("../policy/robots.txt");
/// The usage preferences `/bench/usage/1k` answers with (robots.txt states the same for
/// `/bench/usage/`): the bench's agents declare `ai-input` or nothing, so none is refused.
const CONTENT_USAGE: &str = "train-ai=n, ai-input=y";
const AGENTS_TXT: &str = include_str!("../policy/agents.txt");
const AGENTS_MD: &str = include_str!("../policy/AGENTS.md");
const AUTOCTL: &str = include_str!("../policy/automation-preferences.txt");

/// What the handlers share: the bodies (cloned by reference count) and the counters.
struct State {
    one_kib: Bytes,
    one_mib: Bytes,
    unseen_robots: AtomicU64,
}

#[derive(Clone, Copy)]
enum Kind {
    Main,
    Unseen,
}

struct Args {
    dir: PathBuf,
    unseen: u32,
    net: u8,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut dir = None;
    let mut unseen = 0;
    let mut net = 0;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--dir" => dir = args.next().map(PathBuf::from),
            "--unseen" => {
                let value = args.next().ok_or("--unseen needs a number")?;
                unseen = value.parse().map_err(|_| format!("--unseen {value}: not a number"))?;
                if unseen > 60_000 {
                    return Err(format!("--unseen {unseen}: at most 60000 (127.1.0.0/16)").into());
                }
            }
            "--net" => {
                let value = args.next().ok_or("--net needs a number")?;
                net = value.parse().ok().filter(|k| *k < 100).ok_or(format!("--net {value}: a number below 100"))?;
            }
            other => return Err(format!("unknown argument {other}; usage: --dir DIR [--unseen N] [--net K]").into()),
        }
    }
    Ok(Args { dir: dir.ok_or("--dir DIR is required")?, unseen, net })
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = parse_args()?;
    let (pki, ca_pem) = Pki::new("agentgate bench origin CA")?;
    let pki = Arc::new(pki);
    std::fs::write(args.dir.join("origin-ca.pem"), ca_pem)?;
    let state = Arc::new(State {
        one_kib: Bytes::from(vec![b'a'; 1024]),
        one_mib: Bytes::from(vec![b'b'; 1024 * 1024]),
        unseen_robots: AtomicU64::new(0),
    });

    NET.store(args.net, Ordering::Relaxed);
    let main_ip = IpAddr::V4(main_ip());
    let main_acceptor = tls_acceptor(&pki, main_ip)?;
    let http = TcpListener::bind((main_ip, 0)).await?;
    let https = TcpListener::bind((main_ip, 0)).await?;
    let http_port = http.local_addr()?.port();
    let https_port = https.local_addr()?.port();
    serve(http, None, Kind::Main, state.clone());
    serve(https, Some(main_acceptor.clone()), Kind::Main, state.clone());
    let port_443 = match TcpListener::bind((main_ip, 443)).await {
        Ok(listener) => {
            serve(listener, Some(main_acceptor), Kind::Main, state.clone());
            true
        }
        Err(error) => {
            eprintln!("origin: cannot bind {main_ip}:443 ({error}); AGENTS.md of http origins is unreachable");
            false
        }
    };

    let (unseen_port, unseen_https) = bind_unseen(&args, &pki, &state).await?;
    write_env(&args.dir, http_port, https_port, port_443, (unseen_port, unseen_https), args.unseen)?;
    eprintln!("origin: ready (http {http_port}, https {https_port}, 443 {port_443}, unseen {})", args.unseen);
    std::future::pending::<()>().await;
    Ok(())
}

/// The address of unseen origin `i`: 127.(1+K).x.y, skipping .0 and .255 in the last byte.
fn unseen_ip(i: u32) -> IpAddr {
    let n = i / 254 * 256 + i % 254 + 1;
    IpAddr::V4(Ipv4Addr::new(127, 1 + NET.load(Ordering::Relaxed), (n >> 8) as u8, (n & 0xff) as u8))
}

/// Binds the unseen origins: HTTP on one port shared by all their addresses (found by
/// binding the first on port 0) and HTTPS on 443 when this process may bind it (whether or
/// not another origin holds the main address's 443); each TLS certificate is made on the
/// address's first handshake. Returns the HTTP port and whether HTTPS is served.
async fn bind_unseen(args: &Args, pki: &Arc<Pki>, state: &Arc<State>) -> Result<(u16, bool), BoxError> {
    if args.unseen == 0 {
        return Ok((0, false));
    }
    let first = TcpListener::bind((unseen_ip(0), 0)).await?;
    let port = first.local_addr()?.port();
    serve(first, None, Kind::Unseen, state.clone());
    for i in 1..args.unseen {
        let listener = TcpListener::bind((unseen_ip(i), port))
            .await
            .map_err(|e| format!("bind {}:{port}: {e} (raise `ulimit -n`, or lower BENCH_UNSEEN)", unseen_ip(i)))?;
        serve(listener, None, Kind::Unseen, state.clone());
    }
    let Ok(first_443) = TcpListener::bind((unseen_ip(0), 443)).await else {
        eprintln!("origin: cannot bind port 443 (not root?): no unseen HTTPS origins");
        return Ok((port, false));
    };
    serve_lazy_tls(first_443, unseen_ip(0), pki.clone(), state.clone());
    for i in 1..args.unseen {
        let ip = unseen_ip(i);
        let listener = TcpListener::bind((ip, 443)).await.map_err(|e| format!("bind {ip}:443: {e}"))?;
        serve_lazy_tls(listener, ip, pki.clone(), state.clone());
    }
    Ok((port, true))
}

fn write_env(
    dir: &Path,
    http: u16,
    https: u16,
    port_443: bool,
    (unseen_port, unseen_https): (u16, bool),
    unseen: u32,
) -> Result<(), BoxError> {
    let half = unseen.div_ceil(2);
    let urls: String = (0..half).map(|i| format!("http://{}:{unseen_port}/bench/1k\n", unseen_ip(i))).collect();
    std::fs::write(dir.join("unseen-urls.txt"), urls)?;
    let https_urls: String = if unseen_https {
        (half..unseen).map(|i| format!("https://{}/bench/1k\n", unseen_ip(i))).collect()
    } else {
        String::new()
    };
    std::fs::write(dir.join("unseen-https-urls.txt"), https_urls)?;
    let env = format!(
        "ORIGIN_IP={}\nORIGIN_HTTP_PORT={http}\nORIGIN_HTTPS_PORT={https}\nORIGIN_443={}\nORIGIN_UNSEEN_PORT={unseen_port}\n",
        main_ip(),
        u8::from(port_443)
    );
    // Written last and renamed into place: run.sh waits for this file.
    let tmp = dir.join("origin.env.tmp");
    std::fs::write(&tmp, env)?;
    std::fs::rename(tmp, dir.join("origin.env"))?;
    Ok(())
}

/// A TLS acceptor whose certificate names `ip`.
fn tls_acceptor(pki: &Pki, ip: IpAddr) -> Result<TlsAcceptor, BoxError> {
    Ok(TlsAcceptor::from(pki.server_config(&ip.to_string(), &[])?))
}

fn serve(listener: TcpListener, tls: Option<TlsAcceptor>, kind: Kind, state: Arc<State>) {
    tokio::spawn(async move {
        loop {
            let Some(stream) = accept(&listener).await else { continue };
            tokio::spawn(connection(stream, tls.clone(), kind, state.clone()));
        }
    });
}

/// Like [`serve`] with TLS, the certificate made on the first handshake.
fn serve_lazy_tls(listener: TcpListener, ip: IpAddr, pki: Arc<Pki>, state: Arc<State>) {
    tokio::spawn(async move {
        let acceptor: OnceLock<TlsAcceptor> = OnceLock::new();
        loop {
            let Some(stream) = accept(&listener).await else { continue };
            let tls = match acceptor.get() {
                Some(tls) => tls.clone(),
                None => match tls_acceptor(&pki, ip) {
                    Ok(tls) => acceptor.get_or_init(|| tls).clone(),
                    Err(error) => {
                        eprintln!("origin: certificate for {ip}: {error}");
                        continue;
                    }
                },
            };
            tokio::spawn(connection(stream, Some(tls), Kind::Unseen, state.clone()));
        }
    });
}

/// The next connection; on an error (out of file descriptors, say) a short pause instead of
/// a loop that spins on the same error, then `None`.
async fn accept(listener: &TcpListener) -> Option<TcpStream> {
    match listener.accept().await {
        Ok((stream, _)) => Some(stream),
        Err(error) => {
            eprintln!("origin: accept failed: {error}");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            None
        }
    }
}

async fn connection(stream: TcpStream, tls: Option<TlsAcceptor>, kind: Kind, state: Arc<State>) {
    let _ = stream.set_nodelay(true);
    match tls {
        None => serve_http(TokioIo::new(stream), kind, state).await,
        Some(tls) => {
            let Ok(stream) = tls.accept(stream).await else { return };
            serve_http(TokioIo::new(stream), kind, state).await;
        }
    }
}

/// HTTP/1.1 on one connection, keep-alive; an unseen origin's connection is shut down
/// gracefully after [`UNSEEN_CONNECTION_LIFETIME`].
async fn serve_http<I>(io: I, kind: Kind, state: Arc<State>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(respond(&request, kind, &state)) }
    });
    let http = hyper::server::conn::http1::Builder::new();
    let conn = http.serve_connection(io, service);
    tokio::pin!(conn);
    // Errors are the client going away mid-response (oha's deadline): nothing to report.
    if let Kind::Unseen = kind {
        tokio::select! {
            _ = conn.as_mut() => return,
            () = tokio::time::sleep(UNSEEN_CONNECTION_LIFETIME) => conn.as_mut().graceful_shutdown(),
        }
    }
    let _ = conn.await;
}

fn respond(request: &Request<Incoming>, kind: Kind, state: &State) -> Response<Full<Bytes>> {
    let (body, content_type): (Bytes, &str) = match request.uri().path() {
        "/bench/1k" => (state.one_kib.clone(), "application/octet-stream"),
        "/bench/usage/1k" => {
            let mut response = Response::new(Full::new(state.one_kib.clone()));
            let headers = response.headers_mut();
            headers.insert(CONTENT_TYPE, hyper::header::HeaderValue::from_static("application/octet-stream"));
            headers.insert("content-usage", hyper::header::HeaderValue::from_static(CONTENT_USAGE));
            return response;
        }
        "/bench/1m" => (state.one_mib.clone(), "application/octet-stream"),
        "/robots.txt" => {
            if let Kind::Unseen = kind {
                state.unseen_robots.fetch_add(1, Ordering::Relaxed);
            }
            (Bytes::from_static(ROBOTS.as_bytes()), "text/plain")
        }
        "/agents.txt" => (Bytes::from_static(AGENTS_TXT.as_bytes()), "text/plain"),
        "/AGENTS.md" => (Bytes::from_static(AGENTS_MD.as_bytes()), "text/markdown"),
        "/automation-preferences.txt" => (Bytes::from_static(AUTOCTL.as_bytes()), "text/plain"),
        "/stats" => {
            let body = format!("{{\"unseen_robots\":{}}}\n", state.unseen_robots.load(Ordering::Relaxed));
            (Bytes::from(body), "application/json")
        }
        _ => {
            let mut response = Response::new(Full::new(Bytes::from_static(b"not found\n")));
            *response.status_mut() = StatusCode::NOT_FOUND;
            return response;
        }
    };
    let mut response = Response::new(Full::new(body));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, hyper::header::HeaderValue::from_static(content_type));
    headers.insert(CACHE_CONTROL, hyper::header::HeaderValue::from_static("max-age=86400"));
    response
}
