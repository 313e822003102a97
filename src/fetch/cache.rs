//! The per-origin policy cache: an origin's policy files (one per format) fetched in
//! parallel on first use (concurrent first requests share that one fetch and wait for it),
//! each file kept for its own freshness lifetime, only stale files fetched again (one
//! refresh at a time per origin, in the background while the stale copy may still be
//! served: stale-while-revalidate), the stale rules of each [`crate::policy::Format`]
//! applied to each re-fetch, a stale file revalidated rather than fetched whole when its
//! stored response has validators (a `304` renews its freshness with no body and no parse),
//! and memory bounded in bytes (`max_bytes`, each origin weighed
//! by its parsed policies) and in origins (`max_origins`); moka evicts by LRU with
//! frequency-based admission. Lookups (hit or miss), fetches and evictions are counted in
//! [`crate::metrics::Metrics`]; [`PolicyCache::cached`] shows an origin's files to the admin
//! API without fetching, each with the text of the copy in force so the console can show the
//! line that decided, and where the copy came from (the origin, or the shared store). With
//! `[cache] store = "redis"` a load first looks in the shared store ([`super::shared`]):
//! a fresh copy there is parsed and used; else one replica of the fleet takes the lease and
//! loads from the origin (revalidating the stale shared copy), and the others wait for its
//! value, at most `[cache.redis] wait`. The in-process cache stays in front: a request never
//! waits for Redis while the local copy is fresh. The responses each state was read from (status, headers, body up to
//! the format's size cap) are kept beside it and weighed with it: they carry the validators
//! and the text.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use super::Origin;
use super::file::PolicyFile;
use super::freshness::TtlBounds;
use super::get::Fetcher;
use super::run_log;
use super::shared::config::{CacheStore, SharedConfig};
use super::shared::value::{StoredFile, Value};
use super::shared::{STALE_USE, SharedCopy, SharedStore};
use super::transport::PolicyTransport;
use crate::metrics::Metrics;
use crate::policy::{
    FetchOutcome, Format, MAX_TTL, Policies, PolicyReport, Previous, Source, StaleRules, agents_txt, formats, refresh,
};
use crate::redis_connection::ConnectError;

mod archive;

/// The responses a format's state in force was read from, in the order fetched: its path,
/// then its fallback location when the first fell through (C1). They carry the validators a
/// refresh sends and the text the admin API shows.
pub(super) type Responses = Arc<[(&'static str, FetchOutcome)]>;

/// What [`Responses`] weigh: bodies and headers.
fn responses_bytes(responses: &Responses) -> usize {
    responses
        .iter()
        .map(|(_, outcome)| match outcome {
            FetchOutcome::Response { headers, body, .. } => headers.bytes() + body.len(),
            FetchOutcome::Failed(_) => 0,
        })
        .sum()
}

/// `[cache]`: the operator's bounds on the policy cache's memory. Owned here, composed into
/// the config by `crate::config` (docs/layering.md); the defaults are written only here.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Origins kept in memory; the least useful are evicted first (default 100,000).
    pub max_origins: u64,
    /// Bytes of parsed policies kept in memory, all origins together ([`Policies::weight`]
    /// plus a fixed cost per origin); the least useful origins are evicted first (default
    /// 256 MiB). Both bounds hold.
    pub max_bytes: u64,
    /// `memory` (each replica its own copies; the default) or `redis` (copies shared by
    /// the fleet through `[cache.redis]`).
    pub store: CacheStore,
    /// The shared store, read when `store = "redis"`.
    pub redis: SharedConfig,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_origins: 100_000,
            max_bytes: 256 * 1024 * 1024,
            store: CacheStore::Memory,
            redis: SharedConfig::default(),
        }
    }
}

/// Limits of the policy cache and its fetches: the operator's `[cache]` bounds and the
/// lifetimes the specs fix (which tests shorten).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSettings {
    /// The memory bounds (`[cache]`).
    pub bounds: CacheConfig,
    /// No file is used longer than this without a fetch, whatever its `Cache-Control`;
    /// also the lifetime of a response without one (default 24 h, B22, C5, D16; values
    /// above 24 h are cut to 24 h).
    pub max_ttl: Duration,
    /// No file is fetched again sooner than this, even with `no-store` or after a failure
    /// (default 60 s, C5).
    pub min_ttl: Duration,
    /// Time for fetching one file, every redirect and the body included (default 10 s, C4).
    /// AGENTS.md may take two of these: `/AGENTS.md`, then `/.well-known/agents.md`.
    pub fetch_timeout: Duration,
    /// How long a restricted agents.txt verdict is kept before the file is fetched again
    /// (default 5 min, B20).
    pub agents_txt_negative_ttl: Duration,
}

