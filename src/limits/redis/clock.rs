//! Redis's clock as one replica follows it ([`RedisClock`]): the offset of Redis's `TIME` from
//! the replica's monotonic clock, learned from every answer, for the deadline each shared-limit
//! check carries so a check Redis runs after the replica stopped waiting spends nothing.
//!
//! Never talks to Redis itself: the limiter hands it each answer's time.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// Redis's clock as this replica sees it, for the deadline each check carries (`CHECK`):
/// the offset of Redis's `TIME` (ms) from this replica's monotonic clock, learned from every
/// answer. An answer's time was read before the answer arrived, so `redis_ms - arrived_ms`
/// is never more than the true offset: the estimate is never ahead of Redis, and a check
/// sent at `t` carries a deadline no later than Redis's clock at `t` plus the timeout, when
/// the replica stops waiting. It is behind by at most one round trip of the answer it came
/// from (a check that reaches Redis that close to its timeout may be refused as expired),
/// so the tightest (largest) sample is kept; a sample lower than the estimate by more than
/// the timeout (no round trip that was waited for is that long) means Redis's clock went
/// back, and replaces it. A step back shorter than the timeout, or Redis's clock running
/// slower than the replica's, leaves the estimate ahead by less than the timeout until then.
pub(super) struct RedisClock {
    /// The replica's zero.
    origin: Instant,
    /// Redis ms minus replica ms; [`UNKNOWN`] until Redis has answered once.
    offset_ms: AtomicI64,
    /// The check timeout, in ms.
    timeout_ms: i64,
}

/// [`RedisClock::offset_ms`] before any answer.
const UNKNOWN: i64 = i64::MIN;

impl RedisClock {
    pub(super) fn new(timeout: Duration) -> Self {
        RedisClock {
            origin: Instant::now(),
            offset_ms: AtomicI64::new(UNKNOWN),
            timeout_ms: i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX),
        }
    }

    fn millis(&self, at: Instant) -> i64 {
        i64::try_from(at.saturating_duration_since(self.origin).as_millis()).unwrap_or(i64::MAX)
    }

    /// The deadline on Redis's clock for a check sent at `sent`: 0 (none) until Redis has
    /// answered once, since the clock is not known before.
    pub(super) fn deadline(&self, sent: Instant) -> u64 {
        let offset = self.offset_ms.load(Ordering::Relaxed);
        if offset == UNKNOWN {
            return 0;
        }
        let deadline = offset.saturating_add(self.millis(sent)).saturating_add(self.timeout_ms);
        u64::try_from(deadline).unwrap_or(0).max(1)
    }

    /// Learns from an answer whose `TIME` was `redis_ms` and which arrived at `arrived`.
    pub(super) fn learn(&self, redis_ms: i64, arrived: Instant) {
        let sample = redis_ms.saturating_sub(self.millis(arrived));
        let _ = self.offset_ms.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |estimate| {
            let tighter = estimate == UNKNOWN || sample > estimate;
            let went_back = sample < estimate.saturating_sub(self.timeout_ms);
            (tighter || went_back).then_some(sample)
        });
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::RedisClock;

    #[test]
    fn the_deadline_is_on_redis_clock_never_ahead_of_it_and_follows_it_back() {
        let clock = RedisClock::new(Duration::from_millis(500));
        let at = |ms| clock.origin + Duration::from_millis(ms);
        assert_eq!(clock.deadline(at(0)), 0, "no deadline before Redis has answered once");
        // Redis read 1_000_000 before the answer arrived at replica ms 10: the offset is at
        // least 999_990, and the deadline is the send time on Redis's clock plus the timeout.
        clock.learn(1_000_000, at(10));
        assert_eq!(clock.deadline(at(20)), 999_990 + 20 + 500);
        // A slower answer is a looser bound and changes nothing; a faster one tightens it.
        clock.learn(1_000_050, at(100));
        assert_eq!(clock.deadline(at(20)), 999_990 + 20 + 500);
        clock.learn(1_000_095, at(100));
        assert_eq!(clock.deadline(at(20)), 999_995 + 20 + 500);
        // Lower by less than the timeout: could be a slow answer, kept as it is.
        clock.learn(1_000_000, at(400));
        assert_eq!(clock.deadline(at(20)), 999_995 + 20 + 500);
        // Lower by more than the timeout, which no answer waited for can be: Redis's clock
        // went back (a minute), and the estimate follows it.
        clock.learn(940_000, at(500));
        assert_eq!(clock.deadline(at(600)), 939_500 + 600 + 500);
    }
}
