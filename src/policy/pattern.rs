//! RFC 9309 path patterns, shared by robots.txt, agents.txt (B11) and
//! automation-preferences.txt scopes (D6): a prefix match on the percent-normalised path
//! and query, `*` for any run of characters (including none), and `$` at the very end as an
//! end anchor. Matching is linear in the path length: the pattern is split at its `*`s as it
//! is matched and each literal piece is found leftmost with a substring search, which is
//! exact for `*`-only globs (no backtracking, so `/*a*a*a*b` against 16 KiB costs one pass
//! per piece). A compiled pattern is its normalised text and, when it escapes an unreserved
//! character (`/%7Ejoe/`), its decoded form after it in the same allocation (SEMANTICS R9,
//! [`Reading`]): the pieces are not stored, since files with tens of thousands of rules are
//! kept per origin.
//!
//! Never: decides what a match means (allow or deny is the caller's), reads files.

use crate::policy::Weigh;
use crate::policy::path::{Reading, decode_unreserved};
use crate::policy::text::split_ascii;
use std::borrow::Cow;
use std::fmt::Write as _;

/// A compiled path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    /// The pattern percent-normalised (see [`normalize`]), as its specificity is measured;
    /// then, when decoding its unreserved escapes changes it, the decoded form.
    text: Box<str>,
    /// Where the written form ends in `text`.
    written: u32,
    /// True when it has no `*` and no anchor: a plain prefix (in both forms: decoding never
    /// makes a `*` or a `$`, which are reserved).
    literal_prefix: bool,
}

impl Pattern {
    /// Compiles a pattern as written in a file, with its decoded form when it has one. An
    /// empty pattern matches every path; the formats that give an empty value another
    /// meaning (robots `Disallow:`) skip it first.
    pub fn new(raw: &str) -> Self {
        let mut text = normalize(raw);
        let written = text.len();
        if let Some(decoded) = decoded_form(&text) {
            text.push_str(&decoded);
        }
        let literal_prefix = is_literal_prefix(&text[..written]);
        // A pattern is at most a line of a policy file, far below 4 GiB.
        let written = u32::try_from(written).unwrap_or(u32::MAX);
        Pattern { text: text.into_boxed_str(), written, literal_prefix }
    }

    /// The pattern's length in octets after normalisation: RFC 9309's "most octets", used
    /// to pick the longest (most specific) match.
    pub fn specificity(&self) -> usize {
        self.as_str().len()
    }

    /// The pattern's length in a reading: decoded, lengths are counted decoded, so that a
    /// reading compares like with like (`docs/robots.md`).
    pub fn specificity_in(&self, reading: Reading) -> usize {
        self.read(reading).len()
    }

    /// The normalised pattern text, as written.
    pub fn as_str(&self) -> &str {
        &self.text[..self.written as usize]
    }

    /// The pattern in a reading: as written, or decoded (the written text when decoding
    /// changes nothing).
    pub fn read(&self, reading: Reading) -> &str {
        match reading {
            Reading::Decoded if self.has_decoded() => &self.text[self.written as usize..],
            Reading::Written | Reading::Decoded => self.as_str(),
        }
    }

    /// True when the pattern reads differently decoded: it escapes an unreserved character.
    pub fn has_decoded(&self) -> bool {
        self.text.len() > self.written as usize
    }

    /// True when the pattern has no wildcard and no anchor, so it is a plain prefix.
    pub fn is_literal_prefix(&self) -> bool {
        self.literal_prefix
    }

    /// Whether the pattern matches a path (with query), given already normalised by
    /// [`normalize`]. Callers matching many patterns normalise the path once.
    pub fn matches_normalized(&self, path: &str) -> bool {
        matches_normalized(self.as_str(), path)
    }

    /// Whether the pattern, read as `reading` says, matches a normalised path.
    pub fn matches_in(&self, reading: Reading, path: &str) -> bool {
        matches_normalized(self.read(reading), path)
    }

    /// Whether the pattern matches a raw path (normalised here).
    pub fn matches(&self, path: &str) -> bool {
        self.matches_normalized(&normalize(path))
    }
}

/// A normalised pattern with its unreserved escapes decoded (`/%7Ejoe/` → `/~joe/`,
/// SEMANTICS R9), or `None` when that changes nothing, which is checked without a copy for
/// a pattern with no `%`: every pattern but a few.
pub(crate) fn decoded_form(normalized: &str) -> Option<String> {
    if !normalized.contains('%') {
        return None;
    }
    let decoded = decode_unreserved(normalized, false);
    (decoded != normalized).then_some(decoded)
}

