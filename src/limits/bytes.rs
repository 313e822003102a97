//! Byte budgets (the operator's `*_bytes_per_hour`): GCRA over bytes ([`ByteCost`], one
//! arithmetic for both stores, burst = the whole budget), the budgets of one request
//! ([`ByteBudgets`]) spent as its bodies and relays stream, the [`floor`] under which a
//! budget is spent, and the shared store's reservations ([`reservation`]). The in-process
//! store's byte keys are spent here ([`LocalLimiter::spend_bytes`]); the Redis store's in
//! `super::redis`.
//!
//! Never: writes responses or decision-log lines, decides which budgets apply (the gate does).

use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use governor::clock::{Clock, Reference};
use smallvec::SmallVec;

use super::{Exceeded, Key, Limiter, LocalLimiter, Refused, Usage};
use crate::policy::{Direction, Limit, LimitKind};

/// The byte budgets of one forwarded request (the operator's `*_bytes_per_hour` that apply
/// to it), spent as its bodies (or its tunnel's or upgraded connection's bytes) stream; the
/// declared `Content-Length` of its request body was spent before forwarding, with its
/// rates (`Limiter::check_and_spend`, [`Declared`]), and that of its response before the
/// response head goes out ([`ByteBudgets::spend_response`]), so only bytes past them are
/// spent again.
///
/// Each budget's keys (in process, and in Redis) are made once, when the request is
/// admitted: no spend builds a key, and the budgets keep no copy of the agent, origin or host.
///
/// A budget with less than its [`floor`] left is spent: it refuses a request before
/// forwarding (a receiving budget always, a sending budget when the request may send bytes
/// of no declared length), so an agent is told to wait, not handed a body cut to nothing.
///
/// In process every frame is spent as it passes. With the Redis store, a body's bytes are
/// spent from a reservation taken from Redis ([`reservation`] bytes at a time, one round trip
/// for every budget of the direction, all or none) and a frame the reservation does not cover
/// waits for the next one ([`Spending::Later`]); what a body leaves of its last reservation
/// is not given back (the bound is in docs/scale-out.md).
pub struct ByteBudgets {
    limiter: Arc<Limiter>,
    /// Held inline (a request has one or two): a list of its own cost an allocation per
    /// request with a byte budget.
    budgets: SmallVec<[Budget; 2]>,
    /// Bytes spent before they streamed (declared lengths): sent, received.
    declared: [AtomicU64; 2],
    /// Bytes reserved in the shared store and not passed yet: sent, received.
    reserved: [AtomicU64; 2],
    /// Set once the shared store did not answer for this request and `on_failure` settled
    /// it: the rest of the request's bytes are settled the same way without asking Redis
    /// again (one timeout per request while Redis is away, not one per frame).
    unshared: AtomicBool,
}

/// A request's body as its head declares it: what its byte budgets are first spent or
/// checked for, in the same call as its rates (`ByteBudgets::declared_items`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Declared {
    /// The body's `Content-Length` (0 when it has none).
    pub length: u64,
    /// True when the request may send bytes of no declared length (a chunked body, an
    /// upgrade).
    pub streams: bool,
}

/// One byte budget of a request, with its keys, made once when the request is admitted
/// ([`Limiter::budget`]).
pub(super) struct Budget {
    pub(super) limit: Limit,
    /// Its key in process: in the in-process store, or in the Redis store's fallback.
    pub(super) local: Key,
    /// Its key in Redis (`super::redis`); empty in process.
    pub(super) shared: String,
}

/// The most a budget's [`floor`] is.
pub const FLOOR_MAX: u64 = 64 * 1024;

/// What a byte budget of `budget` bytes must have left to let a request start: the smaller of
/// [`FLOOR_MAX`] and 1 % of the budget (at least one byte). Less than that left, the budget is
/// spent: a request it counts is refused `429` with `Retry-After` until the floor has
/// refilled (for a budget per hour under 6.4 MiB, 36 s).
pub fn floor(budget: u64) -> u64 {
    (budget / 100).clamp(1, FLOOR_MAX)
}

