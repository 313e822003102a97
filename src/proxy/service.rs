//! The one request service. Requests on the proxy port (absolute-form or CONNECT) and
//! requests inside a CONNECT tunnel (intercepted TLS or plain HTTP) all enter here and run
//! the same phases: `route` (work out where the request goes: a `RequestContext`), the
//! agent's egress lists (`Gate::check_egress`, and `super::hold::admit_host` for a host a
//! human may admit), the network guard (`check_destination`), the gate
//! (`crate::gate::Gate::decide`: block, or a `Permitted`), `hold` (a block a human may
//! approve waits for one, `super::hold`), `inspect` (for an `[inspect]` host and agent only:
//! the body read, bounded, and the request scanned for credentials, `super::inspect`), `mcp`
//! (for an `[[mcp]]` host only: the same read body's tool calls ruled, `super::mcp`),
//! `forward` (rewrite, send upstream,
//! stream the answer back), then `record` (the decision record, once the status is known).
//! See `docs/request-flow.md`.
//!
//! Never decides allow or deny itself, never reads policy, never buffers a body (`inspect`
//! does, for the requests `[inspect]` and `[[mcp]]` name).

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use http::header::{ACCEPT, HOST};
use http::uri::{Authority, Scheme};
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tracing::{Instrument, debug, info, info_span, warn};

use super::answer::{Exit, error_response};
use super::body::{BodyError, ProxyBody};
use super::conn::Drain;
use super::context::{Entry, Generation, ProxyState, RequestContext};
use super::destination::{Ask, check_destination};
use super::error::{MAX_METHOD_LEN, ProxyError, shown_target};
use super::forward::forward;
use super::hold;
use super::inspect::{Vetting, vet_body};
use super::local;
use super::record::{Ending, RequestRecord};
use super::recording;
use super::tunnel::{self, handle_connect};
use crate::agents::Identity;
use crate::fetch::Origin;
use crate::gate::{Admitted, Blocked, GateRequest, Permitted, Verdict};
use crate::net::host::host_part;
use crate::secrets::Plan;

