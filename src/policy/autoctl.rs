//! automation-preferences.txt (draft-liao-aipref-autoctl-core-01), as settled in
//! SEMANTICS.md §6.4 (D1–D19): what a fetch of the file means (D15), its groups, and which
//! methods and purposes the one selected group allows.
//!
//! Owns: the fetch-outcome semantics for this file (2xx parse unless HTML; 4xx no opinion;
//! 5xx, timeout, network error, a rejected or oversize file → safe methods only), the
//! parser (`autoctl/parse.rs`: lines, comments, robots-style grouping), group selection
//! (`autoctl/group.rs`: host, longest scope, exact user-agent, later group) and the
//! `allowed-methods` / `allowed-purposes` checks, each with a reason citing the line.
//!
//! Never: I/O, caching, clocks or logging; never widens another file (robots.txt Disallow
//! still denies, D18: the evaluator combines). Choices beyond SEMANTICS.md are in
//! `docs/autoctl.md`.

mod group;
mod parse;
#[cfg(test)]
mod tests;

use crate::policy::Weigh;
use std::sync::Arc;

use self::group::{Group, RuleLine, Specificity};
use self::parse::Parsed;
use super::path::{Reading, decide_both_readings};
use super::pattern::{Pattern, normalized_path};
use super::text::{Findings, sha256_hex, split_bom};
use super::{
    Advice, AutoctlCode, Diagnostic, FetchError, FetchOutcome, HeaderLookup, Headers, Opinion, PolicyReport,
    PolicyStatus, Reason, Reasons, RequestView, Source, SourceVerdict,
};

/// The size cap (SEMANTICS X6, D19): a longer file is handled as unavailable (D15).
pub const MAX_BYTES: usize = 500 * 1024;

/// The automation-preferences.txt policy of one origin, built once per fetch by
/// [`from_fetch`] and evaluated for every request.
#[derive(Debug, Clone)]
pub struct AutoctlState {
    policy: Policy,
    report: PolicyReport,
}

/// What the file means for access.
#[derive(Debug, Clone)]
enum Policy {
    /// No file, an HTML page, or a fetch that says nothing (4xx): no opinion (D11, D15).
    Silent,
    /// The file could not be used: safe methods only, with this reason (D15).
    SafeMethodsOnly(Reason),
    /// The file's groups, in file order (D1); `has_decoded` when a scope reads differently
    /// decoded, so groups are selected in both readings (SEMANTICS R9).
    Groups { groups: Vec<Group>, has_decoded: bool },
}

/// The state a fetch of `/automation-preferences.txt` leads to (SEMANTICS D15, D19):
///
/// - 2xx: parsed, unless served as HTML (`Content-Type`, or a body that starts like an HTML
///   document), which is not this format (status not applicable, no opinion). A body over
///   [`MAX_BYTES`] or with raw control bytes (D14) is malformed: safe methods only.
/// - 5xx, timeout, network error: safe methods only (`autoctl.unavailable`), status absent.
/// - 4xx and anything else (including too many redirects): no file, no opinion.
pub fn from_fetch(outcome: &FetchOutcome) -> AutoctlState {
    match outcome {
        FetchOutcome::Response { status: 200..=299, headers, body, over_cap } => {
            from_body(headers, body, *over_cap, Findings::default())
        }
        FetchOutcome::Response { status: status @ 500.., .. } => {
            unavailable_fetch(format!("automation-preferences.txt answered {status}"))
        }
        FetchOutcome::Failed(
            error @ (FetchError::Timeout
            | FetchError::Network(_)
            | FetchError::Unreachable { .. }
            | FetchError::AtCapacity { .. }
            | FetchError::Parent { .. }),
        ) => unavailable_fetch(format!("fetching automation-preferences.txt failed: {error}")),
        FetchOutcome::Failed(error) => AutoctlState {
            policy: Policy::Silent,
            report: PolicyReport {
                status: PolicyStatus::Absent,
                digest: None,
                diagnostics: vec![Diagnostic::warning(None, "fetch-failed", format!("{error}: treated as no file"))],
            },
        },
        FetchOutcome::Response { .. } => AutoctlState { policy: Policy::Silent, report: PolicyReport::absent() },
    }
}

/// Every finding about a file body as served with status 200 and no `Content-Type`: the
/// same path as [`from_fetch`], so `agentgate lint` and the proxy agree.
pub fn lint(body: &[u8]) -> Vec<Diagnostic> {
    from_body(&Headers::default(), body, false, Findings::all()).report.diagnostics
}

