//! A passthrough tunnel's host-level decision and its connection: the gate decides on `GET /`
//! over https (nothing inside the tunnel will be seen; the record says `CONNECT`), then the
//! connection to the destination is opened and the decision recorded with its outcome, on
//! disk before any byte is spliced under `[audit] on_failure = "block"`. A CONNECT to a host
//! in `[mitm] passthrough_hosts` and a redirected TLS connection to one are decided alike.
//!
//! Never splices bytes itself (the caller does, `conn::relay`), never reads them.

use std::time::Instant;

use http::uri::Authority;
use http::{Response, StatusCode};
use tokio::net::TcpStream;
use tracing::warn;

use crate::audit::OnFailure;
use crate::gate::{Gate, GateRequest, Permitted, Verdict};
use crate::proxy::body::ProxyBody;
use crate::proxy::conn::Counted;
use crate::proxy::context::ProxyState;
use crate::proxy::error::ProxyError;
use crate::proxy::service::{answer_blocked, completed};

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
