//! The latest decision-log lines, kept in memory for the admin API's `/decisions/recent`: a
//! bounded ring fed by the writer of each batch with each line as it was encoded for the file, so
//! what the API shows is byte for byte what the log holds (redaction included) and the
//! request path pays nothing for it. The same lines go out live to the console's
//! `/decisions/stream` subscribers through a bounded broadcast channel.
//!
//! The ring keeps its lines' bytes in one buffer it reuses (a line is copied in, the oldest
//! dropped from the front), so keeping a line allocates nothing once the buffer has grown to
//! the lines it holds; a line is made a shared string only for a reader (`latest`) or while
//! someone is subscribed.
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
    lines: Mutex<Lines>,
    capacity: usize,
    live: broadcast::Sender<Arc<str>>,
}

/// The lines kept, oldest first: their bytes one after another (without newlines), and the
/// length of each.
#[derive(Debug, Default)]
struct Lines {
    bytes: VecDeque<u8>,
    lengths: VecDeque<usize>,
}

impl RecentDecisions {
    /// An empty ring keeping at most `capacity` lines.
    pub fn new(capacity: usize) -> Self {
        let (live, _) = broadcast::channel(LIVE_CAPACITY);
        let lines = Lines { bytes: VecDeque::new(), lengths: VecDeque::with_capacity(capacity) };
        RecentDecisions { lines: Mutex::new(lines), capacity, live }
    }

    /// Keeps `line`, dropping the oldest when full, and hands it to the live subscribers.
    pub(super) fn push(&self, line: &str) {
        let line = line.trim_end_matches('\n');
        if self.live.receiver_count() > 0 {
            // Never blocks: a full channel overwrites the oldest line.
            let _ = self.live.send(Arc::from(line));
        }
        if self.capacity == 0 {
            return;
        }
        let mut lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.lengths.len() == self.capacity {
            let oldest = lines.lengths.pop_front().unwrap_or_default();
            lines.bytes.drain(..oldest);
        }
        lines.bytes.extend(line.as_bytes());
        lines.lengths.push_back(line.len());
    }

    /// Up to `n` of the latest lines (without their newline), newest first.
    pub fn latest(&self, n: usize) -> Vec<Arc<str>> {
        let lines = self.lines.lock().unwrap_or_else(PoisonError::into_inner);
        let mut end = lines.bytes.len();
        let mut latest = Vec::with_capacity(n.min(lines.lengths.len()));
        for &length in lines.lengths.iter().rev().take(n) {
            let bytes: Vec<u8> = lines.bytes.range(end - length..end).copied().collect();
            // Each line went in as a `str`, whole: its bytes are UTF-8.
            latest.push(Arc::from(String::from_utf8_lossy(&bytes)));
            end -= length;
        }
        latest
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

    #[test]
    fn lines_of_any_length_come_back_byte_for_byte_after_the_oldest_went() {
        let ring = RecentDecisions::new(4);
        let lines: Vec<String> =
            (0..11).map(|i| format!("{{\"n\":{i},\"x\":\"{}\"}}", "é✓".repeat(i * 7 % 5))).collect();
        for line in &lines {
            ring.push(&format!("{line}\n"));
        }
        let latest: Vec<String> = ring.latest(10).iter().map(|l| l.to_string()).collect();
        let expected: Vec<&String> = lines.iter().rev().take(4).collect();
        assert_eq!(latest.iter().collect::<Vec<_>>(), expected);
        let kept: usize = lines.iter().rev().take(4).map(String::len).sum();
        assert_eq!(ring.lines.lock().expect("not poisoned").bytes.len(), kept, "only the kept lines' bytes");
        // A subscriber gets the lines pushed after it subscribed, and only those.
        let mut live = ring.subscribe();
        ring.push("{\"n\":11}\n");
        assert_eq!(live.try_recv().as_deref(), Ok("{\"n\":11}"));
        assert!(live.try_recv().is_err());
        let none = RecentDecisions::new(0);
        none.push("{}\n");
        assert!(none.latest(1).is_empty());
    }
}
