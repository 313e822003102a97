//! What fetching one policy file produced, as plain data: an HTTP response (status,
//! headers, body up to the format's cap) or a failure. The format modules turn this into
//! their policy state (robots 5xx → disallow all, AGENTS.md HTML → not a policy, ...);
//! `fetch/` fills it in and `explain --policy-dir` builds it from files, so both share the
//! same semantics.

use super::HeaderLookup;

/// Response or request headers: names compared case-insensitively, order kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<(String, String)>);

impl Headers {
    /// Headers from name/value pairs.
    pub fn new(pairs: Vec<(String, String)>) -> Self {
        Headers(pairs)
    }

    /// Adds one header.
    pub fn push(&mut self, name: impl Into<String>, value: impl Into<String>) {
        self.0.push((name.into(), value.into()));
    }

    /// Every header, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Bytes of names and values together (what a cache weighs them at).
    pub fn bytes(&self) -> usize {
        self.0.iter().map(|(n, v)| n.len() + v.len()).sum()
    }

    /// The first value of a header, by case-insensitive name.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

impl HeaderLookup for Headers {
    fn get(&self, name: &str) -> Option<&str> {
        Headers::get(self, name)
    }
}

/// Why a fetch produced no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchError {
    /// No response within the fetch timeout.
    Timeout,
    /// TLS, protocol or redirect-target failure once the origin was reached; the text says which.
    Network(String),
    /// The origin itself could not be reached: its first connection was refused, found no
    /// route, or did not complete within `[upstream] connect_timeout` (`timed_out`).
    /// Unreachable for RFC 9309 like any failure; the gate answers it 502/504
    /// `origin.unreachable` (docs/fetch-and-cache.md).
    Unreachable {
        /// True when the connection timed out rather than being refused.
        timed_out: bool,
        /// The host and the cause, as the connector said it.
        cause: String,
    },
    /// More redirects than the format allows.
    TooManyRedirects,
    /// A redirect from HTTPS to plain HTTP (refused for AGENTS.md, SEMANTICS C3).
    InsecureRedirect,
    /// Nothing was sent: agentgate was at its own cap on connections to origins, every one
    /// busy, for the whole wait (`[upstream] max_connections`). Says nothing about the
    /// origin: never kept (lifetime zero), and the gate answers it 503
    /// `upstream.at_capacity` (docs/upstream.md).
    AtCapacity {
        /// The cap and the wait, as the proxy said it.
        cause: String,
    },
    /// Nothing reached the origin: the parent proxy (`[upstream] parent`) could not be
    /// reached, or refused the `CONNECT` (`refused`). Says nothing about the origin: kept
    /// only as long as [`AtCapacity`](Self::AtCapacity), and the gate answers it 502
    /// `upstream.parent_refused` or `upstream.parent_unreachable`.
    Parent {
        /// True when the parent answered and refused; false when it could not be reached.
        refused: bool,
        /// The origin, the parent and its answer, as the proxy said it.
        cause: String,
    },
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FetchError::Timeout => f.write_str("timed out"),
            FetchError::Network(why) => write!(f, "network error: {why}"),
            FetchError::Unreachable { cause, .. } => write!(f, "origin unreachable: {cause}"),
            FetchError::TooManyRedirects => f.write_str("too many redirects"),
            FetchError::InsecureRedirect => f.write_str("redirect from https to http refused"),
            FetchError::AtCapacity { cause } | FetchError::Parent { cause, .. } => write!(f, "not fetched: {cause}"),
        }
    }
}

/// The result of fetching one policy file (after redirects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The origin answered.
    Response {
        /// Final HTTP status.
        status: u16,
        /// Response headers.
        headers: Headers,
        /// The body, at most the format's cap (plus one byte when `over_cap`).
        body: Vec<u8>,
        /// True when the body was longer than the format's size cap and was cut.
        over_cap: bool,
    },
    /// No usable response.
    Failed(FetchError),
}

impl FetchOutcome {
    /// A 404 with no body: what a missing file in `--policy-dir` stands for.
    pub fn not_found() -> Self {
        FetchOutcome::Response { status: 404, headers: Headers::default(), body: Vec::new(), over_cap: false }
    }
}
