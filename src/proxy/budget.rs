//! Byte budgets at the proxy's edge (the operator's `*_bytes_per_hour`, counted by
//! `crate::limits::ByteBudgets`): the meter of a forwarded request's body ([`SentBytes`]),
//! a meter's answer for bytes spent ([`budget_pass`]) and what a body cut by a budget ends
//! with, and the budget of a byte relay ([`RelayBudget`]: a passthrough tunnel or an upgraded
//! connection), whose bytes are spent both ways as they pass and which writes the record of a
//! relay it cut.
//!
//! A body or relay cut by a budget is recorded as the budget's refusal (`rate_limited`, the
//! budget's reason first, `agentgate.body.cut: budget`); a request body cut before its answer
//! is answered with the budget's block (`RequestRecord::forward_failed`).
//!
//! Never decides which budgets apply (the gate does), keeps a count itself (`crate::limits`
//! does) or reads the bytes it counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use http::header::CONTENT_LENGTH;
use http::{Response, StatusCode};
use tracing::{info, warn};

use super::body::{Cut, Ended, Meter, Pass, ProxyBody};
use crate::audit::{AuditLog, BodyCut, DecisionRecord, Line};
use crate::gate::{Permitted, record_refusal};
use crate::limits::{ByteBudgets, Refused, Spending};
use crate::policy::Direction;

/// The request body bytes of a forwarded request, counted as they stream to the origin (the
/// [`Meter`] of the request body) and read when its record is completed; the bytes past
/// its declared length are spent against the agent's sending budgets, and a body that
/// crosses one is cut (the origin's exchange fails, and the agent is answered with the
/// budget's refusal).
#[derive(Clone, Default)]
pub(crate) struct SentBytes {
    counted: Arc<Counted>,
    budgets: Option<Arc<ByteBudgets>>,
}

#[derive(Default)]
struct Counted {
    bytes: AtomicU64,
    /// The budget's refusal that cut the body, if one did.
    cut: OnceLock<Refused>,
}

impl SentBytes {
    /// The meter of a request body spent against `budgets`.
    pub(crate) fn new(budgets: Option<Arc<ByteBudgets>>) -> Self {
        SentBytes { counted: Arc::default(), budgets }
    }

    /// The bytes that passed to the origin.
    pub(crate) fn get(&self) -> u64 {
        self.counted.bytes.load(Ordering::Relaxed)
    }

    /// The refusal of the sending budget that cut the body, if one did.
    pub(crate) fn cut(&self) -> Option<&Refused> {
        self.counted.cut.get()
    }
}

impl Meter for SentBytes {
    fn passed(&mut self, bytes: u64, total: u64) -> Pass {
        let counted = Arc::clone(&self.counted);
        let Some(budgets) = &self.budgets else {
            counted.bytes.store(total, Ordering::Relaxed);
            return Pass::Now(Ok(()));
        };
        budget_pass(budgets.spend(Direction::Sent, bytes, total - bytes), move |spent| match spent {
            Ok(()) => counted.bytes.store(total, Ordering::Relaxed),
            Err(refused) => {
                let _ = counted.cut.set(refused.clone());
            }
        })
    }

    fn ended(&mut self, _how: Ended, _total: u64) {}
}

/// The response body's bytes spent against the agent's receiving budgets as they pass (the
/// budgets' part of the response body's [`Meter`], `record::BodyEnd`): a body that crosses one
/// is cut, and the refusal kept for its record.
pub(crate) struct ReceivedBytes {
    budgets: Arc<ByteBudgets>,
    /// The budget's refusal that cut the body, if one did.
    cut: Arc<OnceLock<Refused>>,
}

impl ReceivedBytes {
    /// Before a response's head goes out under `permit`: its `declared` length
    /// ([`body_length`]) spent against every receiving budget, all or none
    /// (`ByteBudgets::spend_response`); then the meter of the rest. `None` when no receiving
    /// budget applies.
    ///
    /// # Errors
    /// The budget's refusal: the response is withheld whole, never cut part-way.
    pub(crate) async fn before_head(
        permit: &Permitted,
        declared: Option<u64>,
    ) -> Result<Option<ReceivedBytes>, Refused> {
        let Some(budgets) = permit.budgets().filter(|b| b.counts(Direction::Received)) else { return Ok(None) };
        if let Some(length) = declared {
            budgets.spend_response(length).await?;
        }
        Ok(Some(ReceivedBytes { budgets: Arc::clone(budgets), cut: Arc::default() }))
    }

    /// `bytes` more of the body (`total` with them) about to pass.
    pub(crate) fn pass(&self, bytes: u64, total: u64) -> Pass {
        let cut = Arc::clone(&self.cut);
        budget_pass(self.budgets.spend(Direction::Received, bytes, total - bytes), move |spent| {
            if let Err(refused) = spent {
                let _ = cut.set(refused.clone());
            }
        })
    }

    /// The refusal of the budget that cut the body, if one did.
    pub(crate) fn cut(&self) -> Option<&Refused> {
        self.cut.get()
    }
}

