//! Combines the four sources into one [`Decision`] (SEMANTICS X1): any deny wins, then
//! needs-approval, else allow; every limit applies; requests for the policy files
//! themselves are always allowed.

use super::agents_md::AgentsMdState;
use super::agents_txt::AgentsTxtState;
use super::autoctl::AutoctlState;
use super::robots::RobotsState;
use super::{Decision, Opinion, Outcome, Reason, RequestView, Source, SourceVerdict};

/// The four policy states of one origin.
#[derive(Debug, Clone)]
pub struct Policies {
    /// `/robots.txt`.
    pub robots: RobotsState,
    /// `/agents.txt`.
    pub agents_txt: AgentsTxtState,
    /// `/AGENTS.md` or `/.well-known/agents.md`.
    pub agents_md: AgentsMdState,
    /// `/automation-preferences.txt`.
    pub autoctl: AutoctlState,
}

impl Policies {
    /// The memory these states hold, in bytes: their own size plus what each parsed file
    /// holds on the heap (see [`super::Weigh`]). The policy cache bounds its total.
    pub fn weight(&self) -> usize {
        use super::Weigh as _;
        std::mem::size_of::<Policies>()
            + self.robots.heap_bytes()
            + self.agents_txt.heap_bytes()
            + self.agents_md.heap_bytes()
            + self.autoctl.heap_bytes()
    }
}

/// The paths of the policy files: an agent may always read them (SEMANTICS X3).
const POLICY_FILE_PATHS: [&str; 5] =
    ["/robots.txt", "/agents.txt", "/AGENTS.md", "/.well-known/agents.md", "/automation-preferences.txt"];

/// The operator's switches that change what the site files mean; all off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// `[robots] honor_crawl_delay`: a robots.txt `Crawl-delay` becomes a limit of one
    /// request per delay per (agent, origin) ([`RobotsState::crawl_delay`]).
    pub honor_crawl_delay: bool,
    /// `[agents_md] strict_authentication` (SEMANTICS C23): on a host whose AGENTS.md says
    /// `authentication: required`, a write without `Authorization` or `Cookie` is denied.
    pub strict_authentication: bool,
}

/// Evaluates one request against an origin's policies with the default [`Settings`].
pub fn evaluate(policies: &Policies, req: &RequestView<'_>) -> Decision {
    evaluate_with(policies, req, Settings::default())
}

/// Evaluates one request against an origin's policies, on every spelling of its path
/// ([`super::path`]), under the operator's `settings`.
pub fn evaluate_with(policies: &Policies, req: &RequestView<'_>, settings: Settings) -> Decision {
    if req.is_safe_method() && POLICY_FILE_PATHS.contains(&req.path()) {
        let reason = Reason::new(Source::Operator, "policy_file", "requests for policy files are always allowed");
        return Decision::single(Outcome::Allow, reason);
    }
    super::path::decide_all_spellings(req, |req| {
        let mut robots = policies.robots.evaluate(req);
        if settings.honor_crawl_delay {
            robots.limits.extend(policies.robots.crawl_delay(req));
        }
        combine([
            robots,
            policies.agents_txt.evaluate(req),
            policies.agents_md.evaluate(req, settings.strict_authentication),
            policies.autoctl.evaluate(req),
        ])
    })
}

/// Folds per-source verdicts into a decision. Reasons of the deciding opinion come first.
/// Each list is allocated once at its final size: this runs on every request.
pub(crate) fn combine<const N: usize>(mut verdicts: [SourceVerdict; N]) -> Decision {
    let strongest = verdicts.iter().map(|v| v.opinion).max().unwrap_or(Opinion::NoOpinion);
    let outcome = match strongest {
        Opinion::Deny => Outcome::Deny,
        Opinion::NeedsApproval => Outcome::NeedsApproval,
        Opinion::Allow | Opinion::NoOpinion => Outcome::Allow,
    };
    let deciding = |v: &SourceVerdict| v.opinion == strongest && outcome != Outcome::Allow;
    let blocking = verdicts.iter().filter(|v| deciding(v)).map(|v| v.reasons.len()).sum();
    let mut reasons = Vec::with_capacity(verdicts.iter().map(|v| v.reasons.len()).sum());
    let mut limits = Vec::with_capacity(verdicts.iter().map(|v| v.limits.len()).sum());
    let mut inject_headers = Vec::with_capacity(verdicts.iter().map(|v| v.inject_headers.len()).sum());
    for v in verdicts.iter_mut().filter(|v| deciding(v)) {
        reasons.append(&mut v.reasons);
    }
    for v in &mut verdicts {
        reasons.append(&mut v.reasons);
        limits.append(&mut v.limits);
        inject_headers.append(&mut v.inject_headers);
    }
    Decision { outcome, reasons, blocking, limits, inject_headers }
}
