//! Every response agentgate writes itself instead of the origin: the CONNECT `200`, and the
//! one mapping from a [`ProxyError`] to a status and a plain-text body (pingora's blame rule:
//! the client's fault is 400, an unreachable origin 502, a slow one 504, agentgate's own cap
//! on connections to origins 503 with `Retry-After`), and the block answer
//! built from a gate's `Blocked` (DESIGN.md §6): 403 for a policy, 407 with a
//! `Proxy-Authenticate` challenge for an unknown agent, 429 with `Retry-After` for a limit,
//! and for a request held for a human's approval, how the wait ended (`docs/approvals.md`).
//! A block answer to HEAD has no body (its headers stay), on HTTP/1.1 and h2 alike.
//!
//! Never forwards anything, decides whether a request is allowed, or writes the decision log.

use std::fmt::Write as _;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue, PROXY_AUTHENTICATE, RETRY_AFTER};
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use serde_json::json;

use super::body::ProxyBody;
use super::error::ProxyError;
use crate::approvals::ApprovalDecision;
use crate::audit::ErrorType;
use crate::gate::{BlockKind, Blocked};
use crate::policy::advice::advice;
use crate::policy::{LimitKind, Outcome};

/// Why the phases ended a request before it was forwarded, or while it was: an answer
/// agentgate wrote itself (a block, a local page, the 503 of an unwritable decision log), or
/// an error, answered by [`error_response`]. Either way the request's record
/// (`record::RequestRecord`) is finished with it.
#[derive(Debug)]
pub(crate) enum Exit {
    /// Answer with this.
    Answered(Response<ProxyBody>),
    /// Answer the error.
    Failed(ProxyError),
    /// Nobody to answer: the client had gone before the request was taken, and the request
    /// was decided only (`service::Client::Gone`).
    Gone,
}

impl From<ProxyError> for Exit {
    fn from(error: ProxyError) -> Self {
        Exit::Failed(error)
    }
}

/// The header that carries a block's verdict and first reason, e.g.
/// `agentgate-decision: deny; source=robots.txt; line=4; record=0193…`.
pub(crate) const DECISION_HEADER: HeaderName = HeaderName::from_static("agentgate-decision");

