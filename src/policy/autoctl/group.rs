//! One automation-preferences.txt group, compiled: its `scope` patterns, `host` filters,
//! `user-agent` tokens and its two rule lists (`allowed-methods`, `allowed-purposes`), and
//! how well it applies to a request (draft §"Groups" specificity, SEMANTICS D6–D10).
//!
//! Never: parses text (see `parse.rs`) or decides allow/deny (see `autoctl.rs`).

use crate::policy::Weigh;
use std::sync::Arc;

use crate::policy::RequestView;
use crate::policy::path::Reading;
use crate::policy::pattern::Pattern;

/// How a group's `host` lines match the request host (D8): exact beats wildcard beats absent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum HostRank {
    /// The group has no `host` line: it applies to every host.
    Absent,
    /// A `*.example.com` (or `*`) line matched.
    Wildcard,
    /// An exact host name matched.
    Exact,
}

/// How well one group applies to one request, compared lexicographically (D10): host,
/// then the longest matching scope, then an exact user-agent token over `*`. The later
/// group wins a tie, which the caller handles by position.
pub(super) type Specificity = (HostRank, usize, bool);

/// The host part of a `host` line.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostName {
    /// `host: *`.
    Any,
    /// `*.example.com`, stored as `.example.com` (lower case): a proper subdomain.
    Suffix(String),
    /// `example.com`, lower case.
    Exact(String),
}

/// One `host` value: a name and an optional port (D8: "with the port if one is given").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HostPattern {
    name: HostName,
    port: Option<u16>,
}

impl HostPattern {
    /// Reads a `host` value: `example.com`, `example.com:8080`, `*.example.com`, `[::1]:8080`.
    /// A value that is no host name simply never matches; the parser warns about it.
    pub(super) fn new(raw: &str) -> Self {
        let lower = raw.to_ascii_lowercase();
        let (host, port) = split_port(&lower);
        let name = if host == "*" {
            HostName::Any
        } else if let Some(parent) = host.strip_prefix("*.") {
            HostName::Suffix(format!(".{parent}"))
        } else {
            HostName::Exact(host.to_owned())
        };
        HostPattern { name, port }
    }

    /// The rank this pattern gives the request's host and port, if it matches at all.
    fn rank(&self, host: &str, port: u16) -> Option<HostRank> {
        if self.port.is_some_and(|p| p != port) {
            return None;
        }
        match &self.name {
            HostName::Any => Some(HostRank::Wildcard),
            HostName::Suffix(suffix) => {
                let sub = host.len() > suffix.len() && ends_with_ignore_case(host, suffix);
                sub.then_some(HostRank::Wildcard)
            }
            HostName::Exact(name) => name.eq_ignore_ascii_case(host).then_some(HostRank::Exact),
        }
    }
}

/// Splits `host:port` and `[v6]:port`; a colon that is not followed by a valid port (or
/// several colons without brackets, a bare IPv6 literal) stays part of the name.
fn split_port(value: &str) -> (&str, Option<u16>) {
    if let Some(rest) = value.strip_prefix('[') {
        return match rest.split_once(']') {
            Some((v6, "")) => (v6, None),
            Some((v6, tail)) => match tail.strip_prefix(':').and_then(|p| p.parse().ok()) {
                Some(port) => (v6, Some(port)),
                None => (value, None),
            },
            None => (value, None),
        };
    }
    match value.split_once(':') {
        Some((name, port)) if !port.contains(':') => match port.parse() {
            Ok(port) => (name, Some(port)),
            Err(_) => (value, None),
        },
        _ => (value, None),
    }
}

fn ends_with_ignore_case(text: &str, suffix: &str) -> bool {
    text.len() >= suffix.len() && text.as_bytes()[text.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
}

/// A rule line as written (comments stripped, trimmed), for reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct RuleLine {
    /// 1-based line number.
    pub(super) line: u32,
    /// The directive text.
    pub(super) text: Arc<str>,
}

/// The union of a group's `allowed-methods` (or `allowed-purposes`) lines (D12, D13).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct AllowedList {
    /// Every line of this directive in the group, in order.
    pub(super) lines: Vec<RuleLine>,
    /// Each listed token with the index in `lines` of the line that listed it.
    pub(super) tokens: Vec<(String, usize)>,
}

impl AllowedList {
    /// The line that lists a method, compared case-insensitively (D5).
    pub(super) fn find_method(&self, method: &str) -> Option<&RuleLine> {
        self.find(|token| token.eq_ignore_ascii_case(method))
    }