/// Where a connection's requests go: the proxy port, or the inside of one CONNECT tunnel.
#[derive(Clone, Debug)]
enum Target {
    ProxyPort,
    /// Every request in a tunnel is the agent identified at its CONNECT, and its host is
    /// admitted when a human admitted the CONNECT's (`admitted`).
    Tunnel {
        authority: Authority,
        /// The origin every request in the tunnel goes to, made once (`None` when the
        /// CONNECT target is no origin: each request is then refused as it comes).
        origin: Option<Arc<Origin>>,
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

/// Whether the request's client still waits for its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Client {
    Waiting,
    /// Closed before the request was taken: decided and recorded, never forwarded or held.
    Gone,
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
        let origin = Origin::from_parts(&tunnel_scheme(entry), &authority).ok().map(Arc::new);
        ProxyService { state, client, target: Target::Tunnel { authority, origin, entry, agent, admitted }, drain }
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

    /// One request, start to response head (inside its tracing span, `call`), with its one
    /// decision record: started here, finished here with whatever answer the phases ended
    /// with, and written from `Drop` should the client hang up first (`record`). A request
    /// whose client had gone before it was taken ([`Client::Gone`], [`Unpolled`]) is decided
    /// and recorded the same way, but never forwarded or held for a human: a refusal is
    /// recorded with the answer it would have had, a forward as hung up with its decision, so
    /// an agent cannot probe forbidden paths unseen by sending each request whole and closing
    /// at once.
    async fn handle(self, request: Request<Incoming>, client: Client) -> Result<Response<ProxyBody>, Infallible> {
        let mut record = RequestRecord::start(Arc::clone(&self.state), self.drain.clone());
        let entry = match &self.target {
            Target::ProxyPort => Entry::Forward,
            Target::Tunnel { entry, .. } => *entry,
            Target::Transparent { .. } => Entry::Transparent { tls: false },
        };
        let method = request.method().clone();
        let response = match self.run_phases(&mut record, request, client).await {
            Ok(response) | Err(Exit::Answered(response)) => {
                record.finish(Ending::Answered(response.status())).await;
                response
            }
            Err(Exit::Failed(error)) => {
                let response = error_response(&error);
                // A client's mistake is routine; an origin or proxy failure deserves attention.
                // Both name what the agent typed, a secret's value in it redacted.
                let entry = entry.as_str();
                let gate = &self.state.generation().gate;
                let (shown, method) = (error.to_string(), method.as_str());
                let (shown, method) = (gate.redacted(&shown), gate.redacted(method));
                if response.status().is_client_error() {
                    info!(error = %shown, %method, entry, "request refused");
                } else {
                    warn!(error = %shown, %method, entry, "request failed");
                }
                record.finish(Ending::Failed(&error)).await;
                response
            }
            // Nobody reads it; the record's `Drop` writes it as hung up, with its decision.
            Err(Exit::Gone) => Response::default(),
        };
        // The decision log is the per-request record; this line is for debugging only
        // (at `info` it cost about a tenth of a request's CPU, bench/RESULTS.md).
        let elapsed_ms = record.started().elapsed().as_millis() as u64;
        debug!(status = response.status().as_u16(), elapsed_ms, "response");
        Ok(response)
    }

    /// The phases in order, each named: a CONNECT on the proxy port opens a tunnel; every
    /// other request is routed, identified, admitted, vetted, decided, then forwarded. A
    /// phase that answers instead (a block, a local page, an error) ends the request there.
    /// For a client already gone ([`Client::Gone`]) they end at the decision.
    async fn run_phases(
        &self,
        record: &mut RequestRecord,
        request: Request<Incoming>,
        client: Client,
    ) -> Result<Response<ProxyBody>, Exit> {
        if request.method() == Method::CONNECT && matches!(self.target, Target::ProxyPort) {
            // Boxed: once per tunnel, and its future would otherwise be part of every
            // request's (the hot path, `docs/request-flow.md`).
            return Box::pin(handle_connect(&self.state, self.client, self.drain.clone(), record, request)).await;
        }
        let (context, request) = self.route(record.started(), request)?;
        if !matches!(self.target, Target::Transparent { .. }) {
            self.answer_locally(record, &context, &request)?;
        }
        // One config generation for the whole request, whatever a reload swaps in meanwhile.
        let live = self.state.generation();
        let tunnel_origin = match &self.target {
            Target::Tunnel { origin, .. } => origin.as_deref(),
            Target::ProxyPort | Target::Transparent { .. } => None,
        };
        let named = Named::of(&context, &request, tunnel_origin)?;
        let (agent, entry, tunnel_admitted) = self.identify_agent(&live, record, &context, &named, &request)?;
        let gate_request = GateRequest {
            client: context.client,
            agent: &agent,
            origin: &named.origin,
            url: &named.url,
            method: request.method().as_str(),
            path_and_query: path_and_query(&request),
            headers: request.headers(),
            addresses: &[],
            entry,
            admitted: tunnel_admitted,
        };
        record.undecided(live.gate.undecided(&gate_request));
        let length = gate_request.method.len();
        if length > MAX_METHOD_LEN {
            return Err(ProxyError::MethodTooLong { length }.into());
        }
        let (secrets, admitted) = self.check_egress(&live, record, gate_request).await?;
        let gate_request = GateRequest { admitted: admitted.as_ref().or(tunnel_admitted), ..gate_request };
        self.check_host(record, &context, &request).await?;
        // Held until the request is forwarded: the connector dials these addresses.
        let vetted = check_destination(&self.state, &live, record, gate_request, Ask::Request).await?;
        let host = named.origin.host();
        let vetting = Vetting {
            inspected: live.settings.inspect.applies(host, &agent.id),
            mcp: live.settings.mcp.served(host, &agent.id),
        };
        // A request forwarded straight after its decision (no body read first, no recording
        // answering it) is written with its undecided record once the gate lets it through;
        // the others keep theirs until they are forwarded.
        let straight = !vetting.inspected && vetting.mcp.is_none() && self.state.record.replay().is_none();
        // Phase `decide`: the gate's verdict, awaited here rather than in a phase function
        // around it, whose future would be one more move of the gate's per request.
        let gate_request = GateRequest { addresses: vetted.addresses(), ..gate_request };
        let undecided = || if straight { record.take_undecided() } else { None };
        let verdict = live.gate.decide_reusing(gate_request, Some(secrets), undecided).await;
        let permit = match verdict {
            Verdict::Forward(permit) => permit,
            Verdict::Block(blocked) if client == Client::Gone => return Err(record.block(blocked, request.headers())),
            Verdict::Block(blocked) => self.hold(&live, record, blocked, gate_request).await?,
        };
        if client == Client::Gone {
            record.permitted(permit);
            return Err(Exit::Gone);
        }
        // A withheld download (C17) is answered like any block: JSON if the agent accepts it.
        let accept = request.headers().get(ACCEPT).cloned();
        let (permit, request, answer_filter) = if vetting.inspected || vetting.mcp.is_some() {
            // Boxed: only inspected and MCP requests pay for the body read's future (the hot
            // path, `docs/request-flow.md`).
            let drain = self.drain.clone();
            Box::pin(vet_body((&self.state, &live), record, permit, request, &context, vetting, drain)).await?
        } else {
            // Streamed, as every request outside `[inspect]` and `[[mcp]]` is.
            (permit, request.map(|body| body.map_err(BodyError::from).boxed_unsync()), None)
        };
        // A tunnel's agent was identified at its CONNECT: its key is the one in force now, so a
        // rotated key signs from the first request after the reload (docs/signing.md).
        let signing = live.gate.current_agent(agent.agent.id()).unwrap_or(&agent.agent);
        let mut permit = permit;
        if let Some(signer) = signing.signer() {
            permit.mark_signed(signer.keyid());
        }
        // `mode = "replay"`: answered from the recording, never forwarded (`recording`).
        if let Some(recording) = self.state.record.replay() {
            let (url, host) = (named.url.as_str(), context.authority.as_str());
            // Boxed: its future (~4.8 KiB) would otherwise be part of every request's.
            return Box::pin(recording::replay(recording, record, permit, (url, host), request, accept)).await;
        }
        let forwarding = record.forwarding(permit).await?;
        let (request, tap) = recording::tap(&self.state, &live, forwarding.0, &named.url, request);
        let response = match forward(&self.state, &context, forwarding, signing, request, self.drain.clone()).await {
            Ok(response) => response,
            // A request body a sending budget cut is answered with the budget, not the error.
            Err(error) => return Err(record.forward_failed(error, accept)),
        };
        let response = match answer_filter {
            Some(filter) => filter.apply(response),
            None => response,
        };
        Ok(record.answered(recording::answered(tap, response), accept).await)
    }

    /// Phase `local`: a request to `agentgate.local` is answered by agentgate itself, before
    /// anything is looked up (`local.rs`).
    #[expect(
        clippy::result_large_err,
        reason = "Exit is a phase's early return, moved once per request; boxing it would cost every blocked request an allocation"
    )]
    fn answer_locally(
        &self,
        record: &mut RequestRecord,
        context: &RequestContext,
        request: &Request<Incoming>,
    ) -> Result<(), Exit> {
        if !local::is_local(context.authority.host()) {
            return Ok(());
        }
        Err(Exit::Answered(local::answer(&self.state, record, context, request)))
    }

    /// Phase `identify_agent`: on the proxy port, the agent of each request (`407` when
    /// `[auth] required` is not met); inside a tunnel, the one identified at its CONNECT (and
    /// a human's admission of the tunnel's host); on a transparent connection, the client
    /// address's.
    #[expect(
        clippy::result_large_err,
        reason = "Exit is a phase's early return, moved once per request; boxing it would cost every blocked request an allocation"
    )]
    fn identify_agent<'s>(
        &'s self,
        live: &Generation,
        record: &mut RequestRecord,
        context: &RequestContext,
        named: &Named,
        request: &Request<Incoming>,
    ) -> Result<(Identity, Entry, Option<&'s Admitted>), Exit> {
        match &self.target {
            Target::Tunnel { agent, entry, admitted, .. } => Ok((agent.clone(), *entry, admitted.as_deref())),
            Target::Transparent { agent, .. } => Ok((agent.clone(), Entry::Transparent { tls: false }, None)),
            Target::ProxyPort => {
                let (method, headers) = (request.method().as_str(), request.headers());
                match live.gate.identify_agent(context.client, method, &named.url, headers) {
                    Ok(agent) => Ok((agent, Entry::Forward, None)),
                    Err(blocked) => Err(record.block(*blocked, headers)),
                }
            }
        }
    }

    /// Phase `check_egress` (`hold::check_egress`, as a tunnel's host-level decision takes it):
    /// the secrets plan it makes goes on to the gate's verdict.
    async fn check_egress(
        &self,
        live: &Generation,
        record: &mut RequestRecord,
        request: GateRequest<'_>,
    ) -> Result<(Plan, Option<Admitted>), Exit> {
        match hold::check_egress(&self.state, live, record, request, self.drain.clone()).await {
            Ok(checked) => Ok(checked),
            Err(blocked) => Err(record.block(blocked, request.headers)),
        }
    }

    /// Phase `check_host`, on a transparent connection only: the site the `Host` names must
    /// be the one the client connected to (no fronting); an `agentgate.local` it names is then
    /// answered locally, as on the proxy port.
    async fn check_host(
        &self,
        record: &mut RequestRecord,
        context: &RequestContext,
        request: &Request<Incoming>,
    ) -> Result<(), Exit> {
        let Target::Transparent { original, agent } = &self.target else { return Ok(()) };
        Box::pin(tunnel::check_host(&self.state, record, *original, agent, context, request)).await?;
        self.answer_locally(record, context, request)
    }

    /// Phase `hold`, after the gate's verdict (`Gate::decide`) was a block: one a human may
    /// approve waits for one (`hold`); any other is answered.
    async fn hold(
        &self,
        live: &Generation,
        record: &mut RequestRecord,
        blocked: Blocked,
        request: GateRequest<'_>,
    ) -> Result<Permitted, Exit> {
        let verdict = match hold::holds(&live.settings, &blocked) {
            true => hold::held(&self.state, live, record, blocked, request, self.drain.clone()).await,
            false => Verdict::Block(blocked),
        };
        match verdict {
            Verdict::Forward(permit) => Ok(permit),
            Verdict::Block(blocked) => Err(record.block(blocked, request.headers)),
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
                (tunnel_scheme(*entry), authority.clone())
            }
            Target::Transparent { original, .. } => {
                let authority = tunnel::named_authority(request.headers(), *original);
                in_tunnel_form(&request, &authority)?;
                (Scheme::HTTP, authority)
            }
        };
        let context = RequestContext { client: self.client, scheme, authority, started };
        Ok((context, request))
    }
}

