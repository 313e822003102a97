//! The one request service. Requests on the proxy port (absolute-form or CONNECT) and
//! requests inside a CONNECT tunnel (intercepted TLS or plain HTTP) all enter here and run
//! the same phases: `route` (work out where the request goes: a `RequestContext`), the
//! agent's egress lists (`Gate::check_egress`, and `super::hold::admit_host` for a host a
//! human may admit), the network guard (`check_destination`), the gate
//! (`crate::gate::Gate::decide`: block, or a `Permitted`), `hold` (a block a human may
//! approve waits for one, `super::hold`), `forward` (rewrite, send upstream,
//! stream the answer back), then `record` (the decision record, once the status is known).
//! See `docs/request-flow.md`.
//!
//! Never decides allow or deny itself, never reads policy, never buffers a body.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use http::header::{ACCEPT, HOST};
use http::header::{HeaderName, HeaderValue};
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tracing::{Instrument, debug, field, info, info_span, warn};

use super::ProxyBody;
use super::block::{audit_unavailable, blocked_response, error_response, error_type_for, status_for};
use super::connect::handle_connect;
use super::context::{Entry, ProxyState, RequestContext};
use super::destination::{Ask, check_destination};
use super::drain::Drain;
use super::error::{ProxyError, shown_target};
use super::headers::{Upgrade, append_via, is_upgrade_request, remove_hop_by_hop};
use super::hold;
use super::local;
use super::relay::splice;
use super::transparent;
use super::upstream::PooledBody;
use crate::agents::Identity;
use crate::audit::{DecisionRecord, OnFailure, Outcome as LogOutcome};
use crate::error_chain::error_chain;
use crate::fetch::Origin;
use crate::gate::{Admitted, Blocked, GateRequest, PURPOSE_HEADER, Permitted, Verdict};

/// Where a connection's requests go: the proxy port, or the inside of one CONNECT tunnel.
#[derive(Clone, Debug)]
enum Target {
    ProxyPort,
    /// Every request in a tunnel is the agent identified at its CONNECT, and its host is
    /// admitted when a human admitted the CONNECT's (`admitted`).
    Tunnel {
        authority: Authority,
        entry: Entry,
        agent: Identity,
        admitted: Option<Arc<Admitted>>,
    },
    /// A plain-HTTP connection redirected to `[transparent] listen`: each request goes to the
    /// site its `Host` names, once checked to be `original` (`transparent.rs`).
    Transparent {
        original: SocketAddr,
        agent: Identity,
    },
}

/// The hyper service for one client connection (the proxy port, or the inside of a tunnel).
#[derive(Clone)]
pub(crate) struct ProxyService {
    state: Arc<ProxyState>,
    client: SocketAddr,
    target: Target,
    /// Handed to the tunnels and upgraded connections this connection opens.
    drain: Drain,
}

impl ProxyService {
    /// The service for a connection accepted on the proxy port.
    pub(crate) fn for_proxy_port(state: Arc<ProxyState>, client: SocketAddr, drain: Drain) -> Self {
        ProxyService { state, client, target: Target::ProxyPort, drain }
    }

    /// The service for the inside of a tunnel to `authority`: every request is routed there,
    /// whatever its `Host`, `:authority` or SNI says, and is `agent`'s (identified at CONNECT);
    /// `admitted` is a human's admission of the tunnel's host, when its agent's `allow_hosts`
    /// does not list it.
    pub(crate) fn for_tunnel(
        state: Arc<ProxyState>,
        client: SocketAddr,
        tunnel: (Authority, Entry),
        agent: Identity,
        admitted: Option<Arc<Admitted>>,
        drain: Drain,
    ) -> Self {
        let (authority, entry) = tunnel;
        ProxyService { state, client, target: Target::Tunnel { authority, entry, agent, admitted }, drain }
    }

