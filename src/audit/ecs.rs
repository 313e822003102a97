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
    let Some((scheme, rest)) = full.split_once("://") else { return };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path_and_query) = rest.split_at(end);
    let path = path_and_query.split('?').next().unwrap_or_default();
    map.str(field::URL_PATH, if path.is_empty() { "/" } else { path });
    // After the last `:` outside an IPv6 literal's brackets.
    let after_host = authority.rfind(']').map_or(authority, |bracket| &authority[bracket..]);
    let port = match after_host.rsplit_once(':') {
        Some((_, port)) => port.parse().ok(),
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
