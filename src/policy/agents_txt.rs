//! agents.txt (draft-srijal-agents-policy-00): format detection and the strict parser with
//! its content hash (`parse.rs`), longest-match evaluation, `limit=N` rate limits, the fetch-outcome
//! semantics, and `lint --fix-hash`. Rows B1–B25 of `SEMANTICS.md` §6.2.
//!
//! Owns: what a fetched `/agents.txt` means for access. A file is this format only after
//! detection (B1); then any hash or directive problem restricts the whole origin (B19).
//!
//! Also the stale rule that follows from a state (`AgentsTxt::refresh`): drop a good copy
//! on a restricted file (B20), keep it while the origin is unreachable (B21).
//!
//! Never: fetches, caches or logs; `fetch/` carries out the stale rule.

mod parse;
#[cfg(test)]
mod tests;

use crate::policy::Weigh;
use std::sync::Arc;
use std::time::Duration;

use self::parse::{is_detected, is_significant, parse};
use super::advice::RATE_LIMIT_ADVICE;
use super::path::{Reading, decide_both_readings};
use super::pattern::{Pattern, normalized_path};
use super::text::{Findings, JoinedDigest, lines, split_bom};
use super::{
    Advice, AgentsTxtCode, Diagnostic, FetchOutcome, HeaderLookup, Limit, LimitKind, LimitScope, Opinion, PolicyReport,
    PolicyStatus, Previous, Reason, Refreshed, RequestView, Source, SourceVerdict, StaleRules,
};

/// The size cap (SEMANTICS X6): the fetcher reads at most this many bytes plus one and
/// sets `over_cap`; a larger file restricts the origin (B23).
pub const MAX_BYTES: usize = 500 * 1024;

/// How long a restricted verdict is cached before the file is fetched again (B20).
pub const RESTRICTED_TTL_S: u64 = 300;

/// The window of `limit=N`: N requests per this many seconds per (agent, origin, rule)
/// (B16).
pub const LIMIT_WINDOW_S: u32 = 60;

/// What one origin's `/agents.txt` means, built by [`from_fetch`] and evaluated per
/// request.
#[derive(Debug, Clone)]
pub struct AgentsTxtState {
    kind: Kind,
    /// The draft's content digest (B3), when the file was recognised as this format.
    digest: Option<Arc<str>>,
    diagnostics: Vec<Diagnostic>,
    metadata: Vec<Metadata>,
}

#[derive(Debug, Clone)]
enum Kind {
    /// No file (4xx, 3xx at the end of the redirects, or not in `--policy-dir`).
    Absent,
    /// 5xx or no response: no opinion, a cached valid copy stays in use (B21).
    Unreachable,
    /// Served, but not this format (HTML, a foreign format, nothing but comments).
    NotApplicable,
    /// Recognised but broken: the whole origin is denied with this reason (B19).
    Restricted(Reason),
    /// Verified: the rules, in file order; `has_decoded` when a pattern reads differently
    /// decoded, so the file is decided in both readings (SEMANTICS R9).
    Valid { rules: Vec<Rule>, has_decoded: bool },
}

/// One directive line.
#[derive(Debug, Clone)]
struct Rule {
    pattern: Pattern,
    action: Action,
    /// `limit=N` on an ALLOW rule (ignored on DISALLOW, B16).
    limit: Option<u32>,
    /// The reason cited when this rule decides, built once at parse time.
    reason: Reason,
}

/// ALLOW or DISALLOW (B10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Allow,
    Disallow,
}

/// One `# key: value` comment, kept for `explain` only (B6: it has no effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// 1-based line.
    pub line: u32,
    /// The key, lower case (`version`, `generated-by`, `grace-period`, ...).
    pub key: String,
    /// The value as written, trimmed.
    pub value: String,
}

