//! Phase `record`: the one decision record of one request, by construction, as pingora's
//! `logging()` phase is. A [`RequestRecord`] is started when a request is taken
//! (`ProxyService::handle`, and a redirected connection in `tunnel::transparent`) and finished
//! once, when its answer is known ([`RequestRecord::finish`]). The phases never write the
//! decision log: they hand the guard what to record (the gate's `Blocked` or `Permitted`, a
//! local answer's record, and, as soon as the request reaches the gate, the record it is
//! written with if it ends before a decision), and the guard alone writes (`AuditLog::record`,
//! `commit`) and counts (`Metrics::record`). A request future dropped before it finished (its
//! client hung up, or the shutdown grace period ended) writes its record from `Drop`.
//!
//! So every request that reached the gate leaves exactly one `event.id` in the log, however
//! it ended (`docs/decision-log.md`):
//! - forwarded and answered by the origin: the record with the status, the duration and the
//!   bytes of both bodies, written when the response body ends or is cut ([`BodyEnd`], the
//!   [`Meter`] of the response body; `agentgate.body.cut` says who cut it). Both meters
//!   spend the agent's byte budgets as the bytes pass (`budget.rs`: `SentBytes`, `ReceivedBytes`) and cut a body that
//!   crosses one, then recorded as the budget's refusal; a response declared longer than a
//!   receiving budget has left is withheld and answered with the budget's block, and so is a
//!   request whose body a sending budget cut ([`RequestRecord::forward_failed`]);
//! - answered by agentgate (blocked, served locally): the record with the status and the
//!   duration to the response head;
//! - failed ([`ProxyError`]): outcome `error`, the status it was answered with, the message
//!   and who is at fault;
//! - hung up, or cut off by shutdown: outcome `error` with no status (nothing was answered),
//!   the message saying which, `error.type` `client` or `proxy`; a request held for a human's
//!   approval keeps its outcome and says `hung_up` in its approval instead;
//! - closed without an HTTP answer (a refused transparent TLS connection): no status.
//!
//! The audit promise: under `[audit] on_failure = "block"` a permitted request's decision is
//! committed (on disk) before anything is forwarded ([`RequestRecord::forwarding`], `event.type`
//! `["start"]`), and the completed line follows (`["end"]`): two lines, one `event.id`. A
//! commit that fails answers 503. Every other request has one line: `["denied"]` for a block,
//! `["end"]` otherwise, `["allowed"]` for a passthrough tunnel (its line is written as it opens).
//!
//! A request that never reached the gate (a request target no proxy serves: 400 before it is
//! routed) has no record, and neither has an intercepted CONNECT, whose inner requests each
//! have their own. A CONNECT refused before its `200` and answered inside its tunnel keeps
//! its one record, written with the refusal's status as the `200` goes out
//! ([`RequestRecord::answered_inside`]).
//!
//! Never decides, and writes no answer but the 503 of an unwritable log.

use std::mem;
use std::sync::Arc;
use std::time::Instant;

use http::header::{ACCEPT, HeaderValue};
use http::{HeaderMap, Response, StatusCode};
use tracing::{debug, info, warn};

use super::answer::{Exit, audit_unavailable, blocked_response, error_type_for, status_for};
use http_body_util::BodyExt;

use super::body::{Ended, Meter, Metered, Pass, ProxyBody};
use super::budget::{ReceivedBytes, SentBytes, body_length};
use super::conn::Drain;
use super::context::ProxyState;
use super::error::ProxyError;
use crate::approvals::{Approval, ApprovalDecision};
use crate::audit::{BodyCut, DecisionRecord, ErrorType, Line, OnFailure, Outcome, TryRecord};
use crate::gate::{Blocked, Permitted, record_refusal};
use crate::limits::Permit;

/// What the record of a request that ended without its answer says (`error.message`).
const HUNG_UP: &str = "the client hung up before agentgate answered";
/// The same, when the shutdown grace period ended the request.
const CUT_OFF: &str = "agentgate's shutdown grace period ended before the answer";

