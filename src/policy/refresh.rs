//! Which copy of a policy file to serve after a re-fetch, and for how long: the stale rules
//! of `SEMANTICS.md` for each format.
//!
//! Owns: the choice between the state a fetch just produced and the copy cached before it
//! (robots.txt RFC 9309 §2.3.1.4 and DESIGN §5; agents.txt B20, B21; AGENTS.md C4;
//! automation-preferences.txt D15, the default of [`super::Format::refresh`]), and the time until the next fetch that follows from it.
//!
//! Never: reads the clock (how long a copy has been stale is passed in), fetches, or reads
//! HTTP headers. `fetch/` passes in `ttl`, the RFC 9111 freshness lifetime of the new
//! response (floored and capped there), and carries out what these functions return.

use std::time::Duration;

use super::PolicyStatus;
use super::agents_md::{AgentsMdState, STALE_GRACE_S};
use super::agents_txt::AgentsTxtState;
use super::robots::RobotsState;

/// No state is kept longer than this before it is fetched again (B22, C5, D16).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The copy cached before a re-fetch.
#[derive(Debug, Clone)]
pub struct Previous<S> {
    /// The state that was in force.
    pub state: S,
    /// How long ago its freshness ran out. A copy already kept by a stale rule counts from
    /// when it first went stale, not from its last failed re-fetch.
    pub stale_for: Duration,
    /// The freshness lifetime it was fetched with.
    pub lifetime: Duration,
}

/// The state to serve after a fetch, and how long until the file is fetched again.
#[derive(Debug, Clone)]
pub struct Refreshed<S> {
    /// The state in force from now on.
    pub state: S,
    /// Time until the next fetch, at most [`MAX_TTL`].
    pub ttl: Duration,
    /// True when a stale rule kept the previous copy instead of the state just fetched;
    /// the cache then keeps counting its staleness from [`Previous::stale_for`].
    pub kept_stale: bool,
}

impl<S> Refreshed<S> {
    /// The state just fetched, for its own lifetime.
    pub fn fetched(state: S, ttl: Duration) -> Self {
        Refreshed { state, ttl: ttl.min(MAX_TTL), kept_stale: false }
    }

    /// The previous copy, kept for `ttl` more.
    fn kept(previous: Previous<S>, ttl: Duration) -> Self {
        Refreshed { state: previous.state, ttl: ttl.min(MAX_TTL), kept_stale: true }
    }
}

/// robots.txt: when the origin is unreachable (5xx, timeout, network error) and a parsed
/// copy is cached, that copy stays in use instead of "disallow all" (RFC 9309 §2.3.1.4,
/// DESIGN §5), for as long as the origin stays unreachable; it is retried after `ttl`. A
/// cached "unavailable" (4xx) is not a copy of a file, so it is not kept. Any other fetch
/// replaces the cached state.
pub fn robots(previous: Option<Previous<RobotsState>>, fetched: RobotsState, ttl: Duration) -> Refreshed<RobotsState> {
    match previous {
        Some(previous) if fetched.is_unreachable() && previous.state.report().status == PolicyStatus::Valid => {
            Refreshed::kept(previous, ttl)
        }
        _ => Refreshed::fetched(fetched, ttl),
    }
}

