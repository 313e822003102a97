//! Connection caps on the admin port: at most [`MAX_CONNECTIONS`] open at once, of which at
//! most [`UNAUTHENTICATED_SHARE`] have not yet carried a valid token, and at most
//! [`PER_CLIENT`] of those from one client (every loopback address one client, IPv6 by its
//! /64, as the login throttle counts them). A connection becomes authenticated when one of
//! its requests names a configured token (bearer or console session); it then counts only
//! against the total.
//!
//! A new connection past an unauthenticated share is not refused: the oldest unauthenticated
//! connection of the same client (or, past the share of all, of any client) is closed to
//! make room, once it has been open [`GRACE`], time enough to have sent a request head; until
//! then the new connection waits, and the listener accepts no other meanwhile (later ones
//! wait in the kernel's queue, in order). So one client holding many slow sockets (never
//! finishing a request head) only closes its own, at most [`PER_CLIENT`] per [`GRACE`], and
//! the operator's connection, whose first request carries the token at once, is served in
//! its turn and then never closed to make room. When all [`MAX_CONNECTIONS`] places are
//! authenticated, a new connection waits for one to close. Closures are logged at most once
//! a second, with their count.
//!
//! Never: accepts, reads or answers a connection (`super::server`), or checks a token
//! (`super::access`).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;
use tracing::warn;

use super::throttle::client_key;
use crate::throttled::Throttled;

/// Admin connections open at once. The API is for a handful of operators and one scraper.
pub(super) const MAX_CONNECTIONS: usize = 64;
/// Connections without a valid token yet, of all clients; the rest of [`MAX_CONNECTIONS`]
/// is kept for authenticated ones.
pub(super) const UNAUTHENTICATED_SHARE: usize = 48;
/// Connections without a valid token yet, of one client.
pub(super) const PER_CLIENT: usize = 16;
/// How long a connection is open before it may be closed to make room: ample for a client
/// that sends its request at once, short beside the 10 s a request head may take.
pub(super) const GRACE: Duration = Duration::from_millis(250);

/// The admin port's open connections, oldest first.
#[derive(Default)]
pub(super) struct Admission {
    open: Mutex<Open>,
    /// A place came free.
    freed: Notify,
    /// Connections closed to make room.
    closed: Throttled,
}

#[derive(Default)]
struct Open {
    /// Ids are given in order of arrival, so the first entry is the oldest.
    connections: BTreeMap<u64, Connection>,
    next_id: u64,
}

struct Connection {
    client: IpAddr,
    since: Instant,
    authenticated: bool,
    /// Closes the connection when it is pushed out.
    close: oneshot::Sender<()>,
}

/// A connection's place; dropping it frees the place.
pub(super) struct Ticket {
    admission: Arc<Admission>,
    id: u64,
}

/// What a new connection from one client gets now.
#[derive(Debug, PartialEq, Eq)]
enum Room {
    /// A place, free or made by pushing out this connection.
    Now(Option<u64>),
    /// Wait: until this instant (the oldest in the way is old enough then), or a close.
    Later(Option<Instant>),
}

impl Open {
    fn room(&self, key: IpAddr, now: Instant) -> Room {
        let unauthenticated = || self.connections.iter().filter(|(_, c)| !c.authenticated);
        let in_the_way = if unauthenticated().filter(|(_, c)| c.client == key).count() >= PER_CLIENT {
            unauthenticated().find(|(_, c)| c.client == key)
        } else if unauthenticated().count() >= UNAUTHENTICATED_SHARE || self.connections.len() >= MAX_CONNECTIONS {
            unauthenticated().next()
        } else {
            return Room::Now(None);
        };
        match in_the_way {
            Some((id, c)) if now.duration_since(c.since) >= GRACE => Room::Now(Some(*id)),
            Some((_, c)) => Room::Later(Some(c.since + GRACE)),
            None => Room::Later(None),
        }
    }
}

