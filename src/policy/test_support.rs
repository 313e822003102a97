//! Test helpers shared by the policy unit tests: request views, fetch outcomes from bytes,
//! and the conformance corpus under `../shared/conformance/` (a missing folder fails).

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::policy::{
    FetchOutcome, Format, Headers, Opinion, Previous, Refreshed, RequestView, SourceVerdict, StaleRules,
};

/// One minute, for stale-rule tests.
pub(crate) const MINUTE: Duration = Duration::from_secs(60);
/// One hour, for stale-rule tests.
pub(crate) const HOUR: Duration = Duration::from_secs(3600);

/// A request to `https://<host><path_and_query>` by agent `bot-1` with `trust_level`.
pub(crate) fn request<'a>(
    method: &'a str,
    host: &'a str,
    path_and_query: &'a str,
    trust_level: u8,
    headers: &'a Headers,
) -> RequestView<'a> {
    RequestView {
        method,
        scheme: "https",
        host,
        port: 443,
        path_and_query,
        product_token: None,
        user_agent: None,
        agent_id: "bot-1",
        trust_level,
        purposes: &[],
        headers,
    }
}

/// A 200 response with an optional Content-Type.
pub(crate) fn ok(body: &[u8], content_type: Option<&str>) -> FetchOutcome {
    let mut headers = Headers::default();
    if let Some(ct) = content_type {
        headers.push("Content-Type", ct);
    }
    FetchOutcome::Response { status: 200, headers, body: body.to_vec(), over_cap: false }
}

/// A response with another status and an empty body.
pub(crate) fn status(status: u16) -> FetchOutcome {
    FetchOutcome::Response { status, headers: Headers::default(), body: Vec::new(), over_cap: false }
}

/// The copy cached before a re-fetch: `state`, stale for `stale_for`, fetched with `lifetime`.
pub(crate) fn previous<S>(state: S, stale_for: Duration, lifetime: Duration) -> Option<Previous<S>> {
    Some(Previous { state, stale_for, lifetime })
}

/// Format `F`'s stale rule on a re-fetch that gave `fetched` with lifetime `ttl`, with a
/// restricted agents.txt kept for five minutes (`agents_txt_negative_ttl`).
pub(crate) fn refresh<F: Format>(
    previous: Option<Previous<F::State>>,
    fetched: F::State,
    ttl: Duration,
) -> Refreshed<F::State> {
    F::refresh(previous, fetched, ttl, &StaleRules { agents_txt_negative_ttl: 5 * MINUTE })
}

/// True when a verdict lets the request through (no deny, no approval needed).
pub(crate) fn allows(verdict: &SourceVerdict) -> bool {
    matches!(verdict.opinion, Opinion::NoOpinion | Opinion::Allow)
}

/// A folder of the conformance corpus; panics (fails the test) when it is missing, so a
/// missing corpus never passes silently.
pub(crate) fn corpus(sub: &str) -> PathBuf {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/conformance")).join(sub);
    assert!(dir.is_dir(), "conformance corpus folder {} is missing", dir.display());
    dir
}

/// Reads a corpus file; panics with its path when it cannot.
pub(crate) fn read(path: &std::path::Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Reads and parses a `cases.json`.
pub(crate) fn cases(path: &std::path::Path) -> Value {
    serde_json::from_slice(&read(path)).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
}

/// The strings of a JSON array field (empty when absent).
pub(crate) fn strings(value: &Value, key: &str) -> Vec<String> {
    value[key].as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect()).unwrap_or_default()
}
