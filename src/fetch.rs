//! Getting each origin's policy files and keeping them fresh.
//!
//! Owns: fetching `/robots.txt`, `/agents.txt`, `/AGENTS.md` then `/.well-known/agents.md`
//! (HTTPS only), and `/automation-preferences.txt` through a [`PolicyTransport`] with
//! agentgate's own `User-Agent` (SEMANTICS X3); redirects, size caps and the timeout; the
//! [`crate::policy::FetchOutcome`] each fetch produces; the per-origin cache with RFC 9111
//! freshness, one in-flight fetch per origin, stale-while-revalidate, and bounds on the
//! bytes of parsed policies held and on the number of origins; revalidation of stale files
//! (conditional GET, RFC 9111 §4.3); and the fleet's shared store of copies in Redis
//! (`[cache] store = "redis"`, `shared`).
//!
//! Never: reads policy text or decides what a status means for access. Outcomes go to each
//! format's `from_fetch`, and which copy to keep after a failed re-fetch is asked of its
//! stale rule ([`crate::policy::Format::refresh`]). Specs: RFC 9309 §2.3, RFC 9111 §4.2,
//! SEMANTICS X3, X5, X6, B20–B23, C1–C5, D15, D16, D19. The choices are in
//! `docs/fetch-and-cache.md`.

mod cache;
mod file;
mod freshness;
mod get;
mod origin;
mod run_log;
mod shared;
mod transport;

#[cfg(test)]
mod tests;

pub use cache::{CacheConfig, CacheSettings, CachedFile, CopyFrom, PolicyCache};
pub use origin::{Origin, OriginError, Scheme};
pub use shared::config::{CacheStore, SharedConfig};
pub use transport::{PolicyBody, PolicyResponse, PolicyTransport, TransportFuture};

/// The `User-Agent` of every policy fetch (SEMANTICS X3).
pub const USER_AGENT: &str = concat!("agentgate/", env!("CARGO_PKG_VERSION"), " (+https://github.com/agentgate)");
