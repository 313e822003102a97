//! Transparent mode (`[transparent] listen`): connections the kernel redirected to agentgate
//! (nftables/iptables `REDIRECT`), from agents that ignore proxy variables. Each connection's
//! original destination is read (`original_dst`), then it is served by the same code as a
//! CONNECT tunnel to that destination:
//! - TLS (a ClientHello in the first bytes, whatever the port): its SNI is read without
//!   terminating anything, held to the agent's egress lists (before it is looked up), checked
//!   to name the original destination, then a passthrough
//!   host (`[mitm] passthrough_hosts`) gets the CONNECT's host-level decision and is
//!   spliced to the original destination untouched; any other is intercepted exactly like a
//!   MITM'd CONNECT to `SNI:original-port` (`connect::serve_intercepted`);
//! - anything else is plain HTTP, served like the inside of a plain tunnel, each request
//!   routed to the site its `Host` names once that is checked to be the original
//!   destination (`check_host`, called by the request service).
//!
//! A connection whose original destination is agentgate itself (not redirected, or
//! redirected to one of its own ports) is refused and closed, never dialled: no loop.
//! The agent is the client address's (`[[agents]] clients`): there is no
//! `Proxy-Authorization` on a redirected connection.
//!
//! Never: parses TLS by hand (rustls reads the ClientHello), dials a name the client did not
//! connect to, decides policy (the gate does). See `docs/transparent.md`.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use http::header::HOST;
use http::uri::{Authority, Scheme};
use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tracing::{Instrument, debug, debug_span, info, warn};

use super::ProxyBody;
use super::admission::Admission;
use super::block::error_response;
use super::connect::{AuditUnavailable, decide_passthrough, open_passthrough, serve_intercepted, starts_tls};
use super::context::{Entry, ProxyState, RequestContext};
use super::drain::Drain;
use super::error::ProxyError;
use super::hold;
use super::listener::{ServerProtocols, serve_connection};
use super::original_dst::original_destination;
use super::relay::splice;
use super::rewind::Rewind;
use super::service::{ProxyService, answer_blocked, record};
use crate::agents::Identity;
use crate::error_chain::error_chain;
use crate::fetch::Origin;
use crate::gate::{Admitted, Blocked, GateRequest};
use crate::net::{GuardError, Refusal, canonical_host};
use crate::setting::socket_addrs;

/// `[transparent]`: listeners for connections the kernel redirects to agentgate.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TransparentConfig {
    /// Addresses to accept redirected connections on, e.g. `["0.0.0.0:8443"]`; TLS or plain
    /// HTTP is told by the first bytes, not the port. Default none: transparent mode off.
    #[serde(deserialize_with = "socket_addrs")]
    pub listen: Vec<SocketAddr>,
}

impl TransparentConfig {
    /// Problems in `[transparent]`, each naming the key, its value and the fix (a listen
    /// address colliding with `listen` or `[admin] listen` is checked in `crate::config`).
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        if !self.listen.is_empty() && !cfg!(target_os = "linux") {
            problems.push(format!(
                "[transparent] listen = {:?}: transparent mode needs Linux (the kernel's SO_ORIGINAL_DST); remove the key, or set HTTPS_PROXY in the agents instead",
                self.listen
            ));
        }
        for (i, addr) in self.listen.iter().enumerate() {
            if self.listen[..i].contains(addr) && addr.port() != 0 {
                problems.push(format!("[transparent] listen entry \"{addr}\": listed twice; keep one"));
            }
        }
    }
}

/// The most a ClientHello may take before the SNI is read (TLS records are at most 16 KiB
/// each; a post-quantum key share makes a ClientHello a few KiB).
const MAX_CLIENT_HELLO: usize = 64 * 1024;