impl From<CacheConfig> for CacheSettings {
    fn from(bounds: CacheConfig) -> Self {
        CacheSettings {
            bounds,
            max_ttl: MAX_TTL,
            min_ttl: Duration::from_secs(60),
            fetch_timeout: Duration::from_secs(10),
            agents_txt_negative_ttl: Duration::from_secs(agents_txt::RESTRICTED_TTL_S),
        }
    }
}

impl Default for CacheSettings {
    fn default() -> Self {
        CacheSettings::from(CacheConfig::default())
    }
}

/// The policies of every origin agents visit, fetched on first use and kept fresh. Cheap to
/// clone: clones share one cache.
#[derive(Clone)]
pub struct PolicyCache {
    inner: Arc<Inner>,
}

struct Inner {
    fetcher: Fetcher,
    rules: StaleRules,
    entries: moka::future::Cache<Origin, Arc<Entry>>,
    /// Counts lookups, fetches and evictions.
    metrics: Arc<Metrics>,
    /// The fleet's shared copies (`[cache] store = "redis"`).
    shared: Option<SharedStore>,
    /// Where each body decided with is archived (`[audit] archive_dir`), once set.
    archive: std::sync::OnceLock<crate::archive::PolicyArchive>,
}

/// One origin: the snapshot in force, and the lock that lets one refresh run at a time.
/// Immutable: a refresh inserts a new entry with the same lock, so moka weighs it again.
struct Entry {
    snapshot: Snapshot,
    /// Held by the one refresh of this origin that runs, inline or in the background.
    refreshing: Arc<tokio::sync::Mutex<()>>,
    /// [`Snapshot::weight`] when the entry was made, in bytes (saturating at `u32::MAX`).
    weight: u32,
}

impl Entry {
    fn new(snapshot: Snapshot, refreshing: Arc<tokio::sync::Mutex<()>>) -> Arc<Entry> {
        let weight = u32::try_from(snapshot.weight()).unwrap_or(u32::MAX);
        Arc::new(Entry { snapshot, refreshing, weight })
    }
}

/// When one file's state goes stale.
#[derive(Debug, Clone, Copy)]
struct Freshness {
    fresh_until: Instant,
    /// When the content in force first went stale; later than now while it is fresh. A copy
    /// kept by a stale rule keeps this, so its grace counts from the first expiry.
    stale_since: Instant,
    /// The lifetime the content in force was fetched with.
    lifetime: Duration,
}

impl Freshness {
    fn new(now: Instant, ttl: Duration) -> Self {
        Freshness { fresh_until: now + ttl, stale_since: now + ttl, lifetime: ttl }
    }

    /// True when the file is fresh at `now`, or stale but still fit to serve while its
    /// refresh runs ([`refresh::serves_while_refreshing`]).
    fn serves_at(&self, now: Instant) -> bool {
        self.fresh_until > now
            || refresh::serves_while_refreshing(now.saturating_duration_since(self.stale_since), self.lifetime)
    }
}

