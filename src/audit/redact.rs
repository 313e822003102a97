//! What of a request URL reaches the decision log. The log is read by people who must not
//! learn agents' secrets from it: user info never appears, fragments never appear (they are
//! never sent to an origin, and OAuth implicit flows put tokens there), and query values are
//! replaced by [`REDACTED`] unless the operator sets `[audit] log_query = true`. Nor may a
//! URL disguise itself to its reader: characters that reorder or hide text
//! ([`is_display_unsafe`]) are percent-encoded.

use std::borrow::Cow;
use std::fmt::Write as _;

/// What a query value is replaced with.
pub const REDACTED: &str = "REDACTED";

/// A request URL as the decision log shows it, borrowed from the URL redacted where nothing
/// in it needs changing, so most lines cost no copy of it: `full` when the URL has no user
/// info, no query (or `log_query` is on) and only printable ASCII; `domain` when the host is
/// already lower case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedUrl<'a> {
    /// The URL for `url.full`: no user info, no fragment, query values redacted unless asked,
    /// display-unsafe characters percent-encoded.
    pub full: Cow<'a, str>,
    /// The host for `url.domain`, lower-cased; IPv6 literals keep their brackets (ECS).
    /// `None` for a URL without an authority (origin-form such as `/path`).
    pub domain: Option<Cow<'a, str>>,
}

/// Redacts `url` for the log. Query keys are kept and every value, even an empty one,
/// becomes `REDACTED` (`?q=REDACTED&page=REDACTED`); a query component without `=` may
/// itself be a secret (`?AKIA...`), so it becomes `REDACTED` as a whole. `&` is the only
/// separator, so an encoded `%26` stays inside its value. With `log_query` the query is
/// kept as sent. User info and the fragment are removed either way, and every
/// display-unsafe (`is_display_unsafe`) character left (the request line may carry them as
/// raw UTF-8) is percent-encoded, as RFC 3986 wants any non-ASCII octet anyway.
pub fn redact_url(url: &str, log_query: bool) -> LoggedUrl<'_> {
    // Byte searches (memchr, a scan) rather than `str`'s pattern searches: this runs for both
    // lines of every request, and those were ~1,600 instructions a line (bench/RESULTS.md).
    let url = memchr::memchr(b'#', url.as_bytes()).map_or(url, |fragment| &url[..fragment]);
    let (authority, domain, path_and_query) = match split_scheme(url) {
        Some((scheme, rest)) => {
            let end = rest.bytes().position(|b| b == b'/' || b == b'?').unwrap_or(rest.len());
            let (authority, path_and_query) = rest.split_at(end);
            let host_port = memchr::memrchr(b'@', authority.as_bytes()).map_or(authority, |at| &authority[at + 1..]);
            let host = crate::net::host::host_part(host_port);
            let domain = match host.bytes().any(|b| b.is_ascii_uppercase()) {
                true => Cow::Owned(host.to_ascii_lowercase()),
                false => Cow::Borrowed(host),
            };
            (Some((scheme, authority, host_port)), (!host.is_empty()).then_some(domain), path_and_query)
        }
        None => (None, None, url),
    };
    let query = memchr::memchr(b'?', path_and_query.as_bytes())
        .filter(|_| !log_query)
        .map(|mark| (&path_and_query[..mark], &path_and_query[mark + 1..]));
    let user_info = authority.is_some_and(|(_, authority, host_port)| authority.len() != host_port.len());
    if query.is_none() && !user_info && is_printable_ascii(url) {
        return LoggedUrl { full: Cow::Borrowed(url), domain };
    }
    // Pushed piece by piece into one buffer: `format!` cost a request two formatting passes
    // per log line.
    let mut full = String::with_capacity(url.len() + 16);
    if let Some((scheme, _, host_port)) = authority {
        full.push_str(scheme);
        full.push_str("://");
        full.push_str(host_port);
    }
    match query {
        Some((path, query)) => {
            full.push_str(path);
            full.push('?');
            full.push_str(&redact_query(query));
        }
        None => full.push_str(path_and_query),
    }
    // ASCII apart from controls is the common case and needs no second pass.
    if !is_printable_ascii(&full) {
        full = percent_encode_unsafe(&full);
    }
    LoggedUrl { full: Cow::Owned(full), domain }
}

