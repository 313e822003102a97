//! What the gate hands back: a [`Permitted`] request (the only way to reach `forward`), a
//! [`Blocked`] one with the kind of answer it gets, or either as a [`Verdict`]. Their fields
//! are the gate's alone (`pub(super)`): nothing outside `gate` can make one, so a request
//! cannot be forwarded or refused without a decision and its record.
//!
//! Never: decides (the phases in `gate.rs` do), or writes a response or the log.

use std::borrow::Cow;
use std::sync::Arc;

use http::HeaderMap;
use http::header::HeaderName;

use crate::approvals::Approval;
use crate::audit::{BodyCut, DecisionRecord, McpFields, Outcome as LogOutcome};
use crate::inspect::{Place, Report};
use crate::limits::{ByteBudgets, Permit, Refused};
use crate::policy::operator::Mode;
use crate::policy::usage::{self, Undeclared};
use crate::policy::{
    AutoctlCode, Code, Decision, Direction, LimitKind, Limits, OperatorCode, Opinion, Outcome, Policies, PolicyStatus,
    Reason,
};
use crate::secrets::Plan;

/// A request the gate let through. Only the gate can make one, so a forward without a
/// decision does not compile (linkerd's `Permitted<T>`).
#[derive(Debug)]
pub struct Permitted {
    pub(super) record: DecisionRecord,
    pub(super) mode: Mode,
    /// `[usage] undeclared`, for the usage-preference response headers (U4, U7).
    pub(super) undeclared: Undeclared,
    pub(super) inject_headers: Vec<(String, String)>,
    /// The concurrency slots this request holds until its response body ends.
    pub(super) permit: Permit,
    /// The policies the request was decided on, for the response-time check (C17).
    pub(super) policies: Option<Arc<Policies>>,
    /// The secrets to inject into the request and scrub from its answer (`crate::secrets`).
    pub(super) secrets: Plan,
    /// The byte budgets its bodies are counted against as they stream (enforce mode).
    pub(super) budgets: Option<Arc<ByteBudgets>>,
}

impl Permitted {
    /// The secrets to inject into the request and scrub from its answer.
    pub fn secrets(&self) -> &Plan {
        &self.secrets
    }

    /// Headers the forwarded request must carry (AGENTS.md agent identification).
    pub fn inject_headers(&self) -> &[(String, String)] {
        &self.inject_headers
    }

    /// Records a passthrough tunnel, decided as `GET /`, as the `CONNECT` it is; when the
    /// origin has an automation-preferences file, says that its method rules cannot be
    /// enforced inside the tunnel (SEMANTICS D12: `autoctl.unenforceable`).
    pub fn mark_passthrough(&mut self) {
        self.record.method = "CONNECT".into();
        if self.policies.as_ref().is_some_and(|p| p.autoctl.report().status == PolicyStatus::Valid) {
            let rule = "passthrough tunnel: methods inside it cannot be seen, so allowed-methods is not enforced";
            self.record.reasons.push(Reason::new(AutoctlCode::Unenforceable, rule));
        }
    }

    /// The byte budgets the request's bodies are spent against as they stream, if any.
    pub fn budgets(&self) -> Option<&Arc<ByteBudgets>> {
        self.budgets.as_ref()
    }

    /// Records that the forwarded request is signed with Web Bot Auth key `keyid`
    /// (`agentgate.signature.keyid`, `crate::signing`).
    pub fn mark_signed(&mut self, keyid: &str) {
        self.record.signature_keyid = Some(keyid.to_owned());
    }

    /// The decision record as decided, before any response: what is committed to the log
    /// before forwarding under `[audit] on_failure = "block"`.
    pub fn record(&self) -> &DecisionRecord {
        &self.record
    }

    /// Which line of its request the record is written as next: `Start` for the commit
    /// before forwarding, then `Completion` (its end line, which leaves the decision to the
    /// start line), without a copy of the record.
    pub fn set_line(&mut self, line: crate::audit::Line) {
        self.record.line = line;
    }