/// agents.txt: a restricted file (hash mismatch, bad directive, too large) drops any
/// cached copy and is itself kept for exactly `restricted_ttl` (B20, default
/// [`super::agents_txt::RESTRICTED_TTL_S`]), whatever its `Cache-Control` says, so a broken
/// file is neither fetched on every request nor kept for a day. When the origin is
/// unreachable (B21), a cached *valid* copy stays in use while it has been stale for less
/// than its own freshness lifetime ("within its TTL": we only re-fetch after it expired,
/// so we read it as one more lifetime), retried after `ttl`. Anything else replaces it.
pub fn agents_txt(
    previous: Option<Previous<AgentsTxtState>>,
    fetched: AgentsTxtState,
    ttl: Duration,
    restricted_ttl: Duration,
) -> Refreshed<AgentsTxtState> {
    if fetched.is_restricted() {
        return Refreshed::fetched(fetched, restricted_ttl);
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

/// AGENTS.md: when a re-fetch fails (no policy at either location and one of them failed
/// with 5xx, a timeout or a network error) and a policy is cached, that policy stays in use
/// until it has been stale for [`STALE_GRACE_S`] (§10.3, C4), retried after `ttl`; after
/// that, no policy. A 404 is not a failure: the file was removed, so the policy goes.
pub fn agents_md(
    previous: Option<Previous<AgentsMdState>>,
    fetched: AgentsMdState,
    ttl: Duration,
) -> Refreshed<AgentsMdState> {
    let grace = Duration::from_secs(STALE_GRACE_S);
    match previous {
        Some(previous) if fetched.refetch_failed() && !previous.state.falls_through() && previous.stale_for < grace => {
            let left = grace - previous.stale_for;
            Refreshed::kept(previous, ttl.min(left))
        }
        _ => Refreshed::fetched(fetched, ttl),
    }
}

/// Whether a file stale for `stale_for`, fetched with `lifetime`, may still be served while
/// its refresh runs in the background (stale-while-revalidate), so that requests need not
/// wait for the re-fetch. Yes while it has been stale for less than its own lifetime and
/// less than [`STALE_GRACE_S`] (one hour): the shorter of the windows in which the rules
/// above keep a copy after a failed re-fetch (B21's one more lifetime, C4's hour). An older
/// copy is not served: the request waits for the refresh, as on the first fetch.
pub fn serves_while_refreshing(stale_for: Duration, lifetime: Duration) -> bool {
    stale_for < lifetime.min(Duration::from_secs(STALE_GRACE_S))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{FetchError, FetchOutcome, Headers, agents_md, agents_txt, autoctl, robots};

    const MINUTE: Duration = Duration::from_secs(60);
    const HOUR: Duration = Duration::from_secs(3600);

    fn ok(body: &str) -> FetchOutcome {
        FetchOutcome::Response { status: 200, headers: Headers::default(), body: body.into(), over_cap: false }
    }

    fn status(status: u16) -> FetchOutcome {
        FetchOutcome::Response { status, headers: Headers::default(), body: Vec::new(), over_cap: false }
    }

    fn previous<S>(state: S, stale_for: Duration, lifetime: Duration) -> Option<Previous<S>> {
        Some(Previous { state, stale_for, lifetime })
    }

    const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";
    /// A verified agents.txt (the digest of `/private DISALLOW`).
    fn valid_agents_txt() -> AgentsTxtState {
        let body = agents_txt::fix_hash(b"/private DISALLOW\n");
        agents_txt::from_fetch(&ok(&String::from_utf8_lossy(&body)))
    }
    const AGENTS_MD: &str = "# AGENTS.md\n\n## Identity\n- site: example.com\n";

    #[test]
    fn robots_unreachable_keeps_a_parsed_copy_however_long_it_is_stale() {
        let cached = robots::from_fetch(&ok(ROBOTS));
        let fetched = robots::from_fetch(&status(503));
        let refreshed = robots(previous(cached, 30 * 24 * HOUR, HOUR), fetched, MINUTE);
        assert!(refreshed.kept_stale);
        assert!(!refreshed.state.is_unreachable());
        assert_eq!(refreshed.ttl, MINUTE);
    }

    #[test]
    fn robots_unreachable_without_a_parsed_copy_disallows() {
        let fetched = robots(None, robots::from_fetch(&FetchOutcome::Failed(FetchError::Timeout)), MINUTE);
        assert!(fetched.state.is_unreachable() && !fetched.kept_stale);
        let unavailable = robots::from_fetch(&status(404));
        let after_404 = robots(previous(unavailable, MINUTE, HOUR), robots::from_fetch(&status(500)), MINUTE);
        assert!(after_404.state.is_unreachable() && !after_404.kept_stale);
    }

    #[test]
    fn robots_answer_replaces_the_copy_and_ttl_is_capped() {
        let cached = robots::from_fetch(&ok(ROBOTS));
        let refreshed = robots(previous(cached, MINUTE, HOUR), robots::from_fetch(&status(404)), 48 * HOUR);
        assert_eq!(refreshed.state.report().status, PolicyStatus::Absent);
        assert_eq!(refreshed.ttl, MAX_TTL);
    }

    #[test]
    fn b20_restricted_agents_txt_drops_a_valid_copy_for_the_negative_ttl() {
        let valid = valid_agents_txt();
        assert_eq!(valid.status(), PolicyStatus::Valid);
        let broken = agents_txt::from_fetch(&ok("*0000\n/a ALLOW\n"));
        assert!(broken.is_restricted());
        let refreshed = agents_txt(previous(valid, MINUTE, HOUR), broken, 24 * HOUR, 5 * MINUTE);
        assert!(refreshed.state.is_restricted() && !refreshed.kept_stale);
        assert_eq!(refreshed.ttl, 5 * MINUTE);
    }

    #[test]
    fn b21_unreachable_agents_txt_keeps_a_valid_copy_within_its_lifetime() {
        let refreshed = agents_txt(previous(valid_agents_txt(), 10 * MINUTE, HOUR), fetched_503(), MINUTE, 5 * MINUTE);
        assert!(refreshed.kept_stale);
        assert_eq!(refreshed.state.status(), PolicyStatus::Valid);
        assert_eq!(refreshed.ttl, MINUTE);

        let near_end = agents_txt(previous(valid_agents_txt(), HOUR - MINUTE / 2, HOUR), fetched_503(), MINUTE, MINUTE);
        assert_eq!(near_end.ttl, MINUTE / 2, "never kept past one more lifetime");

        let expired = agents_txt(previous(valid_agents_txt(), HOUR, HOUR), fetched_503(), MINUTE, MINUTE);
        assert!(!expired.kept_stale);
        assert_eq!(expired.state.status(), PolicyStatus::Absent);
    }

    fn fetched_503() -> AgentsTxtState {
        agents_txt::from_fetch(&status(503))
    }

    #[test]
    fn b21_only_a_valid_copy_is_kept() {
        let not_applicable = agents_txt::from_fetch(&ok("<html>hi</html>"));
        let refreshed = agents_txt(previous(not_applicable, MINUTE, HOUR), fetched_503(), MINUTE, MINUTE);
        assert!(!refreshed.kept_stale);
    }

    #[test]
    fn c4_agents_md_policy_kept_for_an_hour_after_a_failed_refetch() {
        let policy = agents_md::from_fetch(&ok(AGENTS_MD));
        assert!(!policy.falls_through());
        let failed = || agents_md::from_fetch(&status(502));
        let kept = agents_md(previous(policy.clone(), 20 * MINUTE, HOUR), failed(), 5 * MINUTE);
        assert!(kept.kept_stale && !kept.state.falls_through());
        assert_eq!(kept.ttl, 5 * MINUTE);
        let last = agents_md(previous(policy.clone(), 58 * MINUTE, HOUR), failed(), 5 * MINUTE);
        assert_eq!(last.ttl, 2 * MINUTE);
        let gone = agents_md(previous(policy.clone(), HOUR, HOUR), failed(), 5 * MINUTE);
        assert!(gone.state.falls_through() && !gone.kept_stale);
        let removed = agents_md(previous(policy, MINUTE, HOUR), agents_md::from_fetch(&status(404)), HOUR);
        assert!(removed.state.falls_through() && !removed.kept_stale, "a 404 removes the policy");
    }

    #[test]
    fn d15_autoctl_failure_replaces_a_good_copy() {
        let rules = crate::policy::StaleRules { agents_txt_negative_ttl: MINUTE };
        let good = previous(autoctl::from_fetch(&ok("User-agent: *\nAllowed-methods: GET\n")), MINUTE, HOUR);
        let failed = <autoctl::Autoctl as crate::policy::Format>::refresh(
            good,
            autoctl::from_fetch(&status(503)),
            48 * HOUR,
            &rules,
        );
        assert!(!failed.kept_stale);
        assert_eq!(failed.ttl, MAX_TTL);
    }

    #[test]
    fn stale_while_revalidate_within_the_shorter_of_lifetime_and_an_hour() {
        let s = Duration::from_secs;
        assert!(serves_while_refreshing(s(0), s(60)));
        assert!(serves_while_refreshing(s(59), s(60)));
        assert!(!serves_while_refreshing(s(60), s(60)), "one lifetime past expiry is too old");
        assert!(serves_while_refreshing(s(3599), s(86_400)));
        assert!(!serves_while_refreshing(s(3600), s(86_400)), "never more than an hour stale");
        assert!(!serves_while_refreshing(s(0), s(0)), "a copy with no lifetime is never served stale");
    }
}
