//! The shared store's keys and its check's GCRA arguments: `<prefix><kind>:<Limit::key>`
//! (`<prefix><kind>:sha256:<hex>` when long), the same on every replica and the same as
//! before they were written in place, and per GCRA key of a check its tick, cost and
//! allowance ([`gcra_keys`]), in the order the check script takes them.
//!
//! Keys are written where they are needed ([`write_key`]: into the `EVALSHA` command, or
//! a `String` a request keeps), never built from `format!`ed pieces.
//!
//! Never: talks to Redis, decides which limits apply.

use std::fmt::{self, Write as _};

use sha2::{Digest, Sha256};

use super::super::{Budget, ByteCost, Items, Spend, Usage};
use crate::policy::{Direction, Limit, LimitKind};

/// Keys longer than this (prefix included) are replaced by a SHA-256 of their parts.
const MAX_PLAIN_KEY: usize = 160;
/// A rate key's tick in the check script: its state is kept in ms (µs per tick).
const MILLIS_TICK: u64 = 1000;
/// Microseconds in a second: a byte budget key's tick in the check script.
pub(super) const MICROS: u128 = 1_000_000;

/// Writes `<prefix><kind>:<Limit::key>`, or `<prefix><kind>:sha256:<hex>` when that is
/// long, into `out`: the same on every replica, without a `String` of its own.
pub(super) fn write_key(
    out: &mut impl fmt::Write,
    prefix: &str,
    kind: Kind,
    limit: &Limit,
    usage: Usage<'_>,
) -> fmt::Result {
    let parts = limit.key_parts(usage.agent, usage.origin, usage.host);
    let mut length = Length(prefix.len());
    write!(length, "{kind}{parts}")?;
    if length.0 < MAX_PLAIN_KEY {
        return write!(out, "{prefix}{kind}:{parts}");
    }
    let mut digest = Digesting(Sha256::new());
    write!(digest, "{parts}")?;
    let mut hex = [0u8; 64];
    hex::encode_to_slice(digest.0.finalize(), &mut hex).map_err(|_| fmt::Error)?;
    write!(out, "{prefix}{kind}:sha256:{}", std::str::from_utf8(&hex).map_err(|_| fmt::Error)?)
}

/// One GCRA key of a check (the check script's's keys after the concurrency keys): a byte budget's
/// (its key made for the request) or a rate's (written from the limit and the usage).
#[derive(Clone, Copy)]
pub(super) struct GcraKey<'a> {
    pub(super) limit: &'a Limit,
    /// The byte budget, whose key is made; `None` for a rate.
    pub(super) budget: Option<&'a Budget>,
    pub(super) kind: Kind,
    /// µs per tick: [`MILLIS_TICK`] for a rate, 1 for a byte budget.
    pub(super) tick: u64,
    pub(super) cost: u64,
    pub(super) allowance: u64,
}

/// The GCRA keys of one check, in the check script's's order: the byte budgets (`items` with bytes
/// to count) before the rates (a crawl delay of 0 counts nothing), so a budget that refuses
/// is named as the in-process store names it.
pub(super) fn gcra_keys<'a, 'l: 'a>(
    limits: &'a [Limit],
    items: impl Items<'l>,
) -> impl Iterator<Item = GcraKey<'a>> + Clone {
    let bytes = items.filter_map(|item| {
        let LimitKind::Bytes { direction, bytes: budget, window_s } = item.limit().kind else { return None };
        let cost = ByteCost::of(item.limit(), item.bytes, MICROS).ok()??;
        let (spent, allowance) = match item.spend {
            Spend::Yes => (cost.cost, cost.window),
            Spend::No => (0, cost.window - cost.cost),
        };
        Some(GcraKey {
            limit: item.limit(),
            budget: Some(item.budget),
            kind: Kind::Bytes { direction, budget, window_s },
            tick: 1,
            cost: u64::try_from(spent).unwrap_or(u64::MAX),
            allowance: u64::try_from(allowance).unwrap_or(u64::MAX),
        })
    });
    let rates = limits.iter().filter_map(|limit| {
        let (requests, window_ms) = match limit.kind {
            LimitKind::Rate { requests, window_s } => (requests, u64::from(window_s.max(1)) * 1000),
            // Byte budgets are spent from `items`, and as bodies stream (`spend_bytes`).
            LimitKind::Delay { millis: 0 } | LimitKind::Concurrent { .. } | LimitKind::Bytes { .. } => return None,
            LimitKind::Delay { millis } => (1, u64::from(millis)),
        };
        // Whole milliseconds, at least 1: the in-process store keeps nanoseconds, so a
        // quota past 1000 requests a second rounds here (no site asks for that).
        let (cost, allowance) = match requests {
            0 => (window_ms, 0),
            requests => {
                let period = (window_ms / u64::from(requests)).max(1);
                (period, period * u64::from(requests))
            }
        };
        let kind = Kind::Rate { requests, window_ms };
        Some(GcraKey { limit, budget: None, kind, tick: MILLIS_TICK, cost, allowance })
    });
    bytes.chain(rates)
}