macro_rules! snapshot {
    ($($field:ident: $format:ty),* $(,)?) => {
        /// The states of an origin and when each goes stale.
        struct Snapshot {
            policies: Arc<Policies>,
            freshness: Freshnesses,
            responses: AllResponses,
            /// The earliest `fresh_until` of the files.
            fresh_until: Instant,
            /// Where the copy came from.
            from: CopyFrom,
        }

        /// When each file of an origin goes stale, one field per format ([`formats!`]).
        #[derive(Debug, Clone, Copy)]
        struct Freshnesses {
            $($field: Freshness,)*
        }

        /// The responses of each file in force, one field per format.
        struct AllResponses {
            $($field: Responses,)*
        }

        impl AllResponses {
            fn bytes(&self) -> usize {
                [$(&self.$field),*].into_iter().map(responses_bytes).sum()
            }
        }

        impl Freshnesses {
            fn all(&self) -> impl Iterator<Item = &Freshness> {
                [$(&self.$field),*].into_iter()
            }
        }

        impl Inner {
            /// A snapshot with every file that is missing or stale in `previous` fetched (in
            /// parallel) and passed through its stale rule; fresh files are carried over. A
            /// file fetched only on demand ([`Format::unfetched`]) is fetched when `wanted`
            /// or when a copy of it is in force.
            async fn load(&self, origin: &Origin, previous: Option<&Snapshot>, wanted: bool) -> Snapshot {
                let started = Instant::now();
                let ($($field,)*) = tokio::join!($(
                    self.refresh_file::<$format>(
                        origin,
                        previous.map(|p| (&p.policies.$field, p.freshness.$field, &p.responses.$field)),
                        started,
                        wanted,
                    )
                ),*);
                let mut files = String::new();
                $(if previous.is_none_or(|p| !Arc::ptr_eq(&p.responses.$field, &$field.2)) {
                    run_log::describe(&mut files, &$field.2);
                    run_log::say_not_a_policy::<$format>(origin, &$field.0);
                })*
                if !files.is_empty() {
                    let ms = started.elapsed().as_millis() as u64;
                    tracing::info!(origin = %origin, files = %files, ms, "policies loaded");
                }
                let freshness = Freshnesses { $($field: $field.1,)* };
                let responses = AllResponses { $($field: $field.2,)* };
                let fresh_until = freshness.all().map(|f| f.fresh_until).min().unwrap_or(started);
                let policies = Arc::new(Policies { $($field: $field.0,)* });
                Snapshot { policies, freshness, responses, fresh_until, from: CopyFrom::Origin }
            }

            /// The most bytes a shared store value may have: every location's body at its
            /// format's cap, base64'd (4/3), and a generous allowance for headers and JSON.
            fn value_cap() -> usize {
                [$(<$format>::MAX_BYTES),*].iter().map(|cap| 2 * (cap + 1) * 4 / 3).sum::<usize>() + (1 << 20)
            }

            /// The snapshot of a shared store's `bytes` for `origin`: each format's stored
            /// responses parsed as a fetch's would be, its freshness moved onto this
            /// process's clock; `None` when the value is not one [`Value`] wrote.
            fn from_value(origin: &Origin, bytes: &[u8]) -> Option<Snapshot> {
                let names = [$(<$format>::NAME),*];
                let value = Value::read(bytes, &origin.to_string(), &names, Self::value_cap())?;
                let clock = Clock::now();
                let mut files = value.files.iter();
                $(let $field = {
                    let file = files.next()?;
                    let responses: Responses = Arc::from(file.responses::<$format>()?);
                    let freshness = Freshness {
                        fresh_until: clock.instant_at(file.fresh_until_ms),
                        stale_since: clock.instant_at(file.stale_since_ms),
                        lifetime: Duration::from_millis(file.lifetime_ms).min(MAX_TTL),
                    };
                    (Self::parse::<$format>(origin, &responses), freshness, responses)
                };)*
                let freshness = Freshnesses { $($field: $field.1,)* };
                let responses = AllResponses { $($field: $field.2,)* };
                let fresh_until = freshness.all().map(|f| f.fresh_until).min().unwrap_or(clock.instant);
                let policies = Arc::new(Policies { $($field: $field.0,)* });
                Some(Snapshot { policies, freshness, responses, fresh_until, from: CopyFrom::SharedStore })
            }
        }

        impl Snapshot {
            /// True when a file fetched only on demand has not been fetched for this origin.
            fn lacks_on_demand(&self) -> bool {
                false $(|| <$format>::is_unfetched(&self.policies.$field))*
            }

            /// This snapshot as the shared store keeps it, and the Redis TTL: the freshness
            /// of its longest-lived file plus [`STALE_USE`].
            fn value(&self, origin: &Origin) -> (Value, Duration) {
                let clock = Clock::now();
                let files = vec![$({
                    let f = self.freshness.$field;
                    let lifetime = u64::try_from(f.lifetime.as_millis()).unwrap_or(u64::MAX);
                    StoredFile::of::<$format>(
                        &self.responses.$field,
                        clock.wall_ms(f.fresh_until),
                        clock.wall_ms(f.stale_since),
                        lifetime,
                    )
                }),*];
                let fresh_for =
                    self.freshness.all().map(|f| f.fresh_until.saturating_duration_since(clock.instant)).max();
                (Value::new(origin.to_string(), files), fresh_for.unwrap_or_default() + STALE_USE)
            }
        }
    };
}
formats!(snapshot);

