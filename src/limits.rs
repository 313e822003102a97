//! Rate and concurrency limits (SEMANTICS X1, B16, C21, robots `Crawl-delay`): every counter
//! agentgate keeps about agents, behind one small seam, [`Limiter::check_and_spend`] and the
//! [`Permit`] it hands back (dropping the permit releases its concurrency slots). The
//! in-process store is the default (`[limits] store = "memory"`); the shared store for
//! several replicas (`store = "redis"`, DESIGN §10, [`redis`]) is another [`Limiter`]
//! variant with the same async interface and the same quotas, so the gate never changes.
//!
//! Rates are keyed GCRA quotas from `governor` with burst = the limit (C21; one for a crawl
//! delay), one keyed limiter per distinct quota. Concurrency (`concurrent-sessions`) is a
//! count of in-flight requests per key; the excess is refused at once, never queued. Byte
//! budgets (the operator's `*_bytes_per_hour`, `bytes`) are GCRA over bytes (`ByteCost`, one
//! arithmetic for both stores), spent as bodies stream ([`ByteBudgets`]), in the store
//! `[limits]` names: with Redis they are shared by every replica like the request limits
//! (the declared `Content-Length` in the same call as the rates, streamed bytes from
//! reservations, [`reservation`]), and fall back as `on_failure` says.
//!
//! Admitting a request ([`Limiter::check_and_spend`]) is one call to the store, all or none
//! across the rates and the byte budgets in both stores: a budget that refuses leaves every
//! rate unspent, a rate that refuses leaves every budget uncharged. Concurrency slots are
//! checked first, then the byte budgets, then the rates, so when several refuse the first
//! in that order is named.
//!
//! Keys: a request's key for a limit is a 64-bit hash of the limit's source and scope and of
//! the agent, origin or host it is counted per ([`Limit::key`] spells the same parts out for
//! `explain`), hashed from the borrowed parts with foldhash under a per-process random seed,
//! so a check allocates nothing. Two keys share a budget only on a hash collision: with a
//! random 64-bit hash and a million live keys, a chance of about 3 in 100 million, and an
//! outsider cannot aim for one without the seed.
//!
//! Bounded: a concurrency key is removed when its last slot is released; rate keys whose
//! state is indistinguishable from a fresh one are evicted at most once per
//! [`EVICTION_INTERVAL`] of clock time, on the next check.
//!
//! Never: writes responses or decision-log lines (the only log line is the Redis store's
//! rate-limited WARN when it falls back), decides which limits apply (the policy core and
//! the agent config do), fetches or parses anything.

use std::hash::{BuildHasher, Hash, Hasher};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use dashmap::mapref::one::Ref;
use foldhash::fast::RandomState;
use governor::clock::{Clock, DefaultClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use serde::Deserialize;
use smallvec::SmallVec;

use crate::policy::{Limit, LimitKind, LimitScope};
use crate::redis_connection::ConnectError;

mod bytes;
pub mod redis;

use self::bytes::{Budget, ByteCost, Counted, Items, Spend};
pub use self::bytes::{ByteBudgets, Declared, FLOOR_MAX, RESERVE_MIN, RESERVE_SHARE, Spending, floor, reservation};
pub use self::redis::{OnFailure, RedisConfig, RedisLimiter};

/// How often (in clock time) idle rate keys are evicted.
pub const EVICTION_INTERVAL: Duration = Duration::from_secs(60);

/// `[limits]`: where the counters live.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// `memory` (this process; the default) or `redis` (shared by every replica).
    pub store: Store,
    /// The shared store (`[limits.redis]`), read when `store = "redis"`.
    pub redis: RedisConfig,
}

impl LimitsConfig {
    /// Problems in `[limits]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        self.redis.problems(problems);
    }
}

/// `[limits] store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Store {
    /// In this process.
    #[default]
    Memory,
    /// In Redis, shared by every replica (`[limits.redis]`).
    Redis,
}

/// Why a request may not go now.
#[derive(Debug, Clone)]
pub enum Refused {
    /// A limit is spent: 429 with `Retry-After`.
    Exceeded(Exceeded),
    /// A declared body larger than a whole byte budget: it can never pass under that budget,
    /// however long the agent waits (413 for a request body, 403 for a response's).
    NeverFits {
        /// The sending or receiving budget.
        limit: Limit,
        /// The body's declared length.
        bytes: u64,
    },
    /// The shared store did not answer in time and `[limits.redis] on_failure = "deny"`: 503.
    StoreUnavailable,
}