/// Accepts redirected connections on `listener` until shutdown starts; each one is admitted
/// under the `[connections]` caps shared with the proxy port, then served in its own task.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    state: Arc<ProxyState>,
    admission: Arc<Admission>,
    drain: Drain,
) {
    let mut stopping = drain.clone();
    loop {
        let (tcp, client) = tokio::select! {
            () = stopping.draining() => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    debug!(%error, "cannot accept a redirected connection");
                    // Out of file descriptors, say: do not spin while it lasts.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(admitted) = admission.admit(client.ip()) else { continue };
        let (state, connection_drain) = (Arc::clone(&state), drain.clone());
        let span = debug_span!("transparent", client = %client);
        let connection = async move {
            serve(state, tcp, client, connection_drain).await;
            drop(admitted);
        };
        tokio::spawn(drain.clone().until_stopped(connection).instrument(span));
    }
}

/// One redirected connection: its original destination, its agent, then TLS or plain HTTP.
async fn serve(state: Arc<ProxyState>, tcp: TcpStream, client: SocketAddr, drain: Drain) {
    let started = Instant::now();
    let original = match original_destination(&tcp) {
        Ok(original) => original,
        Err(error) => {
            warn!(%client, error = %error, "transparent connection refused: no original destination (it was not redirected to agentgate by the kernel); closed");
            return;
        }
    };
    let live = state.generation();
    let url = format!("https://{original}/");
    let agent = match live.gate.identify_agent(client, "CONNECT", &url, &HeaderMap::new()) {
        Ok(agent) => agent,
        Err(blocked) => {
            warn!(%client, %original, "transparent connection refused: the client address is no known agent and [auth] requires one; closed");
            return refused_connection(&state, *blocked, started).await;
        }
    };
    let own = tcp.local_addr().is_ok_and(|local| local == original) || state.guard.policy().is_own(original);
    if own {
        warn!(%client, %original, "transparent connection refused: its original destination is agentgate itself (not redirected, or redirected to agentgate's own port); closed, never dialled");
        let host = original.ip().to_string();
        if let Some(origin) = refused_origin(&Scheme::HTTPS, &host, original) {
            let refusal = Refusal::OwnAddress { host, addr: original };
            let blocked = live.gate.refuse(&refusal, &connection_request(client, &agent, &origin, &url));
            refused_connection(&state, blocked, started).await;
        }
        return;
    }
    let mut tcp = tcp;
    let mut first = BytesMut::with_capacity(4096);
    let first_byte_timeout = state.config.connections.first_byte_timeout;
    match tokio::time::timeout(first_byte_timeout, tcp.read_buf(&mut first)).await {
        Ok(Ok(0)) => return,
        Ok(Ok(_)) => {}
        Ok(Err(error)) => return debug!(error = %error_chain(&error), "client left before its first byte"),
        Err(_elapsed) => return debug!("the client sent nothing for {first_byte_timeout:?}; closed"),
    }
    if !starts_tls(&first) {
        let io = Rewind::new(first.freeze(), tcp);
        let settings = state.config.connections.clone();
        let service = ProxyService::for_transparent(state, client, original, agent, drain.clone());
        return serve_connection(io, service, ServerProtocols::Http1, drain, &settings).await;
    }
    let handshake_timeout = state.config.connections.tls_handshake_timeout;
    let sni = match tokio::time::timeout(handshake_timeout, read_sni(&mut tcp, &mut first)).await {
        Ok(Ok(sni)) => sni,
        Ok(Err(cause)) => return debug!(%cause, "no usable ClientHello; closed"),
        Err(_elapsed) => return debug!("no complete ClientHello within {handshake_timeout:?}; closed"),
    };
    // No SNI (an IP target): the original destination is the authority.
    let host = sni.unwrap_or_else(|| original.ip().to_string());
    // The agent's egress lists on the name, before it is looked up to be held to the
    // original destination. A refusal cannot be answered on a TLS connection: recorded, closed.
    let admitted = match refused_origin(&Scheme::HTTPS, &host, original) {
        Some(origin) => {
            let url = format!("https://{}:{}/", origin.host(), origin.port());
            let request = connection_request(client, &agent, &origin, &url);
            match live.gate.check_egress(&request) {
                Ok(()) => None,
                Err(blocked) => {
                    match hold::admit_host(&state, &live, *blocked, request, started, drain.clone()).await {
                        Ok(admitted) => Some(admitted),
                        Err(blocked) => {
                            warn!(%client, %original, sni = %host, "transparent TLS connection refused by the agent's egress lists; closed");
                            return refused_connection(&state, blocked, started).await;
                        }
                    }
                }
            }
        }
        None => None,
    };
    let authority = match names_destination(&state, &host, original).await {
        Ok(authority) => authority,
        Err(refusal) => {
            warn!(%client, %original, sni = %host, code = refusal.code().as_str(), "transparent TLS connection refused: {refusal}; closed");
            if let Some(origin) = refused_origin(&Scheme::HTTPS, &host, original) {
                let url = format!("https://{}:{}/", origin.host(), origin.port());
                let blocked = live.gate.refuse(&refusal, &connection_request(client, &agent, &origin, &url));
                refused_connection(&state, blocked, started).await;
            }
            return;
        }
    };
    let io = Rewind::new(first.freeze(), tcp);
    let entry = Entry::Transparent { tls: true };
    if live.config.mitm.is_passthrough(authority.host()) {
        let connection = Connection { client, original, admitted: admitted.as_ref() };
        return passthrough(&state, connection, &agent, &authority, io, drain).await;
    }
    if let Some(admitted) = admitted.as_ref().filter(|admitted| admitted.is_held_request())
        && let Ok(origin) = Origin::from_parts(&Scheme::HTTPS, &authority)
    {
        // The approved connection is recorded once, with its approval, as a CONNECT is.
        let url = format!("https://{}:{}/", origin.host(), origin.port());
        let request = GateRequest { admitted: Some(admitted), ..connection_request(client, &agent, &origin, &url) };
        record(&state, live.gate.approved_tunnel(&request), started, Ok(http::StatusCode::OK)).await;
    }
    let admitted = admitted.and_then(Admitted::for_tunnel).map(Arc::new);
    match serve_intercepted(state, client, (agent, admitted), authority, io, entry, drain).await {
        Ok(()) => {}
        Err(error @ crate::proxy::TunnelError::ClientHungUp { .. }) => debug!(error = %error, "connection closed"),
        Err(error) => warn!(error = %error, "transparent TLS connection failed"),
    }
}

/// Where a redirected connection came from and went, and a human's admission of its host.
struct Connection<'a> {
    client: SocketAddr,
    original: SocketAddr,
    admitted: Option<&'a Admitted>,
}

