//! Spellings of one request path, and the two readings of a file's path patterns (SEMANTICS
//! R7, R9). RFC 3986 §6.2.2 says `/%70rivate` and `/public/../private` name the same resource
//! as `/private`, and origins serve them so; the patterns of every format compare escapes
//! literally (RFC 9309 §2.2.2). So a request is decided as sent and as every plainer
//! equivalent spelling of its path, and the strictest decision wins (SEMANTICS P2):
//!
//! - the RFC 3986 normal form (escapes of unreserved characters decoded, dot segments
//!   removed) with repeated slashes kept (`//all%5Fposts` → `//all_posts`);
//! - the same with repeated slashes merged (`//private` → `/private`, SEMANTICS R7), in both
//!   orders: RFC 3986 resolves dot segments first, a slash-merging server such as nginx merges
//!   first (`/a//../b` is `/a/b` by RFC 3986, `/b` there);
//! - each of those again with `%2F` read as `/` in the path (never in the query): nginx
//!   decodes it before routing, so `/%2fprivate` reaches `//private`.
//!
//! Patterns have a plainer spelling too: `Disallow: /%7Ejoe/` stands for `/~joe/`. Each format
//! compiles a pattern's decoded form beside the written one ([`super::pattern::Pattern`]) and
//! decides its file in two readings, [`Reading::Written`] and [`Reading::Decoded`], keeping the
//! stricter answer ([`decide_both_readings`]); why each reading is whole (lengths counted in
//! its own octets) is in `docs/robots.md`.
//!
//! Never: changes what is forwarded or logged (the request goes on as sent, RFC 9110 §7.7).

use std::borrow::Cow;

use super::{Decision, Limit, Limits, Opinion, Outcome, RequestView, SourceVerdict, joined};

/// Decides `req` as sent and, when its path has equivalent plainer spellings, as each of
/// them too; returns the strictest decision (the earliest on a tie, so as sent first), with
/// every limit any of them carries (every spelling's limits apply). The site policies and the
/// operator's rules both decide this way ([`Decided`]).
pub fn decide_all_spellings<D: Decided>(req: &RequestView<'_>, mut decide: impl FnMut(&RequestView<'_>) -> D) -> D {
    let mut strictest = decide(req);
    for normal in equivalents(req.path_and_query) {
        if strictest.outcome() == Outcome::Deny {
            break;
        }
        let other = decide(&RequestView { path_and_query: &normal, ..*req });
        strictest = stricter(strictest, other);
    }
    strictest
}

/// How a file's path patterns are read (SEMANTICS R9): as written, escapes compared
/// literally (RFC 9309 §2.2.2); or decoded, each escape of an unreserved character read as
/// that character (`/%7Ejoe/` as `/~joe/`, RFC 3986 §6.2.2.2). A file is decided in both
/// readings only when one of its patterns has an escape to decode ([`decide_both_readings`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reading {
    /// Every pattern as written.
    Written,
    /// Every pattern, and the path compared with them, with its unreserved escapes decoded;
    /// lengths counted decoded too.
    Decoded,
}

impl Reading {
    /// A percent-normalised request path as this reading compares it: as it is, or with its
    /// unreserved escapes decoded (a copy only when it has a `%`), so that both sides of
    /// the comparison are spelled alike.
    pub fn path(self, normalized: &str) -> Cow<'_, str> {
        match self {
            Reading::Decoded if normalized.contains('%') => Cow::Owned(decode_unreserved(normalized, false)),
            Reading::Written | Reading::Decoded => Cow::Borrowed(normalized),
        }
    }
}

/// Decides in [`Reading::Written`] and, when `has_decoded` (some pattern of the file reads
/// differently decoded), in [`Reading::Decoded`] too; the stricter answer wins, the written
/// one on a tie, with the limits of both. So a decoded `Allow` never widens what the written
/// file grants, and a decoded `Disallow` still stops the plain spelling.
#[inline]
pub fn decide_both_readings<D: Decided>(has_decoded: bool, mut decide: impl FnMut(Reading) -> D) -> D {
    let written = decide(Reading::Written);
    if !has_decoded || written.outcome() == Outcome::Deny {
        return written;
    }
    stricter(written, decide(Reading::Decoded))
}

