//! The admin API's approval endpoints: `GET /approvals` (the held requests, oldest first,
//! each naming the replica holding it: with `[approvals] store = "redis"` the whole fleet's)
//! and `POST /approvals/{id}` (an operator approves or denies one, whichever replica holds
//! it; a request held for a new host may be approved with a grant of the host to its agent
//! for a while). The body is JSON and
//! must say so in `Content-Type`, so a cross-site HTML form cannot post it; it is read up to
//! 16 KiB.
//!
//! Never: holds or forwards a request (the proxy does, `crate::approvals` carries the answer)
//! or writes the decision log (the held request's own record says who decided).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, Response, StatusCode};
use serde_json::{Value, json};

use super::answer::{AdminBody, error, json_response, read_body};
use super::state::AdminState;
use crate::approvals::{
    AnswerError, Answered, Approval, ApprovalDecision, HOST_GRANT_DEFAULT, HOST_GRANT_MAX, Listed, Remember,
};
use crate::audit::rfc3339_millis;

/// The largest body `POST /approvals/{id}` reads.
const MAX_BODY: usize = 16 * 1024;
/// The longest `reason` kept.
const MAX_REASON_CHARS: usize = 500;

/// `GET /approvals`: `{"pending": [...]}`, oldest first.
pub(super) async fn list(state: &AdminState) -> Response<AdminBody> {
    let now = SystemTime::now();
    let pending: Vec<Value> = state
        .approvals
        .all_pending()
        .await
        .into_iter()
        .map(|p| {
            let left = (UNIX_EPOCH + Duration::from_millis(p.expires_at_ms)).duration_since(now).unwrap_or_default();
            let expires_in_s = left.as_secs() + u64::from(left.subsec_nanos() > 0);
            let rule = p.rule.map(|r| json!({"file": r.file, "line": r.line, "text": r.text}));
            json!({
                "id": p.id,
                "replica": p.replica,
                "record_id": p.record_id,
                "method": p.method,
                "url": p.url,
                "agent": p.agent,
                "origin": p.origin,
                "rule": rule,
                "new_host": p.new_host,
                "held_since": rfc3339_millis(UNIX_EPOCH + Duration::from_millis(p.held_since_ms)).to_string(),
                "expires_in_s": expires_in_s,
            })
        })
        .collect();
    json_response(StatusCode::OK, &json!({"pending": pending}))
}

/// The answer to an id that cannot be answered: `404` when nothing is pending as it, `503`
/// when another replica may hold it and the fleet's store did not answer.
fn unanswerable(cause: &AnswerError) -> Response<AdminBody> {
    let status = match cause {
        AnswerError::NotPending(_) => StatusCode::NOT_FOUND,
        AnswerError::StoreDown { .. } => StatusCode::SERVICE_UNAVAILABLE,
    };
    error(status, None, &cause.to_string())
}

/// `POST /approvals/{id}`: `{"decision": "approve"|"deny", "reason": "…", "remember": "…",
/// "ttl": "…"}` from `by` (the admin token's name). Without a configured token nobody can
/// answer (`403`): the caller could be the agent whose request is held (a config file cannot
/// ask for holding without a token, `AdminConfig::holding_problems`; this holds for a config
/// built in code too).
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
    let Answer { decision, reason, remember, ttl } = match parse(&bytes) {
        Ok(parsed) => parsed,
        Err((field, message)) => return error(StatusCode::BAD_REQUEST, Some(field), &message),
    };
    // What may be remembered depends on why the request is held.
    let pending: Listed = match state.approvals.find(id).await {
        Ok(pending) => pending,
        Err(cause) => return unanswerable(&cause),
    };
    let held_for_host = pending.new_host.is_some();
    let misplaced = match remember {
        Remember::HostForAgent if !held_for_host => Some("it is held for a site's rule, not for its host"),
        Remember::PathForAgent15m if held_for_host => Some("it is held for its host: remember \"host-for-agent\""),
        _ => None,
    };
    if let Some(why) = misplaced {
        let message = format!("remember = \"{}\" does not apply to this request: {why}", remember.as_str());
        return error(StatusCode::BAD_REQUEST, Some("remember"), &message);
    }
    let at = SystemTime::now();
    let until = (remember == Remember::HostForAgent).then(|| at + ttl.unwrap_or(HOST_GRANT_DEFAULT));
    let approval =
        Approval { decision, by: Some(by.clone()), reason, at, remember: Some(remember), until, replica: None };
    match state.approvals.answer(&pending, approval).await {
        Ok(Answered::Here(held)) => {
            tracing::info!(id, by, decision = decision.as_str(), record_id = held.record_id, "approval answered");
            json_response(StatusCode::OK, &json!({"id": id, "decision": decision.as_str(), "by": by}))
        }
        Ok(Answered::Fleet(held)) => {
            tracing::info!(
                id,
                by,
                decision = decision.as_str(),
                record_id = held.record_id,
                replica = held.replica,
                "approval answered for another replica"
            );
            let answer = json!({"id": id, "decision": decision.as_str(), "by": by, "replica": held.replica});
            json_response(StatusCode::OK, &answer)
        }
        Err(cause) => unanswerable(&cause),
    }
}

