//! The guard: resolve a host once, vet every address it resolves to, and pin that answer so
//! the connection goes to exactly what was vetted. The proxy asks before the gate loads any
//! policy (so a refusal is a clean `403`, never a `robots.unreachable`), and the connector
//! asks again for every connection it opens (proxied requests, tunnels, WebSocket, and
//! agentgate's own policy fetches with every redirect hop): it gets the pinned answer, so a
//! second DNS lookup can never hand it an address the first did not vet (DNS rebinding).
//!
//! An answer stays pinned while a request holds it ([`Vetted`] is that lease), and for
//! `[upstream] idle_timeout` after its last use, as long as a pooled connection to it may
//! live; after [`MAX_PIN_AGE`] without a request holding it, the name is resolved again.
//! An address literal is pinned as its own answer the same way (it is never resolved), so a
//! request to an address finds its answer rather than making one.
//!
//! Never: dials (the proxy's connector does), decides policy.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::address::{AddressPolicy, Refusal};
use super::host::{HostError, as_ip, canonical_host};
use super::lookup::Resolve;

/// The longest a resolution is reused when no request holds it.
pub const MAX_PIN_AGE: Duration = Duration::from_secs(300);

/// Above this many pinned hosts, the unused ones are dropped on the next insert.
const PRUNE_ABOVE: usize = 4096;

/// Why the guard gives no address to connect to.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// An address is refused; nothing was dialled.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// The name did not resolve.
    #[error("cannot resolve {host}")]
    Resolve {
        /// The canonical host.
        host: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
    /// The host is not a host name or address.
    #[error(transparent)]
    BadHost(#[from] HostError),
}

/// A vetted answer for one host: its canonical name and the addresses a connection may go
/// to. Holding it keeps the answer pinned, so the request's connection dials these.
#[derive(Debug)]
pub struct Vetted {
    host: String,
    addrs: Vec<IpAddr>,
}

impl Vetted {
    /// The canonical host.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Every address the host resolved to, each vetted.
    pub fn addresses(&self) -> &[IpAddr] {
        &self.addrs
    }
}

struct Pinned {
    vetted: Arc<Vetted>,
    resolved_at: Instant,
    last_used: Instant,
}

impl Pinned {
    fn usable(&self, keep: Duration) -> bool {
        let in_use = Arc::strong_count(&self.vetted) > 1;
        in_use || (self.last_used.elapsed() < keep && self.resolved_at.elapsed() < MAX_PIN_AGE)
    }
}

/// The network guard of one running proxy.
pub struct Guard {
    policy: AddressPolicy,
    resolver: Arc<dyn Resolve>,
    keep: Duration,
    pinned: Mutex<HashMap<String, Pinned>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard").field("policy", &self.policy).field("keep", &self.keep).finish_non_exhaustive()
    }
}

impl Guard {
    /// A guard applying `policy`, resolving with `resolver`, keeping an unused answer pinned
    /// for `keep` (the upstream pool's idle timeout).
    pub fn new(policy: AddressPolicy, resolver: Arc<dyn Resolve>, keep: Duration) -> Self {
        Guard { policy, resolver, keep, pinned: Mutex::new(HashMap::new()) }
    }

    /// The address rules (to add agentgate's own bound address once known).
    pub fn policy(&self) -> &AddressPolicy {
        &self.policy
    }

    /// Resolves `host` (or reuses its pinned answer) and vets every address with `port`.
    ///
    /// # Errors
    /// [`GuardError::Refused`] when any address is refused (one bad address refuses the
    /// host: a resolver answering a public address first must not smuggle a private one);
    /// [`GuardError::Resolve`] when the name does not resolve; [`GuardError::BadHost`].
    pub async fn check(&self, host: &str, port: u16) -> Result<Arc<Vetted>, GuardError> {
        let host = canonical_host(host)?;
        let vetted = match self.pinned(&host) {
            Some(vetted) => vetted,
            // An address is its own answer, pinned as a name's is: a request to it finds it
            // there, rather than a new answer made (three allocations) every time.
            None => match as_ip(&host) {
                Some(ip) => self.pin(host.into_owned(), vec![ip]),
                None => self.resolve(host.into_owned()).await?,
            },
        };
        for ip in &vetted.addrs {
            self.policy.vet(&vetted.host, SocketAddr::new(*ip, port))?;
        }
        Ok(vetted)
    }