/// Who is counted for one request: limit keys are built from these ([`Limit::key`]).
#[derive(Debug, Clone, Copy)]
pub struct Usage<'a> {
    /// The agent id.
    pub agent: &'a str,
    /// The origin, `scheme://host:port`.
    pub origin: &'a str,
    /// The host (AGENTS.md limits are per host, C21).
    pub host: &'a str,
}

/// The limit that refused a request, and when the agent may try again.
#[derive(Debug, Clone)]
pub struct Exceeded {
    /// The limit (its reason names the file, line and rule).
    pub limit: Limit,
    /// How long until the limit lets a request through again (for a concurrency limit:
    /// one second, since a slot frees when any request in flight ends).
    pub retry_after: Duration,
}

impl Exceeded {
    /// `Retry-After` in whole seconds, rounded up, at least 1.
    pub fn retry_after_secs(&self) -> u64 {
        let secs = self.retry_after.as_secs() + u64::from(self.retry_after.subsec_nanos() > 0);
        secs.max(1)
    }
}

/// Concurrency slots held by one request in flight; dropping it gives them back.
#[derive(Debug, Default)]
pub struct Permit {
    /// Held inline: a request rarely holds more than two (a list per request cost an
    /// allocation wherever a concurrency limit applies).
    slots: SmallVec<[Slot; 2]>,
    /// The slots held in the shared store.
    lease: Option<redis::Lease>,
}

impl Permit {
    /// True when the request holds no concurrency slot.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.lease.is_none()
    }
}

/// Where a request's counters live.
pub enum Limiter {
    /// In this process (the default).
    Local(LocalLimiter),
    /// In Redis, shared by every replica (boxed: three times the in-process store's size).
    Redis(Box<RedisLimiter>),
}

impl Limiter {
    /// The in-process store on the system clock.
    pub fn in_process() -> Self {
        Limiter::Local(LocalLimiter::new(DefaultClock::default()))
    }

    /// The store `[limits]` asks for, trusting `extra_ca_files` (`[upstream]`) for
    /// `rediss://` and counting into `metrics`. Call inside a tokio runtime (the Redis
    /// client's connection task runs there); it connects when [warmed](Self::warm).
    ///
    /// # Errors
    /// [`ConnectError`] when the Redis store cannot be set up.
    pub fn from_config(
        config: &LimitsConfig,
        extra_ca_files: &[std::path::PathBuf],
        metrics: crate::metrics::StoreMetrics,
    ) -> Result<Self, ConnectError> {
        match config.store {
            Store::Memory => Ok(Limiter::in_process()),
            Store::Redis => Ok(Limiter::Redis(Box::new(RedisLimiter::new(&config.redis, extra_ca_files, metrics)?))),
        }
    }

    /// Gets the store ready before the proxy serves: for Redis, connects, loads the scripts
    /// and reads its clock, waiting a bounded time and logging when it cannot
    /// ([`RedisLimiter::warm`]); nothing to do in process.
    pub async fn warm(&self) {
        if let Limiter::Redis(shared) = self {
            shared.warm().await;
        }
    }

    /// Checks every limit for `usage`, and the byte budgets among them for the request's
    /// `body` (`ByteBudgets::declared_items`), and only when all pass counts the request
    /// against them, spends the body's declared bytes and takes its concurrency slots
    /// (SEMANTICS X1: every limit applies): one call to the store, with Redis one round trip.
    /// Hands back the slots and the request's byte budgets (`None` when none applies), to be
    /// spent as its bodies stream.
    ///
    /// All or none across rates and budgets: concurrency slots are taken first and given
    /// back when a later limit refuses; budgets are checked before any rate is spent and
    /// spent only after every rate passed. In process, a rate refused after another rate was
    /// counted leaves that count spent (GCRA has no refund), and another request may spend a
    /// budget between its check and its spend; in Redis the script spends all or none.
    ///
    /// # Errors
    /// [`Refused::NeverFits`] for a declared body larger than a whole sending budget (before
    /// the store is asked); [`Refused::Exceeded`] naming the first limit that refused;
    /// [`Refused::StoreUnavailable`] when Redis did not answer and `on_failure = "deny"`.
    pub async fn check_and_spend(
        self: &Arc<Self>,
        usage: Usage<'_>,
        limits: &[Limit],
        body: Declared,
    ) -> Result<(Permit, Option<ByteBudgets>), Refused> {
        let mut budgets = ByteBudgets::new(self, usage, limits);
        let items = budgets.as_ref().map(|budgets| budgets.declared_items(body)).transpose()?.into_iter().flatten();
        let (permit, counted) = match &**self {
            Limiter::Local(local) => {
                (local.spend_all(usage, limits, items).map_err(Refused::Exceeded)?, Counted::InStore)
            }
            Limiter::Redis(shared) => shared.check_and_spend(usage, limits, items).await?,
        };
        if let Some(budgets) = &mut budgets {
            budgets.admitted(body, counted);
        }
        Ok((permit, budgets))
    }

