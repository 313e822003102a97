//! The fields of a decision line that ECS defines and a record does not hold as such, derived
//! when the line is encoded: `event.outcome` in ECS's sense (did the gate do what it decided:
//! `success`, `failure`, or `unknown` on a start line), `url.path` and `url.port` (from the
//! redacted `url.full`), and `destination.ip` / `destination.port` (the vetted address a
//! forwarded request was dialled to). The decision itself is `event.action`
//! ([`super::Outcome`]). See `docs/decision-log.md`, "ECS".
//!
//! Never: parses what it cannot read back cheaply (a URL it does not understand gets no
//! `url.path` or `url.port`), or writes a destination for a request that was not sent on.

use super::field;
use super::json::Object;
use super::record::{DecisionRecord, Line, Outcome};

/// ECS's `event.outcome` (`success`, `failure`, `unknown`), as a value to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcsOutcome {
    /// The gate did what it decided: forwarded, refused, challenged, held.
    Success,
    /// agentgate failed to do it: the decision's `event.action` is `error`.
    Failure,
    /// Not known yet: a start line, written before the request is forwarded.
    Unknown,
}

impl EcsOutcome {
    /// Every value ECS allows, in that order.
    pub const ALL: [EcsOutcome; 3] = [EcsOutcome::Success, EcsOutcome::Failure, EcsOutcome::Unknown];

    /// The value written to `event.outcome`.
    pub fn as_str(self) -> &'static str {
        match self {
            EcsOutcome::Success => "success",
            EcsOutcome::Failure => "failure",
            EcsOutcome::Unknown => "unknown",
        }
    }

    /// The ECS outcome of `record`'s line.
    pub fn of(record: &DecisionRecord) -> EcsOutcome {
        match (record.line, record.outcome) {
            (Line::Start, _) => EcsOutcome::Unknown,
            (_, Outcome::Error) => EcsOutcome::Failure,
            _ => EcsOutcome::Success,
        }
    }
}

/// Writes `url.path` and `url.port` of `full` (a redacted `url.full`): the path without its
/// query, and the port, the scheme's default when the URL names none.
pub(super) fn url_parts(map: &mut Object<'_>, full: &str) {
    // Byte scans throughout: the parts are short, and `str`'s searchers set up a substring
    // or `memchr` search for each (two lines a request).
    let Some(colon) = full.bytes().position(|b| b == b':') else { return };
    let (scheme, rest) = (&full[..colon], &full[colon + 1..]);
    let Some(rest) = rest.strip_prefix("//") else { return };
    let end = rest.bytes().position(|b| b == b'/' || b == b'?').unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(end);
    let path = &path_and_query[..path_and_query.bytes().position(|b| b == b'?').unwrap_or(path_and_query.len())];
    map.str(field::URL_PATH, if path.is_empty() { "/" } else { path });
    // After the last `:` outside an IPv6 literal's brackets.
    let after_host = authority.bytes().rposition(|b| b == b']').map_or(authority, |bracket| &authority[bracket..]);
    let port = match after_host.bytes().rposition(|b| b == b':') {
        Some(colon) => after_host[colon + 1..].parse().ok(),
        None => match scheme {
            "http" | "ws" => Some(80),
            "https" | "wss" => Some(443),
            _ => None,
        },
    };
    if let Some(port) = port {
        map.u64(field::URL_PORT, port);
    }
}

/// Writes `destination.ip` and `destination.port` when `record`'s request was sent on (or
/// tried to be: an `error` after the dial) to a vetted address.
pub(super) fn destination(map: &mut Object<'_>, record: &DecisionRecord) {
    let refused = matches!(
        record.outcome,
        Outcome::Deny | Outcome::NeedsApproval | Outcome::RateLimited | Outcome::AuthChallenge
    );
    if let Some(addr) = record.destination.filter(|_| !refused) {
        map.ip(field::DESTINATION_IP, addr.ip());
        map.u64(field::DESTINATION_PORT, addr.port().into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parts_are_the_path_without_its_query_and_the_port_or_the_scheme_s() {
        let cases = [
            ("https://example.com/private/x?q=1", r#"{"url.path":"/private/x","url.port":443}"#),
            ("http://example.com", r#"{"url.path":"/","url.port":80}"#),
            ("http://example.com?x=/y", r#"{"url.path":"/","url.port":80}"#),
            ("https://[::1]:8443/a", r#"{"url.path":"/a","url.port":8443}"#),
            ("https://[::1]/a:b", r#"{"url.path":"/a:b","url.port":443}"#),
            ("ws://h:81/", r#"{"url.path":"/","url.port":81}"#),
            ("wss://h/", r#"{"url.path":"/","url.port":443}"#),
            ("ftp://h/f", r#"{"url.path":"/f"}"#),
            ("https://h:port/", r#"{"url.path":"/"}"#),
            ("no-scheme/path", "{}"),
            ("mailto:a@b", "{}"),
        ];
        for (full, want) in cases {
            let mut out = String::new();
            let mut map = Object::new(&mut out);
            url_parts(&mut map, full);
            map.end();
            assert_eq!(out, want, "{full}");
        }
    }
}
