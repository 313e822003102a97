//! The gate: the one place a request is decided. For every request — plain HTTP, MITM'd
//! HTTPS, and the host-level check of a passthrough tunnel — it identifies the agent, applies
//! the operator's rules, loads the origin's policies (waiting for the first fetch), evaluates
//! them with the pure policy core, applies the mode, and hands back either a [`Permitted`]
//! (the only way to reach `forward`) or a [`Blocked`] with the decision and its audit record.
//!
//! Never: writes responses (the proxy builds block answers from a [`Blocked`]), writes the
//! decision log (the proxy records once the status is known), parses policy text.

use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;
use http::header::USER_AGENT;

use crate::audit::{DecisionRecord, Mode, Outcome as LogOutcome};
use crate::config::{AgentConfig, Config};
use crate::fetch::{Origin, PolicyCache};
use crate::net::{Refusal, canonical_pattern};
use crate::policy::operator::{OperatorRule, OperatorRules};
use crate::policy::{self, Decision, Headers, Outcome, Reason, RequestView, Source};

/// The request facts the gate needs, borrowed from the proxy's parsed request.
#[derive(Debug, Clone, Copy)]
pub struct GateRequest<'a> {
    /// The agent's address.
    pub client: SocketAddr,
    /// Where the request goes.
    pub origin: &'a Origin,
    /// The absolute URL as the agent asked for it, with the canonical host (for the log;
    /// redacted there).
    pub url: &'a str,
    /// The method as sent.
    pub method: &'a str,
    /// Path and query as sent (`/` for a tunnel's host-level check).
    pub path_and_query: &'a str,
    /// The request headers as the agent sent them.
    pub headers: &'a HeaderMap,
    /// The addresses the network guard vetted for the origin's host (`crate::net::Guard`),
    /// for operator rules that name an address or a CIDR.
    pub addresses: &'a [IpAddr],
}

/// A request the gate let through. Only the gate can make one, so a forward without a
/// decision does not compile (linkerd's `Permitted<T>`).
#[derive(Debug)]
pub struct Permitted {
    record: DecisionRecord,
    inject_headers: Vec<(String, String)>,
}

impl Permitted {
    /// Headers the forwarded request must carry (AGENTS.md agent identification).
    pub fn inject_headers(&self) -> &[(String, String)] {
        &self.inject_headers
    }

    /// Records the request under another method than the one decided on (a passthrough
    /// tunnel is decided as `GET /` and logged as `CONNECT`).
    pub fn set_method(&mut self, method: &str) {
        self.record.method = method.to_owned();
    }

    /// The decision record as decided, before any response: what is committed to the log
    /// before forwarding under `[audit] on_failure = "block"`.
    pub fn record(&self) -> &DecisionRecord {
        &self.record
    }

    /// The decision record, to be completed with the response and written.
    pub fn into_record(self) -> DecisionRecord {
        self.record
    }
}

/// A request the gate refused.
#[derive(Debug)]
pub struct Blocked {
    /// The decision, blocking reasons first.
    pub decision: Decision,
    /// The decision record; its id goes into the block answer.
    pub record: DecisionRecord,
}

/// What the gate says about one request.
#[derive(Debug)]
pub enum Verdict {
    /// Forward it (in monitor mode, possibly with a `would_deny` record).
    Forward(Permitted),
    /// Answer with a block response.
    Block(Blocked),
}

/// The gate of one running proxy.
pub struct Gate {
    mode: Mode,
    agent: AgentConfig,
    rules: OperatorRules,
    cache: PolicyCache,
}

