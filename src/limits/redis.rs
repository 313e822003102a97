//! The shared store (DESIGN §10): every replica's counters in one Redis (or Valkey), so a
//! fleet behind a load balancer enforces each site's limits as one proxy would.
//!
//! One check is one round trip: a Lua script (`CHECK`, run with `EVALSHA` by
//! `redis::Script`, which loads it again after a Redis restart) takes every concurrency slot
//! and spends every rate of the request, or none of them. Rates are GCRA with the same
//! quotas as the in-process store (period = window / limit, burst = the limit, a crawl delay
//! one request per delay) on Redis's own clock, so replicas need no clock agreement; each
//! rate key expires when its state equals a fresh one. Concurrency slots are members of a
//! sorted set per key, scored by lease expiry: a `Lease` renews them every lease / 3 while
//! its request runs and removes them on drop, and a replica that dies leaks its slots for
//! at most one lease.
//!
//! Byte budgets are GCRA keys of the same script, kept in µs, spent with a cost of n bytes
//! (`RedisLimiter::spend_bytes`): a request's declared body (and its receiving budgets'
//! check for a byte left) in one call before forwarding, its streamed bytes a reservation at
//! a time (`super::ByteBudgets`), so no frame waits for Redis unless its reservation ran out.
//!
//! Keys are the same on every replica: the prefix, the kind, the quota and [`Limit::key`]'s
//! parts (SHA-256 of them when long), never the in-process store's per-process hash.
//!
//! When Redis does not answer within `timeout`, `on_failure` decides: the in-process store
//! (`local`, counted, logged at most once a second, Redis tried again on the next check),
//! a 503 (`deny`; a streamed body is cut) or no limit (`allow`); a request whose byte spend
//! was settled so settles the rest of its bytes the same way without asking Redis again.
//! Each call's round trip and each fallback to the local store are counted in
//! [`StoreMetrics`].
//!
//! A check the replica stopped waiting for spends nothing, however late it reaches Redis (a
//! Redis frozen, then resumed, runs the commands it had queued): every check carries a
//! deadline on Redis's clock, and the script answers "expired" past it without touching a
//! key. The replica estimates Redis's clock by `clock::RedisClock` from the `TIME` of every answer.
//! [`RedisLimiter::warm`] connects, loads the scripts and reads that clock once before the
//! proxy serves, so no first check pays for a cold connection.
//!
//! `rediss://` connects with rustls (ring) and trusts what origins are trusted with: the
//! system's roots and `[upstream] extra_ca_files` ([`crate::tls::upstream::trusted_roots_pem`]).
//! A certificate that does not verify is a store that does not answer, never a plain
//! connection; its log line says TLS verification failed.
//!
//! Never: writes responses, decides which limits apply, logs the URL (it may hold a password).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Script;
use redis::aio::ConnectionManager;
use sha2::{Digest, Sha256};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tracing::{info, warn};

mod clock;
mod config;

use self::clock::RedisClock;
pub use self::config::{OnFailure, RedisConfig};
use super::{ByteCost, ByteItem, Counted, Exceeded, LocalLimiter, Permit, Refused, Spend, Usage};
use crate::error_chain::error_chain;
use crate::metrics::StoreMetrics;
use crate::policy::{Limit, LimitKind};
use crate::redis_connection::{ConnectError, FailureLog};

/// Keys longer than this (prefix included) are replaced by a SHA-256 of their parts.
const MAX_PLAIN_KEY: usize = 160;
/// How long start-up waits for Redis ([`RedisLimiter::warm`]) before serving without it.
const WARM_LIMIT: Duration = Duration::from_secs(2);

