//! The peer: hudsucker (crates.io), a mature MITM proxy, forwarding everything unchanged. It
//! exists only to put a mature MITM proxy's figures beside agentgate's and the floor proxy's
//! in the same `bench/run.sh` run; no policy, no decision log, no tracing subscriber.
//!
//! What is hudsucker's: the proxy port (hyper-util's auto server), `CONNECT` and the tunnel's
//! TLS, the request handling and the pooled upstream client. What the peer supplies through
//! hudsucker's own extension points, because the bench's origins are IP addresses behind a
//! CA made at start:
//! - the leaf certificates (hudsucker's `CertificateAuthority` trait): minted by rcgen from
//!   the peer's own CA with the host as an IP SAN (the bench's `pki.rs`, as the floor does)
//!   and cached per host; hudsucker's `RcgenAuthority` names every host as a DNS name, which
//!   no client accepts for an IP address;
//! - the upstream connector (`with_http_connector`): hyper-rustls over HTTP or HTTPS, as
//!   hudsucker's `with_rustls_connector` builds it, but trusting the origin's CA instead of
//!   the webpki roots;
//! - an `HttpHandler` that answers 400 to anything not bound for 127.0.0.0/8 and forwards the
//!   rest as it is.
//!
//! Every TLS configuration is rustls with ring. Loopback only: it listens on 127.0.0.1.
//!
//! Usage: `agentgate-bench-peer --dir DIR` reads the origin's CA from `DIR/origin-ca.pem`,
//! writes its own to `DIR/peer-ca.pem`, prints `listening on 127.0.0.1:PORT` and serves
//! until killed.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use hudsucker::certificate_authority::CertificateAuthority;
use hudsucker::hyper::{Request, Response, StatusCode, Uri, http::uri::Authority};
use hudsucker::rustls::pki_types::CertificateDer;
use hudsucker::rustls::pki_types::pem::PemObject;
use hudsucker::rustls::{ClientConfig, RootCertStore, ServerConfig};
use hudsucker::{Body, HttpContext, HttpHandler, Proxy, RequestOrResponse};
use tokio::net::TcpListener;

#[path = "../../origin/src/pki.rs"]
mod pki;

use pki::{BoxError, Pki};

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let dir = match (args.next().as_deref(), args.next()) {
        (Some("--dir"), Some(dir)) => PathBuf::from(dir),
        _ => return Err("usage: agentgate-bench-peer --dir DIR".into()),
    };
    let (pki, ca_pem) = Pki::new("agentgate bench peer CA")?;
    std::fs::write(dir.join("peer-ca.pem"), ca_pem)?;
    let mut roots = RootCertStore::empty();
    let origin_ca = dir.join("origin-ca.pem");
    for cert in CertificateDer::pem_file_iter(&origin_ca).map_err(|e| format!("{}: {e}", origin_ca.display()))? {
        roots.add(cert?)?;
    }
    let tls = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector =
        hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
    let ca = Leaves::new(pki)?;

    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    println!("listening on {}", listener.local_addr()?);
    Proxy::builder()
        .with_listener(listener)
        .with_ca(ca)
        .with_http_connector(connector)
        .with_http_handler(Loopback)
        .build()?
        .start()
        .await?;
    Ok(())
}

/// The leaf certificates, one per host, minted on the host's first tunnel.
struct Leaves {
    pki: Pki,
    cache: Mutex<HashMap<String, Arc<ServerConfig>>>,
    /// Served when minting fails (hudsucker's trait has no error path): it names no bench
    /// origin, so the client's handshake fails cleanly instead of the proxy panicking.
    fallback: Arc<ServerConfig>,
}

impl Leaves {
    fn new(pki: Pki) -> Result<Self, BoxError> {
        let fallback = pki.server_config("invalid.invalid", ALPN)?;
        Ok(Leaves { pki, cache: Mutex::new(HashMap::new()), fallback })
    }

    fn leaf(&self, host: &str) -> Result<Arc<ServerConfig>, BoxError> {
        let mut cache = self.cache.lock().map_err(|_| "leaf cache poisoned")?;
        if let Some(config) = cache.get(host) {
            return Ok(config.clone());
        }
        let config = self.pki.server_config(host, ALPN)?;
        cache.insert(host.to_owned(), config.clone());
        Ok(config)
    }
}

/// What hudsucker's `RcgenAuthority` offers without its `http2` feature.
const ALPN: &[&[u8]] = &[b"http/1.1"];

impl CertificateAuthority for Leaves {
    async fn gen_server_config(&self, authority: &Authority) -> Arc<ServerConfig> {
        self.leaf(authority.host()).unwrap_or_else(|error| {
            eprintln!("agentgate-bench-peer: no leaf for {authority}: {error}");
            self.fallback.clone()
        })
    }
}

/// Forwards requests to 127.0.0.0/8 (and CONNECTs to it) unchanged; anything else gets a 400.
#[derive(Clone)]
struct Loopback;

impl HttpHandler for Loopback {
    async fn handle_request(&mut self, _ctx: &HttpContext, request: Request<Body>) -> RequestOrResponse {
        if loopback(request.uri()) {
            return request.into();
        }
        let mut response = Response::new(Body::from("a request to a 127.0.0.0/8 origin expected\n"));
        *response.status_mut() = StatusCode::BAD_REQUEST;
        response.into()
    }
}

fn loopback(uri: &Uri) -> bool {
    uri.host().and_then(|host| host.parse::<IpAddr>().ok()).is_some_and(|ip| ip.is_loopback())
}