impl Gate {
    /// A gate for `config`, loading policies through `cache`.
    pub fn new(config: &Config, cache: PolicyCache) -> Self {
        let rules = config
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                OperatorRule::new(i + 1, &canonical_pattern(&r.host), &r.path, &r.methods, r.action, &r.reason)
            })
            .collect();
        let bypass_hosts = config.bypass_hosts.iter().map(|p| canonical_pattern(p)).collect();
        Gate { mode: config.mode, agent: config.agent.clone(), rules: OperatorRules::new(bypass_hosts, rules), cache }
    }

    /// Phases `identify_agent`, `load_policies`, `evaluate`: decides one request.
    pub async fn decide(&self, req: GateRequest<'_>) -> Verdict {
        let agent_id = self.identify_agent(req.client);
        let user_agent = req.headers.get(USER_AGENT).and_then(|v| v.to_str().ok());
        let headers = policy_headers(req.headers);
        let host = req.origin.host();
        let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        let view = RequestView {
            method: req.method,
            scheme: req.origin.scheme().as_str(),
            host,
            port: req.origin.port(),
            path_and_query: req.path_and_query,
            product_token: self.agent.product_token.as_deref(),
            user_agent,
            agent_id: &agent_id,
            trust_level: self.agent.trust_level,
            purposes: &self.agent.purposes,
            headers: &headers,
        };
        let decision = self.evaluate(&view, req.origin, req.addresses).await;
        self.verdict(decision, &req, agent_id, user_agent)
    }

    /// The block for a destination the network guard refused (`crate::net`), decided before
    /// any policy is loaded. It blocks in monitor mode too: the guard is not a site policy,
    /// and the connector would refuse the connection anyway.
    pub fn refuse(&self, refusal: &Refusal, req: &GateRequest<'_>) -> Blocked {
        let reason = Reason::new(Source::Operator, refusal.code(), refusal.to_string());
        let decision = Decision {
            outcome: Outcome::Deny,
            reasons: vec![reason],
            blocking: 1,
            limits: Vec::new(),
            inject_headers: Vec::new(),
        };
        let mut record = self.record_for(LogOutcome::Deny, req);
        record.reasons = decision.reasons.clone();
        Blocked { decision, record }
    }

    /// The record of a request that failed before it could be decided (its host does not
    /// resolve, so the network guard has nothing to vet); the caller adds the error.
    pub fn undecided(&self, req: &GateRequest<'_>) -> DecisionRecord {
        self.record_for(LogOutcome::Error, req)
    }

    fn record_for(&self, outcome: LogOutcome, req: &GateRequest<'_>) -> DecisionRecord {
        let agent = self.identify_agent(req.client);
        let mut record = DecisionRecord::new(outcome, self.mode, req.client, agent, req.method, req.url);
        record.user_agent = req.headers.get(USER_AGENT).and_then(|v| v.to_str().ok()).map(str::to_owned);
        record
    }

    /// Operator rules first, then the origin's policies.
    async fn evaluate(&self, view: &RequestView<'_>, origin: &Origin, addresses: &[IpAddr]) -> Decision {
        match self.rules.evaluate(view, addresses) {
            Some(decision) => decision,
            None => {
                let policies = self.cache.policies(origin).await;
                policy::evaluate(&policies, view)
            }
        }
    }

    /// The agent id: the configured one, else the client's IP address (DESIGN §3; the
    /// Proxy-Authorization user name comes with authentication).
    fn identify_agent(&self, client: SocketAddr) -> String {
        self.agent.id.clone().unwrap_or_else(|| client.ip().to_string())
    }

    /// Applies the mode and builds the record.
    fn verdict(&self, decision: Decision, req: &GateRequest<'_>, agent: String, user_agent: Option<&str>) -> Verdict {
        let blocked = decision.outcome != Outcome::Allow;
        let outcome = match (blocked, self.mode) {
            (true, Mode::Monitor) => LogOutcome::WouldDeny,
            _ => LogOutcome::from(decision.outcome),
        };
        let mut record = DecisionRecord::new(outcome, self.mode, req.client, agent, req.method, req.url);
        record.user_agent = user_agent.map(str::to_owned);
        record.reasons = decision.reasons.clone();
        record.limits = decision.limits.clone();
        if blocked && self.mode == Mode::Enforce {
            Verdict::Block(Blocked { decision, record })
        } else {
            Verdict::Forward(Permitted { record, inject_headers: decision.inject_headers })
        }
    }
}

/// The request headers as the policy core sees them (values that are not visible ASCII are
/// left out: no policy rule reads them).
fn policy_headers(headers: &HeaderMap) -> Headers {
    let mut out = Headers::default();
    for (name, value) in headers {
        if let Ok(value) = value.to_str() {
            out.push(name.as_str(), value);
        }
    }
    out
}