/// The smallest reservation taken from the shared store (when the body has passed as much).
pub const RESERVE_MIN: u64 = 64 * 1024;
/// A reservation is at most this share of the smallest budget it spends (unless
/// [`RESERVE_MIN`] is more).
pub const RESERVE_SHARE: u64 = 64;

/// How many bytes to reserve in the shared store when `need` more must pass a body that has
/// passed `passed` already, against budgets of `budgets` bytes: as much as the body has
/// passed (so a small body is charged at most twice its size), at most the larger of
/// [`RESERVE_MIN`] and 1/[`RESERVE_SHARE`] of each budget and at most the smallest budget,
/// and never less than `need`.
pub fn reservation(need: u64, passed: u64, budgets: impl IntoIterator<Item = u64>) -> u64 {
    let (chunk, smallest) = budgets.into_iter().fold((u64::MAX, u64::MAX), |(chunk, smallest), budget| {
        (chunk.min((budget / RESERVE_SHARE).max(RESERVE_MIN)), smallest.min(budget))
    });
    passed.min(chunk).min(smallest).max(need)
}

/// What spending a body's bytes takes ([`ByteBudgets::spend`]).
pub enum Spending {
    /// Settled at once: in process, or from the bytes already reserved.
    Now(Result<(), Refused>),
    /// Settled when the shared store answers for the next reservation.
    Later(Pin<Box<dyn Future<Output = Result<(), Refused>> + Send>>),
}

/// Where a byte spend was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counted {
    /// In the configured store.
    InStore,
    /// Redis did not answer; `on_failure` settled it (in process, or uncounted).
    Settled,
}

/// One byte budget's part of a byte spend: `bytes` spent, or only checked to be left.
#[derive(Clone, Copy)]
pub(super) struct ByteItem<'l> {
    pub(super) budget: &'l Budget,
    pub(super) bytes: u64,
    pub(super) spend: Spend,
}

impl<'l> ByteItem<'l> {
    /// The budget's limit.
    pub(super) fn limit(&self) -> &'l Limit {
        &self.budget.limit
    }
}

/// The byte items of one spend, made as they are walked (once to check, once to spend, or
/// once into a Redis command): no spend collects them.
pub(super) trait Items<'l>: Iterator<Item = ByteItem<'l>> + Clone {}

impl<'l, I: Iterator<Item = ByteItem<'l>> + Clone> Items<'l> for I {}

impl ByteBudgets {
    /// The budgets among `limits` for `usage`, counted in `limiter`, with their keys;
    /// `None` when there are none.
    pub(super) fn new(limiter: &Arc<Limiter>, usage: Usage<'_>, limits: &[Limit]) -> Option<ByteBudgets> {
        let budgets: SmallVec<[Budget; 2]> = limits.iter().filter_map(|limit| limiter.budget(limit, usage)).collect();
        (!budgets.is_empty()).then(|| ByteBudgets {
            limiter: Arc::clone(limiter),
            budgets,
            declared: [AtomicU64::new(0), AtomicU64::new(0)],
            reserved: [AtomicU64::new(0), AtomicU64::new(0)],
            unshared: AtomicBool::new(false),
        })
    }

