//! The floor: the least a forward proxy on agentgate's stack can cost per request, made of
//! the same pieces agentgate forwards with and nothing else (no policy, no log, no
//! tracing): hyper 1's HTTP/1 server and hyper-util's pooled legacy client on a
//! multi-thread tokio runtime. Two paths, like agentgate's:
//! - plain HTTP: absolute-form requests forwarded as they are;
//! - MITM: `CONNECT host:port` answered 200, the tunnel's TLS terminated with a leaf
//!   certificate for `host` minted by rcgen from the floor's own CA and cached per host (as
//!   agentgate does), and the requests inside forwarded over HTTPS (rustls, ring, verified
//!   against the origin's CA) through a pooled client.
//!
//! `bench/run.sh` runs it beside agentgate, so a table row can say how much of agentgate's
//! CPU per request is the stack's and how much is agentgate's own. Loopback only: it
//! listens on 127.0.0.1 and forwards only to 127.0.0.0/8.
//!
//! Usage: `agentgate-bench-floor --dir DIR` reads the origin's CA from `DIR/origin-ca.pem`,
//! writes its own to `DIR/floor-ca.pem`, prints `listening on 127.0.0.1:PORT` and serves
//! until killed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

#[path = "../pki.rs"]
mod pki;

use pki::{BoxError, Pki};

type Body = BoxBody<Bytes, hyper::Error>;

/// What every connection shares: the two pooled clients and the leaf certificates.
struct Floor {
    http: Client<HttpConnector, Incoming>,
    https: Client<Tls, Incoming>,
    pki: Pki,
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let dir = match (args.next().as_deref(), args.next()) {
        (Some("--dir"), Some(dir)) => PathBuf::from(dir),
        _ => return Err("usage: agentgate-bench-floor --dir DIR".into()),
    };
    let (pki, ca_pem) = Pki::new("agentgate bench floor CA")?;
    std::fs::write(dir.join("floor-ca.pem"), ca_pem)?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(dir.join("origin-ca.pem"))? {
        roots.add(cert?)?;
    }
    let tls = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let floor = Arc::new(Floor {
        http: Client::builder(TokioExecutor::new()).build(connector),
        https: Client::builder(TokioExecutor::new()).build(Tls(TlsConnector::from(Arc::new(tls)))),
        pki,
        leaves: Mutex::new(HashMap::new()),
    });

    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    println!("listening on {}", listener.local_addr()?);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let floor = floor.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| proxy(floor.clone(), request));
            // A connection's end (the client closed it) is not an error worth a line.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).with_upgrades().await;
        });
    }
}

/// One request on the proxy port: a CONNECT opens a MITM tunnel, anything else is forwarded
/// as plain HTTP.
async fn proxy(floor: Arc<Floor>, request: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    if request.method() != Method::CONNECT {
        if !loopback(request.uri()) {
            return Ok(answer(StatusCode::BAD_REQUEST, "absolute-form request to a 127.0.0.0/8 origin expected"));
        }
        return Ok(forward(&floor.http, request).await);
    }
    let Some(authority) = request.uri().authority().filter(|_| loopback(request.uri())).cloned() else {
        return Ok(answer(StatusCode::BAD_REQUEST, "CONNECT to a 127.0.0.0/8 origin expected"));
    };
    let config = match floor.leaf(authority.host()) {
        Ok(config) => config,
        Err(error) => return Ok(answer(StatusCode::INTERNAL_SERVER_ERROR, &error.to_string())),
    };
    tokio::spawn(async move {
        let Ok(upgraded) = hyper::upgrade::on(request).await else { return };
        let Ok(stream) = TlsAcceptor::from(config).accept(TokioIo::new(upgraded)).await else { return };
        let service = service_fn(move |mut request: Request<Incoming>| {
            let floor = floor.clone();
            let authority = authority.clone();
            async move {
                let mut parts = request.uri().clone().into_parts();
                parts.scheme = Some(http::uri::Scheme::HTTPS);
                parts.authority = Some(authority);
                match Uri::from_parts(parts) {
                    Ok(uri) => *request.uri_mut() = uri,
                    Err(error) => return Ok::<_, Infallible>(answer(StatusCode::BAD_REQUEST, &error.to_string())),
                }
                Ok(forward(&floor.https, request).await)
            }
        });
        let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
    });
    let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *response.status_mut() = StatusCode::OK;
    Ok(response)
}

impl Floor {
    /// The TLS configuration with a leaf for `host`, minted on the host's first tunnel.
    fn leaf(&self, host: &str) -> Result<Arc<ServerConfig>, BoxError> {
        let mut leaves = self.leaves.lock().map_err(|_| "leaf cache poisoned")?;
        if let Some(config) = leaves.get(host) {
            return Ok(config.clone());
        }
        let config = self.pki.server_config(host, &[b"http/1.1"])?;
        leaves.insert(host.to_owned(), config.clone());
        Ok(config)
    }
}

fn loopback(uri: &Uri) -> bool {
    uri.host().and_then(|host| host.parse::<IpAddr>().ok()).is_some_and(|ip| ip.is_loopback())
}

/// Sends `request` through `client`; a failure is a 502.
async fn forward<C>(client: &Client<C, Incoming>, request: Request<Incoming>) -> Response<Body>
where
    C: hyper_util::client::legacy::connect::Connect + Clone + Send + Sync + 'static,
{
    match client.request(request).await {
        Ok(response) => response.map(BodyExt::boxed),
        Err(error) => answer(StatusCode::BAD_GATEWAY, &error.to_string()),
    }
}

fn answer(status: StatusCode, text: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(format!("{text}\n"))).map_err(|never| match never {}).boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

/// The pooled client's HTTPS connector: TCP, then TLS verified against the origin's CA.
#[derive(Clone)]
struct Tls(TlsConnector);

impl tower_service::Service<Uri> for Tls {
    type Response = TokioIo<TlsConn>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = self.0.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("no host")?.to_owned();
            let port = uri.port_u16().unwrap_or(443);
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(host)?;
            Ok(TokioIo::new(TlsConn(connector.connect(name, tcp).await?)))
        })
    }
}

/// A TLS connection to the origin, as hyper-util's pool wants it.
struct TlsConn(TlsStream<TcpStream>);

impl Connection for TlsConn {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