/// The status an error is answered with.
pub(crate) fn status_for(error: &ProxyError) -> StatusCode {
    match error {
        ProxyError::NotAProxyRequest { .. }
        | ProxyError::UnsupportedScheme { .. }
        | ProxyError::BadConnectTarget { .. }
        | ProxyError::BadTunnelRequest { .. }
        | ProxyError::MethodTooLong { .. }
        | ProxyError::ClientBody { .. } => StatusCode::BAD_REQUEST,
        ProxyError::DestinationRefused { .. } => StatusCode::FORBIDDEN,
        ProxyError::UpstreamCertificate { .. }
        | ProxyError::UpstreamResolve { .. }
        | ProxyError::UpstreamConnect { .. }
        | ProxyError::Unscrubbable { .. }
        | ProxyError::Parent { .. }
        | ProxyError::Upstream { .. } => StatusCode::BAD_GATEWAY,
        ProxyError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        ProxyError::UpstreamAtCapacity { .. } => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// Who is at fault for `error`, for `error.type`: the side its status blames, or agentgate
/// itself for its own cap.
pub(crate) fn error_type_for(error: &ProxyError) -> ErrorType {
    if let ProxyError::UpstreamAtCapacity { .. } | ProxyError::Parent { .. } = error {
        return ErrorType::Proxy;
    }
    let status = status_for(error);
    if status.is_client_error() { ErrorType::Client } else { ErrorType::Origin }
}

/// Seconds an agent is told to wait (`Retry-After`) when agentgate is at its cap on
/// connections to origins: busy connections usually finish within that.
pub(crate) const AT_CAPACITY_RETRY_AFTER_S: u64 = 2;

/// The response for `error`: its status and `agentgate: <message>` as the body, so an agent
/// (often an LLM) reading it learns what failed, on which host, and why. At the upstream
/// cap, `Retry-After` says when to try again.
pub(crate) fn error_response(error: &ProxyError) -> Response<ProxyBody> {
    let mut response = body_response(format!("agentgate: {error}\n"), "text/plain; charset=utf-8");
    *response.status_mut() = status_for(error);
    if let ProxyError::UpstreamAtCapacity { .. } = error {
        response.headers_mut().insert(RETRY_AFTER, HeaderValue::from(AT_CAPACITY_RETRY_AFTER_S));
    }
    response
}

/// The answer to a request the gate blocked (DESIGN §6): 403, 407 or 429 by the block's
/// kind, the verdict and first reason in `agentgate-decision` (plus `window=` for a rate
/// limit), and a body naming the file, line and rule of every blocking reason and what the
/// agent may do instead — JSON when the client accepts JSON, plain text otherwise. Both carry
/// the decision record id, so the agent's report and the log meet. HEAD gets the headers only.
pub(crate) fn blocked_response(blocked: &Blocked, request_headers: &HeaderMap) -> Response<ProxyBody> {
    blocked_response_to(blocked, &blocked.record().method, request_headers)
}

/// [`blocked_response`] given to another request than the one `blocked` records: the first
/// request inside a tunnel whose CONNECT it refused (`tunnel::intercept`), whose own
/// method (`answered`: a HEAD gets no body) and `Accept` shape the answer.
pub(crate) fn blocked_response_to(
    blocked: &Blocked,
    answered: &str,
    request_headers: &HeaderMap,
) -> Response<ProxyBody> {
    let decision = &blocked.decision();
    let (method, url) = (&*blocked.record().method, blocked.record().url.as_str());
    let record = blocked.record().id.to_string();
    let blocking = decision.blocking_reasons();
    let verdict = match blocked.kind() {
        BlockKind::RateLimited { .. } => "rate_limited",
        BlockKind::OriginUnreachable { .. } | BlockKind::UpstreamAtCapacity | BlockKind::ReplayMiss => "error",
        BlockKind::Policy
        | BlockKind::Unauthenticated
        | BlockKind::LimitsUnavailable
        | BlockKind::TooLarge
        | BlockKind::AnswerTooLarge => decision.outcome.as_str(),
    };
    let mut header = verdict.to_owned();
    if let Some(first) = blocking.first() {
        let _ = write!(header, "; source={}", first.source);
        if let Some(line) = first.line {
            let _ = write!(header, "; line={line}");
        }
        let _ = write!(header, "; code={}", first.code);
    }
    if let (BlockKind::RateLimited { .. }, Some(window)) = (blocked.kind(), limit_window(blocked)) {
        let _ = write!(header, "; window={window}");
    }
    let approval = blocked.record().approval.as_ref();
    if let Some(approval) = approval {
        let _ = write!(header, "; approval={}", approval.decision.as_str());
        if let Some(by) = &approval.by {
            let _ = write!(header, "; by={by}");
        }
    }
    let _ = write!(header, "; record={record}");
    let summary = summary(blocked, method, url);
    let mut response = if accepts_json(request_headers) {
        let reasons: Vec<_> = blocking
            .iter()
            .map(|r| {
                json!({"source": r.source.as_str(), "code": r.code.as_str(), "line": r.line, "rule": r.rule,
                       "digest": r.digest, "advice": advice(r)})
            })
            .collect();
        let mut body = json!({
            "error": "blocked by agentgate",
            "decision": verdict,
            "record_id": record,
            "method": method,
            "url": url,
            "message": summary,
            "reasons": reasons,
        });
        if let Some(approval) = approval {
            body["approval"] =
                json!({"decision": approval.decision.as_str(), "by": approval.by, "reason": approval.reason});
        }
        body_response(format!("{body}\n"), "application/json")
    } else {
        let mut text = format!("{summary}\nDecision: {verdict} (decision record {record})\n\nWhy:\n");
        for r in blocking {
            let line = r.line.map(|l| format!(" line {l}")).unwrap_or_default();
            let _ = writeln!(text, "- {}{line}: \"{}\" [{}]", r.source, r.rule, r.code);
        }
        text.push_str("\nWhat you can do instead:\n");
        let mut seen = Vec::new();
        for r in blocking {
            let advice = advice(r);
            if !seen.contains(&advice) {
                seen.push(advice);
                let _ = writeln!(text, "- {advice}");
            }
        }
        body_response(text, "text/plain; charset=utf-8")
    };
    if answered.eq_ignore_ascii_case("HEAD") {
        // RFC 9110 §9.3.2: no content in a HEAD answer. hyper's h2 server would send it.
        *response.body_mut() = Empty::new().map_err(|never| match never {}).boxed_unsync();
    }
    let headers = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&header) {
        headers.insert(DECISION_HEADER, value);
    }
    *response.status_mut() = match blocked.kind() {
        BlockKind::Policy => StatusCode::FORBIDDEN,
        BlockKind::Unauthenticated => {
            headers.insert(PROXY_AUTHENTICATE, HeaderValue::from_static("Basic realm=\"agentgate\""));
            StatusCode::PROXY_AUTHENTICATION_REQUIRED
        }
        BlockKind::RateLimited { retry_after_s } => {
            headers.insert(RETRY_AFTER, HeaderValue::from(retry_after_s));
            StatusCode::TOO_MANY_REQUESTS
        }
        BlockKind::OriginUnreachable { timed_out: false } => StatusCode::BAD_GATEWAY,
        BlockKind::OriginUnreachable { timed_out: true } => StatusCode::GATEWAY_TIMEOUT,
        BlockKind::LimitsUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        BlockKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
        BlockKind::AnswerTooLarge => StatusCode::FORBIDDEN,
        BlockKind::ReplayMiss => StatusCode::GATEWAY_TIMEOUT,
        BlockKind::UpstreamAtCapacity => {
            headers.insert(RETRY_AFTER, HeaderValue::from(AT_CAPACITY_RETRY_AFTER_S));
            StatusCode::SERVICE_UNAVAILABLE
        }
    };
    response
}

/// The window of the rate limit that refused a request, in seconds (`60s`; a crawl delay's
/// own length, `1.5s`).
fn limit_window(blocked: &Blocked) -> Option<String> {
    let first = blocked.decision().blocking_reasons().first()?;
    blocked.decision().limits.iter().find(|l| l.reason == *first).and_then(|l| match l.kind {
        LimitKind::Rate { window_s, .. } | LimitKind::Bytes { window_s, .. } => Some(format!("{window_s}s")),
        LimitKind::Delay { millis } => Some(format!("{}s", f64::from(millis) / 1000.0)),
        LimitKind::Concurrent { .. } => None,
    })
}

/// The answer when the decision log cannot be written and `[audit] on_failure = "block"`.
pub(crate) fn audit_unavailable() -> Response<ProxyBody> {
    let mut response = body_response(
        "agentgate: the decision log cannot be written, and [audit] on_failure = \"block\" forbids forwarding unaudited requests; it resumes by itself once the operator frees space or fixes the file (see agentgate's error log); retry later\n".to_owned(),
        "text/plain; charset=utf-8",
    );
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    response
}

fn summary(blocked: &Blocked, method: &str, url: &str) -> String {
    match (blocked.kind(), blocked.decision().outcome) {
        (BlockKind::RateLimited { retry_after_s }, _) => format!(
            "agentgate held back this request because it is over a rate, concurrency or byte limit: {method} {url}. Retry after {retry_after_s} s."
        ),
        (BlockKind::TooLarge, _) => format!(
            "agentgate refused this request because its body is larger than the agent's whole byte budget, so it can never pass under this budget: {method} {url}. Send less, in parts within the budget."
        ),
        (BlockKind::AnswerTooLarge, _) => format!(
            "agentgate withheld the site's answer to this request because its body is larger than the agent's whole receiving byte budget, so it can never pass under this budget: {method} {url}. Ask for a part of it (a Range request) within the budget, or ask the operator for a larger budget."
        ),
        (BlockKind::OriginUnreachable { .. }, _) => format!(
            "agentgate could not reach the site for this request: {method} {url}. No policy forbade it; the site did not accept a connection. Retry later."
        ),
        (BlockKind::UpstreamAtCapacity, _) => format!(
            "agentgate could not fetch this site's policies for this request: {method} {url}. agentgate is at its cap on connections to origins and every one is busy; nothing was sent to the site. Retry after {AT_CAPACITY_RETRY_AFTER_S} s."
        ),
        (BlockKind::ReplayMiss, _) => format!(
            "agentgate is replaying a recorded run and has no recorded answer to this request: {method} {url}. Nothing was sent to the site."
        ),
        (BlockKind::LimitsUnavailable, _) => {
            format!("agentgate cannot check this request's limits (its shared store does not answer): {method} {url}")
        }
        (BlockKind::Unauthenticated, _) => format!(
            "agentgate does not know this agent: {method} {url}. Send the id and token your operator gave you as proxy credentials (Proxy-Authorization: Basic, e.g. HTTPS_PROXY=http://id:token@proxy:port)."
        ),
        (BlockKind::Policy, Outcome::NeedsApproval) => approval_summary(blocked, method, url),
        (BlockKind::Policy, Outcome::Deny | Outcome::Allow) => {
            format!("agentgate blocked this request: {method} {url}")
        }
    }
}

/// What a request that needed a human's approval is told: who denied it and why, that
/// nobody answered in time, or that too many requests already wait (docs/approvals.md).
fn approval_summary(blocked: &Blocked, method: &str, url: &str) -> String {
    let Some(approval) = &blocked.record().approval else {
        return format!(
            "agentgate refused this request because the site reserves it for a human to approve, and this proxy does not hold requests for approval ([approvals] mode = \"deny\"): {method} {url}"
        );
    };
    match approval.decision {
        ApprovalDecision::Denied => {
            let by = approval.by.as_deref().unwrap_or("an operator");
            let reason = approval.reason.as_deref().map(quoted_sentence).unwrap_or_default();
            format!(
                "agentgate held this request for a human to approve, and {by} denied it: {method} {url}.{reason} Do not retry it; ask the person you work for."
            )
        }
        ApprovalDecision::Timeout => format!(
            "agentgate held this request for a human to approve, and nobody approved or denied it within the approval timeout: {method} {url}. Ask the person you work for to watch the approvals, then retry."
        ),
        ApprovalDecision::QueueFull => format!(
            "agentgate refused this request at once: it needs a human's approval, and too many requests are already waiting for approval ([approvals] max_pending): {method} {url}. Retry later."
        ),
        ApprovalDecision::Shutdown => format!(
            "agentgate held this request for a human to approve, and is shutting down, so nobody can approve it now: {method} {url}. Retry later."
        ),
        ApprovalDecision::Approved | ApprovalDecision::Remembered | ApprovalDecision::HungUp => {
            format!("agentgate held this request for human approval: {method} {url}")
        }
    }
}

/// ` Their reason: "…".`: the approver's words in quotes, closed as a sentence (unless they
/// end one already), so the sentence after it never runs on from them.
fn quoted_sentence(reason: &str) -> String {
    let reason = reason.trim();
    let stop = if reason.ends_with(['.', '!', '?']) { "" } else { "." };
    format!(" Their reason: \"{reason}\"{stop}")
}

fn accepts_json(headers: &HeaderMap) -> bool {
    headers.get_all(ACCEPT).iter().filter_map(|v| v.to_str().ok()).any(|v| {
        v.split(',').any(|item| {
            let media = item.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
            media == "application/json" || media.ends_with("+json")
        })
    })
}

/// A `200` with `text` as its body (the caller sets another status when needed).
pub(super) fn body_response(text: String, content_type: &'static str) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed_unsync();
    let mut response = Response::new(body);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// The `200` that opens a CONNECT tunnel: no body, no content length (RFC 9110 §9.3.6).
pub(crate) fn tunnel_established() -> Response<ProxyBody> {
    Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blame_picks_the_status() {
        let host = || "example.test:443".to_owned();
        let cause = || "cause".to_owned();
        assert_eq!(status_for(&ProxyError::BadConnectTarget { target: "x".into() }), StatusCode::BAD_REQUEST);
        assert_eq!(status_for(&ProxyError::UpstreamConnect { host: host(), cause: cause() }), StatusCode::BAD_GATEWAY);
        assert_eq!(
            status_for(&ProxyError::UpstreamTimeout { host: host(), cause: cause() }),
            StatusCode::GATEWAY_TIMEOUT
        );
    }

    #[test]
    fn a_quoted_reason_ends_its_sentence() {
        assert_eq!(quoted_sentence("do not check out"), " Their reason: \"do not check out\".");
        assert_eq!(quoted_sentence(" Not this week! "), " Their reason: \"Not this week!\"");
    }

    #[test]
    fn certificate_failures_name_host_and_cause() {
        let error = ProxyError::UpstreamCertificate { host: "example.test:443".into(), cause: "UnknownIssuer".into() };
        let response = error_response(&error);
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert!(error.to_string().starts_with("cannot verify the TLS certificate of example.test:443: UnknownIssuer"));
    }
}