    /// `limit`'s byte budget for `usage`, with its keys in this store (and, for Redis, in
    /// its fallback); `None` when `limit` is not a byte budget.
    fn budget(&self, limit: &Limit, usage: Usage<'_>) -> Option<Budget> {
        match self {
            Limiter::Local(local) => matches!(limit.kind, LimitKind::Bytes { .. }).then(|| Budget {
                limit: limit.clone(),
                local: local.byte_key(limit, usage),
                shared: String::new(),
            }),
            Limiter::Redis(shared) => shared.budget(limit, usage),
        }
    }

    /// Spends (or only checks, as each item says) body bytes against byte budgets, all or
    /// none: in process, every item checked before any is spent; in Redis, in one round
    /// trip, settled by `on_failure` when it does not answer.
    ///
    /// # Errors
    /// [`Refused::Exceeded`] naming the first budget that has not the bytes left, with when
    /// it will; [`Refused::StoreUnavailable`] when Redis did not answer and `on_failure = "deny"`.
    async fn spend_bytes<'l>(&self, items: impl Items<'l>) -> Result<Counted, Refused> {
        match self {
            Limiter::Local(local) => {
                local.spend_items(items).map_err(Refused::Exceeded)?;
                Ok(Counted::InStore)
            }
            Limiter::Redis(shared) => shared.spend_bytes(items).await,
        }
    }

    /// Checks the shared store did not answer in time or answered with an error since start
    /// (each settled by `on_failure`); 0 in process.
    pub fn store_failures(&self) -> u64 {
        match self {
            Limiter::Local(_) => 0,
            Limiter::Redis(shared) => shared.failures(),
        }
    }

    /// How many keys this process holds (rate keys plus in-flight keys; for the Redis store,
    /// those of its fallback).
    pub fn key_count(&self) -> usize {
        match self {
            Limiter::Local(local) => local.key_count(),
            Limiter::Redis(shared) => shared.local_key_count(),
        }
    }
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter").field("keys", &self.key_count()).finish()
    }
}

/// A limit's key for one request ([`LocalLimiter::key`]).
type Key = u64;

type KeyedRate<C> = RateLimiter<Key, DashMapStateStore<Key, RandomState>, C, NoOpMiddleware<<C as Clock>::Instant>>;

/// A rate quota: `burst` requests per `window_ms`, one cell back every `window_ms / burst`.
type QuotaKey = (u32, u64);

/// The in-process store: governor's keyed GCRA per quota, and in-flight counts.
pub struct LocalLimiter<C: Clock = DefaultClock> {
    clock: C,
    start: C::Instant,
    /// Seeds the key hash (and the maps' own hashing): random per process.
    hasher: RandomState,
    /// One keyed limiter per quota.
    rates: DashMap<QuotaKey, KeyedRate<C>, RandomState>,
    in_flight: Arc<DashMap<Key, u32, RandomState>>,
    /// Byte budgets: each key's theoretical arrival time (GCRA), nanoseconds after `start`.
    bytes: DashMap<Key, u64, RandomState>,
    /// Nanoseconds after `start` of the last eviction.
    last_eviction: AtomicU64,
}

impl<C: Clock + Clone> LocalLimiter<C> {
    /// A store on `clock` (tests pass governor's `FakeRelativeClock`).
    pub fn new(clock: C) -> Self {
        let start = clock.now();
        let hasher = RandomState::default();
        LocalLimiter {
            clock,
            start,
            rates: DashMap::with_hasher(hasher.clone()),
            in_flight: Arc::new(DashMap::with_hasher(hasher.clone())),
            bytes: DashMap::with_hasher(hasher.clone()),
            hasher,
            last_eviction: AtomicU64::new(0),
        }
    }

    /// [`Limiter::check_and_spend`] for this store without byte budgets; never waits, and
    /// allocates only for a concurrency slot (and to name the limit that refused).
    ///
    /// # Errors
    /// [`Exceeded`] naming the first limit that refused.
    pub fn check_and_spend(&self, usage: Usage<'_>, limits: &[Limit]) -> Result<Permit, Exceeded> {
        self.spend_all(usage, limits, std::iter::empty())
    }

