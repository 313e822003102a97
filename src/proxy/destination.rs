//! Phase `check_destination`: before the gate loads any policy for an origin, the network
//! guard (`crate::net::Guard`) resolves its host once and vets every address, and a CONNECT
//! is held to `[connect] allowed_ports`. A refusal is answered like any other block (403,
//! `agentgate-decision` header, body and decision record) with a `network.*` reason code,
//! so the agent learns why instead of getting a `robots.unreachable` from a fetch that was
//! never allowed to happen. The vetted answer it returns is the lease the request holds
//! until it is forwarded: the connector dials exactly those addresses.
//!
//! Never dials, never decides policy; see `docs/security.md`.

use std::sync::Arc;

use tracing::info;

use super::answer::Exit;
use super::context::{Generation, ProxyState};
use super::error::ProxyError;
use super::record::RequestRecord;
use crate::error_chain::error_chain;
use crate::gate::{Entry, GateRequest};
use crate::net::{GuardError, Refusal, Vetted};

/// What a tunnel asks of the guard beyond the address: a CONNECT also needs an allowed port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// A request to an origin (proxied, inside a tunnel, or a passthrough's host-level check).
    Request,
    /// A CONNECT: the port must be in `[connect] allowed_ports`.
    Connect,
}

/// Vets the destination of `request` (its origin's host and port), and returns the vetted
/// answer to hold while the request is forwarded.
///
/// # Errors
/// The block answer for a refused destination (its record now `record`'s), or
/// [`ProxyError::UpstreamResolve`] when the host does not resolve: nothing can be vetted, so
/// nothing is fetched or forwarded (a later lookup must not decide what the first could not);
/// the request ends with the record it reached the gate with.
pub(crate) async fn check_destination(
    state: &ProxyState,
    live: &Generation,
    record: &mut RequestRecord,
    request: GateRequest<'_>,
    ask: Ask,
) -> Result<Arc<Vetted>, Exit> {
    let (host, port) = (request.origin.host(), request.origin.port());
    let refusal = match vet(state, live, host, port, ask).await {
        Ok(vetted) => return Ok(vetted),
        Err(GuardError::Refused(refusal)) => refusal,
        Err(GuardError::Resolve { source, .. }) => {
            let cause = error_chain(&source);
            return Err(ProxyError::UpstreamResolve { host: format!("{host}:{port}"), cause }.into());
        }
        Err(GuardError::BadHost(bad)) => {
            let cause = bad.to_string();
            return Err(ProxyError::UpstreamResolve { host: format!("{host}:{port}"), cause }.into());
        }
    };
    info!(code = refusal.code().as_str(), refusal = ?refusal, "destination refused by the network guard");
    Err(record.block(live.gate.refuse(&refusal, &request), request.headers))
}

/// The guard's refusal of `request`'s destination, asked before a human is asked to admit
/// its host (`hold::admit_host`): nobody is ever asked to approve what the guard would refuse
/// once approved (agentgate's own address, internal ranges, a CONNECT's port). A host that
/// does not resolve is not refused here: it fails where `check_destination` asks again.
pub(crate) async fn refused_before_hold(
    state: &ProxyState,
    live: &Generation,
    request: &GateRequest<'_>,
) -> Option<Refusal> {
    let ask = if request.entry == Entry::Connect { Ask::Connect } else { Ask::Request };
    match vet(state, live, request.origin.host(), request.origin.port(), ask).await {
        Err(GuardError::Refused(refusal)) => {
            info!(code = refusal.code().as_str(), refusal = ?refusal, "unlisted host refused by the network guard; not held");
            Some(refusal)
        }
        Ok(_) | Err(GuardError::Resolve { .. } | GuardError::BadHost(_)) => None,
    }
}

/// The guard's answer for `host:port`, a CONNECT's port held to `[connect] allowed_ports`.
async fn vet(
    state: &ProxyState,
    live: &Generation,
    host: &str,
    port: u16,
    ask: Ask,
) -> Result<Arc<Vetted>, GuardError> {
    let vetted = state.guard.check(host, port).await?;
    if ask == Ask::Connect && !live.settings.connect.allows(port) {
        return Err(Refusal::PortNotAllowed { port }.into());
    }
    Ok(vetted)
}