    /// What a request spends or checks before it is forwarded, in the store's one call with
    /// its rates: every receiving budget checked for its [`floor`] (a spent one refuses the
    /// request as a spent rate does), and the request body's declared length spent against
    /// every sending budget, so a body that would cross one is refused before a byte leaves;
    /// a request that [`streams`](Declared::streams) bytes of no declared length checks each
    /// sending budget's floor instead.
    ///
    /// # Errors
    /// [`Refused::NeverFits`] for a declared body larger than a whole sending budget, before
    /// the store is asked (so no rate is spent for it).
    pub(super) fn declared_items(&self, body: Declared) -> Result<impl Items<'_>, Refused> {
        for budget in self.of(Direction::Sent) {
            if let LimitKind::Bytes { bytes, .. } = budget.limit.kind
                && body.length > bytes
            {
                return Err(Refused::NeverFits { limit: budget.limit.clone(), bytes: body.length });
            }
        }
        Ok(self.budgets.iter().filter_map(move |budget| match budget.limit.kind {
            LimitKind::Bytes { direction: Direction::Sent, .. } if body.length > 0 => {
                Some(ByteItem { budget, bytes: body.length, spend: Spend::Yes })
            }
            LimitKind::Bytes { direction: Direction::Sent, .. } if !body.streams => None,
            LimitKind::Bytes { bytes, .. } => Some(ByteItem { budget, bytes: floor(bytes), spend: Spend::No }),
            _ => None,
        }))
    }

    /// After [`declared_items`](Self::declared_items) passed: the declared length is spent
    /// (the body's first bytes spend nothing again), and when Redis did not answer, the rest
    /// of the request is settled by `on_failure` without asking it again.
    pub(super) fn admitted(&mut self, body: Declared, counted: Counted) {
        *self.unshared.get_mut() = counted == Counted::Settled;
        *self.declared[slot(Direction::Sent)].get_mut() = body.length;
    }

    /// Before a tunnel or an upgraded connection opens (its `200` or `101`): checks every
    /// budget, both ways, has its [`floor`] left.
    ///
    /// # Errors
    /// [`Refused::Exceeded`] naming the spent budget; [`Refused::StoreUnavailable`] as
    /// `Limiter::check_and_spend`.
    pub async fn check_open(&self) -> Result<(), Refused> {
        let items = self.budgets.iter().filter_map(|budget| match budget.limit.kind {
            LimitKind::Bytes { bytes, .. } => Some(ByteItem { budget, bytes: floor(bytes), spend: Spend::No }),
            _ => None,
        });
        self.spend_items(items).await.map(|_| ())
    }

    /// Before a response head goes out: spends the response body's declared length
    /// (`Content-Length`) against every receiving budget, all or none, so a body longer than
    /// what is left is refused whole, never cut part-way.
    ///
    /// # Errors
    /// [`Refused::NeverFits`] for a body longer than a whole receiving budget (no wait makes
    /// it pass); [`Refused::Exceeded`] naming the receiving budget it would cross, with when
    /// `length` bytes will be left; [`Refused::StoreUnavailable`] as
    /// `Limiter::check_and_spend`.
    pub async fn spend_response(&self, length: u64) -> Result<(), Refused> {
        for budget in self.of(Direction::Received) {
            if let LimitKind::Bytes { bytes, .. } = budget.limit.kind
                && length > bytes
            {
                return Err(Refused::NeverFits { limit: budget.limit.clone(), bytes: length });
            }
        }
        if self.spend_items(self.items(Direction::Received, length)).await? == Counted::Settled {
            self.unshared.store(true, Ordering::Relaxed);
        }
        self.declared[slot(Direction::Received)].store(length, Ordering::Relaxed);
        Ok(())
    }

    /// `items` spent (or checked) in the store, under the keys made when the request was
    /// admitted; settled by `on_failure` without asking Redis once it did not answer for this
    /// request.
    async fn spend_items<'l>(&self, items: impl Items<'l>) -> Result<Counted, Refused> {
        if let Limiter::Redis(shared) = &*self.limiter
            && self.unshared.load(Ordering::Relaxed)
        {
            return shared.settle_bytes(items).map(|()| Counted::Settled);
        }
        self.limiter.spend_bytes(items).await
    }

    /// Spends `n` bytes in `direction` against every budget for it, the body (or relay) having
    /// passed `passed` bytes before them; bytes within the direction's declared length were
    /// spent already. At once in process or from the reservation, or [`Spending::Later`] when
    /// a new reservation must be taken from Redis.
    ///
    /// The future's or the answer's error is the [`Refused`] that cuts the body: a budget that
    /// has not the bytes left (all or none).
    pub fn spend(self: &Arc<Self>, direction: Direction, n: u64, passed: u64) -> Spending {
        let declared = self.declared[slot(direction)].load(Ordering::Relaxed);
        let n = n.min((passed + n).saturating_sub(declared));
        // A direction no budget counts (a relay's other way) spends nothing, and asks no store.
        if n == 0 || !self.counts(direction) {
            return Spending::Now(Ok(()));
        }
        let shared = match &*self.limiter {
            Limiter::Local(local) => {
                return Spending::Now(local.spend_items(self.items(direction, n)).map_err(Refused::Exceeded));
            }
            Limiter::Redis(shared) => shared,
        };
        let reserved = &self.reserved[slot(direction)];
        let had = reserved.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| Some(r.saturating_sub(n)));
        let need = n.saturating_sub(had.unwrap_or(0));
        if need == 0 {
            return Spending::Now(Ok(()));
        }
        if self.unshared.load(Ordering::Relaxed) {
            return Spending::Now(shared.settle_bytes(self.items(direction, need)));
        }
        let budgets = self.of(direction).filter_map(|b| match b.limit.kind {
            LimitKind::Bytes { bytes, .. } => Some(bytes),
            _ => None,
        });
        let want = reservation(need, passed, budgets);
        Spending::Later(Box::pin(Arc::clone(self).reserve(direction, need, want)))
    }

    /// Takes a reservation of `want` bytes in `direction` (or, when the budgets have not that
    /// many left, of `need`), of which `need` pass now and the rest is kept for the next frames.
    async fn reserve(self: Arc<Self>, direction: Direction, need: u64, want: u64) -> Result<(), Refused> {
        let mut amount = want;
        loop {
            match self.limiter.spend_bytes(self.items(direction, amount)).await {
                Ok(counted) => {
                    if counted == Counted::Settled {
                        self.unshared.store(true, Ordering::Relaxed);
                    }
                    self.reserved[slot(direction)].fetch_add(amount - need, Ordering::Relaxed);
                    return Ok(());
                }
                Err(Refused::Exceeded(_)) if amount > need => amount = need,
                Err(refused) => return Err(refused),
            }
        }
    }

    /// `bytes` to spend from every budget that counts `direction`.
    fn items(&self, direction: Direction, bytes: u64) -> impl Items<'_> {
        self.of(direction).map(move |budget| ByteItem { budget, bytes, spend: Spend::Yes })
    }

    /// The budgets that count `direction`.
    fn of(&self, direction: Direction) -> impl Iterator<Item = &Budget> + Clone {
        self.budgets
            .iter()
            .filter(move |b| matches!(b.limit.kind, LimitKind::Bytes { direction: d, .. } if d == direction))
    }

    /// True when a budget counts `direction`.
    pub fn counts(&self, direction: Direction) -> bool {
        self.of(direction).next().is_some()
    }
}

