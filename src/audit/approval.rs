//! The facts of a human's approval decision as the decision log records them on the held
//! request's own record (`agentgate.approval.*`): how it ended ([`ApprovalDecision`]), who
//! decided and when, and how far it reaches ([`Remember`]). Values only: the queue that
//! holds requests and makes these is `crate::approvals`, which re-exports them.
//!
//! Never: holds a request, remembers a grant or speaks to the fleet's store.

use std::time::SystemTime;

/// How far an approval reaches (`remember` in `POST /approvals/{id}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remember {
    /// Only the held request (the default).
    ThisRequest,
    /// The held request, and for [`REMEMBER_FOR`](crate::approvals::REMEMBER_FOR) every request of the same agent to the same
    /// origin and path (query aside).
    PathForAgent15m,
    /// A request held because its host is not on the agent's `allow_hosts`: that host, on
    /// the port asked for, for the same agent, until [`Approval::until`] (a grant).
    HostForAgent,
}

impl Remember {
    /// Every value, as the API and the log write them.
    pub const ALL: [Remember; 3] = [Remember::ThisRequest, Remember::PathForAgent15m, Remember::HostForAgent];

    /// The value in the API and in `agentgate.approval.remember`.
    pub fn as_str(self) -> &'static str {
        match self {
            Remember::ThisRequest => "this-request",
            Remember::PathForAgent15m => "path-for-agent-15m",
            Remember::HostForAgent => "host-for-agent",
        }
    }

    /// The value written as `text`, if it is one.
    pub fn parse(text: &str) -> Option<Remember> {
        Remember::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

/// How a held request ended (`agentgate.approval.decision`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// An operator approved it: forwarded.
    Approved,
    /// An operator denied it: 403.
    Denied,
    /// Nobody answered within `[approvals] timeout`: 403.
    Timeout,
    /// The client hung up while it was held: nothing was answered or forwarded.
    HungUp,
    /// The queue already held `[approvals] max_pending` requests: 403 at once.
    QueueFull,
    /// agentgate began shutting down while it was held: 403 at once, since nobody can
    /// approve it any more.
    Shutdown,
    /// An earlier `path-for-agent-15m` approval, or a `host-for-agent` grant, let it through
    /// without asking.
    Remembered,
}

impl ApprovalDecision {
    /// The value of `agentgate.approval.decision` (and of `decision` in the API's answer).
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalDecision::Approved => "approved",
            ApprovalDecision::Denied => "denied",
            ApprovalDecision::Timeout => "timeout",
            ApprovalDecision::HungUp => "hung_up",
            ApprovalDecision::QueueFull => "queue_full",
            ApprovalDecision::Shutdown => "shutdown",
            ApprovalDecision::Remembered => "remembered",
        }
    }

    /// True when the request goes on to the origin.
    pub fn lets_through(self) -> bool {
        matches!(self, ApprovalDecision::Approved | ApprovalDecision::Remembered)
    }
}

/// One approval decision as the decision log records it on the held request's own record
/// (`agentgate.approval.*`, docs/decision-log.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// How it ended.
    pub decision: ApprovalDecision,
    /// Who decided: the admin token's name (`anonymous` with no admin token); for a
    /// remembered grant, who approved the request it remembers. `None` when nobody decided.
    pub by: Option<String>,
    /// The reason the operator gave, if any.
    pub reason: Option<String>,
    /// When it was decided (for a remembered grant: when the grant was given).
    pub at: SystemTime,
    /// How far an operator's approval reaches; `None` when nobody decided.
    pub remember: Option<Remember>,
    /// When a `host-for-agent` grant ends; `None` for every other approval.
    pub until: Option<SystemTime>,
    /// The replica (its `instance` name) whose admin API took the answer, when that is not the
    /// replica holding the request (`[approvals] store = "redis"`); `None` otherwise.
    pub replica: Option<String>,
}

impl Approval {
    /// An ending nobody decided (timeout, hang-up, a full queue), stamped now.
    pub fn undecided(decision: ApprovalDecision) -> Approval {
        Approval { decision, by: None, reason: None, at: SystemTime::now(), remember: None, until: None, replica: None }
    }
}