/// Takes every slot and spends every rate (or byte budget) of one call, or nothing; past its
/// deadline, touches nothing.
///
/// KEYS: the concurrency keys, then the GCRA keys. ARGV: the deadline (ms on Redis's clock;
/// 0 for none), the number of concurrency keys, this slot's member, the lease (ms), each
/// concurrency key's maximum, then per GCRA key its tick (µs: 1000 for a rate kept in ms, 1
/// for a byte budget kept in µs), its cost and its allowance in ticks: spending moves the
/// key's arrival time to max(it, now) + cost, allowed while that is at most the allowance
/// ahead of now. A rate's cost is its period and its allowance period × limit (governor's
/// `t` and `tau + t`); a zero limit costs its window with no allowance, so it always refuses
/// for the window. A cost of 0 only checks (a byte budget checked for bytes left: the
/// allowance is the window less their cost). Answers `{0, 0, now}` when all passed,
/// `{i, wait_ms, now}` for the first key `i` (1-based) that refused, or `{-1, 0, now}` when
/// it ran after its deadline; `now` is Redis's clock in ms.
const CHECK: &str = r"
local time = redis.call('TIME')
local now_us = tonumber(time[1]) * 1000000 + tonumber(time[2])
local now = math.floor(now_us / 1000)
local deadline = tonumber(ARGV[1])
if deadline > 0 and now > deadline then
  return {-1, 0, now}
end
local concurrent = tonumber(ARGV[2])
local member = ARGV[3]
local lease = tonumber(ARGV[4])
for i = 1, concurrent do
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  if redis.call('ZCARD', KEYS[i]) >= tonumber(ARGV[4 + i]) then
    return {i, 1000, now}
  end
end
local spends = {}
for i = concurrent + 1, #KEYS do
  local at = 4 + concurrent + 3 * (i - concurrent) - 2
  local tick = tonumber(ARGV[at])
  local cost = tonumber(ARGV[at + 1])
  local allowance = tonumber(ARGV[at + 2])
  local clock = math.floor(now_us / tick)
  local tat = math.max(tonumber(redis.call('GET', KEYS[i])) or clock, clock) + cost
  if tat - clock > allowance then
    return {i, math.ceil((tat - clock - allowance) * tick / 1000), now}
  end
  if cost > 0 then
    spends[i] = {tat, math.max(1, math.ceil((tat - clock) * tick / 1000))}
  end
end
for i = 1, concurrent do
  redis.call('ZADD', KEYS[i], now + lease, member)
  redis.call('PEXPIRE', KEYS[i], lease)
end
for i, spend in pairs(spends) do
  redis.call('SET', KEYS[i], spend[1], 'PX', spend[2])
end
return {0, 0, now}
";

/// Pushes a lease's expiry to now + lease on each of its keys where the member still is.
/// KEYS: the concurrency keys. ARGV: the member, the lease (ms).
const RENEW: &str = r"
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local lease = tonumber(ARGV[2])
for i = 1, #KEYS do
  if redis.call('ZADD', KEYS[i], 'XX', 'CH', now + lease, ARGV[1]) == 1 then
    redis.call('PEXPIRE', KEYS[i], lease)
  end
end
return 0
";

/// The Redis store, with the in-process store it falls back to.
pub struct RedisLimiter {
    manager: ConnectionManager,
    check: Script,
    renew: Arc<Script>,
    prefix: String,
    timeout: Duration,
    lease: Duration,
    on_failure: OnFailure,
    fallback: LocalLimiter,
    metrics: StoreMetrics,
    /// This replica's part of every slot member: random, so two processes on one host
    /// (or a restarted one) never share a member.
    instance: String,
    next_slot: AtomicU64,
    /// Redis's clock, for each check's deadline.
    clock: RedisClock,
    /// Checks Redis did not answer in time (each fell back to `on_failure`).
    failures: AtomicU64,
    failure_log: FailureLog,
}

impl RedisLimiter {
    /// A store on `config`, trusting the system's roots and `extra_ca_files` for
    /// `rediss://`, counting into `metrics`; connects when [warmed](Self::warm) or on the
    /// first check (so a Redis that is down at start is `on_failure`'s business, not a
    /// start-up error). Call inside a tokio runtime.
    ///
    /// # Errors
    /// [`ConnectError`] when the connection cannot be set up (`crate::redis_connection`).
    pub fn new(config: &RedisConfig, extra_ca_files: &[PathBuf], metrics: StoreMetrics) -> Result<Self, ConnectError> {
        let manager = config.connection().connect(extra_ca_files)?;
        Ok(RedisLimiter {
            manager,
            check: Script::new(CHECK),
            renew: Arc::new(Script::new(RENEW)),
            prefix: config.key_prefix.clone(),
            timeout: config.timeout,
            lease: config.lease,
            on_failure: config.on_failure,
            fallback: LocalLimiter::new(governor::clock::DefaultClock::default()),
            metrics,
            instance: format!("{:016x}", rand::random::<u64>()),
            next_slot: AtomicU64::new(0),
            clock: RedisClock::new(config.timeout),
            failures: AtomicU64::new(0),
            failure_log: FailureLog::default(),
        })
    }