impl AutoctlState {
    /// What this file says about one request (SEMANTICS D6–D13, D15): no opinion when no
    /// group applies; otherwise the one selected group's `allowed-methods` and
    /// `allowed-purposes` decide, and every failed check is a reason citing its line.
    pub fn evaluate(&self, req: &RequestView<'_>) -> SourceVerdict {
        match &self.policy {
            Policy::Silent => SourceVerdict::no_opinion(),
            Policy::SafeMethodsOnly(reason) => {
                let opinion = if req.is_safe_method() { Opinion::Allow } else { Opinion::Deny };
                SourceVerdict::with(opinion, reason.clone())
            }
            Policy::Groups { groups, has_decoded } => {
                let path = normalized_path(req.path_and_query);
                decide_both_readings(*has_decoded, |reading| {
                    self.evaluate_group(select(groups, req, &reading.path(&path), reading), req)
                })
            }
        }
    }

    /// Status, digest (SHA-256 of the bytes served) and findings, for `explain` and `lint`.
    pub fn report(&self) -> PolicyReport {
        self.report.clone()
    }

    /// What the group selected for the request says about it; no group, no opinion (D11).
    fn evaluate_group(&self, group: Option<&Group>, req: &RequestView<'_>) -> SourceVerdict {
        let Some(group) = group else {
            let rule = "no group's host, scope and user-agent match this request";
            let reason = Reason::new(AutoctlCode::NoGroup, rule).with_digest(self.report.digest.clone());
            return SourceVerdict::with(Opinion::NoOpinion, reason);
        };
        let mut denials = Reasons::new();
        let mut allowed_by = None;
        match &group.methods {
            None => denials.push(self.reason(AutoctlCode::NoAllowedMethods, &group.first)),
            Some(methods) => match methods.find_method(req.method) {
                Some(line) => allowed_by = Some(line),
                None => denials
                    .push(self.reason(AutoctlCode::MethodNotAllowed, methods.first_line().unwrap_or(&group.first))),
            },
        }
        if let Some(purposes) = &group.purposes {
            let cited = purposes.first_line().unwrap_or(&group.first);
            if req.purposes.is_empty() {
                denials.push(self.reason(AutoctlCode::PurposeUndeclared, cited));
            } else if req.purposes.iter().any(|p| purposes.find_purpose(p).is_none()) {
                denials.push(self.reason(AutoctlCode::PurposeNotAllowed, cited));
            }
        }
        match allowed_by {
            Some(line) if denials.is_empty() => {
                SourceVerdict::with(Opinion::Allow, self.reason(AutoctlCode::Allowed, line))
            }
            _ => SourceVerdict { opinion: Opinion::Deny, reasons: denials, ..SourceVerdict::no_opinion() },
        }
    }

    /// A reason from this file, citing the line that decided.
    fn reason(&self, code: AutoctlCode, cited: &RuleLine) -> Reason {
        Reason::new(code, Arc::clone(&cited.text)).at_line(cited.line).with_digest(self.report.digest.clone())
    }
}

/// Exactly one group (D10): the greatest (host, scope length, exact user-agent), the later
/// group on a tie, with the scopes read as `reading` says (SEMANTICS R9). `path` is the
/// request's, normalised once by the caller, not per pattern, and not at all in the common
/// case of a path that is already normal.
fn select<'g>(groups: &'g [Group], req: &RequestView<'_>, path: &str, reading: Reading) -> Option<&'g Group> {
    let mut best: Option<(Specificity, &Group)> = None;
    for group in groups {
        if let Some(specificity) = group.specificity(req, path, reading)
            && best.as_ref().is_none_or(|(b, _)| specificity >= *b)
        {
            best = Some((specificity, group));
        }
    }
    best.map(|(_, group)| group)
}

/// A 2xx body (D15, D14, D19).
fn from_body(headers: &Headers, body: &[u8], over_cap: bool, findings: Findings) -> AutoctlState {
    let digest = Some(Arc::<str>::from(sha256_hex(body)));
    if headers.is_html() || looks_like_html(body) {
        let why = "served as HTML (a soft-404 page?), not automation preferences: no opinion";
        return AutoctlState {
            policy: Policy::Silent,
            report: PolicyReport {
                status: PolicyStatus::NotApplicable,
                digest,
                diagnostics: vec![Diagnostic::warning(None, "not-applicable", why)],
            },
        };
    }
    let mut diagnostics = Vec::new();
    if let Some(media_type) = headers.media_type()
        && media_type != "text/plain"
    {
        let message = format!("served as '{media_type}'; the draft requires text/plain; charset=utf-8 (parsed anyway)");
        diagnostics.push(Diagnostic::warning(None, "content-type", message));
    }
    if over_cap || body.len() > MAX_BYTES {
        let why = format!("automation-preferences.txt is larger than {} KiB", MAX_BYTES / 1024);
        diagnostics.push(Diagnostic::error(None, "too-large", format!("{why}: only safe methods are allowed")));
        return malformed(unavailable_reason(&why).with_digest(digest.clone()), digest, diagnostics);
    }
    match parse::parse(body, findings) {
        Parsed::Rejected(line, found) => {
            diagnostics.extend(found);
            let why = format!("automation-preferences.txt is rejected: raw control byte on line {line}");
            malformed(unavailable_reason(&why).at_line(line).with_digest(digest.clone()), digest, diagnostics)
        }
        Parsed::Groups(groups, found) => {
            diagnostics.extend(found);
            let has_decoded = groups.iter().flat_map(|group| &group.scopes).any(Pattern::has_decoded);
            AutoctlState {
                policy: Policy::Groups { groups, has_decoded },
                report: PolicyReport { status: PolicyStatus::Valid, digest, diagnostics },
            }
        }
    }
}

