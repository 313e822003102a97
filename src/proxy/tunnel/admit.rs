//! The host-level decision of a tunnel, one sequence for both entries that open one (a
//! CONNECT on the proxy port, `connect`; a redirected TLS connection, `transparent`):
//! 1. the connection's request, `CONNECT` to `scheme://host:port/` ([`connection`]), is the
//!    record's until it is decided;
//! 2. the agent's egress lists, with a grant's or a human's admission of an unlisted host
//!    (`hold::check_egress`, the same step every request inside takes);
//! 3. the destination, vetted by the entry (each knows its own: a CONNECT's name is resolved
//!    and checked by the guard, a redirected connection's SNI must name its original
//!    destination);
//! 4. a passthrough host's decision and connection (`passthrough::open`), or an interception
//!    ([`begin_interception`]) whose inner requests are each recorded.
//!
//! Never: vets a destination, answers or closes a connection (each entry refuses in its own
//! way: an HTTP answer, or a close), or decides policy (the gate does).

use std::net::SocketAddr;
use std::sync::Arc;

use http::{HeaderMap, Method};

use crate::agents::Identity;
use crate::fetch::Origin;
use crate::gate::{Admitted, GateRequest};
use crate::proxy::context::{Entry, Generation};
use crate::proxy::record::RequestRecord;

/// The host-level request of a tunnel from `client` as `agent` to `origin` (`url` is its
/// `scheme://host:port/`), entered as `entry`: `CONNECT /`, with the headers the client sent
/// (none on a redirected connection).
pub(super) fn connection<'a>(
    client: SocketAddr,
    agent: &'a Identity,
    origin: &'a Origin,
    url: &'a str,
    headers: &'a HeaderMap,
    entry: Entry,
) -> GateRequest<'a> {
    GateRequest {
        client,
        agent,
        origin,
        url,
        method: Method::CONNECT.as_str(),
        path_and_query: "/",
        headers,
        addresses: &[],
        entry,
        admitted: None,
    }
}

/// How an interception of `connection`, admitted by `admitted` (the egress step's grant or
/// approval of an unlisted host, if it took one), starts: a held connection a human approved
/// has the approval as its record (its `200` is the answer it waited for); any other has
/// none of its own, each request inside being recorded. Returns what the requests inside are
/// admitted with.
pub(super) fn begin_interception(
    live: &Generation,
    record: &mut RequestRecord,
    connection: GateRequest<'_>,
    admitted: Option<Admitted>,
) -> Option<Arc<Admitted>> {
    if admitted.as_ref().is_some_and(Admitted::is_held_request) {
        let approved = GateRequest { admitted: admitted.as_ref(), ..connection };
        record.decided(live.gate.approved_tunnel(&approved));
    } else {
        record.recorded_inside();
    }
    admitted.and_then(Admitted::for_tunnel).map(Arc::new)
}