/// True when a normalised pattern has no `*` and no final `$`: every path it matches
/// starts with it, and every path starting with it matches.
pub fn is_literal_prefix(normalized: &str) -> bool {
    !normalized.ends_with('$') && !normalized.contains('*')
}

/// Whether a pattern, already normalised by [`normalize`], matches a path (with query)
/// normalised likewise. For formats that keep their patterns' text in one buffer per file
/// rather than one [`Pattern`] per rule (robots.txt: memory per origin).
pub fn matches_normalized(pattern: &str, path: &str) -> bool {
    let text = path.as_bytes();
    let (body, anchored) = match pattern.strip_suffix('$') {
        Some(body) => (body, true),
        None => (pattern, false),
    };
    // Literal pieces between `*`s; the first must be a prefix of the path.
    let mut pieces = split_ascii(body, b'*').peekable();
    let first = pieces.next().unwrap_or_default();
    if !text.starts_with(first.as_bytes()) {
        return false;
    }
    let mut pos = first.len();
    if pieces.peek().is_none() {
        return !anchored || pos == text.len();
    }
    while let Some(piece) = pieces.next() {
        if pieces.peek().is_none() {
            return if anchored {
                text.len() >= pos + piece.len() && text.ends_with(piece.as_bytes())
            } else {
                find(&path[pos..], piece).is_some()
            };
        }
        match find(&path[pos..], piece) {
            Some(at) => pos += at + piece.len(),
            None => return false,
        }
    }
    true
}

/// Substring search; `path` is ASCII after [`normalize`], so every index is a char boundary.
fn find(haystack: &str, needle: &str) -> Option<usize> {
    if needle.is_empty() { Some(0) } else { haystack.find(needle) }
}

/// Percent-normalises a path or pattern the way RFC 9309 §2.2.2 compares them: octets
/// outside printable ASCII (non-ASCII UTF-8, controls, space) are %-encoded, and existing
/// `%xx` escapes get upper-case hex. Escapes are not decoded: `%62` stays distinct from
/// `b`, as in the RFC's table and Google's matcher. The result is ASCII.
pub fn normalize(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' && i + 2 < bytes.len() && bytes[i + 1].is_ascii_hexdigit() && bytes[i + 2].is_ascii_hexdigit() {
            out.push('%');
            out.push(bytes[i + 1].to_ascii_uppercase() as char);
            out.push(bytes[i + 2].to_ascii_uppercase() as char);
            i += 3;
            continue;
        }
        if b.is_ascii_graphic() {
            out.push(b as char);
        } else {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
        i += 1;
    }
    out
}

/// The percent-normalised form of a request path, as [`normalize`] makes it, borrowed when
/// the path is already normal, which is the common case on the hot path.
pub(crate) fn normalized_path(raw: &str) -> Cow<'_, str> {
    let bytes = raw.as_bytes();
    // The most common path: printable ASCII with no escape at all, in one tight pass. A fold
    // without short-circuit, so the compiler vectorises it: this runs once per format on
    // every request (the cost of deciding, bench/RESULTS.md).
    if bytes.iter().fold(true, |plain, &b| plain & b.is_ascii_graphic() & (b != b'%')) {
        return Cow::Borrowed(raw);
    }
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if !b.is_ascii_graphic() {
            return Cow::Owned(normalize(raw));
        }
        if b == b'%' && i + 2 < bytes.len() && bytes[i + 1].is_ascii_hexdigit() && bytes[i + 2].is_ascii_hexdigit() {
            if bytes[i + 1].is_ascii_lowercase() || bytes[i + 2].is_ascii_lowercase() {
                return Cow::Owned(normalize(raw));
            }
            i += 3;
            continue;
        }
        i += 1;
    }
    Cow::Borrowed(raw)
}