    /// The response-time checks: SEMANTICS C17, a `Content-Disposition: attachment` answer
    /// from a host whose AGENTS.md does not allow `download-files` is withheld; U4, an answer
    /// whose `Content-Usage` or `tdm-reservation` header refuses a purpose the agent declared
    /// is withheld, and what those headers said joins the record's `agentgate.usage` either
    /// way. Site policies only: an operator rule or a bypassed host has none. In monitor
    /// mode the request stays permitted and its record says `would_deny`.
    ///
    /// # Errors
    /// A [`Blocked`] (403, the refusing reasons first) when the body must be withheld.
    pub fn check_response(mut self, response_headers: &HeaderMap) -> Result<Permitted, Box<Blocked>> {
        let Some(policies) = &self.policies else { return Ok(self) };
        let verdict = policies.agents_md.evaluate_response(response_headers);
        let mut blocking = if verdict.opinion == Opinion::Deny { verdict.reasons.into_vec() } else { Vec::new() };
        let stated = usage::response_preferences(
            combined(response_headers, &CONTENT_USAGE).as_deref(),
            combined(response_headers, &TDM_RESERVATION).as_deref(),
            combined(response_headers, &TDM_POLICY).as_deref(),
        );
        if !stated.is_empty() {
            let usage = usage::decide(&self.record.purposes[..], self.undeclared, stated);
            blocking.extend(usage::refusal_reasons(&usage));
            self.record.add_usage(usage.applied);
        }
        if blocking.is_empty() {
            return Ok(self);
        }
        self.refused_by(blocking)
    }

    /// A check after the decision refused it for `blocking` (the reasons before the ones
    /// that allowed it): blocked (403) in enforce mode; in monitor mode it stays permitted
    /// and its record says `would_deny`.
    fn refused_by(mut self, blocking: Vec<Reason>) -> Result<Permitted, Box<Blocked>> {
        let mut decision = Decision::deny_first(blocking, std::mem::take(&mut self.record.reasons), Limits::default());
        decision.usage = std::mem::take(&mut self.record.usage);
        self.record.set_reasons(&decision);
        if self.mode == Mode::Monitor {
            self.record.outcome = LogOutcome::WouldDeny;
            return Ok(self);
        }
        self.record.outcome = LogOutcome::Deny;
        Err(Box::new(Blocked { decision, record: self.record, kind: BlockKind::Policy, policies: None }))
    }

    /// The request-time check of `[inspect]` (docs/inspect.md): what inspecting the request
    /// found (`crate::inspect::Report`) becomes its reasons, each naming the detector and
    /// where, never the value: a credential (`inspect.secret_in_request`) or a request that
    /// could not be read under `on_unreadable = "refuse"` (`inspect.unreadable`) blocks it;
    /// one read in part under `"allow"` keeps a non-blocking `inspect.unreadable` note. A
    /// finding in the path or the query withholds that part of the target from the record
    /// and the block answer (`/REDACTED`, `?REDACTED`). In monitor mode the request stays permitted and its record says
    /// `would_deny`.
    ///
    /// # Errors
    /// A [`Blocked`] (403, the inspection reasons first) when the request must not leave.
    pub fn check_request(mut self, report: &Report) -> Result<Permitted, Box<Blocked>> {
        let refused = report.refuses();
        let mut blocking: Vec<Reason> = report
            .findings
            .iter()
            .map(|finding| Reason::new(OperatorCode::SecretInRequest, format!("[inspect] {finding}")))
            .collect();
        match &report.unreadable {
            Some(unreadable) if report.refuse_unreadable => blocking.push(Reason::new(
                OperatorCode::Unreadable,
                format!("[inspect] {unreadable}: refused (on_unreadable = \"refuse\")"),
            )),
            Some(unreadable) => self.record.reasons.push(Reason::new(
                OperatorCode::Unreadable,
                format!("[inspect] not inspected: {unreadable} (on_unreadable = \"allow\")"),
            )),
            None => {}
        }
        self.record.url = withheld(&self.record.url, report.findings.iter().map(|finding| finding.place));
        if !refused {
            return Ok(self);
        }
        self.refused_by(blocking)
    }

    /// A request a byte budget refused after the gate let it through (`refused`): its
    /// response's declared length is longer than what is left, or its streamed request body
    /// crossed a sending budget after `sent` bytes (then recorded as cut by the budget). Blocked
    /// with the budget's answer (`429` with `Retry-After`), recorded as that refusal.
    pub fn over_budget(mut self, refused: &Refused, sent: Option<u64>) -> Box<Blocked> {
        if let Some(sent) = sent {
            self.record.request_bytes = Some(sent);
            self.record.body_cut = Some(BodyCut::Budget);
        }
        let (decision, kind) = refusal_decision(&mut self.record, refused);
        Box::new(Blocked { decision, record: self.record, kind, policies: None })
    }

