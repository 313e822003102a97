//! Inspection of what agents send (opt-in, `[inspect]`, docs/inspect.md): the pure half.
//! Given a request's host, target, headers and body (read by the proxy, up to `max_body`),
//! it says which detectors matched and where ([`Report`]): built-in credential formats
//! (`detect.rs`) and the operator's own patterns, over the host name, the percent-decoded
//! path, each query parameter, each header but the proxy's own `Proxy-Authorization`, and
//! the body once decoded (`decode.rs`: gzip and deflate, JSON, form, multipart).
//!
//! Owns `[inspect]` (`config.rs`). Never: reads a socket or buffers a body (the proxy does,
//! `proxy::inspect`), decides allow or deny (the gate turns a report into a block,
//! `Permitted::check_request`), or keeps, logs or returns a matched value: a [`Finding`] is a
//! detector's name and a place.

mod config;
mod decode;
mod detect;
mod pattern;

use http::HeaderMap;
use http::header::PROXY_AUTHORIZATION;

pub use config::{InspectConfig, OnUnreadable};
pub use decode::Unreadable;
use detect::Scanner;
pub use detect::{Finding, Place};
pub use pattern::{PatternConfig, PatternError};

/// The head of a request as inspection reads it.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    /// The host as the request named it (its case kept: a canonical host is lowercase, and
    /// most credential formats are not).
    pub host: &'a str,
    /// The request target's path and query, as sent.
    pub path_and_query: &'a str,
    /// The request's headers.
    pub headers: &'a HeaderMap,
    /// The real values of the configured secrets not bound to this host (`crate::secrets`),
    /// each with its detector name (`secret github`): found anywhere, they refuse the request.
    pub secrets: &'a [(String, &'a str)],
}

/// The request's body, as far as the proxy read it.
#[derive(Debug, Clone, Copy)]
pub enum Body<'a> {
    /// Read whole (empty for a request without one).
    Read(&'a [u8]),
    /// Not read: longer than `max_body`, declared or once read that far.
    TooLarge,
    /// A WebSocket upgrade: its frames pass after the decision, so they cannot be inspected.
    Upgrade,
}

/// What inspecting one request found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Every detector that matched, and where (at most 16).
    pub findings: Vec<Finding>,
    /// Why (part of) the request could not be inspected, if it could not.
    pub unreadable: Option<Unreadable>,
    /// Whether that refuses the request: `on_unreadable = "refuse"`, and always for an upgrade.
    pub refuse_unreadable: bool,
}

impl Report {
    /// True when the request must be refused (in enforce mode).
    pub fn refuses(&self) -> bool {
        !self.findings.is_empty() || (self.unreadable.is_some() && self.refuse_unreadable)
    }
}

