//! The pool's idle lists: per origin, its idle HTTP/1.1 connections (oldest to newest) and
//! its shared h2 connection; across origins, every idle connection from least to most
//! recently used, which the socket budget closes from to make room and the reaper expires.
//! Generic over the connection handles, so the unit tests use stand-ins.
//!
//! Never opens, closes or awaits a connection: what it lets go of is handed back to be
//! dropped outside the pool's lock.

use std::collections::HashMap;
use std::time::Instant;

use foldhash::fast::RandomState;

use super::Key;

/// Whether a connection handle's connection has closed.
pub(super) trait Liveness {
    fn is_closed(&self) -> bool;
}

/// What [`Idle::take`] found.
pub(super) enum Found<C1, C2> {
    H1(C1),
    H2 { id: u64, sender: C2 },
}

/// A connection [`Idle`] let go of, to be dropped outside the lock.
pub(super) enum Closed<C1, C2> {
    H1(C1),
    H2(C2),
}

impl<C1: Liveness, C2: Liveness> Closed<C1, C2> {
    pub(super) fn is_closed(&self) -> bool {
        match self {
            Closed::H1(conn) => conn.is_closed(),
            Closed::H2(conn) => conn.is_closed(),
        }
    }
}

/// The idle lists: per origin, its idle HTTP/1.1 connections (oldest to newest) and its
/// shared h2 connection; across origins, every idle connection from least to most recently
/// used. Nodes live in a slab and are linked both ways in both lists, so taking, giving
/// back, capping per origin and closing the least recently used are each a few index
/// updates, with no allocation once the slab has grown. Generic over the connection handles
/// so the unit tests can use stand-ins.
pub(super) struct Idle<C1, C2> {
    /// foldhash under a per-process random seed, as for limit keys (`crate::limits`): the
    /// map is looked up a few times per request, and SipHash over the authority, byte by
    /// byte, was the pool's largest cost.
    origins: HashMap<Key, Origin<C2>, RandomState>,
    nodes: Vec<Option<Node<C1>>>,
    free: Vec<usize>,
    oldest: Option<usize>,
    newest: Option<usize>,
    len: usize,
    next_id: u64,
}

impl<C1, C2> Default for Idle<C1, C2> {
    fn default() -> Self {
        Idle {
            origins: HashMap::with_hasher(RandomState::default()),
            nodes: Vec::new(),
            free: Vec::new(),
            oldest: None,
            newest: None,
            len: 0,
            next_id: 0,
        }
    }
}

/// One origin's entry; removed once it has neither idle nor shared connections.
struct Origin<C2> {
    oldest: Option<usize>,
    newest: Option<usize>,
    h1: usize,
    h2: Option<SharedH2<C2>>,
}

impl<C2> Default for Origin<C2> {
    fn default() -> Self {
        Origin { oldest: None, newest: None, h1: 0, h2: None }
    }
}

impl<C2> Origin<C2> {
    fn is_empty(&self) -> bool {
        self.h1 == 0 && self.h2.is_none()
    }
}

/// An origin's h2 connection, shared by its requests in flight; idle (in the list, at
/// `idle`) when none is.
struct SharedH2<C2> {
    id: u64,
    sender: C2,
    in_flight: usize,
    idle: Option<usize>,
}

/// An idle connection: an HTTP/1.1 sender, or the mark of its origin's idle h2 connection.
enum IdleConn<C1> {
    H1(C1),
    H2,
}

struct Node<C1> {
    key: Key,
    conn: IdleConn<C1>,
    since: Instant,
    /// The list across origins.
    older: Option<usize>,
    newer: Option<usize>,
    /// The origin's own list (HTTP/1.1 only).
    origin_older: Option<usize>,
    origin_newer: Option<usize>,
}

impl<C1: Liveness, C2: Liveness + Clone> Idle<C1, C2> {
    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn node(&mut self, slot: usize) -> &mut Node<C1> {
        self.nodes[slot].as_mut().expect("a linked slot holds a node")
    }