/// How a request ended, for its record.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ending<'a> {
    /// Answered with this status (forwarded, blocked, served locally).
    Answered(StatusCode),
    /// Failed: answered with the error's status, the record says why and who is at fault.
    Failed(&'a ProxyError),
    /// Closed without an HTTP answer (a refused transparent TLS connection): no status.
    Closed,
}

/// The one record of one request, from when it is taken until it is written: finished with
/// [`finish`](Self::finish), or written from `Drop` when the request's future is dropped
/// first.
pub(crate) struct RequestRecord {
    state: Arc<ProxyState>,
    /// Tells a request cut off by shutdown from one whose client hung up; a record written
    /// from `Drop` carries it, so the shutdown waits for that write.
    drain: Drain,
    started: Instant,
    pending: Pending,
    /// The permit of a request being forwarded: its record is then the request's, and
    /// `pending` is not read.
    permit: Option<Permitted>,
    /// The record of a request held for a human's approval, while it waits: dropped then, it
    /// is written with the approval `hung_up` instead of `pending`. Boxed: only a held request
    /// has one, and inline it would be in every request's future (bench/RESULTS.md, round 9).
    held: Option<Box<DecisionRecord>>,
    /// The request body bytes sent on, counted as they stream; set while forwarding.
    sent: Option<SentBytes>,
}

/// A record taken out of [`Pending`] to be completed or written.
enum Taken {
    /// Not completed yet.
    Open(DecisionRecord),
    /// Completed with its answer.
    Completed(DecisionRecord),
}

/// What the request will be written with.
enum Pending {
    /// Nothing the log covers: not routed to an origin yet, or a CONNECT whose tunnel's
    /// requests are each recorded.
    Nothing,
    /// The gate's decision (a local answer, an approved tunnel).
    Record(DecisionRecord),
    /// The record a request that reached the gate ends with if nothing decides it.
    Undecided(DecisionRecord),
    /// A block, kept whole until written: a CONNECT refused before its `200` answers it
    /// inside its tunnel ([`RequestRecord::answered_inside`]).
    Blocked(Blocked),
    /// Completed with its answer, on its way to the log.
    Completed(DecisionRecord),
    /// Written, or counted by the log as not written.
    Written,
}

impl RequestRecord {
    /// The record of a request taken now.
    pub(crate) fn start(state: Arc<ProxyState>, drain: Drain) -> Self {
        RequestRecord {
            state,
            drain,
            started: Instant::now(),
            pending: Pending::Nothing,
            permit: None,
            held: None,
            sent: None,
        }
    }

    /// When the request was taken: the start of `event.duration`.
    pub(crate) fn started(&self) -> Instant {
        self.started
    }

    /// The request reached the gate: `record` (`Gate::undecided`) is what it is written with
    /// if it ends before a decision (its host does not resolve, its client hangs up while
    /// the policies load). A later decision replaces it.
    pub(crate) fn undecided(&mut self, record: DecisionRecord) {
        self.pending = Pending::Undecided(record);
    }

    /// The undecided record, taken out for the gate's permit to be written with instead
    /// (`Gate::decide_reusing`), which the caller hands back at once ([`permitted`],
    /// [`forwarding`]); `None` when the request has none.
    ///
    /// [`permitted`]: Self::permitted
    /// [`forwarding`]: Self::forwarding
    pub(crate) fn take_undecided(&mut self) -> Option<DecisionRecord> {
        match mem::replace(&mut self.pending, Pending::Nothing) {
            Pending::Undecided(record) => Some(record),
            other => {
                self.pending = other;
                None
            }
        }
    }

    /// `record` is the request's: a local answer, an approved CONNECT.
    pub(crate) fn decided(&mut self, record: DecisionRecord) {
        self.pending = Pending::Record(record);
    }

    /// An intercepted CONNECT (or transparent TLS connection): it has no record of its own,
    /// each request inside it is recorded.
    pub(crate) fn recorded_inside(&mut self) {
        self.pending = Pending::Nothing;
    }

