//! Combines the sources (one per format) into one [`Decision`] (SEMANTICS X1): any deny wins, then
//! needs-approval, else allow; every limit applies; requests for the policy files
//! themselves are always allowed.

use super::{
    Decision, FetchOutcome, Format, OperatorCode, Opinion, Outcome, Reason, RequestView, SourceVerdict, formats,
};

macro_rules! policies {
    ($($field:ident: $format:ty),* $(,)?) => {
        /// The policy states of one origin, one field per format (`formats!`).
        #[derive(Debug, Clone)]
        pub struct Policies {
            $(
                #[doc = concat!("The state of the `", stringify!($field), "` file.")]
                pub $field: <$format as Format>::State,
            )*
        }

        impl Policies {
            /// The policies of one origin from `read`, which gives the outcome for a path on
            /// the origin, read up to the size cap it is passed (plus one byte). Each format's
            /// second location is read only when its first falls through (AGENTS.md, C1), as
            /// the fetcher does; `host` is the host the files come from (C13).
            ///
            /// # Errors
            /// The first error of `read`.
            pub fn read<E>(
                host: &str,
                mut read: impl FnMut(&'static str, usize) -> Result<FetchOutcome, E>,
            ) -> Result<Policies, E> {
                Ok(Policies { $($field: read_format::<$format, E>(host, &mut read)?,)* })
            }

            /// The memory these states hold, in bytes: their own size plus what each parsed
            /// file holds on the heap (see [`super::Weigh`]). The policy cache bounds its total.
            pub fn weight(&self) -> usize {
                use super::Weigh as _;
                std::mem::size_of::<Policies>() $(+ self.$field.heap_bytes())*
            }

            /// Every format's verdict on one request, folded into a decision.
            #[inline]
            fn decide(&self, req: &RequestView<'_>, settings: Settings) -> Decision {
                combine([$(<$format>::evaluate(&self.$field, req, settings)),*])
            }
        }

        /// True for the path of a policy file: an agent may always read them (SEMANTICS X3).
        fn is_policy_file(path: &str) -> bool {
            $(path == <$format>::PATH || Some(path) == <$format>::FALLBACK_PATH)||*
        }
    };
}
formats!(policies);

/// The state of format `F` for [`Policies::read`].
fn read_format<F: Format, E>(
    host: &str,
    read: &mut impl FnMut(&'static str, usize) -> Result<FetchOutcome, E>,
) -> Result<F::State, E> {
    let first = F::from_fetch(&read(F::PATH, F::MAX_BYTES)?);
    let fallback = match F::FALLBACK_PATH {
        Some(path) if F::falls_through(&first) => Some(F::from_fetch(&read(path, F::MAX_BYTES)?)),
        _ => None,
    };
    Ok(F::settle(first, fallback, host))
}

/// The operator's switches that change what the site files mean; all off by default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// `[robots] honor_crawl_delay`: a robots.txt `Crawl-delay` becomes a limit of one
    /// request per delay per (agent, origin) ([`super::robots::RobotsState::crawl_delay`]).
    pub honor_crawl_delay: bool,
    /// `[agents_md] strict_authentication` (SEMANTICS C23): on a host whose AGENTS.md says
    /// `authentication: required`, a write without `Authorization` or `Cookie` is denied.
    pub strict_authentication: bool,
    /// `[usage] undeclared` (SEMANTICS U7): whether an agent without a declared purpose is
    /// refused by any "no".
    pub usage_undeclared: super::usage::Undeclared,
}

/// Evaluates one request against an origin's policies with the default [`Settings`].
pub fn evaluate(policies: &Policies, req: &RequestView<'_>) -> Decision {
    evaluate_with(policies, req, Settings::default())
}

/// Evaluates one request against an origin's policies, on every spelling of its path
/// ([`super::path`]), under the operator's `settings`.
pub fn evaluate_with(policies: &Policies, req: &RequestView<'_>, settings: Settings) -> Decision {
    if req.is_safe_method() && is_policy_file(req.path()) {
        let reason = Reason::new(OperatorCode::PolicyFile, "requests for policy files are always allowed");
        return Decision::single(Outcome::Allow, reason);
    }
    super::path::decide_all_spellings(req, |req| policies.decide(req, settings))
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
    let mut usage = Vec::new();
    for v in verdicts.iter_mut().filter(|v| deciding(v)) {
        reasons.append(&mut v.reasons);
    }
    for v in &mut verdicts {
        reasons.append(&mut v.reasons);
        limits.append(&mut v.limits);
        inject_headers.append(&mut v.inject_headers);
        usage.append(&mut v.usage);
    }
    Decision { outcome, reasons, blocking, limits, inject_headers, usage }
}