/// The state a fetch outcome leads to (B21): 2xx is detected (B1) and parsed; 4xx and a
/// final 3xx mean no file; 5xx and failures mean no opinion, logged.
pub fn from_fetch(outcome: &FetchOutcome) -> AgentsTxtState {
    let (status, headers, body, over_cap) = match outcome {
        FetchOutcome::Failed(err) => {
            return AgentsTxtState::without_file(
                Kind::Unreachable,
                Diagnostic::warning(None, "unreachable", format!("agents.txt fetch failed ({err}): no opinion")),
            );
        }
        FetchOutcome::Response { status, headers, body, over_cap } => (*status, headers, body, *over_cap),
    };
    match status {
        200..=299 => {}
        500..=599 => {
            return AgentsTxtState::without_file(
                Kind::Unreachable,
                Diagnostic::warning(None, "unreachable", format!("agents.txt answered {status}: no opinion")),
            );
        }
        400..=499 => return AgentsTxtState::without_file(Kind::Absent, None),
        _ => {
            return AgentsTxtState::without_file(
                Kind::Absent,
                Diagnostic::warning(None, "unexpected-status", format!("agents.txt answered {status}: no file")),
            );
        }
    }
    if headers.is_html() {
        let media = headers.media_type().unwrap_or_default();
        return AgentsTxtState::without_file(
            Kind::NotApplicable,
            Diagnostic::warning(None, "foreign-format", format!("agents.txt is served as {media}: not this format")),
        );
    }
    let mut state = parse(body, over_cap, Findings::default());
    if let Some(media) = headers.media_type().filter(|m| m != "text/plain")
        && state.digest.is_some()
    {
        state.diagnostics.insert(
            0,
            Diagnostic::warning(
                None,
                "content-type",
                format!("agents.txt is served as {media}; the draft asks for text/plain"),
            ),
        );
    }
    state
}

/// Every finding about an agents.txt body, in line order, as `agentgate lint` prints
/// them: detection, encoding, hash line, each directive, and the hash check with the
/// digest the file should carry.
pub fn lint(body: &[u8]) -> Vec<Diagnostic> {
    parse(body, body.len() > MAX_BYTES, Findings::all()).diagnostics
}

/// Rewrites the hash line (or inserts one before the first directive) so the file
/// verifies, keeping every other byte as it was: BOM, comments, blank lines, line
/// endings. A body that is not this format (B1) comes back unchanged; one with no
/// directive at all gets the hash of the empty rule set (B24) appended.
pub fn fix_hash(body: &[u8]) -> Vec<u8> {
    let (bom, text) = split_bom(body, false);
    let mut significant = lines(text).filter(|l| is_significant(l.bytes));
    let first = significant.next();
    if first.is_some_and(|l| !is_detected(l.bytes)) {
        return body.to_vec();
    }
    let replaces_first = first.is_some_and(|l| l.bytes.starts_with(b"*"));
    let mut digest = JoinedDigest::default();
    if let Some(first) = first.filter(|_| !replaces_first) {
        digest.push(first.bytes);
    }
    for line in significant {
        digest.push(line.bytes);
    }
    let hash_line = format!("*{}", digest.finish());
    let default_eol = lines(text).map(|l| l.eol).find(|eol| !eol.is_empty()).unwrap_or(b"\n");

    let mut out = Vec::with_capacity(body.len() + hash_line.len() + 2);
    out.extend_from_slice(bom);
    let Some(first) = first else {
        out.extend_from_slice(text);
        if !text.is_empty() && !text.ends_with(b"\n") && !text.ends_with(b"\r") {
            out.extend_from_slice(default_eol);
        }
        out.extend_from_slice(hash_line.as_bytes());
        out.extend_from_slice(default_eol);
        return out;
    };
    let start = first.start;
    out.extend_from_slice(&text[..start]);
    out.extend_from_slice(hash_line.as_bytes());
    if replaces_first {
        out.extend_from_slice(&text[start + first.bytes.len()..]);
    } else {
        out.extend_from_slice(default_eol);
        out.extend_from_slice(&text[start..]);
    }
    out
}

impl AgentsTxtState {
    /// A state with no file contents (absent, unreachable, not applicable).
    fn without_file(kind: Kind, diagnostic: impl Into<Option<Diagnostic>>) -> Self {
        AgentsTxtState {
            kind,
            digest: None,
            diagnostics: diagnostic.into().into_iter().collect(),
            metadata: Vec::new(),
        }
    }