    /// The line that lists a purpose, compared case-sensitively (D5: aipref labels).
    pub(super) fn find_purpose(&self, purpose: &str) -> Option<&RuleLine> {
        self.find(|token| token == purpose)
    }

    fn find(&self, wanted: impl Fn(&str) -> bool) -> Option<&RuleLine> {
        let (_, at) = self.tokens.iter().find(|(token, _)| wanted(token))?;
        self.lines.get(*at)
    }

    /// The line cited when a token is missing: the directive's first line.
    pub(super) fn first_line(&self) -> Option<&RuleLine> {
        self.lines.first()
    }
}

/// One group of the file, ready to be matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Group {
    /// The group's first directive, cited when it has no `allowed-methods` line.
    pub(super) first: RuleLine,
    /// Its `scope` patterns (at least one, D2).
    pub(super) scopes: Vec<Pattern>,
    /// Its `host` filters; empty means every host.
    pub(super) hosts: Vec<HostPattern>,
    /// Its named `user-agent` tokens (not `*`).
    pub(super) agents: Vec<String>,
    /// True when a `user-agent` line lists `*`, or there is no `user-agent` line at all.
    pub(super) any_agent: bool,
    /// `allowed-methods`, or `None` when the group has no such line (every method denied).
    pub(super) methods: Option<AllowedList>,
    /// `allowed-purposes`, or `None` when purposes are not restricted.
    pub(super) purposes: Option<AllowedList>,
}

impl Group {
    /// How specifically this group applies to the request, or `None` when it does not
    /// apply, with its scopes read as `reading` says (SEMANTICS R9). `path` is the request's
    /// path and query, already percent-normalised.
    pub(super) fn specificity(&self, req: &RequestView<'_>, path: &str, reading: Reading) -> Option<Specificity> {
        let host = if self.hosts.is_empty() {
            HostRank::Absent
        } else {
            self.hosts.iter().filter_map(|h| h.rank(req.host, req.port)).max()?
        };
        let scope =
            self.scopes.iter().filter(|s| s.matches_in(reading, path)).map(|s| s.specificity_in(reading)).max()?;
        let named = self.agents.iter().any(|token| req.names_agent(token));
        if !named && !self.any_agent {
            return None;
        }
        Some((host, scope, named))
    }
}

impl Weigh for HostPattern {
    fn heap_bytes(&self) -> usize {
        match &self.name {
            HostName::Any => 0,
            HostName::Suffix(name) | HostName::Exact(name) => name.heap_bytes(),
        }
    }
}

impl Weigh for RuleLine {
    fn heap_bytes(&self) -> usize {
        self.text.heap_bytes()
    }
}

impl Weigh for AllowedList {
    fn heap_bytes(&self) -> usize {
        self.lines.heap_bytes() + self.tokens.heap_bytes()
    }
}

impl Weigh for Group {
    fn heap_bytes(&self) -> usize {
        self.first.heap_bytes()
            + self.scopes.heap_bytes()
            + self.hosts.heap_bytes()
            + self.agents.heap_bytes()
            + self.methods.heap_bytes()
            + self.purposes.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantics_d8_host_forms() {
        let cases: &[(&str, &str, u16, Option<HostRank>)] = &[
            ("example.com", "example.com", 443, Some(HostRank::Exact)),
            ("EXAMPLE.com", "example.com", 443, Some(HostRank::Exact)),
            ("example.com:8080", "example.com", 8080, Some(HostRank::Exact)),
            ("example.com:8080", "example.com", 443, None),
            ("*.example.com", "a.b.example.com", 443, Some(HostRank::Wildcard)),
            ("*.example.com", "example.com", 443, None),
            ("*.example.com", "badexample.com", 443, None),
            ("*", "anything.test", 80, Some(HostRank::Wildcard)),
            ("[::1]:8080", "::1", 8080, Some(HostRank::Exact)),
            ("[::1]", "::1", 80, Some(HostRank::Exact)),
            ("::1", "::1", 80, Some(HostRank::Exact)),
            ("example.com:http", "example.com", 80, None),
            ("bücher.example", "xn--bcher-kva.example", 443, None),
        ];
        for (raw, host, port, want) in cases {
            assert_eq!(HostPattern::new(raw).rank(host, *port), *want, "host: {raw} vs {host}:{port}");
        }
    }
}
