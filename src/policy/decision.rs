//! The values a policy evaluation produces: per-source verdicts, reasons, limits, and the
//! combined [`Decision`]. Plain data; nothing here evaluates anything.

use std::sync::Arc;

use smallvec::{SmallVec, smallvec};

use super::usage::Preference;
use super::{Code, Source};

/// Why a source said what it said: the file, a stable reason code, the line and the rule
/// as written. Every deny carries at least one; allows carry them when a rule matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    /// The file (or the operator config) this reason comes from: always `code.source()`.
    pub source: Source,
    /// A stable, dotted reason code, e.g. `robots.disallow`, `agents_txt.hash_mismatch`.
    pub code: Code,
    /// 1-based line in the source file, when one line decided.
    pub line: Option<u32>,
    /// The rule as written in the file (trimmed), or a short description when no single
    /// line decided (e.g. `robots.txt answered 503`). Shared with the parsed file, so a
    /// reason costs no copy of it on the request path.
    pub rule: Arc<str>,
    /// Hex SHA-256 of the file's bytes as served, when a file was involved (shared likewise).
    pub digest: Option<Arc<str>>,
}

impl Reason {
    /// A reason of `code`'s source, with no line and no digest.
    pub fn new(code: impl Into<Code>, rule: impl Into<Arc<str>>) -> Self {
        let code = code.into();
        Reason { source: code.source(), code, line: None, rule: rule.into(), digest: None }
    }

    /// The same reason, pointing at a line.
    pub fn at_line(mut self, line: u32) -> Self {
        self.line = Some(line);
        self
    }

    /// The same reason, with the digest of the file it comes from.
    pub fn with_digest(mut self, digest: Option<Arc<str>>) -> Self {
        self.digest = digest;
        self
    }
}

/// What one source thinks of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Opinion {
    /// The source says nothing about this request (no file, no matching rule or group).
    NoOpinion,
    /// A rule explicitly allows it.
    Allow,
    /// A human must approve it first (AGENTS.md `require-human-approval`).
    NeedsApproval,
    /// A rule forbids it.
    Deny,
}

/// How a limit counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitKind {
    /// At most `requests` requests per `window_s` seconds (GCRA, burst = `requests`).
    Rate {
        /// Requests allowed in one window.
        requests: u32,
        /// Window length in seconds.
        window_s: u32,
    },
    /// At most one request per `millis` milliseconds, no burst (robots.txt `Crawl-delay`,
    /// when `[robots] honor_crawl_delay` is on).
    Delay {
        /// The delay between two requests, in milliseconds.
        millis: u32,
    },
    /// At most `max` requests in flight at once (AGENTS.md `concurrent-sessions`).
    Concurrent {
        /// Maximum in-flight requests.
        max: u32,
    },
    /// At most `bytes` body bytes per `window_s` seconds in one direction (the operator's
    /// byte budgets; GCRA over bytes, burst = `bytes`).
    Bytes {
        /// Which body is counted.
        direction: Direction,
        /// Bytes allowed in one window.
        bytes: u64,
        /// Window length in seconds.
        window_s: u32,
    },
}

/// Which body a byte budget counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Request bodies, from the agent to origins.
    Sent,
    /// Response bodies, from origins to the agent.
    Received,
}

impl Direction {
    /// `sent` or `received`, as the log writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::Sent => "sent",
            Direction::Received => "received",
        }
    }
}

/// What a limit is counted per, beyond the agent itself.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum LimitScope {
    /// Per agent, over every origin (the operator's per-agent limits).
    Agent,
    /// Per (agent, origin).
    Origin,
    /// Per (agent, host): AGENTS.md limits (SEMANTICS C21).
    Host,
    /// Per (agent, origin, rule): agents.txt `limit=N`, keyed by the rule's line (B16).
    Rule {
        /// Line of the rule in its file.
        line: u32,
    },
}

/// The limits that apply to a request, shared: a file's limits ride with every verdict it
/// gives, and a copy per request was an allocation per request.
pub type Limits = Arc<[Limit]>;

/// `limits` and then `more`: the same shared list when `more` is empty, else one new list.
pub fn joined(limits: Limits, more: &[Limit]) -> Limits {
    if more.is_empty() {
        return limits;
    }
    limits.iter().chain(more).cloned().collect()
}

/// One limit that applies to a request. All limits that apply must pass (SEMANTICS X1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limit {
    /// The file the limit comes from.
    pub source: Source,
    /// Rate or concurrency.
    pub kind: LimitKind,
    /// What the limit is counted per.
    pub scope: LimitScope,
    /// The rule that set the limit.
    pub reason: Reason,
}

impl Limit {
    /// The key this limit is counted under for a given agent and origin, e.g.
    /// `agents.txt|bot-1|https://example.com:443|line=4`. Stable across requests.
    pub fn key(&self, agent_id: &str, origin: &str, host: &str) -> String {
        self.key_parts(agent_id, origin, host).to_string()
    }