/// An operator's answer as the body gives it.
#[derive(Debug, PartialEq, Eq)]
struct Answer {
    decision: ApprovalDecision,
    reason: Option<String>,
    remember: Remember,
    /// How long a `host-for-agent` grant lasts (default [`HOST_GRANT_DEFAULT`]).
    ttl: Option<Duration>,
}

/// The body's decision, reason, reach and a grant's length; or the field at fault and why.
fn parse(bytes: &[u8]) -> Result<Answer, (&'static str, String)> {
    let value: Value = serde_json::from_slice(bytes).map_err(|e| ("body", format!("the body is not JSON: {e}")))?;
    let Value::Object(fields) = value else {
        return Err(("body", "the body must be a JSON object, e.g. {\"decision\": \"approve\"}".to_owned()));
    };
    if let Some(unknown) = fields.keys().find(|k| !["decision", "reason", "remember", "ttl"].contains(&k.as_str())) {
        let message = format!("unknown field {unknown:?}; the body takes decision, reason, remember and ttl");
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
        // No reason given (the console sends `""` for an empty box): none recorded.
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.trim().is_empty() => None,
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
    let max = humantime::format_duration(HOST_GRANT_MAX);
    let ttl = match fields.get("ttl") {
        None | Some(Value::Null) => None,
        Some(_) if remember != Remember::HostForAgent => {
            return Err(("ttl", "ttl applies to remember = \"host-for-agent\" only".to_owned()));
        }
        Some(given) => match given.as_str().and_then(|text| humantime::parse_duration(text).ok()) {
            Some(ttl) if !ttl.is_zero() && ttl <= HOST_GRANT_MAX => Some(ttl),
            _ => {
                return Err((
                    "ttl",
                    format!("ttl = {given}: must be a duration above 0s and at most {max}, e.g. \"1h\""),
                ));
            }
        },
    };
    Ok(Answer { decision, reason, remember, ttl })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(decision: ApprovalDecision, reason: Option<&str>, remember: Remember, ttl: Option<u64>) -> Answer {
        Answer { decision, reason: reason.map(str::to_owned), remember, ttl: ttl.map(Duration::from_secs) }
    }

    #[test]
    fn a_body_is_a_decision_an_optional_reason_and_an_optional_reach() {
        assert_eq!(
            parse(br#"{"decision": "approve"}"#),
            Ok(answer(ApprovalDecision::Approved, None, Remember::ThisRequest, None))
        );
        assert_eq!(
            parse(br#"{"decision": "approve", "reason": "ok", "remember": "path-for-agent-15m"}"#),
            Ok(answer(ApprovalDecision::Approved, Some("ok"), Remember::PathForAgent15m, None))
        );
        assert_eq!(
            parse(br#"{"decision": "deny", "reason": null}"#),
            Ok(answer(ApprovalDecision::Denied, None, Remember::ThisRequest, None))
        );
        // An empty box is no reason: `agentgate.approval.reason` is then left out.
        assert_eq!(
            parse(br#"{"decision": "deny", "reason": "  "}"#),
            Ok(answer(ApprovalDecision::Denied, None, Remember::ThisRequest, None))
        );
        assert_eq!(
            parse(br#"{"decision": "approve", "remember": "host-for-agent", "ttl": "2h"}"#),
            Ok(answer(ApprovalDecision::Approved, None, Remember::HostForAgent, Some(7200)))
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
            (br#"{"decision": "deny", "remember": "host-for-agent"}"#, "remember"),
            (br#"{"decision": "approve", "ttl": "1h"}"#, "ttl"),
            (br#"{"decision": "approve", "remember": "host-for-agent", "ttl": "0s"}"#, "ttl"),
            (br#"{"decision": "approve", "remember": "host-for-agent", "ttl": "2days"}"#, "ttl"),
            (br#"{"decision": "approve", "remember": "host-for-agent", "ttl": 60}"#, "ttl"),
        ] {
            assert_eq!(parse(body).map_err(|(f, _)| f), Err(field), "{}", String::from_utf8_lossy(body));
        }
    }
}
