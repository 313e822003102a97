//! CONNECT (RFC 9110 §9.3.6): the agent's egress lists first (`Gate::check_egress`: a host
//! its `allow_hosts` does not list, or its `deny_hosts` lists, is a 403 before the `200` and
//! before any lookup, or is held for a human who may admit it), then the network guard and
//! `[connect] allowed_ports` (agentgate's own address, internal ranges and other ports are a
//! 403 before the `200`), then the host-level decision before the `200` (`decide_tunnel`),
//! then either a passthrough splice to the target, or interception: read the tunnel's first
//! bytes, terminate TLS with a leaf minted for the SNI name (or the CONNECT host), and serve
//! the inner HTTP/1.1 or h2 with the same request service as the proxy port. A tunnel whose
//! first byte is not a TLS handshake record is served as plain HTTP (WebSocket included).
//!
//! Never routes an inner request anywhere but the CONNECT target; never mints certificates
//! itself (the TLS module does).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use http::uri::{Authority, Scheme};
use http::{Request, Response, StatusCode, Uri};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::LazyConfigAcceptor;
use tracing::{Instrument, debug, field, info, info_span, warn};

use super::ProxyBody;
use super::block::{audit_unavailable, tunnel_established};
use super::context::{Entry, ProxyState};
use super::destination::{Ask, check_destination};
use super::drain::Drain;
use super::error::{ProxyError, TunnelError, shown_target};
use super::hold;
use super::listener::{ServerProtocols, serve_connection};
use super::local;
use super::relay::splice;
use super::rewind::Rewind;
use super::service::{ProxyService, answer_blocked, completed, record};
use super::sockets::Counted;
use crate::agents::Identity;
use crate::audit::OnFailure;
use crate::config::Config;
use crate::error_chain::error_chain;
use crate::fetch::Origin;
use crate::gate::{Admitted, Gate, GateRequest, Permitted, Verdict};
use crate::net::{canonical_host, canonical_pattern, is_host_pattern};
use crate::policy::operator::host_matches;
use crate::setting::nonzero_caps;

/// `[mitm]`: which CONNECT tunnels are intercepted, and the leaf certificate cache.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MitmConfig {
    /// Hosts whose tunnels are spliced through without interception: `example.com` (that host
    /// only) or `*.example.com` (its subdomains, not the apex). Default none.
    pub passthrough_hosts: Vec<String>,
    /// How many per-host leaf certificates are kept (default 10000).
    pub cert_cache_size: u64,
}

impl Default for MitmConfig {
    fn default() -> Self {
        Self { passthrough_hosts: Vec::new(), cert_cache_size: 10_000 }
    }
}

impl MitmConfig {
    /// Whether the CONNECT tunnel to `host` is spliced through without interception.
    ///
    /// Matches case-insensitively, ignoring a trailing dot and IPv6 brackets: `example.com`
    /// matches that host only, `*.example.com` matches `a.example.com` and `a.b.example.com`
    /// but not `example.com` itself.
    /// Both sides are compared in canonical form (`crate::net::host`), so `0x7f.1` matches
    /// a `127.0.0.1` entry and `bücher.example` its A-label.
    pub fn is_passthrough(&self, host: &str) -> bool {
        let host = canonical_host(host).unwrap_or_else(|_| host.to_ascii_lowercase());
        self.passthrough_hosts.iter().any(|p| host_matches(&canonical_pattern(p), &host))
    }

    /// Problems in `[mitm]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        let default = Self::default().cert_cache_size;
        nonzero_caps(problems, &[("[mitm] cert_cache_size", self.cert_cache_size, default)]);
        for pattern in &self.passthrough_hosts {
            if !is_host_pattern(pattern) {
                problems.push(format!(
                    "[mitm] passthrough_hosts entry {pattern:?}: not a host name or `*.suffix`; write e.g. \"bank.example\" or \"*.bank.example\" (no scheme, port or path)"
                ));
            }
        }
    }
}

/// The first byte of a TLS record carrying a handshake message (RFC 8446 §5.1).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What happens to a tunnel once the `200` is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Tunnel {
    /// Terminate TLS with a minted certificate and see every request.
    Mitm,
    /// Splice bytes to the target untouched (`[mitm] passthrough_hosts`).
    Passthrough,
}

/// How a CONNECT is served, chosen before anything is answered: passthrough for
/// `[mitm] passthrough_hosts` (then decided by the gate at host level, `decide_passthrough`),
/// interception otherwise (every inner request decided by the gate).
pub(crate) fn decide_tunnel(config: &Config, authority: &Authority) -> Tunnel {
    if config.mitm.is_passthrough(authority.host()) { Tunnel::Passthrough } else { Tunnel::Mitm }
}