    /// True in monitor mode: a refusal is recorded `would_deny` and nothing is withheld.
    pub fn is_monitored(&self) -> bool {
        self.mode == Mode::Monitor
    }

    /// The block a human answers for a `[[mcp]]` call held by `unlisted_tools = "hold"`
    /// (`blocking`, its reasons; outcome `needs_approval`), this permit kept to go on with
    /// once approved ([`approved_by`](Self::approved_by)).
    pub fn held_for(&self, blocking: Vec<Reason>) -> Blocked {
        let mut decision = Decision::deny_first(blocking, self.record.reasons.clone(), Limits::default());
        decision.outcome = Outcome::NeedsApproval;
        let mut record = self.record.clone();
        record.set_reasons(&decision);
        record.outcome = LogOutcome::NeedsApproval;
        Blocked { decision, record, kind: BlockKind::Policy, policies: None }
    }

    /// A human approved the call this permit was held for: its record says who and when.
    pub fn approved_by(&mut self, approval: Approval) {
        self.record.approval = Some(approval);
    }

    /// Records the MCP request this is (`agentgate.mcp.*`, docs/mcp.md).
    pub fn set_mcp(&mut self, mcp: McpFields) {
        self.record.mcp = Some(Box::new(mcp));
    }

    /// The request-time check of `[[mcp]]` (docs/mcp.md): `blocking`, the reasons a refused
    /// `tools/call` (`mcp.tool_refused`) or a body that cannot be ruled (`mcp.unreadable`)
    /// gave, blocks it; none lets it go on. In monitor mode the request stays permitted and
    /// its record says `would_deny`.
    ///
    /// # Errors
    /// A [`Blocked`] (the `[[mcp]]` reasons first) when the request must not leave; the
    /// proxy answers it with a JSON-RPC error, not the block page.
    pub fn check_mcp(self, blocking: Vec<Reason>) -> Result<Permitted, Box<Blocked>> {
        if blocking.is_empty() {
            return Ok(self);
        }
        self.refused_by(blocking)
    }

    /// The block for a permitted request the recording being replayed has no answer to
    /// (`mode = "replay"`, `crate::record`): 504 `replay.miss`, its rule `why` (naming the
    /// nearest recorded URL), recorded as an `error` blamed on the proxy.
    pub fn replay_miss(mut self, why: String) -> Blocked {
        let reason = Reason::new(OperatorCode::ReplayMiss, why.clone());
        let decision = Decision::deny_first(vec![reason], std::mem::take(&mut self.record.reasons), Limits::default());
        self.record.set_reasons(&decision);
        self.record.outcome = LogOutcome::Error;
        self.record.error = Some(why);
        self.record.error_type = Some(crate::audit::ErrorType::Proxy);
        Blocked { decision, record: self.record, kind: BlockKind::ReplayMiss, policies: None }
    }

    /// The decision record, to be completed with the response and written, and the
    /// concurrency slots, to be held until the response body ends or is dropped.
    pub fn into_parts(self) -> (DecisionRecord, Permit) {
        (self.record, self.permit)
    }

    /// The decision record, to be completed with the response and written (the slots are
    /// given back now).
    pub fn into_record(self) -> DecisionRecord {
        self.record
    }
}

// The usage headers a response is read for, as header names: looked up by a name as text,
// each lookup parsed and lowercased the name first (every response of every request).
static CONTENT_USAGE: HeaderName = HeaderName::from_static("content-usage");
static TDM_RESERVATION: HeaderName = HeaderName::from_static("tdm-reservation");
static TDM_POLICY: HeaderName = HeaderName::from_static("tdm-policy");

/// The field lines of header `name` combined into one value (RFC 9110 §5.3); `None` when
/// absent. A line that is not visible ASCII states nothing. One line (the usual case) is
/// read where it lies.
fn combined<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Option<Cow<'h, str>> {
    let mut lines = headers.get_all(name).iter().filter_map(|v| v.to_str().ok());
    let first = lines.next()?;
    let Some(second) = lines.next() else { return Some(Cow::Borrowed(first)) };
    let mut joined = [first, second].join(", ");
    for line in lines {
        joined.push_str(", ");
        joined.push_str(line);
    }
    Some(Cow::Owned(joined))
}

