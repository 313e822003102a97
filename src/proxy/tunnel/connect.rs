//! CONNECT (RFC 9110 §9.3.6): the agent's egress lists first (`Gate::check_egress`: a host
//! its `allow_hosts` does not list, or its `deny_hosts` lists, is refused before any lookup,
//! or is held for a human who may admit it), then the network guard and `[connect]
//! allowed_ports` (agentgate's own address, internal ranges and other ports are refused),
//! then the host-level decision before the `200` (`decide_tunnel`), then either a passthrough
//! splice to the target (`passthrough`), or interception (`intercept`): its inner HTTP/1.1 or
//! h2 served with the same request service as the proxy port. A refusal is decided before
//! the `200`; it is the CONNECT's own 403 for a passthrough host, and is answered to the
//! first request inside the tunnel otherwise (`refuse`), where an HTTPS client shows it.
//!
//! Never routes an inner request anywhere but the CONNECT target; never mints certificates
//! itself (the TLS module does).

use std::net::SocketAddr;
use std::sync::Arc;

use http::uri::{Authority, Scheme};
use http::{Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::{Instrument, Span, debug, info_span, warn};

use super::admit::{begin_interception, connection};
use super::intercept::{Inside, intercept};
use super::passthrough;
use crate::error_chain::error_chain;
use crate::fetch::Origin;
use crate::gate::GateRequest;
use crate::proxy::answer::{Exit, tunnel_established};
use crate::proxy::body::ProxyBody;
use crate::proxy::conn::{Drain, splice};
use crate::proxy::context::{Entry, ProxyState};
use crate::proxy::destination::{Ask, check_destination};
use crate::proxy::error::{ProxyError, TunnelError, shown_target};
use crate::proxy::hold;
use crate::proxy::local;
use crate::proxy::record::RequestRecord;
use crate::proxy::settings::Settings;

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
pub(crate) fn decide_tunnel(settings: &Settings, authority: &Authority) -> Tunnel {
    if settings.mitm.is_passthrough(authority.host()) { Tunnel::Passthrough } else { Tunnel::Mitm }
}

/// Phase `handle_connect`: checks the target (form, the agent's egress lists, destination,
/// port), decides, and answers `200`; the tunnel itself runs in its own task once hyper
/// hands over the connection. A passthrough tunnel's decision is the CONNECT's record; an
/// intercepted tunnel's requests are each recorded (and an approved CONNECT, with its
/// approval, once).
///
/// # Errors
/// [`ProxyError::BadConnectTarget`] for a target that is not `host:port`;
/// [`ProxyError::UpstreamResolve`] when its host does not resolve; for passthrough,
/// the `Upstream*` variants when the target cannot be reached (answered before the `200`);
/// a block answer for an unknown agent (`407`), and for a passthrough host refused.
pub(crate) async fn handle_connect(
    state: &Arc<ProxyState>,
    client: SocketAddr,
    drain: Drain,
    record: &mut RequestRecord,
    mut request: Request<Incoming>,
) -> Result<Response<ProxyBody>, Exit> {
    let authority = connect_target(request.uri())?;
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
    let agent = match live.gate.identify_agent(client, Method::CONNECT.as_str(), &url, &headers) {
        Ok(agent) => agent,
        Err(blocked) => return Err(record.block(*blocked, &headers)),
    };
    let connect = connection(client, &agent, &origin, &url, &headers, Entry::Connect);
    record.undecided(live.gate.undecided(&connect));
    // agentgate.local is answered inside the tunnel by agentgate itself (`local.rs`): never
    // looked up, vetted or passed through.
    let is_local = local::is_local(authority.host());
    let tunnel = if is_local { Tunnel::Mitm } else { decide_tunnel(&live.settings, &authority) };
    // The target is the agent's text: a secret's value typed into it is not shown.
    let shown = live.gate.redacted(authority.as_str());
    let span = info_span!("tunnel", client = %client, authority = %shown, mode = ?tunnel);
    // The agent's egress lists, before the target is looked up; a human admitting the host
    // admits the whole tunnel. agentgate's own pages (`agentgate.local`) are no egress.
    // A tunnel carries no secrets plan: each request inside makes its own.
    let egress = if is_local {
        Ok(None)
    } else {
        hold::check_egress(state, &live, record, connect, drain.clone()).await.map(|(_, admitted)| admitted)
    };
    let admitted = match egress {
        Ok(admitted) => admitted,
        Err(blocked) => {
            let refusal = record.block(blocked, &headers);
            return refuse(state, client, record, refusal, (tunnel, authority), request, drain).instrument(span).await;
        }
    };
    let admitted_connect = GateRequest { admitted: admitted.as_ref(), ..connect };
    // Held until the passthrough tunnel is open: it dials these addresses.
    let vetted = if is_local {
        None
    } else {
        match check_destination(state, &live, record, admitted_connect, Ask::Connect).await {
            Ok(vetted) => Some(vetted),
            Err(refusal) => {
                return refuse(state, client, record, refusal, (tunnel, authority), request, drain)
                    .instrument(span)
                    .await;
            }
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    match tunnel {
        Tunnel::Passthrough => {
            let addresses = vetted.as_ref().map_or(&[][..], |vetted| vetted.addresses());
            let (origin, budget) =
                passthrough::open(state, &live.gate, record, (admitted_connect, addresses), &authority).await?;
            let open = state.metrics.tunnel_opened();
            let until_stopped = drain.clone();
            let tunnel = async move {
                let _open = open;
                match on_upgrade.await {
                    Ok(upgraded) => splice(TokioIo::new(upgraded), origin, drain, "passthrough tunnel", budget).await,
                    Err(error) => debug!(error = %error_chain(&error), "client left before the tunnel opened"),
                }
            };
            tokio::spawn(until_stopped.until_stopped(tunnel).instrument(span));
        }
        Tunnel::Mitm => {
            let admitted = begin_interception(&live, record, connect, admitted);
            let inside = Inside::Served(agent, admitted);
            spawn_intercepted(Arc::clone(state), client, (inside, authority), on_upgrade, drain, span);
        }
    }
    Ok(tunnel_established())
}

/// Runs an intercepted tunnel (`intercept`) in a task of its own, from hyper's hand-over of
/// the connection, until it ends or the shutdown grace period does: the client's first byte
/// and TLS handshake have timeouts of their own, longer than a shutdown may take.
fn spawn_intercepted(
    state: Arc<ProxyState>,
    client: SocketAddr,
    tunnel: (Inside, Authority),
    on_upgrade: OnUpgrade,
    drain: Drain,
    span: Span,
) {
    let (inside, authority) = tunnel;
    let open = state.metrics.tunnel_opened();
    let until_stopped = drain.clone();
    // Boxed, so the wrappers below hold a pointer, not (twice) the tunnel's future.
    let tunnel = Box::pin(async move {
        let _open = open;
        match intercept(state, client, inside, authority, on_upgrade, drain).await {
            Ok(()) => {}
            Err(error @ TunnelError::ClientHungUp { .. }) => debug!(error = %error, "tunnel closed"),
            Err(error) => warn!(error = %error, "tunnel failed"),
        }
    });
    tokio::spawn(until_stopped.until_stopped(tunnel).instrument(span));
}

/// A CONNECT refused before its `200` (`exit`): by the agent's egress lists, the network
/// guard or `[connect] allowed_ports`. An HTTPS client never shows a refused CONNECT's body,
/// so to an intercepted host the refusal is a `200`, and the first request inside the tunnel
/// gets the block answer (`refused.rs`; TLS terminated as for any intercepted tunnel, plain
/// HTTP answered alike), with the CONNECT's one record, written now
/// (`RequestRecord::answered_inside`): nothing is resolved or dialled for it. A passthrough
/// host's refusal (its tunnel could not be intercepted) and an error (its host does not
/// resolve) stay the CONNECT's own answer, as does a `407` (decided before this).
async fn refuse(
    state: &Arc<ProxyState>,
    client: SocketAddr,
    record: &mut RequestRecord,
    exit: Exit,
    target: (Tunnel, Authority),
    mut request: Request<Incoming>,
    drain: Drain,
) -> Result<Response<ProxyBody>, Exit> {
    let (tunnel, authority) = target;
    let Exit::Answered(answer) = &exit else { return Err(exit) };
    if tunnel != Tunnel::Mitm {
        return Err(exit);
    }
    let Some(blocked) = record.answered_inside(answer.status()).await else { return Err(exit) };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let inside = Inside::Refused(Arc::new(blocked));
    spawn_intercepted(Arc::clone(state), client, (inside, authority), on_upgrade, drain, Span::current());
    Ok(tunnel_established())
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
    // Copied, not cloned: hyper parses the request target as a slice of its connection's read
    // buffer, and the authority lives as long as the tunnel, so a clone would keep that whole
    // buffer (8 KiB) alive for every idle tunnel.
    Authority::try_from(authority.as_str()).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn the_connect_target_lets_go_of_the_buffer_it_was_parsed_from() {
        // As hyper parses it: the request target a slice of the connection's read buffer.
        let mut read = Vec::with_capacity(8192);
        read.extend_from_slice(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n");
        let read = bytes::Bytes::from(read);
        let uri = Uri::from_maybe_shared(read.slice(8..23)).expect("an authority-form target");
        let authority = connect_target(&uri).expect("host:port");
        drop(uri);
        assert_eq!(authority, "example.com:443");
        assert!(read.is_unique(), "the tunnel's authority still holds the CONNECT's read buffer");
    }
}
