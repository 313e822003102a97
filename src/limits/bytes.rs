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

use super::{Exceeded, Limiter, LocalLimiter, Refused, Usage};
use crate::policy::{Direction, Limit, LimitKind};

/// The byte budgets of one forwarded request (the operator's `*_bytes_per_hour` that apply
/// to it), spent as its bodies (or its tunnel's or upgraded connection's bytes) stream; the
/// declared `Content-Length` of its request body was spent before forwarding
/// ([`ByteBudgets::spend_declared`]) and that of its response before the response head goes
/// out ([`ByteBudgets::spend_response`]), so only bytes past them are spent again.
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
    agent: Arc<str>,
    origin: String,
    host: String,
    limits: Vec<Limit>,
    /// Bytes spent before they streamed (declared lengths): sent, received.
    declared: [AtomicU64; 2],
    /// Bytes reserved in the shared store and not passed yet: sent, received.
    reserved: [AtomicU64; 2],
    /// Set once the shared store did not answer for this request and `on_failure` settled
    /// it: the rest of the request's bytes are settled the same way without asking Redis
    /// again (one timeout per request while Redis is away, not one per frame).
    unshared: AtomicBool,
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
pub(super) struct ByteItem<'l> {
    pub(super) limit: &'l Limit,
    pub(super) bytes: u64,
    pub(super) spend: Spend,
}

impl ByteBudgets {
    /// The budgets among `limits` for `usage`, counted in `limiter`; `None` when there are none.
    pub fn new(limiter: &Arc<Limiter>, usage: Usage<'_>, limits: &[Limit]) -> Option<ByteBudgets> {
        let limits: Vec<Limit> = limits.iter().filter(|l| matches!(l.kind, LimitKind::Bytes { .. })).cloned().collect();
        (!limits.is_empty()).then(|| ByteBudgets {
            limiter: Arc::clone(limiter),
            agent: Arc::from(usage.agent),
            origin: usage.origin.to_owned(),
            host: usage.host.to_owned(),
            limits,
            declared: [AtomicU64::new(0), AtomicU64::new(0)],
            reserved: [AtomicU64::new(0), AtomicU64::new(0)],
            unshared: AtomicBool::new(false),
        })
    }

    /// Before a request is forwarded, in one call to the store: checks every receiving
    /// budget has its [`floor`] left (a spent one refuses the request as a spent rate does),
    /// and spends the request body's declared length (`Content-Length`) against every sending
    /// budget, so a body that would cross one is refused before a byte leaves; a request that
    /// `streams` bytes of no declared length (a chunked body, an upgrade) checks each sending
    /// budget's floor instead.
    ///
    /// # Errors
    /// [`Refused::NeverFits`] for a declared body larger than a whole sending budget;
    /// [`Refused::Exceeded`] naming the spent budget or the sending budget the body would
    /// cross; [`Refused::StoreUnavailable`] when Redis did not answer and `on_failure = "deny"`.
    pub async fn spend_declared(&mut self, declared: u64, streams: bool) -> Result<(), Refused> {
        for limit in self.of(Direction::Sent) {
            if let LimitKind::Bytes { bytes, .. } = limit.kind
                && declared > bytes
            {
                return Err(Refused::NeverFits { limit: limit.clone(), bytes: declared });
            }
        }
        let items: Vec<ByteItem<'_>> = self
            .limits
            .iter()
            .filter_map(|limit| match limit.kind {
                LimitKind::Bytes { direction: Direction::Sent, .. } if declared > 0 => {
                    Some(ByteItem { limit, bytes: declared, spend: Spend::Yes })
                }
                LimitKind::Bytes { direction: Direction::Sent, .. } if !streams => None,
                LimitKind::Bytes { bytes, .. } => Some(ByteItem { limit, bytes: floor(bytes), spend: Spend::No }),
                _ => None,
            })
            .collect();
        let counted = self.spend_items(&items).await?;
        *self.unshared.get_mut() = counted == Counted::Settled;
        *self.declared[slot(Direction::Sent)].get_mut() = declared;
        Ok(())
    }

    /// Before a tunnel or an upgraded connection opens (its `200` or `101`): checks every
    /// budget, both ways, has its [`floor`] left.
    ///
    /// # Errors
    /// [`Refused::Exceeded`] naming the spent budget; [`Refused::StoreUnavailable`] as
    /// [`spend_declared`](Self::spend_declared).
    pub async fn check_open(&self) -> Result<(), Refused> {
        let items: Vec<ByteItem<'_>> = self
            .limits
            .iter()
            .filter_map(|limit| match limit.kind {
                LimitKind::Bytes { bytes, .. } => Some(ByteItem { limit, bytes: floor(bytes), spend: Spend::No }),
                _ => None,
            })
            .collect();
        self.spend_items(&items).await.map(|_| ())
    }