    /// [`Limiter::check_and_spend`] for this store: concurrency slots taken, then the byte
    /// `items` checked, the rates spent and the items spent, so a budget that refuses spends
    /// no rate and a rate that refuses charges no budget.
    ///
    /// # Errors
    /// [`Exceeded`] naming the first limit that refused.
    fn spend_all<'l>(&self, usage: Usage<'_>, limits: &[Limit], items: impl Items<'l>) -> Result<Permit, Exceeded> {
        self.evict_if_due();
        let mut permit = Permit::default();
        for limit in limits {
            if let LimitKind::Concurrent { max } = limit.kind {
                let slot = self
                    .take_slot(self.key(limit, usage), max)
                    .ok_or_else(|| Exceeded { limit: limit.clone(), retry_after: Duration::from_secs(1) })?;
                permit.slots.push(slot);
            }
        }
        self.check_items(items.clone())?;
        for limit in limits {
            let quota = match limit.kind {
                LimitKind::Rate { requests, window_s } => (requests, u64::from(window_s.max(1)) * 1000),
                // Spent from `items`, and as bodies stream (`spend_bytes`).
                LimitKind::Delay { millis: 0 } | LimitKind::Concurrent { .. } | LimitKind::Bytes { .. } => continue,
                LimitKind::Delay { millis } => (1, u64::from(millis)),
            };
            let refused = |retry_after| Exceeded { limit: limit.clone(), retry_after };
            let Some(rate) = self.rate(quota) else {
                // A limit of zero requests: nothing ever passes (agents.txt `limit=0`, B16).
                return Err(refused(Duration::from_millis(quota.1)));
            };
            rate.check_key(&self.key(limit, usage))
                .map_err(|not_until| refused(not_until.wait_time_from(self.clock.now())))?;
        }
        self.spend_checked(items)?;
        Ok(permit)
    }

    /// How many keys the store holds (rate keys, in-flight keys and byte budget keys).
    pub fn key_count(&self) -> usize {
        self.rates.iter().map(|rate| rate.len()).sum::<usize>() + self.in_flight.len() + self.bytes.len()
    }

    /// The key `limit` counts `usage` under: the parts [`Limit::key`] names, hashed.
    fn key(&self, limit: &Limit, usage: Usage<'_>) -> Key {
        let mut hasher = self.hasher.build_hasher();
        limit.source.hash(&mut hasher);
        limit.scope.hash(&mut hasher);
        usage.agent.hash(&mut hasher);
        match limit.scope {
            LimitScope::Agent => {}
            LimitScope::Origin | LimitScope::Rule { .. } => usage.origin.hash(&mut hasher),
            LimitScope::Host => usage.host.hash(&mut hasher),
        }
        hasher.finish()
    }

    /// The keyed limiter for a quota; `None` for zero requests.
    fn rate(&self, (requests, window_ms): QuotaKey) -> Option<Ref<'_, QuotaKey, KeyedRate<C>>> {
        if let Some(rate) = self.rates.get(&(requests, window_ms)) {
            return Some(rate);
        }
        let burst = NonZeroU32::new(requests)?;
        let quota = Quota::with_period(Duration::from_millis(window_ms.max(1)) / requests)?.allow_burst(burst);
        let entry = self.rates.entry((requests, window_ms)).or_insert_with(|| {
            RateLimiter::dashmap_with_clock_and_hasher(quota, self.clock.clone(), self.hasher.clone())
        });
        Some(entry.downgrade())
    }

    fn take_slot(&self, key: Key, max: u32) -> Option<Slot> {
        let mut count = self.in_flight.entry(key).or_insert(0);
        if *count >= max {
            let idle = *count == 0;
            drop(count);
            if idle {
                // `concurrent-sessions: 0` is "no limit" in the policy core and never gets
                // here; a zero max would otherwise leave an empty key behind.
                self.in_flight.remove_if(&key, |_, n| *n == 0);
            }
            return None;
        }
        *count += 1;
        Some(Slot { in_flight: Arc::clone(&self.in_flight), key })
    }

    /// Evicts rate keys that went idle, at most once per [`EVICTION_INTERVAL`].
    fn evict_if_due(&self) {
        let now = u64::from(self.clock.now().duration_since(self.start));
        let last = self.last_eviction.load(Ordering::Relaxed);
        let interval = u64::try_from(EVICTION_INTERVAL.as_nanos()).unwrap_or(u64::MAX);
        if now.saturating_sub(last) < interval
            || self.last_eviction.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_err()
        {
            return;
        }
        for rate in self.rates.iter() {
            rate.retain_recent();
            rate.shrink_to_fit();
        }
        // A budget whose arrival time has passed is full again: as good as a fresh one.
        self.bytes.retain(|_, tat| *tat > now);
    }
}