/// `url` without the parts of its target a secret was found in (`places`): with one in the
/// path, `scheme://authority/REDACTED`; with one in the query only, the path and `?REDACTED`.
fn withheld(url: &str, mut places: impl Iterator<Item = Place> + Clone) -> String {
    if places.clone().any(|place| place == Place::Path) {
        let after_scheme = url.find("://").map_or(0, |i| i + 3);
        let end = url[after_scheme..].find('/').map_or(url.len(), |i| after_scheme + i);
        return format!("{}/REDACTED", &url[..end]);
    }
    match url.split_once('?') {
        Some((before, _)) if places.any(|place| place == Place::Query) => format!("{before}?REDACTED"),
        _ => url.to_owned(),
    }
}

/// How a limit's refusal is answered and recorded: the reason that blocks, the outcome, and
/// the kind of block (`429` for a spent limit, `413` for a body larger than a whole byte
/// budget, `503` when the shared store did not answer under `on_failure = "deny"`).
pub(super) fn limit_refusal(refused: &Refused) -> (Reason, LogOutcome, BlockKind) {
    match refused {
        Refused::Exceeded(exceeded) => {
            let kind = BlockKind::RateLimited { retry_after_s: exceeded.retry_after_secs() };
            (exceeded.limit.reason.clone(), LogOutcome::RateLimited, kind)
        }
        Refused::NeverFits { limit, bytes } => {
            let (body, kind) = match limit.kind {
                LimitKind::Bytes { direction: Direction::Received, .. } => ("response", BlockKind::AnswerTooLarge),
                _ => ("request", BlockKind::TooLarge),
            };
            let rule = format!(
                "{}: the declared {body} body of {bytes} bytes is larger than the whole budget, so it can never pass under it",
                limit.reason.rule
            );
            (Reason { rule: rule.into(), ..limit.reason.clone() }, LogOutcome::Deny, kind)
        }
        Refused::StoreUnavailable => {
            let rule = "[limits.redis] on_failure = \"deny\": the shared limits store did not answer in time";
            (Reason::new(OperatorCode::LimitsStoreUnavailable, rule), LogOutcome::Deny, BlockKind::LimitsUnavailable)
        }
    }
}

/// `record` made the record of `refused`: the limit's reason first (blocking), the request's
/// own reasons after it, the refusal's outcome; the decision that says so, and the block's kind.
pub(super) fn refusal_decision(record: &mut DecisionRecord, refused: &Refused) -> (Decision, BlockKind) {
    let (blocking, outcome, kind) = limit_refusal(refused);
    let mut decision =
        Decision::deny_first(vec![blocking], std::mem::take(&mut record.reasons), Arc::clone(&record.limits));
    decision.usage = std::mem::take(&mut record.usage);
    record.set_reasons(&decision);
    record.outcome = outcome;
    (decision, kind)
}

/// The record of a request a byte budget cut after it was let through (a response body of
/// unknown length, a tunnel or an upgraded connection that crossed it), made the record of
/// that refusal: the budget's reason first, its outcome (`rate_limited`).
pub fn record_refusal(record: &mut DecisionRecord, refused: &Refused) {
    refusal_decision(record, refused);
}

/// Which answer a block gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockKind {
    /// A policy or operator rule refused it: 403.
    Policy,
    /// The client is not a known agent: 407 with a `Proxy-Authenticate` challenge.
    Unauthenticated,
    /// A rate or concurrency limit refused it: 429 with `Retry-After` (whole seconds).
    RateLimited {
        /// Seconds until the limit lets a request through again.
        retry_after_s: u64,
    },
    /// The origin itself could not be reached while fetching its policies: 502, or 504 when
    /// the connection timed out. Recorded as an `error`, not a deny: no site forbade it.
    OriginUnreachable {
        /// True when the connection timed out.
        timed_out: bool,
    },
    /// The shared limits store did not answer and `[limits.redis] on_failure = "deny"`: 503
    /// (`limits.store_unavailable`).
    LimitsUnavailable,
    /// A declared request body larger than a whole byte budget: 413, with no `Retry-After`
    /// (no wait makes it pass).
    TooLarge,
    /// A response declared longer than a whole receiving budget: withheld, 403 with no
    /// `Retry-After` (as Squid answers a reply over `reply_body_max_size`).
    AnswerTooLarge,
    /// agentgate had no connection to spare for the policy fetch (`[upstream]
    /// max_connections`, every one busy): 503 with `Retry-After`, recorded as an `error`
    /// (`upstream.at_capacity`, docs/upstream.md).
    UpstreamAtCapacity,
    /// `mode = "replay"` and the recording holds no answer to the request: 504
    /// (`replay.miss`), recorded as an `error`, in every mode: there is nothing to forward.
    ReplayMiss,
}