/// One cached policy file as the admin API shows it (`GET /policies`).
#[derive(Debug, Clone)]
pub struct CachedFile {
    /// Which file.
    pub source: Source,
    /// Its state: status, digest and diagnostics.
    pub report: PolicyReport,
    /// When the copy in force was fetched (approximate: derived from the monotonic clock).
    pub fetched_at: SystemTime,
    /// When it goes stale and is fetched again on the next request.
    pub fresh_until: SystemTime,
    /// The text of the copy in force (invalid UTF-8 replaced), when the origin served one
    /// with a 2xx status; at most the format's size cap.
    pub text: Option<Arc<str>>,
    /// Where the copy came from: this replica's fetch, or the shared store.
    pub from: CopyFrom,
}

/// Where a cached copy came from (the admin API's `from`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFrom {
    /// This replica fetched (or revalidated) it at the origin.
    Origin,
    /// Another replica did, and this one read it from the shared store (`[cache] store = "redis"`).
    SharedStore,
}

impl CopyFrom {
    /// `origin` or `shared_store`.
    pub fn as_str(self) -> &'static str {
        match self {
            CopyFrom::Origin => "origin",
            CopyFrom::SharedStore => "shared_store",
        }
    }
}

/// This process's monotonic clock and the wall clock read at one moment, to move instants
/// to and from the shared store's wall-clock milliseconds.
struct Clock {
    instant: Instant,
    wall_ms: u64,
}

impl Clock {
    fn now() -> Self {
        let wall = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
        Clock { instant: Instant::now(), wall_ms: u64::try_from(wall.as_millis()).unwrap_or(u64::MAX) }
    }

    /// `instant` in ms since the Unix epoch.
    fn wall_ms(&self, instant: Instant) -> u64 {
        match instant.checked_duration_since(self.instant) {
            Some(ahead) => self.wall_ms.saturating_add(u64::try_from(ahead.as_millis()).unwrap_or(u64::MAX)),
            None => self.wall_ms.saturating_sub(
                u64::try_from(self.instant.saturating_duration_since(instant).as_millis()).unwrap_or(u64::MAX),
            ),
        }
    }

    /// The instant of `wall_ms`, at most [`MAX_TTL`] ahead (a value from the future cannot
    /// keep a copy longer than a fetch could), and no earlier than this process can count.
    fn instant_at(&self, wall_ms: u64) -> Instant {
        if wall_ms >= self.wall_ms {
            self.instant + Duration::from_millis(wall_ms - self.wall_ms).min(MAX_TTL)
        } else {
            let ago = Duration::from_millis(self.wall_ms - wall_ms);
            self.instant.checked_sub(ago).unwrap_or(self.instant)
        }
    }
}

macro_rules! cached_files {
    ($($field:ident: $format:ty),* $(,)?) => {
        impl Snapshot {
            /// Each file's state and freshness, in the order of [`formats!`].
            fn files(&self) -> Vec<CachedFile> {
                let (now, wall) = (Instant::now(), SystemTime::now());
                // Monotonic instants shown as wall-clock times, relative to now.
                // A broken clock near the epoch cannot go further back: the epoch it is.
                let at = |instant: Instant| match instant.checked_duration_since(now) {
                    Some(ahead) => wall + ahead,
                    None => wall.checked_sub(now.saturating_duration_since(instant)).unwrap_or(SystemTime::UNIX_EPOCH),
                };
                vec![$({
                    let freshness = self.freshness.$field;
                    CachedFile {
                        source: <$format>::SOURCE,
                        report: <$format>::report(&self.policies.$field),
                        fetched_at: at(freshness.stale_since.checked_sub(freshness.lifetime).unwrap_or(freshness.stale_since)),
                        fresh_until: at(freshness.fresh_until),
                        text: text_of(&self.responses.$field),
                        from: self.from,
                    }
                },)*]
            }
        }
    };
}
formats!(cached_files);

impl Snapshot {
    /// True when every file may be served at `now` without waiting for a refresh.
    fn serves_at(&self, now: Instant) -> bool {
        self.freshness.all().all(|f| f.serves_at(now))
    }

    /// What the origin costs in memory: its parsed policies, the entry and its key.
    fn weight(&self) -> usize {
        self.policies.weight() + self.responses.bytes() + ENTRY_OVERHEAD
    }
}

/// The fixed cost of one cached origin beyond its policies: the entry, the snapshot, the
/// key and moka's own bookkeeping (a generous round figure).
const ENTRY_OVERHEAD: usize = 1024;

