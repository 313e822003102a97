//! Text plumbing every policy parser shares: BOM stripping, line splitting on CR, LF and
//! CRLF (RFC 9309 NL, SEMANTICS B2, C26, D19), splitting at an ASCII byte, SHA-256 digests
//! as hex, the bounded list of findings, lossless decoding of invalid UTF-8, RFC 9110
//! tokens, and the closest known name for "did you mean" hints. See `docs/policy-text.md`.
//!
//! Never: knows what a line means in any format.

use std::borrow::Cow;
use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::policy::{Diagnostic, Severity};

/// `text` split at every `separator`, as `str::split` does (empty pieces kept, one piece
/// for an empty text), scanning bytes: the separator is ASCII, so every piece is still a
/// `str`. `str::split` with a char pattern sets up a searcher per piece, which cost more
/// than the pieces themselves on the short paths and patterns matched on every request.
pub(crate) fn split_ascii(text: &str, separator: u8) -> impl Iterator<Item = &str> {
    debug_assert!(separator.is_ascii(), "a non-ASCII separator would cut a character");
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let current = rest?;
        match current.bytes().position(|b| b == separator) {
            Some(at) => {
                rest = Some(&current[at + 1..]);
                Some(&current[..at])
            }
            None => {
                rest = None;
                Some(current)
            }
        }
    })
}

/// The UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// At most this many findings are kept in a policy state's report (what `explain` and the
/// cache hold); `lint` keeps them all. One more finding says how many were left out. See
/// `docs/policy-text.md` for why 100.
pub(crate) const REPORTED_FINDINGS: usize = 100;

/// Splits a body into its leading BOM (possibly empty) and the rest. With `partial`, a
/// cut-off BOM (`EF` or `EF BB`) is split off too, as Google's robots.txt parser does.
pub(crate) fn split_bom(body: &[u8], partial: bool) -> (&[u8], &[u8]) {
    let n = body.iter().zip(BOM).take_while(|(a, b)| a == b).count();
    body.split_at(if partial || n == BOM.len() { n } else { 0 })
}

/// One line of a file: its 1-based number, its bytes without the end of line, and the end
/// of line that followed it (empty for a last line without one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Line<'a> {
    /// 1-based line number (saturates at `u32::MAX`).
    pub number: u32,
    /// Offset of the line's first byte in the text.
    pub start: usize,
    /// The line's bytes, without its end of line.
    pub bytes: &'a [u8],
    /// `\n`, `\r\n`, `\r` or empty.
    pub eol: &'a [u8],
}

/// The lines of `text`: CR, LF and CRLF all end a line; a final end of line does not start
/// another (empty) line.
pub(crate) fn lines(text: &[u8]) -> Lines<'_> {
    Lines { rest: text, number: 0, offset: 0 }
}

/// Iterator returned by [`lines`].
#[derive(Debug, Clone)]
pub(crate) struct Lines<'a> {
    rest: &'a [u8],
    number: u32,
    offset: usize,
}

impl<'a> Iterator for Lines<'a> {
    type Item = Line<'a>;

    fn next(&mut self) -> Option<Line<'a>> {
        if self.rest.is_empty() {
            return None;
        }
        self.number = self.number.saturating_add(1);
        let end = self.rest.iter().position(|&b| b == b'\n' || b == b'\r').unwrap_or(self.rest.len());
        let eol_len = match &self.rest[end..] {
            [b'\r', b'\n', ..] => 2,
            [] => 0,
            _ => 1,
        };
        let (bytes, tail) = self.rest.split_at(end);
        let (eol, rest) = tail.split_at(eol_len);
        self.rest = rest;
        let start = self.offset;
        self.offset += bytes.len() + eol.len();
        Some(Line { number: self.number, start, bytes, eol })
    }
}

