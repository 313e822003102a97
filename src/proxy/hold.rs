//! Phase `hold`: a request whose policy asks for a human's approval (AGENTS.md
//! `require-human-approval`, SEMANTICS C16), under `[approvals] mode = "hold"` and in enforce
//! mode, waits here until an operator answers through the admin API, `[approvals] timeout`
//! passes, or its client hangs up. An approval remembered for the same agent, origin and path
//! lets it through without asking; a full queue refuses it at once, and so does agentgate's
//! shutdown one that is held. See `docs/approvals.md`.
//!
//! Never: decides allow or deny itself (the gate turns an approved block into a permit,
//! `Gate::approved`), or writes the answer (a block goes to `super::block` like any other).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use tracing::{info, warn};

use super::context::{Generation, ProxyState};
use super::drain::Drain;
use crate::approvals::{Approval, ApprovalDecision, ApprovalMode, GrantKey, Held, HeldRule, Remember};
use crate::audit::{DecisionRecord, redact_url};
use crate::config::Config;
use crate::gate::{Blocked, GateRequest, Verdict};

/// Whether `blocked` is held for a human rather than answered at once.
pub(super) fn holds(config: &Config, blocked: &Blocked) -> bool {
    config.approvals.mode == ApprovalMode::Hold && blocked.needs_approval()
}

/// Holds `blocked` (for which [`holds`] is true) until it is approved (a permit), or denied,
/// timed out or refused by a full queue (a block saying so).
///
/// Boxed: a held request carries its record across a long wait, and the request path's
/// future would otherwise carry that space on every request (issue 11).
pub(super) fn held<'a>(
    state: &'a Arc<ProxyState>,
    live: &'a Generation,
    mut blocked: Blocked,
    req: GateRequest<'a>,
    started: Instant,
    mut drain: Drain,
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
        let settings = &live.config.approvals;
        let summary = summary(&blocked, req, state.config.audit.log_query);
        let hold = match state.approvals.hold(summary, settings.timeout, settings.max_pending) {
            Ok(hold) => hold,
            Err(full) => {
                warn!(%full, "approval queue full; refusing a request that needs approval at once");
                blocked.set_approval(Approval::undecided(ApprovalDecision::QueueFull));
                return Verdict::Block(blocked);
            }
        };
        info!(id = hold.id(), record_id = %blocked.record().id, "request held for human approval");
        // Written if this future is dropped before it ends: the client hung up while held.
        let mut hung_up = HungUp { state: Arc::clone(state), record: Some(blocked.record().clone()), started };
        let approval = tokio::select! {
            approval = hold.answer() => approval,
            // Nobody can answer once the admin API stops: refuse now rather than at the end
            // of the grace period, with the record written while the log still takes it.
            () = drain.draining() => Approval::undecided(ApprovalDecision::Shutdown),
        };
        let verdict = if approval.decision == ApprovalDecision::Approved {
            if approval.remember == Some(Remember::PathForAgent15m) {
                state.approvals.remember(key, approval.clone()).await;
            }
            live.gate.approved(blocked, approval, &req).await
        } else {
            blocked.set_approval(approval);
            Verdict::Block(blocked)
        };
        hung_up.record = None;
        verdict
    })
}

/// What the operator sees of a held request: no header, no body, the URL redacted as the
/// decision log redacts it.
fn summary(blocked: &Blocked, req: GateRequest<'_>, log_query: bool) -> Held {
    let record = blocked.record();
    let rule = blocked.decision().blocking_reasons().first().map(|reason| HeldRule {
        file: reason.source.as_str(),
        line: reason.line,
        text: reason.rule.to_string(),
    });
    Held {
        record_id: record.id.to_string(),
        method: record.method.clone(),
        url: redact_url(&record.url, log_query).full,
        agent: record.agent.clone(),
        origin: req.origin.to_string(),
        rule,
        held_since: SystemTime::now(),
    }
}

/// The record of a held request, written as `hung_up` when its client goes away first:
/// hyper drops the request's future, and with it this guard and the queue entry.
struct HungUp {
    state: Arc<ProxyState>,
    /// `None` once the wait ended another way.
    record: Option<DecisionRecord>,
    started: Instant,
}

impl Drop for HungUp {
    fn drop(&mut self) {
        let Some(mut record) = self.record.take() else { return };
        record.duration = Some(self.started.elapsed());
        record.approval = Some(Approval::undecided(ApprovalDecision::HungUp));
        let state = Arc::clone(&self.state);
        // Dropped inside the connection's task, so a runtime is there; without one (the
        // runtime itself shutting down) the record is lost with the process's other work.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        runtime.spawn(async move {
            info!(record_id = %record.id, "client hung up while its request was held for approval");
            state.metrics.record(&record);
            if let Err(unrecorded) = state.audit.record(&record).await {
                warn!(error = %unrecorded.cause, event_id = %record.id, "decision record not written");
            }
        });
    }
}
