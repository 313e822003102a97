//! Connection caps on the proxy port: [`Admission`] counts the connections open in all and
//! per client address (every loopback address one client: a local process could otherwise
//! bind 127.0.0.2, 127.0.0.3, … and fill the cap of all; `crate::net::host::client_address`), and hands out an [`Admitted`] ticket that gives its place back when
//! the connection ends. Over a cap the caller closes the new connection at once; refusals are
//! counted and logged at most once a second (`crate::throttled`), so a flood cannot flood the
//! log too.
//!
//! Never accepts, reads or closes sockets itself.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use tracing::warn;

use crate::net::host::client_address;
use crate::proxy::config::ConnectionsConfig;
use crate::throttled::Throttled;

/// The counts behind the connection caps.
pub(crate) struct Admission {
    max_total: usize,
    max_per_client: usize,
    open: Mutex<Open>,
    /// Connections refused.
    refused: Throttled,
}

#[derive(Default)]
struct Open {
    total: usize,
    per_client: HashMap<IpAddr, usize>,
}

/// Which cap a refused connection hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cap {
    Total,
    PerClient,
}

/// A connection's place under the caps; dropping it frees the place.
pub(crate) struct Admitted {
    admission: Arc<Admission>,
    client: IpAddr,
}

impl Admission {
    pub(crate) fn new(config: &ConnectionsConfig) -> Arc<Self> {
        Arc::new(Admission {
            max_total: config.max_connections,
            max_per_client: config.max_connections_per_client,
            open: Mutex::new(Open::default()),
            refused: Throttled::default(),
        })
    }

    /// Takes a place for a connection from `client`, or says which cap is full (the refusal
    /// is counted and, at most once a second, logged).
    pub(crate) fn admit(self: &Arc<Self>, client: IpAddr) -> Result<Admitted, Cap> {
        let client = client_address(client);
        let cap = {
            let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
            let from_client = open.per_client.get(&client).copied().unwrap_or(0);
            if open.total >= self.max_total {
                Cap::Total
            } else if from_client >= self.max_per_client {
                Cap::PerClient
            } else {
                open.total += 1;
                open.per_client.insert(client, from_client + 1);
                return Ok(Admitted { admission: Arc::clone(self), client });
            }
        };
        self.note_refusal(client, cap);
        Err(cap)
    }

    /// Connections open now (the admin API's `agentgate_connections`).
    pub(crate) fn open_connections(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).total
    }

    fn note_refusal(&self, client: IpAddr, cap: Cap) {
        let Some(counts) = self.refused.count() else { return };
        let (key, limit) = match cap {
            Cap::Total => ("[connections] max_connections", self.max_total),
            Cap::PerClient => ("[connections] max_connections_per_client", self.max_per_client),
        };
        warn!(%client, cap = key, limit, refused_since_last_log = counts.since_last_log,
            refused_total = counts.total,
            "connection cap reached; closing new connections");
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let mut open = self.admission.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.total = open.total.saturating_sub(1);
        if let Some(count) = open.per_client.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                open.per_client.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    fn admission(total: usize, per_client: usize) -> Arc<Admission> {
        Admission::new(&ConnectionsConfig {
            max_connections: total,
            max_connections_per_client: per_client,
            ..ConnectionsConfig::default()
        })
    }

    #[test]
    fn every_loopback_address_is_one_client() {
        let caps = admission(10, 2);
        let _first = caps.admit(IpAddr::from([127, 0, 0, 1])).expect("1 of 2");
        let _second = caps.admit(IpAddr::from([127, 0, 0, 2])).expect("2 of 2");
        for other in ["127.9.9.9", "::1", "::ffff:127.0.0.3"] {
            let ip: IpAddr = other.parse().expect("an address");
            assert_eq!(caps.admit(ip).err(), Some(Cap::PerClient), "{other}");
        }
        let _lan = caps.admit(IpAddr::from([192, 0, 2, 1])).expect("another client");
    }

    #[test]
    fn each_cap_refuses_past_its_limit_and_a_closed_connection_frees_its_place() {
        let caps = admission(3, 2);
        let (a, b) = (IpAddr::from([192, 0, 2, 1]), IpAddr::from([192, 0, 2, 2]));
        let first = caps.admit(a).expect("1 of 2 for a");
        let _second = caps.admit(a).expect("2 of 2 for a");
        assert_eq!(caps.admit(a).err(), Some(Cap::PerClient));
        let _third = caps.admit(b).expect("3 of 3 in all");
        assert_eq!(caps.admit(b).err(), Some(Cap::Total));
        assert_eq!(caps.refused.total.load(Ordering::Relaxed), 2);
        drop(first);
        caps.admit(a).expect("a place came free");
    }
}