/// The scheme of the requests inside a tunnel: `https` where agentgate terminates its TLS.
fn tunnel_scheme(entry: Entry) -> Scheme {
    if entry.is_tls() { Scheme::HTTPS } else { Scheme::HTTP }
}

/// Where a routed request goes, as the gate and the decision log name it.
struct Named<'t> {
    /// The origin, its host canonical (`crate::net::host`): a tunnel's, made once, or the
    /// request's own.
    origin: Cow<'t, Origin>,
    /// `scheme://host[:port]/path?query`: the canonical host, with the port as sent.
    url: String,
}

impl<'t> Named<'t> {
    /// `tunnel` is the tunnel's origin, the same as `context`'s scheme and authority make.
    fn of(
        context: &RequestContext,
        request: &Request<Incoming>,
        tunnel: Option<&'t Origin>,
    ) -> Result<Self, ProxyError> {
        let origin = match tunnel {
            Some(origin) => Cow::Borrowed(origin),
            None => Cow::Owned(
                Origin::from_parts(&context.scheme, &context.authority)
                    .map_err(|_| ProxyError::UnsupportedScheme { uri: shown_target(request.uri()) })?,
            ),
        };
        // Pushed piece by piece into one buffer sized for it: no formatting on the hot path.
        let (scheme, host, path) = (context.scheme.as_str(), origin.host(), path_and_query(request));
        let port = context.authority.port();
        let port = port.as_ref().map_or("", |p| p.as_str());
        let mut url = String::with_capacity(scheme.len() + host.len() + port.len() + path.len() + 4);
        for piece in [scheme, "://", host, if port.is_empty() { "" } else { ":" }, port, path] {
            url.push_str(piece);
        }
        Ok(Named { origin, url })
    }
}

