//! The gate: the one place a request is decided. For every request — plain HTTP, MITM'd
//! HTTPS, and the host-level check of a passthrough tunnel — it identifies the agent
//! (`identify_agent`, proxy authentication), checks the agent's egress lists
//! (`check_egress`, before anything is resolved), applies the operator's rules, loads the origin's
//! policies (waiting for the first fetch), evaluates them with the pure policy core (a git
//! discovery once more as the POST it announces, `gate::git`), checks
//! and spends the limits that apply (`check_limits`), applies the agent's mode, and hands back
//! either a [`Permitted`] (the only way to reach `forward`) or a [`Blocked`] with the decision,
//! the kind of block (403, 407 or 429) and its audit record. After the origin answered,
//! [`Permitted::check_response`] applies the response-time checks (AGENTS.md C17, usage U4). A request
//! a human approved is turned from its [`Blocked`] into a [`Permitted`] here too
//! ([`Gate::approved`]), so it passes the same limits as any allowed request.
//!
//! The phases are here, but for `check_egress` and a human's admission of an unlisted host
//! (`gate/egress.rs`); what the gate hands back is in `gate/verdict.rs`.
//!
//! Never: writes responses (the proxy builds block answers from a [`Blocked`]), writes the
//! decision log (the proxy records once the status is known), parses policy text, keeps a
//! counter itself (`crate::limits` does).

mod egress;
mod secrets;
#[cfg(test)]
mod tests;
mod verdict;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use http::HeaderMap;
use http::header::{CONTENT_LENGTH, HeaderName, PROXY_AUTHORIZATION, TRANSFER_ENCODING, UPGRADE, USER_AGENT};

pub use self::egress::Admitted;
use self::egress::HostVerdict;
pub use self::verdict::{BlockKind, Blocked, Permitted, Verdict, record_refusal};
use crate::agents::{Agent, Agents, AuthFailure, Identity};
use crate::approvals::Approval;
use crate::audit::{DecisionRecord, Outcome as LogOutcome};
use crate::fetch::{Origin, PolicyCache};
use crate::limits::{ByteBudgets, Declared, Limiter, Permit, Refused, Usage};
use crate::net::Refusal;
use crate::policy::operator::{Mode, OperatorRules};
use crate::policy::{self, Decision, HeaderLookup, Limits, OperatorCode, Outcome, Policies, Reason, RequestView};
use crate::secrets::{Plan, SecretConfig, Secrets};

mod git;

/// The request header in which an agent declares its purposes for this request
/// (comma-separated; SEMANTICS D13). It replaces the configured purposes and is stripped
/// before forwarding.
pub static PURPOSE_HEADER: HeaderName = HeaderName::from_static("agentgate-purpose");

/// The request facts the gate needs, borrowed from the proxy's parsed request.
#[derive(Debug, Clone, Copy)]
pub struct GateRequest<'a> {
    /// The agent's address.
    pub client: SocketAddr,
    /// Who the agent is ([`Gate::identify_agent`]).
    pub agent: &'a Identity,
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
    /// How the request reached agentgate (`agentgate.entry`).
    pub entry: Entry,
    /// A human's admission of this request's host, which the agent's `allow_hosts` does not
    /// list: a grant for the agent and host, or the approval of this request (or of the
    /// CONNECT whose tunnel it is in). `None` for every other request.
    pub admitted: Option<&'a Admitted>,
}

/// How a request reached agentgate: what the decision log writes as `agentgate.entry`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// An absolute-form request on the proxy port (`GET http://host/path`).
    Forward,
    /// A request inside a CONNECT tunnel whose TLS agentgate terminated.
    Mitm,
    /// A request inside a CONNECT tunnel that carried plain HTTP (no TLS ClientHello).
    PlainTunnel,
    /// A CONNECT itself: its host-level decision (a passthrough, or a refused target).
    Connect,
    /// A connection the kernel redirected to `[transparent] listen` (`proxy/transparent.rs`):
    /// intercepted TLS (`tls`), or plain HTTP; a passthrough's host-level decision too.
    Transparent {
        /// Whether the connection carried TLS (so requests go to the origin over https).
        tls: bool,
    },
}