impl Admission {
    /// Takes a place for a connection from `client`, waiting while the connections in the
    /// way are younger than [`GRACE`] (or all authenticated) and closing the oldest one that
    /// stands in the way; the receiver completes when this connection is itself pushed out.
    pub(super) async fn admit(self: &Arc<Self>, client: IpAddr) -> (Ticket, oneshot::Receiver<()>) {
        let key = client_key(client);
        loop {
            let freed = self.freed.notified();
            let now = Instant::now();
            let wait = {
                let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
                match open.room(key, now) {
                    Room::Now(victim) => {
                        let pushed_out = victim.and_then(|id| open.connections.remove(&id));
                        let id = open.next_id;
                        open.next_id += 1;
                        let (close, closed) = oneshot::channel();
                        open.connections
                            .insert(id, Connection { client: key, since: now, authenticated: false, close });
                        drop(open);
                        if let Some(old) = pushed_out {
                            // The receiver is gone when that connection has just ended by itself.
                            let _ = old.close.send(());
                            self.note(client);
                        }
                        return (Ticket { admission: Arc::clone(self), id }, closed);
                    }
                    Room::Later(until) => until,
                }
            };
            match wait {
                Some(until) => {
                    tokio::select! {
                        () = freed => {}
                        () = tokio::time::sleep_until(until) => {}
                    }
                }
                None => freed.await,
            }
        }
    }

    fn note(&self, client: IpAddr) {
        if let Some(counts) = self.closed.count() {
            warn!(%client, max_connections = MAX_CONNECTIONS, unauthenticated_share = UNAUTHENTICATED_SHARE,
                per_client = PER_CLIENT, closed_since_last_log = counts.since_last_log,
                closed_total = counts.total,
                "admin connections without a token at their cap; closing the oldest to make room");
        }
    }
}

impl Ticket {
    /// A request on this connection carried a valid token: it is never pushed out.
    pub(super) fn authenticated(&self) {
        let mut open = self.admission.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(connection) = open.connections.get_mut(&self.id) {
            connection.authenticated = true;
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.open.lock().unwrap_or_else(PoisonError::into_inner).connections.remove(&self.id);
        self.admission.freed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(n: u8) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, n))
    }

    #[tokio::test(start_paused = true)]
    async fn a_clients_slow_sockets_push_out_its_own_oldest_after_the_grace_and_never_an_authenticated_one() {
        let admission = Arc::new(Admission::default());
        // The operator's connection, authenticated by its first request.
        let (operator, mut operator_closed) = admission.admit(client(1)).await;
        operator.authenticated();
        let mut slow = Vec::new();
        for _ in 0..PER_CLIENT {
            slow.push(admission.admit(client(1)).await);
        }
        // Another client's connection is not touched by the first client's flood.
        let (_other, mut other_closed) = admission.admit(client(2)).await;
        let start = Instant::now();
        for _ in 0..3 * PER_CLIENT {
            let (_still_open, mut oldest) = slow.remove(0);
            slow.push(admission.admit(client(1)).await);
            assert_eq!(oldest.try_recv(), Ok(()), "the client's oldest unauthenticated connection was closed");
        }
        // 16 at once after the first grace, then 16 per grace.
        assert_eq!(start.elapsed(), GRACE * 3);
        assert!(operator_closed.try_recv().is_err(), "the authenticated connection stays");
        assert!(other_closed.try_recv().is_err(), "the other client's connection stays");
        // Every loopback address is one client.
        let mut loopback = Vec::new();
        for n in 1..=PER_CLIENT as u8 + 1 {
            tokio::time::advance(GRACE).await;
            loopback.push(admission.admit(IpAddr::from([127, 0, 0, n])).await);
        }
        assert_eq!(loopback[0].1.try_recv(), Ok(()), "127.0.0.17 pushed out 127.0.0.1's connection");
    }

    #[tokio::test(start_paused = true)]
    async fn the_unauthenticated_share_of_all_clients_keeps_places_for_tokens() {
        let admission = Arc::new(Admission::default());
        let mut held = Vec::new();
        for n in 0..UNAUTHENTICATED_SHARE {
            held.push(admission.admit(client((n % 4) as u8 + 1)).await);
        }
        tokio::time::advance(GRACE).await;
        let _newest = admission.admit(client(9)).await;
        assert_eq!(held[0].1.try_recv(), Ok(()), "the oldest of any client makes room past the share of all");
        let mut tokens = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            tokio::time::advance(GRACE).await;
            let (ticket, closed) = admission.admit(client(10)).await;
            ticket.authenticated();
            tokens.push((ticket, closed));
        }
        let full = tokio::time::timeout(GRACE * 100, admission.admit(client(11))).await;
        assert!(full.is_err(), "every place holds a token: the new connection waits");
        drop(tokens.pop());
        let _admitted = admission.admit(client(11)).await;
    }
}
