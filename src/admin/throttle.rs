//! Login guessing: a failed admin token attempt (a bearer token that is none of those
//! configured, or a wrong token at the console's `POST /login`) is answered late once its
//! client has failed [`FREE_FAILURES`] times: the next failure waits [`FIRST_WAIT`], each
//! further one twice as long as the one before, up to [`MAX_WAIT`]. A client's count lasts
//! until [`WINDOW`] passes without a failure from it.
//!
//! Only failures come here: the token is checked first, so a request with a valid token is
//! never delayed or refused, and an agent failing on purpose from the same host cannot lock
//! the operator out. Clients are counted by address, loopback included, with every loopback
//! address one client (an agent on the host could otherwise pick a fresh 127.x.x.x per guess)
//! and IPv6 by its /64. Memory is bounded ([`MAX_CLIENTS`], each forgotten a minute after its
//! last failure, the quietest first when full), and so are log lines: one warning per client
//! per [`WINDOW`], with the count since the last.
//!
//! Never: checks a token (`super::access` does), or refuses a request itself.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::net::host::client_address;

/// Failures answered at once within a window.
pub(super) const FREE_FAILURES: u32 = 5;
/// The wait of the first failure past [`FREE_FAILURES`].
pub(super) const FIRST_WAIT: Duration = Duration::from_millis(250);
/// The longest wait.
pub(super) const MAX_WAIT: Duration = Duration::from_secs(5);
/// How long a client's failures count after its last one; also the least time between two
/// log lines about one client.
pub(super) const WINDOW: Duration = Duration::from_secs(60);
/// Clients counted at once.
pub(super) const MAX_CLIENTS: usize = 1024;

/// The failed attempts of every client that failed lately.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    clients: Mutex<HashMap<IpAddr, Failures>>,
}

/// One client's failures.
#[derive(Debug, Clone, Copy)]
struct Failures {
    /// Since the count last started.
    count: u32,
    /// The latest.
    last: Instant,
    /// When the last log line about this client was written.
    logged: Option<Instant>,
    /// Failures since then.
    unlogged: u32,
}

/// What one failure costs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Verdict {
    /// How long its answer waits.
    pub(super) wait: Duration,
    /// The client's failures in the current count, this one included.
    pub(super) failures: u32,
    /// When a log line is due: the failures since the last line, this one included.
    pub(super) log: Option<u32>,
}

impl Throttle {
    /// A failure from `client`: records it, logs it when a line is due, and waits what it
    /// costs before returning (the caller answers after).
    pub(super) async fn fail(&self, client: IpAddr) {
        let key = client_key(client);
        let verdict = self.record(key, Instant::now());
        if let Some(since_last_line) = verdict.log {
            warn!(
                client = %key,
                failures = verdict.failures,
                since_last_line,
                wait_ms = verdict.wait.as_millis() as u64,
                "admin API: a wrong token (bearer or console login); after {FREE_FAILURES} failures from one \
                 address each further one is answered later, up to {MAX_WAIT:?}; logged at most once a minute \
                 per address"
            );
        }
        tokio::time::sleep(verdict.wait).await;
    }

    /// Counts a failure of the client `key` at `now` and says what it costs.
    fn record(&self, key: IpAddr, now: Instant) -> Verdict {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        if !clients.contains_key(&key) && clients.len() >= MAX_CLIENTS {
            clients.retain(|_, failures| now.duration_since(failures.last) < WINDOW);
            if clients.len() >= MAX_CLIENTS
                && let Some(quietest) = clients.iter().min_by_key(|(_, f)| f.last).map(|(key, _)| *key)
            {
                clients.remove(&quietest);
            }
        }
        let fresh = Failures { count: 0, last: now, logged: None, unlogged: 0 };
        let failures = clients.entry(key).or_insert(fresh);
        if now.duration_since(failures.last) >= WINDOW {
            *failures = fresh;
        }
        failures.count = failures.count.saturating_add(1);
        failures.last = now;
        failures.unlogged += 1;
        let log = match failures.logged {
            Some(at) if now.duration_since(at) < WINDOW => None,
            _ => {
                failures.logged = Some(now);
                Some(std::mem::take(&mut failures.unlogged))
            }
        };
        Verdict { wait: wait_for(failures.count), failures: failures.count, log }
    }
}

