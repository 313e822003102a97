//! AGENTS.md (AGENTS-MD-SPEC-001): what a fetched `/AGENTS.md` or
//! `/.well-known/agents.md` means for access. Rows C1–C27 of `SEMANTICS.md` §6.3.
//!
//! Owns: deciding whether a response is a policy at all (C1: not HTML, has `## Identity`),
//! discovery over the two locations, the parser (`parse.rs`), the path globs (`glob.rs`),
//! and evaluation: trust level (C22), restrictions (C16), actions inferred from the
//! request (C17), rate and concurrency limits (C21), the identification header (C24).
//!
//! Also the stale rule (C4, `AgentsMd::refresh`): a policy outlives a failed re-fetch for
//! [`STALE_GRACE_S`].
//!
//! Never: fetches (HTTPS only, redirects and timeouts are `fetch/`'s, C2–C4), caches, or
//! logs; `fetch/` carries out the stale rule.

mod glob;
mod parse;

#[cfg(test)]
mod tests;

pub use self::parse::Entry;
use crate::policy::Weigh;
use std::sync::Arc;
use std::time::Duration;

use self::parse::{Authentication, DEFAULT_AGENT_HEADER, PathRule, Policy, Setting};
use super::advice::RATE_LIMIT_ADVICE;
use super::path::{Reading, decide_both_readings};
use super::pattern::normalized_path;
use super::text::{sha256_hex, split_bom};
use super::{
    Advice, AgentsMdCode, Diagnostic, FetchOutcome, HeaderLookup, Limit, LimitKind, LimitScope, Limits, Opinion,
    PolicyReport, PolicyStatus, Previous, Reason, Refreshed, RequestView, Source, SourceVerdict, StaleRules,
};

/// The size cap (§11.3): the fetcher reads at most this many bytes plus one and sets
/// `over_cap`; a larger file is "not here" (C4).
pub const MAX_BYTES: usize = 1024 * 1024;

/// How long a stale copy may stay in use after a failed re-fetch (§10.3, C4).
pub const STALE_GRACE_S: u64 = 3600;

/// Where a policy was found (§3.1), in order of precedence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// `/AGENTS.md`.
    Root,
    /// `/.well-known/agents.md`.
    WellKnown,
}

impl Location {
    /// The path fetched for this location.
    pub fn path(self) -> &'static str {
        match self {
            Location::Root => "/AGENTS.md",
            Location::WellKnown => "/.well-known/agents.md",
        }
    }
}

/// What one host's AGENTS.md means: built by [`from_fetch`] per location, combined by
/// [`discover`], evaluated per request.
#[derive(Debug, Clone)]
pub struct AgentsMdState {
    policy: Option<Box<Policy>>,
    status: PolicyStatus,
    /// The fetch failed (5xx, timeout, network): a stale copy may be kept (C4).
    failed: bool,
    location: Location,
    /// Hex SHA-256 of the bytes served, for the policy in force.
    digest: Option<Arc<str>>,
    diagnostics: Vec<Diagnostic>,
    /// Limits, built once at parse time (C21), shared by every verdict.
    limits: Limits,
}

/// The state one fetch leads to (C1, C4): a 2xx that is not HTML and has `## Identity` is
/// a policy; anything else (HTML, no Identity, other status, failure, over the cap) gives
/// no policy, and [`AgentsMdState::falls_through`] says to try the next location.
pub fn from_fetch(outcome: &FetchOutcome) -> AgentsMdState {
    let (status, headers, body, over_cap) = match outcome {
        FetchOutcome::Failed(err) => {
            let mut state = AgentsMdState::none(PolicyStatus::Absent, "fetch-failed", format!("fetch failed ({err})"));
            state.failed = true;
            return state;
        }
        FetchOutcome::Response { status, headers, body, over_cap } => (*status, headers, body, *over_cap),
    };
    match status {
        200..=299 => {}
        404 | 410 => return AgentsMdState::none(PolicyStatus::Absent, None, String::new()),
        _ => {
            let mut state =
                AgentsMdState::none(PolicyStatus::Absent, "unexpected-status", format!("answered {status}: no policy"));
            state.failed = status >= 500;
            return state;
        }
    }
    if over_cap {
        return AgentsMdState::none(
            PolicyStatus::Absent,
            "too-large",
            format!("is larger than {} MiB: no policy (§11.3)", MAX_BYTES / (1024 * 1024)),
        );
    }
    if headers.is_html() {
        return AgentsMdState::none(
            PolicyStatus::NotApplicable,
            "not-a-policy:html-content-type",
            "is served as HTML (a soft-404 page?), so it is not an AGENTS.md policy (agents_md.not_a_policy)".into(),
        );
    }
    let mut state = from_body(body, false);
    if let Some(media) = headers.media_type().filter(|m| !is_markdown_or_text(m)) {
        state.diagnostics.insert(
            0,
            Diagnostic::warning(
                None,
                "unexpected-content-type",
                format!("is served as {media}; expected text/markdown"),
            ),
        );
    }
    state
}