/// The length of `response`'s body as its head declares it (`Content-Length`), when it has a
/// body: none for an answer to `HEAD`, a `1xx`, `204` or `304`.
pub(crate) fn body_length(method: &str, response: &Response<ProxyBody>) -> Option<u64> {
    let status = response.status();
    if method.eq_ignore_ascii_case("HEAD")
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        return None;
    }
    response.headers().get(CONTENT_LENGTH)?.to_str().ok()?.trim().parse().ok()
}

/// A meter's answer for bytes spent against byte budgets: now, or when the shared store
/// answers; `then` is told how the spend went before the body hears it.
pub(crate) fn budget_pass(spending: Spending, then: impl FnOnce(&Result<(), Refused>) + Send + 'static) -> Pass {
    let settle = move |spent: Result<(), Refused>| {
        then(&spent);
        spent.map_err(|refused| Cut(cut_message(&refused)))
    };
    match spending {
        Spending::Now(spent) => Pass::Now(settle(spent)),
        Spending::Later(spent) => Pass::After(Box::pin(async move { settle(spent.await) })),
    }
}

/// What a body cut by a byte budget ends with (its reader sees a reset or a closed
/// connection, never an end), and what the log line of a cut relay says.
fn cut_message(refused: &Refused) -> String {
    match refused {
        Refused::Exceeded(exceeded) => format!(
            "agentgate cut the body: byte budget {} spent; retry after {} s",
            exceeded.limit.reason.rule,
            exceeded.retry_after_secs()
        ),
        Refused::NeverFits { limit, .. } => {
            format!("agentgate cut the body: it is larger than the whole byte budget {}", limit.reason.rule)
        }
        Refused::StoreUnavailable => "agentgate cut the body: the shared limits store did not answer and \
                                      [limits.redis] on_failure = \"deny\""
            .to_owned(),
    }
}

/// The byte budgets of a relay (a passthrough tunnel after its `200`, an upgraded connection
/// after its `101`), with the request's record as it was decided: the relay spends its bytes
/// both ways ([`spend`](Self::spend)) and, when a budget cuts it, the record is written once
/// more, the request's end, as that refusal ([`record_cut`](Self::record_cut)).
pub(crate) struct RelayBudget {
    budgets: Arc<ByteBudgets>,
    record: DecisionRecord,
    status: StatusCode,
    audit: AuditLog,
}

impl RelayBudget {
    /// The budgets of `permit`'s relay, answered with `status`; `None` when it has none.
    pub(crate) fn of(audit: &AuditLog, permit: &Permitted, status: StatusCode) -> Option<Self> {
        Some(RelayBudget {
            budgets: Arc::clone(permit.budgets()?),
            record: permit.record().clone(),
            status,
            audit: audit.clone(),
        })
    }

    /// Spends `n` bytes relayed in `direction` (`Sent`: from the agent) after `passed`.
    ///
    /// # Errors
    /// The [`Refused`] that cuts the relay.
    pub(crate) async fn spend(&self, direction: Direction, n: u64, passed: u64) -> Result<(), Refused> {
        match self.budgets.spend(direction, n, passed) {
            Spending::Now(spent) => spent,
            Spending::Later(spent) => spent.await,
        }
    }

