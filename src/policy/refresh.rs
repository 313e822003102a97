//! Whether a stale copy of a policy file may still be served while its re-fetch runs
//! (stale-while-revalidate), so that requests need not wait for it.
//!
//! Owns: that one window, which follows from the stale rules of agents.txt (B21) and
//! AGENTS.md (C4). Each format's own stale rule (which copy to keep after a re-fetch) is
//! that format's [`super::Format::refresh`].
//!
//! Never: reads the clock (how long a copy has been stale is passed in), fetches, or reads
//! HTTP headers.

use std::time::Duration;

use super::agents_md::STALE_GRACE_S;

/// Whether a file stale for `stale_for`, fetched with `lifetime`, may still be served while
/// its refresh runs in the background (stale-while-revalidate), so that requests need not
/// wait for the re-fetch. Yes while it has been stale for less than its own lifetime and
/// less than [`STALE_GRACE_S`] (one hour): the shorter of the windows in which the stale
/// rules keep a copy after a failed re-fetch (agents.txt's one more lifetime, B21; AGENTS.md's
/// hour, C4). An older copy is not served: the request waits for the refresh, as on the
/// first fetch.
pub fn serves_while_refreshing(stale_for: Duration, lifetime: Duration) -> bool {
    stale_for < lifetime.min(Duration::from_secs(STALE_GRACE_S))
}

#[cfg(test)]
mod tests {
    use super::*;

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
