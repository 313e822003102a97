//! Text plumbing shared by the agents.txt and AGENTS.md parsers: BOM stripping, line
//! splitting on CR, LF and CRLF (SEMANTICS B2, C26), SHA-256 digests as hex, a bounded
//! list of findings, and the percent-normalised request path without a copy when it is
//! already normal.
//!
//! Never: knows what a line means in either format.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use crate::policy::Diagnostic;
use crate::policy::pattern::normalize;

/// The UTF-8 byte order mark.
const BOM: &[u8] = b"\xEF\xBB\xBF";

/// At most this many findings are kept per file, so a 500 KiB file of bad lines cannot
/// hold hundreds of megabytes of messages; one more finding says how many were left out.
pub(crate) const MAX_FINDINGS: usize = 1000;

/// Splits a body into its leading BOM (possibly empty) and the rest.
pub(crate) fn split_bom(body: &[u8]) -> (&[u8], &[u8]) {
    if body.starts_with(BOM) { body.split_at(BOM.len()) } else { (&[], body) }
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

/// True for SP and HTAB, the only blanks either format knows.
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
    pub fn push(&mut self, line: &[u8]) {
        if self.lines > 0 {
            self.hasher.update(b"\n");
        }
        self.hasher.update(line);
        self.lines += 1;
    }

    /// How many lines were added.
    pub fn count(&self) -> usize {
        self.lines
    }

    /// The hex digest.
    pub fn finish(self) -> String {
        hex::encode(self.hasher.finalize())
    }
}

/// Findings about one file, at most [`MAX_FINDINGS`] of them.
#[derive(Debug, Default)]
pub(crate) struct Findings {
    list: Vec<Diagnostic>,
    left_out: usize,
}

impl Findings {
    /// Records a finding (or counts it when the list is full).
    pub fn push(&mut self, diagnostic: Diagnostic) {
        if self.list.len() < MAX_FINDINGS {
            self.list.push(diagnostic);
        } else {
            self.left_out += 1;
        }
    }

    /// True when some finding is an error.
    pub fn has_errors(&self) -> bool {
        self.list.iter().any(|d| d.severity == crate::policy::Severity::Error)
    }

    /// The findings in line order (file-level findings first), plus a note when some were
    /// left out.
    pub fn finish(mut self) -> Vec<Diagnostic> {
        self.list.sort_by_key(|d| d.line);
        if self.left_out > 0 {
            self.list.push(Diagnostic::warning(
                None,
                "too-many-findings",
                format!("{} more findings not shown; fix the ones above and lint again", self.left_out),
            ));
        }
        self.list
    }
}

/// The percent-normalised form of a request path (RFC 9309 §2.2.2, as
/// [`normalize`] does it), borrowed when the path is already normal, which is the common
/// case on the hot path.
pub(crate) fn normalized_path(raw: &str) -> Cow<'_, str> {
    let bytes = raw.as_bytes();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn split(text: &[u8]) -> Vec<(u32, &[u8], &[u8])> {
        lines(text).map(|l| (l.number, l.bytes, l.eol)).collect()
    }

    #[test]
    fn semantics_b2_cr_lf_and_crlf_all_end_a_line() {
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
        assert_eq!(split_bom(b"\xEF\xBB\xBFab"), (&b"\xEF\xBB\xBF"[..], &b"ab"[..]));
        assert_eq!(split_bom(b"a\xEF\xBB\xBF"), (&b""[..], &b"a\xEF\xBB\xBF"[..]));
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
    fn findings_are_bounded_and_sorted() {
        let mut f = Findings::default();
        for i in (0..MAX_FINDINGS as u32 + 5).rev() {
            f.push(Diagnostic::warning(Some(i + 1), "x", "y"));
        }
        let list = f.finish();
        assert_eq!(list.len(), MAX_FINDINGS + 1);
        assert_eq!(list[0].line, Some(6));
        assert_eq!(list[MAX_FINDINGS].code, "too-many-findings");
    }
}