    /// [`Limit::key`] as something to write: the limits store writes it into its own
    /// buffer (a Redis command) without a `String` of its own per request.
    pub fn key_parts<'a>(&'a self, agent_id: &'a str, origin: &'a str, host: &'a str) -> KeyParts<'a> {
        KeyParts { limit: self, agent_id, origin, host }
    }
}

/// A limit's key for one request, written by `Display` ([`Limit::key_parts`]).
#[derive(Debug, Clone, Copy)]
pub struct KeyParts<'a> {
    limit: &'a Limit,
    agent_id: &'a str,
    origin: &'a str,
    host: &'a str,
}

impl std::fmt::Display for KeyParts<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let KeyParts { limit, agent_id, origin, host } = *self;
        let source = limit.source.as_str();
        match limit.scope {
            LimitScope::Agent => write!(f, "{source}|{agent_id}"),
            LimitScope::Origin => write!(f, "{source}|{agent_id}|{origin}"),
            LimitScope::Host => write!(f, "{source}|{agent_id}|{host}"),
            LimitScope::Rule { line } => write!(f, "{source}|{agent_id}|{origin}|line={line}"),
        }
    }
}

/// A source's reasons for one verdict: two are held inline (a robots.txt rule and its group,
/// an AGENTS.md rule and its authentication note), so a verdict costs no allocation of its
/// own on the request path; more spill to the heap. [`Decision::reasons`] gathers them.
pub type Reasons = SmallVec<[Reason; 2]>;

/// Everything one source says about one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceVerdict {
    /// The source's opinion.
    pub opinion: Opinion,
    /// Why (the deciding rules; empty only for `NoOpinion` without a file).
    pub reasons: Reasons,
    /// Limits this source puts on the request.
    pub limits: Limits,
    /// Headers the proxy must add to the forwarded request (AGENTS.md agent identification).
    pub inject_headers: Vec<(String, String)>,
    /// The usage preferences that applied, allowing or refusing (SEMANTICS U6).
    pub usage: Vec<Preference>,
}

impl SourceVerdict {
    /// No opinion, no reasons, no limits.
    pub fn no_opinion() -> Self {
        SourceVerdict {
            opinion: Opinion::NoOpinion,
            reasons: Reasons::new(),
            limits: Limits::default(),
            inject_headers: Vec::new(),
            usage: Vec::new(),
        }
    }

    /// An opinion with one reason.
    pub fn with(opinion: Opinion, reason: Reason) -> Self {
        SourceVerdict { reasons: smallvec![reason], opinion, ..SourceVerdict::no_opinion() }
    }
}

/// The combined outcome of evaluating all sources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Forward the request (subject to `limits`).
    Allow,
    /// Block it: some source denies.
    Deny,
    /// Block it until a human approves (answered 403 for now).
    NeedsApproval,
}

impl Outcome {
    /// The name used in `explain` output and the decision log.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::NeedsApproval => "needs_approval",
        }
    }
}

/// The decision for one request: outcome, every reason, every limit, headers to inject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allow, deny or needs approval. Any deny wins (SEMANTICS X1).
    pub outcome: Outcome,
    /// Reasons: for a block, the ones that blocked first; then the rest.
    pub reasons: Vec<Reason>,
    /// How many of the leading `reasons` decided a block (0 when allowed). Sealed to the policy
    /// core, like the constructors below, so no caller can point it past `reasons`.
    pub(super) blocking: usize,
    /// All limits that apply (each must pass).
    pub limits: Limits,
    /// Headers to add to the forwarded request.
    pub inject_headers: Vec<(String, String)>,
    /// The usage preferences that applied, allowing or refusing: the decision record's
    /// `agentgate.usage` (SEMANTICS U6).
    pub usage: Vec<Preference>,
}

impl Decision {
    /// A decision of one reason, which decided it: a block cites it as blocking. Used for the
    /// operator's rules, the gate's own refusals (authentication, the network guard) and the
    /// always-allowed policy files.
    pub fn single(outcome: Outcome, reason: Reason) -> Self {
        let blocking = usize::from(outcome != Outcome::Allow);
        Decision {
            outcome,
            reasons: vec![reason],
            blocking,
            limits: Limits::default(),
            inject_headers: Vec::new(),
            usage: Vec::new(),
        }
    }

    /// A deny decided by `blocking` (cited first), followed by the `rest` of the reasons and
    /// carrying `limits`: what the gate builds when a limit or the response-time AGENTS.md
    /// check refuses a request the policies allowed.
    pub fn deny_first(mut blocking: Vec<Reason>, mut rest: Vec<Reason>, limits: Limits) -> Self {
        let count = blocking.len();
        blocking.append(&mut rest);
        Decision {
            outcome: Outcome::Deny,
            reasons: blocking,
            blocking: count,
            limits,
            inject_headers: Vec::new(),
            usage: Vec::new(),
        }
    }

    /// True when the request may be forwarded (before limits).
    pub fn is_allowed(&self) -> bool {
        self.outcome == Outcome::Allow
    }

    /// The reasons that decided a block (empty when allowed).
    pub fn blocking_reasons(&self) -> &[Reason] {
        &self.reasons[..self.blocking.min(self.reasons.len())]
    }
}