    /// The shared h2 connection of `key` (one more request in flight), else its newest idle
    /// HTTP/1.1 connection; closed ones are dropped on the way.
    pub(super) fn take(&mut self, key: &Key) -> Option<Found<C1, C2>> {
        loop {
            let origin = self.origins.get_mut(key)?;
            if let Some(h2) = &mut origin.h2 {
                if !h2.sender.is_closed() {
                    h2.in_flight += 1;
                    let (id, sender, idle) = (h2.id, h2.sender.clone(), h2.idle.take());
                    if let Some(slot) = idle {
                        self.unlink(slot);
                    }
                    return Some(Found::H2 { id, sender });
                }
                let idle = origin.h2.take().and_then(|h2| h2.idle);
                if let Some(slot) = idle {
                    self.unlink(slot);
                }
                self.prune(key);
                continue;
            }
            let slot = origin.newest?;
            match self.unlink(slot).conn {
                IdleConn::H1(conn) if !conn.is_closed() => return Some(Found::H1(conn)),
                IdleConn::H1(_) | IdleConn::H2 => {}
            }
        }
    }

    /// Adds an idle HTTP/1.1 connection to `key`, newest; returns the connection closed to
    /// keep the origin within `max_per_host` (its oldest), or `conn` itself when closed.
    pub(super) fn put_h1(&mut self, key: &Key, conn: C1, max_per_host: usize, now: Instant) -> Option<C1> {
        if conn.is_closed() || max_per_host == 0 {
            return Some(conn);
        }
        let origin = self.origins.entry(key.clone()).or_default();
        let evicted = match origin.oldest {
            Some(oldest) if origin.h1 >= max_per_host => match self.unlink(oldest).conn {
                IdleConn::H1(conn) => Some(conn),
                IdleConn::H2 => None,
            },
            _ => None,
        };
        let slot = self.insert(Node {
            key: key.clone(),
            conn: IdleConn::H1(conn),
            since: now,
            older: None,
            newer: None,
            origin_older: None,
            origin_newer: None,
        });
        let origin = self.origins.entry(key.clone()).or_default();
        let previous = origin.newest.replace(slot);
        if previous.is_none() {
            origin.oldest = Some(slot);
        }
        origin.h1 += 1;
        if let Some(previous) = previous {
            self.node(previous).origin_newer = Some(slot);
        }
        self.node(slot).origin_older = previous;
        evicted
    }

    /// Makes `sender` the shared h2 connection of `key`, one request in flight, unless a
    /// live one is there; its id.
    pub(super) fn share_h2(&mut self, key: &Key, sender: &C2) -> Option<u64> {
        let origin = self.origins.entry(key.clone()).or_default();
        if origin.h2.as_ref().is_some_and(|h2| !h2.sender.is_closed()) {
            return None;
        }
        let dead_idle = origin.h2.take().and_then(|h2| h2.idle);
        let id = self.next_id;
        self.next_id += 1;
        let origin = self.origins.entry(key.clone()).or_default();
        origin.h2 = Some(SharedH2 { id, sender: sender.clone(), in_flight: 1, idle: None });
        if let Some(slot) = dead_idle {
            self.unlink(slot);
        }
        Some(id)
    }

    /// One request fewer on `key`'s shared h2 connection `id`; idle from `now` when none is
    /// left, or let go of then when `max_per_host` is 0. With `discard` the connection is let
    /// go of at once. What is let go of is returned, to be dropped.
    pub(super) fn finish_h2(
        &mut self,
        key: &Key,
        id: u64,
        discard: bool,
        max_per_host: usize,
        now: Instant,
    ) -> Option<C2> {
        let origin = self.origins.get_mut(key)?;
        let h2 = origin.h2.as_mut().filter(|h2| h2.id == id)?;
        h2.in_flight = h2.in_flight.saturating_sub(1);
        if discard || (h2.in_flight == 0 && max_per_host == 0) {
            let h2 = origin.h2.take()?;
            if let Some(slot) = h2.idle {
                self.unlink(slot);
            }
            self.prune(key);
            return Some(h2.sender);
        }
        if h2.in_flight > 0 || h2.idle.is_some() {
            return None;
        }
        let slot = self.insert(Node {
            key: key.clone(),
            conn: IdleConn::H2,
            since: now,
            older: None,
            newer: None,
            origin_older: None,
            origin_newer: None,
        });
        if let Some(h2) = self.origins.get_mut(key).and_then(|origin| origin.h2.as_mut()) {
            h2.idle = Some(slot);
        }
        None
    }