/// A request the gate refused.
#[derive(Debug)]
pub struct Blocked {
    pub(super) decision: Decision,
    pub(super) record: DecisionRecord,
    pub(super) kind: BlockKind,
    /// The policies it was decided on, for the response-time check should a human approve it.
    pub(super) policies: Option<Arc<Policies>>,
}

impl Blocked {
    /// The decision, blocking reasons first.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The decision record; its id goes into the block answer.
    pub fn record(&self) -> &DecisionRecord {
        &self.record
    }

    /// Which answer it gets.
    pub fn kind(&self) -> BlockKind {
        self.kind
    }

    /// True when a human may approve it: a policy asked for one (AGENTS.md
    /// `require-human-approval`, SEMANTICS C16) and nothing denied it outright.
    pub fn needs_approval(&self) -> bool {
        self.kind == BlockKind::Policy && self.decision.outcome == Outcome::NeedsApproval
    }

    /// How the wait for a human ended, when it ends in this block (denied, timed out, the
    /// queue full, or the client gone): recorded, and said in the block answer.
    pub fn set_approval(&mut self, approval: Approval) {
        self.record.approval = Some(approval);
    }

    /// True when the agent's `allow_hosts` does not list the host (and nothing on the deny
    /// list named it): what a human may admit.
    pub fn is_unlisted_host(&self) -> bool {
        self.decision
            .blocking_reasons()
            .first()
            .is_some_and(|reason| reason.code == Code::Operator(OperatorCode::NotAllowlisted))
    }

    /// Records a passthrough tunnel's block, decided as `GET /`, as the `CONNECT` it is (as
    /// [`Permitted::mark_passthrough`] does for one let through).
    pub fn mark_passthrough(&mut self) {
        self.record.method = "CONNECT".into();
    }

    /// The decision record, to be completed with the response and written.
    pub fn into_record(self) -> DecisionRecord {
        self.record
    }
}

/// What the gate says about one request.
#[derive(Debug)]
pub enum Verdict {
    /// Forward it (in monitor mode, possibly with a `would_deny` record).
    Forward(Permitted),
    /// Answer with a block response.
    Block(Blocked),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_field_lines_of_a_usage_header_are_read_as_one_list() {
        let mut headers = HeaderMap::new();
        headers.append("content-usage", http::HeaderValue::from_static("search=y"));
        headers.append("content-usage", http::HeaderValue::from_static("train-ai=n"));
        assert_eq!(combined(&headers, &CONTENT_USAGE).as_deref(), Some("search=y, train-ai=n"));
        headers.append("content-usage", http::HeaderValue::from_static("ai-input=y"));
        assert_eq!(combined(&headers, &CONTENT_USAGE).as_deref(), Some("search=y, train-ai=n, ai-input=y"));
        assert_eq!(combined(&headers, &TDM_RESERVATION), None);
        headers.append("tdm-reservation", http::HeaderValue::from_static("1"));
        assert_eq!(combined(&headers, &TDM_RESERVATION).as_deref(), Some("1"));
    }

    #[test]
    fn the_parts_of_the_target_a_secret_is_in_are_withheld() {
        let url = "https://h.test:8443/k/AKIA?x=1";
        assert_eq!(withheld(url, [Place::Other, Place::Path].into_iter()), "https://h.test:8443/REDACTED");
        assert_eq!(withheld("http://h.test", [Place::Path].into_iter()), "http://h.test/REDACTED");
        assert_eq!(withheld(url, [Place::Query].into_iter()), "https://h.test:8443/k/AKIA?REDACTED");
        assert_eq!(withheld(url, [Place::Other].into_iter()), url);
    }
}
