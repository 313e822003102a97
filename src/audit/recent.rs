//! The latest decision-log lines, kept in memory for the admin API's `/decisions/recent`: a
//! bounded ring fed by the writer thread with each line as it was encoded for the file, so
//! what the API shows is byte for byte what the log holds (redaction included) and the
//! request path pays nothing for it.
//!
//! Never: encodes a record itself, or grows past its capacity.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

/// How many lines the ring keeps.
pub const RECENT_CAPACITY: usize = 1000;

/// A ring of the latest encoded records (each a JSON object and its newline).
#[derive(Debug)]
pub struct RecentDecisions {
    lines: Mutex<VecDeque<Arc<str>>>,
    capacity: usize,
}

impl RecentDecisions {
    /// An empty ring keeping at most `capacity` lines.
    pub fn new(capacity: usize) -> Self {
        RecentDecisions { lines: Mutex::new(VecDeque::with_capacity(capacity)), capacity }
    }

    /// Keeps `line`, dropping the oldest when full.
    pub(super) fn push(&self, line: &str) {
        if self.capacity == 0 {
            return;
        }
        let line = Arc::from(line.trim_end_matches('\n'));
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
}