    /// What this file says about one request: restricted denies everything (B19); else
    /// the longest matching rule decides, an ALLOW/DISALLOW tie is DISALLOW (B12), an
    /// ALLOW with `limit=N` adds a rate limit and `limit=0` denies (B16); no match is no
    /// opinion (B13). Every method and every agent is covered (B14). A file whose patterns
    /// escape unreserved characters is decided with them as written and decoded, the
    /// stricter answer with the limits of both (SEMANTICS R9).
    pub fn evaluate(&self, req: &RequestView<'_>) -> SourceVerdict {
        let (rules, has_decoded) = match &self.kind {
            Kind::Valid { rules, has_decoded } => (rules, *has_decoded),
            Kind::Restricted(reason) => return SourceVerdict::with(Opinion::Deny, reason.clone()),
            Kind::Absent | Kind::Unreachable | Kind::NotApplicable => return SourceVerdict::no_opinion(),
        };
        let path = normalized_path(req.path_and_query);
        decide_both_readings(has_decoded, |reading| verdict(rules, &reading.path(&path), reading))
    }

    /// Status, content digest (B3: what `check_policy.py` compares) and findings, for
    /// `explain`.
    pub fn report(&self) -> PolicyReport {
        PolicyReport { status: self.status(), digest: self.digest.clone(), diagnostics: self.diagnostics.clone() }
    }

    /// Valid, malformed (restricted), absent (also unreachable) or not applicable.
    pub fn status(&self) -> PolicyStatus {
        match self.kind {
            Kind::Absent | Kind::Unreachable => PolicyStatus::Absent,
            Kind::NotApplicable => PolicyStatus::NotApplicable,
            Kind::Restricted(_) => PolicyStatus::Malformed,
            Kind::Valid { .. } => PolicyStatus::Valid,
        }
    }

    /// True when the file restricts the whole origin: the cache must drop any earlier
    /// good copy and keep this verdict for [`RESTRICTED_TTL_S`] (B20).
    pub fn is_restricted(&self) -> bool {
        matches!(self.kind, Kind::Restricted(_))
    }

    /// True when the fetch failed (5xx, timeout, network): a cached valid copy within its
    /// TTL stays in use instead of this state (B21).
    pub fn keeps_cached_copy(&self) -> bool {
        matches!(self.kind, Kind::Unreachable)
    }

    /// The `# key: value` metadata comments, for `explain` (no effect, B6).
    pub fn metadata(&self) -> &[Metadata] {
        &self.metadata
    }
}

/// The verdict of the longest matching rule in one reading of the patterns (B12, B13, B16).
fn verdict(rules: &[Rule], path: &str, reading: Reading) -> SourceVerdict {
    let mut best: Option<&Rule> = None;
    for rule in rules {
        if !rule.pattern.matches_in(reading, path) {
            continue;
        }
        let better = best.is_none_or(|b| {
            let (mine, theirs) = (rule.pattern.specificity_in(reading), b.pattern.specificity_in(reading));
            mine > theirs || (mine == theirs && rule.action == Action::Disallow && b.action == Action::Allow)
        });
        if better {
            best = Some(rule);
        }
    }
    let Some(rule) = best else { return SourceVerdict::no_opinion() };
    match (rule.action, rule.limit) {
        (Action::Disallow, _) => SourceVerdict::with(Opinion::Deny, rule.reason.clone()),
        (Action::Allow, Some(0)) => {
            let mut reason = rule.reason.clone();
            reason.code = AgentsTxtCode::LimitZero.into();
            SourceVerdict::with(Opinion::Deny, reason)
        }
        (Action::Allow, Some(requests)) => {
            let line = rule.reason.line.unwrap_or(0);
            let mut verdict = SourceVerdict::with(Opinion::Allow, rule.reason.clone());
            let mut reason = rule.reason.clone();
            reason.code = AgentsTxtCode::Limit.into();
            verdict.limits = Arc::from([Limit {
                source: Source::AgentsTxt,
                kind: LimitKind::Rate { requests, window_s: LIMIT_WINDOW_S },
                scope: LimitScope::Rule { line },
                reason,
            }]);
            verdict
        }
        (Action::Allow, None) => SourceVerdict::with(Opinion::Allow, rule.reason.clone()),
    }
}