    /// The answer to `blocked` (403, 407, 429, 502/503/504 for an origin or the proxy that
    /// failed the policy fetch), whose record becomes the request's.
    pub(crate) fn block(&mut self, blocked: Blocked, request_headers: &HeaderMap) -> Exit {
        Exit::Answered(self.block_answer(blocked, request_headers))
    }

    /// A block answered with `answer`, which the phase that refused it wrote (a refused MCP
    /// call gets a JSON-RPC error its session goes on after, `super::mcp`), not the block page.
    pub(crate) fn block_with(&mut self, blocked: Blocked, answer: Response<ProxyBody>) -> Exit {
        self.pending = Pending::Blocked(blocked);
        Exit::Answered(answer)
    }

    fn block_answer(&mut self, blocked: Blocked, request_headers: &HeaderMap) -> Response<ProxyBody> {
        let answer = blocked_response(&blocked, request_headers);
        self.pending = Pending::Blocked(blocked);
        answer
    }

    /// A CONNECT refused before its `200` ([`block`](Self::block)) whose refusal is answered
    /// inside its tunnel instead (`tunnel::connect`): its record is written now, as it would
    /// have been for the CONNECT's own answer, with `status`, the status the first request
    /// inside gets; the block comes back for that answer, which carries the same record id.
    /// `None`, and nothing written, when the request's record is not a block.
    pub(crate) async fn answered_inside(&mut self, status: StatusCode) -> Option<Blocked> {
        let blocked = match mem::replace(&mut self.pending, Pending::Nothing) {
            Pending::Blocked(blocked) => blocked,
            other => {
                self.pending = other;
                return None;
            }
        };
        self.pending = Pending::Record(blocked.record().clone());
        self.finish(Ending::Answered(status)).await;
        Some(blocked)
    }

    /// Holding `record` (a clone of the held request's) for a human's approval: a request
    /// dropped now is written as `hung_up`.
    pub(crate) fn hold(&mut self, record: DecisionRecord) {
        self.held = Some(Box::new(record));
    }

    /// The wait for a human ended (any way but a hang-up).
    pub(crate) fn release(&mut self) {
        self.held = None;
    }

    /// Forwarding under `permit`, the request body counted into the [`SentBytes`] handed
    /// back. The audit promise: under `[audit] on_failure = "block"` the decision is committed
    /// to the log first, as the request's `start` line.
    ///
    /// # Errors
    /// The 503 answer when the commit failed (the log counted the record as not written, and
    /// nothing is forwarded).
    pub(crate) async fn forwarding(&mut self, permit: Permitted) -> Result<(&Permitted, SentBytes), Exit> {
        // The request's record from here on, while the commit waits too.
        let held = self.permit.insert(permit);
        let committed = match self.state.audit.on_failure() {
            OnFailure::Block => {
                held.set_line(Line::Start);
                let committed = self.state.audit.commit(held.record()).await;
                // Its end line carries what the end adds; the decision is on the start line.
                held.set_line(Line::Completion);
                committed
            }
            OnFailure::Continue => Ok(()),
        };
        if let Err(unrecorded) = committed {
            warn!(error = %unrecorded.cause, "decision log unavailable; refusing to forward unaudited");
            self.permit = None;
            self.pending = Pending::Written;
            return Err(Exit::Answered(audit_unavailable()));
        }
        match &self.permit {
            Some(permit) => Ok((permit, self.sent.insert(SentBytes::new(permit.budgets().cloned())).clone())),
            // Not reached: it was put there above, and only a failed commit takes it out.
            None => Err(Exit::Answered(audit_unavailable())),
        }
    }

    /// Forwarding under `permit` with no commit of its own: a passthrough tunnel, whose one
    /// line waits for its dial ([`answered_now`](Self::answered_now)).
    pub(crate) fn permitted(&mut self, permit: Permitted) {
        self.permit = Some(permit);
    }

