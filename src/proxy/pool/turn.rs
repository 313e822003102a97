//! Turns for policy fetches ([`Turns`]): the fetches of one origin's policy files take the
//! origin's fetch connection one after another instead of each opening its own, so loading
//! an unseen origin opens one connection (one TLS handshake) where it opened four, and that
//! connection is then pooled for the agent's own request (docs/upstream.md, "Policy
//! fetches"). A fetch holds its turn from taking a connection until its response body ends
//! (the turn rides in the body's lease); over h2 the turn is let go at once, since the next
//! fetch multiplexes on the same connection.
//!
//! Never opens, closes or picks a connection: it only says whose go it is. A fetch that
//! waits [`FETCH_TURN_WAIT`] without its turn goes ahead on a connection of its own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use foldhash::fast::RandomState;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Key;

/// How long a policy fetch waits for the fetch before it on the same origin to give the
/// connection back. A slow file then costs the next one at most this, not its whole
/// `[cache] fetch_timeout`: after it the fetch opens a connection of its own, closed when
/// it ends (the pool keeps one fetch connection per origin, not one per file).
pub(super) const FETCH_TURN_WAIT: Duration = Duration::from_secs(2);

/// Per pool key, whose go it is. An origin has an entry only while a fetch holds its turn or
/// waits for it.
#[derive(Default)]
pub(super) struct Turns {
    lanes: Arc<Mutex<Lanes>>,
}

type Lanes = HashMap<Key, Arc<Semaphore>, RandomState>;

/// A fetch's turn on an origin: the next fetch to the origin waits until this is dropped.
pub(crate) struct Turn {
    permit: Option<OwnedSemaphorePermit>,
    _entry: Entry,
}

/// A hold on an origin's entry: when the last hold goes, so does the entry.
struct Entry {
    lanes: Arc<Mutex<Lanes>>,
    key: Key,
}

impl Turns {
    /// `key`'s turn, once the fetch before has let it go; `None` after `wait` without it.
    pub(super) async fn take(&self, key: &Key, wait: Duration) -> Option<Turn> {
        let lane = Arc::clone(lock(&self.lanes).entry(key.clone()).or_insert_with(|| Arc::new(Semaphore::new(1))));
        // From here the entry is tidied whatever happens, this future being dropped included.
        let entry = Entry { lanes: Arc::clone(&self.lanes), key: key.clone() };
        let permit = match Arc::clone(&lane).try_acquire_owned() {
            Ok(permit) => Some(permit),
            Err(_) => tokio::time::timeout(wait, Arc::clone(&lane).acquire_owned()).await.ok().and_then(Result::ok),
        };
        drop(lane);
        Some(Turn { permit: Some(permit?), _entry: entry })
    }

    /// How many origins have a fetch holding or waiting for a turn (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.lanes).len()
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        // The permit first, so the entry sees whether anyone else still holds the lane.
        drop(self.permit.take());
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut lanes = lock(&self.lanes);
        // Only the map's own reference left: nobody holds the turn or waits for it.
        if lanes.get(&self.key).is_some_and(|lane| Arc::strong_count(lane) == 1) {
            lanes.remove(&self.key);
        }
    }
}

fn lock(lanes: &Mutex<Lanes>) -> MutexGuard<'_, Lanes> {
    lanes.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(uri: &str) -> Key {
        Key::of(&uri.parse().expect("uri")).expect("key")
    }

    #[tokio::test(start_paused = true)]
    async fn fetches_to_one_origin_go_in_turn_and_other_origins_do_not_wait() {
        let turns = Turns::default();
        let a = key("https://a.test/robots.txt");
        let first = turns.take(&a, FETCH_TURN_WAIT).await.expect("the first fetch has its turn at once");
        let other = turns.take(&key("https://b.test/robots.txt"), Duration::ZERO).await;
        assert!(other.is_some(), "another origin has a turn of its own");

        let second = tokio::spawn({
            let turns_lanes = Arc::clone(&turns.lanes);
            let a = a.clone();
            async move { Turns { lanes: turns_lanes }.take(&a, FETCH_TURN_WAIT).await.is_some() }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!second.is_finished(), "the second fetch waits while the first holds the turn");
        drop(first);
        assert!(second.await.expect("task"), "and has its turn once the first lets it go");
    }

    #[tokio::test(start_paused = true)]
    async fn a_fetch_that_waits_too_long_goes_without_and_no_entry_is_left_behind() {
        let turns = Turns::default();
        let a = key("http://a.test/robots.txt");
        let held = turns.take(&a, FETCH_TURN_WAIT).await.expect("turn");
        assert!(turns.take(&a, FETCH_TURN_WAIT).await.is_none(), "no turn after the wait");
        // A fetch dropped while it waits (its own timeout) leaves nothing either.
        let waiting = turns.take(&a, FETCH_TURN_WAIT);
        drop(tokio::time::timeout(Duration::from_millis(10), waiting).await);
        assert_eq!(turns.len(), 1, "only the held turn's origin");
        drop(held);
        assert_eq!(turns.len(), 0, "no entry once nobody holds or waits");
    }
}