/// A passthrough host: the CONNECT's host-level decision (`GET /` over https, recorded as
/// `CONNECT`), then the bytes spliced to the original destination, ClientHello included.
async fn passthrough(
    state: &Arc<ProxyState>,
    connection: Connection<'_>,
    agent: &Identity,
    authority: &Authority,
    io: Rewind<TcpStream>,
    drain: Drain,
) {
    let Connection { client, original, admitted } = connection;
    let live = state.generation();
    let Ok(origin) = Origin::from_parts(&Scheme::HTTPS, authority) else { return };
    let url = format!("https://{}:{}/", origin.host(), origin.port());
    let headers = HeaderMap::new();
    let addresses = [original.ip()];
    let request = GateRequest {
        client,
        agent,
        origin: &origin,
        url: &url,
        method: "GET",
        path_and_query: "/",
        headers: &headers,
        addresses: &addresses,
        entry: Entry::Transparent { tls: true },
        admitted,
    };
    // A block is recorded there; its answer cannot be sent on a connection that speaks TLS.
    let Ok(permit) = decide_passthrough(state, &live.gate, request).await else {
        return info!(%client, %authority, "transparent passthrough refused by the gate; closed");
    };
    // The original destination, not whatever the name resolves to now (vetted by the guard).
    let dial = original_authority(original);
    match open_passthrough(state, permit, &dial).await {
        Ok(Ok(origin)) => {
            let _open = state.metrics.tunnel_opened();
            splice(io, origin, drain, "transparent passthrough").await;
        }
        Ok(Err(error)) => warn!(error = %error, "transparent passthrough: the original destination cannot be reached"),
        Err(AuditUnavailable) => {}
    }
}

/// Reads until `first` holds a whole ClientHello (at most [`MAX_CLIENT_HELLO`]) and returns
/// its SNI name. rustls parses a copy; the bytes stay in `first` for whoever serves the
/// connection next (the interception's own handshake, or the passthrough splice).
///
/// # Errors
/// What is wrong: not a ClientHello, too long, or the client left.
async fn read_sni(tcp: &mut TcpStream, first: &mut BytesMut) -> Result<Option<String>, String> {
    let mut acceptor = rustls::server::Acceptor::default();
    let mut fed = 0;
    loop {
        while fed < first.len() {
            let mut unread = &first[fed..];
            fed += acceptor.read_tls(&mut unread).map_err(|error| error.to_string())?;
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => return Ok(accepted.client_hello().server_name().map(str::to_owned)),
            Ok(None) => {}
            Err((error, _alert)) => return Err(format!("not a TLS ClientHello: {error}")),
        }
        if first.len() >= MAX_CLIENT_HELLO {
            return Err(format!("the ClientHello is longer than {MAX_CLIENT_HELLO} bytes"));
        }
        match tcp.read_buf(first).await {
            Ok(0) => return Err("the client left in the middle of its ClientHello".to_owned()),
            Ok(_) => {}
            Err(error) => return Err(error_chain(&error)),
        }
    }
}

