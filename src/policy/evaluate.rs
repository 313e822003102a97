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

/// Evaluates one request against an origin's policies, on every spelling of its path
/// ([`super::path`]).
pub fn evaluate(policies: &Policies, req: &RequestView<'_>) -> Decision {
    if req.is_safe_method() && POLICY_FILE_PATHS.contains(&req.path()) {
        return Decision {
            outcome: Outcome::Allow,
            reasons: vec![Reason::new(Source::Operator, "policy_file", "requests for policy files are always allowed")],
            blocking: 0,
            limits: Vec::new(),
            inject_headers: Vec::new(),
        };
    }
    super::path::decide_all_spellings(req, |req| {
        combine([
            policies.robots.evaluate(req),
            policies.agents_txt.evaluate(req),
            policies.agents_md.evaluate(req),
            policies.autoctl.evaluate(req),
        ])
    })
}

/// Folds per-source verdicts into a decision. Reasons of the deciding opinion come first.
pub(crate) fn combine(verdicts: impl IntoIterator<Item = SourceVerdict>) -> Decision {
    let verdicts: Vec<SourceVerdict> = verdicts.into_iter().collect();
    let strongest = verdicts.iter().map(|v| v.opinion).max().unwrap_or(Opinion::NoOpinion);
    let outcome = match strongest {
        Opinion::Deny => Outcome::Deny,
        Opinion::NeedsApproval => Outcome::NeedsApproval,
        Opinion::Allow | Opinion::NoOpinion => Outcome::Allow,
    };
    let mut deciding = Vec::new();
    let mut others = Vec::new();
    let mut limits = Vec::new();
    let mut inject_headers = Vec::new();
    for v in verdicts {
        if v.opinion == strongest && outcome != Outcome::Allow {
            deciding.extend(v.reasons);
        } else {
            others.extend(v.reasons);
        }
        limits.extend(v.limits);
        inject_headers.extend(v.inject_headers);
    }
    let blocking = deciding.len();
    deciding.extend(others);
    Decision { outcome, reasons: deciding, blocking, limits, inject_headers }
}
