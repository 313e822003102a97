//! Routing and answers of the admin API: the bearer-token check (which also says who the
//! caller is), one handler per endpoint, query parameters checked with errors that name the
//! parameter, `404` for an unknown path, `405` with `Allow` for a method an endpoint does not
//! take. Every answer is small and built in full, except the console's live
//! `/decisions/stream` (`super::stream`).
//!
//! Never: changes policy, limits or config; the only writes are a purge of cached policies
//! and an operator's answer to a held request (`super::approvals`).

use bytes::Bytes;
use http::header::{ALLOW, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Either;

use super::access::ANONYMOUS;
use super::admission::Ticket;
use super::answer::{AdminBody, BadParameter, Query, error, text};
use super::hosts::Arrival;
use super::state::AdminState;
use super::stream::AnswerBody;
use super::{agents, approvals, console, policies};
use crate::audit::RECENT_CAPACITY;
use crate::metrics::Exposition;

/// How many records `/decisions/recent` returns without `n`.
const DEFAULT_RECENT: usize = 100;

/// The endpoints, with the methods each takes (the `Allow` of a 405) and the query
/// parameters it reads (any other is a 400, so a misspelt one is not silently ignored). A
/// path ending in `/` takes one more segment, the id of what it acts on (`/approvals/{id}`).
type Endpoint = (&'static str, &'static str, &'static [&'static str]);
const ENDPOINTS: [Endpoint; 18] = [
    ("/", "GET", &[]),
    ("/console.js", "GET", &[]),
    ("/console.css", "GET", &[]),
    ("/login", "POST", &[]),
    ("/logout", "POST", &[]),
    ("/decisions/stream", "GET", &[]),
    ("/agents/summary", "GET", &[]),
    ("/report", "GET", &[]),
    ("/agents", "GET", &[]),
    ("/healthz", "GET", &[]),
    ("/readyz", "GET", &[]),
    ("/metrics", "GET", &[]),
    ("/ca.pem", "GET", &[]),
    ("/policies", "GET, DELETE", &["origin"]),
    ("/explain", "GET", &["url", "method", "agent"]),
    ("/decisions/recent", "GET", &["n"]),
    ("/approvals", "GET", &[]),
    ("/approvals/", "POST", &[]),
];

/// Paths answered without credentials: liveness and readiness (a container's probes send no
/// secret; both answer a fixed word), the console's static assets (they hold no data) and the
/// login itself.
const OPEN: [&str; 5] = ["/healthz", "/readyz", "/console.js", "/console.css", "/login"];

/// One admin request, start to answer: first whether it is addressed to this API at all
/// (`super::hosts`), then who calls (`super::access`, a wrong token answered late; a right
/// one keeps its connection's `place` from being pushed out), then the endpoint.
pub(super) async fn handle<B>(
    state: &AdminState,
    request: Request<B>,
    at: Arrival,
    place: &Ticket,
) -> Response<AnswerBody>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if let Some(refused) = state.access.hosts.refusal(&request, &at) {
        return refused.map(Either::Left);
    }
    let path = request.uri().path();
    let caller = state.access.caller(&request, at.peer.ip(), !OPEN.contains(&path)).await;
    if caller.as_deref().is_some_and(|caller| caller != ANONYMOUS) {
        place.authenticated();
    }
    // The console's page answers a browser without credentials with its login form.
    if path == "/" && request.method() == Method::GET {
        return console::page(state, caller.is_some()).map(Either::Left);
    }
    if path == "/decisions/stream" && request.method() == Method::GET && caller.is_some() {
        return state.streams.open(&state.audit);
    }
    handle_full(state, request, caller, at).await.map(Either::Left)
}