impl PolicyCache {
    /// An empty cache fetching through `transport`, counting lookups, fetches and
    /// evictions in `metrics`.
    pub fn new(transport: Arc<dyn PolicyTransport>, settings: CacheSettings, metrics: Arc<Metrics>) -> Self {
        PolicyCache::build(transport, settings, metrics, None)
    }

    fn build(
        transport: Arc<dyn PolicyTransport>,
        settings: CacheSettings,
        metrics: Arc<Metrics>,
        shared: Option<SharedStore>,
    ) -> Self {
        let max_ttl = settings.max_ttl.min(MAX_TTL);
        let fetcher = Fetcher {
            transport,
            timeout: settings.fetch_timeout,
            ttl: TtlBounds { min: settings.min_ttl.min(max_ttl), max: max_ttl },
        };
        // moka bounds one weighted capacity; the origin count is a second bound on top of the
        // bytes: every entry weighs at least `floor`, so `max_origins` entries fill it.
        let CacheConfig { max_origins, max_bytes, .. } = settings.bounds;
        let floor = max_bytes.div_ceil(max_origins.max(1)).max(1);
        let evictions = Arc::clone(&metrics);
        let entries = moka::future::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(move |_: &Origin, entry: &Arc<Entry>| {
                u32::try_from(u64::from(entry.weight).max(floor)).unwrap_or(u32::MAX)
            })
            // Only evictions for the bounds: a refresh replacing an entry or a purge is not one.
            .eviction_listener(move |_, _, cause| {
                if cause.was_evicted() {
                    evictions.policy_eviction();
                }
            })
            .build();
        PolicyCache {
            inner: Arc::new(Inner {
                fetcher,
                rules: StaleRules { agents_txt_negative_ttl: settings.agents_txt_negative_ttl },
                entries,
                metrics,
                shared,
                archive: std::sync::OnceLock::new(),
            }),
        }
    }

    /// [`PolicyCache::new`], sharing its copies through Redis when `[cache] store =
    /// "redis"`: `[cache.redis]`, its unset keys from `limits_redis` (`[limits.redis]`),
    /// `rediss://` trusting the system's roots and `extra_ca_files`.
    ///
    /// # Errors
    /// [`ConnectError`] when the Redis client cannot be built (a
    /// `password_env` not set, a CA file that cannot be used, a URL the client refuses).
    pub fn with_store(
        transport: Arc<dyn PolicyTransport>,
        settings: CacheSettings,
        metrics: Arc<Metrics>,
        limits_redis: &crate::limits::RedisConfig,
        extra_ca_files: &[std::path::PathBuf],
    ) -> Result<Self, ConnectError> {
        let shared = match settings.bounds.store {
            CacheStore::Memory => None,
            CacheStore::Redis => {
                let connection = settings.bounds.redis.connection(limits_redis);
                let wait = settings.bounds.redis.wait;
                Some(SharedStore::new(&connection, wait, extra_ca_files, Arc::clone(&metrics))?)
            }
        };
        Ok(PolicyCache::build(transport, settings, metrics, shared))
    }

    /// The policies of `origin`, fetched when they are not cached or some file is stale.
    ///
    /// The first request to an origin waits for its files (fetched in parallel, each
    /// bounded by `fetch_timeout`); concurrent requests for the same origin share that fetch.
    /// Later refreshes, one at a time per origin, fetch only the stale files. While the
    /// stale copy may still be served ([`refresh::serves_while_refreshing`]), the refresh
    /// runs in the background and no request waits for it; past that, requests wait for it.
    /// Never fails: a failed fetch is a state with the spec's meaning (robots.txt
    /// unreachable, ...).
    pub async fn policies(&self, origin: &Origin) -> Arc<Policies> {
        self.policies_for(origin, false).await
    }