/// The stricter of two decisions on one request, `kept` on a tie, carrying the other's
/// limits as well.
fn stricter<D: Decided>(kept: D, other: D) -> D {
    let (mut stricter, other) =
        if strictness(other.outcome()) > strictness(kept.outcome()) { (other, kept) } else { (kept, other) };
    if stricter.outcome() != Outcome::Deny {
        stricter.add_limits(other);
    }
    stricter
}

/// What a decision on one spelling or reading amounts to, for [`decide_all_spellings`] and
/// [`decide_both_readings`].
pub trait Decided {
    /// The outcome the decision restricts the request to.
    fn outcome(&self) -> Outcome;

    /// Adds the limits of `other`, a decision on another spelling or reading, that this one
    /// lacks.
    fn add_limits(&mut self, other: Self);
}

impl Decided for Decision {
    fn outcome(&self) -> Outcome {
        self.outcome
    }

    fn add_limits(&mut self, other: Self) {
        add_missing(&mut self.limits, other.limits);
    }
}

/// The operator's rules may say nothing (`None`), which restricts no more than an allow.
impl Decided for Option<Decision> {
    fn outcome(&self) -> Outcome {
        self.as_ref().map_or(Outcome::Allow, |decision| decision.outcome)
    }

    fn add_limits(&mut self, other: Self) {
        if let (Some(decision), Some(other)) = (self, other) {
            decision.add_limits(other);
        }
    }
}

/// One source's verdict, for a format deciding its file in both readings.
impl Decided for SourceVerdict {
    fn outcome(&self) -> Outcome {
        match self.opinion {
            Opinion::Deny => Outcome::Deny,
            Opinion::NeedsApproval => Outcome::NeedsApproval,
            Opinion::Allow | Opinion::NoOpinion => Outcome::Allow,
        }
    }

    fn add_limits(&mut self, other: Self) {
        add_missing(&mut self.limits, other.limits);
    }
}

/// Appends the limits of `more` that `limits` does not hold yet (a limit every spelling
/// carries is counted once).
fn add_missing(limits: &mut Limits, more: Limits) {
    let missing: Vec<Limit> = more.iter().filter(|limit| !limits.contains(limit)).cloned().collect();
    *limits = joined(std::mem::take(limits), &missing);
}

/// How much an outcome restricts: allow < needs approval < deny.
fn strictness(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Allow => 0,
        Outcome::NeedsApproval => 1,
        Outcome::Deny => 2,
    }
}

/// The plainer spellings of a request's path and query that differ from the one sent,
/// distinct, at most six (see the module header): for the path with its unreserved escapes
/// decoded, and again with `%2F` decoded too when it has one, the RFC 3986 form with
/// repeated slashes kept, the same merged, and the form of a server that merges them before
/// resolving dot segments. The query keeps its slashes, dots and `%2F`s; only its unreserved
/// escapes are decoded (RFC 3986 §6.2.2.2 covers the whole URI).
fn equivalents(path_and_query: &str) -> Vec<String> {
    if has_one_spelling(path_and_query) {
        return Vec::new();
    }
    let (sent_path, query) = match path_and_query.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (path_and_query, None),
    };
    let repeated_slashes = sent_path.contains("//");
    // A `.` or `..` segment starts the text or follows a `/` or `?`: when none of those is
    // followed by a dot, there is none, and the segments need not be split (every request).
    let maybe_dot_segment =
        path_and_query.starts_with('.') || path_and_query.contains("/.") || path_and_query.contains("?.");
    let dot_segment = maybe_dot_segment && path_and_query.split(['/', '?']).any(|s| s == "." || s == "..");
    if !repeated_slashes && !path_and_query.contains('%') && !dot_segment {
        return Vec::new();
    }
    let query = query.map(|query| decode_unreserved(query, false));
    let mut decoded = vec![decode_unreserved(sent_path, false)];
    if has_escaped_slash(sent_path) {
        decoded.push(decode_unreserved(sent_path, true));
    }
    let mut out: Vec<String> = Vec::new();
    for path in decoded {
        let forms = if path.starts_with('/') {
            let resolved = remove_dot_segments(&path);
            let merged = merge_slashes(&resolved);
            let merged_first = remove_dot_segments(&merge_slashes(&path));
            vec![resolved, merged, merged_first]
        } else {
            vec![path]
        };
        for mut normal in forms {
            if let Some(query) = &query {
                normal.push('?');
                normal.push_str(query);
            }
            if normal != path_and_query && !out.contains(&normal) {
                out.push(normal);
            }
        }
    }
    out
}