    /// The service for a plain-HTTP connection redirected to `[transparent] listen`, whose
    /// original destination was `original`; every request is `agent`'s.
    pub(crate) fn for_transparent(
        state: Arc<ProxyState>,
        client: SocketAddr,
        original: SocketAddr,
        agent: Identity,
        drain: Drain,
    ) -> Self {
        ProxyService { state, client, target: Target::Transparent { original, agent }, drain }
    }

    /// One request, start to response head, inside its tracing span.
    async fn handle(self, request: Request<Incoming>) -> Response<ProxyBody> {
        let started = Instant::now();
        let id = self.state.next_request_id();
        let entry = match &self.target {
            Target::ProxyPort => Entry::Forward,
            Target::Tunnel { entry, .. } => *entry,
            Target::Transparent { .. } => Entry::Transparent { tls: false },
        };
        let span = info_span!(
            "request",
            id = %id,
            client = %self.client,
            entry = entry.as_str(),
            method = %request.method(),
            authority = field::Empty,
        );
        async {
            let result = self.run_phases(started, request).await;
            let response = result.unwrap_or_else(|error| {
                let response = error_response(&error);
                // A client's mistake is routine; an origin or proxy failure deserves attention.
                if response.status().is_client_error() {
                    info!(error = %error, "request refused");
                } else {
                    warn!(error = %error, "request failed");
                }
                response
            });
            // The decision log is the per-request record; this line is for debugging only
            // (at `info` it cost about a tenth of a request's CPU, issue 11).
            debug!(status = response.status().as_u16(), elapsed_ms = started.elapsed().as_millis() as u64, "response");
            response
        }
        .instrument(span)
        .await
    }

