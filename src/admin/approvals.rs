//! The admin API's approval endpoints: `GET /approvals` (the held requests, oldest first) and
//! `POST /approvals/{id}` (an operator approves or denies one). The body is JSON and must say
//! so in `Content-Type`, so a cross-site HTML form cannot post it; it is read up to 16 KiB.
//!
//! Never: holds or forwards a request (the proxy does, `crate::approvals` carries the answer)
//! or writes the decision log (the held request's own record says who decided).

use std::time::SystemTime;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, Response, StatusCode};
use serde_json::{Value, json};

use super::routes::{AdminBody, error, json_response, read_body};
use super::server::AdminState;
use crate::approvals::{Approval, ApprovalDecision, Remember};
use crate::audit::rfc3339_millis;

/// The largest body `POST /approvals/{id}` reads.
const MAX_BODY: usize = 16 * 1024;
/// The longest `reason` kept.
const MAX_REASON_CHARS: usize = 500;

/// `GET /approvals`: `{"pending": [...]}`, oldest first.
pub(super) fn list(state: &AdminState) -> Response<AdminBody> {
    let now = tokio::time::Instant::now();
    let pending: Vec<Value> = state
        .approvals
        .pending()
        .into_iter()
        .map(|p| {
            let left = p.deadline.saturating_duration_since(now);
            let expires_in_s = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            let rule = p.held.rule.map(|r| json!({"file": r.file, "line": r.line, "text": r.text}));
            json!({
                "id": p.id,
                "record_id": p.held.record_id,
                "method": p.held.method,
                "url": p.held.url,
                "agent": p.held.agent,
                "origin": p.held.origin,
                "rule": rule,
                "held_since": rfc3339_millis(p.held.held_since).to_string(),
                "expires_in_s": expires_in_s,
            })
        })
        .collect();
    json_response(StatusCode::OK, &json!({"pending": pending}))
}

/// `POST /approvals/{id}`: `{"decision": "approve"|"deny", "reason": "…", "remember": "…"}`
/// from `by` (the admin token's name). Without a configured token nobody can answer (`403`):
/// the caller could be the agent whose request is held (a config file cannot ask for holding
/// without a token, `AdminConfig::holding_problems`; this holds for a config built in code too).
pub(super) async fn decide<B>(
    state: &AdminState,
    id: &str,
    by: String,
    headers: &HeaderMap,
    body: B,
) -> Response<AdminBody>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if state.access.is_open() {
        let message = "answering a held request needs an admin token, so that the agent whose request is held \
            cannot answer it: set [admin] token_sha256 (or add [[admin.tokens]]) and send `Authorization: Bearer TOKEN`";
        return error(StatusCode::FORBIDDEN, None, message);
    }
    let json_body = headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"));
    if !json_body {
        let message =
            "the body must be JSON sent as `Content-Type: application/json`, e.g. {\"decision\": \"approve\"}";
        return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, None, message);
    }
    let bytes = match read_body(headers, body, MAX_BODY).await {
        Ok(bytes) => bytes,
        Err(cause) => return error(cause.status(), None, &cause.to_string()),
    };
    let (decision, reason, remember) = match parse(&bytes) {
        Ok(parsed) => parsed,
        Err((field, message)) => return error(StatusCode::BAD_REQUEST, Some(field), &message),
    };
    let approval = Approval { decision, by: Some(by.clone()), reason, at: SystemTime::now(), remember: Some(remember) };
    match state.approvals.settle(id, approval) {
        Ok(held) => {
            tracing::info!(id, by, decision = decision.as_str(), record_id = held.record_id, "approval answered");
            json_response(StatusCode::OK, &json!({"id": id, "decision": decision.as_str(), "by": by}))
        }
        Err(not_pending) => error(StatusCode::NOT_FOUND, None, &not_pending.to_string()),
    }
}

/// The body's decision, reason and reach; or the field at fault and why.
fn parse(bytes: &[u8]) -> Result<(ApprovalDecision, Option<String>, Remember), (&'static str, String)> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ("body", format!("the body is not JSON: {e}")))?;
    let Value::Object(fields) = value else {
        return Err(("body", "the body must be a JSON object, e.g. {\"decision\": \"approve\"}".to_owned()));
    };
    if let Some(unknown) = fields.keys().find(|k| !["decision", "reason", "remember"].contains(&k.as_str())) {
        let message = format!("unknown field {unknown:?}; the body takes decision, reason and remember");
        return Err(("body", message));
    }
    let decision = match fields.get("decision").and_then(Value::as_str) {
        Some("approve") => ApprovalDecision::Approved,
        Some("deny") => ApprovalDecision::Denied,
        _ => {
            let given = fields.get("decision").map_or_else(|| "missing".to_owned(), Value::to_string);
            return Err(("decision", format!("decision = {given}: must be \"approve\" or \"deny\"")));
        }
    };
    let reason = match fields.get("reason") {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.chars().count() <= MAX_REASON_CHARS => Some(text.clone()),
        Some(_) => {
            return Err(("reason", format!("reason must be a string of at most {MAX_REASON_CHARS} characters")));
        }
    };
    let remember = match fields.get("remember") {
        None | Some(Value::Null) => Remember::ThisRequest,
        Some(given) => match given.as_str().and_then(Remember::parse) {
            Some(remember) => remember,
            None => {
                let expected: Vec<&str> = Remember::ALL.iter().map(|r| r.as_str()).collect();
                return Err(("remember", format!("remember = {given}: must be one of {}", expected.join(", "))));
            }
        },
    };
    if decision == ApprovalDecision::Denied && remember != Remember::ThisRequest {
        let message =
            format!("remember = \"{}\" applies to approve only; a denial covers this request", remember.as_str());
        return Err(("remember", message));
    }
    Ok((decision, reason, remember))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_a_decision_an_optional_reason_and_an_optional_reach() {
        assert_eq!(parse(br#"{"decision": "approve"}"#), Ok((ApprovalDecision::Approved, None, Remember::ThisRequest)));
        assert_eq!(
            parse(br#"{"decision": "approve", "reason": "ok", "remember": "path-for-agent-15m"}"#),
            Ok((ApprovalDecision::Approved, Some("ok".to_owned()), Remember::PathForAgent15m))
        );
        assert_eq!(
            parse(br#"{"decision": "deny", "reason": null}"#),
            Ok((ApprovalDecision::Denied, None, Remember::ThisRequest))
        );
        let long = format!(r#"{{"decision": "deny", "reason": "{}"}}"#, "x".repeat(501));
        for (body, field) in [
            (&b"not json"[..], "body"),
            (b"[1]", "body"),
            (br#"{"decision": "approve", "extra": 1}"#, "body"),
            (b"{}", "decision"),
            (br#"{"decision": "maybe"}"#, "decision"),
            (br#"{"decision": "deny", "reason": 5}"#, "reason"),
            (long.as_bytes(), "reason"),
            (br#"{"decision": "approve", "remember": "forever"}"#, "remember"),
            (br#"{"decision": "deny", "remember": "path-for-agent-15m"}"#, "remember"),
        ] {
            assert_eq!(parse(body).map_err(|(f, _)| f), Err(field), "{}", String::from_utf8_lossy(body));
        }
    }
}