/// [`ByteBudgets::reserved`]'s index for `direction`.
fn slot(direction: Direction) -> usize {
    match direction {
        Direction::Sent => 0,
        Direction::Received => 1,
    }
}

impl std::fmt::Debug for ByteBudgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ByteBudgets")
            .field("limits", &self.budgets.iter().map(|b| &b.limit).collect::<Vec<_>>())
            .field("declared", &self.declared)
            .field("reserved", &self.reserved)
            .finish()
    }
}

impl<C: Clock + Clone> LocalLimiter<C> {
    /// `Limiter::spend_bytes` in this store: GCRA over bytes, burst = the whole budget, so
    /// a budget of B bytes per window lets B through at once and refills B per window.
    ///
    /// # Errors
    /// [`Exceeded`] when fewer than `n` bytes are left, with when `n` will be (a window for
    /// more than the whole budget).
    pub fn spend_bytes(&self, usage: Usage<'_>, limit: &Limit, n: u64) -> Result<(), Exceeded> {
        self.bytes(self.byte_key(limit, usage), limit, n, Spend::Yes)
    }

    /// The key a byte budget counts `usage` under in this store: a sending and a receiving
    /// budget of one scope are two budgets.
    pub(super) fn byte_key(&self, limit: &Limit, usage: Usage<'_>) -> Key {
        let direction = match limit.kind {
            LimitKind::Bytes { direction, .. } => Some(direction),
            _ => None,
        };
        self.hasher.hash_one((self.key(limit, usage), direction))
    }