    /// The phases in order. A CONNECT on the proxy port goes to `handle_connect`; every other
    /// request is routed, then forwarded.
    async fn run_phases(
        &self,
        started: Instant,
        request: Request<Incoming>,
    ) -> Result<Response<ProxyBody>, ProxyError> {
        if request.method() == Method::CONNECT && matches!(self.target, Target::ProxyPort) {
            // Boxed: once per tunnel, and its future would otherwise be part of every
            // request's (issue 11).
            return Box::pin(handle_connect(&self.state, self.client, self.drain.clone(), request)).await;
        }

        let (context, request) = self.route(started, request)?;
        let transparent = match &self.target {
            Target::Transparent { original, .. } => Some(*original),
            _ => None,
        };
        if transparent.is_none() && local::is_local(context.authority.host()) {
            return Ok(Box::pin(local::answer(&self.state, &context, &request)).await);
        }
        // One config generation for the whole request, whatever a reload swaps in meanwhile.
        let live = self.state.generation();
        let origin = Origin::from_parts(&context.scheme, &context.authority)
            .map_err(|_| ProxyError::UnsupportedScheme { uri: shown_target(request.uri()) })?;
        let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
        // The log names the canonical host (`crate::net::host`), with the port as sent.
        let port = context.authority.port().map(|p| format!(":{p}")).unwrap_or_default();
        let url = format!("{}://{}{port}{path}", context.scheme, origin.host());
        let method = request.method().as_str();
        let (agent, entry, tunnel_admitted) = match &self.target {
            Target::Tunnel { agent, entry, admitted, .. } => (agent.clone(), *entry, admitted.as_deref()),
            Target::Transparent { agent, .. } => (agent.clone(), Entry::Transparent { tls: false }, None),
            Target::ProxyPort => match live.gate.identify_agent(context.client, method, &url, request.headers()) {
                Ok(agent) => (agent, Entry::Forward, None),
                Err(blocked) => return Ok(answer_blocked(&self.state, *blocked, request.headers(), started).await),
            },
        };
        let gate_request = GateRequest {
            client: context.client,
            agent: &agent,
            origin: &origin,
            url: &url,
            method,
            path_and_query: path,
            headers: request.headers(),
            addresses: &[],
            entry,
            admitted: tunnel_admitted,
        };
        // The agent's egress lists, before anything about the host is looked up.
        let admitted = match live.gate.check_egress(&gate_request) {
            Ok(()) => None,
            Err(blocked) => {
                match hold::admit_host(&self.state, &live, *blocked, gate_request, started, self.drain.clone()).await {
                    Ok(admitted) => Some(admitted),
                    Err(blocked) => return Ok(answer_blocked(&self.state, blocked, request.headers(), started).await),
                }
            }
        };
        let gate_request = GateRequest { admitted: admitted.as_ref().or(tunnel_admitted), ..gate_request };
        if let (Some(original), Target::Transparent { agent, .. }) = (transparent, &self.target) {
            // The site the `Host` names must be the one the client connected to (no fronting).
            let checked = transparent::check_host(&self.state, original, agent, &context, &request);
            if let Err(refused) = Box::pin(checked).await {
                return Ok(refused);
            }
            if local::is_local(context.authority.host()) {
                return Ok(Box::pin(local::answer(&self.state, &context, &request)).await);
            }
        }
        // Held until the request is forwarded: the connector dials these addresses.
        let vetted = match check_destination(&self.state, &live, started, gate_request, Ask::Request).await? {
            Ok(vetted) => vetted,
            Err(blocked) => return Ok(blocked),
        };
        let decided = GateRequest { addresses: vetted.addresses(), ..gate_request };
        let verdict = match live.gate.decide(decided).await {
            Verdict::Block(blocked) if hold::holds(&live.config, &blocked) => {
                hold::held(&self.state, &live, blocked, decided, started, self.drain.clone()).await
            }
            verdict => verdict,
        };
        let permit = match verdict {
            Verdict::Block(blocked) => {
                return Ok(answer_blocked(&self.state, blocked, request.headers(), started).await);
            }
            Verdict::Forward(permit) => permit,
        };
        // The audit promise (docs/decision-log.md): under `on_failure = "block"` the decision
        // is on disk before anything is forwarded; the response facts follow in a second line.
        if self.state.audit.on_failure() == OnFailure::Block
            && let Err(unrecorded) = self.state.audit.commit(permit.record()).await
        {
            warn!(error = %unrecorded.cause, "decision log unavailable; refusing to forward unaudited");
            return Ok(audit_unavailable());
        }
        // A withheld download (C17) is answered like any block: JSON if the agent accepts it.
        let accept = request.headers().get(ACCEPT).cloned();
        let response = match forward(&self.state, &context, &permit, request, self.drain.clone()).await {
            Ok(response) => response,
            Err(error) => {
                record(&self.state, permit.into_record(), started, Err(&error)).await;
                return Err(error);
            }
        };
        match permit.check_response(response.headers()) {
            Ok(permit) => {
                let (decision_record, slots) = permit.into_parts();
                record(&self.state, decision_record, started, Ok(response.status())).await;
                Ok(if slots.is_empty() { response } else { hold_until_body_ends(response, slots) })
            }
            // The origin's body is dropped unread: the client never gets a byte of it.
            Err(blocked) => {
                let accept = HeaderMap::from_iter(accept.map(|value| (ACCEPT, value)));
                Ok(answer_blocked(&self.state, *blocked, &accept, started).await)
            }
        }
    }

    /// Phase `route`: where the request goes. On the proxy port that is the absolute URI's
    /// origin; inside a tunnel it is always the CONNECT target.
    fn route(
        &self,
        started: Instant,
        request: Request<Incoming>,
    ) -> Result<(RequestContext, Request<Incoming>), ProxyError> {
        let uri = request.uri();
        let (scheme, authority) = match &self.target {
            Target::ProxyPort => {
                let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
                    return Err(ProxyError::NotAProxyRequest {
                        method: request.method().to_string(),
                        target: shown_target(uri),
                    });
                };
                if *scheme != Scheme::HTTP && *scheme != Scheme::HTTPS {
                    return Err(ProxyError::UnsupportedScheme { uri: shown_target(uri) });
                }
                (scheme.clone(), without_user_info(authority))
            }
            Target::Tunnel { authority, entry, .. } => {
                in_tunnel_form(&request, authority)?;
                log_misdirection(authority, &request);
                let scheme = if entry.is_tls() { Scheme::HTTPS } else { Scheme::HTTP };
                (scheme, authority.clone())
            }
            Target::Transparent { original, .. } => {
                let authority = transparent::named_authority(request.headers(), *original);
                in_tunnel_form(&request, &authority)?;
                (Scheme::HTTP, authority)
            }
        };
        tracing::Span::current().record("authority", field::display(&authority));
        let context = RequestContext { client: self.client, scheme, authority, started };
        Ok((context, request))
    }
}