/// Discovery over the two locations (§3.2 with C1): the root file when it is a policy,
/// else the well-known file when it is one, else no policy. The result's diagnostics say
/// why each location was skipped, and [`AgentsMdState::location`] which one applies.
pub fn discover(root: AgentsMdState, well_known: Option<AgentsMdState>) -> AgentsMdState {
    let mut root = root.at(Location::Root);
    if !root.falls_through() {
        return root;
    }
    let Some(well_known) = well_known else { return root };
    let mut chosen = well_known.at(Location::WellKnown);
    if chosen.falls_through() {
        chosen.failed |= root.failed;
        if root.status == PolicyStatus::NotApplicable {
            chosen.status = PolicyStatus::NotApplicable;
        }
    } else {
        for d in root.diagnostics.iter_mut().filter(|d| d.line.is_none()) {
            d.message.push_str("; /.well-known/agents.md applies");
        }
    }
    root.diagnostics.append(&mut chosen.diagnostics);
    chosen.diagnostics = root.diagnostics;
    chosen
}

/// Every finding about an AGENTS.md body, as `agentgate lint` prints them: the parser's
/// warnings and errors plus lint-only advice (missing `# AGENTS.md` title, trailing `/*`
/// read as a subtree, `/` matching only the home page).
pub fn lint(body: &[u8]) -> Vec<Diagnostic> {
    let state = from_body(body, true);
    let mut diagnostics = state.diagnostics;
    // The defaults restrict more than an author who left the section out may
    // expect (§5.3, C18): only read-content is allowed, so every POST is refused and, e.g.,
    // `git clone` over HTTPS fails with nothing but "RPC failed; HTTP 403".
    if state.policy.as_ref().is_some_and(|policy| policy.actions.is_empty()) {
        diagnostics.insert(
            0,
            Diagnostic::warning(
                None,
                "default-actions",
                "no `## Allowed Actions` entries, so the defaults apply: only read-content is allowed, and every \
                 write (POST, PUT, PATCH, DELETE: form posts, API calls, uploads, `git clone`/`git push` over HTTPS) \
                 is refused; if agents may write, add `## Allowed Actions` with `- submit-forms: true` or \
                 `- access-api: true`",
            ),
        );
    }
    if body.len() > MAX_BYTES {
        diagnostics.insert(
            0,
            Diagnostic::warning(None, "too-large", "the file is larger than 1 MiB; agents will ignore it (§11.3)"),
        );
    }
    diagnostics
}

/// Whether a Content-Type is one a policy may come with (C1).
fn is_markdown_or_text(media: &str) -> bool {
    matches!(media, "text/markdown" | "text/plain" | "text/x-markdown" | "")
}

/// Parses a 2xx body that is not HTML.
fn from_body(body: &[u8], advice: bool) -> AgentsMdState {
    let digest = sha256_hex(body);
    let (_, text) = split_bom(body, false);
    let decoded = String::from_utf8_lossy(text);
    let mut parsed = parse::parse(&decoded, advice);
    if let std::borrow::Cow::Owned(_) = decoded {
        parsed.findings.push(Diagnostic::warning(
            None,
            "invalid-utf8",
            "the file is not valid UTF-8; invalid bytes were replaced (save it as UTF-8)",
        ));
    }
    let Some(policy) = parsed.policy else {
        let mut diagnostics = parsed.findings.finish_in_line_order();
        diagnostics.insert(
            0,
            Diagnostic::warning(
                None,
                "not-a-policy:no-identity-section",
                "has no `## Identity` heading, so it is not an AGENTS.md policy (agents_md.not_a_policy; a \
                 coding-agent AGENTS.md?)",
            ),
        );
        return AgentsMdState { diagnostics, ..AgentsMdState::none(PolicyStatus::NotApplicable, None, String::new()) };
    };
    let status = if parsed.findings.has_errors() { PolicyStatus::Malformed } else { PolicyStatus::Valid };
    let digest = Some(Arc::<str>::from(digest));
    let limits = limits(&policy, &digest);
    AgentsMdState {
        policy: Some(Box::new(policy)),
        status,
        failed: false,
        location: Location::Root,
        digest,
        diagnostics: parsed.findings.finish_in_line_order(),
        limits,
    }
}