/// Checks that `host` (an SNI or `Host` name, or an IP) names `original`, the address the
/// client connected to: the IP itself, or a name whose addresses, as the network guard
/// resolves and vets them, include it. Returns the authority requests are routed to:
/// `host:original-port`.
///
/// # Errors
/// [`Refusal::NotOriginalDestination`] for another site or a name that does not resolve;
/// the guard's own refusal when the name's addresses are refused (so the agent hears the
/// same `network.*` reason a proxied request would).
async fn names_destination(state: &ProxyState, host: &str, original: SocketAddr) -> Result<Authority, Refusal> {
    let mismatch = || Refusal::NotOriginalDestination { host: host.to_owned(), original };
    let authority = authority_for(host, original.port()).ok_or_else(mismatch)?;
    let canonical = canonical_host(host).map_err(|_| mismatch())?;
    let addresses = match state.guard.check(&canonical, original.port()).await {
        Ok(vetted) => vetted.addresses().to_vec(),
        Err(GuardError::Refused(refusal)) => return Err(refusal),
        Err(GuardError::Resolve { .. } | GuardError::BadHost(_)) => return Err(mismatch()),
    };
    if names_address(&addresses, original.ip()) { Ok(authority) } else { Err(mismatch()) }
}

/// Whether `original` is one of `addresses` (an IPv4 address matches its IPv4-mapped IPv6
/// form: a dual-stack listener sees IPv4 clients that way).
fn names_address(addresses: &[IpAddr], original: IpAddr) -> bool {
    let canonical = |ip: IpAddr| ip.to_canonical();
    addresses.iter().any(|ip| canonical(*ip) == canonical(original))
}

/// `host:port`, with brackets around an IPv6 address; `None` when `host` cannot be a URI
/// host (a malformed SNI or `Host`).
fn authority_for(host: &str, port: u16) -> Option<Authority> {
    let text = match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
        _ => format!("{host}:{port}"),
    };
    text.parse().ok()
}

/// The original destination as an authority (`10.0.0.5:443`, `[2001:db8::5]:443`).
fn original_authority(original: SocketAddr) -> Authority {
    // `SocketAddr`'s display is `ip:port`, brackets around IPv6: always an authority.
    original.to_string().parse().expect("a socket address is a valid URI authority")
}

/// The authority a plain-HTTP request on a transparent connection is routed to: the host its
/// `Host` names, on the original destination's port; the original destination itself when
/// there is no usable `Host` (HTTP/1.0). [`check_host`] then holds the name to that address.
pub(crate) fn named_authority(headers: &HeaderMap, original: SocketAddr) -> Authority {
    let named =
        headers.get(HOST).and_then(|value| value.to_str().ok()).and_then(|value| value.parse::<Authority>().ok());
    match named {
        Some(named) => authority_for(named.host().trim_start_matches('[').trim_end_matches(']'), original.port())
            .unwrap_or_else(|| original_authority(original)),
        None => original_authority(original),
    }
}

/// The `Host` check of a plain-HTTP request on a transparent connection: the site it names
/// (`context.authority`, from [`named_authority`]) must be `original`, and a port in `Host`
/// must be the original port. A mismatch is answered `403` with `transparent.host_mismatch`
/// (recorded), a refused address with the guard's own reason: never forwarded elsewhere.
///
/// # Errors
/// The block answer, already recorded.
pub(crate) async fn check_host(
    state: &ProxyState,
    original: SocketAddr,
    agent: &Identity,
    context: &RequestContext,
    request: &Request<Incoming>,
) -> Result<(), Response<ProxyBody>> {
    let headers = request.headers();
    let host = context.authority.host().trim_start_matches('[').trim_end_matches(']');
    let port_named =
        headers.get(HOST).and_then(|value| value.to_str().ok()).and_then(|value| value.parse::<Authority>().ok());
    let other_port = port_named.and_then(|named| named.port_u16()).is_some_and(|port| port != original.port());
    let refusal = match names_destination(state, host, original).await {
        Ok(_) if other_port => Refusal::NotOriginalDestination { host: host.to_owned(), original },
        Ok(_) => return Ok(()),
        Err(refusal) => refusal,
    };
    info!(code = refusal.code().as_str(), %original, named = %host, "transparent request refused: {refusal}");
    let Some(origin) = refused_origin(&Scheme::HTTP, host, original) else {
        let authority = context.authority.to_string();
        return Err(error_response(&ProxyError::BadTunnelRequest {
            method: request.method().to_string(),
            target: host.into(),
            authority,
        }));
    };
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let url = format!("http://{}:{}{path}", origin.host(), origin.port());
    let refused = GateRequest {
        method: request.method().as_str(),
        path_and_query: path,
        headers,
        entry: Entry::Transparent { tls: false },
        ..connection_request(context.client, agent, &origin, &url)
    };
    let blocked = state.generation().gate.refuse(&refusal, &refused);
    Err(answer_blocked(state, blocked, headers, context.started).await)
}

