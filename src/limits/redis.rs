//! The shared store (DESIGN §10): every replica's counters in one Redis (or Valkey), so a
//! fleet behind a load balancer enforces each site's limits as one proxy would.
//!
//! Admitting a request is one round trip: a Lua script (`CHECK`, run with `EVALSHA`, loaded
//! again when Redis answers `NOSCRIPT` after a restart) takes every concurrency slot, spends
//! the declared body's bytes from (or checks the floor of) every byte budget and spends
//! every rate of the request, or none of them. Rates are GCRA with the same
//! quotas as the in-process store (period = window / limit, burst = the limit, a crawl delay
//! one request per delay) on Redis's own clock, so replicas need no clock agreement; each
//! rate key expires when its state equals a fresh one. Concurrency slots are members of a
//! sorted set per key, scored by lease expiry: a `Lease` renews them every lease / 3 while
//! its request runs and removes them on drop, and a replica that dies leaks its slots for
//! at most one lease.
//!
//! Byte budgets are GCRA keys of the same script, kept in µs, spent with a cost of n bytes:
//! a request's declared body (and its budgets' floors) in the call that spends its rates,
//! then its response's declared length and its streamed bytes a reservation at a time
//! (`RedisLimiter::spend_bytes`, `super::ByteBudgets`), so no frame waits for Redis unless
//! its reservation ran out.
//!
//! Keys are the same on every replica: the prefix, the kind, the quota and [`Limit::key`]'s
//! parts (SHA-256 of them when long), never the in-process store's per-process hash. A
//! check writes its rate keys straight into the command it sends (no `String` per key); a
//! byte budget's key is made once per request (`RedisLimiter::budget`).
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

use redis::aio::ConnectionManager;
use redis::{Cmd, RedisResult, RedisWrite as _, Script};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tracing::{info, warn};

mod clock;
mod config;
mod keys;

use self::clock::RedisClock;
pub use self::config::{OnFailure, RedisConfig};
use self::keys::{Arg, GcraKey, Kind, MICROS, gcra_keys, write_key};
use super::{Budget, ByteCost, Counted, Exceeded, Items, LocalLimiter, Permit, Refused, Usage};
use crate::error_chain::error_chain;
use crate::metrics::StoreMetrics;
use crate::policy::{Limit, LimitKind};
use crate::redis_connection::{ConnectError, FailureLog};

/// How long start-up waits for Redis ([`RedisLimiter::warm`]) before serving without it.
const WARM_LIMIT: Duration = Duration::from_secs(2);