    /// The origin's answer to a forwarded request, as the client gets it: the response-time
    /// check (`Permitted::check_response`, C17) may withhold it, and so may a receiving budget
    /// with less left than the body's declared length (`ByteBudgets::spend_response`: refused
    /// whole, never cut part-way); a block is then answered in its place, as JSON when
    /// `accept` asks for it. Otherwise the record and the request's concurrency slots go with
    /// the body ([`BodyEnd`]), which writes the record when it ends.
    pub(crate) async fn answered(
        &mut self,
        response: Response<ProxyBody>,
        accept: Option<HeaderValue>,
    ) -> Response<ProxyBody> {
        let Some(permit) = self.permit.take() else { return response };
        let accept = || HeaderMap::from_iter(accept.clone().map(|value| (ACCEPT, value)));
        // The origin's body is dropped unread: the client never gets a byte of it.
        let permit = match permit.check_response(response.headers()) {
            Ok(permit) => permit,
            Err(blocked) => return self.block_answer(*blocked, &accept()),
        };
        let declared = body_length(&permit.record().method, &response);
        let received = match ReceivedBytes::before_head(&permit, declared).await {
            Ok(received) => received,
            Err(refused) => return self.block_answer(*permit.over_budget(&refused, None), &accept()),
        };
        let (mut record, slots) = permit.into_parts();
        record.status = Some(response.status().as_u16());
        let end = BodyEnd {
            state: Arc::clone(&self.state),
            drain: self.drain.clone(),
            started: self.started,
            record: Some(record),
            sent: self.sent.take().unwrap_or_default(),
            received,
            _slots: slots,
        };
        // The body writes the record from here on.
        self.pending = Pending::Written;
        response.map(|body| Metered::new(body, end).boxed_unsync())
    }

    /// The exchange with the origin failed with `error`: when a sending budget cut the
    /// request body, the agent gets the budget's answer (`429` with `Retry-After`,
    /// `operator.byte_budget`; `503` when the shared store did not answer under `on_failure =
    /// "deny"`) as JSON when `accept` asks for it, recorded as that refusal with the bytes
    /// that passed; otherwise the error, for the caller to answer and record.
    pub(crate) fn forward_failed(&mut self, error: ProxyError, accept: Option<HeaderValue>) -> Exit {
        let Some(refused) = self.sent.as_ref().and_then(|sent| sent.cut().cloned()) else {
            return Exit::Failed(error);
        };
        let (Some(permit), Some(sent)) = (self.permit.take(), self.sent.take()) else { return Exit::Failed(error) };
        debug!(error = %error, "request body cut by a byte budget");
        let accept = HeaderMap::from_iter(accept.map(|value| (ACCEPT, value)));
        Exit::Answered(self.block_answer(*permit.over_budget(&refused, Some(sent.get())), &accept))
    }

    /// Writes the request's one line now, completed with `status`, before the caller goes on:
    /// a passthrough tunnel's, whose bytes are spliced only after it. Under `on_failure =
    /// "block"` it is committed (on disk).
    ///
    /// # Errors
    /// The 503 answer when the commit failed (nothing may be spliced).
    pub(crate) async fn answered_now(&mut self, status: StatusCode) -> Result<(), Exit> {
        self.complete(Ending::Answered(status));
        let Pending::Completed(record) = &mut self.pending else { return Ok(()) };
        record.line = Line::TunnelOpened;
        let record = &*record;
        let (audit, metrics) = (&self.state.audit, &self.state.metrics);
        let written = if audit.on_failure() == OnFailure::Block {
            audit.commit(record).await.map_err(|unrecorded| {
                warn!(error = %unrecorded.cause, "decision log unavailable; refusing to open the tunnel unaudited");
                Exit::Answered(audit_unavailable())
            })
        } else {
            if let Err(unrecorded) = audit.record(record).await {
                warn!(error = %unrecorded.cause, event_id = %record.id, "decision record not written");
            }
            Ok(())
        };
        metrics.record(record);
        self.pending = Pending::Written;
        written
    }

    /// A connection refused before any HTTP exchange (a transparent TLS connection): the
    /// block's record, with no status, written now.
    pub(crate) async fn refused(&mut self, blocked: Blocked) {
        self.pending = Pending::Record(blocked.into_record());
        self.finish(Ending::Closed).await;
    }

