//! What the gate hands back: a [`Permitted`] request (the only way to reach `forward`), a
//! [`Blocked`] one with the kind of answer it gets, or either as a [`Verdict`]. Their fields
//! are the gate's alone (`pub(super)`): nothing outside `gate` can make one, so a request
//! cannot be forwarded or refused without a decision and its record.
//!
//! Never: decides (the phases in `gate.rs` do), or writes a response or the log.

use std::sync::Arc;

use http::HeaderMap;

use crate::approvals::Approval;
use crate::audit::{DecisionRecord, Outcome as LogOutcome};
use crate::limits::Permit;
use crate::policy::operator::Mode;
use crate::policy::{AutoctlCode, Code, Decision, OperatorCode, Opinion, Outcome, Policies, PolicyStatus, Reason};

/// A request the gate let through. Only the gate can make one, so a forward without a
/// decision does not compile (linkerd's `Permitted<T>`).
#[derive(Debug)]
pub struct Permitted {
    pub(super) record: DecisionRecord,
    pub(super) mode: Mode,
    pub(super) inject_headers: Vec<(String, String)>,
    /// The concurrency slots this request holds until its response body ends.
    pub(super) permit: Permit,
    /// The policies the request was decided on, for the response-time check (C17).
    pub(super) policies: Option<Arc<Policies>>,
}

impl Permitted {
    /// Headers the forwarded request must carry (AGENTS.md agent identification).
    pub fn inject_headers(&self) -> &[(String, String)] {
        &self.inject_headers
    }

    /// Records a passthrough tunnel, decided as `GET /`, as the `CONNECT` it is; when the
    /// origin has an automation-preferences file, says that its method rules cannot be
    /// enforced inside the tunnel (SEMANTICS D12: `autoctl.unenforceable`).
    pub fn mark_passthrough(&mut self) {
        self.record.method = "CONNECT".to_owned();
        if self.policies.as_ref().is_some_and(|p| p.autoctl.report().status == PolicyStatus::Valid) {
            let rule = "passthrough tunnel: methods inside it cannot be seen, so allowed-methods is not enforced";
            self.record.reasons.push(Reason::new(AutoctlCode::Unenforceable, rule));
        }
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

    /// The response-time check of SEMANTICS C17: a `Content-Disposition: attachment` answer
    /// from a host whose AGENTS.md does not allow `download-files` is withheld. In monitor
    /// mode the request stays permitted and its record says `would_deny`.
    ///
    /// # Errors
    /// A [`Blocked`] (403, the AGENTS.md reason first) when the body must be withheld.
    pub fn check_response(mut self, response_headers: &HeaderMap) -> Result<Permitted, Box<Blocked>> {
        let Some(policies) = &self.policies else { return Ok(self) };
        let verdict = policies.agents_md.evaluate_response(response_headers);
        if verdict.opinion != Opinion::Deny {
            return Ok(self);
        }
        let decision = Decision::deny_first(verdict.reasons, std::mem::take(&mut self.record.reasons), Vec::new());
        self.record.set_reasons(&decision);
        if self.mode == Mode::Monitor {
            self.record.outcome = LogOutcome::WouldDeny;
            return Ok(self);
        }
        self.record.outcome = LogOutcome::Deny;
        Err(Box::new(Blocked { decision, record: self.record, kind: BlockKind::Policy, policies: None }))
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
    /// agentgate had no connection to spare for the policy fetch (`[upstream]
    /// max_connections`, every one busy): 503 with `Retry-After`, recorded as an `error`
    /// (`upstream.at_capacity`, docs/upstream.md).
    UpstreamAtCapacity,
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
        self.record.method = "CONNECT".to_owned();
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