    /// [`super::Limiter::check_and_spend`] for this store.
    ///
    /// # Errors
    /// [`Refused`]: a limit refused, or Redis did not answer and `on_failure = "deny"`.
    pub async fn check_and_spend(&self, usage: Usage<'_>, limits: &[Limit]) -> Result<Permit, Refused> {
        let call = self.call(usage, limits);
        if call.limits.is_empty() {
            return Ok(Permit::default());
        }
        let keys = call.concurrent_keys.iter().chain(&call.rate_keys);
        match self.run(keys, call.concurrent_keys.len(), &call.member, &call.args).await {
            Answer::Passed => {
                let lease = (!call.concurrent_keys.is_empty()).then(|| {
                    Lease::start(
                        self.manager.clone(),
                        Arc::clone(&self.renew),
                        call.concurrent_keys,
                        call.member,
                        self.lease,
                    )
                });
                Ok(Permit { slots: Vec::new(), lease })
            }
            Answer::Refused { key, wait } => match call.limits.get(key) {
                Some(limit) => Err(Refused::Exceeded(Exceeded { limit: (*limit).clone(), retry_after: wait })),
                None => self.unavailable(
                    &format!("the check script named key {} of {}", key + 1, call.limits.len()),
                    |local| local.check_and_spend(usage, limits),
                    Permit::default(),
                ),
            },
            Answer::Unavailable(error) => {
                self.unavailable(&error, |local| local.check_and_spend(usage, limits), Permit::default())
            }
        }
    }

