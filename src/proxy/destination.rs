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
use std::time::Instant;

use http::Response;
use tracing::info;

use super::ProxyBody;
use super::context::{Generation, ProxyState};
use super::error::ProxyError;
use super::service::{answer_blocked, record};
use crate::error_chain::error_chain;
use crate::gate::GateRequest;
use crate::net::{GuardError, Refusal, Vetted};

/// What a tunnel asks of the guard beyond the address: a CONNECT also needs an allowed port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ask {
    /// A request to an origin (proxied, inside a tunnel, or a passthrough's host-level check).
    Request,
    /// A CONNECT: the port must be in `[connect] allowed_ports`.
    Connect,
}

/// Vets the destination of `request` (its origin's host and port).
///
/// Returns the vetted answer to hold while the request is forwarded, or the block answer
/// (already recorded) for a refused destination.
///
/// # Errors
/// [`ProxyError::UpstreamResolve`] (recorded) when the host does not resolve: nothing can be
/// vetted, so nothing is fetched or forwarded (a later lookup must not decide what the
/// first could not).
pub(crate) async fn check_destination(
    state: &ProxyState,
    live: &Generation,
    started: Instant,
    request: GateRequest<'_>,
    ask: Ask,
) -> Result<Result<Arc<Vetted>, Response<ProxyBody>>, ProxyError> {
    let (host, port) = (request.origin.host(), request.origin.port());
    let refusal = match state.guard.check(host, port).await {
        Ok(_) if ask == Ask::Connect && !live.config.connect.allows(port) => Refusal::PortNotAllowed { port },
        Ok(vetted) => return Ok(Ok(vetted)),
        Err(GuardError::Refused(refusal)) => refusal,
        Err(GuardError::Resolve { source, .. }) => {
            let error = ProxyError::UpstreamResolve { host: format!("{host}:{port}"), cause: error_chain(&source) };
            return Err(Box::pin(undecided(state, live, started, &request, error)).await);
        }
        Err(GuardError::BadHost(bad)) => {
            let error = ProxyError::UpstreamResolve { host: format!("{host}:{port}"), cause: bad.to_string() };
            return Err(Box::pin(undecided(state, live, started, &request, error)).await);
        }
    };
    info!(code = refusal.code().as_str(), refusal = ?refusal, "destination refused by the network guard");
    let blocked = live.gate.refuse(&refusal, &request);
    Ok(Err(answer_blocked(state, blocked, request.headers, started).await))
}

/// Records a request that failed before any decision, and hands its error back. Callers
/// box it: it is the rare path, and its record would weigh on every request's future.
async fn undecided(
    state: &ProxyState,
    live: &Generation,
    started: Instant,
    request: &GateRequest<'_>,
    error: ProxyError,
) -> ProxyError {
    record(state, live.gate.undecided(request), started, Err(&error)).await;
    error
}