/// The limits a policy sets (C21): per (agent, host), 0 or absent means none.
fn limits(policy: &Policy, digest: &Option<Arc<str>>) -> Limits {
    let rates = [(&policy.requests_per_minute, 60), (&policy.requests_per_hour, 3600)];
    let mut limits: Vec<Limit> = rates
        .into_iter()
        .filter_map(|(setting, window_s)| {
            let setting = setting.as_ref()?;
            Some(limit(LimitKind::Rate { requests: setting.value, window_s }, AgentsMdCode::RateLimit, setting, digest))
        })
        .collect();
    if let Some(setting) = &policy.concurrent_sessions {
        let kind = LimitKind::Concurrent { max: setting.value };
        limits.push(limit(kind, AgentsMdCode::ConcurrentSessions, setting, digest));
    }
    limits.into()
}

fn limit(kind: LimitKind, code: AgentsMdCode, setting: &Setting<u32>, digest: &Option<Arc<str>>) -> Limit {
    Limit {
        source: Source::AgentsMd,
        kind,
        scope: LimitScope::Host,
        reason: reason(code, setting.line, &setting.text, digest),
    }
}

fn reason(code: AgentsMdCode, line: u32, text: &Arc<str>, digest: &Option<Arc<str>>) -> Reason {
    Reason::new(code, Arc::clone(text)).at_line(line).with_digest(digest.clone())
}

impl AgentsMdState {
    /// No policy, with at most one finding.
    fn none(status: PolicyStatus, code: impl Into<Option<&'static str>>, message: String) -> Self {
        let diagnostics = code.into().map(|code| Diagnostic::warning(None, code, message)).into_iter().collect();
        AgentsMdState {
            policy: None,
            status,
            failed: false,
            location: Location::Root,
            digest: None,
            diagnostics,
            limits: Limits::default(),
        }
    }

    /// This state as found at `location`: file-level messages name the path.
    fn at(mut self, location: Location) -> Self {
        self.location = location;
        for d in self.diagnostics.iter_mut().filter(|d| d.line.is_none()) {
            d.message = format!("{} {}", location.path(), d.message);
        }
        self
    }

    /// Records the host the file was fetched from (the request's host, C13): a `site`
    /// naming another host earns the warning `identity-site-mismatch`. The policy still
    /// governs only the host it was fetched from.
    pub fn with_fetched_host(mut self, host: &str) -> Self {
        let site = self.policy.as_ref().and_then(|p| p.site.as_ref());
        if let Some(site) =
            site.filter(|s| !s.value.trim_end_matches('.').eq_ignore_ascii_case(host.trim_end_matches('.')))
        {
            let message = format!(
                "site `{}` is not the host the file was fetched from ({host}); the policy applies to {host} only",
                site.value
            );
            self.diagnostics.push(Diagnostic::warning(Some(site.line), "identity-site-mismatch", message));
            self.diagnostics.sort_by_key(|d| d.line);
        }
        self
    }

    /// True when this location gave no policy (absent, failed, HTML, no `## Identity`,
    /// over the cap): the fetcher and `explain` must try `/.well-known/agents.md` (C1).
    pub fn falls_through(&self) -> bool {
        self.policy.is_none()
    }

    /// The location the policy in force came from (meaningful when there is a policy).
    pub fn location(&self) -> Location {
        self.location
    }