    /// When the least recently used idle connection went idle.
    pub(super) fn oldest_since(&self) -> Option<Instant> {
        let slot = self.oldest?;
        self.nodes[slot].as_ref().map(|node| node.since)
    }

    /// Lets go of the least recently used idle connection.
    pub(super) fn close_oldest(&mut self) -> Option<Closed<C1, C2>> {
        let slot = self.oldest?;
        let node = self.unlink(slot);
        match node.conn {
            IdleConn::H1(conn) => Some(Closed::H1(conn)),
            IdleConn::H2 => {
                let h2 = self.origins.get_mut(&node.key).and_then(|origin| origin.h2.take());
                self.prune(&node.key);
                h2.map(|h2| Closed::H2(h2.sender))
            }
        }
    }

    /// Puts `node` in a free slot, newest in the list across origins.
    fn insert(&mut self, mut node: Node<C1>) -> usize {
        node.older = self.newest;
        node.newer = None;
        let slot = match self.free.pop() {
            Some(slot) => {
                self.nodes[slot] = Some(node);
                slot
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        match self.newest.replace(slot) {
            Some(previous) => self.node(previous).newer = Some(slot),
            None => self.oldest = Some(slot),
        }
        self.len += 1;
        slot
    }

    /// Takes the node at `slot` out of both lists and frees its slot; an origin left with
    /// nothing is removed, and an h2 mark clears its origin's `idle`.
    fn unlink(&mut self, slot: usize) -> Node<C1> {
        let node = self.nodes[slot].take().expect("a linked slot holds a node");
        self.free.push(slot);
        self.len -= 1;
        match node.older {
            Some(older) => self.node(older).newer = node.newer,
            None => self.oldest = node.newer,
        }
        match node.newer {
            Some(newer) => self.node(newer).older = node.older,
            None => self.newest = node.older,
        }
        if let IdleConn::H1(_) = node.conn {
            if let Some(older) = node.origin_older {
                self.node(older).origin_newer = node.origin_newer;
            }
            if let Some(newer) = node.origin_newer {
                self.node(newer).origin_older = node.origin_older;
            }
            if let Some(origin) = self.origins.get_mut(&node.key) {
                if node.origin_older.is_none() {
                    origin.oldest = node.origin_newer;
                }
                if node.origin_newer.is_none() {
                    origin.newest = node.origin_older;
                }
                origin.h1 -= 1;
            }
        } else if let Some(h2) = self.origins.get_mut(&node.key).and_then(|origin| origin.h2.as_mut()) {
            h2.idle = None;
        }
        self.prune(&node.key);
        node
    }

    /// Removes `key`'s entry when it holds nothing.
    fn prune(&mut self, key: &Key) {
        if self.origins.get(key).is_some_and(Origin::is_empty) {
            self.origins.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use http::uri::{Authority, Scheme};

    use super::*;

    /// A connection handle whose closing the test controls.
    #[derive(Clone, Debug)]
    struct Fake {
        name: &'static str,
        closed: Arc<AtomicBool>,
    }

    impl Fake {
        fn new(name: &'static str) -> Self {
            Fake { name, closed: Arc::new(AtomicBool::new(false)) }
        }

        fn close(&self) {
            self.closed.store(true, Ordering::SeqCst);
        }
    }

    impl Liveness for Fake {
        fn is_closed(&self) -> bool {
            self.closed.load(Ordering::SeqCst)
        }
    }

    fn key(authority: &'static str) -> Key {
        Key { scheme: Scheme::HTTP, authority: Authority::from_static(authority) }
    }

    fn name(found: Option<Found<Fake, Fake>>) -> Option<&'static str> {
        found.map(|found| match found {
            Found::H1(conn) | Found::H2 { sender: conn, .. } => conn.name,
        })
    }

    fn closed_name(closed: Option<Closed<Fake, Fake>>) -> Option<&'static str> {
        closed.map(|closed| match closed {
            Closed::H1(conn) | Closed::H2(conn) => conn.name,
        })
    }

    /// Every link agrees with the counts: both lists, walked both ways.
    fn check(idle: &Idle<Fake, Fake>) {
        let mut forward = Vec::new();
        let mut at = idle.oldest;
        while let Some(slot) = at {
            forward.push(slot);
            at = idle.nodes[slot].as_ref().expect("linked").newer;
        }
        let mut backward = Vec::new();
        let mut at = idle.newest;
        while let Some(slot) = at {
            backward.push(slot);
            at = idle.nodes[slot].as_ref().expect("linked").older;
        }
        backward.reverse();
        assert_eq!(forward, backward);
        assert_eq!(forward.len(), idle.len);
        let h1: usize = idle.origins.values().map(|origin| origin.h1).sum();
        let h2 = idle.origins.values().filter(|origin| origin.h2.as_ref().is_some_and(|h2| h2.idle.is_some())).count();
        assert_eq!(h1 + h2, idle.len);
        assert!(idle.origins.values().all(|origin| !origin.is_empty()), "no empty origin is kept");
    }

    #[test]
    fn the_newest_idle_connection_of_an_origin_is_reused_first() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        assert!(idle.put_h1(&key("a.test"), Fake::new("a1"), 4, now).is_none());
        assert!(idle.put_h1(&key("b.test"), Fake::new("b1"), 4, now).is_none());
        assert!(idle.put_h1(&key("a.test"), Fake::new("a2"), 4, now).is_none());
        check(&idle);
        assert_eq!(name(idle.take(&key("a.test"))), Some("a2"));
        assert_eq!(name(idle.take(&key("a.test"))), Some("a1"));
        assert_eq!(name(idle.take(&key("a.test"))), None);
        check(&idle);
        assert_eq!(idle.len(), 1);
    }

    #[test]
    fn an_origin_keeps_at_most_max_idle_per_host_and_loses_its_oldest() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        for conn in ["a1", "a2"] {
            assert!(idle.put_h1(&key("a.test"), Fake::new(conn), 2, now).is_none());
        }
        let evicted = idle.put_h1(&key("a.test"), Fake::new("a3"), 2, now);
        assert_eq!(evicted.map(|conn| conn.name), Some("a1"));
        check(&idle);
        assert_eq!(idle.len(), 2);
        assert_eq!(idle.put_h1(&key("b.test"), Fake::new("b1"), 0, now).map(|conn| conn.name), Some("b1"));
    }