/// One concurrency slot, given back on drop.
#[derive(Debug)]
struct Slot {
    in_flight: Arc<DashMap<Key, u32, RandomState>>,
    key: Key,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.in_flight.remove_if_mut(&self.key, |_, count| {
            *count = count.saturating_sub(1);
            *count == 0
        });
    }
}

#[cfg(test)]
mod tests {
    use governor::clock::FakeRelativeClock;

    use super::bytes::ByteItem;
    use super::*;
    use crate::policy::{AgentsMdCode, LimitScope, Reason, Source};

    fn rate(requests: u32, window_s: u32) -> Limit {
        let reason = Reason::new(AgentsMdCode::RateLimit, "requests-per-minute: 3").at_line(9);
        Limit {
            source: Source::AgentsMd,
            kind: LimitKind::Rate { requests, window_s },
            scope: LimitScope::Host,
            reason,
        }
    }

    fn concurrent(max: u32) -> Limit {
        let reason = Reason::new(AgentsMdCode::ConcurrentSessions, "concurrent-sessions: 2");
        Limit { source: Source::AgentsMd, kind: LimitKind::Concurrent { max }, scope: LimitScope::Host, reason }
    }

    fn usage(agent: &str) -> Usage<'_> {
        Usage { agent, origin: "https://example.com:443", host: "example.com" }
    }

    /// Whether `limit` has `n` bytes left for `usage` (spending nothing).
    fn check(
        limiter: &LocalLimiter<FakeRelativeClock>,
        usage: Usage<'_>,
        limit: &Limit,
        n: u64,
    ) -> Result<(), Exceeded> {
        limiter.bytes(limiter.byte_key(limit, usage), limit, n, Spend::No)
    }

    #[test]
    fn a_byte_budget_lets_the_whole_budget_through_then_refills_per_window() {
        use crate::policy::{Direction, OperatorCode};
        let clock = FakeRelativeClock::default();
        let limiter = LocalLimiter::new(clock.clone());
        let reason = Reason::new(OperatorCode::ByteBudget, "limits.sent_bytes_per_hour = 102400");
        let kind = LimitKind::Bytes { direction: Direction::Sent, bytes: 100 * 1024, window_s: 3600 };
        let budget = Limit { source: Source::Operator, kind, scope: LimitScope::Agent, reason };
        assert!(limiter.spend_bytes(usage("a"), &budget, 60 * 1024).is_ok());
        let over = limiter.spend_bytes(usage("a"), &budget, 60 * 1024).expect_err("60 + 60 KiB > 100 KiB");
        // 20 KiB more must come back: a fifth of the hour.
        assert_eq!(over.retry_after_secs(), 720, "{over:?}");
        assert!(limiter.spend_bytes(usage("a"), &budget, 40 * 1024).is_ok(), "all or none: 40 KiB were left");
        assert!(limiter.spend_bytes(usage("a"), &budget, 1).is_err(), "spent to the byte");
        assert!(check(&limiter, usage("b"), &budget, 100 * 1024).is_ok());
        assert!(check(&limiter, usage("b"), &budget, 100 * 1024).is_ok(), "a check spends nothing");
        assert!(limiter.spend_bytes(usage("b"), &budget, 100 * 1024).is_ok(), "another agent has its own budget");
        let whole = limiter.spend_bytes(usage("c"), &budget, 100 * 1024 + 1).expect_err("more than the budget");
        assert_eq!(whole.retry_after_secs(), 3600);
        clock.advance(Duration::from_secs(1800));
        assert!(limiter.spend_bytes(usage("a"), &budget, 50 * 1024).is_ok(), "half the budget came back");
        assert!(limiter.spend_bytes(usage("a"), &budget, 1024).is_err());
        let rate_too = [budget.clone(), rate(3, 60)];
        assert!(limiter.check_and_spend(usage("a"), &rate_too).is_ok(), "a request spends no bytes");
    }

    #[test]
    fn a_sending_and_a_receiving_budget_of_one_scope_are_two_budgets() {
        use crate::policy::{Direction, OperatorCode};
        let limiter = LocalLimiter::new(FakeRelativeClock::default());
        let budget = |direction| {
            let reason = Reason::new(OperatorCode::ByteBudget, "limits.*_bytes_per_hour = 1024");
            let kind = LimitKind::Bytes { direction, bytes: 1024, window_s: 3600 };
            Limit { source: Source::Operator, kind, scope: LimitScope::Agent, reason }
        };
        let (sent, received) = (budget(Direction::Sent), budget(Direction::Received));
        assert!(limiter.spend_bytes(usage("a"), &sent, 1024).is_ok());
        assert!(limiter.spend_bytes(usage("a"), &sent, 1).is_err(), "the sending budget is spent");
        assert!(limiter.spend_bytes(usage("a"), &received, 1024).is_ok(), "the receiving one is whole");
    }

    /// A budget is spent when less than its floor (the smaller of 64 KiB and 1 % of it) is
    /// left: a check for the floor refuses with the time until the floor has refilled, and
    /// passes again once that time has gone by (the proxy's "after the refill time a download
    /// passes again", on a clock the test moves).
    #[test]
    fn a_budget_with_less_than_its_floor_left_refuses_until_the_floor_has_refilled() {
        use crate::policy::{Direction, OperatorCode};
        assert_eq!(floor(300_000), 3_000, "1 % of the budget");
        assert_eq!(floor(1 << 30), FLOOR_MAX, "at most 64 KiB");
        assert_eq!(floor(50), 1, "at least a byte");
        let clock = FakeRelativeClock::default();
        let limiter = LocalLimiter::new(clock.clone());
        let reason = Reason::new(OperatorCode::ByteBudget, "limits.received_bytes_per_hour = 300000");
        let kind = LimitKind::Bytes { direction: Direction::Received, bytes: 300_000, window_s: 3600 };
        let budget = Limit { source: Source::Operator, kind, scope: LimitScope::Agent, reason };
        assert!(limiter.spend_bytes(usage("a"), &budget, 298_000).is_ok());
        let spent = check(&limiter, usage("a"), &budget, floor(300_000)).expect_err("2,000 left: spent");
        // 1,000 bytes more must come back, at 300,000 an hour.
        assert_eq!(spent.retry_after_secs(), 12, "{spent:?}");
        clock.advance(spent.retry_after - Duration::from_millis(1));
        assert!(check(&limiter, usage("a"), &budget, floor(300_000)).is_err(), "not yet");
        clock.advance(Duration::from_millis(1));
        assert!(check(&limiter, usage("a"), &budget, floor(300_000)).is_ok(), "the floor refilled");
        assert!(limiter.spend_bytes(usage("a"), &budget, 3_000).is_ok(), "and a download of it passes");
    }

    /// Several budgets spent at once (an agent's and a per-origin one) in process: all or
    /// none, as in Redis, so a body refused by one spends nothing of the other.
    #[test]
    fn byte_items_are_spent_all_or_none_in_process() {
        use crate::policy::{Direction, OperatorCode};
        let limiter = LocalLimiter::new(FakeRelativeClock::default());
        let budget = |bytes, scope| {
            let reason = Reason::new(OperatorCode::ByteBudget, "limits.received_bytes_per_hour");
            let kind = LimitKind::Bytes { direction: Direction::Received, bytes, window_s: 3600 };
            Limit { source: Source::Operator, kind, scope, reason }
        };
        let (agent, origin) = (budget(10_000, LimitScope::Agent), budget(1_000, LimitScope::Origin));
        let keyed = [&agent, &origin].map(|limit| Budget {
            limit: limit.clone(),
            local: limiter.byte_key(limit, usage("a")),
            shared: String::new(),
        });
        let items = keyed.each_ref().map(|budget| ByteItem { budget, bytes: 2_000, spend: Spend::Yes });
        assert!(limiter.spend_items(items.into_iter()).is_err(), "over the per-origin budget");
        assert!(limiter.spend_bytes(usage("a"), &agent, 10_000).is_ok(), "the agent's budget was not touched");
    }

    /// What both stores must answer to one sequence of requests counted by a rate of one
    /// request an hour and a sending budget of 1,000 bytes (the agent's): all or none across
    /// both. A budget that refuses spends no rate; a rate that refuses charges no budget.
    pub(super) async fn rates_and_budgets_are_spent_all_or_none(limiter: Arc<Limiter>) {
        use crate::policy::{Direction, OperatorCode};
        let operator = |kind, rule: &str| Limit {
            source: Source::Operator,
            kind,
            scope: LimitScope::Agent,
            reason: Reason::new(OperatorCode::RateLimit, rule),
        };
        let rate = operator(LimitKind::Rate { requests: 1, window_s: 3600 }, "limits.requests_per_hour = 1");
        let sent = LimitKind::Bytes { direction: Direction::Sent, bytes: 1000, window_s: 3600 };
        let budget = operator(sent, "limits.sent_bytes_per_hour = 1000");
        let both = [rate.clone(), budget.clone()];
        let (rate_only, budget_only) = (std::slice::from_ref(&rate), std::slice::from_ref(&budget));
        let body = |length| Declared { length, streams: false };
        let named = |refused: Refused| match refused {
            Refused::Exceeded(exceeded) => exceeded.limit,
            other => panic!("a limit refuses, not {other:?}"),
        };

        // a: 900 of the budget spent by a request no rate counts; then 200 more are refused
        // by the budget, and the rate's one request is still there for 100 bytes.
        let a = usage("a");
        let (_, budgets) = limiter.check_and_spend(a, budget_only, body(900)).await.expect("900 of 1,000");
        assert!(budgets.is_some(), "the request's budgets are handed back");
        let refused = limiter.check_and_spend(a, &both, body(200)).await.expect_err("100 bytes left");
        assert_eq!(named(refused), budget, "the budget refuses");
        limiter.check_and_spend(a, &both, body(100)).await.expect("the rate was not spent by the refused request");
        let spent = limiter.check_and_spend(a, rate_only, body(0)).await.expect_err("now the rate is spent");
        assert_eq!(named(spent), rate);

        // b: the rate's one request spent; a request of the whole budget is refused by the
        // rate, and the whole budget is still there.
        let b = usage("b");
        limiter.check_and_spend(b, rate_only, body(0)).await.expect("the rate's one request");
        let refused = limiter.check_and_spend(b, &both, body(1000)).await.expect_err("the rate is spent");
        assert_eq!(named(refused), rate, "the rate refuses");
        limiter.check_and_spend(b, budget_only, body(1000)).await.expect("the budget was not charged");
        let spent = limiter.check_and_spend(b, budget_only, body(1)).await.expect_err("now it is spent");
        assert_eq!(named(spent), budget);

        // A declared body larger than the whole budget never fits: refused before the store
        // is asked, so it spends no rate either.
        let c = usage("c");
        let never = limiter.check_and_spend(c, &both, body(1001)).await.expect_err("more than the budget");
        assert!(matches!(never, Refused::NeverFits { bytes: 1001, .. }), "{never:?}");
        limiter.check_and_spend(c, &both, body(1000)).await.expect("rate and budget whole");
    }

    #[tokio::test]
    async fn rates_and_budgets_are_spent_all_or_none_in_process() {
        rates_and_budgets_are_spent_all_or_none(Arc::new(Limiter::in_process())).await;
    }

    /// The shared store's reservations: as much as the body has passed (a small body is
    /// charged at most twice its size), at most max(64 KiB, budget / 64) and the smallest
    /// budget, never less than the frame needs.
    #[test]
    fn a_reservation_grows_with_the_body_up_to_its_chunk_and_covers_what_is_needed() {
        const KIB: u64 = 1024;
        let hour = [100 * KIB];
        assert_eq!(reservation(16 * KIB, 0, hour), 16 * KIB, "a body's first frame reserves just itself");
        assert_eq!(reservation(16 * KIB, 16 * KIB, hour), 16 * KIB);
        assert_eq!(reservation(16 * KIB, 48 * KIB, hour), 48 * KIB, "then as much as has passed");
        assert_eq!(reservation(16 * KIB, 10 * 1024 * KIB, hour), RESERVE_MIN, "at most 64 KiB of a small budget");
        let gib = 1024 * 1024 * KIB;
        assert_eq!(reservation(KIB, 100 * gib, [gib]), gib / RESERVE_SHARE, "1/64 of a large one");
        assert_eq!(reservation(KIB, 100 * gib, [gib, 100 * KIB]), RESERVE_MIN, "the smallest chunk of all budgets");
        assert_eq!(reservation(KIB, gib, [32 * KIB]), 32 * KIB, "never more than the smallest budget");
        assert_eq!(reservation(40 * KIB, gib, [32 * KIB]), 40 * KIB, "what must pass, even if the budget refuses it");
        assert_eq!(reservation(16 * KIB, 100 * KIB, []), 100 * KIB, "no budget: no bound but the body");
    }

    #[test]
    fn c21_burst_equals_the_limit_then_retry_after_from_the_quota() {
        let clock = FakeRelativeClock::default();
        let limiter = LocalLimiter::new(clock.clone());
        let limits = [rate(3, 60)];
        for _ in 0..3 {
            assert!(limiter.check_and_spend(usage("a"), &limits).is_ok());
        }
        let refused = limiter.check_and_spend(usage("a"), &limits).expect_err("the fourth is over");
        assert_eq!(refused.limit.reason.line, Some(9));
        assert_eq!(refused.retry_after_secs(), 20, "one cell per 20 s");
        assert!(limiter.check_and_spend(usage("b"), &limits).is_ok(), "another agent has its own budget");
        clock.advance(Duration::from_secs(20));
        assert!(limiter.check_and_spend(usage("a"), &limits).is_ok(), "one cell came back");
    }

    #[test]
    fn x1_every_limit_applies_and_zero_refuses() {
        let limiter = LocalLimiter::new(FakeRelativeClock::default());
        let limits = [rate(10, 60), rate(1, 3600)];
        assert!(limiter.check_and_spend(usage("a"), &limits).is_ok());
        let refused = limiter.check_and_spend(usage("a"), &limits).expect_err("the hourly limit refuses");
        assert_eq!(refused.limit.kind, LimitKind::Rate { requests: 1, window_s: 3600 });
        let zero = limiter.check_and_spend(usage("a"), &[rate(0, 60)]).expect_err("zero requests never pass");
        assert_eq!(zero.retry_after_secs(), 60);
    }

    #[test]
    fn concurrency_slots_come_back_when_the_permit_drops() {
        let limiter = LocalLimiter::new(FakeRelativeClock::default());
        let limits = [concurrent(2)];
        let first = limiter.check_and_spend(usage("a"), &limits).expect("slot 1");
        let second = limiter.check_and_spend(usage("a"), &limits).expect("slot 2");
        assert!(limiter.check_and_spend(usage("a"), &limits).is_err(), "the third is refused, not queued");
        drop(first);
        let third = limiter.check_and_spend(usage("a"), &limits).expect("a slot came back");
        drop((second, third));
        assert_eq!(limiter.key_count(), 0, "an idle concurrency key is removed");
    }

    #[test]
    fn a_refused_rate_gives_the_concurrency_slot_back() {
        let limiter = LocalLimiter::new(FakeRelativeClock::default());
        let limits = [concurrent(1), rate(1, 60)];
        let permit = limiter.check_and_spend(usage("a"), &limits).expect("first");
        drop(permit);
        assert!(limiter.check_and_spend(usage("a"), &limits).is_err(), "the rate refuses");
        assert!(limiter.check_and_spend(usage("a"), &[concurrent(1)]).is_ok(), "the slot was not kept");
    }

    /// SEMANTICS R10, a known limit pinned on purpose: a site's limits are kept per host as
    /// the request names it, so the same site under its IP literal has its own budget, in
    /// process and in the keys the Redis store uses. Keying by address would merge unrelated
    /// sites behind one CDN address; change this only with R10.
    #[test]
    fn r10_a_site_under_its_ip_literal_has_its_own_budget_keys_are_per_host_as_named() {
        let limiter = LocalLimiter::new(FakeRelativeClock::default());
        let limits = [rate(1, 60)];
        let by_name = usage("a");
        let by_address = Usage { agent: "a", origin: "https://93.184.215.14:443", host: "93.184.215.14" };
        assert!(limiter.check_and_spend(by_name, &limits).is_ok());
        assert!(limiter.check_and_spend(by_name, &limits).is_err(), "the name's budget of one is spent");
        assert!(limiter.check_and_spend(by_address, &limits).is_ok(), "the IP literal starts its own budget");
        let key = |u: Usage<'_>| limits[0].key(u.agent, u.origin, u.host);
        assert_ne!(key(by_name), key(by_address), "the shared store's keys differ the same way");
        assert!(key(by_name).contains("example.com") && key(by_address).contains("93.184.215.14"));
    }

    #[test]
    fn idle_keys_are_evicted_after_traffic_stops() {
        let clock = FakeRelativeClock::default();
        let limiter = LocalLimiter::new(clock.clone());
        let limits = [rate(3, 60)];
        for i in 0..1000 {
            let agent = format!("agent-{i}");
            limiter.check_and_spend(usage(&agent), &limits).expect("a fresh key passes");
        }
        assert_eq!(limiter.key_count(), 1000);
        clock.advance(EVICTION_INTERVAL + Duration::from_secs(60));
        limiter.check_and_spend(usage("late"), &limits).expect("passes");
        assert_eq!(limiter.key_count(), 1, "only the key used after the pause is left");
    }
}
