//! Phase `forward`: the request as the origin gets it (`to_origin`: absolute URI on the routed
//! origin, hop-by-hop fields out, `Via` in, the headers a policy requires added, a signing
//! agent's Web Bot Auth signature on), sent through
//! the pool (`Upstream::send`), and the answer as the client gets it (`to_client`); for a
//! WebSocket upgrade the origin accepts (`101`), the byte relay once both sides switched. The
//! secrets the permit plans are put into the request and taken out of the answer here
//! (`crate::secrets`).
//!
//! The request body streams to the origin counted ([`SentBytes`], for the request's record).
//!
//! Never decides: it takes a `Permitted`, which only the gate makes. Never buffers a body
//! (an inspected request's was read by `inspect`, bounded, before the gate's last word), but
//! the gzip answer of a host with secrets bound to it, decoded whole to be scrubbed.

use std::time::SystemTime;

use http::header::{HOST, HeaderName, HeaderValue};
use http::uri::PathAndQuery;
use http::{HeaderMap, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::{Instrument, debug, warn};

use super::body::{Metered, ProxyBody};
use super::budget::{RelayBudget, SentBytes};
use super::conn::{Drain, splice};
use super::context::{ProxyState, RequestContext};
use super::error::{ProxyError, shown_target};
use super::headers::{Upgrade, append_via, is_upgrade_request, remove_hop_by_hop};
use super::upstream::PooledBody;
use crate::agents::Agent;
use crate::error_chain::error_chain;
use crate::gate::{PURPOSE_HEADER, Permitted};
use crate::secrets;
use crate::signing;

/// Phase `forward`: rewrite the request for the origin, send it, rewrite the response head
/// and hand back the origin's body as a stream; the request body's bytes are counted into
/// `sent`. For an upgrade that the origin accepts (`101`), also start relaying bytes once both
/// sides have switched (spent against the agent's byte budgets both ways, `conn::relay`).
pub(crate) async fn forward(
    state: &ProxyState,
    context: &RequestContext,
    (permit, sent): (&Permitted, SentBytes),
    agent: &Agent,
    mut request: Request<ProxyBody>,
    drain: Drain,
) -> Result<Response<ProxyBody>, ProxyError> {
    // An upgraded connection's bytes could not be scrubbed: towards a host with secrets bound
    // to it the request goes without its upgrade, and its answer is scrubbed like any other.
    let upgrade = match is_upgrade_request(request.version(), request.headers()) && !permit.secrets().scrubs() {
        true => Upgrade::Keep,
        false => Upgrade::Drop,
    };
    let client_upgrade = (upgrade == Upgrade::Keep).then(|| hyper::upgrade::on(&mut request));
    let mut request = to_origin(context, request, upgrade)?;
    inject_headers(request.headers_mut(), permit.inject_headers());
    // Web Bot Auth (`crate::signing`): signed as it goes out, the agent's own signature
    // headers removed first; an agent without a key sends none unless it may pass them.
    match agent.signer() {
        Some(signer) => signer.sign(&mut request, SystemTime::now()),
        None if !agent.passes_signatures() => signing::strip(request.headers_mut()),
        None => {}
    }
    let (mut parts, body) = request.into_parts();
    let made = secrets::apply(permit.secrets(), &mut parts);
    let request = Request::from_parts(parts, Metered::new(body, sent).boxed_unsync());
    let mut response = state.upstream.send(&context.authority, request, upgrade).await?;
    let waited_ms = context.started.elapsed().as_millis() as u64;
    debug!(version = ?response.version(), waited_ms, "origin answered");
    match client_upgrade {
        Some(client_upgrade) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
            let origin_upgrade = hyper::upgrade::on(&mut response);
            let budget = RelayBudget::of(&state.audit, permit, StatusCode::SWITCHING_PROTOCOLS);
            let relay = drain.clone().until_stopped(relay_upgraded((client_upgrade, origin_upgrade), drain, budget));
            tokio::spawn(relay.in_current_span());
            Ok(to_client(response, Upgrade::Keep))
        }
        _ => match permit.secrets().scrubber(made) {
            Some(scrubber) => {
                let scrubbed = secrets::scrub_response(to_client(response, Upgrade::Drop), scrubber).await;
                let cause = |unreadable: secrets::Unreadable| ProxyError::Unscrubbable {
                    host: context.authority.to_string(),
                    cause: unreadable.to_string(),
                };
                Ok(scrubbed.map_err(cause)?.map(BodyExt::boxed_unsync))
            }
            None => Ok(to_client(response, Upgrade::Drop)),
        },
    }
}

/// Adds the headers a policy requires (AGENTS.md agent identification, SEMANTICS C24); a
/// header the agent already sent is kept as it is.
fn inject_headers(headers: &mut HeaderMap, inject: &[(String, String)]) {
    for (name, value) in inject {
        match (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str())) {
            (Ok(name), Ok(value)) => {
                if !headers.contains_key(&name) {
                    headers.insert(name, value);
                } else {
                    debug!(header = %name, "agent already sent the identification header; kept");
                }
            }
            _ => warn!(header = %name, "cannot inject a header the policy asks for: invalid name or value"),
        }
    }
}

/// The request as the origin gets it: an absolute URI on the routed origin (the pooled client
/// needs one and derives `Host` or `:authority` from it, so the client's `Host` is dropped),
/// HTTP/1.1 as the baseline version (the client picks h2 by ALPN), hop-by-hop fields out,
/// `Via` in. The body is the client's, streamed (or, for an inspected request, the bytes
/// `inspect` read, unchanged).
fn to_origin(
    context: &RequestContext,
    request: Request<ProxyBody>,
    upgrade: Upgrade,
) -> Result<Request<ProxyBody>, ProxyError> {
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
    parts.uri = Uri::builder()
        .scheme(context.scheme.clone())
        .authority(context.authority.clone())
        .path_and_query(path)
        .build()
        // Cannot fail today: all three parts were parsed already. Kept as a 400 naming the
        // target rather than an `expect`, since the target came from the network.
        .map_err(|_| ProxyError::UnsupportedScheme { uri: shown_target(&parts.uri) })?;
    remove_hop_by_hop(&mut parts.headers, upgrade);
    parts.headers.remove(HOST);
    // Declared to agentgate only (SEMANTICS D13); the origin never sees it.
    parts.headers.remove(&PURPOSE_HEADER);
    append_via(&mut parts.headers, parts.version);
    parts.version = Version::HTTP_11;
    Ok(Request::from_parts(parts, body))
}

/// The response as the client gets it: hop-by-hop fields out (except an accepted upgrade's),
/// `Via` in, the origin's body streamed through.
fn to_client(response: Response<PooledBody>, upgrade: Upgrade) -> Response<ProxyBody> {
    let (mut parts, body) = response.into_parts();
    remove_hop_by_hop(&mut parts.headers, upgrade);
    append_via(&mut parts.headers, parts.version);
    // hyper writes the version of the client's connection; this only avoids a coercion note.
    parts.version = Version::HTTP_11;
    Response::from_parts(parts, body.map_err(Into::into).boxed_unsync())
}

/// After a `101`: waits for both hyper connections to hand over their streams, then relays.
async fn relay_upgraded((client, origin): (OnUpgrade, OnUpgrade), drain: Drain, budget: Option<RelayBudget>) {
    match tokio::try_join!(client, origin) {
        Ok((client, origin)) => {
            splice(TokioIo::new(client), TokioIo::new(origin), drain, "upgraded connection", budget).await
        }
        Err(error) => debug!(error = %error_chain(&error), "upgrade did not complete"),
    }
}