/// Every answer but the live stream's, built in full.
async fn handle_full<B>(
    state: &AdminState,
    request: Request<B>,
    caller: Option<String>,
    at: Arrival,
) -> Response<AdminBody>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let path = request.uri().path();
    // Everything not open, unknown paths included, needs the token first.
    if !OPEN.contains(&path) && caller.is_none() {
        let mut response = error(
            StatusCode::UNAUTHORIZED,
            None,
            "this admin API needs `Authorization: Bearer TOKEN` ([admin] token_sha256 or [[admin.tokens]])",
        );
        response.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"agentgate admin\""));
        return response;
    }
    let Some((endpoint, allowed, parameters)) = ENDPOINTS.iter().find(|(p, _, _)| routes_to(p, path)).copied() else {
        return error(StatusCode::NOT_FOUND, None, &format!("no admin endpoint at {path}; see docs/admin.md"));
    };
    let id = &path[endpoint.len()..];
    let method = request.method().clone();
    if !allowed.split(", ").any(|m| m == method.as_str()) {
        let mut response =
            error(StatusCode::METHOD_NOT_ALLOWED, None, &format!("{path} answers {allowed}, not {method}"));
        response.headers_mut().insert(ALLOW, HeaderValue::from_static(allowed));
        return response;
    }
    let query = match Query::parse(request.uri().query(), parameters) {
        Ok(query) => query,
        Err(bad) => return bad.response(),
    };
    let answer = match (endpoint, method) {
        ("/console.js" | "/console.css", _) => Ok(console::asset(endpoint)),
        ("/login", _) => Ok(console::login(state, request, at.peer.ip()).await),
        ("/logout", _) => Ok(console::logout(state, &request)),
        ("/agents/summary", _) => Ok(console::agents_summary(state)),
        ("/report", _) => Ok(console::report(state).await),
        ("/agents", _) => Ok(agents::list(state)),
        ("/healthz", _) => Ok(text(StatusCode::OK, "text/plain; charset=utf-8", "ok\n".to_owned())),
        ("/readyz", _) => Ok(ready(state)),
        ("/metrics", _) => {
            let scraped = state.scraped().await;
            let accept = request.headers().get(http::header::ACCEPT).and_then(|v| v.to_str().ok());
            let format = Exposition::for_accept(accept);
            Ok(text(StatusCode::OK, format.content_type(), format.render(state.metrics.encode(scraped))))
        }
        ("/ca.pem", _) => Ok(text(StatusCode::OK, "application/x-pem-file", state.certs.ca_cert_pem().to_owned())),
        ("/policies", Method::DELETE) => policies::purge(state, &query).await,
        ("/policies", _) => policies::show(state, &query).await,
        ("/explain", _) => policies::explain(state, &query).await,
        ("/approvals", _) => Ok(approvals::list(state).await),
        ("/approvals/", _) => {
            let caller = caller.unwrap_or_else(|| ANONYMOUS.to_owned());
            let id = id.to_owned();
            let (parts, body) = request.into_parts();
            Ok(approvals::decide(state, &id, caller, &parts.headers, body).await)
        }
        _ => recent(state, &query),
    };
    answer.unwrap_or_else(BadParameter::response)
}

/// Whether `path` is `endpoint`'s: the same, or for an endpoint ending in `/` (the console's
/// `/` itself aside), one more non-empty segment.
fn routes_to(endpoint: &str, path: &str) -> bool {
    match endpoint.strip_suffix('/').filter(|prefix| !prefix.is_empty()) {
        Some(_) => path.strip_prefix(endpoint).is_some_and(|id| !id.is_empty() && !id.contains('/')),
        None => endpoint == path,
    }
}

/// `/readyz`: 200 while the proxy serves with its CA loaded and a healthy decision log.
fn ready(state: &AdminState) -> Response<AdminBody> {
    if state.is_draining() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", "shutting down\n".to_owned());
    }
    if state.certs.ca_cert_pem().is_empty() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", "CA not loaded\n".to_owned());
    }
    if let Some(failure) = state.audit.write_error() {
        return text(StatusCode::SERVICE_UNAVAILABLE, "text/plain; charset=utf-8", format!("{failure}\n"));
    }
    text(StatusCode::OK, "text/plain; charset=utf-8", "ready\n".to_owned())
}

/// `/decisions/recent?n=N`: the latest `n` decision-log lines, newest first, as a JSON array
/// of the lines exactly as written to the log.
fn recent(state: &AdminState, query: &Query) -> Result<Response<AdminBody>, BadParameter> {
    let n = match query.get("n") {
        None => DEFAULT_RECENT,
        Some(raw) => match raw.parse::<usize>() {
            Ok(n) if (1..=RECENT_CAPACITY).contains(&n) => n,
            _ => {
                let message = format!("n = {raw:?}: must be a whole number from 1 to {RECENT_CAPACITY}");
                return Err(BadParameter::new("n", message));
            }
        },
    };
    let lines = state.audit.recent().latest(n);
    let mut body = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum::<usize>() + 2);
    body.push('[');
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            body.push(',');
        }
        body.push_str(line);
    }
    body.push(']');
    Ok(text(StatusCode::OK, "application/json", body))
}
