//! Phase `check_egress`: an agent's egress lists (`allow_hosts`, `deny_hosts`) on the host
//! a request is routed to, and [`Admitted`], a human's admission of a host the allowlist
//! does not name (docs/approvals.md "New hosts").
//!
//! Never: resolves names (the lists are decided before the network guard looks anything
//! up, and read its vetted addresses only once there are some), or asks a human (the proxy
//! holds a `needs_approval` block; this module only says what the lists and an admission
//! decide).

use crate::agents::Unlisted;
use crate::approvals::Approval;
use crate::audit::{EventId, Outcome as LogOutcome, rfc3339_millis};
use crate::policy::operator::{Egress, Mode};
use crate::policy::{Decision, OperatorCode, Outcome, Reason};

use super::{BlockKind, Blocked, Gate, GateRequest};

/// A host outside an agent's `allow_hosts` that a human let it reach (docs/approvals.md): by
/// a grant for the agent and the host that lasts a while, or by approving one held request
/// (a CONNECT's approval covers its tunnel). It admits that host only; the deny list, the
/// network guard, the site's files and the limits still decide.
#[derive(Debug, Clone)]
pub struct Admitted {
    /// The canonical host it admits.
    host: String,
    /// Who admitted it, when, and for how long (`remember`, `until`).
    pub(super) approval: Approval,
    /// The held request's record id, which that request's record keeps (one record per
    /// request); `None` for a grant, which admits later requests, each with its own record.
    pub(super) record: Option<EventId>,
}

impl Admitted {
    /// `host` (canonical) admitted by `approval`; `record` is the held request's record id
    /// when this is that request's own approval.
    pub fn new(host: &str, approval: Approval, record: Option<EventId>) -> Self {
        Admitted { host: host.to_owned(), approval, record }
    }

    /// Whether this is one held request's own approval (rather than a grant).
    pub fn is_held_request(&self) -> bool {
        self.record.is_some()
    }

    /// The admission as the requests inside an approved CONNECT's tunnel carry it (each has
    /// its own record, so none takes the CONNECT's record id); `None` for a grant, which each
    /// request inside looks up again, so the tunnel outlives no grant.
    pub fn for_tunnel(mut self) -> Option<Self> {
        self.record.take()?;
        Some(self)
    }

    /// The non-blocking reason a request it admitted carries: who admitted the host, and
    /// until when for a grant.
    pub(super) fn reason(&self, agent: &str) -> Reason {
        let by = self.approval.by.as_deref().unwrap_or("an operator");
        let rule = match self.approval.until {
            Some(until) => format!(
                "{} is not on agent {agent:?}'s allow_hosts; {by} granted it to this agent until {}",
                self.host,
                rfc3339_millis(until)
            ),
            None => format!("{} is not on agent {agent:?}'s allow_hosts; {by} approved this request", self.host),
        };
        Reason::new(OperatorCode::HostApproved, rule)
    }
}

/// What an agent's egress lists (and a human's admission) say about a request's host.
pub(super) enum HostVerdict<'r> {
    /// Listed, or admitted by a human (then `Some`).
    Admitted(Option<&'r Admitted>),
    /// On the denylist, or not on the allowlist (`unlisted`) and not admitted.
    Refused { reason: Reason, unlisted: bool },
}

impl Gate {
    /// The agent's egress lists on the request's host, before anything is resolved.
    ///
    /// # Errors
    /// In enforce mode, a [`Blocked`] (403) for a host on `deny_hosts` (`operator.denied_host`)
    /// or not on `allow_hosts` (`operator.not_allowlisted`) that no human admitted; with the
    /// agent's `unlisted = "hold"`, an unlisted host's block is `needs_approval`, which the
    /// proxy holds for a human. In monitor mode never: [`Gate::decide`] records the same
    /// reason as `would_deny` and the request goes on.
    pub fn check_egress_lists(&self, req: &GateRequest<'_>) -> Result<(), Box<Blocked>> {
        if req.agent.mode(self.mode) == Mode::Monitor {
            return Ok(());
        }
        let HostVerdict::Refused { reason, unlisted } = self.host_verdict(req) else { return Ok(()) };
        let hold = unlisted && req.agent.agent.unlisted == Unlisted::Hold;
        let decision = Decision::single(if hold { Outcome::NeedsApproval } else { Outcome::Deny }, reason);
        let mut record = self.record_for(LogOutcome::from(decision.outcome), req);
        record.set_reasons(&decision);
        Err(Box::new(Blocked { decision, record, kind: BlockKind::Policy, policies: None }))
    }

    /// The agent's egress lists on the request's host and port, with the vetted addresses
    /// when there are some, and a human's admission of an unlisted host.
    pub(super) fn host_verdict<'r>(&self, req: &GateRequest<'r>) -> HostVerdict<'r> {
        let host = req.origin.bare_host();
        match req.agent.agent.egress.decide(host, req.origin.port(), req.addresses) {
            Egress::Admitted => HostVerdict::Admitted(None),
            Egress::Denied(reason) => HostVerdict::Refused { reason, unlisted: false },
            Egress::Unlisted(reason) => match req.admitted {
                Some(admitted) if admitted.host == host => HostVerdict::Admitted(Some(admitted)),
                _ => HostVerdict::Refused { reason, unlisted: true },
            },
        }
    }
}