    /// Completes the request's record with how it ended and writes it; a request with no
    /// record (never routed, an intercepted CONNECT) writes nothing. A record that cannot be
    /// written is counted by the audit log and logged here; the answer goes out regardless.
    pub(crate) async fn finish(&mut self, ending: Ending<'_>) {
        self.held = None;
        self.complete(ending);
        let Pending::Completed(record) = &self.pending else { return };
        if let Err(unrecorded) = self.state.audit.record(record).await {
            warn!(error = %unrecorded.cause, event_id = %record.id, "decision record not written");
        }
        self.state.metrics.record(record);
        self.pending = Pending::Written;
    }

    /// Completes the record with `ending`, kept as `Completed` while it is written (a request
    /// dropped while its write waits for room still writes it); nothing when there is none.
    fn complete(&mut self, ending: Ending<'_>) {
        let record = match self.take() {
            Some(Taken::Open(mut record)) => {
                record.duration = Some(self.started.elapsed());
                match ending {
                    Ending::Answered(status) => record.status = Some(status.as_u16()),
                    Ending::Failed(error) => {
                        record.status = Some(status_for(error).as_u16());
                        record.outcome = Outcome::Error;
                        // It may quote the agent's text: a secret's value in it is redacted.
                        let shown = error.to_string();
                        let shown = self.state.generation().gate.redacted(&shown).into_owned();
                        if let Some(code) = error.code() {
                            // A reason the start line did not hold: a whole end line.
                            if record.line == Line::Completion {
                                record.line = Line::End;
                            }
                            record.reasons.push(crate::policy::Reason::new(code, shown.clone()));
                        }
                        record.error = Some(shown);
                        // A body a byte budget cut fails the exchange: agentgate's own bound.
                        let cut = record.body_cut == Some(BodyCut::Budget);
                        record.error_type = Some(if cut { ErrorType::Proxy } else { error_type_for(error) });
                    }
                    Ending::Closed => {}
                }
                record
            }
            // Completed before, and its write was cut off: written as it was.
            Some(Taken::Completed(record)) => record,
            None => return,
        };
        self.pending = Pending::Completed(record);
    }

    /// The request's record as it stands, taken out (the permit's while forwarding, a
    /// block's); what is left says it is written. `None` when it has none.
    fn take(&mut self) -> Option<Taken> {
        if let Some(permit) = self.permit.take() {
            self.pending = Pending::Written;
            let mut record = permit.into_record();
            if let Some(sent) = self.sent.take() {
                record.request_bytes = Some(sent.get());
                record.body_cut = sent.cut().map(|_| BodyCut::Budget);
            }
            return Some(Taken::Open(record));
        }
        match mem::replace(&mut self.pending, Pending::Written) {
            Pending::Record(record) | Pending::Undecided(record) => Some(Taken::Open(record)),
            Pending::Blocked(blocked) => Some(Taken::Open(blocked.into_record())),
            Pending::Completed(record) => Some(Taken::Completed(record)),
            Pending::Nothing | Pending::Written => None,
        }
    }

    /// The record of a request dropped before it finished, or `None` when it has none.
    fn ended_unanswered(&mut self) -> Option<DecisionRecord> {
        if let Some(mut held) = self.held.take() {
            held.duration = Some(self.started.elapsed());
            held.approval = Some(Approval::undecided(ApprovalDecision::HungUp));
            info!(record_id = %held.id, "client hung up while its request was held for approval");
            return Some(*held);
        }
        let mut record = match self.take()? {
            Taken::Open(record) => record,
            Taken::Completed(record) => return Some(record),
        };
        if record.line == Line::Start {
            // Dropped while its start line was committed: this line is its whole record.
            record.line = Line::End;
        }
        let (message, error_type) =
            if self.drain.is_stopped() { (CUT_OFF, ErrorType::Proxy) } else { (HUNG_UP, ErrorType::Client) };
        debug!(record_id = %record.id, "{message}");
        record.duration = Some(self.started.elapsed());
        record.outcome = Outcome::Error;
        record.error = Some(message.to_owned());
        record.error_type = Some(error_type);
        Some(record)
    }
}

