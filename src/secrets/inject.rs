//! Putting a secret's value in place of its placeholder in a request on its way to the
//! origin ([`apply`]): in the headers and query parameters the secret names (`Basic`
//! credentials decoded, replaced and encoded again), and nowhere else; and the request of a
//! host with secrets made safe to scrub (identity encoding, no ranges). Also the text helpers
//! the check shares (finding a needle, decoding Basic credentials and percent-encoding).
//!
//! Never: decides whether a secret may be used (`Secrets::check` has), or touches the body.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::header::{ACCEPT_ENCODING, HeaderValue, IF_RANGE, RANGE};
use http::request::Parts;
use http::uri::PathAndQuery;
use zeroize::Zeroizing;

use super::{Place, Plan};

/// A text [`apply`] made that carries a value in a form of its own making (a `Basic` token),
/// and the agent's text it replaced.
pub type Made = (Zeroizing<String>, String);

/// Applies `plan` to a request's head: its injections, and for a host with secrets bound to
/// it, `Accept-Encoding: identity` and no `Range` (a scrubbed body cannot honour one).
/// Returns the texts it made that carry a value in a form of its own making (the `Basic`
/// tokens it encoded), each with the agent's token it replaced: the answer's [`Scrubber`]
/// puts the agent's own token back wherever the origin quotes the one agentgate made.
///
/// [`Scrubber`]: super::Scrubber
pub fn apply(plan: &Plan, parts: &mut Parts) -> Vec<Made> {
    let mut made = Vec::new();
    for injection in &plan.injections {
        let (placeholder, value) = (injection.placeholder.as_str(), injection.value.as_str());
        match &injection.place {
            Place::Header(name) => {
                let values: Vec<HeaderValue> = parts.headers.get_all(name).iter().cloned().collect();
                parts.headers.remove(name);
                for original in values {
                    let replaced = match replace_header(&original, placeholder, value) {
                        Some((replaced, token)) => {
                            made.extend(token);
                            replaced
                        }
                        None => original,
                    };
                    parts.headers.append(name.clone(), replaced);
                }
            }
            Place::Query(param) => {
                let Some(path_and_query) = parts.uri.path_and_query() else { continue };
                let Some(query) = path_and_query.query() else { continue };
                let replaced = replace_query(query, param, placeholder, value);
                let target = format!("{}?{replaced}", path_and_query.path());
                let mut uri = parts.uri.clone().into_parts();
                if let Ok(target) = PathAndQuery::try_from(target) {
                    uri.path_and_query = Some(target);
                    if let Ok(uri) = http::Uri::from_parts(uri) {
                        parts.uri = uri;
                    }
                }
            }
        }
    }
    if plan.scrubs() {
        parts.headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
        parts.headers.remove(RANGE);
        parts.headers.remove(IF_RANGE);
    }
    made
}

/// `original` with `placeholder` replaced by `value`: in its text, or inside its `Basic`
/// credentials (then with the token made and the agent's token it replaced); `None` when it
/// holds no placeholder or the result is not a header value.
fn replace_header(original: &HeaderValue, placeholder: &str, value: &str) -> Option<(HeaderValue, Option<Made>)> {
    let text = original.to_str().ok()?;
    if text.contains(placeholder) {
        return Some((HeaderValue::from_str(&text.replace(placeholder, value)).ok()?, None));
    }
    let decoded = basic_decoded(original.as_bytes())?;
    if !decoded.contains(placeholder) {
        return None;
    }
    let (scheme, token) = text.trim().split_once(' ')?;
    let encoded = Zeroizing::new(STANDARD.encode(Zeroizing::new(decoded.replace(placeholder, value)).as_bytes()));
    let replaced = HeaderValue::from_str(&format!("{scheme} {}", encoded.as_str())).ok()?;
    Some((replaced, Some((encoded, token.trim().to_owned()))))
}

/// The query with `placeholder` replaced by `value` in the values of `param` only.
fn replace_query(query: &str, param: &str, placeholder: &str, value: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, v)) if percent_decode(name) == param => {
                let replaced = percent_decode(v).replace(placeholder, value);
                format!("{name}={}", percent_encode(&replaced, true))
            }
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// Whether the query of `path_and_query` has `param` with `placeholder` in its value.
pub(super) fn query_has(path_and_query: &str, param: &str, placeholder: &str) -> bool {
    let Some((_, query)) = path_and_query.split_once('?') else { return false };
    query.split('&').any(|pair| {
        pair.split_once('=')
            .is_some_and(|(name, v)| percent_decode(name) == param && percent_decode(v).contains(placeholder))
    })
}

/// Whether a header value holds `needle`: in its text, or inside its `Basic` credentials.
pub(super) fn header_holds(value: &[u8], needle: &str) -> bool {
    contains(value, needle) || basic_decoded(value).is_some_and(|decoded| decoded.contains(needle))
}

/// Whether `haystack` contains `needle`.
pub(super) fn contains(haystack: &[u8], needle: &str) -> bool {
    memchr::memmem::find(haystack, needle.as_bytes()).is_some()
}

/// Whether `haystack` holds `needle` in any ASCII case (an empty needle is everywhere).
pub(super) fn contains_ignoring_case(haystack: &[u8], needle: &str) -> bool {
    let needle = needle.as_bytes();
    needle.is_empty() || haystack.windows(needle.len()).any(|window| window.eq_ignore_ascii_case(needle))
}

/// The credentials of a `Basic` header value, decoded (`user:password`).
pub(super) fn basic_decoded(value: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, encoded) = text.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    String::from_utf8(STANDARD.decode(encoded.trim()).ok()?).ok()
}

/// `text` with `%XX` escapes decoded (and `+` left as it is); an invalid escape stays.
pub(super) fn percent_decode(text: &str) -> String {
    String::from_utf8_lossy(&crate::inspect::percent_decoded(text.as_bytes())).into_owned()
}

/// `text` percent-encoded for a query value (unreserved characters kept), its hex digits
/// upper case (as [`apply`] sends it) or lower case (as an origin may quote it back).
pub(super) fn percent_encode(text: &str, upper: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else if upper {
            out.push_str(&format!("%{byte:02X}"));
        } else {
            out.push_str(&format!("%{byte:02x}"));
        }
    }
    out
}
