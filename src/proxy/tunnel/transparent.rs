//! Transparent mode (`[transparent] listen`): connections the kernel redirected to agentgate
//! (nftables/iptables `REDIRECT`), from agents that ignore proxy variables. Each connection's
//! original destination is read (`conn::original_dst`), then it is served by the same code as a
//! CONNECT tunnel to that destination:
//! - TLS (a ClientHello in the first bytes, whatever the port): its SNI is read without
//!   terminating anything, held to the agent's egress lists (before it is looked up), checked
//!   to name the original destination, then a passthrough
//!   host (`[mitm] passthrough_hosts`) gets the CONNECT's host-level decision and is
//!   spliced to the original destination untouched; any other is intercepted exactly like a
//!   MITM'd CONNECT to `SNI:original-port` (`intercept::serve_intercepted`);
//! - anything else is plain HTTP, served like the inside of a plain tunnel, each request
//!   routed to the site its `Host` names once that is checked to be the original
//!   destination (`original::check_host`, called by the request service).
//!
//! A connection whose original destination is agentgate itself (not redirected, or
//! redirected to one of its own ports) is refused and closed, never dialled: no loop.
//! The agent is the client address's (`[[agents]] clients`): there is no
//! `Proxy-Authorization` on a redirected connection.
//!
//! Never: parses TLS by hand (rustls reads the ClientHello), dials a name the client did not
//! connect to, decides policy (the gate does). See `docs/transparent.md`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use http::uri::Scheme;
use http::{Method, StatusCode};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tracing::{Instrument, debug, info, info_span, warn};

use super::admit::{begin_interception, connection};
use super::intercept::{Inside, serve_intercepted, starts_tls};
use super::original::{NO_HEADERS, names_destination, original_authority, refused_origin};
use super::passthrough;
use crate::error_chain::error_chain;
use crate::gate::GateRequest;
use crate::net::Refusal;
use crate::proxy::answer::Exit;
use crate::proxy::conn::{Admission, Drain, Rewind, original_destination, splice};
use crate::proxy::context::{Entry, ProxyState};
use crate::proxy::error::TunnelError;
use crate::proxy::hold;
use crate::proxy::record::{Ending, RequestRecord};
use crate::proxy::serve::{ServerProtocols, serve_connection};
use crate::proxy::service::ProxyService;

/// How a redirected TLS connection entered (`agentgate.entry`).
const TLS: Entry = Entry::Transparent { tls: true };

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
        // At `info`, once per connection: the client of every line its requests write.
        let span = info_span!("transparent", client = %client);
        // Boxed, so the wrappers below hold a pointer, not (twice) the connection's future.
        let connection = Box::pin(async move {
            serve(state, tcp, client, connection_drain).await;
            drop(admitted);
        });
        tokio::spawn(drain.clone().until_stopped(connection).instrument(span));
    }
}

