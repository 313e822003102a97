//! Combines the sources (one per format) into one [`Decision`] (SEMANTICS X1): any deny wins, then
//! needs-approval, else allow; every limit applies; requests for the policy files
//! themselves are always allowed.

use std::sync::Arc;

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
/// Each list is allocated at most once, at its final size, and not at all when one source
/// holds all of it on the heap (the usual case for limits and usage): this runs on every
/// request. The reasons, held inline by each source, are the decision's one allocation.
pub(crate) fn combine<const N: usize>(mut verdicts: [SourceVerdict; N]) -> Decision {
    let strongest = verdicts.iter().map(|v| v.opinion).max().unwrap_or(Opinion::NoOpinion);
    let outcome = match strongest {
        Opinion::Deny => Outcome::Deny,
        Opinion::NeedsApproval => Outcome::NeedsApproval,
        Opinion::Allow | Opinion::NoOpinion => Outcome::Allow,
    };
    let deciding = |v: &SourceVerdict| v.opinion == strongest && outcome != Outcome::Allow;
    let blocking = verdicts.iter().filter(|v| deciding(v)).map(|v| v.reasons.len()).sum();
    let total = verdicts.iter().map(|v| v.reasons.len()).sum();
    let reasons = match verdicts.iter_mut().find(|v| v.reasons.len() == total) {
        // One source holds them all, deciding ones included: taken whole (a spilled list
        // without a copy).
        Some(whole) => std::mem::take(&mut whole.reasons).into_vec(),
        None => {
            let mut reasons = Vec::with_capacity(total);
            for v in verdicts.iter_mut().filter(|v| deciding(v)) {
                reasons.extend(v.reasons.drain(..));
            }
            for v in &mut verdicts {
                reasons.extend(v.reasons.drain(..));
            }
            reasons
        }
    };
    // Shared whole when one source holds them all (AGENTS.md's, the usual case).
    let total_limits: usize = verdicts.iter().map(|v| v.limits.len()).sum();
    let limits = match verdicts.iter().find(|v| v.limits.len() == total_limits) {
        Some(whole) => Arc::clone(&whole.limits),
        None => verdicts.iter().flat_map(|v| v.limits.iter()).cloned().collect(),
    };
    let inject_headers = gather(&mut verdicts, |v| &mut v.inject_headers);
    let usage = gather(&mut verdicts, |v| &mut v.usage);
    Decision { outcome, reasons, blocking, limits, inject_headers, usage }
}

/// The `list` of every verdict, in source order: moved whole when one verdict holds all of
/// it, else allocated once at its final size.
fn gather<T>(verdicts: &mut [SourceVerdict], list: impl Fn(&mut SourceVerdict) -> &mut Vec<T>) -> Vec<T> {
    let total = verdicts.iter_mut().map(|v| list(v).len()).sum();
    if let Some(whole) = verdicts.iter_mut().map(&list).find(|l| l.len() == total) {
        return std::mem::take(whole);
    }
    let mut all = Vec::with_capacity(total);
    for v in verdicts {
        all.append(list(v));
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{AgentsMdCode, Limit, RobotsCode};

    fn verdict(opinion: Opinion, rules: &[&str]) -> SourceVerdict {
        let reasons = rules.iter().map(|rule| Reason::new(RobotsCode::Allow, *rule)).collect();
        SourceVerdict { opinion, reasons, ..SourceVerdict::no_opinion() }
    }

    fn rules(decision: &Decision) -> Vec<&str> {
        decision.reasons.iter().map(|reason| &*reason.rule).collect()
    }

    #[test]
    fn every_source_s_reasons_are_kept_in_source_order_the_deciding_ones_first() {
        let allowed = combine([
            verdict(Opinion::Allow, &["a", "b"]),
            verdict(Opinion::NoOpinion, &[]),
            verdict(Opinion::Allow, &["c"]),
        ]);
        assert_eq!((allowed.outcome, allowed.blocking, rules(&allowed)), (Outcome::Allow, 0, vec!["a", "b", "c"]));
        let alone = combine([verdict(Opinion::NoOpinion, &[]), verdict(Opinion::Allow, &["a", "b"])]);
        assert_eq!(rules(&alone), vec!["a", "b"]);
        let denied =
            combine([verdict(Opinion::Allow, &["a"]), verdict(Opinion::Deny, &["d"]), verdict(Opinion::Allow, &["c"])]);
        assert_eq!((denied.outcome, denied.blocking, rules(&denied)), (Outcome::Deny, 1, vec!["d", "a", "c"]));
    }

    #[test]
    fn one_source_holding_every_reason_gives_them_in_its_order_however_many() {
        assert!(!verdict(Opinion::Allow, &["a", "b"]).reasons.spilled(), "two reasons are held inline");
        for held in [&["a"][..], &["a", "b"], &["a", "b", "c"]] {
            let allowed = combine([verdict(Opinion::NoOpinion, &[]), verdict(Opinion::Allow, held)]);
            assert_eq!((allowed.blocking, rules(&allowed)), (0, held.to_vec()));
            let denied = combine([verdict(Opinion::Allow, &[]), verdict(Opinion::Deny, held)]);
            assert_eq!((denied.blocking, rules(&denied)), (held.len(), held.to_vec()));
        }
        let none = combine([verdict(Opinion::NoOpinion, &[]), verdict(Opinion::NoOpinion, &[])]);
        assert_eq!((none.outcome, none.reasons.len()), (Outcome::Allow, 0));
    }

    #[test]
    fn every_limit_applies_in_source_order() {
        let limit = |line| Limit {
            source: crate::policy::Source::AgentsMd,
            kind: crate::policy::LimitKind::Concurrent { max: line },
            scope: crate::policy::LimitScope::Rule { line },
            reason: Reason::new(AgentsMdCode::ConcurrentSessions, "x").at_line(line),
        };
        let with = |lines: &[u32]| SourceVerdict {
            limits: lines.iter().map(|&l| limit(l)).collect(),
            ..verdict(Opinion::Allow, &[])
        };
        let lines = |decision: Decision| decision.limits.iter().map(|l| l.reason.line).collect::<Vec<_>>();
        assert_eq!(lines(combine([with(&[]), with(&[3, 4]), with(&[])])), vec![Some(3), Some(4)]);
        assert_eq!(lines(combine([with(&[1]), with(&[]), with(&[2, 5])])), vec![Some(1), Some(2), Some(5)]);
        assert_eq!(lines(combine([with(&[]), with(&[])])), Vec::<Option<u32>>::new());
        let alone = with(&[3, 4]);
        let shared = Arc::clone(&alone.limits);
        let decision = combine([with(&[]), alone, with(&[])]);
        assert!(Arc::ptr_eq(&decision.limits, &shared), "one source's limits are the decision's, not a copy");
    }
}