/// True when `path_and_query` has no other spelling, by one pass over its bytes: no `%`, no
/// `.` at the start or after a `/` or `?`, no `//` before the query. Most requests are such,
/// and the substring searches below cost every request ~800 instructions, twice (operator
/// rules and site policies; bench/RESULTS.md). False says only that [`equivalents`] must look.
fn has_one_spelling(path_and_query: &str) -> bool {
    let bytes = path_and_query.as_bytes();
    let query = memchr::memchr(b'?', bytes).unwrap_or(bytes.len());
    let mut previous = b'/';
    for (i, &byte) in bytes.iter().enumerate() {
        let other = match byte {
            b'%' => true,
            b'.' => matches!(previous, b'/' | b'?'),
            b'/' => previous == b'/' && i > 0 && i < query,
            _ => false,
        };
        if other {
            return false;
        }
        previous = byte;
    }
    true
}

/// True when `path` holds `%2F` or `%2f`.
fn has_escaped_slash(path: &str) -> bool {
    path.as_bytes().windows(3).any(|w| w[0] == b'%' && w[1] == b'2' && w[2].eq_ignore_ascii_case(&b'f'))
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

/// `%XX` escapes of ALPHA, DIGIT, `-`, `.`, `_` and `~` decoded, with `slash` also those of
/// `/`; everything else as it was (RFC 3986 §6.2.2.2). Also how a pattern's decoded form is
/// made ([`super::pattern::Pattern`]).
pub(crate) fn decode_unreserved(text: &str, slash: bool) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = text.get(i + 1..i + 3)
            && let Ok(byte) = u8::from_str_radix(hex, 16)
            && (byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') || (slash && byte == b'/'))
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

    fn spellings(path_and_query: &str) -> Vec<String> {
        equivalents(path_and_query)
    }

    #[test]
    fn rfc3986_6_2_2_equivalent_paths() {
        assert!(spellings("/private/x").is_empty());
        assert_eq!(spellings("/%70rivate/x"), ["/private/x"]);
        assert_eq!(spellings("/public/../private/x?a=.."), ["/private/x?a=.."]);
        assert_eq!(spellings("/public/%2e%2E/private"), ["/private"]);
        assert_eq!(spellings("/./a/."), ["/a/"]);
        assert_eq!(spellings("/a%2Fb%"), ["/a/b%"], "%2F read as `/`, a broken escape stays");
        assert!(spellings("/caf%C3%A9/ツ").is_empty());
    }

    #[test]
    fn only_a_path_with_nothing_to_normalise_is_passed_over() {
        for plain in ["/", "/bench/1k", "/a.b/c.d?x=1.2", "/a?b=//c", "/caf\u{e9}/x", ""] {
            assert!(has_one_spelling(plain), "{plain:?}");
        }
        for other in ["//x", "/a//b", ".", "./a", "/a/./b", "/a/..", "/a?./b", "/%70", "/a?q=%7e", "/a%"] {
            assert!(!has_one_spelling(other), "{other:?}");
        }
    }

    #[test]
    fn semantics_r7_repeated_slashes_merged() {
        assert_eq!(spellings("//private/x"), ["/private/x"]);
        assert_eq!(spellings("/a///b//?q=//x"), ["/a/b/?q=//x"], "the query stays as sent");
        assert!(spellings("/a/b?q=//x").is_empty(), "slashes in the query alone are no other spelling");
        assert_eq!(spellings("/"), Vec::<String>::new());
        assert_eq!(spellings("/a//../b"), ["/a/b", "/b"], "RFC 3986, then nginx");
    }

    #[test]
    fn semantics_r9_decoded_with_repeated_slashes_kept() {
        // `Disallow: /*/all_posts$` stops `//all_posts`; the escaped spelling is
        // decided decoded with its slashes kept, where that pattern matches it.
        assert_eq!(spellings("//all%5Fposts"), ["//all_posts", "/all_posts"]);
        assert_eq!(spellings("//%70rivate"), ["//private", "/private"]);
        assert_eq!(spellings("/a//%2e%2e/b"), ["/a/b", "/b"]);
    }

    #[test]
    fn semantics_r9_escaped_slash_read_as_slash_in_the_path_only() {
        // nginx decodes `%2F` before routing, so `/%2fprivate` is served `//private`.
        assert_eq!(spellings("/%2fprivate"), ["//private", "/private"]);
        assert_eq!(spellings("/%2Fprivate?next=%2Fhome"), ["//private?next=%2Fhome", "/private?next=%2Fhome"]);
        assert_eq!(spellings("/a%2F..%2Fprivate"), ["/private"], "dot segments the decoded slashes make");
        assert_eq!(spellings("/a%2Fb?q=%7e"), ["/a%2Fb?q=~", "/a/b?q=~"], "the %2F form comes after the RFC 3986 one");
        assert!(spellings("/a?q=%2F").is_empty(), "never in the query");
        assert_eq!(decode_unreserved("/%2f%2F%7e%41%2e", true), "///~A.");
        assert_eq!(decode_unreserved("/%2f%7e", false), "/%2f~");
    }

    #[test]
    fn every_spelling_and_reading_keeps_its_limits() {
        use crate::policy::{AgentsTxtCode, Headers, LimitKind, LimitScope, OperatorCode, Reason, RobotsCode, Source};
        let limit = |line| Limit {
            source: Source::AgentsTxt,
            kind: LimitKind::Rate { requests: 5, window_s: 60 },
            scope: LimitScope::Rule { line },
            reason: Reason::new(AgentsTxtCode::Limit, "/private ALLOW limit=5"),
        };
        let allow = |limits: Vec<Limit>| Decision {
            limits: limits.into(),
            ..Decision::single(Outcome::Allow, Reason::new(OperatorCode::Allow, "x"))
        };
        let headers = Headers::default();
        let req = crate::policy::test_support::request("GET", "example.com", "/%70rivate", 0, &headers);
        // `ALLOW /private limit=5` matches only the plain spelling: its limit still applies
        // to `/%70rivate`, and a limit both spellings carry is counted once.
        let decided = decide_all_spellings(&req, |req| {
            if req.path_and_query == "/private" { allow(vec![limit(1), limit(2)]) } else { allow(vec![limit(1)]) }
        });
        assert_eq!(*decided.limits, [limit(1), limit(2)]);
        let decided =
            decide_both_readings(true, |reading| allow(vec![limit(if reading == Reading::Written { 1 } else { 3 })]));
        assert_eq!(*decided.limits, [limit(1), limit(3)]);
        let deny = decide_both_readings(true, |reading| match reading {
            Reading::Written => allow(vec![limit(1)]),
            Reading::Decoded => Decision::single(Outcome::Deny, Reason::new(RobotsCode::Disallow, "x")),
        });
        assert_eq!((deny.outcome, deny.limits.len()), (Outcome::Deny, 0), "a refusal needs no limit");
    }

    #[test]
    fn rfc3986_5_2_4_remove_dot_segments() {
        assert_eq!(remove_dot_segments("/a/b/c/./../../g"), "/a/g");
        assert_eq!(remove_dot_segments("/mid/content=5/../6"), "/mid/6");
        assert_eq!(remove_dot_segments("/a/.."), "/");
        assert_eq!(remove_dot_segments("//all_posts"), "//all_posts", "repeated slashes are kept");
    }
}
