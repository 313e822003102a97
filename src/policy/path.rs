//! Spellings of one request path: RFC 3986 §6.2.2 says `/%70rivate` and `/public/../private`
//! name the same resource as `/private`, and origins serve them so; the patterns of every
//! format compare escapes literally (RFC 9309 §2.2.2). So a request is decided as sent and,
//! when its path has a plainer equivalent, as that too, and the stricter decision wins
//! (SEMANTICS P2). Reserved escapes (`%2F`) are data and stay.
//!
//! Never: changes what is forwarded or logged (the request goes on as sent, RFC 9110 §7.7).

use super::{Decision, Outcome, RequestView};

/// Decides `req` as sent and, when its path has an equivalent plainer spelling, as that
/// spelling too; returns the stricter decision (as sent on a tie).
pub fn decide_all_spellings(req: &RequestView<'_>, mut decide: impl FnMut(&RequestView<'_>) -> Decision) -> Decision {
    let as_sent = decide(req);
    match equivalent(req.path_and_query) {
        Some(normal) if as_sent.outcome != Outcome::Deny => {
            let other = decide(&RequestView { path_and_query: &normal, ..*req });
            if strictness(other.outcome) > strictness(as_sent.outcome) { other } else { as_sent }
        }
        _ => as_sent,
    }
}

/// How much an outcome restricts: allow < needs approval < deny.
fn strictness(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Allow => 0,
        Outcome::NeedsApproval => 1,
        Outcome::Deny => 2,
    }
}

/// The normal form of a request's path and query when it differs from the one sent: escapes
/// of unreserved characters decoded (`%70` → `p`, `%2E` → `.`) and dot segments removed
/// (RFC 3986 §6.2.2.2, §6.2.2.3). Reserved escapes (`%2F`) stay: they are data.
pub fn equivalent(path_and_query: &str) -> Option<String> {
    if !path_and_query.contains('%') && !path_and_query.split(['/', '?']).any(|s| s == "." || s == "..") {
        return None;
    }
    let decoded = decode_unreserved(path_and_query);
    let (path, query) = match decoded.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (decoded.as_str(), None),
    };
    let mut normal = if path.starts_with('/') { remove_dot_segments(path) } else { path.to_owned() };
    if let Some(query) = query {
        normal.push('?');
        normal.push_str(query);
    }
    (normal != path_and_query).then_some(normal)
}

/// `%XX` escapes of ALPHA, DIGIT, `-`, `.`, `_` and `~` decoded; everything else as it was.
fn decode_unreserved(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
            && (byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~'))
        {
            out.push(byte as char);
            i += 3;
            continue;
        }
        let c = text[i..].chars().next().unwrap_or_default();
        out.push(c);
        i += c.len_utf8();
    }
    out
}

/// RFC 3986 §5.2.4 on an absolute path: `.` and `..` segments resolved. Also used by the
/// fetcher to resolve redirect targets.
pub fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').skip(1).collect();
    for (i, segment) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *segment {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                out.pop();
                if last {
                    out.push("");
                }
            }
            other => out.push(other),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3986_6_2_2_equivalent_paths() {
        assert_eq!(equivalent("/private/x"), None);
        assert_eq!(equivalent("/%70rivate/x").as_deref(), Some("/private/x"));
        assert_eq!(equivalent("/public/../private/x?a=..").as_deref(), Some("/private/x?a=.."));
        assert_eq!(equivalent("/public/%2e%2E/private").as_deref(), Some("/private"));
        assert_eq!(equivalent("/./a/.").as_deref(), Some("/a/"));
        assert_eq!(equivalent("/a%2Fb?q=%7e"), Some("/a%2Fb?q=~".to_owned()));
        assert_eq!(equivalent("/a%2Fb%"), None, "reserved and broken escapes stay");
        assert_eq!(equivalent("/caf%C3%A9/ツ"), None);
    }

    #[test]
    fn rfc3986_5_2_4_remove_dot_segments() {
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("/mid/content=5/../6"), "/mid/6");
        assert_eq!(remove_dot_segments("/a/.."), "/");
    }
}