    /// [`super::Limiter::spend_bytes`] for this store: every item in one run of [`CHECK`]
    /// (byte budgets are GCRA keys in µs), all or none; settled by `on_failure` when Redis
    /// does not answer.
    ///
    /// # Errors
    /// [`Refused`]: a budget has not the bytes left, or Redis did not answer and
    /// `on_failure = "deny"`.
    pub(super) async fn spend_bytes(&self, usage: Usage<'_>, items: &[ByteItem<'_>]) -> Result<Counted, Refused> {
        let mut keys = Vec::new();
        let mut args = Vec::new();
        let mut limits = Vec::new();
        for item in items {
            let LimitKind::Bytes { direction, bytes: budget, window_s } = item.limit.kind else { continue };
            let Some(cost) = ByteCost::of(item.limit, item.bytes, MICROS).map_err(Refused::Exceeded)? else { continue };
            let (spent, allowance) = match item.spend {
                Spend::Yes => (cost.cost, cost.window),
                Spend::No => (0, cost.window - cost.cost),
            };
            keys.push(self.key(&format!("bytes:{}:{budget}/{window_s}", direction.as_str()), item.limit, usage));
            args.extend([1, u64::try_from(spent).unwrap_or(u64::MAX), u64::try_from(allowance).unwrap_or(u64::MAX)]);
            limits.push(item.limit);
        }
        if keys.is_empty() {
            return Ok(Counted::InStore);
        }
        let settled = |()| Counted::Settled;
        match self.run(&keys, 0, "", &args).await {
            Answer::Passed => Ok(Counted::InStore),
            Answer::Refused { key, wait } => match limits.get(key) {
                Some(limit) => Err(Refused::Exceeded(Exceeded { limit: (*limit).clone(), retry_after: wait })),
                None => self
                    .unavailable(
                        &format!("the check script named key {} of {}", key + 1, limits.len()),
                        |local| local.spend_items(usage, items),
                        (),
                    )
                    .map(settled),
            },
            Answer::Unavailable(error) => {
                self.unavailable(&error, |local| local.spend_items(usage, items), ()).map(settled)
            }
        }
    }

    /// Byte spends of a request whose earlier spend Redis did not answer: settled by
    /// `on_failure` at once (in process, refused or uncounted) without asking Redis again.
    ///
    /// # Errors
    /// [`Refused::Exceeded`] from the in-process store under `on_failure = "local"`.
    pub(super) fn settle_bytes(&self, usage: Usage<'_>, items: &[ByteItem<'_>]) -> Result<(), Refused> {
        self.settle(|local| local.spend_items(usage, items), ())
    }

    /// One run of [`CHECK`] with `keys` (the first `concurrent` of them concurrency keys),
    /// the slot `member` and the rest of `args`, carrying a deadline and timed out after
    /// `timeout`; tried once more on a new connection when the old one was gone.
    async fn run<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k String>,
        concurrent: usize,
        member: &str,
        args: &[u64],
    ) -> Answer {
        let mut invocation = self.check.prepare_invoke();
        let mut count = 0;
        for key in keys {
            invocation.key(key);
            count += 1;
        }
        let sent = Instant::now();
        invocation.arg(self.clock.deadline(sent));
        invocation.arg(concurrent).arg(member).arg(millis(self.lease));
        for arg in args {
            invocation.arg(*arg);
        }
        let mut connection = self.manager.clone();
        let attempts = async {
            match invocation.invoke_async::<(i64, u64, i64)>(&mut connection).await {
                // The connection was gone (Redis restarted, say): the manager has begun
                // replacing it, so try once more on the new one, with the same deadline. If
                // the first one ran after all and only its answer was lost, this spends
                // twice for one call: stricter than the limit, never looser.
                Err(err) if err.is_unrecoverable_error() => invocation.invoke_async(&mut connection).await,
                answered => answered,
            }
        };
        let answer = tokio::time::timeout(self.timeout, attempts).await;
        self.metrics.round_trip(sent.elapsed());
        if let Ok(Ok((_, _, redis_now))) = answer {
            self.clock.learn(redis_now, Instant::now());
        }
        match answer {
            Ok(Ok((EXPIRED, _, _))) => Answer::Unavailable(
                "the check reached Redis after its deadline ([limits.redis] timeout) and spent nothing".to_owned(),
            ),
            Ok(Ok((0, _, _))) => Answer::Passed,
            Ok(Ok((refused, wait_ms, _))) => match usize::try_from(refused - 1) {
                Ok(key) if key < count => Answer::Refused { key, wait: Duration::from_millis(wait_ms) },
                _ => Answer::Unavailable(format!("the check script named key {refused} of {count}")),
            },
            Ok(Err(err)) => Answer::Unavailable(describe(&err)),
            Err(_) => Answer::Unavailable("no answer within [limits.redis] timeout".to_owned()),
        }
    }

    /// Connects, loads both scripts and reads Redis's clock (one round trip once connected),
    /// waiting at most `WARM_LIMIT`, so the first checks find a warm connection and carry a
    /// deadline. Start-up calls it before serving. When Redis does not answer, logs so at WARN
    /// with what `on_failure` will do, and returns: each check then tries Redis again.
    pub async fn warm(&self) {
        let mut pipe = redis::pipe();
        pipe.cmd("SCRIPT").arg("LOAD").arg(CHECK).ignore();
        pipe.cmd("SCRIPT").arg("LOAD").arg(RENEW).ignore();
        pipe.cmd("TIME");
        let mut connection = self.manager.clone();
        let answer = tokio::time::timeout(WARM_LIMIT, pipe.query_async::<((i64, i64),)>(&mut connection)).await;
        let on_failure = self.on_failure.meaning();
        match answer {
            Ok(Ok(((seconds, micros),))) => {
                self.clock.learn(seconds.saturating_mul(1000).saturating_add(micros / 1000), Instant::now());
                info!("limits store ready: connected to Redis, scripts loaded");
            }
            Ok(Err(err)) => {
                warn!("limits store unreachable at start: {}; {on_failure} until it answers", describe(&err))
            }
            Err(_) => warn!(
                "limits store unreachable at start: no answer within {WARM_LIMIT:?}; {on_failure} until it answers"
            ),
        }
    }

    /// How many checks Redis did not answer in time, or answered with an error, since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// How many keys the fallback store holds.
    pub fn local_key_count(&self) -> usize {
        self.fallback.key_count()
    }

    /// `on_failure` for one call Redis did not answer ([`settle`](Self::settle), with `local`
    /// counting into the fallback store and `uncounted` what `allow` answers); counted,
    /// logged at most once a second.
    fn unavailable<T>(
        &self,
        error: &str,
        local: impl FnOnce(&LocalLimiter) -> Result<T, Exceeded>,
        uncounted: T,
    ) -> Result<T, Refused> {
        self.failures.fetch_add(1, Ordering::Relaxed);
        if self.failure_log.due() {
            let on_failure = self.on_failure.meaning();
            warn!(failures = self.failures(), "limits store unavailable: {error}; {on_failure}");
        }
        if self.on_failure == OnFailure::Local {
            self.metrics.fallback();
        }
        self.settle(local, uncounted)
    }

    /// What `on_failure` answers without Redis: `local` counts in the fallback store, `deny`
    /// refuses (503), `allow` answers `uncounted`.
    fn settle<T>(&self, local: impl FnOnce(&LocalLimiter) -> Result<T, Exceeded>, uncounted: T) -> Result<T, Refused> {
        match self.on_failure {
            OnFailure::Local => local(&self.fallback).map_err(Refused::Exceeded),
            OnFailure::Deny => Err(Refused::StoreUnavailable),
            OnFailure::Allow => Ok(uncounted),
        }
    }

    /// The script's keys and arguments for one check, in the in-process store's order
    /// (concurrency first, then rates as listed; a crawl delay of 0 counts nothing).
    fn call<'l>(&self, usage: Usage<'_>, limits: &'l [Limit]) -> Call<'l> {
        let mut call = Call::default();
        for limit in limits {
            if let LimitKind::Concurrent { max } = limit.kind {
                call.concurrent_keys.push(self.key("slots", limit, usage));
                call.args.push(u64::from(max));
                call.limits.push(limit);
            }
        }
        let concurrent = call.limits.len();
        let mut rates = Vec::new();
        for limit in limits {
            let (requests, window_ms) = match limit.kind {
                LimitKind::Rate { requests, window_s } => (requests, u64::from(window_s.max(1)) * 1000),
                // Byte budgets are spent as bodies stream (`spend_bytes`).
                LimitKind::Delay { millis: 0 } | LimitKind::Concurrent { .. } | LimitKind::Bytes { .. } => continue,
                LimitKind::Delay { millis } => (1, u64::from(millis)),
            };
            call.rate_keys.push(self.key(&format!("rate:{requests}/{window_ms}"), limit, usage));
            // Whole milliseconds, at least 1: the in-process store keeps nanoseconds, so a
            // quota past 1000 requests a second rounds here (no site asks for that).
            let (cost, allowance) = match requests {
                0 => (window_ms, 0),
                requests => {
                    let period = (window_ms / u64::from(requests)).max(1);
                    (period, period * u64::from(requests))
                }
            };
            rates.extend([MILLIS_TICK, cost, allowance]);
            call.limits.push(limit);
        }
        call.args.extend(rates);
        debug_assert_eq!(call.limits.len(), concurrent + call.rate_keys.len(), "one limit per key");
        call.member = format!("{}:{}", self.instance, self.next_slot.fetch_add(1, Ordering::Relaxed));
        call
    }

    /// `<prefix><kind>:<Limit::key>`, or `<prefix><kind>:sha256:<hex>` when that is long:
    /// the same on every replica.
    fn key(&self, kind: &str, limit: &Limit, usage: Usage<'_>) -> String {
        let parts = limit.key(usage.agent, usage.origin, usage.host);
        if self.prefix.len() + kind.len() + parts.len() < MAX_PLAIN_KEY {
            return format!("{}{kind}:{parts}", self.prefix);
        }
        let digest = Sha256::digest(parts.as_bytes());
        format!("{}{kind}:sha256:{}", self.prefix, hex::encode(digest))
    }
}

