//! The benchmark origin for `bench/run.sh`: serves `/bench/1k` (1 KiB) and `/bench/1m`
//! (1 MiB) and the four policy files of `bench/origin/policy/` over HTTP and HTTPS, on
//! loopback only, so every request agentgate forwards is really evaluated.
//!
//! Listeners (all on 127.0.0.0/8, never anything else):
//! - the main origin on 127.0.0.2: HTTP and HTTPS on free ports, and HTTPS on 443 when it
//!   can be bound, which is where agentgate fetches AGENTS.md for an `http://` origin;
//! - `--unseen N` origins for the first-request scenario: 127.1.x.y, HTTP on one free port
//!   and HTTPS on 443 (when bindable), each its own origin to agentgate's policy cache.
//!   They close every connection after one answer: a client that pools its connections
//!   to every origin it has seen (agentgate keeps them `[upstream] idle_timeout`) would
//!   otherwise hold thousands open here and exhaust this process's open-file limit.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

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

const MAIN_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

const ROBOTS: &str = include_str!("../policy/robots.txt");
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
}

fn parse_args() -> Result<Args, BoxError> {
    let mut dir = None;
    let mut unseen = 0;
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
            other => return Err(format!("unknown argument {other}; usage: --dir DIR [--unseen N]").into()),
        }
    }
    Ok(Args { dir: dir.ok_or("--dir DIR is required")?, unseen })
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

    let main_ip = IpAddr::V4(MAIN_IP);
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

    let unseen_port = bind_unseen(&args, port_443, &pki, &state).await?;
    write_env(&args.dir, http_port, https_port, port_443, unseen_port, args.unseen)?;
    eprintln!("origin: ready (http {http_port}, https {https_port}, 443 {port_443}, unseen {})", args.unseen);
    std::future::pending::<()>().await;
    Ok(())
}

/// The address of unseen origin `i`: 127.1.x.y, skipping .0 and .255 in the last byte.
fn unseen_ip(i: u32) -> IpAddr {
    let n = i / 254 * 256 + i % 254 + 1;
    IpAddr::V4(Ipv4Addr::new(127, 1, (n >> 8) as u8, (n & 0xff) as u8))
}

/// Binds the unseen origins: HTTP on one port shared by all their addresses (found by
/// binding the first on port 0) and HTTPS on 443; each TLS certificate is made on the
/// address's first handshake. Returns the HTTP port.
async fn bind_unseen(args: &Args, port_443: bool, pki: &Arc<Pki>, state: &Arc<State>) -> Result<u16, BoxError> {
    if args.unseen == 0 {
        return Ok(0);
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
    if port_443 {
        for i in 0..args.unseen {
            let ip = unseen_ip(i);
            let listener = TcpListener::bind((ip, 443)).await.map_err(|e| format!("bind {ip}:443: {e}"))?;
            serve_lazy_tls(listener, ip, pki.clone(), state.clone());
        }
    }
    Ok(port)
}

fn write_env(dir: &Path, http: u16, https: u16, port_443: bool, unseen_port: u16, unseen: u32) -> Result<(), BoxError> {
    let urls: String = (0..unseen).map(|i| format!("http://{}:{unseen_port}/bench/1k\n", unseen_ip(i))).collect();
    std::fs::write(dir.join("unseen-urls.txt"), urls)?;
    let env = format!(
        "ORIGIN_IP={MAIN_IP}\nORIGIN_HTTP_PORT={http}\nORIGIN_HTTPS_PORT={https}\nORIGIN_443={}\nORIGIN_UNSEEN_PORT={unseen_port}\n",
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
    let service = service_fn(move |request| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(respond(&request, kind, &state)) }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(!matches!(kind, Kind::Unseen));
    // Errors are the client going away mid-response (oha's deadline): nothing to report.
    match tls {
        None => {
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
        Some(tls) => {
            let Ok(stream) = tls.accept(stream).await else { return };
            let _ = http.serve_connection(TokioIo::new(stream), service).await;
        }
    }
}

fn respond(request: &Request<Incoming>, kind: Kind, state: &State) -> Response<Full<Bytes>> {
    let (body, content_type): (Bytes, &str) = match request.uri().path() {
        "/bench/1k" => (state.one_kib.clone(), "application/octet-stream"),
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