    /// True when no policy was found and a fetch failed (5xx, timeout, network): a cached
    /// policy may stay in use for [`STALE_GRACE_S`] more (§10.3, C4). A 404 is not a
    /// failure: the file was removed.
    pub fn refetch_failed(&self) -> bool {
        self.policy.is_none() && self.failed
    }

    /// The `- key: value` lines of the policy in force, for `explain` (Data Handling,
    /// `x-` sections and other informational entries, C25, C27).
    pub fn entries(&self) -> &[Entry] {
        self.policy.as_ref().map_or(&[], |p| &p.entries)
    }

    /// Status, digest of the bytes served, and findings (including why a location was
    /// skipped, `not-a-policy:*`), for `explain`.
    pub fn report(&self) -> PolicyReport {
        PolicyReport { status: self.status, digest: self.digest.clone(), diagnostics: self.diagnostics.clone() }
    }

    /// What the policy says about one request, in order (C16, C22, C17): trust level
    /// below the minimum denies everything; a disallowed path denies; for a write, a
    /// require-human-approval path needs approval, then a read-only path denies; then
    /// every action the request maps to must be allowed. Limits and the identification
    /// header come with every verdict, and so does the `authentication: required` reason
    /// (C23): `agents_md.authentication_missing` when the request carries neither
    /// `Authorization` nor `Cookie`, else `agents_md.authentication_present`. With
    /// `strict_authentication`, a write that is missing them is denied with that reason
    /// alone (unless something else already denies it).
    pub fn evaluate(&self, req: &RequestView<'_>, strict_authentication: bool) -> SourceVerdict {
        let Some(policy) = &self.policy else { return SourceVerdict::no_opinion() };
        let mut verdict = SourceVerdict::no_opinion();
        verdict.limits = Arc::clone(&self.limits);
        if policy.require_agent_header.as_ref().is_some_and(|s| s.value) {
            let name = policy.agent_header_name.as_ref().map_or(DEFAULT_AGENT_HEADER, |s| s.value.as_str());
            if req.headers.get(name).is_none() {
                verdict.inject_headers.push((name.to_owned(), req.agent_id.to_owned()));
            }
        }
        let decided = self.decide(policy, req);
        let opinion = decided.opinion;
        verdict.opinion = opinion;
        verdict.reasons = decided.reasons;
        if let Some(setting) = policy.authentication.as_ref().filter(|s| s.value == Authentication::Required) {
            let missing = req.headers.get("authorization").is_none() && req.headers.get("cookie").is_none();
            let code = if missing { AgentsMdCode::AuthenticationMissing } else { AgentsMdCode::AuthenticationPresent };
            let reason = self.reason(code, setting.line, &setting.text);
            if missing && strict_authentication && !req.is_safe_method() && opinion != Opinion::Deny {
                // The denial is the whole answer: an `action_allowed` reason beside it would be
                // cited as blocking too.
                verdict.opinion = Opinion::Deny;
                verdict.reasons = smallvec::smallvec![reason];
            } else {
                verdict.reasons.push(reason);
            }
        }
        verdict
    }

    /// The opinion and its one reason (none for no opinion): the trust level, then the path
    /// lists and actions, in both readings of the globs when one reads differently decoded
    /// (SEMANTICS R9).
    fn decide(&self, policy: &Policy, req: &RequestView<'_>) -> SourceVerdict {
        if let Some(min) = &policy.minimum_trust_level
            && req.trust_level.min(5) < min.value
        {
            return SourceVerdict::with(Opinion::Deny, self.reason(AgentsMdCode::TrustLevel, min.line, &min.text));
        }
        let has_paths =
            !(policy.disallowed.is_empty() && policy.require_approval.is_empty() && policy.read_only.is_empty());
        let path = if has_paths { normalized_path(req.path()) } else { std::borrow::Cow::Borrowed("") };
        decide_both_readings(policy.has_decoded, |reading| {
            let path = reading.path(&path);
            let segments = if has_paths { glob::segments(&path) } else { glob::Segments::new() };
            self.decide_in(policy, req, &segments, reading)
        })
    }