/// What a key counts: the `<kind>` of `<prefix><kind>:<Limit::key>`.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// A concurrency limit's slots: `slots`.
    Slots,
    /// A rate (or crawl delay): `rate:<requests>/<window_ms>`.
    Rate { requests: u32, window_ms: u64 },
    /// A byte budget: `bytes:<direction>:<budget>/<window_s>`.
    Bytes { direction: Direction, budget: u64, window_s: u32 },
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Kind::Slots => f.write_str("slots"),
            Kind::Rate { requests, window_ms } => write!(f, "rate:{requests}/{window_ms}"),
            Kind::Bytes { direction, budget, window_s } => {
                write!(f, "bytes:{}:{budget}/{window_s}", direction.as_str())
            }
        }
    }
}

/// Counts what is written: a key's length before it is written.
struct Length(usize);

impl fmt::Write for Length {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0 += s.len();
        Ok(())
    }
}

/// Hashes what is written: a long key's parts.
struct Digesting(Sha256);

impl fmt::Write for Digesting {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.update(s.as_bytes());
        Ok(())
    }
}

/// One argument of a Redis command, written as text.
pub(super) struct Arg<W>(pub(super) W);

impl<W: std::io::Write> fmt::Write for Arg<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write_all(s.as_bytes()).map_err(|_| fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{AgentsMdCode, LimitScope, OperatorCode, Reason, Source};

    fn key(kind: Kind, limit: &Limit, usage: Usage<'_>) -> String {
        let mut key = String::new();
        write_key(&mut key, "agentgate:", kind, limit, usage).expect("a String takes every write");
        key
    }

    fn operator(kind: LimitKind, scope: LimitScope) -> Limit {
        Limit { source: Source::Operator, kind, scope, reason: Reason::new(OperatorCode::RateLimit, "limits") }
    }

    /// The keys in Redis are what every replica (of this version or the one before, which
    /// `format!`ed them) counts under: pinned byte for byte, for each kind and scope.
    #[test]
    fn keys_are_written_byte_for_byte_as_every_replica_names_them() {
        let usage = Usage { agent: "bot", origin: "https://example.com:443", host: "example.com" };
        let rate = operator(LimitKind::Rate { requests: 100, window_s: 60 }, LimitScope::Agent);
        assert_eq!(
            key(Kind::Rate { requests: 100, window_ms: 60_000 }, &rate, usage),
            "agentgate:rate:100/60000:operator|bot"
        );
        let reason = Reason::new(AgentsMdCode::RateLimit, "requests-per-minute: 6").at_line(7);
        let site = Limit {
            source: Source::AgentsMd,
            kind: LimitKind::Rate { requests: 6, window_s: 60 },
            scope: LimitScope::Host,
            reason,
        };
        assert_eq!(
            key(Kind::Rate { requests: 6, window_ms: 60_000 }, &site, usage),
            "agentgate:rate:6/60000:AGENTS.md|bot|example.com"
        );
        let slots = operator(LimitKind::Concurrent { max: 2 }, LimitScope::Origin);
        assert_eq!(key(Kind::Slots, &slots, usage), "agentgate:slots:operator|bot|https://example.com:443");
        let rule = operator(LimitKind::Rate { requests: 1, window_s: 10 }, LimitScope::Rule { line: 4 });
        assert_eq!(
            key(Kind::Rate { requests: 1, window_ms: 10_000 }, &rule, usage),
            "agentgate:rate:1/10000:operator|bot|https://example.com:443|line=4"
        );
        let sent = LimitKind::Bytes { direction: Direction::Sent, bytes: 102_400, window_s: 3600 };
        let budget = operator(sent, LimitScope::Agent);
        let kind = Kind::Bytes { direction: Direction::Sent, budget: 102_400, window_s: 3600 };
        assert_eq!(key(kind, &budget, usage), "agentgate:bytes:sent:102400/3600:operator|bot");
        let received = Kind::Bytes { direction: Direction::Received, budget: 4096, window_s: 3600 };
        let per_origin = operator(
            LimitKind::Bytes { direction: Direction::Received, bytes: 4096, window_s: 3600 },
            LimitScope::Origin,
        );
        assert_eq!(
            key(received, &per_origin, usage),
            "agentgate:bytes:received:4096/3600:operator|bot|https://example.com:443"
        );
    }

    /// A key of 160 bytes or more (prefix, kind and parts) is the SHA-256 of its parts; one
    /// byte less stays plain.
    #[test]
    fn a_long_key_is_the_sha256_of_its_parts_from_160_bytes() {
        let origin = format!("https://{}.example:443", "a".repeat(150));
        let usage = Usage { agent: "bot", origin: &origin, host: "example.com" };
        let rate = operator(LimitKind::Rate { requests: 10, window_s: 60 }, LimitScope::Origin);
        assert_eq!(
            key(Kind::Rate { requests: 10, window_ms: 60_000 }, &rate, usage),
            "agentgate:rate:10/60000:sha256:e35b3c8fb6b461acc295a730d61b8ca6482ee4bcf55b3f4dda63e93be907afb0"
        );
        let slots = operator(LimitKind::Concurrent { max: 1 }, LimitScope::Agent);
        // "agentgate:" + "slots" + "operator|" is 24 bytes.
        let (plain, long) = ("b".repeat(135), "b".repeat(136));
        let of = |agent: &str| key(Kind::Slots, &slots, Usage { agent, origin: "", host: "" });
        assert_eq!(of(&plain), format!("agentgate:slots:operator|{plain}"), "159 bytes: plain");
        let hashed = of(&long);
        assert!(hashed.starts_with("agentgate:slots:sha256:") && hashed.len() == 23 + 64, "{hashed}");
    }
}
