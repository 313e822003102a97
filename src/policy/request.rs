//! The request as the policy core sees it: method, target, who the agent is, and the few
//! request headers that matter (Content-Type for AGENTS.md action mapping). Borrowed views,
//! built once per request by the gate or by `explain`; the headers are read through
//! [`HeaderLookup`], so the proxy lends its own header map and nothing is copied.

use std::fmt;

/// One request, seen by the evaluator.
#[derive(Debug, Clone, Copy)]
pub struct RequestView<'a> {
    /// The HTTP method as sent (`GET`, `post`, ...). Compared case-insensitively where the
    /// specs say so.
    pub method: &'a str,
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The host, lower case, without brackets for IPv6 literals.
    pub host: &'a str,
    /// The port (default ports filled in).
    pub port: u16,
    /// Path and query as sent, e.g. `/a/b?x=1`; always starts with `/`.
    pub path_and_query: &'a str,
    /// The agent's configured product token, when the operator set one (SEMANTICS X2).
    pub product_token: Option<&'a str>,
    /// The request's `User-Agent` header, used to derive product tokens when none is set.
    pub user_agent: Option<&'a str>,
    /// The agent's id (Proxy-Authorization user name, config name, or client address).
    pub agent_id: &'a str,
    /// The agent's AGENTS.md trust level, 0 to 5.
    pub trust_level: u8,
    /// Purposes the agent declares (automation-preferences `allowed-purposes`).
    pub purposes: &'a [String],
    /// The request headers (names case-insensitive).
    pub headers: &'a dyn HeaderLookup,
}

/// Headers as the evaluator reads them: one value by case-insensitive name. Implemented by
/// [`super::Headers`] (fetched files, `explain`, tests) and by the proxy for its own header
/// map, so a request's headers are read where they are, never copied: rules read
/// two or three of them, the request may carry dozens.
pub trait HeaderLookup: fmt::Debug + Sync {
    /// The first value of header `name` (case-insensitive) that is visible ASCII; a value
    /// that is not is never read by any rule, so it counts as absent.
    fn get(&self, name: &str) -> Option<&str>;

    /// The media type of `Content-Type`, lower case, without parameters (`text/html`).
    fn media_type(&self) -> Option<String> {
        self.get("content-type").map(|v| v.split(';').next().unwrap_or("").trim().to_ascii_lowercase())
    }

    /// True when `Content-Type` says HTML or XHTML (soft-404 pages).
    fn is_html(&self) -> bool {
        matches!(self.media_type().as_deref(), Some("text/html" | "application/xhtml+xml"))
    }
}

/// Safe methods (SEMANTICS X4): everything else is a write.
const SAFE_METHODS: [&str; 3] = ["GET", "HEAD", "OPTIONS"];

impl<'a> RequestView<'a> {
    /// True for GET, HEAD and OPTIONS (SEMANTICS X4).
    pub fn is_safe_method(&self) -> bool {
        SAFE_METHODS.iter().any(|m| m.eq_ignore_ascii_case(self.method))
    }

    /// The path without the query.
    pub fn path(&self) -> &'a str {
        match self.path_and_query.find('?') {
            Some(i) => &self.path_and_query[..i],
            None => self.path_and_query,
        }
    }

    /// The origin as `scheme://host:port`, the key for per-origin state.
    pub fn origin(&self) -> String {
        if self.host.contains(':') {
            format!("{}://[{}]:{}", self.scheme, self.host, self.port)
        } else {
            format!("{}://{}:{}", self.scheme, self.host, self.port)
        }
    }

    /// Whether a group's user-agent token names this agent (SEMANTICS X2): equal,
    /// case-insensitively, to the configured product token; or, with none configured, to a
    /// product name in the `User-Agent` header (`ExampleBot` in
    /// `Mozilla/5.0 (compatible; ExampleBot/0.1; +https://example.com/bot)`). `*` is not
    /// handled here: the caller falls back to `*` groups when no named group matches.
    pub fn names_agent(&self, group_token: &str) -> bool {
        if group_token.is_empty() {
            return false;
        }
        match self.product_token {
            Some(token) => token.eq_ignore_ascii_case(group_token),
            None => self.user_agent.is_some_and(|ua| product_names(ua).any(|p| p.eq_ignore_ascii_case(group_token))),
        }
    }
}

/// The product names in a User-Agent header: each `name/version` product and each such
/// token inside a comment, without the version. Scanned as bytes (every delimiter is ASCII,
/// so each piece is still a `str`): this runs for every group of every file, on every
/// request.
fn product_names(user_agent: &str) -> impl Iterator<Item = &str> {
    let bytes = user_agent.as_bytes();
    let is_delimiter = |b: u8| b.is_ascii_whitespace() || matches!(b, b';' | b'(' | b')' | b',');
    let mut start = 0;
    std::iter::from_fn(move || {
        while start < bytes.len() {
            let end = bytes[start..].iter().position(|&b| is_delimiter(b)).map_or(bytes.len(), |i| start + i);
            let piece = &bytes[start..end];
            let name_end = start + piece.iter().position(|&b| b == b'/').unwrap_or(piece.len());
            let name = &user_agent[start..name_end];
            start = end + 1;
            if !name.is_empty() {
                return Some(name);
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Headers;

    fn view<'a>(headers: &'a Headers, token: Option<&'a str>, ua: Option<&'a str>) -> RequestView<'a> {
        RequestView {
            method: "GET",
            scheme: "https",
            host: "example.com",
            port: 443,
            path_and_query: "/a?b=1",
            product_token: token,
            user_agent: ua,
            agent_id: "a1",
            trust_level: 0,
            purposes: &[],
            headers,
        }
    }

    #[test]
    fn product_name_found_inside_a_comment() {
        let h = Headers::default();
        let v = view(&h, None, Some("Mozilla/5.0 (compatible; ExampleBot/0.1; +https://example.com/bot)"));
        assert!(v.names_agent("examplebot"));
        assert!(v.names_agent("Mozilla"));
        assert!(!v.names_agent("Example"));
        assert!(!v.names_agent(""));
    }

    #[test]
    fn product_names_split_on_every_delimiter_and_keep_non_ascii_names_whole() {
        let names: Vec<&str> = product_names("  Mozilla/5.0 (X11;ツBot/1,\tÄ/2) //x  end/").collect();
        assert_eq!(names, ["Mozilla", "X11", "ツBot", "Ä", "end"]);
        assert_eq!(product_names("").count(), 0);
        assert_eq!(product_names(";;( )").count(), 0);
    }

    #[test]
    fn configured_token_wins_over_user_agent() {
        let h = Headers::default();
        let v = view(&h, Some("FooBot"), Some("BarBot/1.0"));
        assert!(v.names_agent("foobot"));
        assert!(!v.names_agent("BarBot"));
    }

    #[test]
    fn safe_methods_and_path() {
        let h = Headers::default();
        let mut v = view(&h, None, None);
        assert!(v.is_safe_method());
        v.method = "options";
        assert!(v.is_safe_method());
        v.method = "TRACE";
        assert!(!v.is_safe_method());
        assert_eq!(v.path(), "/a");
        assert_eq!(v.origin(), "https://example.com:443");
    }
}