    /// Each item's bytes checked: `Ok` when every budget has them, spending nothing.
    pub(super) fn check_items<'l>(&self, mut items: impl Iterator<Item = ByteItem<'l>>) -> Result<(), Exceeded> {
        items.try_for_each(|item| self.bytes(item.budget.local, item.limit(), item.bytes, Spend::No))
    }

    /// The items that spend, spent (after [`check_items`](Self::check_items) passed).
    pub(super) fn spend_checked<'l>(&self, items: impl Iterator<Item = ByteItem<'l>>) -> Result<(), Exceeded> {
        items
            .filter(|item| item.spend == Spend::Yes)
            .try_for_each(|item| self.bytes(item.budget.local, item.limit(), item.bytes, Spend::Yes))
    }

    /// Each item's bytes checked, then, when every one has them, spent (or only checked):
    /// all or none, but for another request spending between the check and the spend.
    pub(super) fn spend_items<'l>(&self, items: impl Items<'l>) -> Result<(), Exceeded> {
        self.check_items(items.clone())?;
        self.spend_checked(items)
    }

    /// `n` bytes of `limit` spent under `key` (or only checked, when `spend` says so).
    pub(super) fn bytes(&self, key: Key, limit: &Limit, n: u64, spend: Spend) -> Result<(), Exceeded> {
        let Some(cost) = ByteCost::of(limit, n, NANOS)? else { return Ok(()) };
        let now = u128::from(u64::from(self.clock.now().duration_since(self.start)));
        let mut tat = self.bytes.entry(key).or_insert(0);
        let next = u128::from(*tat).max(now) + cost.cost;
        if next > now + cost.window {
            return Err(cost.refused(next - now - cost.window, NANOS));
        }
        if spend == Spend::Yes {
            *tat = u64::try_from(next).unwrap_or(u64::MAX);
        }
        Ok(())
    }
}

/// Nanoseconds in a second: the in-process store's byte budget clock.
const NANOS: u128 = 1_000_000_000;

/// What `n` bytes cost of a byte budget, in ticks of its clock (`per_second` ticks a
/// second): GCRA over bytes, burst = the whole budget, so a budget of B bytes per window
/// lets B through at once and refills B per window. Both stores count with it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ByteCost<'l> {
    limit: &'l Limit,
    /// What the bytes cost, rounded up so a budget is never overspent.
    pub(super) cost: u128,
    /// The window: a key's arrival time may run this far ahead of now.
    pub(super) window: u128,
}

impl<'l> ByteCost<'l> {
    /// The cost of `n` bytes of `limit`; `None` for no bytes or a limit that is not a byte budget.
    ///
    /// # Errors
    /// [`Exceeded`], with a window to wait, when `n` is more than the whole budget.
    pub(super) fn of(limit: &'l Limit, n: u64, per_second: u128) -> Result<Option<ByteCost<'l>>, Exceeded> {
        let LimitKind::Bytes { bytes: budget, window_s, .. } = limit.kind else { return Ok(None) };
        let cost = ByteCost { limit, cost: 0, window: u128::from(window_s.max(1)) * per_second };
        if n > budget {
            return Err(cost.refused(cost.window, per_second));
        }
        if n == 0 {
            return Ok(None);
        }
        Ok(Some(ByteCost { cost: (u128::from(n) * cost.window).div_ceil(u128::from(budget)), ..cost }))
    }

    /// Refused until `wait` more ticks have passed.
    pub(super) fn refused(&self, wait: u128, per_second: u128) -> Exceeded {
        let nanos = wait.saturating_mul(NANOS / per_second);
        Exceeded {
            limit: self.limit.clone(),
            retry_after: Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
        }
    }
}

/// Whether a byte budget check spends what it checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Spend {
    Yes,
    No,
}
