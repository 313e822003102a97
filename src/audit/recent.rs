//! The latest decision-log lines, kept in memory for the admin API's `/decisions/recent`: a
//! bounded ring fed by the writer of each batch with each line as it was encoded for the file, so
//! what the API shows is byte for byte what the log holds (redaction included) and the
//! request path pays nothing for it. The same lines go out live to the console's
//! `/decisions/stream` subscribers through a bounded broadcast channel.
//!
//! Never: encodes a record itself, grows past its capacity, or waits for a subscriber: one
//! that falls more than [`LIVE_CAPACITY`] lines behind loses the oldest and is told how many.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::broadcast;

/// How many lines the ring keeps.
pub const RECENT_CAPACITY: usize = 1000;

/// How many lines a live subscriber may fall behind before it loses the oldest.
pub const LIVE_CAPACITY: usize = 256;

/// A ring of the latest encoded records (each a JSON object and its newline).
#[derive(Debug)]
pub struct RecentDecisions {
    lines: Mutex<VecDeque<Arc<str>>>,
    capacity: usize,
    live: broadcast::Sender<Arc<str>>,
}

impl RecentDecisions {
    /// An empty ring keeping at most `capacity` lines.
    pub fn new(capacity: usize) -> Self {
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        RecentDecisions { lines: Mutex::new(VecDeque::with_capacity(capacity)), capacity, live }
    }

    /// Keeps `line`, dropping the oldest when full, and hands it to the live subscribers.
    pub(super) fn push(&self, line: &str) {
        let line: Arc<str> = Arc::from(line.trim_end_matches('\n'));
        // Never blocks: a full channel overwrites the oldest line; no subscriber is no error.
        let _ = self.live.send(Arc::clone(&line));
        if self.capacity == 0 {
            return;
        }
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.len() == self.capacity {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    /// Up to `n` of the latest lines (without their newline), newest first.
    pub fn latest(&self, n: usize) -> Vec<Arc<str>> {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        lines.iter().rev().take(n).cloned().collect()
    }

    /// How many lines the ring keeps at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Every line pushed from now on. A receiver that falls [`LIVE_CAPACITY`] lines behind
    /// gets `RecvError::Lagged` with the count it lost, then the newest lines.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<str>> {
        self.live.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_lines_newest_first() {
        let ring = RecentDecisions::new(3);
        for i in 0..5 {
            ring.push(&format!("{{\"n\":{i}}}\n"));
        }
        let latest: Vec<String> = ring.latest(10).iter().map(|l| l.to_string()).collect();
        assert_eq!(latest, ["{\"n\":4}", "{\"n\":3}", "{\"n\":2}"]);
        assert_eq!(ring.latest(1).len(), 1);
        assert!(ring.latest(0).is_empty());
    }

    #[test]
    fn a_slow_subscriber_loses_the_oldest_lines_and_is_told_how_many() {
        let ring = RecentDecisions::new(3);
        let mut live = ring.subscribe();
        for i in 0..LIVE_CAPACITY + 5 {
            ring.push(&format!("{{\"n\":{i}}}\n"));
        }
        assert_eq!(live.try_recv(), Err(broadcast::error::TryRecvError::Lagged(5)));
        assert_eq!(live.try_recv().as_deref(), Ok("{\"n\":5}"));
    }
}