    /// Writes the end of a relay `refused` cut after `sent` bytes from the agent and
    /// `received` to it: the request's record (its `event.id`) as the budget's refusal, with
    /// both counts and `agentgate.body.cut: budget`. Not counted in the metrics again: the
    /// request was, when it was answered.
    pub(crate) async fn record_cut(self, refused: &Refused, sent: u64, received: u64) {
        let mut record = self.record;
        record.line = Line::End;
        record.status = Some(self.status.as_u16());
        record.request_bytes = Some(sent);
        record.response_bytes = Some(received);
        record.body_cut = Some(BodyCut::Budget);
        record_refusal(&mut record, refused);
        info!(event_id = %record.id, sent, received, "relay cut: {}", cut_message(refused));
        if let Err(unrecorded) = self.audit.record(&record).await {
            warn!(error = %unrecorded.cause, event_id = %record.id, "decision record not written");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use http::HeaderValue;
    use http_body_util::{BodyExt, Empty};
    use tokio::io::{AsyncReadExt, AsyncWriteExt, duplex};

    use super::*;
    use crate::audit::{AuditConfig, Outcome};
    use crate::limits::{Declared, Limiter, Usage};
    use crate::policy::operator::Mode;
    use crate::policy::{Code, Limit, LimitKind, LimitScope, OperatorCode, Reason, Source};
    use crate::proxy::conn::{DrainController, splice};

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    fn sending_budget(bytes: u64) -> Limit {
        let reason = Reason::new(OperatorCode::ByteBudget, format!("limits.sent_bytes_per_hour = {bytes}"));
        let kind = LimitKind::Bytes { direction: Direction::Sent, bytes, window_s: 3600 };
        Limit { source: Source::Operator, kind, scope: LimitScope::Agent, reason }
    }

    /// `limits` counted in process for one agent, with nothing spent before forwarding.
    async fn budgets(limits: &[Limit]) -> Result<Arc<ByteBudgets>, Box<dyn std::error::Error>> {
        let limiter = Arc::new(Limiter::in_process());
        let usage = Usage { agent: "bot", origin: "http://example.com:80", host: "example.com" };
        let body = Declared { length: 0, streams: true };
        let (_, budgets) =
            limiter.check_and_spend(usage, limits, body).await.map_err(|refused| format!("{refused:?}"))?;
        Ok(Arc::new(budgets.ok_or("a byte budget")?))
    }

    fn response(status: u16, length: Option<&str>) -> Response<ProxyBody> {
        let mut response = Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
        *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if let Some(length) = length.and_then(|l| HeaderValue::from_str(l).ok()) {
            response.headers_mut().insert(CONTENT_LENGTH, length);
        }
        response
    }

    /// What a receiving budget spends before a response head goes out: its declared body,
    /// and nothing for an answer that has no body whatever its `Content-Length` says.
    #[test]
    fn a_response_body_length_is_its_content_length_when_it_has_a_body() {
        assert_eq!(body_length("GET", &response(200, Some("200000"))), Some(200_000));
        assert_eq!(body_length("GET", &response(200, None)), None, "unknown: spent as it streams");
        assert_eq!(body_length("GET", &response(200, Some("many"))), None);
        assert_eq!(body_length("HEAD", &response(200, Some("200000"))), None, "a HEAD answer has no body");
        for status in [101, 204, 304] {
            assert_eq!(body_length("GET", &response(status, Some("10"))), None, "{status}");
        }
    }

    #[tokio::test]
    async fn a_request_body_is_counted_until_a_sending_budget_cuts_it_and_the_refusal_is_kept() -> TestResult {
        let mut sent = SentBytes::new(Some(budgets(&[sending_budget(1000)]).await?));
        assert!(matches!(sent.passed(600, 600), Pass::Now(Ok(()))));
        assert!(sent.cut().is_none());
        let Pass::Now(Err(cut)) = sent.passed(600, 1200) else { return Err("600 + 600 > 1000: cut".into()) };
        assert!(cut.0.contains("limits.sent_bytes_per_hour = 1000"), "{}", cut.0);
        assert_eq!(sent.get(), 600, "only what passed is counted");
        let Some(Refused::Exceeded(exceeded)) = sent.cut() else { return Err("the budget's refusal is kept".into()) };
        assert_eq!(exceeded.limit.reason.code, Code::Operator(OperatorCode::ByteBudget));
        Ok(())
    }

    /// A relay of 40 KiB from the agent under a 16 KiB sending budget: the origin gets at
    /// most the budget, both ends are closed, and the relay's end is written to the decision
    /// log as the budget's refusal, with the bytes relayed each way.
    #[tokio::test]
    async fn a_relay_that_crosses_its_budget_is_cut_there_and_its_end_recorded_as_the_refusal() -> TestResult {
        let dir = tempfile::tempdir()?;
        let config = AuditConfig { path: dir.path().join("decisions.jsonl"), ..AuditConfig::default() };
        let (audit, _writer) = AuditLog::start(config, crate::audit::test_key())?;
        let mut written = audit.recent().subscribe();
        let client = SocketAddr::from(([127, 0, 0, 1], 40_000));
        let record = DecisionRecord::new(Outcome::Allow, Mode::Enforce, client, "bot", "GET", "http://example.com/ws");
        let budgets = budgets(&[sending_budget(16 * 1024)]).await?;
        let budget = RelayBudget { budgets, record, status: StatusCode::SWITCHING_PROTOCOLS, audit: audit.clone() };
        let (mut agent, agent_side) = duplex(64 * 1024);
        let (origin_side, mut origin) = duplex(64 * 1024);
        let drain = DrainController::new();
        let relay = tokio::spawn(splice(agent_side, origin_side, drain.handle(), "test relay", Some(budget)));

        let ends = async {
            // Written in 4 KiB pieces, so the relay reads them one by one.
            for _ in 0..10 {
                if agent.write_all(&[7u8; 4 * 1024]).await.is_err() {
                    break;
                }
                tokio::task::yield_now().await;
            }
            let mut arrived = Vec::new();
            origin.read_to_end(&mut arrived).await?;
            relay.await?;
            Ok::<_, Box<dyn std::error::Error>>(arrived.len())
        };
        let arrived = tokio::time::timeout(Duration::from_secs(10), ends).await??;
        assert!(arrived <= 16 * 1024, "no more than the budget reached the origin: {arrived}");
        let mut rest = Vec::new();
        assert_eq!(agent.read_to_end(&mut rest).await?, 0, "the agent's end is closed too");

        let line = tokio::time::timeout(Duration::from_secs(10), written.recv()).await??;
        let line: serde_json::Value = serde_json::from_str(&line)?;
        assert_eq!(line["event.action"], "rate_limited", "{line}");
        assert_eq!(line["agentgate.reasons"][0]["code"], "operator.byte_budget", "{line}");
        assert_eq!(line["agentgate.body.cut"], "budget", "{line}");
        assert_eq!(line["http.response.status_code"], 101, "{line}");
        assert_eq!(line["http.request.body.bytes"], u64::try_from(arrived)?, "what passed to the origin: {line}");
        Ok(())
    }
}