/// True when `text` is printable ASCII (no control character, no DEL, nothing beyond).
fn is_printable_ascii(text: &str) -> bool {
    text.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// Whether `c` must never reach a reader raw: the C0 and C1 controls and DEL (a terminal or
/// viewer acts on them), the bidirectional formatting characters (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069: they reorder what follows, so `/invoice` + U+202E +
/// `fdp.exe` reads as `/invoiceexe.pdf`) and the line and paragraph separators (U+2028,
/// U+2029, line breaks to many viewers). The console's script escapes the same set
/// (`src/admin/console/console.js`, `visible`).
pub(crate) fn is_display_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with each [display-unsafe](is_display_unsafe) character percent-encoded (its
/// UTF-8 octets, upper-case hex).
fn percent_encode_unsafe(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_display_unsafe(c) {
            for byte in c.encode_utf8(&mut [0; 4]).bytes() {
                let _ = write!(encoded, "%{byte:02X}");
            }
        } else {
            encoded.push(c);
        }
    }
    encoded
}

/// Splits `scheme://rest` when `url` starts with a valid scheme (RFC 3986 §3.1), so that a
/// `://` inside an origin-form path or query is not taken for one.
fn split_scheme(url: &str) -> Option<(&str, &str)> {
    // The scheme characters, then `://`: a `:` ends them, so this is the first `://` exactly
    // when everything before it is a scheme.
    let end = url.bytes().position(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))?;
    let (scheme, rest) = (&url[..end], url[end..].strip_prefix("://")?);
    scheme.starts_with(|c: char| c.is_ascii_alphabetic()).then_some((scheme, rest))
}