    /// [`PolicyCache::policies`] for a request that needs the files fetched only on demand
    /// when `wanted` (tdmrep.json for an agent declaring `train-ai`, SEMANTICS U5): when the
    /// origin's copy lacks them, the request waits for a load that fetches them (the other
    /// files carried over while fresh).
    pub async fn policies_for(&self, origin: &Origin, wanted: bool) -> Arc<Policies> {
        let inner = &self.inner;
        // Every request but an origin's first finds it cached. The first load, and a
        // refresh a request must wait for, are boxed: their futures are large (moka's entry
        // machinery, four fetches), and every request's future would otherwise carry them
        // and be copied whole at each move (a measured cost per request).
        let entry = match inner.entries.get(origin).await {
            Some(entry) => {
                inner.metrics.policy_lookup(true);
                entry
            }
            None => Box::pin(self.first_load(origin, wanted)).await,
        };
        let now = Instant::now();
        let lacking = |entry: &Entry| wanted && entry.snapshot.lacks_on_demand();
        if entry.snapshot.fresh_until > now && !lacking(&entry) {
            return Arc::clone(&entry.snapshot.policies);
        }
        if entry.snapshot.serves_at(now) && !lacking(&entry) {
            // Whoever takes the lock starts the one background refresh; the others find it
            // taken and serve the stale copy too.
            if let Ok(refreshing) = Arc::clone(&entry.refreshing).try_lock_owned() {
                let (inner, origin, entry) = (Arc::clone(inner), origin.clone(), Arc::clone(&entry));
                tokio::spawn(async move {
                    inner.refresh(&origin, &entry, false).await;
                    drop(refreshing);
                });
            }
            return Arc::clone(&entry.snapshot.policies);
        }
        let refreshing = Arc::clone(&entry.refreshing);
        let _refreshing = refreshing.lock().await;
        // Whoever held the lock before may have refreshed already.
        let latest = inner.entries.get(origin).await.unwrap_or(entry);
        if latest.snapshot.fresh_until > Instant::now() && !lacking(&latest) {
            return Arc::clone(&latest.snapshot.policies);
        }
        Box::pin(inner.refresh(origin, &latest, wanted)).await
    }

    /// The entry of an origin that was not cached: loaded once, concurrent requests for the
    /// same origin sharing the load.
    async fn first_load(&self, origin: &Origin, wanted: bool) -> Arc<Entry> {
        let inner = &self.inner;
        let loaded = inner
            .entries
            .entry_by_ref(origin)
            .or_insert_with(async {
                Entry::new(inner.obtain_archived(origin, None, wanted).await, Arc::new(tokio::sync::Mutex::new(())))
            })
            .await;
        // A request that found the load another one started is a hit too.
        inner.metrics.policy_lookup(!loaded.is_fresh());
        if loaded.is_fresh() {
            inner.evict_over_bounds().await;
        }
        loaded.into_value()
    }

    /// Waits until no refresh of `origin` is running (tests: a background refresh is done).
    #[cfg(test)]
    pub(super) async fn refreshed(&self, origin: &Origin) {
        if let Some(entry) = self.inner.entries.get(origin).await {
            drop(entry.refreshing.lock().await);
        }
    }

    /// The bytes of parsed policies held (moka's weighted size; approximate like
    /// [`PolicyCache::len`]). At most `max_bytes` once the cache's housekeeping has run.
    pub fn weighted_size(&self) -> u64 {
        self.inner.entries.weighted_size()
    }

    /// Runs the cache's pending housekeeping (evictions, counts), so that [`PolicyCache::len`]
    /// and [`PolicyCache::weighted_size`] are exact (admin status, tests).
    pub async fn run_pending_tasks(&self) {
        self.inner.entries.run_pending_tasks().await;
    }

    /// What is cached for `origin`, one entry per file, without fetching (admin API);
    /// `None` when the origin is not cached.
    pub async fn cached(&self, origin: &Origin) -> Option<Vec<CachedFile>> {
        self.inner.entries.get(origin).await.map(|entry| entry.snapshot.files())
    }

    /// Forgets `origin`, here and in the shared store: its next request fetches every file
    /// again (admin API).
    pub async fn purge(&self, origin: &Origin) {
        if let Some(shared) = &self.inner.shared {
            shared.purge(origin).await;
        }
        self.inner.entries.invalidate(origin).await;
    }

    /// How many origins are cached. Approximate: evictions and insertions are counted
    /// by the cache's housekeeping, which may lag a little behind.
    pub fn len(&self) -> u64 {
        self.inner.entries.entry_count()
    }

    /// True when no origin is cached (as approximate as [`PolicyCache::len`]).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for PolicyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyCache").field("origins", &self.len()).finish_non_exhaustive()
    }
}

/// A snapshot as the shared store keeps it: [`Value`] (each file's responses and freshness).
impl SharedCopy for Snapshot {
    fn cap() -> usize {
        Inner::value_cap()
    }

    fn read(origin: &Origin, bytes: &[u8]) -> Option<Self> {
        Inner::from_value(origin, bytes)
    }

