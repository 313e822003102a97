//! Routing and answers of the admin API: the bearer-token check (which also says who the
//! caller is), one handler per endpoint, query parameters checked with errors that name the
//! parameter, `404` for an unknown path, `405` with `Allow` for a method an endpoint does not
//! take. Every answer is small and built in full, except the console's live
//! `/decisions/stream` (`super::stream`).
//!
//! Never: changes policy, limits or config; the only writes are a purge of cached policies
//! and an operator's answer to a held request (`super::approvals`).

use bytes::Bytes;
use http::header::{ALLOW, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{Either, Full};
use serde_json::{Value, json};

use super::server::AdminState;
use super::stream::StreamBody;
use super::{approvals, console, policies, stream};
use crate::audit::RECENT_CAPACITY;
use crate::metrics::Exposition;

/// The body of every admin answer but the live stream.
pub(super) type AdminBody = Full<Bytes>;

/// What the listener sends: a full answer, or the live stream's.
pub(super) type AnswerBody = Either<AdminBody, StreamBody>;

/// How many records `/decisions/recent` returns without `n`.
const DEFAULT_RECENT: usize = 100;

/// Who calls when the admin API has no token.
const ANONYMOUS: &str = "anonymous";

/// The endpoints, with the methods each takes (the `Allow` of a 405) and the query
/// parameters it reads (any other is a 400, so a misspelt one is not silently ignored). A
/// path ending in `/` takes one more segment, the id of what it acts on (`/approvals/{id}`).
type Endpoint = (&'static str, &'static str, &'static [&'static str]);
const ENDPOINTS: [Endpoint; 16] = [
    ("/", "GET", &[]),
    ("/console.js", "GET", &[]),
    ("/console.css", "GET", &[]),
    ("/login", "POST", &[]),
    ("/logout", "POST", &[]),
    ("/decisions/stream", "GET", &[]),
    ("/agents/summary", "GET", &[]),
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

/// Paths answered without credentials: liveness (a container health check needs no secret),
/// the console's static assets (they hold no data) and the login itself.
const OPEN: [&str; 4] = ["/healthz", "/console.js", "/console.css", "/login"];

/// One admin request, start to answer.
pub(super) async fn handle<B>(state: &AdminState, request: Request<B>) -> Response<AnswerBody>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let path = request.uri().path();
    let caller = authorized(state, &request);
    // The console's page answers a browser without credentials with its login form.
    if path == "/" && request.method() == Method::GET {
        return console::page(state, caller.is_some()).map(Either::Left);
    }
    if path == "/decisions/stream" && request.method() == Method::GET && caller.is_some() {
        return stream::open(state);
    }
    handle_full(state, request, caller).await.map(Either::Left)
}

/// Every answer but the live stream's, built in full.
async fn handle_full<B>(state: &AdminState, request: Request<B>, caller: Option<String>) -> Response<AdminBody>
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
        ("/login", _) => Ok(console::login(state, request).await),
        ("/logout", _) => Ok(console::logout(state, &request)),
        ("/agents/summary", _) => Ok(console::agents_summary(state)),
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
        ("/approvals", _) => Ok(approvals::list(state)),
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

/// Who the caller is: the name of the configured token the request carries (`admin` for
/// `[admin] token_sha256`), or of the token that opened its console session (a cookie,
/// `console::login`), or `anonymous` when none is configured; `None` when tokens are
/// configured and the request carries none of them.
fn authorized<B>(state: &AdminState, request: &Request<B>) -> Option<String> {
    if state.tokens.is_empty() {
        return Some(ANONYMOUS.to_owned());
    }
    let presented = request.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let bearer = presented.and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
    match bearer {
        Some(token) => token_name(state, token.trim()),
        None => console::session_name(state, request),
    }
}

/// The name of the configured token `token` is. Every digest is compared, so the timing does
/// not say which name matched.
pub(super) fn token_name(state: &AdminState, token: &str) -> Option<String> {
    let matched: Vec<&String> =
        state.tokens.iter().filter(|(_, digest)| digest.matches(token)).map(|(name, _)| name).collect();
    matched.first().map(|name| (*name).clone())
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

/// A query parameter at fault: answered `400` with a JSON error naming it.
#[derive(Debug)]
pub(super) struct BadParameter {
    name: String,
    message: String,
}

impl BadParameter {
    pub(super) fn new(name: &str, message: String) -> Self {
        BadParameter { name: name.to_owned(), message }
    }

    pub(super) fn response(self) -> Response<AdminBody> {
        error(StatusCode::BAD_REQUEST, Some(&self.name), &self.message)
    }
}

/// The query parameters of one request, percent-decoded; each name at most once.
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: Option<&str>, known: &[&str]) -> Result<Query, BadParameter> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            if !known.contains(&&*name) {
                let expected = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                let message = format!("unknown parameter {name:?}; this endpoint reads: {expected}");
                return Err(BadParameter::new(&name, message));
            }
            if pairs.iter().any(|(seen, _)| *seen == name) {
                return Err(BadParameter::new(&name, format!("{name} is given more than once")));
            }
            pairs.push((name.into_owned(), value.into_owned()));
        }
        Ok(Query(pairs))
    }

    /// The value of `name`, if given.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The value of `name`, or a 400 naming it when it is missing or empty.
    pub(super) fn required(&self, name: &str, example: &str) -> Result<&str, BadParameter> {
        match self.get(name) {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(BadParameter::new(name, format!("{name} is required, e.g. {name}={example}"))),
        }
    }
}

/// A `status` answer with `body` of `content_type`.
pub(super) fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<AdminBody> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON answer.
pub(super) fn json_response(status: StatusCode, body: &Value) -> Response<AdminBody> {
    text(status, "application/json", body.to_string())
}

/// A JSON error: `{"error": message, "parameter": name}` (the parameter when one is at fault).
pub(super) fn error(status: StatusCode, parameter: Option<&str>, message: &str) -> Response<AdminBody> {
    let body = match parameter {
        Some(parameter) => json!({"error": message, "parameter": parameter}),
        None => json!({"error": message}),
    };
    json_response(status, &body)
}