    fn decide_in(&self, policy: &Policy, req: &RequestView<'_>, segments: &[&str], reading: Reading) -> SourceVerdict {
        let verdict = |opinion, code, line, text| SourceVerdict::with(opinion, self.reason(code, line, text));
        if let Some(rule) = most_specific(&policy.disallowed, segments, reading) {
            return verdict(Opinion::Deny, AgentsMdCode::DisallowedPath, rule.line, &rule.text);
        }
        let write = !req.is_safe_method();
        if write && let Some(rule) = most_specific(&policy.require_approval, segments, reading) {
            return verdict(Opinion::NeedsApproval, AgentsMdCode::RequiresHumanApproval, rule.line, &rule.text);
        }
        if write && let Some(rule) = most_specific(&policy.read_only, segments, reading) {
            return verdict(Opinion::Deny, AgentsMdCode::ReadOnlyPath, rule.line, &rule.text);
        }
        let mut allowed_by = None;
        for action in request_actions(req) {
            match policy.action(action) {
                (false, Some(s)) => return verdict(Opinion::Deny, AgentsMdCode::ActionDenied, s.line, &s.text),
                (false, None) => {
                    let rule = format!("{action} defaults to false when an AGENTS.md exists (§5.3)");
                    let reason = Reason::new(AgentsMdCode::ActionDenied, rule);
                    return SourceVerdict::with(Opinion::Deny, reason.with_digest(self.digest.clone()));
                }
                (true, setting) => allowed_by = allowed_by.or(setting),
            }
        }
        match allowed_by {
            Some(s) if write => verdict(Opinion::Allow, AgentsMdCode::ActionAllowed, s.line, &s.text),
            _ => SourceVerdict::no_opinion(),
        }
    }

    /// The response-time check of C17: a response with `Content-Disposition: attachment`
    /// is a download, denied (body withheld, 403) when `download-files` is not allowed.
    pub fn evaluate_response(&self, response_headers: &dyn HeaderLookup) -> SourceVerdict {
        let Some(policy) = &self.policy else { return SourceVerdict::no_opinion() };
        let is_attachment = response_headers
            .get("content-disposition")
            .is_some_and(|v| v.split(';').next().is_some_and(|kind| kind.trim().eq_ignore_ascii_case("attachment")));
        match policy.action("download-files") {
            (false, setting) if is_attachment => {
                let reason = match setting {
                    Some(s) => self.reason(AgentsMdCode::ActionDenied, s.line, &s.text),
                    None => Reason::new(
                        AgentsMdCode::ActionDenied,
                        "download-files defaults to false when an AGENTS.md exists (§5.3)",
                    )
                    .with_digest(self.digest.clone()),
                };
                SourceVerdict::with(Opinion::Deny, reason)
            }
            _ => SourceVerdict::no_opinion(),
        }
    }

    fn reason(&self, code: AgentsMdCode, line: u32, text: &Arc<str>) -> Reason {
        reason(code, line, text, &self.digest)
    }
}

/// The most specific matching rule of a list in one reading (specificity only picks the
/// rule cited, C16).
fn most_specific<'a>(rules: &'a [PathRule], segments: &[&str], reading: Reading) -> Option<&'a PathRule> {
    rules.iter().filter(|r| r.glob.matches_in(reading, segments)).max_by_key(|r| r.glob.specificity())
}