impl Weigh for Pattern {
    fn heap_bytes(&self) -> usize {
        self.text.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalized_path_borrows_when_already_normal() {
        assert!(matches!(normalized_path("/a/b?c=%41"), Cow::Borrowed("/a/b?c=%41")));
        assert_eq!(normalized_path("/a%4a"), "/a%4A");
        assert_eq!(normalized_path("/ツ"), "/%E3%83%84");
        assert_eq!(normalized_path("/a b"), "/a%20b");
        for raw in ["/a%4a", "/ツ", "/%zz", "/100%", "/%4", "/x%e3%83%84y"] {
            assert_eq!(normalized_path(raw), normalize(raw), "{raw}");
        }
    }

    #[test]
    fn rfc9309_special_characters_table() {
        // RFC 9309 §2.2.3 examples.
        let cases: &[(&str, &str, bool)] = &[
            ("/foo/bar?baz=quz", "/foo/bar?baz=quz", true),
            ("/foo/bar/*", "/foo/bar/baz", true),
            ("/foo/*/baz", "/foo/x/y/baz", true),
            ("/path/file-with-a-*.html", "/path/file-with-a-star.html", true),
            ("/path/foo-$", "/path/foo-", true),
            ("/path/foo-$", "/path/foo-bar", false),
            ("/*.php$", "/filename.php", true),
            ("/*.php$", "/filename.php?x", false),
            ("/fish*", "/fish", true),
            ("/fish", "/Fish.asp", false),
            ("/", "/anything", true),
            ("/*", "/", true),
            ("/$", "/", true),
            ("/$", "/a", false),
        ];
        for (pattern, path, expected) in cases {
            assert_eq!(Pattern::new(pattern).matches(path), *expected, "{pattern} vs {path}");
        }
    }

    #[test]
    fn percent_normalisation_encodes_non_ascii_and_uppercases_hex() {
        assert_eq!(normalize("/foo/bar/ツ"), "/foo/bar/%E3%83%84");
        assert_eq!(normalize("/a%e3%83%84"), "/a%E3%83%84");
        assert_eq!(normalize("/%62%61%7A"), "/%62%61%7A");
        assert_eq!(normalize("/a b"), "/a%20b");
        assert_eq!(normalize("/100%"), "/100%");
        assert!(Pattern::new("/foo/bar/ツ").matches("/foo/bar/%e3%83%84"));
        assert!(!Pattern::new("/foo/bar/%62%61%7A").matches("/foo/bar/baz"));
    }

    #[test]
    fn semantics_r9_decoded_form_beside_the_written_one() {
        let p = Pattern::new("/%7ejoe/*.html$");
        assert!(p.has_decoded());
        assert_eq!(p.as_str(), "/%7Ejoe/*.html$");
        assert_eq!(p.read(Reading::Written), "/%7Ejoe/*.html$");
        assert_eq!(p.read(Reading::Decoded), "/~joe/*.html$");
        assert_eq!((p.specificity(), p.specificity_in(Reading::Decoded)), (15, 13));
        assert!(!p.is_literal_prefix());
        assert!(p.matches_in(Reading::Decoded, "/~joe/a.html") && !p.matches_in(Reading::Written, "/~joe/a.html"));
        assert!(p.matches_in(Reading::Written, "/%7Ejoe/a.html") && !p.matches_in(Reading::Decoded, "/%7Ejoe/a.html"));
        for plain in ["/private", "/%2Fa", "/%E3%83%84", "/100%", "/%zz"] {
            let p = Pattern::new(plain);
            assert!(!p.has_decoded(), "{plain}: reserved, non-ASCII and broken escapes are no other spelling");
            assert_eq!(p.read(Reading::Decoded), p.as_str());
        }
        assert_eq!(decoded_form("/a%5Fb%2F%41"), Some("/a_b%2FA".to_owned()));
        assert_eq!(decoded_form("/a_b"), None);
    }

    #[test]
    fn specificity_counts_pattern_octets() {
        assert_eq!(Pattern::new("/a*").specificity(), 3);
        assert_eq!(Pattern::new("/ツ").specificity(), 10);
    }

    #[test]
    fn anchor_after_wildcard_needs_room_after_previous_pieces() {
        let p = Pattern::new("/ab*b$");
        assert!(p.matches("/abb"));
        assert!(!p.matches("/ab"));
    }

    #[test]
    fn pathological_wildcards_do_not_backtrack() {
        let path = format!("/{}", "a".repeat(16 * 1024));
        let p = Pattern::new("/*a*a*a*a*a*a*a*a*b");
        assert!(!p.matches(&path));
        let p = Pattern::new("/*a*a*a*a*a*a*a*a*a$");
        assert!(p.matches(&path));
    }
}