/// One redirected connection: its original destination, its agent, then TLS or plain HTTP.
/// A TLS connection's host-level decision is its own record (a refusal, a passthrough, an
/// approved interception), written before anything is spliced or served; an intercepted or
/// plain-HTTP connection's requests are each recorded.
async fn serve(state: Arc<ProxyState>, tcp: TcpStream, client: SocketAddr, drain: Drain) {
    let mut record = RequestRecord::start(Arc::clone(&state), drain.clone());
    let original = match original_destination(&tcp) {
        Ok(original) => original,
        Err(error) => {
            warn!(%client, error = %error, "transparent connection refused: no original destination (it was not redirected to agentgate by the kernel); closed");
            return;
        }
    };
    let live = state.generation();
    let url = format!("https://{original}/");
    let agent = match live.gate.identify_agent(client, Method::CONNECT.as_str(), &url, &NO_HEADERS) {
        Ok(agent) => agent,
        Err(blocked) => {
            warn!(%client, %original, "transparent connection refused: the client address is no known agent and [auth] requires one; closed");
            return record.refused(*blocked).await;
        }
    };
    let own = tcp.local_addr().is_ok_and(|local| local == original) || state.guard.policy().is_own(original);
    if own {
        warn!(%client, %original, "transparent connection refused: its original destination is agentgate itself (not redirected, or redirected to agentgate's own port); closed, never dialled");
        let host = original.ip().to_string();
        if let Some(origin) = refused_origin(&Scheme::HTTPS, &host, original) {
            let refusal = Refusal::OwnAddress { host, addr: original };
            let request = connection(client, &agent, &origin, &url, &NO_HEADERS, TLS);
            record.refused(live.gate.refuse(&refusal, &request)).await;
        }
        return;
    }
    let mut tcp = tcp;
    let mut first = BytesMut::with_capacity(4096);
    let first_byte_timeout = state.settings.connections.first_byte_timeout;
    match tokio::time::timeout(first_byte_timeout, tcp.read_buf(&mut first)).await {
        Ok(Ok(0)) => return,
        Ok(Ok(_)) => {}
        Ok(Err(error)) => return debug!(error = %error_chain(&error), "client left before its first byte"),
        Err(_elapsed) => return debug!("the client sent nothing for {first_byte_timeout:?}; closed"),
    }
    if !starts_tls(&first) {
        let io = Rewind::new(first.freeze(), tcp);
        let settings = state.settings.connections.clone();
        let service = ProxyService::for_transparent(state, client, original, agent, drain.clone());
        return serve_connection(io, service, ServerProtocols::Http1, drain, &settings).await;
    }
    let handshake_timeout = state.settings.connections.tls_handshake_timeout;
    let sni = match tokio::time::timeout(handshake_timeout, read_sni(&mut tcp, &mut first)).await {
        Ok(Ok(sni)) => sni,
        Ok(Err(cause)) => return debug!(%cause, "no usable ClientHello; closed"),
        Err(_elapsed) => return debug!("no complete ClientHello within {handshake_timeout:?}; closed"),
    };
    // No SNI (an IP target): the original destination is the authority.
    let host = sni.unwrap_or_else(|| original.ip().to_string());
    // The original destination itself when the name is unusable: always an origin.
    let Some(origin) = refused_origin(&Scheme::HTTPS, &host, original) else { return };
    let url = format!("https://{}:{}/", origin.host(), origin.port());
    let request = connection(client, &agent, &origin, &url, &NO_HEADERS, TLS);
    record.undecided(live.gate.undecided(&request));
    // The agent's egress lists on the name, before it is looked up to be held to the
    // original destination. A refusal cannot be answered on a TLS connection: recorded, closed.
    // A tunnel carries no secrets plan: each request inside makes its own.
    let admitted = match hold::check_egress(&state, &live, &mut record, request, drain.clone()).await {
        Ok((_, admitted)) => admitted,
        Err(blocked) => {
            let sni = live.gate.redacted(&host);
            warn!(%client, %original, %sni, "transparent TLS connection refused by the agent's egress lists; closed");
            return record.refused(blocked).await;
        }
    };
    let authority = match names_destination(&state, &host, original).await {
        Ok(authority) => authority,
        Err(refusal) => {
            warn!(%client, %original, sni = %host, code = refusal.code().as_str(), "transparent TLS connection refused: {refusal}; closed");
            return record.refused(live.gate.refuse(&refusal, &request)).await;
        }
    };
    let io = Rewind::new(first.freeze(), tcp);
    if live.settings.mitm.is_passthrough(authority.host()) {
        let request = GateRequest { admitted: admitted.as_ref(), ..request };
        return passthrough(&state, &mut record, request, original, io, drain).await;
    }
    let admitted = begin_interception(&live, &mut record, request, admitted);
    // An approved held connection's record is written now (there is no `200` to write it
    // with); an intercepted one has none of its own.
    record.finish(Ending::Answered(StatusCode::OK)).await;
    match serve_intercepted(state, client, Inside::Served(agent, admitted), authority, io, TLS, drain).await {
        Ok(()) => {}
        Err(error @ TunnelError::ClientHungUp { .. }) => debug!(error = %error, "connection closed"),
        Err(error) => warn!(error = %error, "transparent TLS connection failed"),
    }
}

/// A passthrough host: the CONNECT's host-level decision (`GET /` over https, recorded as
/// `CONNECT`) on `connection` (its origin and agent), then the bytes spliced to the original
/// destination, ClientHello included.
async fn passthrough(
    state: &Arc<ProxyState>,
    record: &mut RequestRecord,
    connection: GateRequest<'_>,
    original: SocketAddr,
    io: Rewind<TcpStream>,
    drain: Drain,
) {
    let live = state.generation();
    // The original destination, not whatever the name resolves to now (vetted by the guard).
    let dial = original_authority(original);
    let (client, origin) = (connection.client, connection.origin);
    match passthrough::open(state, &live.gate, record, (connection, &[original.ip()]), &dial).await {
        Ok((origin, budget)) => {
            let _open = state.metrics.tunnel_opened();
            splice(io, origin, drain, "transparent passthrough", budget).await;
        }
        Err(exit) => {
            match &exit {
                Exit::Failed(error) => {
                    warn!(error = %error, "transparent passthrough: the original destination cannot be reached");
                }
                Exit::Answered(_) => info!(%client, %origin, "transparent passthrough refused; closed"),
                Exit::Gone => {}
            }
            unsent(record, exit).await;
        }
    }
}

/// Finishes the record of a connection whose answer cannot be sent (it speaks TLS): a block
/// with the status it would have had, a failure with its error.
async fn unsent(record: &mut RequestRecord, exit: Exit) {
    match exit {
        Exit::Answered(answer) => record.finish(Ending::Answered(answer.status())).await,
        Exit::Failed(error) => record.finish(Ending::Failed(&error)).await,
        // Only a request whose client had gone is left unanswered; its record writes itself.
        Exit::Gone => {}
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
