//! Header rewriting every forwarded message gets, in both directions: hop-by-hop fields out
//! (RFC 9110 §7.6.1), `Via` in (RFC 9110 §7.6.3), and the exception for protocol upgrades
//! (RFC 9110 §7.8), whose `Connection: upgrade` and `Upgrade` must reach the other side.
//! Only the `websocket` upgrade is ever forwarded: any other token (`h2c`, `TLS/1.2`, ...)
//! is removed with the other hop-by-hop fields, `HTTP2-Settings` with it, so an origin can
//! never switch protocols under the gate and carry later requests undecided.
//!
//! Never reads or changes end-to-end fields other than those.

use http::header::{
    CONNECTION, CONTENT_ENCODING, HeaderName, HeaderValue, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE, TRAILER,
};
use http::header::{TRANSFER_ENCODING, UPGRADE, VIA};
use http::{HeaderMap, Version};
use smallvec::SmallVec;

/// The pseudonym agentgate uses in `Via` (RFC 9110 §7.6.3), spelled out in each of the
/// `Via` values of [`append_via`] (static, so a forwarded message's `Via` costs no formatting
/// or allocation: bench/RESULTS.md, round 8).
macro_rules! via {
    ($protocol:literal) => {
        HeaderValue::from_static(concat!($protocol, " agentgate"))
    };
}

/// Fields that describe one connection, not the message (RFC 9110 §7.6.1), plus the
/// pre-standard `Keep-Alive` and `Proxy-Connection` that clients still send, and h2c's
/// `HTTP2-Settings` (RFC 7540 §3.2.1: connection-specific).
static HOP_BY_HOP: [HeaderName; 10] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("http2-settings"),
    PROXY_AUTHENTICATE,
    PROXY_AUTHORIZATION,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// The one upgrade token agentgate forwards (RFC 6455 §4.1).
const WEBSOCKET: &str = "websocket";

/// Whether a message's hop-by-hop `Upgrade` survives the rewrite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Upgrade {
    /// Ordinary message: every hop-by-hop field goes.
    Drop,
    /// A WebSocket upgrade request or its `101` answer: `Upgrade: websocket` is kept and
    /// `Connection: upgrade` set, so both sides can switch to WebSocket through the proxy.
    Keep,
}

/// Whether `headers` ask to switch to WebSocket: `Connection` lists `upgrade` and `Upgrade`
/// lists `websocket` (RFC 9110 §7.8). Only HTTP/1.1 has this mechanism. Any other upgrade
/// is an ordinary request: its `Upgrade` goes with the hop-by-hop fields.
pub(crate) fn is_upgrade_request(version: Version, headers: &HeaderMap) -> bool {
    version == Version::HTTP_11
        && tokens(headers, &UPGRADE).any(|t| t.eq_ignore_ascii_case(WEBSOCKET))
        && connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"))
}

/// Removes every hop-by-hop field, including each field named in `Connection`; with
/// [`Upgrade::Keep`], puts back `Upgrade: websocket` (no other token) and `Connection: upgrade`. A `TE` that lists
/// `trailers` is kept as `TE: trailers`: the one value h2 allows (RFC 9113 §8.2.2), which
/// gRPC origins require. A transfer coding other than `chunked` (`Transfer-Encoding: gzip,
/// chunked`) is a layer of the body the next hop still gets: it moves to a `Content-Encoding`
/// line after the others (the codings share their names, RFC 9112 §7), so the body never
/// travels coded without its label and the scrubber and inspector undo it (`crate::coding`).
pub(crate) fn remove_hop_by_hop(headers: &mut HeaderMap, upgrade: Upgrade) {
    // A field `Connection` names that is removed anyway (`keep-alive`, `te`) makes no name of
    // its own: a custom name is an allocation.
    let named: SmallVec<[HeaderName; 2]> = connection_tokens(headers)
        .filter(|token| !HOP_BY_HOP.iter().any(|hop| token.eq_ignore_ascii_case(hop.as_str())))
        .filter_map(|token| HeaderName::from_bytes(token.as_bytes()).ok())
        .collect();
    let transfer_codings: Vec<String> = tokens(headers, &TRANSFER_ENCODING)
        .filter(|t| !t.eq_ignore_ascii_case("chunked") && !t.eq_ignore_ascii_case("identity"))
        .map(str::to_ascii_lowercase)
        .collect();
    let accepts_trailers = tokens(headers, &TE).any(|t| t.eq_ignore_ascii_case("trailers"));
    let keep_websocket =
        upgrade == Upgrade::Keep && tokens(headers, &UPGRADE).any(|t| t.eq_ignore_ascii_case(WEBSOCKET));
    // Only the hop-by-hop fields the message has, found in one pass over its names: a
    // removal per listed name hashed and probed all ten on every message (most have one).
    let present: SmallVec<[HeaderName; 4]> = headers.keys().filter(|name| HOP_BY_HOP.contains(name)).cloned().collect();
    for name in named.iter().chain(&present) {
        headers.remove(name);
    }
    if accepts_trailers {
        headers.insert(TE, HeaderValue::from_static("trailers"));
    }
    if !transfer_codings.is_empty()
        && let Ok(codings) = HeaderValue::from_str(&transfer_codings.join(", "))
    {
        headers.append(CONTENT_ENCODING, codings);
    }
    if keep_websocket {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, HeaderValue::from_static(WEBSOCKET));
    }
}