impl Entry {
    /// The name used in logs, traces and the decision log's `agentgate.entry`.
    pub fn as_str(self) -> &'static str {
        match self {
            Entry::Forward => "forward",
            Entry::Mitm => "mitm",
            Entry::PlainTunnel => "tunnel",
            Entry::Connect => "connect",
            Entry::Transparent { .. } => "transparent",
        }
    }

    /// Whether requests that came in this way reach the origin over TLS.
    pub fn is_tls(self) -> bool {
        matches!(self, Entry::Mitm | Entry::Transparent { tls: true })
    }
}

/// What the gate decides with, and nothing else of the config: built from a `Config` by
/// `Config::gate_settings` (the one conversion, at start and at every reload), so the gate
/// never reads the whole config.
pub struct GateSettings {
    /// `mode`: the operator's default, which an agent's own `mode` overrides.
    pub mode: Mode,
    /// `[agent]`, `[[agents]]` and `[auth]`, each signing agent with its key.
    pub agents: Agents,
    /// `[[rules]]` and `bypass_hosts`, compiled with canonical hosts.
    pub rules: OperatorRules,
    /// The switches that change what the site files mean (`[robots]`, `[agents_md]`, `[usage]`).
    pub policy: policy::Settings,
    /// `agentgate.instance` of every record.
    pub instance: Arc<str>,
    /// `[[secrets]]`, whose values are read when the gate is built.
    pub secrets: Vec<SecretConfig>,
}

/// The gate of one running proxy.
pub struct Gate {
    mode: Mode,
    /// The secrets in force and the values retired by reloads (`crate::secrets`).
    secrets: Secrets,
    agents: Agents,
    rules: OperatorRules,
    cache: PolicyCache,
    limiter: Arc<Limiter>,
    settings: policy::Settings,
    /// `agentgate.instance` of every record.
    instance: Arc<str>,
}

impl Gate {
    /// A gate deciding with `settings`, loading policies through `cache`, counting limits in
    /// `limiter`.
    pub fn new(settings: GateSettings, cache: PolicyCache, limiter: Arc<Limiter>) -> Self {
        let secrets = Secrets::new(&settings.secrets, None, Instant::now());
        Gate::with_secrets(settings, cache, limiter, secrets)
    }

    fn with_secrets(settings: GateSettings, cache: PolicyCache, limiter: Arc<Limiter>, secrets: Secrets) -> Self {
        let GateSettings { mode, agents, rules, policy, instance, secrets: _ } = settings;
        Gate { mode, secrets, agents, rules, cache, limiter, settings: policy, instance }
    }

    /// The agent `id` (`None`: `[agent]`) as the config in force has it: whose key signs a
    /// request now, even in a tunnel whose agent was identified before a reload.
    pub fn current_agent(&self, id: Option<&str>) -> Option<&Arc<Agent>> {
        self.agents.named(id)
    }

    /// The Web Bot Auth key ids in force: what a reload compares to see a replaced key file.
    pub fn keyids(&self) -> Vec<String> {
        self.agents.keyids()
    }

    /// A gate deciding with `settings` sharing this one's policy cache and limit counters:
    /// what a config reload swaps in (`crate::reload`), so fetched policies and spent budgets
    /// survive it, and the secrets it retires keep being scrubbed.
    pub fn reconfigured(&self, settings: GateSettings) -> Gate {
        let secrets = Secrets::new(&settings.secrets, Some(&self.secrets), Instant::now());
        Gate::with_secrets(settings, self.cache.clone(), Arc::clone(&self.limiter), secrets)
    }

    /// The limits store's failures so far ([`Limiter::store_failures`]), for `/metrics`.
    pub fn limits_store_failures(&self) -> u64 {
        self.limiter.store_failures()
    }

    /// Phase `identify_agent`: who sent a request on the proxy port, or a CONNECT, from its
    /// `Proxy-Authorization` or its address (DESIGN §3). The credential is never recorded.
    ///
    /// # Errors
    /// A [`Blocked`] of kind [`BlockKind::Unauthenticated`] (answered 407) when `[auth]
    /// required` and the client proved no agent's identity; it is blocked in monitor mode too,
    /// since there is no agent to score.
    pub fn identify_agent(
        &self,
        client: SocketAddr,
        method: &str,
        url: &str,
        headers: &HeaderMap,
    ) -> Result<Identity, Box<Blocked>> {
        self.agents.identify(client.ip(), headers.get(PROXY_AUTHORIZATION)).map_err(|failure| {
            let reason = Reason::new(failure.code(), auth_rule(failure));
            // No credentials at all is the challenge clients such as git wait for before
            // sending theirs; a wrong one is refused.
            let action = match failure {
                AuthFailure::Missing => LogOutcome::AuthChallenge,
                _ => LogOutcome::Deny,
            };
            // The agent's own text, redacted for secret values like every other record's.
            let (method, url) = (self.redacted(method), self.redacted(url));
            let mut record = DecisionRecord::new(action, self.mode, client, client.ip().to_string(), &method, &*url);
            record.user_agent =
                headers.get(USER_AGENT).and_then(|v| v.to_str().ok()).map(|ua| self.redacted(ua).into_owned());
            record.instance = Some(Arc::clone(&self.instance));
            let decision = Decision::single(Outcome::Deny, reason);
            record.set_reasons(&decision);
            Box::new(Blocked { decision, record, kind: BlockKind::Unauthenticated, policies: None })
        })
    }