/// No headers: what a refused connection's record is made from (it sent none, or TLS).
static NO_HEADERS: LazyLock<HeaderMap> = LazyLock::new(HeaderMap::new);

/// The host-level request a refused transparent connection is recorded as: `CONNECT`, as a
/// refused CONNECT is.
fn connection_request<'a>(
    client: SocketAddr,
    agent: &'a Identity,
    origin: &'a Origin,
    url: &'a str,
) -> GateRequest<'a> {
    GateRequest {
        client,
        agent,
        origin,
        url,
        method: "CONNECT",
        path_and_query: "/",
        headers: &NO_HEADERS,
        addresses: &[],
        entry: Entry::Transparent { tls: true },
        admitted: None,
    }
}

/// The origin of a refused connection's record: `host` on the original port, or the original
/// destination itself when `host` is not a usable host (a bad SNI).
fn refused_origin(scheme: &Scheme, host: &str, original: SocketAddr) -> Option<Origin> {
    authority_for(host, original.port())
        .and_then(|authority| Origin::from_parts(scheme, &authority).ok())
        .or_else(|| Origin::from_parts(scheme, &original_authority(original)).ok())
}

/// Records a refused connection that got no HTTP answer (TLS, or closed before a request).
async fn refused_connection(state: &ProxyState, blocked: Blocked, started: Instant) {
    let mut record = blocked.into_record();
    record.duration = Some(started.elapsed());
    state.metrics.record(&record);
    if let Err(unrecorded) = state.audit.record(&record).await {
        warn!(error = %unrecorded.cause, event_id = %record.id, "decision record not written");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_original_destination_matches_in_any_spelling_of_its_family() {
        let v4: IpAddr = [10, 200, 2, 2].into();
        let mapped: IpAddr = "::ffff:10.200.2.2".parse().expect("an IPv6 literal");
        assert!(names_address(&[v4], v4));
        assert!(names_address(&[[10, 200, 2, 9].into(), v4], mapped), "a dual-stack listener's view");
        assert!(names_address(&[mapped], v4));
        assert!(!names_address(&[[10, 200, 2, 9].into()], v4), "another site");
        assert!(!names_address(&[], v4), "no address at all");
    }

    #[test]
    fn the_host_header_names_the_site_on_the_original_port() {
        let original: SocketAddr = "10.200.2.2:80".parse().expect("a socket address");
        let headers = |host: &str| HeaderMap::from_iter([(HOST, host.parse().expect("a header value"))]);
        assert_eq!(named_authority(&headers("origin.test"), original).as_str(), "origin.test:80");
        assert_eq!(named_authority(&headers("origin.test:8080"), original).as_str(), "origin.test:80");
        assert_eq!(named_authority(&headers("[2001:db8::1]:80"), original).as_str(), "[2001:db8::1]:80");
        assert_eq!(named_authority(&HeaderMap::new(), original).as_str(), "10.200.2.2:80", "HTTP/1.0: no Host");
        assert_eq!(named_authority(&headers("a b"), original).as_str(), "10.200.2.2:80", "unparsable");
        let v6: SocketAddr = "[2001:db8::5]:443".parse().expect("a socket address");
        assert_eq!(original_authority(v6).as_str(), "[2001:db8::5]:443");
        assert_eq!(authority_for("a b", 443), None, "a malformed SNI or Host routes nowhere");
    }

    #[test]
    fn transparent_mode_is_off_by_default_and_linux_only() {
        let mut problems = Vec::new();
        TransparentConfig::default().problems(&mut problems);
        assert!(problems.is_empty());
        let on = TransparentConfig { listen: vec!["0.0.0.0:8443".parse().expect("a socket address")] };
        on.problems(&mut problems);
        assert_eq!(problems.is_empty(), cfg!(target_os = "linux"), "{problems:?}");
    }
}