    fn stored(&self, origin: &Origin) -> (Vec<u8>, Duration) {
        let (value, ttl) = self.value(origin);
        (value.to_bytes(), ttl)
    }
}

impl Inner {
    /// Refreshes the stale files of `entry` (the caller holds its `refreshing` lock) and
    /// puts the result in the cache, where moka weighs it again.
    async fn refresh(&self, origin: &Origin, entry: &Entry, wanted: bool) -> Arc<Policies> {
        let next = Entry::new(
            self.obtain_archived(origin, Some(&entry.snapshot), wanted).await,
            Arc::clone(&entry.refreshing),
        );
        let policies = Arc::clone(&next.snapshot.policies);
        self.entries.insert(origin.clone(), next).await;
        self.evict_over_bounds().await;
        policies
    }

    /// The snapshot to put in force for `origin`, `previous` being the local copy: without a
    /// shared store, [`Inner::load`]; with one, the store's lease protocol
    /// ([`SharedStore::obtain`]) over that load. A copy lacking the files fetched on demand
    /// does not do when they are `wanted`.
    async fn obtain(&self, origin: &Origin, previous: Option<&Snapshot>, wanted: bool) -> Snapshot {
        let Some(shared) = &self.shared else { return self.load(origin, previous, wanted).await };
        let usable =
            |snapshot: &Snapshot| snapshot.fresh_until > Instant::now() && !(wanted && snapshot.lacks_on_demand());
        shared
            .obtain(origin, previous, usable, async |base: Option<&Snapshot>| self.load(origin, base, wanted).await)
            .await
    }

    /// Evicts what the new or re-weighed entry pushed over `max_bytes` now, rather than at
    /// moka's next housekeeping, so the bound holds after every load, not only eventually.
    /// Loads are rare (each is a fetch), so the housekeeping they pay for is cheap.
    async fn evict_over_bounds(&self) {
        self.entries.run_pending_tasks().await;
    }

    /// One file of a load: carried over while fresh, else fetched (conditionally, on the
    /// validators of the previous responses) and passed through its format's stale rule with
    /// the previous copy and how long it has been stale. A file the origin answered `304` for
    /// at every location is not parsed again: the previous state goes through the stale rule
    /// as the state fetched. A file fetched only on demand that is neither `wanted` nor in
    /// force stays unfetched, for the longest lifetime (nothing to refresh).
    async fn refresh_file<F: Format>(
        &self,
        origin: &Origin,
        previous: Option<(&F::State, Freshness, &Responses)>,
        started: Instant,
        wanted: bool,
    ) -> (F::State, Freshness, Responses) {
        let previous = previous.filter(|(state, _, _)| !F::is_unfetched(state));
        if let Some(unfetched) = F::unfetched().filter(|_| !wanted && previous.is_none()) {
            return (unfetched, Freshness::new(started, MAX_TTL), Arc::from([]));
        }
        if let Some((state, freshness, responses)) = previous
            && freshness.fresh_until > started
        {
            return (state.clone(), freshness, Arc::clone(responses));
        }
        let loaded = self.fetch_format::<F>(origin, previous.map(|(_, _, responses)| responses)).await;
        let (fetched, ttl, fetched_responses) = match (loaded.state, previous) {
            (Some(state), _) => (state, loaded.ttl, loaded.responses),
            (None, Some((state, _, _))) => (state.clone(), loaded.ttl, loaded.responses),
            // Not modified without a previous copy cannot be (no validators were sent); parse
            // what came back all the same.
            (None, None) => (Self::parse::<F>(origin, &loaded.responses), loaded.ttl, loaded.responses),
        };
        let previous_responses = previous.map(|(_, _, responses)| Arc::clone(responses));
        let now = Instant::now();
        let before = previous.map(|(state, freshness, _)| {
            let previous = Previous {
                state: state.clone(),
                stale_for: now.saturating_duration_since(freshness.stale_since),
                lifetime: freshness.lifetime,
            };
            (previous, freshness)
        });
        let kept_since = before.as_ref().map(|(previous, freshness)| (previous.stale_for, *freshness));
        let refreshed = F::refresh(before.map(|(previous, _)| previous), fetched, ttl, &self.rules);
        let freshness = match kept_since {
            Some((stale_for, freshness)) if refreshed.kept_stale => {
                tracing::info!(
                    origin = %origin, file = F::PATH, stale_s = stale_for.as_secs(), retry_s = refreshed.ttl.as_secs(),
                    "re-fetch failed; the cached copy stays in use (stale rule)"
                );
                Freshness { fresh_until: now + refreshed.ttl, ..freshness }
            }
            _ => Freshness::new(now, refreshed.ttl),
        };
        let responses = match previous_responses {
            Some(previous) if refreshed.kept_stale => previous,
            _ => fetched_responses,
        };
        (refreshed.state, freshness, responses)
    }