/// Inside a tunnel (or a transparent connection) a request is origin-form (`/path`), and
/// never a CONNECT.
fn in_tunnel_form(request: &Request<Incoming>, authority: &Authority) -> Result<(), ProxyError> {
    let uri = request.uri();
    let starts_with_slash = uri.path_and_query().is_some_and(|p| p.as_str().starts_with('/'));
    if request.method() == Method::CONNECT || !starts_with_slash {
        return Err(ProxyError::BadTunnelRequest {
            method: request.method().to_string(),
            target: shown_target(uri),
            authority: authority.to_string(),
        });
    }
    Ok(())
}

/// Phase `block`: the answer to a blocked request (403, 407 or 429), recorded.
///
/// Boxed: a block holds its decision and record across the write, and every caller's
/// future would otherwise carry that on the allowed path too, copied at each move.
pub(crate) fn answer_blocked<'a>(
    state: &'a ProxyState,
    blocked: Blocked,
    request_headers: &'a HeaderMap,
    started: Instant,
) -> Pin<Box<dyn Future<Output = Response<ProxyBody>> + Send + 'a>> {
    Box::pin(async move {
        let response = blocked_response(&blocked, request_headers);
        record(state, blocked.into_record(), started, Ok(response.status())).await;
        response
    })
}

/// The response with `held` tied to its body, released when the body ends or is dropped
/// (the client hung up mid-response): a request's concurrency slots (C21), or its place in
/// the connection's requests in flight (`idle.rs`).
pub(super) fn hold_until_body_ends<H: Send + 'static>(response: Response<ProxyBody>, held: H) -> Response<ProxyBody> {
    response.map(|body| {
        body.map_frame(move |frame| {
            let _held = &held;
            frame
        })
        .boxed_unsync()
    })
}

impl hyper::service::Service<Request<Incoming>> for ProxyService {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move { Ok(service.handle(request).await) })
    }
}

