//! The shared policy store (`[cache] store = "redis"`): the copies of every
//! origin's policy files in one Redis, so a fleet of replicas fetches each file once per
//! freshness period between them, revalidates instead of refetching, and decides alike.
//!
//! Owns the Redis side: one value per origin ([`value`]: each format's raw responses and
//! freshness) under `<key_prefix>policies:<origin>`, read with `GETRANGE` up to a size bound
//! (a huge planted value is never read whole), written with a TTL of its freshness
//! plus [`STALE_USE`]; a short lease per origin (`SET NX PX`, `<key_prefix>policy-lease:
//! <origin>`) so one replica fetches while the others wait for its value, at most `wait`;
//! and what happens when Redis fails: every call is bounded by `timeout`, a failure (error,
//! timeout, refused connection) makes the replica fetch for itself, is counted in
//! `/metrics` (`agentgate_policy_store_total{result="failure"}`) and is logged at most once
//! a second. A value that is not what [`value`] writes (wrong type, oversized, corrupt) is a
//! miss, counted as `result="corrupt"`, and is overwritten by the next fetch. The protocol
//! over these (look, lease or wait, load, store) is [`SharedStore::obtain`]; the cache gives
//! it its copies' encoding ([`SharedCopy`]) and its load.
//!
//! Connections are made as for `[limits.redis]` (`crate::redis_connection`: the URL, AUTH
//! from `password_env`, `rediss://` trusting the system's roots and `[upstream]
//! extra_ca_files`). Never: parses policy text, decides freshness (the cache
//! does, `super::cache`), logs the URL (it may hold a password).

pub(crate) mod config;
pub(crate) mod value;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands as _;
use redis::aio::ConnectionManager;
use tokio::time::Instant;

use super::Origin;
use crate::error_chain::error_chain;
use crate::metrics::Metrics;
use crate::policy::MAX_TTL;
use crate::redis_connection::{ConnectError, Connection, FailureLog};

/// How long a value outlives its freshness in Redis: the longest window in which a stale
/// rule may still use a stale copy or its validators (one lifetime for agents.txt, B21, at
/// most 24 h; an hour for AGENTS.md, C4; robots.txt's "while unreachable", cut here to 24 h).
pub(crate) const STALE_USE: Duration = MAX_TTL;
/// How often a replica waiting for another's fetch looks for its value.
const POLL: Duration = Duration::from_millis(50);

/// Releases a lease only when it is still this replica's (it may have expired and been taken).
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The Redis store of the policy cache. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SharedStore {
    inner: Arc<Inner>,
}

struct Inner {
    manager: ConnectionManager,
    release: redis::Script,
    prefix: String,
    timeout: Duration,
    wait: Duration,
    /// This replica's lease token: random, so two processes never share one.
    token: String,
    metrics: Arc<Metrics>,
    failure_log: FailureLog,
}

/// What the store keeps for an origin, as the cache knows it (its snapshot of the origin's
/// files): how a stored value is read back and written.
pub(crate) trait SharedCopy: Sized {
    /// The most bytes a stored value may take.
    fn cap() -> usize;
    /// The copy `bytes` hold for `origin`; `None` when they are not one.
    fn read(origin: &Origin, bytes: &[u8]) -> Option<Self>;
    /// The value to store for `origin`, and its TTL.
    fn stored(&self, origin: &Origin) -> (Vec<u8>, Duration);
}

/// What [`SharedStore::lease`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lease {
    /// This replica fetches; release when done.
    Taken,
    /// Another replica is fetching: wait for its value.
    Held,
    /// Redis did not answer: fetch without it.
    Unavailable,
}

impl SharedStore {
    /// A store on `connection` (the resolved `[cache.redis]` settings), waiting `wait` for
    /// other replicas' fetches, counting into `metrics`. Connects on first use.
    ///
    /// # Errors
    /// [`ConnectError`] when the connection cannot be set up.
    pub(crate) fn new(
        connection: &Connection<'_>,
        wait: Duration,
        extra_ca_files: &[PathBuf],
        metrics: Arc<Metrics>,
    ) -> Result<Self, ConnectError> {
        let manager = connection.connect(extra_ca_files)?;
        Ok(SharedStore {
            inner: Arc::new(Inner {
                manager,
                release: redis::Script::new(RELEASE),
                prefix: connection.key_prefix.to_owned(),
                timeout: connection.timeout,
                wait,
                token: format!("{:016x}", rand::random::<u64>()),
                metrics,
                failure_log: FailureLog::default(),
            }),
        })
    }

    fn key(&self, origin: &Origin) -> String {
        format!("{}policies:{origin}", self.inner.prefix)
    }

    fn lease_key(&self, origin: &Origin) -> String {
        format!("{}policy-lease:{origin}", self.inner.prefix)
    }