    /// The addresses a connection to `host:port` may dial: the vetted answer.
    ///
    /// # Errors
    /// As [`check`](Self::check).
    pub async fn addresses_to_dial(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, GuardError> {
        let vetted = self.check(host, port).await?;
        Ok(vetted.addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect())
    }

    fn pinned(&self, host: &str) -> Option<Arc<Vetted>> {
        let mut pinned = self.pinned.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = pinned.get_mut(host).filter(|p| p.usable(self.keep))?;
        entry.last_used = Instant::now();
        Some(Arc::clone(&entry.vetted))
    }

    async fn resolve(&self, host: String) -> Result<Arc<Vetted>, GuardError> {
        let error = |source| GuardError::Resolve { host: host.clone(), source };
        let addrs = self.resolver.resolve(&host).await.map_err(error)?;
        if addrs.is_empty() {
            return Err(error(io::Error::new(io::ErrorKind::NotFound, "the name has no addresses")));
        }
        let addrs = addrs.into_iter().map(super::host::canonical_ip).collect();
        Ok(self.pin(host, addrs))
    }

    /// `addrs` pinned as `host`'s answer, unless another request pinned one while this one
    /// resolved: then that one, so concurrent requests to one host share one vetted answer.
    fn pin(&self, host: String, addrs: Vec<IpAddr>) -> Arc<Vetted> {
        let mut pinned = self.pinned.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = pinned.get_mut(&host).filter(|p| p.usable(self.keep)) {
            entry.last_used = Instant::now();
            return Arc::clone(&entry.vetted);
        }
        if pinned.len() > PRUNE_ABOVE {
            pinned.retain(|_, p| p.usable(self.keep));
        }
        let now = Instant::now();
        let vetted = Arc::new(Vetted { host: host.clone(), addrs });
        pinned.insert(host, Pinned { vetted: Arc::clone(&vetted), resolved_at: now, last_used: now });
        vetted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::NetworkConfig;
    use crate::net::lookup::NetFuture;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Answers from a list that changes on every lookup: a rebinding DNS server.
    struct Rebinding {
        answers: Vec<Vec<IpAddr>>,
        lookups: AtomicUsize,
    }

    impl Resolve for Rebinding {
        fn resolve<'a>(&'a self, _name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
            let n = self.lookups.fetch_add(1, Ordering::SeqCst);
            let answer = self.answers[n.min(self.answers.len() - 1)].clone();
            Box::pin(async move { Ok(answer) })
        }
    }

    fn guard(answers: Vec<Vec<IpAddr>>) -> (Guard, Arc<Rebinding>) {
        let resolver = Arc::new(Rebinding { answers, lookups: AtomicUsize::new(0) });
        let policy = AddressPolicy::new(&NetworkConfig::default(), None);
        (Guard::new(policy, resolver.clone(), Duration::from_secs(90)), resolver)
    }

    #[tokio::test]
    async fn every_address_is_vetted() {
        let public: IpAddr = [93, 184, 215, 14].into();
        let (guard, _) = guard(vec![vec![public, [127, 0, 0, 1].into()]]);
        let err = guard.check("mixed.test", 443).await.expect_err("loopback second");
        assert!(matches!(err, GuardError::Refused(Refusal::PrivateAddress { .. })), "{err}");
    }

    #[tokio::test]
    async fn dns_rebinding_gets_the_pinned_answer() {
        let public: IpAddr = [93, 184, 215, 14].into();
        let (guard, resolver) = guard(vec![vec![public], vec![[127, 0, 0, 1].into()]]);
        let lease = guard.check("rebind.test", 80).await.expect("public first");
        let dial = guard.addresses_to_dial("REBIND.test.", 80).await.expect("pinned");
        assert_eq!(dial, vec![SocketAddr::new(public, 80)]);
        assert_eq!(resolver.lookups.load(Ordering::SeqCst), 1, "one lookup");
        drop(lease);
    }

    #[tokio::test]
    async fn ip_literals_skip_the_resolver() {
        let (guard, resolver) = guard(vec![vec![]]);
        let err = guard.check("0x7f.1", 80).await.expect_err("loopback");
        assert_eq!(
            err.to_string(),
            Refusal::PrivateAddress { host: "127.0.0.1".into(), addr: [127, 0, 0, 1].into() }.to_string()
        );
        assert!(guard.check("[2606:4700::1]", 443).await.is_ok());
        assert_eq!(resolver.lookups.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn an_address_answer_is_pinned_and_vetted_at_every_check() {
        let (guard, resolver) = guard(vec![vec![]]);
        let first = guard.check("93.184.215.14", 443).await.expect("a public address");
        let again = guard.check("93.184.215.14", 80).await.expect("the same address");
        assert!(Arc::ptr_eq(&first, &again), "the second check finds the first answer");
        assert_eq!(again.host(), "93.184.215.14");
        assert_eq!(again.addresses(), &[IpAddr::from([93, 184, 215, 14])]);
        // Vetted at each check, pinned or not: the port is part of what is refused.
        guard.policy().add_own(SocketAddr::new([93, 184, 215, 14].into(), 8080));
        let err = guard.check("93.184.215.14", 8080).await.expect_err("agentgate's own address");
        assert!(matches!(err, GuardError::Refused(Refusal::OwnAddress { .. })), "{err}");
        assert_eq!(resolver.lookups.load(Ordering::SeqCst), 0);
    }
}