/// Phase `forward`: rewrite the request for the origin, send it, rewrite the response head
/// and hand back the origin's body as a stream. For an upgrade that the origin accepts
/// (`101`), also start relaying bytes once both sides have switched.
async fn forward(
    state: &ProxyState,
    context: &RequestContext,
    permit: &Permitted,
    mut request: Request<Incoming>,
    drain: Drain,
) -> Result<Response<ProxyBody>, ProxyError> {
    let upgrade = if is_upgrade_request(request.version(), request.headers()) { Upgrade::Keep } else { Upgrade::Drop };
    let client_upgrade = (upgrade == Upgrade::Keep).then(|| hyper::upgrade::on(&mut request));
    let mut request = to_origin(context, request, upgrade)?;
    inject_headers(request.headers_mut(), permit.inject_headers());
    let mut response = state.upstream.send(&context.authority, request, upgrade).await?;
    let waited_ms = context.started.elapsed().as_millis() as u64;
    debug!(version = ?response.version(), waited_ms, "origin answered");
    match client_upgrade {
        Some(client_upgrade) if response.status() == StatusCode::SWITCHING_PROTOCOLS => {
            let origin_upgrade = hyper::upgrade::on(&mut response);
            let relay = drain.clone().until_stopped(relay_upgraded(client_upgrade, origin_upgrade, drain));
            tokio::spawn(relay.in_current_span());
            Ok(to_client(response, Upgrade::Keep))
        }
        _ => Ok(to_client(response, Upgrade::Drop)),
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

/// Phase `record`: completes the decision record with the answer and queues it. A record
/// that cannot be written is counted by the audit log and logged here; the answer already
/// went out.
pub(crate) async fn record(
    state: &ProxyState,
    record: DecisionRecord,
    started: Instant,
    status: Result<StatusCode, &ProxyError>,
) {
    let record = completed(record, started, status);
    state.metrics.record(&record);
    if let Err(unrecorded) = state.audit.record(&record).await {
        warn!(error = %unrecorded.cause, event_id = %record.id, "decision record not written");
    }
}

/// `record` with the answer: its status, duration, and for a failure the error and who is
/// at fault.
pub(crate) fn completed(
    mut record: DecisionRecord,
    started: Instant,
    status: Result<StatusCode, &ProxyError>,
) -> DecisionRecord {
    record.duration = Some(started.elapsed());
    match status {
        Ok(status) => record.status = Some(status.as_u16()),
        Err(error) => {
            record.status = Some(status_for(error).as_u16());
            record.outcome = LogOutcome::Error;
            record.error = Some(error.to_string());
            record.error_type = Some(error_type_for(error));
        }
    }
    record
}

/// The request as the origin gets it: an absolute URI on the routed origin (the pooled client
/// needs one and derives `Host` or `:authority` from it, so the client's `Host` is dropped),
/// HTTP/1.1 as the baseline version (the client picks h2 by ALPN), hop-by-hop fields out,
/// `Via` in. The body is the client's, streamed.
fn to_origin(
    context: &RequestContext,
    request: Request<Incoming>,
    upgrade: Upgrade,
) -> Result<Request<Incoming>, ProxyError> {
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
    parts.headers.remove(PURPOSE_HEADER);
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
    Response::from_parts(parts, body.boxed_unsync())
}

/// After a `101`: waits for both hyper connections to hand over their streams, then relays.
async fn relay_upgraded(client: OnUpgrade, origin: OnUpgrade, drain: Drain) {
    match tokio::try_join!(client, origin) {
        Ok((client, origin)) => splice(TokioIo::new(client), TokioIo::new(origin), drain, "upgraded connection").await,
        Err(error) => debug!(error = %error_chain(&error), "upgrade did not complete"),
    }
}

/// `host:port` without any `user:password@` (RFC 9110 §4.2.4: not sent on).
fn without_user_info(authority: &Authority) -> Authority {
    match authority.as_str().rsplit_once('@') {
        Some((_, host_port)) => host_port.parse().unwrap_or_else(|_| authority.clone()),
        None => authority.clone(),
    }
}

/// Inside a tunnel, the request's own idea of its host (`Host`, or the h2 `:authority`) is
/// ignored for routing; when it differs from the CONNECT target, say so once.
fn log_misdirection(tunnel: &Authority, request: &Request<Incoming>) {
    let named = request
        .uri()
        .host()
        .map(str::to_owned)
        .or_else(|| request.headers().get(HOST).and_then(|h| h.to_str().ok()).map(host_of));
    if let Some(named) = named
        && !named.eq_ignore_ascii_case(tunnel.host())
    {
        info!(named = %named, tunnel = %tunnel, "request names another host than its CONNECT target; routing to the CONNECT target");
    }
}

/// The host part of a `Host` value (`example.com:8443` → `example.com`, `[::1]:80` → `[::1]`).
fn host_of(host_header: &str) -> String {
    host_header.parse::<Authority>().map_or_else(|_| host_header.to_owned(), |a| a.host().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_info_is_not_sent_on() {
        let authority = Authority::from_static("user:secret@example.test:8080");
        assert_eq!(without_user_info(&authority).as_str(), "example.test:8080");
        assert_eq!(without_user_info(&Authority::from_static("example.test")).as_str(), "example.test");
    }

    #[test]
    fn host_header_host_part() {
        assert_eq!(host_of("example.com:8443"), "example.com");
        assert_eq!(host_of("[::1]:80"), "[::1]");
        assert_eq!(host_of("Example.com"), "Example.com");
    }
}