    /// Before a response head goes out: spends the response body's declared length
    /// (`Content-Length`) against every receiving budget, all or none, so a body longer than
    /// what is left is refused whole, never cut part-way.
    ///
    /// # Errors
    /// [`Refused::NeverFits`] for a body longer than a whole receiving budget (no wait makes
    /// it pass); [`Refused::Exceeded`] naming the receiving budget it would cross, with when
    /// `length` bytes will be left; [`Refused::StoreUnavailable`] as
    /// [`spend_declared`](Self::spend_declared).
    pub async fn spend_response(&self, length: u64) -> Result<(), Refused> {
        for limit in self.of(Direction::Received) {
            if let LimitKind::Bytes { bytes, .. } = limit.kind
                && length > bytes
            {
                return Err(Refused::NeverFits { limit: limit.clone(), bytes: length });
            }
        }
        let items: Vec<ByteItem<'_>> =
            self.of(Direction::Received).map(|limit| ByteItem { limit, bytes: length, spend: Spend::Yes }).collect();
        if self.spend_items(&items).await? == Counted::Settled {
            self.unshared.store(true, Ordering::Relaxed);
        }
        self.declared[slot(Direction::Received)].store(length, Ordering::Relaxed);
        Ok(())
    }

    /// `items` spent (or checked) in the store, for this request's agent, origin and host;
    /// settled by `on_failure` without asking Redis once it did not answer for this request.
    async fn spend_items(&self, items: &[ByteItem<'_>]) -> Result<Counted, Refused> {
        let usage = Usage { agent: &self.agent, origin: &self.origin, host: &self.host };
        if let Limiter::Redis(shared) = &*self.limiter
            && self.unshared.load(Ordering::Relaxed)
        {
            return shared.settle_bytes(usage, items).map(|()| Counted::Settled);
        }
        self.limiter.spend_bytes(usage, items).await
    }

    /// Spends `n` bytes in `direction` against every budget for it, the body (or relay) having
    /// passed `passed` bytes before them; bytes within the direction's declared length were
    /// spent already. At once in process or from the reservation, or [`Spending::Later`] when
    /// a new reservation must be taken from Redis.
    ///
    /// The future's or the answer's error is the [`Refused`] that cuts the body: a budget that
    /// has not the bytes left (all or none).
    pub fn spend(self: &Arc<Self>, direction: Direction, n: u64, passed: u64) -> Spending {
        let usage = Usage { agent: &self.agent, origin: &self.origin, host: &self.host };
        let declared = self.declared[slot(direction)].load(Ordering::Relaxed);
        let n = n.min((passed + n).saturating_sub(declared));
        // A direction no budget counts (a relay's other way) spends nothing, and asks no store.
        if n == 0 || !self.counts(direction) {
            return Spending::Now(Ok(()));
        }
        let shared = match &*self.limiter {
            Limiter::Local(local) => {
                let items: Vec<ByteItem<'_>> =
                    self.of(direction).map(|limit| ByteItem { limit, bytes: n, spend: Spend::Yes }).collect();
                return Spending::Now(local.spend_items(usage, &items).map_err(Refused::Exceeded));
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
            let items: Vec<ByteItem<'_>> =
                self.of(direction).map(|limit| ByteItem { limit, bytes: need, spend: Spend::Yes }).collect();
            return Spending::Now(shared.settle_bytes(usage, &items));
        }
        let budgets = self.of(direction).filter_map(|l| match l.kind {
            LimitKind::Bytes { bytes, .. } => Some(bytes),
            _ => None,
        });
        let want = reservation(need, passed, budgets);
        Spending::Later(Box::pin(Arc::clone(self).reserve(direction, need, want)))
    }

    /// Takes a reservation of `want` bytes in `direction` (or, when the budgets have not that
    /// many left, of `need`), of which `need` pass now and the rest is kept for the next frames.
    async fn reserve(self: Arc<Self>, direction: Direction, need: u64, want: u64) -> Result<(), Refused> {
        let usage = Usage { agent: &self.agent, origin: &self.origin, host: &self.host };
        let mut amount = want;
        loop {
            let items: Vec<ByteItem<'_>> =
                self.of(direction).map(|limit| ByteItem { limit, bytes: amount, spend: Spend::Yes }).collect();
            match self.limiter.spend_bytes(usage, &items).await {
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

    /// The budgets that count `direction`.
    fn of(&self, direction: Direction) -> impl Iterator<Item = &Limit> {
        self.limits.iter().filter(move |l| matches!(l.kind, LimitKind::Bytes { direction: d, .. } if d == direction))
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
            .field("limits", &self.limits)
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
        self.bytes(usage, limit, n, Spend::Yes)
    }

    /// Each item's bytes checked, then, when every one has them, spent (or only checked):
    /// all or none, but for another request spending between the check and the spend.
    pub(super) fn spend_items(&self, usage: Usage<'_>, items: &[ByteItem<'_>]) -> Result<(), Exceeded> {
        items.iter().try_for_each(|item| self.bytes(usage, item.limit, item.bytes, Spend::No))?;
        items
            .iter()
            .filter(|item| item.spend == Spend::Yes)
            .try_for_each(|item| self.bytes(usage, item.limit, item.bytes, Spend::Yes))
    }

    /// [`spend_bytes`](Self::spend_bytes), or only the check when `spend` says so.
    pub(super) fn bytes(&self, usage: Usage<'_>, limit: &Limit, n: u64, spend: Spend) -> Result<(), Exceeded> {
        let LimitKind::Bytes { direction, .. } = limit.kind else { return Ok(()) };
        let Some(cost) = ByteCost::of(limit, n, NANOS)? else { return Ok(()) };
        let now = u128::from(u64::from(self.clock.now().duration_since(self.start)));
        // A sending and a receiving budget of one scope are two budgets.
        let key = self.hasher.hash_one((self.key(limit, usage), direction));
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
