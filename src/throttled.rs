//! A count of events that says when to log them: at most once a second, with how many
//! happened since the last line, so a flood (refused connections, failed accepts) cannot
//! flood the log too. Used by the proxy port's and the admin port's connection caps.
//!
//! Never: writes a log line itself; the caller does, with its own fields.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The least time between two log lines about the same kind of event.
const LOG_INTERVAL: Duration = Duration::from_secs(1);

/// A count of events that says when to log them: at most once per [`LOG_INTERVAL`], with how
/// many happened since the last line.
#[derive(Default)]
pub(crate) struct Throttled {
    /// Events since start.
    pub(crate) total: AtomicU64,
    /// When a line was last due, and the total then.
    last_log: Mutex<Option<(Instant, u64)>>,
}

/// What a due log line reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counts {
    /// Events since the last line, this one included (the others were not logged).
    pub(crate) since_last_log: u64,
    /// Events since start.
    pub(crate) total: u64,
}

impl Throttled {
    /// Counts one event; returns the counts when a log line is due, `None` when the last line
    /// was less than a second ago.
    pub(crate) fn count(&self) -> Option<Counts> {
        let total = self.total.fetch_add(1, Ordering::Relaxed) + 1;
        let mut last = self.last_log.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if last.is_some_and(|(at, _)| now.duration_since(at) < LOG_INTERVAL) {
            return None;
        }
        let since_last_log = total - last.map_or(0, |(_, count)| count);
        *last = Some((now, total));
        Some(Counts { since_last_log, total })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_is_logged_once_with_its_count() {
        let errors = Throttled::default();
        assert_eq!(errors.count(), Some(Counts { since_last_log: 1, total: 1 }));
        for _ in 0..99 {
            assert_eq!(errors.count(), None, "within the second after a line");
        }
        // The next line, a second later, reports the 99 unlogged events and itself.
        let mut last = errors.last_log.lock().expect("not poisoned");
        *last = last.map(|(at, total)| (at - LOG_INTERVAL, total));
        drop(last);
        assert_eq!(errors.count(), Some(Counts { since_last_log: 100, total: 101 }));
    }
}
