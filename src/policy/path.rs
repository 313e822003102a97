//! Spellings of one request path: RFC 3986 §6.2.2 says `/%70rivate` and `/public/../private`
//! name the same resource as `/private`, and origins serve them so; the patterns of every
//! format compare escapes literally (RFC 9309 §2.2.2). So a request is decided as sent and,
//! when its path has a plainer equivalent, as that too, and the stricter decision wins
//! (SEMANTICS P2). Reserved escapes (`%2F`) are data and stay.
//!
//! Repeated slashes (`//private`) are a plainer spelling too (SEMANTICS R7): RFC 3986 keeps
//! empty segments, but slash-merging servers such as nginx serve `/private` for it. Such a
//! server merges before it resolves dot segments (`/a//../b` is `/b` there, `/a/b` by
//! RFC 3986), so a path with repeated slashes has up to two plainer spellings, and each is
//! decided.
//!
//! Never: changes what is forwarded or logged (the request goes on as sent, RFC 9110 §7.7).

use super::{Decision, Outcome, RequestView};

/// Decides `req` as sent and, when its path has equivalent plainer spellings, as each of
/// them too; returns the strictest decision (the earliest on a tie, so as sent first). The
/// site policies and the operator's rules both decide this way ([`Decided`]).
pub fn decide_all_spellings<D: Decided>(req: &RequestView<'_>, mut decide: impl FnMut(&RequestView<'_>) -> D) -> D {
    let mut strictest = decide(req);
    for normal in equivalents(req.path_and_query) {
        if strictest.outcome() == Outcome::Deny {
            break;
        }
        let other = decide(&RequestView { path_and_query: &normal, ..*req });
        if strictness(other.outcome()) > strictness(strictest.outcome()) {
            strictest = other;
        }
    }
    strictest
}

/// What a decision on one spelling amounts to, for [`decide_all_spellings`].
pub trait Decided {
    /// The outcome the decision restricts the request to.
    fn outcome(&self) -> Outcome;
}

impl Decided for Decision {
    fn outcome(&self) -> Outcome {
        self.outcome
    }
}

/// The operator's rules may say nothing (`None`), which restricts no more than an allow.
impl Decided for Option<Decision> {
    fn outcome(&self) -> Outcome {
        self.as_ref().map_or(Outcome::Allow, |decision| decision.outcome)
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

/// The plainer spellings of a request's path and query that differ from the one sent, at
/// most two, distinct: the RFC 3986 normal form (escapes of unreserved characters decoded,
/// `%70` → `p`, `%2E` → `.`, and dot segments removed, §6.2.2.2, §6.2.2.3) with repeated
/// slashes merged afterwards; and, when the path has repeated slashes, the form of a server
/// that merges them first (SEMANTICS R7). Reserved escapes (`%2F`) stay: they are data. The
/// query is never changed.
fn equivalents(path_and_query: &str) -> Vec<String> {
    let sent_path = path_and_query.split('?').next().unwrap_or_default();
    let repeated_slashes = sent_path.contains("//");
    // A `.` or `..` segment starts the text or follows a `/` or `?`: when none of those is
    // followed by a dot, there is none, and the segments need not be split (every request).
    let maybe_dot_segment =
        path_and_query.starts_with('.') || path_and_query.contains("/.") || path_and_query.contains("?.");
    let dot_segment = maybe_dot_segment && path_and_query.split(['/', '?']).any(|s| s == "." || s == "..");
    if !repeated_slashes && !path_and_query.contains('%') && !dot_segment {
        return Vec::new();
    }
    let decoded = decode_unreserved(path_and_query);
    let (path, query) = match decoded.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (decoded.as_str(), None),
    };
    let mut paths = Vec::new();
    if path.starts_with('/') {
        paths.push(merge_slashes(&remove_dot_segments(path)));
        if repeated_slashes {
            paths.push(remove_dot_segments(&merge_slashes(path)));
        }
    } else {
        paths.push(path.to_owned());
    }
    let mut out: Vec<String> = Vec::new();
    for mut normal in paths {
        if let Some(query) = query {
            normal.push('?');
            normal.push_str(query);
        }
        if normal != path_and_query && !out.contains(&normal) {
            out.push(normal);
        }
    }
    out
}

/// Runs of `/` collapsed into one (SEMANTICS R7).
fn merge_slashes(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for c in path.chars() {
        if c != '/' || !out.ends_with('/') {
            out.push(c);
        }
    }
    out
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

    fn equivalent(path_and_query: &str) -> Option<String> {
        let mut all = equivalents(path_and_query);
        assert!(all.len() <= 1, "{path_and_query}: {all:?}");
        all.pop()
    }

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
    fn semantics_r7_repeated_slashes_merged() {
        assert_eq!(equivalent("//private/x").as_deref(), Some("/private/x"));
        assert_eq!(equivalent("/a///b//?q=//x").as_deref(), Some("/a/b/?q=//x"), "the query stays as sent");
        assert_eq!(equivalent("/a/b?q=//x"), None, "slashes in the query alone are no other spelling");
        assert_eq!(equivalent("//%70rivate").as_deref(), Some("/private"));
        assert_eq!(equivalent("/"), None);
        assert_eq!(equivalents("/a//../b"), vec!["/a/b".to_owned(), "/b".to_owned()], "RFC 3986, then nginx");
    }

    #[test]
    fn rfc3986_5_2_4_remove_dot_segments() {
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("/mid/content=5/../6"), "/mid/6");
        assert_eq!(remove_dot_segments("/a/.."), "/");
    }
}