    /// Phases `load_policies`, `evaluate`, `check_limits`: decides one request. The agent's
    /// egress lists come first (a refused host loads no policy); in enforce mode
    /// [`Gate::check_egress_lists`] has refused such a host already, so here they decide monitor
    /// mode's `would_deny` and a denylist CIDR that the vetted addresses fall in.
    pub fn decide<'g>(&'g self, req: GateRequest<'g>) -> impl Future<Output = Verdict> + 'g {
        self.decide_with(req, None)
    }

    /// [`Gate::decide`] for a request [`Gate::check_secrets`] checked: its `secrets` plan is
    /// carried to the permit rather than made again (`gate/secrets.rs`).
    pub async fn decide_with(&self, req: GateRequest<'_>, secrets: Option<Plan>) -> Verdict {
        self.decide_reusing(req, secrets, || None).await
    }

    /// [`Gate::decide_with`], the record of a request it lets through made of the request's
    /// undecided record ([`Gate::undecided`]), which `undecided` hands over, rather than of
    /// the request's text copied once more. It is called once nothing is awaited any more,
    /// so a decision dropped half-way leaves the caller's record whole (one record per
    /// request, `proxy/record.rs`); a refusal gets a record of its own, as it may be held.
    pub async fn decide_reusing(
        &self,
        req: GateRequest<'_>,
        secrets: Option<Plan>,
        undecided: impl FnOnce() -> Option<DecisionRecord>,
    ) -> Verdict {
        let agent = req.agent;
        let user_agent = req.headers.get(USER_AGENT).and_then(|v| v.to_str().ok());
        let declared = declared_purposes(req.headers);
        let host = req.origin.bare_host();
        let view = RequestView {
            method: req.method,
            scheme: req.origin.scheme().as_str(),
            host,
            port: req.origin.port(),
            path_and_query: req.path_and_query,
            product_token: agent.agent.product_token.as_deref(),
            user_agent,
            // The AGENTS.md identification header carries this value (C24).
            agent_id: agent.header_value(),
            trust_level: agent.agent.trust_level,
            purposes: declared.as_deref().unwrap_or(&agent.agent.purposes[..]),
            headers: req.headers,
        };
        let (mut decision, policies, admitted) = match self.host_verdict(&req) {
            HostVerdict::Refused { reason, .. } => (Decision::single(Outcome::Deny, reason), None, None),
            HostVerdict::Admitted(admitted) => {
                let (decision, policies) = self.evaluate(&view, &agent.id, req.origin, req.addresses).await;
                // A git discovery is refused when the POST it announces would be (`gate::git`).
                let decision = match decision.outcome {
                    Outcome::Allow => self.git_discovery(&view, &req, decision).await,
                    _ => decision,
                };
                (decision, policies, admitted)
            }
        };
        if let Some(blocked) = policies.as_deref().and_then(|p| self.origin_unreachable(p, &decision, &req)) {
            return Verdict::Block(blocked);
        }
        if let Some(admitted) = admitted {
            // Not blocking: it follows the reasons that decided, whatever they decided.
            decision.reasons.push(admitted.reason(&agent.id));
        }
        let mode = agent.mode(self.mode);
        if decision.outcome != Outcome::Allow {
            // A held request's own approval is in it: its one record keeps the id the queue listed.
            let mut record = self.record_for(LogOutcome::from(decision.outcome), &req);
            record.purposes = recorded_purposes(declared.as_deref(), &agent.agent);
            record.set_reasons(&decision);
            record.limits = decision.limits.iter().chain(&agent.agent.limits).cloned().collect();
            return match mode {
                Mode::Enforce | Mode::Replay => {
                    Verdict::Block(Blocked { decision, record, kind: BlockKind::Policy, policies })
                }
                Mode::Monitor => self.would_deny(record, decision.inject_headers, policies, &req, secrets),
            };
        }
        // Allowed: the decision's parts move into the record, which is all that reads them now.
        let Decision { reasons, limits, inject_headers, usage, .. } = decision;
        let limits = policy::joined(limits, &agent.agent.limits);
        let checked = self.check_limits(&req, &limits).await;
        // Nothing is awaited from here on: a request let through takes over its undecided record.
        let undecided = match checked {
            Ok(_) => undecided().map(|record| self.reissued(record, LogOutcome::Allow, &req)),
            Err(_) => None,
        };
        let mut record = undecided.unwrap_or_else(|| self.record_for(LogOutcome::Allow, &req));
        record.purposes = recorded_purposes(declared.as_deref(), &agent.agent);
        record.reasons = reasons;
        record.limits = limits;
        // What the site said about use is recorded when it allows too (SEMANTICS U6).
        record.usage = usage;
        self.permitted(record, mode, inject_headers, policies, &req, (secrets, checked))
    }