    #[test]
    fn the_least_recently_used_across_origins_is_closed_first() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        idle.put_h1(&key("a.test"), Fake::new("a1"), 4, now);
        idle.put_h1(&key("b.test"), Fake::new("b1"), 4, now);
        idle.put_h1(&key("a.test"), Fake::new("a2"), 4, now);
        assert_eq!(closed_name(idle.close_oldest()), Some("a1"));
        check(&idle);
        assert_eq!(closed_name(idle.close_oldest()), Some("b1"));
        assert!(!idle.origins.contains_key(&key("b.test")), "an origin with nothing left is removed");
        assert_eq!(closed_name(idle.close_oldest()), Some("a2"));
        assert!(idle.close_oldest().is_none());
        assert!(idle.origins.is_empty());
        check(&idle);
    }

    #[test]
    fn closed_connections_are_never_handed_out() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        let (old, dead) = (Fake::new("old"), Fake::new("dead"));
        idle.put_h1(&key("a.test"), old, 4, now);
        idle.put_h1(&key("a.test"), dead.clone(), 4, now);
        dead.close();
        assert_eq!(name(idle.take(&key("a.test"))), Some("old"));
        check(&idle);
        let closing = Fake::new("closing");
        closing.close();
        assert_eq!(idle.put_h1(&key("a.test"), closing, 4, now).map(|conn| conn.name), Some("closing"));
        assert!(idle.is_empty());
    }

    #[test]
    fn a_shared_h2_connection_is_idle_only_with_nothing_in_flight() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        let h2 = Fake::new("h2");
        let id = idle.share_h2(&key("a.test"), &h2).expect("the origin's first h2 connection");
        assert!(idle.share_h2(&key("a.test"), &Fake::new("other")).is_none(), "one shared h2 per origin");
        assert!(matches!(idle.take(&key("a.test")), Some(Found::H2 { id: taken, .. }) if taken == id));
        assert!(idle.is_empty(), "two requests in flight");
        assert!(idle.finish_h2(&key("a.test"), id, false, 4, now).is_none());
        assert!(idle.is_empty(), "one request still in flight");
        assert!(idle.finish_h2(&key("a.test"), id, false, 4, now).is_none());
        assert_eq!(idle.len(), 1, "idle once nothing is in flight");
        check(&idle);
        assert!(matches!(idle.take(&key("a.test")), Some(Found::H2 { .. })));
        assert!(idle.is_empty(), "busy again");
        idle.finish_h2(&key("a.test"), id, false, 4, now);
        assert_eq!(closed_name(idle.close_oldest()), Some("h2"));
        assert!(idle.origins.is_empty());
        assert!(
            idle.finish_h2(&key("a.test"), id, false, 4, now).is_none(),
            "a lease of a closed connection is a no-op"
        );
        check(&idle);
    }

    #[test]
    fn a_closed_or_discarded_h2_connection_is_replaced() {
        let mut idle = Idle::<Fake, Fake>::default();
        let now = Instant::now();
        let first = Fake::new("first");
        let id = idle.share_h2(&key("a.test"), &first).expect("first");
        idle.finish_h2(&key("a.test"), id, false, 4, now);
        first.close();
        assert!(idle.take(&key("a.test")).is_none(), "a closed h2 connection is not handed out");
        check(&idle);
        let second = Fake::new("second");
        let id = idle.share_h2(&key("a.test"), &second).expect("replaces the closed one");
        assert_eq!(idle.finish_h2(&key("a.test"), id, true, 4, now).map(|conn| conn.name), Some("second"));
        assert!(idle.origins.is_empty());
        check(&idle);
        // With no idle connection allowed, the h2 connection goes once its last request ends.
        let third = Fake::new("third");
        let id = idle.share_h2(&key("a.test"), &third).expect("the origin has none");
        assert!(matches!(idle.take(&key("a.test")), Some(Found::H2 { .. })));
        assert!(idle.finish_h2(&key("a.test"), id, false, 0, now).is_none(), "one request still in flight");
        assert_eq!(idle.finish_h2(&key("a.test"), id, false, 0, now).map(|conn| conn.name), Some("third"));
        assert!(idle.is_empty() && idle.origins.is_empty());
    }

    #[test]
    fn the_oldest_idle_connection_says_when_it_is_due() {
        let mut idle = Idle::<Fake, Fake>::default();
        let early = Instant::now();
        let later = early + Duration::from_secs(1);
        idle.put_h1(&key("a.test"), Fake::new("a1"), 4, early);
        idle.put_h1(&key("a.test"), Fake::new("a2"), 4, later);
        assert_eq!(idle.oldest_since(), Some(early));
        idle.close_oldest();
        assert_eq!(idle.oldest_since(), Some(later));
    }
}