/// The wait of a client's `n`th failure in a count.
fn wait_for(n: u32) -> Duration {
    match n.checked_sub(FREE_FAILURES + 1) {
        None => Duration::ZERO,
        // Past five doublings the cap has been reached anyway.
        Some(doublings) => (FIRST_WAIT * (1 << doublings.min(5))).min(MAX_WAIT),
    }
}

/// Who a failure is counted against: the address, every loopback address as one, IPv6 by
/// its /64.
pub(super) fn client_key(ip: IpAddr) -> IpAddr {
    match client_address(ip) {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !u128::from(u64::MAX))),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;

    const CLIENT: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 7));

    #[test]
    fn five_failures_are_free_then_each_waits_twice_as_long_up_to_five_seconds() {
        let throttle = Throttle::default();
        let start = Instant::now();
        let waits: Vec<u64> =
            (0..12).map(|i| throttle.record(CLIENT, start + Duration::from_secs(i)).wait.as_millis() as u64).collect();
        assert_eq!(waits, [0, 0, 0, 0, 0, 250, 500, 1000, 2000, 4000, 5000, 5000]);
        assert_eq!(wait_for(u32::MAX), MAX_WAIT, "no overflow");
        let other = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 8));
        assert_eq!(throttle.record(other, start + Duration::from_secs(12)).wait, Duration::ZERO, "per address");
    }

    #[test]
    fn a_quiet_minute_starts_the_count_again() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for i in 0..7 {
            throttle.record(CLIENT, start + Duration::from_secs(i));
        }
        let later = start + Duration::from_secs(6) + WINDOW;
        let verdict = throttle.record(CLIENT, later);
        assert_eq!((verdict.failures, verdict.wait), (1, Duration::ZERO));
        let almost = throttle.record(CLIENT, later + WINDOW - Duration::from_millis(1));
        assert_eq!(almost.failures, 2, "within a minute of the last failure, the count goes on");
    }

    #[test]
    fn one_log_line_per_client_per_minute_with_the_count() {
        let throttle = Throttle::default();
        let start = Instant::now();
        let logs: Vec<Option<u32>> =
            (0..30).map(|i| throttle.record(CLIENT, start + Duration::from_secs(i) * 3).log).collect();
        // Failures at 0 s, 3 s, … 87 s: a line at 0 s (1 failure) and at 60 s (20 more).
        assert_eq!(logs[0], Some(1));
        assert_eq!(logs[20], Some(20));
        assert_eq!(logs.iter().flatten().count(), 2, "{logs:?}");
    }

    #[test]
    fn loopback_is_one_client_and_ipv6_is_counted_by_its_64() {
        let key = |ip: &str| client_key(ip.parse().expect("an address"));
        for loopback in ["127.0.0.1", "127.0.0.2", "127.255.0.9", "::1", "::ffff:127.0.0.3"] {
            assert_eq!(key(loopback), key("127.0.0.1"), "{loopback}");
        }
        assert_eq!(key("2001:db8:1:2:aaaa::1"), key("2001:db8:1:2:bbbb::2"));
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        assert_eq!(key("::ffff:192.0.2.7"), CLIENT);
    }

    #[test]
    fn memory_is_bounded_and_the_quietest_client_makes_room() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for i in 0..MAX_CLIENTS as u32 {
            let ip = IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i));
            throttle.record(ip, start + Duration::from_millis(u64::from(i)));
        }
        throttle.record(CLIENT, start + Duration::from_secs(2));
        let clients = throttle.clients.lock().expect("not poisoned");
        assert_eq!(clients.len(), MAX_CLIENTS);
        assert!(!clients.contains_key(&IpAddr::V4(Ipv4Addr::new(10, 0, 0, 0))), "the quietest was forgotten");
        assert!(clients.contains_key(&CLIENT));
    }

    #[tokio::test(start_paused = true)]
    async fn a_failure_waits_its_verdict() {
        let throttle = Throttle::default();
        let start = Instant::now();
        for _ in 0..FREE_FAILURES {
            throttle.fail(CLIENT).await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO, "five failures answered at once");
        throttle.fail(CLIENT).await;
        assert_eq!(start.elapsed(), FIRST_WAIT);
    }
}