    /// A request held for a human's approval (`Blocked::needs_approval`) that an operator
    /// approved, or that an earlier approval covers: forwarded as if its policies had allowed
    /// it, once the limits that apply pass (a human's approval is not a budget). Its record's
    /// outcome becomes `allow`, its reasons stay (none blocking) and it carries `approval`.
    pub async fn approved(&self, blocked: Blocked, approval: Approval, req: &GateRequest<'_>) -> Verdict {
        let Blocked { decision, mut record, policies, .. } = blocked;
        record.outcome = LogOutcome::Allow;
        record.blocking = 0;
        record.approval = Some(approval);
        let mode = req.agent.mode(self.mode);
        let checked = self.check_limits(req, &record.limits).await;
        self.permitted(record, mode, decision.inject_headers, policies, req, (None, checked))
    }

    /// A request its policies (or a human) allowed, once its limits were spent (`checked`): a
    /// [`Permitted`] holding its slots, or the limit's block (in monitor mode, forwarded as
    /// `would_deny`). `secrets` is the plan [`Gate::check_secrets`] made, when the caller
    /// carried it.
    fn permitted(
        &self,
        mut record: DecisionRecord,
        mode: Mode,
        inject_headers: Vec<(String, String)>,
        policies: Option<Arc<Policies>>,
        req: &GateRequest<'_>,
        (secrets, checked): (Option<Plan>, Result<Spent, Refused>),
    ) -> Verdict {
        match checked {
            Ok((permit, budgets)) => {
                // Monitor mode never cuts a body: a crossed budget is for enforce mode.
                let budgets = budgets.filter(|_| mode != Mode::Monitor).map(Arc::new);
                let secrets = self.secrets_plan(req, &mut record, secrets);
                let undeclared = self.settings.usage_undeclared;
                Verdict::Forward(Permitted {
                    record,
                    mode,
                    undeclared,
                    inject_headers,
                    permit,
                    policies,
                    budgets,
                    secrets,
                })
            }
            Err(refused) => {
                let (decision, kind) = verdict::refusal_decision(&mut record, &refused);
                match mode {
                    Mode::Enforce | Mode::Replay => Verdict::Block(Blocked { decision, record, kind, policies }),
                    Mode::Monitor => self.would_deny(record, inject_headers, policies, req, secrets),
                }
            }
        }
    }

    /// A refusal in monitor mode: forwarded with its `would_deny` record, holding no slot
    /// and cutting no body.
    fn would_deny(
        &self,
        mut record: DecisionRecord,
        inject_headers: Vec<(String, String)>,
        policies: Option<Arc<Policies>>,
        req: &GateRequest<'_>,
        secrets: Option<Plan>,
    ) -> Verdict {
        record.outcome = LogOutcome::WouldDeny;
        let secrets = self.secrets_plan(req, &mut record, secrets);
        let (mode, undeclared, permit, budgets) =
            (Mode::Monitor, self.settings.usage_undeclared, Permit::default(), None);
        Verdict::Forward(Permitted { record, mode, undeclared, inject_headers, permit, policies, secrets, budgets })
    }