/// The actions a request maps to (C17): safe methods read; DELETE deletes; a form body
/// submits a form (multipart also uploads); any other write is an API call.
fn request_actions(req: &RequestView<'_>) -> &'static [&'static str] {
    if req.is_safe_method() {
        return &["read-content"];
    }
    if req.method.eq_ignore_ascii_case("DELETE") {
        return &["delete-data"];
    }
    let form_method = ["POST", "PUT", "PATCH"].iter().any(|m| m.eq_ignore_ascii_case(req.method));
    match req.headers.media_type().as_deref() {
        Some("application/x-www-form-urlencoded") if form_method => &["submit-forms"],
        Some("multipart/form-data") if form_method => &["submit-forms", "upload-files"],
        _ => &["access-api"],
    }
}

impl Weigh for AgentsMdState {
    fn heap_bytes(&self) -> usize {
        self.policy.heap_bytes() + self.digest.heap_bytes() + self.diagnostics.heap_bytes() + self.limits.heap_bytes()
    }
}

/// AGENTS.md as a [`super::Format`] (AGENTS-MD-SPEC-001): fetched over HTTPS only, from
/// `/AGENTS.md`, else `/.well-known/agents.md` (C1, C2).
#[derive(Debug, Clone, Copy)]
pub struct AgentsMd;

impl super::Format for AgentsMd {
    type State = AgentsMdState;
    const SOURCE: Source = Source::AgentsMd;
    const NAME: &'static str = "agents-md";
    const PATH: &'static str = "/AGENTS.md";
    const FALLBACK_PATH: Option<&'static str> = Some("/.well-known/agents.md");
    const MAX_BYTES: usize = MAX_BYTES;
    const HTTPS_ONLY: bool = true;

    fn from_fetch(outcome: &FetchOutcome) -> AgentsMdState {
        from_fetch(outcome)
    }

    fn falls_through(state: &AgentsMdState) -> bool {
        state.falls_through()
    }

    /// [`discover`], then the `site` check against the host (C13).
    fn settle(root: AgentsMdState, well_known: Option<AgentsMdState>, host: &str) -> AgentsMdState {
        discover(root, well_known).with_fetched_host(host)
    }

    /// When a re-fetch fails (no policy at either location and one of them failed with 5xx,
    /// a timeout or a network error) and a policy is cached, that policy stays in use until
    /// it has been stale for [`STALE_GRACE_S`] (§10.3, C4), retried after `ttl`; after that,
    /// no policy. A 404 is not a failure: the file was removed, so the policy goes.
    fn refresh(
        previous: Option<Previous<AgentsMdState>>,
        fetched: AgentsMdState,
        ttl: Duration,
        _rules: &StaleRules,
    ) -> Refreshed<AgentsMdState> {
        let grace = Duration::from_secs(STALE_GRACE_S);
        match previous {
            Some(previous)
                if fetched.refetch_failed() && !previous.state.falls_through() && previous.stale_for < grace =>
            {
                let left = grace - previous.stale_for;
                Refreshed::kept(previous, ttl.min(left))
            }
            _ => Refreshed::fetched(fetched, ttl),
        }
    }

    /// With `[agents_md] strict_authentication`, C23 applies.
    #[inline]
    fn evaluate(state: &AgentsMdState, req: &RequestView<'_>, settings: super::Settings) -> SourceVerdict {
        state.evaluate(req, settings.strict_authentication)
    }

    fn report(state: &AgentsMdState) -> PolicyReport {
        state.report()
    }

    fn lint(body: &[u8]) -> Vec<Diagnostic> {
        lint(body)
    }
}

/// What an agent blocked by a AGENTS.md reason may do instead.
impl Advice for AgentsMdCode {
    fn advice(self) -> &'static str {
        match self {
            AgentsMdCode::RateLimit => RATE_LIMIT_ADVICE,
            AgentsMdCode::ConcurrentSessions => {
                "You already have as many requests in flight to this site as its AGENTS.md allows. Wait for one to \
                 finish, then retry; send requests one after another instead of in parallel."
            }
            AgentsMdCode::RequiresHumanApproval => {
                "The site's AGENTS.md requires a human to approve this action. Stop and ask your user or operator to \
                 approve or perform it; do not retry automatically."
            }
            AgentsMdCode::TrustLevel => {
                "The site's AGENTS.md requires a higher trust level than this agent has. Only your operator can \
                 change the agent's trust level; do not retry."
            }
            AgentsMdCode::ActionDenied => {
                "The site's AGENTS.md does not allow this kind of action (for example form submission, uploads, API \
                 writes or deletion) for agents. Reading pages may still be allowed; do not retry this request."
            }
            AgentsMdCode::AuthenticationMissing => {
                "The site's AGENTS.md requires authentication, and this write carries no Authorization or Cookie. \
                 Log in to the site (or use the credentials your user gave you) and send them with the request; \
                 reading pages may still work without them."
            }
            AgentsMdCode::ReadOnlyPath => {
                "The site's AGENTS.md makes this path read-only for agents: GET and HEAD may work, changes will not."
            }
            // `action_allowed` never blocks; `authentication_present` rides along with a block.
            AgentsMdCode::DisallowedPath | AgentsMdCode::AuthenticationPresent | AgentsMdCode::ActionAllowed => {
                "The site's AGENTS.md disallows this path for agents. Do not retry it; read /AGENTS.md on this site \
                 to see what is allowed."
            }
        }
    }
}
