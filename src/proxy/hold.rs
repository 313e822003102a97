//! Phase `hold`: a request whose policy asks for a human's approval (AGENTS.md
//! `require-human-approval`, SEMANTICS C16), under `[approvals] mode = "hold"` and in enforce
//! mode, waits here until an operator answers through the admin API, `[approvals] timeout`
//! passes, or its client hangs up. An approval remembered for the same agent, origin and path
//! lets it through without asking; a full queue refuses it at once, and so does agentgate's
//! shutdown one that is held. See `docs/approvals.md`.
//!
//! A request for a host its agent's `allow_hosts` does not list is admitted here too
//! (`admit_host`, right after the gate's `check_egress`): by a live grant of the host to the
//! agent, or, when the agent has `unlisted = "hold"`, by a human answering it in the same
//! queue, who may grant the host for a while. The network guard vets the host first: a
//! destination it refuses (agentgate's own address, an internal range) is refused at once
//! with its `network.*` code, never held, so nobody is asked to approve it.
//!
//! With `[approvals] store = "redis"` a held request is also published to the fleet
//! (`Approvals::publish`, bounded by the store's timeout), so any replica may answer it.
//!
//! Never: decides allow or deny itself (the gate turns an approved block into a permit,
//! `Gate::approved`, and an admitted host into an [`Admitted`] its decision reads), or writes
//! the answer (a block goes to `super::block` like any other).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::SystemTime;

use tracing::{info, warn};

use super::conn::Drain;
use super::context::{Generation, ProxyState};
use super::destination::refused_before_hold;
use super::record::RequestRecord;
use super::settings::Settings;
use crate::approvals::{
    Approval, ApprovalDecision, ApprovalMode, ApprovalsConfig, GrantKey, Held, HeldRule, HostGrantKey, Remember,
};
use crate::audit::redact_url;
use crate::gate::{Admitted, Blocked, GateRequest, Verdict};
use crate::secrets::Plan;

/// Phase `check_egress`, the same for a request and for a tunnel's host-level decision: the
/// secrets the request carries (`Gate::check_secrets`: a misused secret is refused outright,
/// never admitted by a grant or a human), then the agent's egress lists, before anything
/// about the host is looked up; a host they do not list may be admitted by a grant or a
/// human ([`admit_host`]). Returns the secrets plan (a request's verdict carries it on) and
/// the admission, if one was needed.
///
/// # Errors
/// The block to answer: the secrets', or the lists' when nothing admits the host.
pub(super) async fn check_egress<'a>(
    state: &'a Arc<ProxyState>,
    live: &'a Generation,
    record: &'a mut RequestRecord,
    request: GateRequest<'a>,
    drain: Drain,
) -> Result<(Plan, Option<Admitted>), Blocked> {
    let secrets = live.gate.check_secrets(&request).map_err(|blocked| *blocked)?;
    let Err(blocked) = live.gate.check_egress_lists(&request) else { return Ok((secrets, None)) };
    admit_host(state, live, record, *blocked, request, drain).await.map(|admitted| (secrets, Some(admitted)))
}

/// Whether `blocked` is held for a human rather than answered at once.
pub(super) fn holds(settings: &Settings, blocked: &Blocked) -> bool {
    settings.approvals.mode == ApprovalMode::Hold && blocked.needs_approval()
}

/// Holds `blocked` (for which [`holds`] is true) until it is approved (a permit), or denied,
/// timed out or refused by a full queue (a block saying so).
///
/// Boxed: a held request carries its record across a long wait, and the request path's
/// future would otherwise carry that space on every request (the hot path,
/// `docs/request-flow.md`).
pub(super) fn held<'a>(
    state: &'a Arc<ProxyState>,
    live: &'a Generation,
    record: &'a mut RequestRecord,
    mut blocked: Blocked,
    req: GateRequest<'a>,
    drain: Drain,
) -> Pin<Box<dyn Future<Output = Verdict> + Send + 'a>> {
    Box::pin(async move {
        let key = GrantKey {
            agent: req.agent.id.to_string(),
            origin: req.origin.to_string(),
            path: req.path_and_query.split('?').next().unwrap_or_default().to_owned(),
        };
        if let Some(grant) = state.approvals.remembered(&key).await {
            return live.gate.approved(blocked, grant, &req).await;
        }
        let summary = summary(&blocked, req, state.settings.log_query, None);
        match ask(state, &live.settings.approvals, record, &mut blocked, summary, drain).await {
            Some(approval) => {
                if approval.remember == Some(Remember::PathForAgent15m) {
                    state.approvals.remember(key, approval.clone()).await;
                }
                live.gate.approved(blocked, approval, &req).await
            }
            None => Verdict::Block(blocked),
        }
    })
}