    /// The block for a destination the network guard refused (`crate::net`), decided before
    /// any policy is loaded. It blocks in monitor mode too: the guard is not a site policy,
    /// and the connector would refuse the connection anyway.
    pub fn refuse(&self, refusal: &Refusal, req: &GateRequest<'_>) -> Blocked {
        let reason = Reason::new(refusal.code(), refusal.to_string());
        let decision = Decision::single(Outcome::Deny, reason);
        let mut record = self.record_for(LogOutcome::Deny, req);
        record.set_reasons(&decision);
        Blocked { decision, record, kind: BlockKind::Policy, policies: None }
    }

    /// The block for a request whose origin could not be reached when its robots.txt was
    /// fetched (refused, no route, connect timeout: [`policy::FetchError::Unreachable`]), so
    /// it is answered 502/504 `origin.unreachable` rather than RFC 9309's full disallow, which
    /// stays for an origin that answered badly. In monitor mode too: there is no
    /// site to forward to. `None` when the origin was reached.
    ///
    /// Likewise a robots.txt that was not fetched because agentgate was at its own cap on
    /// connections to origins ([`policy::FetchError::AtCapacity`]): 503
    /// `upstream.at_capacity`, blamed on the proxy.
    fn origin_unreachable(&self, policies: &Policies, decision: &Decision, req: &GateRequest<'_>) -> Option<Blocked> {
        let (code, rule, cause, error_type, kind) = match policies.robots.origin_unreachable()? {
            policy::FetchError::Unreachable { timed_out, cause } => (
                OperatorCode::OriginUnreachable,
                format!("{} cannot be reached: {cause}", req.origin),
                cause,
                crate::audit::ErrorType::Origin,
                BlockKind::OriginUnreachable { timed_out: *timed_out },
            ),
            policy::FetchError::Parent { refused, cause } => (
                if *refused { OperatorCode::ParentRefused } else { OperatorCode::ParentUnreachable },
                format!("{} was not asked: {cause}", req.origin),
                cause,
                crate::audit::ErrorType::Proxy,
                BlockKind::OriginUnreachable { timed_out: false },
            ),
            policy::FetchError::AtCapacity { cause } => (
                OperatorCode::UpstreamAtCapacity,
                format!("the policies of {} were not fetched: {cause}", req.origin),
                cause,
                crate::audit::ErrorType::Proxy,
                BlockKind::UpstreamAtCapacity,
            ),
            _ => return None,
        };
        let reason = Reason::new(code, rule);
        let decision = Decision::deny_first(vec![reason], decision.reasons.clone(), Limits::default());
        let mut record = self.record_for(LogOutcome::Error, req);
        record.set_reasons(&decision);
        record.error = Some(cause.clone());
        record.error_type = Some(error_type);
        Some(Blocked { decision, record, kind, policies: None })
    }

    /// The record of a request that failed before it could be decided (its host does not
    /// resolve, so the network guard has nothing to vet); the caller adds the error.
    pub fn undecided(&self, req: &GateRequest<'_>) -> DecisionRecord {
        self.record_for(LogOutcome::Error, req)
    }

    /// The record of an approved CONNECT whose tunnel is intercepted: `allow`, with the
    /// approval and the reason naming who admitted the host (each request inside is decided
    /// and recorded on its own). It keeps the id the approval queue listed.
    pub fn approved_tunnel(&self, req: &GateRequest<'_>) -> DecisionRecord {
        let mut record = self.record_for(LogOutcome::Allow, req);
        if let Some(admitted) = req.admitted {
            record.reasons.push(admitted.reason(&req.agent.id));
        }
        record
    }

    fn record_for(&self, outcome: LogOutcome, req: &GateRequest<'_>) -> DecisionRecord {
        let mode = req.agent.mode(self.mode);
        let (method, url) = (self.redacted(req.method), self.redacted(req.url));
        let mut record = DecisionRecord::new(outcome, mode, req.client, Arc::clone(&req.agent.id), &method, &*url);
        record.entry = Some(req.entry.as_str());
        record.user_agent =
            req.headers.get(USER_AGENT).and_then(|v| v.to_str().ok()).map(|ua| self.redacted(ua).into_owned());
        record.instance = Some(Arc::clone(&self.instance));
        vetted(record, req)
    }

    /// `record`, which [`Gate::undecided`] made of `req` before its destination was vetted
    /// and its host admitted, as [`Gate::record_for`] makes it now: stamped now, with
    /// `outcome`, the destination and the admission; the request's text is not copied again.
    fn reissued(&self, mut record: DecisionRecord, outcome: LogOutcome, req: &GateRequest<'_>) -> DecisionRecord {
        record.restamp();
        record.outcome = outcome;
        vetted(record, req)
    }