/// The check script's answer when it ran after its deadline.
const EXPIRED: i64 = -1;
/// A rate key's tick in [`CHECK`]: its state is kept in ms (µs per tick).
const MILLIS_TICK: u64 = 1000;
/// Microseconds in a second: a byte budget key's tick in [`CHECK`].
const MICROS: u128 = 1_000_000;

/// How one run of [`CHECK`] went.
enum Answer {
    /// Every key passed and was spent.
    Passed,
    /// Key `key` (0-based, in the order given) refused, for `wait`.
    Refused { key: usize, wait: Duration },
    /// Redis did not answer in time, answered with an error, or ran it past its deadline.
    Unavailable(String),
}

/// One check's keys, arguments and the limit behind each key, in key order.
#[derive(Default)]
struct Call<'l> {
    concurrent_keys: Vec<String>,
    rate_keys: Vec<String>,
    args: Vec<u64>,
    limits: Vec<&'l Limit>,
    member: String,
}

/// A request's concurrency slots in Redis: renewed while it lives, removed on drop.
pub(super) struct Lease {
    renewal: JoinHandle<()>,
    release: Option<(ConnectionManager, Vec<String>, String)>,
}

impl Lease {
    fn start(
        manager: ConnectionManager,
        renew: Arc<Script>,
        keys: Vec<String>,
        member: String,
        lease: Duration,
    ) -> Lease {
        let (mut connection, renew_keys, renew_member) = (manager.clone(), keys.clone(), member.clone());
        let renewal = tokio::spawn(async move {
            let mut tick = tokio::time::interval(lease / 3);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let mut invocation = renew.prepare_invoke();
                for key in &renew_keys {
                    invocation.key(key);
                }
                invocation.arg(&renew_member).arg(millis(lease));
                // A lost renewal is retried on the next tick; the lease covers two of them.
                let _ = tokio::time::timeout(lease / 3, invocation.invoke_async::<i64>(&mut connection)).await;
            }
        });
        Lease { renewal, release: Some((manager, keys, member)) }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.renewal.abort();
        let (Some((mut connection, keys, member)), Ok(runtime)) = (self.release.take(), Handle::try_current()) else {
            return;
        };
        // Spawned: a drop cannot wait. If it is lost, the lease runs out instead.
        runtime.spawn(async move {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.zrem(key, &member).ignore();
            }
            let _ = pipe.query_async::<()>(&mut connection).await;
        });
    }
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lease").finish_non_exhaustive()
    }
}