/// Appends `Via: <received-protocol> agentgate`, where the protocol is the version of the
/// message as agentgate received it (`1.1`, `2`), after any `Via` already present.
pub(crate) fn append_via(headers: &mut HeaderMap, received: Version) {
    let value = match received {
        Version::HTTP_09 => via!("0.9"),
        Version::HTTP_10 => via!("1.0"),
        Version::HTTP_2 => via!("2"),
        Version::HTTP_3 => via!("3"),
        _ => via!("1.1"),
    };
    headers.append(VIA, value);
}

/// The lower-cased tokens of every `Connection` field line.
fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> + '_ {
    tokens(headers, &CONNECTION)
}

/// The tokens (parameters cut off) of every `name` field line, as written: tokens are
/// case-insensitive, so each use compares ignoring ASCII case (a lower-cased copy of every
/// token cost an allocation each, on every forwarded message).
fn tokens<'a>(headers: &'a HeaderMap, name: &HeaderName) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|token| token.split(';').next().unwrap_or_default().trim())
        .filter(|token| !token.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(HeaderName::from_static(name), HeaderValue::from_static(value));
        }
        map
    }

    #[test]
    fn a_transfer_coding_other_than_chunked_moves_to_the_content_encoding_lines() {
        let mut map = headers(&[("content-encoding", "identity"), ("transfer-encoding", "gzip, chunked")]);
        remove_hop_by_hop(&mut map, Upgrade::Drop);
        assert_eq!(map, headers(&[("content-encoding", "identity"), ("content-encoding", "gzip")]));
        // Tokens are case-insensitive: compared so, and a coding moved is written lower-case.
        let mut map = headers(&[("transfer-encoding", "GZIP, Chunked"), ("connection", "Keep-Alive, TE")]);
        remove_hop_by_hop(&mut map, Upgrade::Drop);
        assert_eq!(map, headers(&[("content-encoding", "gzip")]));
    }

    #[test]
    fn rfc9110_7_6_1_removes_fixed_and_connection_named_fields() {
        let mut map = headers(&[
            ("connection", "close, X-Trace"),
            ("connection", "x-other"),
            ("x-trace", "1"),
            ("x-other", "2"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic YTpi"),
            ("te", "gzip"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("accept", "*/*"),
        ]);
        remove_hop_by_hop(&mut map, Upgrade::Drop);
        assert_eq!(map, headers(&[("accept", "*/*")]));
    }

    #[test]
    fn rfc9113_8_2_2_te_trailers_survives_alone() {
        let mut map = headers(&[("te", "gzip;q=0.5, Trailers"), ("connection", "te")]);
        remove_hop_by_hop(&mut map, Upgrade::Drop);
        assert_eq!(map, headers(&[("te", "trailers")]));
    }

    #[test]
    fn rfc9110_7_8_upgrade_keeps_upgrade_and_sets_connection() {
        let mut map = headers(&[("connection", "keep-alive, Upgrade"), ("upgrade", "websocket"), ("keep-alive", "x")]);
        assert!(is_upgrade_request(Version::HTTP_11, &map));
        remove_hop_by_hop(&mut map, Upgrade::Keep);
        assert_eq!(map, headers(&[("connection", "upgrade"), ("upgrade", "websocket")]));
    }

    #[test]
    fn only_websocket_is_forwarded() {
        let h2c = headers(&[
            ("connection", "Upgrade, HTTP2-Settings"),
            ("upgrade", "h2c"),
            ("http2-settings", "AAMAAABkAAQCAAAAAAIAAAAA"),
        ]);
        assert!(!is_upgrade_request(Version::HTTP_11, &h2c));
        let mut map = h2c.clone();
        remove_hop_by_hop(&mut map, Upgrade::Drop);
        assert!(map.is_empty(), "{map:?}");
        let mut map = headers(&[("connection", "upgrade"), ("upgrade", "h2c, WebSocket")]);
        assert!(is_upgrade_request(Version::HTTP_11, &map));
        remove_hop_by_hop(&mut map, Upgrade::Keep);
        assert_eq!(map, headers(&[("connection", "upgrade"), ("upgrade", "websocket")]));
        let mut tls = headers(&[("connection", "upgrade"), ("upgrade", "TLS/1.2")]);
        assert!(!is_upgrade_request(Version::HTTP_11, &tls));
        remove_hop_by_hop(&mut tls, Upgrade::Keep);
        assert!(tls.is_empty(), "{tls:?}");
    }

    #[test]
    fn upgrade_needs_both_fields_and_http11() {
        assert!(!is_upgrade_request(Version::HTTP_11, &headers(&[("upgrade", "websocket")])));
        assert!(!is_upgrade_request(Version::HTTP_11, &headers(&[("connection", "upgrade")])));
        let both = headers(&[("connection", "upgrade"), ("upgrade", "websocket")]);
        assert!(!is_upgrade_request(Version::HTTP_2, &both));
    }

    #[test]
    fn rfc9110_7_6_3_via_is_appended_with_the_received_version() {
        let mut map = headers(&[("via", "1.0 fred")]);
        append_via(&mut map, Version::HTTP_2);
        let values: Vec<_> = map.get_all(VIA).iter().map(|v| v.to_str().unwrap_or_default()).collect();
        assert_eq!(values, ["1.0 fred", "2 agentgate"]);
    }
}