/// True for SP and HTAB, the only blanks agents.txt and AGENTS.md know (robots.txt also
/// trims VT and FF, as Google does).
pub(crate) fn is_blank_byte(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

/// The bytes with leading and trailing SP/HTAB removed.
pub(crate) fn trim_blanks(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| !is_blank_byte(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|&b| !is_blank_byte(b)).map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// Hex SHA-256 of some bytes.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An incremental SHA-256 over lines joined by `\n`, with no trailing newline (the
/// agents.txt content digest, SEMANTICS B3).
#[derive(Default)]
pub(crate) struct JoinedDigest {
    hasher: Sha256,
    lines: usize,
}

impl JoinedDigest {
    /// Adds one line.
    pub(super) fn push(&mut self, line: &[u8]) {
        if self.lines > 0 {
            self.hasher.update(b"\n");
        }
        self.hasher.update(line);
        self.lines += 1;
    }

    /// How many lines were added.
    pub(super) fn count(&self) -> usize {
        self.lines
    }

    /// The hex digest.
    pub(super) fn finish(self) -> String {
        hex::encode(self.hasher.finalize())
    }
}

/// Findings about one file: at most [`REPORTED_FINDINGS`] for a report (the default), or
/// every one for `lint`.
#[derive(Debug, Clone)]
pub(crate) struct Findings {
    list: Vec<Diagnostic>,
    keep: usize,
    left_out: usize,
}

impl Default for Findings {
    fn default() -> Self {
        Findings::keeping(REPORTED_FINDINGS)
    }
}

impl Findings {
    /// A list that keeps at most `keep` findings and counts the rest.
    fn keeping(keep: usize) -> Self {
        Findings { list: Vec::new(), keep, left_out: 0 }
    }

    /// A list that keeps every finding, for `lint` (bounded by the format's size cap).
    pub(super) fn all() -> Self {
        Findings::keeping(usize::MAX)
    }

    /// Records a finding (or counts it when the list is full).
    pub(super) fn push(&mut self, diagnostic: Diagnostic) {
        self.record(|| diagnostic);
    }

    /// Records a warning about a line; the message is only built when it is kept.
    pub(super) fn warn(&mut self, line: u32, code: &str, message: impl FnOnce() -> String) {
        self.record(|| Diagnostic::warning(Some(line), code, message()));
    }

    /// Records an error about a line; the message is only built when it is kept.
    pub(super) fn error(&mut self, line: u32, code: &str, message: impl FnOnce() -> String) {
        self.record(|| Diagnostic::error(Some(line), code, message()));
    }

    fn record(&mut self, diagnostic: impl FnOnce() -> Diagnostic) {
        if self.list.len() < self.keep {
            self.list.push(diagnostic());
        } else {
            self.left_out += 1;
        }
    }

    /// True when some finding is an error.
    pub(super) fn has_errors(&self) -> bool {
        self.list.iter().any(|d| d.severity == Severity::Error)
    }

    /// The findings in line order (file-level findings first), plus a note when some were
    /// left out.
    pub(super) fn finish_in_line_order(mut self) -> Vec<Diagnostic> {
        self.list.sort_by_key(|d| d.line);
        self.finish()
    }

    /// The findings in the order they were found, plus a note when some were left out.
    pub(super) fn finish(mut self) -> Vec<Diagnostic> {
        if self.left_out > 0 {
            self.list.push(Diagnostic::warning(
                None,
                "too-many-findings",
                format!("{} more findings not shown; run `agentgate lint` on the file to see them all", self.left_out),
            ));
        }
        self.list
    }
}

/// An RFC 9110 §5.6.2 `token` (one or more `tchar`): an HTTP method or header field name.
pub(crate) fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A line as text for matching: invalid UTF-8 bytes become `%XX`, which is exactly what
/// [`crate::policy::pattern::normalize`] makes of them, so they still match the same
/// bytes in a request path (RFC 9309 §2.2.2). `Owned` only when the bytes were not UTF-8.
pub(crate) fn decode(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(text) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(bytes.len() * 3);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            // Writing to a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    Cow::Owned(out)
}

/// The known name within edit distance 2 of `name` (the nearest, then the first in
/// alphabetical order), for "did you mean" hints.
pub(crate) fn closest<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    known.into_iter().filter_map(|k| Some((edit_distance(name, k)?, k))).filter(|&(d, _)| d <= 2).min().map(|(_, k)| k)
}

/// Levenshtein distance in characters; `None` when either name is long, to bound the cost
/// (no known name is near one that long).
fn edit_distance(a: &str, b: &str) -> Option<usize> {
    if a.len() > 40 || b.len() > 40 {
        return None;
    }
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(row[j + 1] + 1);
        }
    }
    row.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &[u8]) -> Vec<(u32, &[u8], &[u8])> {
        lines(text).map(|l| (l.number, l.bytes, l.eol)).collect()
    }

    #[test]
    fn split_ascii_gives_the_pieces_str_split_gives() {
        for text in ["", "*", "**", "/a*b", "a*", "*a", "/é*ü*", "/a/*.pdf$", "no separator"] {
            let expected: Vec<&str> = text.split('*').collect();
            assert_eq!(split_ascii(text, b'*').collect::<Vec<_>>(), expected, "{text:?}");
        }
    }

    #[test]
    fn semantics_b2_c26_d19_cr_lf_and_crlf_all_end_a_line() {
        let got = split(b"a\nb\r\nc\rd");
        assert_eq!(got, vec![(1, &b"a"[..], &b"\n"[..]), (2, b"b", b"\r\n"), (3, b"c", b"\r"), (4, b"d", b"")]);
        assert_eq!(split(b"a\n"), vec![(1, &b"a"[..], &b"\n"[..])]);
        assert_eq!(split(b"\n\n"), vec![(1, &b""[..], &b"\n"[..]), (2, b"", b"\n")]);
        assert!(split(b"").is_empty());
        assert_eq!(lines(b"ab\r\ncd").map(|l| l.start).collect::<Vec<_>>(), vec![0, 4]);
        assert_eq!(split(b"\r\r\n"), vec![(1, &b""[..], &b"\r"[..]), (2, b"", b"\r\n")]);
    }

    #[test]
    fn bom_is_split_off_only_at_the_start() {
        for partial in [false, true] {
            assert_eq!(split_bom(b"\xEF\xBB\xBFab", partial), (&b"\xEF\xBB\xBF"[..], &b"ab"[..]));
            assert_eq!(split_bom(b"a\xEF\xBB\xBF", partial), (&b""[..], &b"a\xEF\xBB\xBF"[..]));
        }
        assert_eq!(split_bom(b"\xEF\xBBab", false), (&b""[..], &b"\xEF\xBBab"[..]));
        assert_eq!(split_bom(b"\xEF\xBBab", true), (&b"\xEF\xBB"[..], &b"ab"[..]));
    }

    #[test]
    fn joined_digest_has_no_trailing_newline() {
        let mut d = JoinedDigest::default();
        assert_eq!(d.count(), 0);
        d.push(b"a");
        d.push(b"b");
        assert_eq!(d.finish(), sha256_hex(b"a\nb"));
        assert_eq!(JoinedDigest::default().finish(), sha256_hex(b""));
        assert!(sha256_hex(b"").starts_with("e3b0c442"));
    }

    #[test]
    fn findings_are_bounded_and_sorted() {
        let mut f = Findings::default();
        for i in (0..REPORTED_FINDINGS as u32 + 5).rev() {
            f.push(Diagnostic::warning(Some(i + 1), "x", "y"));
        }
        f.warn(1, "x", || unreachable!("a finding past the cap is only counted"));
        let list = f.finish_in_line_order();
        assert_eq!(list.len(), REPORTED_FINDINGS + 1);
        assert_eq!(list[0].line, Some(6));
        assert_eq!(list[REPORTED_FINDINGS].code, "too-many-findings");
        assert!(list[REPORTED_FINDINGS].message.starts_with("6 more findings"), "{}", list[REPORTED_FINDINGS].message);
        let mut all = Findings::all();
        for i in 0..REPORTED_FINDINGS as u32 + 5 {
            all.error(i + 1, "x", || "y".to_owned());
        }
        assert!(all.has_errors());
        assert_eq!(all.finish().len(), REPORTED_FINDINGS + 5, "lint keeps every finding");
    }

    #[test]
    fn rfc9110_tokens() {
        assert!(is_token("GET") && is_token("X-Agent_1") && is_token("!#$%&'*+-.^_`|~"));
        assert!(!is_token("") && !is_token("X Agent") && !is_token("a:b") && !is_token("ü"));
    }

    #[test]
    fn invalid_utf8_becomes_percent_escapes() {
        assert_eq!(decode(b"scope: /a\xFFb"), "scope: /a%FFb");
        assert!(matches!(decode("scope: /ツ".as_bytes()), Cow::Borrowed(_)));
    }

    #[test]
    fn closest_names_are_within_two_edits() {
        let known = ["allow", "disallow", "rate limits", "identity"];
        assert_eq!(closest("alow", known), Some("allow"));
        assert_eq!(closest("rate limit", known), Some("rate limits"));
        assert_eq!(closest("identiy", known), Some("identity"));
        assert_eq!(closest("build", known), None);
        assert_eq!(closest("allöw", known), Some("allow"), "one edit per character, not per byte");
        assert_eq!(closest(&"a".repeat(41), ["a"]), None);
    }
}