fn redact_query(query: &str) -> String {
    let redacted: Vec<String> = query
        .split('&')
        .map(|component| match component.split_once('=') {
            _ if component.is_empty() => String::new(),
            Some((key, _)) => format!("{key}={REDACTED}"),
            None => REDACTED.to_owned(),
        })
        .collect();
    redacted.join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (case, input, expected `url.full` without `log_query`, expected with it).
    const TABLE: &[(&str, &str, &str, &str)] = &[
        ("no query", "https://example.com/a/b", "https://example.com/a/b", "https://example.com/a/b"),
        (
            "values replaced, keys kept",
            "https://example.com/search?q=secret&page=2",
            "https://example.com/search?q=REDACTED&page=REDACTED",
            "https://example.com/search?q=secret&page=2",
        ),
        ("empty query", "https://example.com/?", "https://example.com/?", "https://example.com/?"),
        ("empty value", "https://example.com/?q=", "https://example.com/?q=REDACTED", "https://example.com/?q="),
        ("no `=`", "https://example.com/?AKIA123", "https://example.com/?REDACTED", "https://example.com/?AKIA123"),
        (
            "no `=` beside pairs",
            "http://example.com/x?flag&a=1",
            "http://example.com/x?REDACTED&a=REDACTED",
            "http://example.com/x?flag&a=1",
        ),
        (
            "encoded & stays in its value",
            "https://example.com/?q=a%26b%3Dc&n=1",
            "https://example.com/?q=REDACTED&n=REDACTED",
            "https://example.com/?q=a%26b%3Dc&n=1",
        ),
        (
            "empty components kept",
            "https://example.com/?a=1&&b=2&",
            "https://example.com/?a=REDACTED&&b=REDACTED&",
            "https://example.com/?a=1&&b=2&",
        ),
        (
            "value holding `=`",
            "https://example.com/?t=a=b",
            "https://example.com/?t=REDACTED",
            "https://example.com/?t=a=b",
        ),
        (
            "fragment removed",
            "https://example.com/cb?state=x#access_token=tok",
            "https://example.com/cb?state=REDACTED",
            "https://example.com/cb?state=x",
        ),
        (
            "fragment without query",
            "https://example.com/page#top",
            "https://example.com/page",
            "https://example.com/page",
        ),
        ("`?` inside the fragment", "https://example.com/p#a?b=c", "https://example.com/p", "https://example.com/p"),
        (
            "user info removed",
            "https://user:pa%40ss@example.com:8443/x?k=v",
            "https://example.com:8443/x?k=REDACTED",
            "https://example.com:8443/x?k=v",
        ),
        ("user info without path", "http://user@example.com", "http://example.com", "http://example.com"),
        (
            "query right after the authority",
            "https://example.com?k=v",
            "https://example.com?k=REDACTED",
            "https://example.com?k=v",
        ),
        ("ipv6 literal", "http://[::1]:8080/?k=v", "http://[::1]:8080/?k=REDACTED", "http://[::1]:8080/?k=v"),
        ("origin-form", "/path?k=v", "/path?k=REDACTED", "/path?k=v"),
        ("`://` inside an origin-form query", "/go?to=http://a@b/", "/go?to=REDACTED", "/go?to=http://a@b/"),
    ];

    #[test]
    fn redaction_table() {
        for (case, input, redacted, kept) in TABLE {
            assert_eq!(redact_url(input, false).full, *redacted, "{case}: log_query = false");
            assert_eq!(redact_url(input, true).full, *kept, "{case}: log_query = true");
        }
    }

    #[test]
    fn domain_is_the_lower_cased_host() {
        let cases = [
            ("https://u:p@Example.COM:443/x", Some("example.com")),
            ("http://[2001:db8::1]:80/", Some("[2001:db8::1]")),
            ("http://example.com?x", Some("example.com")),
            ("/relative?x=1", None),
            ("http:///nohost", None),
        ];
        for (input, domain) in cases {
            assert_eq!(redact_url(input, false).domain.as_deref(), domain, "{input}");
        }
    }

    /// A right-to-left override in a path once made `url.full` read backwards in any
    /// viewer. Bidi controls, C0 and C1 controls, DEL and the line separators are
    /// percent-encoded, in the query too (kept with `log_query`); other non-ASCII text stays
    /// as sent, and what was already percent-encoded is not encoded twice.
    #[test]
    fn bidi_and_control_characters_are_percent_encoded() {
        let cases = [
            ("https://example.com/invoice\u{202e}fdp.exe", "https://example.com/invoice%E2%80%AEfdp.exe"),
            (
                "https://example.com/a\u{2066}b\u{2069}\u{200e}\u{200f}\u{061c}",
                "https://example.com/a%E2%81%A6b%E2%81%A9%E2%80%8E%E2%80%8F%D8%9C",
            ),
            (
                "https://example.com/\u{202a}\u{202b}\u{202c}\u{202d}",
                "https://example.com/%E2%80%AA%E2%80%AB%E2%80%AC%E2%80%AD",
            ),
            ("https://example.com/c0\u{1b}[2J\u{7f}", "https://example.com/c0%1B[2J%7F"),
            ("https://example.com/c1\u{85}\u{9b}", "https://example.com/c1%C2%85%C2%9B"),
            ("https://example.com/line\u{2028}para\u{2029}", "https://example.com/line%E2%80%A8para%E2%80%A9"),
            ("https://example.com/café/%E2%80%AE", "https://example.com/café/%E2%80%AE"),
        ];
        for (input, logged) in cases {
            assert_eq!(redact_url(input, false).full, logged, "{input:?}");
        }
        let query = redact_url("https://example.com/p?q=\u{202e}x", true);
        assert_eq!(query.full, "https://example.com/p?q=%E2%80%AEx", "kept queries too");
        assert!(!is_display_unsafe('é') && !is_display_unsafe('\u{200d}'), "text, not a control");
    }

    #[test]
    fn secrets_never_survive_either_setting() {
        for log_query in [false, true] {
            let logged = redact_url("https://alice:hunter2@example.com/p?x=1#tok=hunter2", log_query);
            assert!(!logged.full.contains("hunter2"), "{}", logged.full);
            assert!(!logged.full.contains("alice"), "{}", logged.full);
        }
    }
}