impl Weigh for AgentsTxtState {
    fn heap_bytes(&self) -> usize {
        let kind = match &self.kind {
            Kind::Absent | Kind::Unreachable | Kind::NotApplicable => 0,
            Kind::Restricted(reason) => reason.heap_bytes(),
            Kind::Valid { rules, .. } => rules.heap_bytes(),
        };
        kind + self.digest.heap_bytes() + self.diagnostics.heap_bytes() + self.metadata.heap_bytes()
    }
}

impl Weigh for Rule {
    fn heap_bytes(&self) -> usize {
        // The reason's digest is the state's own `Arc`, charged once there, not per rule.
        self.pattern.heap_bytes() + self.reason.rule.heap_bytes()
    }
}

impl Weigh for Metadata {
    fn heap_bytes(&self) -> usize {
        self.key.heap_bytes() + self.value.heap_bytes()
    }
}

/// agents.txt as a [`super::Format`] (draft-srijal-agents-policy-00).
#[derive(Debug, Clone, Copy)]
pub struct AgentsTxt;

impl super::Format for AgentsTxt {
    type State = AgentsTxtState;
    const SOURCE: Source = Source::AgentsTxt;
    const NAME: &'static str = "agents-txt";
    const PATH: &'static str = "/agents.txt";
    const MAX_BYTES: usize = MAX_BYTES;

    fn from_fetch(outcome: &FetchOutcome) -> AgentsTxtState {
        from_fetch(outcome)
    }

    /// A restricted file (hash mismatch, bad directive, too large) drops any cached copy and
    /// is itself kept for exactly `rules.agents_txt_negative_ttl` (B20, default
    /// [`RESTRICTED_TTL_S`]), whatever its `Cache-Control` says, so a broken file is neither
    /// fetched on every request nor kept for a day. When the origin is unreachable (B21), a
    /// cached *valid* copy stays in use while it has been stale for less than its own
    /// freshness lifetime ("within its TTL": we only re-fetch after it expired, so we read it
    /// as one more lifetime), retried after `ttl`. Anything else replaces it.
    fn refresh(
        previous: Option<Previous<AgentsTxtState>>,
        fetched: AgentsTxtState,
        ttl: Duration,
        rules: &StaleRules,
    ) -> Refreshed<AgentsTxtState> {
        if fetched.is_restricted() {
            return Refreshed::fetched(fetched, rules.agents_txt_negative_ttl);
        }
        match previous {
            Some(previous)
                if fetched.keeps_cached_copy()
                    && previous.state.status() == PolicyStatus::Valid
                    && previous.stale_for < previous.lifetime =>
            {
                let left = previous.lifetime - previous.stale_for;
                Refreshed::kept(previous, ttl.min(left))
            }
            _ => Refreshed::fetched(fetched, ttl),
        }
    }

    #[inline]
    fn evaluate(state: &AgentsTxtState, req: &RequestView<'_>, _settings: super::Settings) -> SourceVerdict {
        state.evaluate(req)
    }

    fn report(state: &AgentsTxtState) -> PolicyReport {
        state.report()
    }

    fn lint(body: &[u8]) -> Vec<Diagnostic> {
        lint(body)
    }
}

/// What an agent blocked by a agents.txt reason may do instead.
impl Advice for AgentsTxtCode {
    fn advice(self) -> &'static str {
        match self {
            AgentsTxtCode::Disallow => {
                "The site's agents.txt disallows this path for automated agents. Do not retry it; other paths may be \
                 allowed (read /agents.txt)."
            }
            AgentsTxtCode::LimitZero => {
                "The site's agents.txt allows zero automated requests to this path. Do not retry it."
            }
            AgentsTxtCode::Limit => RATE_LIMIT_ADVICE,
            // `allow` never blocks: the file's general advice.
            AgentsTxtCode::TooLarge
            | AgentsTxtCode::InvalidUtf8
            | AgentsTxtCode::HashMissing
            | AgentsTxtCode::HashLineSyntax
            | AgentsTxtCode::HashMismatch
            | AgentsTxtCode::DirectiveSyntax
            | AgentsTxtCode::Allow => {
                "The site's agents.txt is malformed or unverifiable, and the agents.txt rules say that restricts the \
                 whole site to agents. Nothing on this site can be fetched until the site publishes a valid file; \
                 tell your user, do not retry."
            }
        }
    }
}