    /// The copy of `origin` to put in force, `previous` being the replica's own: a copy in
    /// the store that is `usable`; else, under this replica's lease, `load` on top of the
    /// store's stale copy (or `previous`), stored for the fleet; else (another replica holds
    /// the lease) its copy once it lands, or after `[cache.redis] wait` a load of our own,
    /// stored. When Redis fails, a load of our own.
    pub(crate) async fn obtain<C: SharedCopy>(
        &self,
        origin: &Origin,
        previous: Option<&C>,
        usable: impl Fn(&C) -> bool,
        load: impl AsyncFnOnce(Option<&C>) -> C,
    ) -> C {
        let found = match self.look::<C>(origin).await {
            Some(copy) if usable(&copy) => {
                self.inner.metrics.policy_store("hit");
                return copy;
            }
            found => found,
        };
        if found.is_none() {
            self.inner.metrics.policy_store("miss");
        }
        let base = found.as_ref().or(previous);
        match self.lease(origin).await {
            Lease::Taken => {
                let copy = load(base).await;
                self.store(origin, &copy).await;
                self.release(origin).await;
                copy
            }
            Lease::Held => {
                let deadline = Instant::now() + self.inner.wait;
                while Instant::now() < deadline {
                    tokio::time::sleep(POLL).await;
                    if let Some(copy) = self.look::<C>(origin).await
                        && usable(&copy)
                    {
                        self.inner.metrics.policy_store("hit");
                        return copy;
                    }
                }
                self.inner.metrics.policy_store("wait_timeout");
                tracing::info!(%origin, wait = ?self.inner.wait, "another replica's policy fetch did not land in time; fetching here");
                let copy = load(base).await;
                self.store(origin, &copy).await;
                copy
            }
            Lease::Unavailable => load(base).await,
        }
    }

    /// The store's copy of `origin`; a value that is not a copy is a miss, counted.
    async fn look<C: SharedCopy>(&self, origin: &Origin) -> Option<C> {
        let bytes = self.get(origin, C::cap()).await?;
        let copy = C::read(origin, &bytes);
        if copy.is_none() {
            self.inner.metrics.policy_store("corrupt");
            tracing::warn!(%origin, "the shared policy store held a value that is not a policy copy; ignored and refetched");
        }
        copy
    }

    /// Puts `copy` in the store for the fleet.
    async fn store<C: SharedCopy>(&self, origin: &Origin, copy: &C) {
        let (value, ttl) = copy.stored(origin);
        self.put(origin, value, ttl).await;
    }

    /// Runs one Redis call within `timeout`; a failure is counted, logged at most once a
    /// second, and `None`.
    async fn call<T>(
        &self,
        what: &str,
        origin: &Origin,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Option<T> {
        let error = match tokio::time::timeout(self.inner.timeout, call).await {
            Ok(Ok(answer)) => return Some(answer),
            Ok(Err(error)) => error_chain(&error),
            Err(_) => format!("no answer within {:?} ([cache.redis] timeout)", self.inner.timeout),
        };
        self.inner.metrics.policy_store("failure");
        if self.inner.failure_log.due() {
            tracing::warn!(
                %origin, call = what, %error,
                "the shared policy store did not answer; this replica fetches the policy files itself"
            );
        }
        None
    }

    /// The value stored for `origin`, at most `max_bytes` plus one (`GETRANGE`, so a huge
    /// planted value is never read whole; one byte more tells it is over); `None` on a miss
    /// or a failure. A value of the wrong type is a miss: the empty value.
    async fn get(&self, origin: &Origin, max_bytes: usize) -> Option<Vec<u8>> {
        let mut connection = self.inner.manager.clone();
        let getrange = redis::cmd("GETRANGE").arg(self.key(origin)).arg(0).arg(max_bytes).to_owned();
        let answer = self
            .call("GETRANGE", origin, async {
                match getrange.query_async::<Vec<u8>>(&mut connection).await {
                    // Not a string: a value agentgate never writes, refused as one.
                    Err(error) if error.code() == Some("WRONGTYPE") => Ok(b"-".to_vec()),
                    answer => answer,
                }
            })
            .await?;
        // GETRANGE answers "" for a missing key.
        (!answer.is_empty()).then_some(answer)
    }

    /// Stores `value` for `origin` for `ttl`; a failure is counted and logged.
    async fn put(&self, origin: &Origin, value: Vec<u8>, ttl: Duration) {
        let mut connection = self.inner.manager.clone();
        let key = self.key(origin);
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        self.call("SET", origin, connection.pset_ex::<_, _, ()>(&key, value, ttl_ms)).await;
    }

    /// Takes the lease on fetching `origin` for `wait` (`SET NX PX`).
    async fn lease(&self, origin: &Origin) -> Lease {
        let mut connection = self.inner.manager.clone();
        let key = self.lease_key(origin);
        let ms = u64::try_from(self.inner.wait.as_millis()).unwrap_or(u64::MAX).max(1);
        let set = redis::cmd("SET").arg(&key).arg(&self.inner.token).arg("NX").arg("PX").arg(ms).to_owned();
        match self.call("SET NX", origin, set.query_async::<Option<String>>(&mut connection)).await {
            Some(Some(_)) => Lease::Taken,
            Some(None) => Lease::Held,
            None => Lease::Unavailable,
        }
    }

    /// Gives back a lease this replica took, if it is still its own.
    async fn release(&self, origin: &Origin) {
        let mut connection = self.inner.manager.clone();
        let mut invocation = self.inner.release.key(self.lease_key(origin));
        invocation.arg(&self.inner.token);
        self.call("release", origin, invocation.invoke_async::<i64>(&mut connection)).await;
    }

    /// Deletes the value of `origin` (`DELETE /policies?origin=…`).
    pub(crate) async fn purge(&self, origin: &Origin) {
        let mut connection = self.inner.manager.clone();
        let key = self.key(origin);
        self.call("DEL", origin, connection.del::<_, i64>(&key)).await;
    }
}