/// Takes every slot and spends every byte budget and rate of one call, or nothing; past its
/// deadline, touches nothing. Unchanged since the byte budgets joined the rates' call (a
/// fleet mid-upgrade runs one script).
///
/// KEYS: the concurrency keys, then the GCRA keys (a request's byte budgets, then its
/// rates: `keys::gcra_keys`). ARGV: the deadline (ms on Redis's clock;
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

    /// [`super::Limiter::check_and_spend`] for this store: every limit of `limits` for
    /// `usage` and every byte item in one run of [`CHECK`] (concurrency keys, then the byte
    /// budgets' keys, then the rates'), all or none; settled by `on_failure` (the in-process
    /// store checks the same, all or none) when Redis does not answer.
    ///
    /// # Errors
    /// [`Refused`]: a limit or a budget refused, or Redis did not answer and
    /// `on_failure = "deny"`.
    pub(super) async fn check_and_spend<'l>(
        &self,
        usage: Usage<'_>,
        limits: &[Limit],
        items: impl Items<'l>,
    ) -> Result<(Permit, Counted), Refused> {
        for item in items.clone() {
            // More bytes than a whole budget: refused without asking Redis.
            ByteCost::of(item.limit(), item.bytes, MICROS).map_err(Refused::Exceeded)?;
        }
        let slots = Slots::of(self, usage, limits);
        let gcra = || gcra_keys(limits, items.clone());
        if slots.is_none() && gcra().next().is_none() {
            return Ok((Permit::default(), Counted::InStore));
        }
        let settled = |permit| (permit, Counted::Settled);
        match self.run(usage, slots.as_ref(), gcra()).await {
            Answer::Passed => {
                let lease = slots.map(|slots| {
                    Lease::start(self.manager.clone(), Arc::clone(&self.renew), slots.keys, slots.member, self.lease)
                });
                Ok((Permit { lease, ..Permit::default() }, Counted::InStore))
            }
            Answer::Refused { key, wait } => {
                let concurrent = limits.iter().filter(|l| matches!(l.kind, LimitKind::Concurrent { .. }));
                match concurrent.chain(gcra().map(|key| key.limit)).nth(key) {
                    Some(limit) => Err(Refused::Exceeded(Exceeded { limit: limit.clone(), retry_after: wait })),
                    None => self
                        .unavailable(
                            &format!("the check script named key {} it was not given", key + 1),
                            |local| local.spend_all(usage, limits, items.clone()),
                            Permit::default(),
                        )
                        .map(settled),
                }
            }
            Answer::Unavailable(error) => self
                .unavailable(&error, |local| local.spend_all(usage, limits, items.clone()), Permit::default())
                .map(settled),
        }
    }

    /// [`super::Limiter::spend_bytes`] for this store: every item in one run of [`CHECK`]
    /// (byte budgets are GCRA keys in µs), all or none; settled by `on_failure` when Redis
    /// does not answer.
    ///
    /// # Errors
    /// [`Refused`]: a budget has not the bytes left, or Redis did not answer and
    /// `on_failure = "deny"`.
    pub(super) async fn spend_bytes<'l>(&self, items: impl Items<'l>) -> Result<Counted, Refused> {
        // No limit: the usage names no key.
        let usage = Usage { agent: "", origin: "", host: "" };
        self.check_and_spend(usage, &[], items).await.map(|(_, counted)| counted)
    }

    /// Byte spends of a request whose earlier spend Redis did not answer: settled by
    /// `on_failure` at once (in process, refused or uncounted) without asking Redis again.
    ///
    /// # Errors
    /// [`Refused::Exceeded`] from the in-process store under `on_failure = "local"`.
    pub(super) fn settle_bytes<'l>(&self, items: impl Items<'l>) -> Result<(), Refused> {
        self.settle(|local| local.spend_items(items), ())
    }

    /// `limit`'s byte budget for `usage`: its key in Redis, made once for the request, and in
    /// the fallback store; `None` when `limit` is not a byte budget.
    pub(super) fn budget(&self, limit: &Limit, usage: Usage<'_>) -> Option<Budget> {
        let LimitKind::Bytes { direction, bytes: budget, window_s } = limit.kind else { return None };
        let mut shared = String::new();
        // Writing into a String cannot fail.
        let _ = write_key(&mut shared, &self.prefix, Kind::Bytes { direction, budget, window_s }, limit, usage);
        Some(Budget { limit: limit.clone(), local: self.fallback.byte_key(limit, usage), shared })
    }

    /// One run of [`CHECK`] with the concurrency `slots` (of `usage`) and the `gcra` keys,
    /// written straight into one `EVALSHA` command, carrying a deadline and timed out after
    /// `timeout`; tried once more on a new connection when the old one was gone.
    async fn run<'a>(
        &self,
        usage: Usage<'_>,
        slots: Option<&Slots>,
        gcra: impl Iterator<Item = GcraKey<'a>> + Clone,
    ) -> Answer {
        let concurrent = slots.map_or(0, |slots| slots.keys.len());
        let count = concurrent + gcra.clone().count();
        let mut cmd = Cmd::with_capacity(7 + 4 * count, 64 * count);
        cmd.arg("EVALSHA").arg(self.check.get_hash()).arg(count);
        for key in slots.iter().flat_map(|slots| &slots.keys) {
            cmd.arg(key);
        }
        for key in gcra.clone() {
            match key.budget {
                Some(budget) => {
                    cmd.arg(&budget.shared);
                }
                // The command's buffer cannot fail a write.
                None => {
                    let _ = write_key(&mut Arg(cmd.writer_for_next_arg()), &self.prefix, key.kind, key.limit, usage);
                }
            }
        }
        let sent = Instant::now();
        cmd.arg(self.clock.deadline(sent)).arg(concurrent);
        cmd.arg(slots.map_or("", |slots| slots.member.as_str())).arg(millis(self.lease));
        for max in slots.iter().flat_map(|slots| &slots.maxes) {
            cmd.arg(*max);
        }
        for key in gcra {
            cmd.arg(key.tick).arg(key.cost).arg(key.allowance);
        }
        let mut connection = self.manager.clone();
        let attempts = async {
            match self.query(&cmd, &mut connection).await {
                // The connection was gone (Redis restarted, say): the manager has begun
                // replacing it, so try once more on the new one, with the same deadline. If
                // the first one ran after all and only its answer was lost, this spends
                // twice for one call: stricter than the limit, never looser.
                Err(err) if err.is_unrecoverable_error() => self.query(&cmd, &mut connection).await,
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

    /// `cmd` (an `EVALSHA` of [`CHECK`]) sent once; when Redis has lost the script (a
    /// restart, `SCRIPT FLUSH`: `NOSCRIPT`), loaded and sent again, as `redis::Script` does.
    async fn query(&self, cmd: &Cmd, connection: &mut ConnectionManager) -> RedisResult<(i64, u64, i64)> {
        match cmd.query_async(connection).await {
            Err(err) if err.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.check.load_async(connection).await?;
                cmd.query_async(connection).await
            }
            answered => answered,
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
}

/// A request's concurrency keys, each limit's maximum and its slot's member: what its
/// [`Lease`] keeps when the check passes.
struct Slots {
    keys: Vec<String>,
    maxes: Vec<u32>,
    member: String,
}

impl Slots {
    /// The concurrency limits among `limits` for `usage`, in order; `None` when there are
    /// none (a request that takes no slot allocates nothing for them).
    fn of(store: &RedisLimiter, usage: Usage<'_>, limits: &[Limit]) -> Option<Slots> {
        let mut slots: Option<Slots> = None;
        for limit in limits {
            let LimitKind::Concurrent { max } = limit.kind else { continue };
            let slots = slots.get_or_insert_with(|| Slots {
                keys: Vec::new(),
                maxes: Vec::new(),
                member: format!("{}:{}", store.instance, store.next_slot.fetch_add(1, Ordering::Relaxed)),
            });
            let mut key = String::new();
            // Writing into a String cannot fail.
            let _ = write_key(&mut key, &store.prefix, Kind::Slots, limit, usage);
            slots.keys.push(key);
            slots.maxes.push(max);
        }
        slots
    }
}

/// The check script's answer when it ran after its deadline.
const EXPIRED: i64 = -1;

/// How one run of [`CHECK`] went.
enum Answer {
    /// Every key passed and was spent.
    Passed,
    /// Key `key` (0-based, in the order given) refused, for `wait`.
    Refused { key: usize, wait: Duration },
    /// Redis did not answer in time, answered with an error, or ran it past its deadline.
    Unavailable(String),
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
    use std::process::Stdio;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, BufReader};
    use tokio::process::{Child, Command};

    use super::super::{Limiter, LimitsConfig, Store};
    use super::{OnFailure, RedisConfig};
    use crate::config::Config;
    use crate::config::testing::problems;
    use crate::metrics::StoreMetrics;

    type TestResult<T = ()> = Result<T, Box<dyn std::error::Error>>;

    /// A `redis-server` of this test's own on a free loopback port (no persistence), killed
    /// on drop, and its URL, once it says it accepts connections (bounded).
    async fn redis_server() -> TestResult<(Child, String)> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut lines = BufReader::new(child.stdout.take().ok_or("redis-server's output")?).lines();
        let ready = async {
            while let Some(line) = lines.next_line().await? {
                if line.contains("Ready to accept connections") {
                    return Ok(());
                }
            }
            Err::<(), Box<dyn std::error::Error>>("redis-server ended before it was ready".into())
        };
        tokio::time::timeout(Duration::from_secs(10), ready).await??;
        // Its log goes on being read, so it never waits on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok((child, format!("redis://127.0.0.1:{port}")))
    }

    /// The rates and the byte budgets of a request are one run of the check script: the same
    /// sequence the in-process store answers (`rates_and_budgets_are_spent_all_or_none`)
    /// gets the same answers from a real Redis, all or none across both.
    #[tokio::test]
    #[ignore = "needs redis-server"]
    async fn rates_and_budgets_are_spent_all_or_none_in_redis() -> TestResult {
        let (_redis, url) = redis_server().await?;
        // `deny`: an answer from the fallback would be a 503, never a pass.
        let redis =
            RedisConfig { url, on_failure: OnFailure::Deny, timeout: Duration::from_secs(2), ..RedisConfig::default() };
        let config = LimitsConfig { store: Store::Redis, redis };
        let limiter = Arc::new(Limiter::from_config(&config, &[], StoreMetrics::default())?);
        limiter.warm().await;
        super::super::tests::rates_and_budgets_are_spent_all_or_none(Arc::clone(&limiter)).await;
        assert_eq!(limiter.store_failures(), 0, "Redis answered every check");
        Ok(())
    }

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