impl Drop for RequestRecord {
    fn drop(&mut self) {
        let Some(record) = self.ended_unanswered() else { return };
        write_soon(&self.state, &self.drain, record);
    }
}

/// Counts `record` and queues it at once, or, when the log's queue is full, from a task of
/// its own that waits for room: for a record completed where nothing can wait (a `Drop`, a
/// body's poll).
fn write_soon(state: &Arc<ProxyState>, drain: &Drain, record: DecisionRecord) {
    state.metrics.record(&record);
    // Queued here when the queue has room (the usual case): a task only to wait for room.
    match state.audit.try_record(&record) {
        Ok(TryRecord::Queued) => return,
        Ok(TryRecord::Full) => {}
        Err(unrecorded) => {
            warn!(error = %unrecorded.cause, event_id = %record.id, "decision record not written");
            return;
        }
    }
    // Dropped or polled inside the connection's task, so a runtime is there; without one
    // (the runtime itself shutting down) the record is lost with the process's other work.
    let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
    let (state, drain) = (Arc::clone(state), drain.clone());
    runtime.spawn(async move {
        // Held until written: shutdown waits for it before it closes the log.
        let _drain = drain;
        if let Err(unrecorded) = state.audit.record(&record).await {
            warn!(error = %unrecorded.cause, event_id = %record.id, "decision record not written");
        }
    });
}

/// The [`Meter`] of a forwarded request's response body: it holds the request's record and
/// concurrency slots, and when the body ends (or is cut, or dropped) completes the record
/// with the duration and both byte counts, says who cut it if it did not end, and writes it.
struct BodyEnd {
    state: Arc<ProxyState>,
    drain: Drain,
    started: Instant,
    /// Taken when written: exactly once.
    record: Option<DecisionRecord>,
    sent: SentBytes,
    /// The receiving budgets the body is spent against, if any.
    received: Option<ReceivedBytes>,
    /// Released with the body (C21).
    _slots: Permit,
}

impl Meter for BodyEnd {
    fn passed(&mut self, bytes: u64, total: u64) -> Pass {
        self.received.as_ref().map_or(Pass::Now(Ok(())), |received| received.pass(bytes, total))
    }

    fn ended(&mut self, how: Ended, total: u64) {
        let Some(mut record) = self.record.take() else { return };
        record.duration = Some(self.started.elapsed());
        record.request_bytes = Some(self.sent.get());
        record.response_bytes = Some(total);
        record.body_cut = match how {
            Ended::Complete => None,
            Ended::Failed => Some(BodyCut::Origin),
            Ended::Dropped => Some(BodyCut::Client),
            Ended::Cut => Some(BodyCut::Budget),
        };
        // A body of unknown length a budget cut: the budget's refusal, with its code.
        if let Some(refused) = self.received.as_ref().and_then(ReceivedBytes::cut) {
            record_refusal(&mut record, refused);
        }
        write_soon(&self.state, &self.drain, record);
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use tokio::sync::broadcast;

    use super::*;
    use crate::app::Proxy;
    use crate::config::Config;
    use crate::policy::operator::Mode;
    use crate::proxy::conn::DrainController;

    type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

    /// A bound proxy (never served) logging to `dir`, and the lines its log writes.
    async fn running(dir: &std::path::Path) -> TestResult<(crate::app::RunningProxy, broadcast::Receiver<Arc<str>>)> {
        let mut config = Config { listen: SocketAddr::from(([127, 0, 0, 1], 0)), ..Config::default() };
        config.ca.dir = dir.join("ca");
        config.audit.path = dir.join("decisions.jsonl");
        config.admin.listen = None;
        let running = Proxy::new(Arc::new(config))?.bind().await?;
        let lines = running.state().audit.recent().subscribe();
        Ok((running, lines))
    }

    fn decided(path: &str) -> DecisionRecord {
        let client = SocketAddr::from(([127, 0, 0, 1], 40_000));
        DecisionRecord::new(Outcome::Allow, Mode::Enforce, client, "bot", "GET", format!("http://example.com{path}"))
    }

    /// The next line the log writes, as JSON.
    async fn next(lines: &mut broadcast::Receiver<Arc<str>>) -> TestResult<serde_json::Value> {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.recv()).await??;
        Ok(serde_json::from_str(&line)?)
    }