/// A body that starts like an HTML document (after a BOM and whitespace) is a soft-404
/// page, whatever its `Content-Type` (D15 "unless the body is HTML"). `<!--` alone is not
/// HTML: the draft's own examples open with such comments.
fn looks_like_html(body: &[u8]) -> bool {
    let (_, body) = split_bom(body, false);
    let start = body.iter().position(|b| !b.is_ascii_whitespace()).unwrap_or(body.len());
    let head = &body[start..body.len().min(start + 14)];
    [&b"<!doctype html"[..], b"<html"]
        .iter()
        .any(|tag| head.len() >= tag.len() && head[..tag.len()].eq_ignore_ascii_case(tag))
}

/// The reason for "safe methods only" (D15).
fn unavailable_reason(why: &str) -> Reason {
    Reason::new(AutoctlCode::Unavailable, format!("{why}: only GET, HEAD and OPTIONS are allowed until a good fetch"))
}

/// A served file that cannot be used (D14 control bytes, oversize).
fn malformed(reason: Reason, digest: Option<Arc<str>>, diagnostics: Vec<Diagnostic>) -> AutoctlState {
    AutoctlState {
        policy: Policy::SafeMethodsOnly(reason),
        report: PolicyReport { status: PolicyStatus::Malformed, digest, diagnostics },
    }
}

/// No file could be fetched (5xx, timeout, network error): safe methods only, status absent.
fn unavailable_fetch(why: String) -> AutoctlState {
    let reason = unavailable_reason(&why);
    let diagnostics = vec![Diagnostic::warning(None, "unavailable", reason.rule.to_string())];
    AutoctlState {
        policy: Policy::SafeMethodsOnly(reason),
        report: PolicyReport { status: PolicyStatus::Absent, digest: None, diagnostics },
    }
}

impl Weigh for AutoctlState {
    fn heap_bytes(&self) -> usize {
        let policy = match &self.policy {
            Policy::Silent => 0,
            Policy::SafeMethodsOnly(reason) => reason.heap_bytes(),
            Policy::Groups { groups, .. } => groups.heap_bytes(),
        };
        policy + self.report.heap_bytes()
    }
}

/// automation-preferences.txt as a [`super::Format`] (draft-liao-aipref-autoctl-core-01).
/// Every fetch replaces the cached state (the default stale rule, D15).
#[derive(Debug, Clone, Copy)]
pub struct Autoctl;

impl super::Format for Autoctl {
    type State = AutoctlState;
    const SOURCE: Source = Source::Autoctl;
    const NAME: &'static str = "autoctl";
    const PATH: &'static str = "/automation-preferences.txt";
    const MAX_BYTES: usize = MAX_BYTES;

    fn from_fetch(outcome: &FetchOutcome) -> AutoctlState {
        from_fetch(outcome)
    }

    #[inline]
    fn evaluate(state: &AutoctlState, req: &RequestView<'_>, _settings: super::Settings) -> SourceVerdict {
        state.evaluate(req)
    }

    fn report(state: &AutoctlState) -> PolicyReport {
        state.report()
    }

    fn lint(body: &[u8]) -> Vec<Diagnostic> {
        lint(body)
    }
}

/// What an agent blocked by a automation-preferences.txt reason may do instead.
impl Advice for AutoctlCode {
    fn advice(self) -> &'static str {
        match self {
            AutoctlCode::Unavailable => {
                "The site's automation-preferences.txt could not be used, so only safe methods (GET, HEAD, OPTIONS) \
                 are allowed for now. Read-only requests remain possible."
            }
            AutoctlCode::PurposeNotAllowed | AutoctlCode::PurposeUndeclared => {
                "The site's automation-preferences.txt only allows certain purposes here, and this agent's declared \
                 purposes are not among them. Only your operator can change the declared purposes; do not retry."
            }
            // `allowed`, `no_group` and `unenforceable` never block: the file's general advice.
            AutoctlCode::MethodNotAllowed
            | AutoctlCode::NoAllowedMethods
            | AutoctlCode::Allowed
            | AutoctlCode::NoGroup
            | AutoctlCode::Unenforceable => {
                "The site's automation-preferences.txt does not allow this HTTP method here. Use one of the methods \
                 the cited rule lists (often GET and HEAD), or do not retry."
            }
        }
    }
}