/// The request's path and query, `/` when it has none.
fn path_and_query(request: &Request<Incoming>) -> &str {
    request.uri().path_and_query().map_or("/", |p| p.as_str())
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

impl hyper::service::Service<Request<Incoming>> for ProxyService {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, Infallible>> + Send>>;

    /// The request's future is boxed as it is made, inside its span, with no wrapper future
    /// around it: every layer between hyper and the phases would be a move of the whole
    /// state machine, a few KiB, per request (bench/RESULTS.md, round 9).
    fn call(&self, request: Request<Incoming>) -> Self::Future {
        // Only the request's number on its span: the client is on the connection's (or the
        // tunnel's) span around it, and the lines that report a request's failure name its
        // method and entry themselves, so no per-request field is formatted unless a line
        // is written (the span's fields cost ~5 % of a request's CPU, bench/RESULTS.md).
        let span = info_span!("request", id = %self.state.next_request_id());
        // The span is put on inside `serve`: wrapped around it here, the request's whole future
        // (~12 KiB) was moved once more before it reached its box.
        Box::pin(Unpolled { service: self.clone(), request: Some(request), span }.serve())
    }
}

/// A request hyper has taken but whose future has not run yet. hyper drops that future
/// unpolled when the client's FIN arrived with the request; the request is then decided and
/// recorded all the same, on a task of its own ([`Client::Gone`]).
/// A CONNECT is not: the tunnel it asks for cannot open without its client.
struct Unpolled {
    service: ProxyService,
    request: Option<Request<Incoming>>,
    span: tracing::Span,
}

impl Unpolled {
    async fn serve(mut self) -> Result<Response<ProxyBody>, Infallible> {
        let (service, request, span) = (self.service.clone(), self.request.take(), self.span.clone());
        drop(self);
        match request {
            Some(request) => service.handle(request, Client::Waiting).instrument(span).await,
            // Not reached: the request is taken here, once.
            None => Ok(Response::default()),
        }
    }
}

impl Drop for Unpolled {
    fn drop(&mut self) {
        let Some(request) = self.request.take() else { return };
        if request.method() == Method::CONNECT {
            return;
        }
        // Dropped inside the connection's task, so a runtime is there; without one (the
        // runtime itself shutting down) the request goes with the process's other work.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let service = self.service.clone();
        runtime.spawn(service.handle(request, Client::Gone).instrument(self.span.clone()));
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
/// ignored for routing; when it differs from the CONNECT target, say so once. Compared where
/// it lies ([`host_part`]): this runs on every request in a tunnel, and parsing and copying
/// the `Host` cost two allocations a request (bench/RESULTS.md).
fn log_misdirection(tunnel: &Authority, request: &Request<Incoming>) {
    let named =
        request.uri().host().or_else(|| request.headers().get(HOST).and_then(|h| h.to_str().ok()).map(host_part));
    if let Some(named) = named
        && !named.eq_ignore_ascii_case(tunnel.host())
    {
        info!(named = %named, tunnel = %tunnel, "request names another host than its CONNECT target; routing to the CONNECT target");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tunnel_s_origin_is_the_one_its_requests_are_routed_to() {
        let authority = Authority::from_static("Example.TEST:8443");
        for (entry, scheme) in [
            (Entry::Mitm, "https"),
            (Entry::Transparent { tls: true }, "https"),
            (Entry::PlainTunnel, "http"),
            (Entry::Transparent { tls: false }, "http"),
        ] {
            // What `for_tunnel` makes once, from the scheme `route` gives each request.
            let origin = Origin::from_parts(&tunnel_scheme(entry), &authority).expect("an origin");
            assert_eq!(origin.text(), format!("{scheme}://example.test:8443"), "{entry:?}");
        }
    }

    #[test]
    fn user_info_is_not_sent_on() {
        let authority = Authority::from_static("user:secret@example.test:8080");
        assert_eq!(without_user_info(&authority).as_str(), "example.test:8080");
        assert_eq!(without_user_info(&Authority::from_static("example.test")).as_str(), "example.test");
    }
}