/// Admits the host of `blocked`, a request `Gate::check_egress` refused because its agent's
/// `allow_hosts` does not list the host: a live grant of the host to the agent admits it at
/// once; otherwise, when the block is `needs_approval` (the agent's `unlisted = "hold"`), it
/// waits for a human as [`held`] does, unless the network guard refuses its destination
/// (refused at once with the guard's code, never held). An approval with
/// `remember = "host-for-agent"` grants the host, on the port asked for, to the agent until
/// its `until`.
///
/// # Errors
/// `blocked` itself when nothing admits the host (no grant and `unlisted = "deny"`, or a
/// human denied it, nobody answered, the queue was full), or the guard's refusal of its
/// destination: answered like any block.
pub(super) fn admit_host<'a>(
    state: &'a Arc<ProxyState>,
    live: &'a Generation,
    record: &'a mut RequestRecord,
    mut blocked: Blocked,
    req: GateRequest<'a>,
    drain: Drain,
) -> Pin<Box<dyn Future<Output = Result<Admitted, Blocked>> + Send + 'a>> {
    Box::pin(async move {
        let host = req.origin.bare_host();
        let key = HostGrantKey { agent: req.agent.id.to_string(), host: host.to_owned(), port: req.origin.port() };
        if let Some(grant) = state.approvals.host_grant(&key).await {
            return Ok(Admitted::new(host, grant, None));
        }
        if !blocked.needs_approval() {
            return Err(blocked);
        }
        // Only what would go out once approved is held: the guard's refusal is answered now.
        if let Some(refusal) = refused_before_hold(state, live, &req).await {
            return Err(live.gate.refuse(&refusal, &req));
        }
        let summary = summary(&blocked, req, state.settings.log_query, Some(host.to_owned()));
        match ask(state, &live.settings.approvals, record, &mut blocked, summary, drain).await {
            Some(approval) => {
                if approval.remember == Some(Remember::HostForAgent) {
                    info!(agent = %key.agent, host = %key.host, port = key.port, by = ?approval.by, "host granted to the agent");
                    state.approvals.grant_host(key, approval.clone()).await;
                }
                let admitted = Admitted::new(host, approval, Some(blocked.record().id));
                // However it ends from here, its one record keeps the id the queue listed.
                record.undecided(live.gate.undecided(&GateRequest { admitted: Some(&admitted), ..req }));
                Ok(admitted)
            }
            None => Err(blocked),
        }
    })
}

/// Queues `held` (the summary of `blocked`) and waits for an operator's answer, the
/// timeout, agentgate's shutdown, or the client hanging up (this future dropped: `record`
/// writes the held request's record as `hung_up`). Returns the approval when an operator
/// approved; otherwise `blocked` says how the wait ended and `None` is returned.
pub(super) async fn ask(
    state: &Arc<ProxyState>,
    settings: &ApprovalsConfig,
    record: &mut RequestRecord,
    blocked: &mut Blocked,
    held: Held,
    mut drain: Drain,
) -> Option<Approval> {
    let hold = match state.approvals.hold(held, settings.timeout, settings.max_pending) {
        Ok(hold) => hold,
        Err(full) => {
            warn!(%full, "approval queue full; refusing a request that needs approval at once");
            blocked.set_approval(Approval::undecided(ApprovalDecision::QueueFull));
            return None;
        }
    };
    info!(id = hold.id(), record_id = %blocked.record().id, "request held for human approval");
    // Written as `hung_up` if this future is dropped before it ends.
    record.hold(blocked.record().clone());
    // Listed by every replica of a fleet (`[approvals] store = "redis"`); bounded by the
    // store's timeout, after which it is this replica's alone.
    state.approvals.publish(hold.id()).await;
    let approval = tokio::select! {
        approval = hold.answer() => approval,
        // Nobody can answer once the admin API stops: refuse now rather than at the end
        // of the grace period, with the record written while the log still takes it.
        () = drain.draining() => Approval::undecided(ApprovalDecision::Shutdown),
    };
    record.release();
    if approval.decision == ApprovalDecision::Approved {
        Some(approval)
    } else {
        blocked.set_approval(approval);
        None
    }
}

/// What the operator sees of a held request: no header, no body, the URL redacted as the
/// decision log redacts it; `new_host` when it is held for its host.
fn summary(blocked: &Blocked, req: GateRequest<'_>, log_query: bool, new_host: Option<String>) -> Held {
    let record = blocked.record();
    let rule = blocked.decision().blocking_reasons().first().map(|reason| HeldRule {
        file: reason.source.as_str(),
        line: reason.line,
        text: reason.rule.to_string(),
    });
    Held {
        record_id: record.id.to_string(),
        method: record.method.to_string(),
        url: redact_url(&record.url, log_query).full.into_owned(),
        agent: record.agent.to_string(),
        origin: req.origin.to_string(),
        rule,
        new_host,
        held_since: SystemTime::now(),
    }
}