    /// Operator rules first (those for every agent and those scoped to `agent`), then the
    /// origin's policies (kept for the response-time check).
    async fn evaluate(
        &self,
        view: &RequestView<'_>,
        agent: &str,
        origin: &Origin,
        addresses: &[IpAddr],
    ) -> (Decision, Option<Arc<Policies>>) {
        match self.rules.evaluate(view, agent, addresses) {
            Some(decision) => (decision, None),
            None => {
                // tdmrep.json is fetched only for a request that needs it (SEMANTICS U5).
                let wanted = policy::usage::tdmrep::wanted(view.purposes, self.settings.usage_undeclared);
                let policies = self.cache.policies_for(origin, wanted).await;
                (policy::evaluate_with(&policies, view, self.settings), Some(policies))
            }
        }
    }

    /// Phase `check_limits`: every limit that applies must pass (X1), the byte budgets among
    /// them with the request body's declared `Content-Length` spent against its sending
    /// budgets, in one call to the limits store (with Redis, one round trip), all or none: a
    /// body that would cross a budget is refused before forwarding, and so is any request
    /// while a budget it counts has less than its floor left (a sending budget counts a
    /// request that may stream bytes of no declared length: a chunked body, an upgrade).
    /// Only a request that is otherwise allowed is counted, so a denied request spends no
    /// budget.
    ///
    /// # Errors
    /// [`Refused`] naming the limit or budget spent, the sending budget the declared body
    /// would cross or could never fit, or the shared store's `on_failure = "deny"`.
    async fn check_limits(&self, req: &GateRequest<'_>, limits: &[policy::Limit]) -> Result<Spent, Refused> {
        if limits.is_empty() {
            return Ok((Permit::default(), None));
        }
        let usage = Usage { agent: &req.agent.id, origin: req.origin.text(), host: req.origin.bare_host() };
        let headers = req.headers;
        let length = headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok()).unwrap_or(0);
        let streams = headers.contains_key(TRANSFER_ENCODING) || headers.contains_key(UPGRADE);
        self.limiter.check_and_spend(usage, limits, Declared { length, streams }).await
    }
}

/// What [`Gate::check_limits`] leaves a request holding: its concurrency slots and, with byte
/// budgets, what they count.
type Spent = (Permit, Option<ByteBudgets>);

/// `record` with what was found out about `req` after it was taken: the first vetted
/// address, the one the connector dials first; a human's admission of its host.
fn vetted(mut record: DecisionRecord, req: &GateRequest<'_>) -> DecisionRecord {
    record.destination = req.addresses.first().map(|ip| SocketAddr::new(*ip, req.origin.port()));
    if let Some(Admitted { approval, record: Some(id), .. }) = req.admitted {
        // A held request a human admitted: however it ends, its one record keeps its id.
        record.id = *id;
        record.approval = Some(approval.clone());
    }
    record
}

/// What the 407's reason says: the failure without the credential.
fn auth_rule(failure: AuthFailure) -> String {
    match failure {
        AuthFailure::Missing => {
            "[auth] required = true: no Proxy-Authorization and no [[agents]] clients match".to_owned()
        }
        AuthFailure::Invalid => "Proxy-Authorization names no [[agents]] entry or carries a wrong token".to_owned(),
    }
}

/// The purposes a record states: those the request `declared`, else the agent's own, shared
/// rather than copied.
fn recorded_purposes(declared: Option<&[String]>, agent: &Agent) -> Arc<[String]> {
    declared.map_or_else(|| Arc::clone(&agent.purposes), Arc::from)
}

/// The purposes declared in `agentgate-purpose` (comma-separated, blanks dropped), if sent.
fn declared_purposes(headers: &HeaderMap) -> Option<Vec<String>> {
    let values: Vec<&str> = headers.get_all(&PURPOSE_HEADER).iter().filter_map(|v| v.to_str().ok()).collect();
    if values.is_empty() {
        return None;
    }
    Some(values.iter().flat_map(|v| v.split(',')).map(str::trim).filter(|p| !p.is_empty()).map(str::to_owned).collect())
}

/// The policy core reads the proxy's header map in place: a request's headers are never
/// copied to be evaluated. A name that is not a valid header name is in no map.
impl HeaderLookup for HeaderMap {
    fn get(&self, name: &str) -> Option<&str> {
        self.get_all(name).iter().find_map(|value| value.to_str().ok())
    }
}
