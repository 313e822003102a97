//! A passthrough tunnel's host-level decision and its connection: the gate decides on `GET /`
//! over https (nothing inside the tunnel will be seen; the record says `CONNECT`), an agent
//! whose byte budget is spent is refused before the `200` (the tunnel's bytes are spent as
//! they pass, `conn::relay`), then the
//! connection to the destination is opened and the decision recorded with its outcome, on
//! disk before any byte is spliced under `[audit] on_failure = "block"`. A CONNECT to a host
//! in `[mitm] passthrough_hosts` and a redirected TLS connection to one are decided alike.
//!
//! Never splices bytes itself (the caller does, `conn::relay`), never reads them.

use std::net::IpAddr;

use http::uri::Authority;
use http::{Method, StatusCode};
use tokio::net::TcpStream;

use crate::gate::{Gate, GateRequest, Permitted, Verdict};
use crate::proxy::answer::Exit;
use crate::proxy::budget::RelayBudget;
use crate::proxy::conn::Counted;
use crate::proxy::context::ProxyState;
use crate::proxy::record::RequestRecord;

/// A passthrough tunnel for `connection` (its host-level request), whose destination the
/// guard vetted as `addresses`: decided ([`decide`]), then its connection to `dial` opened
/// (through the network guard) and the decision written, completed with its `200`. The
/// audit promise: under `on_failure = "block"` no byte is spliced before the record is on
/// disk. With the connection comes the tunnel's byte budget, if the agent has one, for the
/// splice.
///
/// # Errors
/// The block answer (nothing was dialled); the dial's error (the request's record is
/// completed with it); or the 503 answer when the record could not be committed (the
/// connection is dropped).
pub(super) async fn open(
    state: &ProxyState,
    gate: &Gate,
    record: &mut RequestRecord,
    (connection, addresses): (GateRequest<'_>, &[IpAddr]),
    dial: &Authority,
) -> Result<(Counted<TcpStream>, Option<RelayBudget>), Exit> {
    let permit = decide(gate, record, GateRequest { method: Method::GET.as_str(), addresses, ..connection }).await?;
    let budget = RelayBudget::of(&state.audit, &permit, StatusCode::OK);
    record.permitted(permit);
    let opened = state.upstream.open_tunnel(dial).await?;
    record.answered_now(StatusCode::OK).await?;
    Ok((opened, budget))
}

/// The host-level decision for a passthrough tunnel: the gate decides on `GET /`
/// over https, since nothing inside the tunnel will be seen; the record says `CONNECT`.
///
/// # Errors
/// The block answer, before any `200`: the gate's, or a spent byte budget's (`429`, a budget
/// with less than its floor left, either way).
async fn decide(gate: &Gate, record: &mut RequestRecord, request: GateRequest<'_>) -> Result<Permitted, Exit> {
    match gate.decide(request).await {
        Verdict::Forward(mut permit) => {
            permit.mark_passthrough();
            if let Some(budgets) = permit.budgets()
                && let Err(refused) = budgets.check_open().await
            {
                return Err(record.block(*permit.over_budget(&refused, None), request.headers));
            }
            Ok(permit)
        }
        Verdict::Block(mut blocked) => {
            blocked.mark_passthrough();
            Err(record.block(blocked, request.headers))
        }
    }
}