/// A Redis error for the fallback's log line, with every cause; a certificate rustls refused
/// (`rediss://`) is named as such, with where the trust comes from.
fn describe(err: &redis::RedisError) -> String {
    let chain = error_chain(err);
    // rustls's `Error::InvalidCertificate` reads "invalid peer certificate: …"; the client
    // hands it over inside an io::Error, whose `source()` skips it, so the text is what is left.
    if chain.contains("invalid peer certificate") {
        return format!(
            "TLS verification failed: {chain}; the server's certificate must chain to a system root or to \
             [upstream] extra_ca_files and name the host of [limits.redis] url"
        );
    }
    chain
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::testing::problems;

    #[test]
    fn redis_settings_parse_and_every_bad_value_is_named_with_its_fix() {
        let text = "[limits]\nstore = \"redis\"\n[limits.redis]\nurl = \"redis://10.0.0.5:6380/2\"\n\
                    password_env = \"REDIS_PASSWORD\"\ntimeout = \"20ms\"\non_failure = \"deny\"\nlease = \"5s\"\n";
        let config = Config::from_toml_str(text, "agentgate.toml").expect("valid");
        assert_eq!(config.limits.store, super::super::Store::Redis);
        assert_eq!(config.limits.redis.on_failure, super::OnFailure::Deny);
        assert_eq!(config.limits.redis.lease, std::time::Duration::from_secs(5));

        let bad = "[limits.redis]\nurl = \"http://:hunter2@example.com\"\npassword_env = \"1 BAD\"\n\
                   key_prefix = \"a b\"\ntimeout = \"0s\"\nlease = \"10ms\"\n";
        let found = problems(bad);
        assert_eq!(found.len(), 5, "{found:#?}");
        assert!(found.iter().all(|p| !p.contains("hunter2")), "the URL's password is never echoed: {found:#?}");
        for key in ["url", "password_env", "key_prefix", "timeout", "lease"] {
            assert!(found.iter().any(|p| p.starts_with(&format!("[limits.redis] {key}"))), "{key}: {found:#?}");
        }
        let tls = "[limits]\nstore = \"redis\"\n[limits.redis]\nurl = \"rediss://redis.internal:6380\"\n";
        Config::from_toml_str(tls, "agentgate.toml").expect("rediss:// is TLS to Redis");
        let insecure = problems("[limits.redis]\nurl = \"rediss://:hunter2@127.0.0.1:6379/#insecure\"\n");
        assert!(insecure[0].contains("extra_ca_files") && !insecure[0].contains("hunter2"), "{insecure:?}");
        let store = Config::from_toml_str("[limits]\nstore = \"etcd\"\n", "agentgate.toml").expect_err("unknown store");
        assert!(store.to_string().contains("memory"), "{store}");
    }
}