/// Phase `handle_connect`: checks the target (form, destination, port), decides, and
/// answers `200`; the tunnel itself runs in its own task once hyper hands over the connection.
///
/// # Errors
/// [`ProxyError::BadConnectTarget`] for a target that is not `host:port`;
/// [`ProxyError::UpstreamResolve`] when its host does not resolve; for passthrough,
/// the `Upstream*` variants when the target cannot be reached (answered before the `200`).
pub(crate) async fn handle_connect(
    state: &Arc<ProxyState>,
    client: SocketAddr,
    drain: Drain,
    mut request: Request<Incoming>,
) -> Result<Response<ProxyBody>, ProxyError> {
    let authority = connect_target(request.uri())?;
    tracing::Span::current().record("authority", field::display(&authority));
    let origin = Origin::from_parts(&Scheme::HTTPS, &authority)
        .map_err(|_| ProxyError::BadConnectTarget { target: authority.to_string() })?;
    // The log names the canonical host (`crate::net::host`).
    let url = format!("https://{}:{}/", origin.host(), origin.port());
    // The identity established here holds for every request inside the tunnel; an unknown
    // agent gets its 407 before any 200, and before any lookup of the target. The head is
    // kept apart: the upgrade below needs the request itself.
    let headers = request.headers().clone();
    // One config generation for the CONNECT and its decision, whatever a reload swaps in
    // meanwhile; requests inside an intercepted tunnel each take the one in force then.
    let live = state.generation();
    let agent = match live.gate.identify_agent(client, "CONNECT", &url, &headers) {
        Ok(agent) => agent,
        Err(blocked) => return Ok(answer_blocked(state, *blocked, &headers, Instant::now()).await),
    };
    let connect = GateRequest {
        client,
        agent: &agent,
        origin: &origin,
        url: &url,
        method: "CONNECT",
        path_and_query: "/",
        headers: &headers,
        addresses: &[],
        entry: Entry::Connect,
        admitted: None,
    };
    // agentgate.local is answered inside the tunnel by agentgate itself (`local.rs`): never
    // looked up, vetted or passed through.
    let is_local = local::is_local(authority.host());
    // The agent's egress lists, before the target is looked up: a refusal is the CONNECT's
    // 403; a human admitting the host admits the whole tunnel.
    let started = Instant::now();
    let admitted = match live.gate.check_egress(&connect) {
        Err(blocked) if !is_local => {
            match hold::admit_host(state, &live, *blocked, connect, started, drain.clone()).await {
                Ok(admitted) => Some(admitted),
                Err(blocked) => return Ok(answer_blocked(state, blocked, &headers, started).await),
            }
        }
        _ => None,
    };
    let connect = GateRequest { admitted: admitted.as_ref(), ..connect };
    // Held until the passthrough tunnel is open: it dials these addresses.
    let vetted = if is_local {
        None
    } else {
        match check_destination(state, &live, started, connect, Ask::Connect).await? {
            Ok(vetted) => Some(vetted),
            Err(blocked) => return Ok(blocked),
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let tunnel = if is_local { Tunnel::Mitm } else { decide_tunnel(&live.config, &authority) };
    let span = info_span!("tunnel", client = %client, authority = %authority, mode = ?tunnel);
    match tunnel {
        Tunnel::Passthrough => {
            let addresses = vetted.as_ref().map_or(&[][..], |vetted| vetted.addresses());
            let passthrough = GateRequest { method: "GET", addresses, ..connect };
            let permit = match decide_passthrough(state, &live.gate, passthrough).await {
                Ok(permit) => permit,
                Err(blocked) => return Ok(blocked),
            };
            let origin = match open_passthrough(state, permit, &authority).await {
                Ok(opened) => opened?,
                Err(AuditUnavailable) => return Ok(audit_unavailable()),
            };
            let open = state.metrics.tunnel_opened();
            let until_stopped = drain.clone();
            let tunnel = async move {
                let _open = open;
                match on_upgrade.await {
                    Ok(upgraded) => splice(TokioIo::new(upgraded), origin, drain, "passthrough tunnel").await,
                    Err(error) => debug!(error = %error_chain(&error), "client left before the tunnel opened"),
                }
            };
            tokio::spawn(until_stopped.until_stopped(tunnel).instrument(span));
        }
        Tunnel::Mitm => {
            if admitted.as_ref().is_some_and(Admitted::is_held_request) {
                // The approved CONNECT is recorded once, with its approval; each request
                // inside the tunnel gets its own record.
                record(state, live.gate.approved_tunnel(&connect), started, Ok(StatusCode::OK)).await;
            }
            let admitted = admitted.and_then(Admitted::for_tunnel).map(Arc::new);
            let state = Arc::clone(state);
            let open = state.metrics.tunnel_opened();
            // Until the grace period ends: the client's first byte and TLS handshake have
            // timeouts of their own, longer than a shutdown may take.
            let until_stopped = drain.clone();
            let tunnel = async move {
                let _open = open;
                match intercept(state, client, (agent, admitted), authority, on_upgrade, drain).await {
                    Ok(()) => {}
                    Err(error @ TunnelError::ClientHungUp { .. }) => debug!(error = %error, "tunnel closed"),
                    Err(error) => warn!(error = %error, "tunnel failed"),
                }
            };
            tokio::spawn(until_stopped.until_stopped(tunnel).instrument(span));
        }
    }
    Ok(tunnel_established())
}

/// The decision log could not take a passthrough's record under `[audit] on_failure =
/// "block"`, so the tunnel was not opened.
pub(crate) struct AuditUnavailable;

/// Opens a permitted passthrough tunnel's connection to `dial` (through the network guard)
/// and records the decision with the outcome of that dial. The audit promise: under
/// `on_failure = "block"` no byte is spliced before the record is on disk.
///
/// # Errors
/// [`AuditUnavailable`] when the record could not be committed (the connection is dropped);
/// otherwise the dial's own result, recorded either way.
pub(crate) async fn open_passthrough(
    state: &ProxyState,
    permit: Permitted,
    dial: &Authority,
) -> Result<Result<Counted<TcpStream>, ProxyError>, AuditUnavailable> {
    let started = Instant::now();
    let opened = state.upstream.open_tunnel(dial).await;
    let decided = completed(permit.into_record(), started, opened.as_ref().map(|_| StatusCode::OK));
    state.metrics.record(&decided);
    if opened.is_ok() && state.audit.on_failure() == OnFailure::Block {
        if let Err(unrecorded) = state.audit.commit(&decided).await {
            warn!(error = %unrecorded.cause, "decision log unavailable; refusing to open the tunnel unaudited");
            return Err(AuditUnavailable);
        }
    } else if let Err(unrecorded) = state.audit.record(&decided).await {
        warn!(error = %unrecorded.cause, event_id = %decided.id, "decision record not written");
    }
    Ok(opened)
}

/// The host-level decision for a passthrough tunnel: the gate decides on `GET /`
/// over https, since nothing inside the tunnel will be seen; the record says `CONNECT`.
/// A block is answered (and recorded) here, before any `200`.
pub(crate) async fn decide_passthrough(
    state: &ProxyState,
    gate: &Gate,
    request: GateRequest<'_>,
) -> Result<Permitted, Response<ProxyBody>> {
    let started = Instant::now();
    match gate.decide(request).await {
        Verdict::Forward(mut permit) => {
            permit.mark_passthrough();
            Ok(permit)
        }
        Verdict::Block(mut blocked) => {
            blocked.mark_passthrough();
            Err(answer_blocked(state, blocked, request.headers, started).await)
        }
    }
}

/// The CONNECT target as `host:port`: authority-form only, a port required.
fn connect_target(uri: &Uri) -> Result<Authority, ProxyError> {
    let bad = || ProxyError::BadConnectTarget { target: shown_target(uri) };
    let authority = uri.authority().ok_or_else(bad)?;
    let authority_form = uri.scheme().is_none() && uri.path_and_query().is_none();
    let has_user_info = authority.as_str().contains('@');
    if !authority_form || has_user_info || authority.host().is_empty() || authority.port_u16().is_none() {
        return Err(bad());
    }
    Ok(authority.clone())
}

/// An intercepted tunnel, from the upgrade to the end of the inner connection. The client
/// sends its first bytes within `[connections] first_byte_timeout` after the `200` and
/// finishes the TLS handshake within `tls_handshake_timeout`: a tunnel to a
/// server-speaks-first protocol waits that long and then closes (such hosts belong in
/// `[mitm] passthrough_hosts`).
async fn intercept(
    state: Arc<ProxyState>,
    client: SocketAddr,
    agent: (Identity, Option<Arc<Admitted>>),
    authority: Authority,
    on_upgrade: OnUpgrade,
    drain: Drain,
) -> Result<(), TunnelError> {
    let handshake_failed = |cause: String| TunnelError::ClientHandshake { authority: authority.to_string(), cause };
    let upgraded = on_upgrade.await.map_err(|error| handshake_failed(error_chain(&error)))?;
    let mut io = TokioIo::new(upgraded);
    let mut first = BytesMut::with_capacity(4096);
    let settings = &state.config.connections;
    let first_byte_timeout = settings.first_byte_timeout;
    let read = tokio::time::timeout(first_byte_timeout, io.read_buf(&mut first)).await;
    match read {
        Ok(Ok(0)) => return Ok(()),
        Ok(Ok(_)) => {}
        Ok(Err(error)) => return Err(handshake_failed(error_chain(&error))),
        Err(_elapsed) => return Err(handshake_failed(format!("the client sent nothing for {first_byte_timeout:?}"))),
    }
    let is_tls = starts_tls(&first);
    let io = Rewind::new(first.freeze(), io);
    if !is_tls {
        debug!("no TLS ClientHello: serving the tunnel as plain HTTP");
        let settings = state.config.connections.clone();
        let (agent, admitted) = agent;
        let tunnel = (authority, Entry::PlainTunnel);
        let service = ProxyService::for_tunnel(state, client, tunnel, agent, admitted, drain.clone());
        serve_connection(io, service, ServerProtocols::Http1, drain, &settings).await;
        return Ok(());
    }
    serve_intercepted(state, client, agent, authority, io, Entry::Mitm, drain).await
}

/// Whether `first`, the first bytes of a connection, start a TLS handshake record.
pub(crate) fn starts_tls(first: &[u8]) -> bool {
    first.first() == Some(&TLS_HANDSHAKE_RECORD)
}

/// Terminates the client's TLS on `io` (whose first bytes are a ClientHello) with a leaf
/// minted for its SNI name (or `authority`'s host when it sent none), within
/// `[connections] tls_handshake_timeout`, then serves the inner HTTP/1.1 or h2: every
/// request routed to `authority` and decided as `agent`'s (with a human's admission of the
/// host, when there is one). A CONNECT tunnel and a transparent TLS connection
/// (`transparent.rs`) are served here alike.
///
/// # Errors
/// [`TunnelError`] when the handshake fails or a leaf cannot be minted.
pub(crate) async fn serve_intercepted<I>(
    state: Arc<ProxyState>,
    client: SocketAddr,
    agent: (Identity, Option<Arc<Admitted>>),
    authority: Authority,
    io: I,
    entry: Entry,
    drain: Drain,
) -> Result<(), TunnelError>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let handshake_failed = |cause: String| TunnelError::ClientHandshake { authority: authority.to_string(), cause };
    let tls_failed = |error: std::io::Error| handshake_error(&authority, &error);
    let handshake_timeout = state.config.connections.tls_handshake_timeout;
    let accept = async {
        let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await.map_err(tls_failed)?;
        let sni = start.client_hello().server_name().map(str::to_owned);
        if let Some(sni) = &sni
            && !sni.eq_ignore_ascii_case(authority.host())
        {
            info!(sni = %sni, "SNI differs from the CONNECT host; routing to the CONNECT host");
        }
        // IP targets come without SNI: mint for the CONNECT host (an IP SAN).
        let name = sni.unwrap_or_else(|| authority.host().to_owned());
        let config = state
            .certs
            .server_config(&name)
            .await
            .map_err(|source| TunnelError::LeafCertificate { host: name.clone(), source })?;
        start.into_stream(config).await.map_err(tls_failed)
    };
    let tls = match tokio::time::timeout(handshake_timeout, accept).await {
        Ok(result) => result?,
        Err(_elapsed) => {
            return Err(handshake_failed(format!("the TLS handshake did not finish in {handshake_timeout:?}")));
        }
    };
    let protocols =
        if tls.get_ref().1.alpn_protocol() == Some(b"h2") { ServerProtocols::Http2 } else { ServerProtocols::Http1 };
    let settings = state.config.connections.clone();
    let (agent, admitted) = agent;
    let service = ProxyService::for_tunnel(state, client, (authority, entry), agent, admitted, drain.clone());
    serve_connection(tls, service, protocols, drain, &settings).await;
    Ok(())
}

/// Names a failed client handshake truthfully: a certificate alert from the client means it
/// does not trust the CA; an EOF or reset without one is a hang-up, which says nothing about
/// trust (issue 12: the old message sent operators installing a CA that was already trusted).
fn handshake_error(authority: &Authority, error: &std::io::Error) -> TunnelError {
    use rustls::AlertDescription as Alert;
    let authority = authority.to_string();
    let cause = error_chain(error);
    let alert = error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
    if let Some(rustls::Error::AlertReceived(
        alert @ (Alert::UnknownCA
        | Alert::BadCertificate
        | Alert::CertificateUnknown
        | Alert::UnsupportedCertificate
        | Alert::CertificateExpired
        | Alert::AccessDenied),
    )) = alert
    {
        return TunnelError::ClientRejectedCertificate { authority, cause: format!("alert {alert:?}") };
    }
    let hung_up = matches!(
        error.kind(),
        std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
    );
    if hung_up {
        TunnelError::ClientHungUp { authority, cause }
    } else {
        TunnelError::ClientHandshake { authority, cause }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errors rustls and tokio-rustls really produce, through the same acceptor calls
    /// `intercept` makes: a client that trusts no root rejects the minted certificate with an
    /// alert; a client that sends half a ClientHello and closes has hung up.
    #[tokio::test]
    async fn issue_12_real_handshake_failures_are_told_apart() {
        use tokio::io::AsyncWriteExt;

        crate::tls::install_default_provider();
        let dir = tempfile::tempdir().expect("a temp dir");
        let ca = crate::tls::CertificateAuthority::create(dir.path(), false).expect("a CA");
        let certs = crate::tls::LeafCertCache::new(Arc::new(ca), 4);
        let authority: Authority = "example.com:443".parse().expect("an authority");
        let accept = |io: tokio::io::DuplexStream| {
            let certs = &certs;
            async move {
                let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await?;
                let config = certs.server_config("example.com").await.expect("a leaf is minted");
                start.into_stream(config).await.map(drop)
            }
        };

        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let client_config = rustls::ClientConfig::builder_with_provider(crate::tls::crypto_provider())
            .with_safe_default_protocol_versions()
            .expect("the provider supports the default versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
        let name = rustls::pki_types::ServerName::try_from("example.com").expect("a DNS name");
        let client = tokio::spawn(async move { connector.connect(name, client_io).await.map(drop) });
        let error = accept(server_io).await.expect_err("the client rejects the certificate");
        assert!(client.await.expect("the client task ends").is_err());
        let classified = handshake_error(&authority, &error);
        assert!(matches!(classified, TunnelError::ClientRejectedCertificate { .. }), "{error:?} -> {classified:?}");

        let (mut client_io, server_io) = tokio::io::duplex(64 * 1024);
        // A TLS handshake record header announcing 80 bytes, then 3 of them, then EOF.
        client_io.write_all(&[0x16, 0x03, 0x01, 0x00, 0x50, 0x01, 0x00, 0x00]).await.expect("written");
        drop(client_io);
        let error = accept(server_io).await.expect_err("the client went away");
        let classified = handshake_error(&authority, &error);
        assert!(matches!(classified, TunnelError::ClientHungUp { .. }), "{error:?} -> {classified:?}");
    }

    #[test]
    fn issue_12_a_hang_up_is_not_advice_to_install_the_ca() {
        let authority: Authority = "example.com:443".parse().expect("an authority");
        let alert = |a| std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::AlertReceived(a));
        let rejected = handshake_error(&authority, &alert(rustls::AlertDescription::UnknownCA));
        assert!(matches!(rejected, TunnelError::ClientRejectedCertificate { .. }), "{rejected:?}");
        assert!(rejected.to_string().contains("install agentgate's CA in the client"), "{rejected}");
        assert!(rejected.to_string().contains("UnknownCA"), "{rejected}");

        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
        let hung_up = handshake_error(&authority, &eof);
        assert!(matches!(hung_up, TunnelError::ClientHungUp { .. }), "{hung_up:?}");
        assert!(!hung_up.to_string().contains("CA"), "{hung_up}");
        let reset = handshake_error(&authority, &std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(reset, TunnelError::ClientHungUp { .. }), "{reset:?}");

        let other = handshake_error(&authority, &alert(rustls::AlertDescription::ProtocolVersion));
        assert!(matches!(other, TunnelError::ClientHandshake { .. }), "{other:?}");
        assert!(!other.to_string().contains("install"), "{other}");
    }

    fn target(text: &str) -> Result<String, String> {
        let uri: Uri = text.parse().map_err(|_| "unparsable".to_owned())?;
        connect_target(&uri).map(|a| a.to_string()).map_err(|e| e.to_string())
    }

    #[test]
    fn rfc9110_9_3_6_connect_target_is_host_and_port() {
        assert_eq!(target("example.com:443"), Ok("example.com:443".to_owned()));
        assert_eq!(target("[::1]:8443"), Ok("[::1]:8443".to_owned()));
        assert!(target("example.com").is_err_and(|e| e.contains("add the port")));
        assert!(target("/index.html").is_err());
        assert!(target("http://example.com:80/").is_err());
        assert!(target("user@example.com:443").is_err());
    }
}