    /// A request whose future is dropped before it was answered (its client hung up) writes
    /// its record from `Drop`, once, saying so; the next line is another request's.
    #[tokio::test]
    async fn a_request_dropped_before_its_answer_is_recorded_once_as_hung_up() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (running, mut lines) = running(dir.path()).await?;
        let drain = DrainController::new();
        let mut record = RequestRecord::start(Arc::clone(running.state()), drain.handle());
        record.undecided(decided("/dropped"));
        drop(record);
        let line = next(&mut lines).await?;
        assert_eq!(line["url.path"], "/dropped", "{line}");
        assert_eq!(line["event.action"], "error", "{line}");
        assert_eq!(line["error.message"], HUNG_UP, "{line}");
        assert_eq!(line["error.type"], "client", "{line}");
        assert!(line["http.response.status_code"].is_null(), "nothing was answered: {line}");

        let mut marker = RequestRecord::start(Arc::clone(running.state()), drain.handle());
        marker.undecided(decided("/next"));
        marker.finish(Ending::Answered(StatusCode::OK)).await;
        assert_eq!(next(&mut lines).await?["url.path"], "/next", "the dropped request wrote one line");
        Ok(())
    }

    /// A finished record is written once with its status; dropping the guard after adds
    /// nothing, and a tunnel recorded inside (no record of its own) writes nothing at all.
    #[tokio::test]
    async fn a_finished_record_is_written_once_and_one_recorded_inside_not_at_all() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (running, mut lines) = running(dir.path()).await?;
        let drain = DrainController::new();
        let mut answered = RequestRecord::start(Arc::clone(running.state()), drain.handle());
        answered.undecided(decided("/answered"));
        answered.finish(Ending::Answered(StatusCode::NOT_FOUND)).await;
        drop(answered);
        let line = next(&mut lines).await?;
        assert_eq!((&line["url.path"], &line["http.response.status_code"]), (&"/answered".into(), &404.into()));

        let mut inside = RequestRecord::start(Arc::clone(running.state()), drain.handle());
        inside.undecided(decided("/tunnel"));
        inside.recorded_inside();
        inside.finish(Ending::Answered(StatusCode::OK)).await;
        drop(inside);

        let mut marker = RequestRecord::start(Arc::clone(running.state()), drain.handle());
        marker.undecided(decided("/next"));
        marker.finish(Ending::Closed).await;
        let line = next(&mut lines).await?;
        assert_eq!(line["url.path"], "/next", "neither the dropped guard nor the tunnel wrote a line: {line}");
        assert!(line["http.response.status_code"].is_null(), "closed: no status: {line}");
        Ok(())
    }

    /// A request cut off by the shutdown grace period is the proxy's failure, not the
    /// client's.
    #[tokio::test]
    async fn a_request_cut_off_by_shutdown_is_recorded_as_the_proxys() -> TestResult {
        let dir = tempfile::tempdir()?;
        let (running, mut lines) = running(dir.path()).await?;
        let controller = DrainController::new();
        let mut watcher = controller.handle();
        let mut record = RequestRecord::start(Arc::clone(running.state()), controller.handle());
        record.undecided(decided("/cut"));
        // The grace period is over at once; the request is still running.
        let draining = tokio::spawn(controller.drain(tokio::time::Instant::now()));
        watcher.stopped().await;
        drop(record);
        let line = next(&mut lines).await?;
        assert_eq!((&line["error.message"], &line["error.type"]), (&CUT_OFF.into(), &"proxy".into()), "{line}");
        drop(watcher);
        assert_eq!(draining.await?, 2, "both handles were running when the grace period ended");
        Ok(())
    }
}