    /// Fetches a format's file and, when the state falls through and the format has a
    /// second location, that one too (AGENTS.md discovery, C1). Fresh for the shorter
    /// lifetime of the two, so a change at either location is seen. Each location is
    /// fetched on the validators of its `previous` response; when every location answered
    /// `304`, nothing is parsed and [`Loaded::state`] is `None`. A location that answered
    /// `304` while another changed is parsed from its stored bytes (whether the first falls
    /// through is then what it was before: the second location was fetched last time).
    async fn fetch_format<F: Format>(&self, origin: &Origin, previous: Option<&Responses>) -> Loaded<F::State> {
        let stored = |path: &str| previous.and_then(|r| r.iter().find(|(p, _)| *p == path)).map(|(_, o)| o);
        let first = self.fetch_file::<F>(origin, F::PATH, stored(F::PATH)).await;
        let first_state = (!first.not_modified).then(|| F::from_fetch(&first.outcome));
        let falls_through = match &first_state {
            Some(state) => F::falls_through(state),
            None => previous.is_some_and(|responses| responses.len() > 1),
        };
        match F::FALLBACK_PATH {
            Some(path) if falls_through => {
                let fallback = self.fetch_file::<F>(origin, path, stored(path)).await;
                let ttl = first.ttl.min(fallback.ttl);
                let unchanged = first.not_modified && fallback.not_modified;
                let responses: Responses = Arc::from([(F::PATH, first.outcome), (path, fallback.outcome)]);
                let state = (!unchanged).then(|| {
                    let first = first_state.unwrap_or_else(|| F::from_fetch(&responses[0].1));
                    F::settle(first, Some(F::from_fetch(&responses[1].1)), origin.host())
                });
                Loaded { state, ttl, responses }
            }
            _ => {
                let state = first_state.map(|state| F::settle(state, None, origin.host()));
                Loaded { state, ttl: first.ttl, responses: Arc::from([(F::PATH, first.outcome)]) }
            }
        }
    }

    /// The state of a format read from its `responses` (as [`Inner::fetch_format`] would).
    fn parse<F: Format>(origin: &Origin, responses: &Responses) -> F::State {
        if let Some(unfetched) = F::unfetched().filter(|_| responses.is_empty()) {
            return unfetched;
        }
        let mut states = responses.iter().map(|(_, outcome)| F::from_fetch(outcome));
        let first = states.next().unwrap_or_else(|| F::from_fetch(&FetchOutcome::not_found()));
        F::settle(first, states.next(), origin.host())
    }

    /// Fetches one file, on the validators of its `stored` response, and counts the result.
    async fn fetch_file<F: Format>(
        &self,
        origin: &Origin,
        path: &'static str,
        stored: Option<&FetchOutcome>,
    ) -> super::get::Fetched {
        let fetched = self.fetcher.fetch(origin, PolicyFile::of::<F>(path), stored).await;
        if fetched.not_modified {
            self.metrics.policy_not_modified(path);
        } else {
            self.metrics.policy_fetch(path, &fetched.outcome);
        }
        fetched
    }
}

/// A format's file as a load fetched it.
struct Loaded<S> {
    /// The state read, or `None` when every location answered `304 Not Modified`.
    state: Option<S>,
    /// The freshness lifetime (the shorter of its locations').
    ttl: Duration,
    /// The responses, a `304`'s being the stored copy with its headers updated.
    responses: Responses,
}

/// The text of a policy file the origin served (2xx) at the location whose state is in force
/// (the last fetched), as the console shows it: invalid UTF-8 replaced, at most the
/// format's size cap (the fetcher already cut the body there).
fn text_of(responses: &Responses) -> Option<Arc<str>> {
    match responses.last().map(|(_, outcome)| outcome) {
        Some(FetchOutcome::Response { status: 200..=299, body, .. }) if !body.is_empty() => {
            Some(Arc::from(String::from_utf8_lossy(body)))
        }
        _ => None,
    }
}