impl InspectConfig {
    /// `text` with every match of the operator's own patterns replaced by `REDACTED`: what a
    /// logged value (an MCP call's arguments, `crate::mcp`) is written as.
    pub fn redacted(&self, text: &str) -> String {
        let mut bytes = text.as_bytes().to_vec();
        for pattern in &self.patterns {
            bytes = pattern.regex().replace_all(&bytes, crate::audit::REDACTED.as_bytes()).into_owned();
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Runs every detector over `head` and `body`.
    pub fn inspect(&self, head: Head<'_>, body: Body<'_>) -> Report {
        let mut scanner = Scanner::new(&self.patterns, head.secrets);
        scanner.scan(head.host.as_bytes(), || "host".to_owned());
        let (path, query) = head.path_and_query.split_once('?').unwrap_or((head.path_and_query, ""));
        scanner.scan_at(&percent_decoded(path.as_bytes()), Place::Path, || "path".to_owned());
        let named = |name: &str| format!("query: {name}");
        decode::scan_pairs(&mut scanner, query.as_bytes(), Place::Query, named, "query: a parameter");
        for (name, value) in head.headers {
            if name == PROXY_AUTHORIZATION {
                continue;
            }
            let shown = scanner.shown(name.as_str().as_bytes());
            scanner.scan(name.as_str().as_bytes(), || "header: a header name".to_owned());
            // Names arrive lower-cased: an upper-case credential (an AWS key id) sent as one
            // is whole again upper-cased.
            scanner.scan(&name.as_str().to_ascii_uppercase().into_bytes(), || "header: a header name".to_owned());
            scanner.scan(value.as_bytes(), || match &shown {
                Some(name) => format!("header: {name}"),
                None => "header: a header".to_owned(),
            });
        }
        let unreadable = match body {
            Body::Read(bytes) => decode::scan_body(&mut scanner, head.headers, bytes, self.max_body).err(),
            Body::TooLarge => Some(Unreadable::TooLarge { max_body: self.max_body }),
            Body::Upgrade => Some(Unreadable::Upgrade),
        };
        let refuse_unreadable = self.on_unreadable == OnUnreadable::Refuse || unreadable == Some(Unreadable::Upgrade);
        Report { findings: scanner.into_findings(), unreadable, refuse_unreadable }
    }
}

/// `bytes` with every `%XX` turned into its byte (a `%` not followed by two hex digits is
/// kept as it is).
pub(crate) fn percent_decoded(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) =
                (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex))
        {
            out.push((hi * 16 + lo) as u8);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;

    use super::*;

    const KEY: &str = "AKIAIOSFODNN7EXAMPLE";

    fn report(config: &InspectConfig, host: &str, target: &str, headers: &HeaderMap, body: Body<'_>) -> Vec<String> {
        let report = config.inspect(Head { host, path_and_query: target, headers, secrets: &[] }, body);
        report.findings.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn host_path_query_and_headers_are_each_named() {
        let config = InspectConfig::default();
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", HeaderValue::from_static("xoxb-1234567890-abcdef"));
        headers.insert("proxy-authorization", HeaderValue::from_static("Basic AKIAIOSFODNN7EXAMPLE"));
        let target = "/upload/AKIA%49OSFODNN7EXAMPLE?token=ghp_0123456789abcdefghijABCDEFGHIJ012345&x=1";
        let found =
            report(&config, &format!("{}.evil.test", KEY.to_ascii_lowercase()), target, &headers, Body::Read(b""));
        assert_eq!(
            found,
            ["aws_access_key_id in path", "github_token in query: token", "slack_token in header: x-api-key"],
            "a lowercase host label is no key id; Proxy-Authorization is the proxy's own"
        );
        let found = report(&config, &format!("{KEY}.evil.test"), "/", &HeaderMap::new(), Body::Read(b""));
        assert_eq!(found, ["aws_access_key_id in host"]);
    }

    #[test]
    fn a_secret_in_a_parameter_or_header_name_is_found_and_not_shown() {
        let config = InspectConfig::default();
        let mut headers = HeaderMap::new();
        headers.insert(http::header::HeaderName::from_static("akia-x"), HeaderValue::from_static("1"));
        let found = report(&config, "h.test", &format!("/?{KEY}=1"), &headers, Body::Read(b""));
        assert_eq!(found, ["aws_access_key_id in query: a parameter name"]);
        assert!(found.iter().all(|f| !f.contains(KEY)));
    }

    #[test]
    fn a_path_finding_is_marked_for_the_log() {
        let config = InspectConfig::default();
        let report = config.inspect(
            Head { host: "h.test", path_and_query: &format!("/k/{KEY}"), headers: &HeaderMap::new(), secrets: &[] },
            Body::Read(b""),
        );
        assert!(report.refuses() && report.findings.iter().all(|f| f.place == Place::Path));
    }

    #[test]
    fn unreadable_bodies_follow_on_unreadable_and_upgrades_are_always_refused() {
        let head = Head { host: "h.test", path_and_query: "/", headers: &HeaderMap::new(), secrets: &[] };
        let refuse = InspectConfig::default();
        let allow = InspectConfig { on_unreadable: OnUnreadable::Allow, ..InspectConfig::default() };
        let too_large = refuse.inspect(head, Body::TooLarge);
        assert_eq!(too_large.unreadable, Some(Unreadable::TooLarge { max_body: 1024 * 1024 }));
        assert!(too_large.refuses());
        let allowed = allow.inspect(head, Body::TooLarge);
        assert!(allowed.unreadable.is_some() && !allowed.refuses());
        assert!(allow.inspect(head, Body::Upgrade).refuses());
        assert!(!refuse.inspect(head, Body::Read(b"{}")).refuses());
    }

    #[test]
    fn operator_patterns_run_everywhere() {
        let config = InspectConfig {
            patterns: vec![PatternConfig::new("internal_token", "itok_[a-z0-9]{8}").expect("compiles")],
            ..InspectConfig::default()
        };
        let found = report(&config, "h.test", "/?q=itok_abcd1234", &HeaderMap::new(), Body::Read(b"itok_00000000"));
        assert_eq!(found, ["internal_token in query: q", "internal_token in body"]);
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(percent_decoded(b"/a%2Fb%zz%4"), b"/a/b%zz%4");
        assert_eq!(percent_decoded(b"%41%6b"), b"Ak");
    }
}
