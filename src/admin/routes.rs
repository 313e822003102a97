//! Routing and answers of the admin API: the bearer-token check (which also says who the
//! caller is), one handler per endpoint, query parameters checked with errors that name the
//! parameter, `404` for an unknown path, `405` with `Allow` for a method an endpoint does not
//! take. Every answer is small and built in full, except the console's live
//! `/decisions/stream` (`super::stream`).
//!
//! Never: changes policy, limits or config; the only writes are a purge of cached policies
//! and an operator's answer to a held request (`super::approvals`).

use bytes::Bytes;
use http::header::{ALLOW, CONTENT_TYPE, WWW_AUTHENTICATE};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use serde_json::{Value, json};

use super::access::ANONYMOUS;
use super::hosts::Arrival;
use super::server::AdminState;
use super::stream::StreamBody;
use super::{agents, approvals, console, policies, stream};
use crate::audit::RECENT_CAPACITY;
use crate::metrics::Exposition;

/// The body of every admin answer but the live stream.
pub(super) type AdminBody = Full<Bytes>;

/// What the listener sends: a full answer, or the live stream's.
pub(super) type AnswerBody = Either<AdminBody, StreamBody>;

/// How many records `/decisions/recent` returns without `n`.
const DEFAULT_RECENT: usize = 100;

/// The endpoints, with the methods each takes (the `Allow` of a 405) and the query
/// parameters it reads (any other is a 400, so a misspelt one is not silently ignored). A
/// path ending in `/` takes one more segment, the id of what it acts on (`/approvals/{id}`).
type Endpoint = (&'static str, &'static str, &'static [&'static str]);
const ENDPOINTS: [Endpoint; 17] = [
    ("/", "GET", &[]),
    ("/console.js", "GET", &[]),
    ("/console.css", "GET", &[]),
    ("/login", "POST", &[]),
    ("/logout", "POST", &[]),
    ("/decisions/stream", "GET", &[]),
    ("/agents/summary", "GET", &[]),
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

/// Paths answered without credentials: liveness (a container health check needs no secret),
/// the console's static assets (they hold no data) and the login itself.
const OPEN: [&str; 4] = ["/healthz", "/console.js", "/console.css", "/login"];

/// One admin request, start to answer: first whether it is addressed to this API at all
/// (`super::hosts`), then who calls (`super::access`, a wrong token answered late), then the
/// endpoint.
pub(super) async fn handle<B>(state: &AdminState, request: Request<B>, at: Arrival) -> Response<AnswerBody>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if let Some(refused) = state.access.hosts.refusal(&request, &at) {
        return refused.map(Either::Left);
    }
    let path = request.uri().path();
    let caller = state.access.caller(&request, at.peer.ip(), !OPEN.contains(&path)).await;
    // The console's page answers a browser without credentials with its login form.
    if path == "/" && request.method() == Method::GET {
        return console::page(state, caller.is_some()).map(Either::Left);
    }
    if path == "/decisions/stream" && request.method() == Method::GET && caller.is_some() {
        return stream::open(state);
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

/// How long a client may take to send a request body once its head has arrived: a local
/// process that sends a head and never the body must not hold an admin connection (the API
/// has 64) for longer than it may take to send the head (`server::HEADER_READ_TIMEOUT`).
pub(super) const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a request body was not read.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyError {
    /// Over the endpoint's bound (declared or sent).
    #[error("the body is over {0} bytes")]
    TooLarge(usize),
    /// Not all sent within [`BODY_READ_TIMEOUT`].
    #[error("the body did not arrive within {}s", BODY_READ_TIMEOUT.as_secs())]
    Slow,
    /// The connection failed while it was read.
    #[error("cannot read the body: {0}")]
    Broken(String),
}

impl BodyError {
    /// The status to answer with: `413`, `408` or `400`.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Slow => StatusCode::REQUEST_TIMEOUT,
            BodyError::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Reads a request body whole, bounded in bytes (`max`, the declared `Content-Length`
/// checked first) and in time ([`BODY_READ_TIMEOUT`]). The one way an admin endpoint reads a
/// body (test `admin::routes::tests::a_body_that_never_arrives_is_given_up_on`).
pub(super) async fn read_body<B>(headers: &http::HeaderMap, body: B, max: usize) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let declared =
        headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > max as u64) {
        return Err(BodyError::TooLarge(max));
    }
    match tokio::time::timeout(BODY_READ_TIMEOUT, Limited::new(body, max).collect()).await {
        Err(_) => Err(BodyError::Slow),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(cause)) if cause.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError::TooLarge(max)),
        Ok(Err(cause)) => Err(BodyError::Broken(cause.to_string())),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_arrives_is_given_up_on() {
        // A head that promises 10 bytes, and a body whose sender never sends them.
        let (_sender, body) = http_body_util::channel::Channel::<Bytes, std::io::Error>::new(1);
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("10"));
        let read = read_body(&headers, body, 4096).await;
        assert!(matches!(read, Err(BodyError::Slow)), "{read:?}");
        assert_eq!(read.map_err(|e| e.status()).err(), Some(StatusCode::REQUEST_TIMEOUT));
    }

    #[tokio::test]
    async fn a_body_over_its_bound_is_refused_declared_or_sent() {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("5000"));
        let declared = read_body(&headers, Full::new(Bytes::from_static(b"{}")), 4096).await;
        assert!(matches!(declared, Err(BodyError::TooLarge(4096))), "{declared:?}");
        let sent = read_body(&http::HeaderMap::new(), Full::new(Bytes::from(vec![b'x'; 5000])), 4096).await;
        assert!(matches!(sent, Err(BodyError::TooLarge(4096))), "{sent:?}");
        let fine = read_body(&http::HeaderMap::new(), Full::new(Bytes::from_static(b"{}")), 4096).await;
        assert_eq!(fine.ok(), Some(Bytes::from_static(b"{}")));
    }
}
