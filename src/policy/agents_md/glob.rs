//! AGENTS.md path globs (SEMANTICS C14, C15), matched segment by segment against the
//! percent-normalised path without its query, case-sensitively:
//!
//! - a pattern without wildcards matches exactly that path (`/exact` is not `/exact/`);
//! - `*` inside a segment matches one or more characters other than `/`;
//! - a whole `**` segment matches zero or more whole segments;
//! - a trailing `/*` or `/**` matches the whole subtree `/p/…` (including `/p/`, not `/p`);
//! - a pattern that does not start with `/` matches the last segment: `*.zip` as a glob,
//!   anything else as a suffix.
//!
//! Matching is linear-ish: blocks between `**`s are placed leftmost, which is exact for
//! "zero or more segments" (no backtracking), and a segment's pieces are found leftmost.
//!
//! A pattern that escapes an unreserved character (`/%7Ejoe/*`) is compiled decoded too
//! (`/~joe/*`), for the decoded reading of the file (SEMANTICS R9).
//!
//! Never: decides what a match means (that is the caller's list: disallowed, read-only,
//! approval).

use crate::policy::Weigh;
use crate::policy::path;
use crate::policy::pattern::{decoded_form, normalize};
use crate::policy::text::split_ascii;
use smallvec::SmallVec;

/// A compiled AGENTS.md path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Glob {
    kind: Kind,
    /// The pattern with its unreserved escapes decoded, when that changes it (SEMANTICS R9).
    decoded: Option<Box<Kind>>,
    /// Literal (non-`*`) octets of the normalised pattern: cites the most specific rule.
    specificity: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// A `/`-rooted pattern: runs of segment globs separated by `**`.
    Path {
        /// The first block is anchored at the start; with `subtree` false the last block
        /// (when there are several) is anchored at the end.
        blocks: Vec<Vec<Segment>>,
        /// Ends in `/*` or `/**`: at least one more segment must follow.
        subtree: bool,
    },
    /// A pattern without a leading `/`, matched against the last segment only.
    LastSegment(Segment),
}

/// One segment's glob: literal pieces separated by `*` (each `*` one or more characters).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    pieces: Vec<String>,
    /// The first piece may start anywhere (suffix patterns without a leading `*`).
    floating_start: bool,
}

/// How a pattern was read, for lint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reading {
    /// As the spec writes it.
    Plain,
    /// Ends in `/*`: read as the whole subtree (C14).
    TrailingStarSubtree,
    /// Does not start with `/`: matched against the last segment (C15).
    LastSegment,
    /// Exactly `/`: matches the home page only, not the whole site.
    RootOnly,
}

impl Glob {
    /// Compiles a pattern as written (already trimmed, not empty), with its decoded form
    /// when it has one.
    pub(crate) fn new(raw: &str) -> (Glob, Reading) {
        let normalized = normalize(raw);
        let specificity = normalized.bytes().filter(|&b| b != b'*').count();
        let (kind, reading) = Kind::new(&normalized);
        let decoded = decoded_form(&normalized).map(|decoded| Box::new(Kind::new(&decoded).0));
        (Glob { kind, decoded, specificity }, reading)
    }

    /// Literal octets of the pattern; more is more specific.
    pub(crate) fn specificity(&self) -> usize {
        self.specificity
    }

    /// True when the pattern reads differently decoded (SEMANTICS R9).
    pub(crate) fn has_decoded(&self) -> bool {
        self.decoded.is_some()
    }

    /// Whether the pattern, read as `reading` says, matches a path given as its segments
    /// (the normalised path without its leading `/`, split at `/`; `/` itself is one empty
    /// segment).
    pub(crate) fn matches_in(&self, reading: path::Reading, segments: &[&str]) -> bool {
        match (reading, &self.decoded) {
            (path::Reading::Decoded, Some(decoded)) => decoded.matches(segments),
            _ => self.kind.matches(segments),
        }
    }
}

impl Kind {
    /// A normalised pattern compiled, and how it was read.
    fn new(normalized: &str) -> (Kind, Reading) {
        let Some(rooted) = normalized.strip_prefix('/') else {
            let floating_start = !normalized.starts_with('*');
            return (Kind::LastSegment(Segment::new(normalized, floating_start)), Reading::LastSegment);
        };
        let mut parts: Vec<&str> = rooted.split('/').collect();
        let subtree = matches!(parts.last(), Some(&("*" | "**")));
        if subtree {
            parts.pop();
        }
        let mut blocks = vec![Vec::new()];
        for part in parts {
            if part == "**" {
                blocks.push(Vec::new());
            } else if let Some(block) = blocks.last_mut() {
                block.push(Segment::new(part, false));
            }
        }
        let reading = match (subtree, normalized) {
            (_, "/") => Reading::RootOnly,
            (true, text) if text.ends_with("/*") => Reading::TrailingStarSubtree,
            _ => Reading::Plain,
        };
        (Kind::Path { blocks, subtree }, reading)
    }

    fn matches(&self, segments: &[&str]) -> bool {
        match self {
            Kind::LastSegment(segment) => segments.last().is_some_and(|last| segment.matches(last)),
            Kind::Path { blocks, subtree } => match_blocks(blocks, *subtree, segments),
        }
    }
}

/// A path's segments, eight held inline: a typical path has five, so splitting a request's
/// path allocates nothing (it runs on every request to a host with an AGENTS.md path list).
pub(crate) type Segments<'p> = SmallVec<[&'p str; 8]>;

/// The segments of a normalised path, for [`Glob::matches_in`].
pub(crate) fn segments(path: &str) -> Segments<'_> {
    let path = path.strip_prefix('/').unwrap_or(path);
    // Sized first, so a path longer than the inline eight is allocated once, not grown.
    let mut segments = Segments::with_capacity(path.bytes().filter(|&b| b == b'/').count() + 1);
    segments.extend(split_ascii(path, b'/'));
    segments
}

fn match_blocks(blocks: &[Vec<Segment>], subtree: bool, segments: &[&str]) -> bool {
    let n = segments.len();
    let Some((first, rest)) = blocks.split_first() else { return false };
    if !block_at(first, segments, 0) {
        return false;
    }
    let mut pos = first.len();
    let Some((last, middle)) = rest.split_last() else {
        return if subtree { pos < n } else { pos == n };
    };
    for block in middle {
        match find_block(block, segments, pos) {
            Some(at) => pos = at + block.len(),
            None => return false,
        }
    }
    if subtree {
        find_block(last, segments, pos).is_some_and(|at| at + last.len() < n)
    } else {
        n >= pos + last.len() && block_at(last, segments, n - last.len())
    }
}

/// Whether `block` matches the segments starting at `at`.
fn block_at(block: &[Segment], segments: &[&str], at: usize) -> bool {
    at + block.len() <= segments.len() && block.iter().zip(&segments[at..]).all(|(glob, seg)| glob.matches(seg))
}

/// The leftmost position at or after `from` where `block` matches.
fn find_block(block: &[Segment], segments: &[&str], from: usize) -> Option<usize> {
    (from..=segments.len()).find(|&at| block_at(block, segments, at))
}

impl Segment {
    fn new(raw: &str, floating_start: bool) -> Segment {
        let all: Vec<&str> = raw.split('*').collect();
        let last = all.len() - 1;
        // `**` inside a segment is one `*`: only the ends may be empty pieces.
        let pieces = all
            .iter()
            .enumerate()
            .filter(|&(i, piece)| !piece.is_empty() || i == 0 || i == last)
            .map(|(_, piece)| (*piece).to_owned())
            .collect();
        Segment { pieces, floating_start }
    }

    /// Leftmost placement of each piece, each `*` taking at least one character.
    fn matches(&self, seg: &str) -> bool {
        let Some((first, rest)) = self.pieces.split_first() else { return false };
        let mut pos = if self.floating_start {
            if rest.is_empty() {
                return seg.ends_with(first.as_str());
            }
            match seg.find(first.as_str()) {
                Some(at) => at + first.len(),
                None => return false,
            }
        } else {
            if !seg.starts_with(first.as_str()) {
                return false;
            }
            first.len()
        };
        let Some((last, middle)) = rest.split_last() else { return pos == seg.len() };
        for piece in middle {
            // Normalised text is ASCII, so every byte offset is a char boundary.
            match seg.get(pos + 1..).and_then(|tail| tail.find(piece.as_str())) {
                Some(at) => pos += 1 + at + piece.len(),
                None => return false,
            }
        }
        seg.len() >= pos + 1 + last.len() && seg.ends_with(last.as_str())
    }
}

impl Weigh for Glob {
    fn heap_bytes(&self) -> usize {
        self.kind.heap_bytes() + self.decoded.heap_bytes()
    }
}

impl Weigh for Kind {
    fn heap_bytes(&self) -> usize {
        match self {
            Kind::Path { blocks, .. } => blocks.heap_bytes(),
            Kind::LastSegment(segment) => segment.heap_bytes(),
        }
    }
}

impl Weigh for Segment {
    fn heap_bytes(&self) -> usize {
        self.pieces.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &str, path: &str) -> bool {
        Glob::new(pattern).0.matches_in(path::Reading::Written, &segments(&normalize(path)))
    }

    #[test]
    fn semantics_c14_c15_glob_table() {
        let table: &[(&str, &str, bool)] = &[
            ("/admin/*", "/admin/", true),
            ("/admin/*", "/admin/users", true),
            ("/admin/*", "/admin/users/5/edit", true),
            ("/admin/*", "/admin", false),
            ("/admin/*", "/Admin/users", false),
            ("/author/*/edit", "/author/jane/edit", true),
            ("/author/*/edit", "/author/jane/x/edit", false),
            ("/author/*/edit", "/author//edit", false),
            ("/docs/**", "/docs/a/b/c", true),
            ("/docs/**", "/docs/", true),
            ("/docs/**", "/docs", false),
            ("/a/**/b", "/a/b", true),
            ("/a/**/b", "/a/x/y/b", true),
            ("/a/**/b", "/a/x/y/c", false),
            ("/**/b", "/b", true),
            ("/**/b", "/x/b", true),
            ("/a/**/b/**/c", "/a/b/x/c", true),
            ("/a/**/b/*", "/a/x/b/y/z", true),
            ("/a/**/b/*", "/a/x/b", false),
            ("*.zip", "/downloads/pkg.zip", true),
            ("*.zip", "/.zip", false),
            ("*.zip", "/a.zip/x", false),
            ("/exact", "/exact", true),
            ("/exact", "/exact/", false),
            ("/files/*.bak", "/files/db.bak", true),
            ("/files/*.bak", "/files/old/db.bak", false),
            ("/files/*.bak", "/files/.bak", false),
            ("/x/a*b*c", "/x/abc", false),
            ("/x/a*b*c", "/x/aXbYc", true),
            ("/x/a**b", "/x/aXb", true),
            ("/*", "/", true),
            ("/*", "/anything/deep", true),
            ("/**", "/", true),
            ("admin", "/x/superadmin", true),
            ("admin", "/admin/x", false),
            ("/ツ/*", "/%e3%83%84/a", true),
            ("/a?b", "/a?b", true),
            ("/[x]", "/[x]", true),
        ];
        for (pattern, path, want) in table {
            assert_eq!(check(pattern, path), *want, "{pattern} vs {path}");
        }
    }

    #[test]
    fn readings_are_reported_for_lint() {
        assert_eq!(Glob::new("/a/*").1, Reading::TrailingStarSubtree);
        assert_eq!(Glob::new("/a/**").1, Reading::Plain);
        assert_eq!(Glob::new("*.zip").1, Reading::LastSegment);
        assert_eq!(Glob::new("/a/*/b").1, Reading::Plain);
        assert_eq!(Glob::new("/").1, Reading::RootOnly);
        assert!(check("/", "/") && !check("/", "/a"));
        assert!(Glob::new("/a/b/c").0.specificity() > Glob::new("/a/*").0.specificity());
    }

    #[test]
    fn semantics_r9_decoded_glob_beside_the_written_one() {
        let (glob, _) = Glob::new("/%7ejoe/*");
        assert!(glob.has_decoded());
        let plain = segments("/~joe/x");
        let escaped = segments("/%7Ejoe/x");
        assert!(glob.matches_in(path::Reading::Decoded, &plain) && !glob.matches_in(path::Reading::Written, &plain));
        assert!(
            glob.matches_in(path::Reading::Written, &escaped) && !glob.matches_in(path::Reading::Decoded, &escaped)
        );
        assert!(!Glob::new("/a%2Fb/*").0.has_decoded(), "a reserved escape is data");
        assert!(Glob::new("*.%7A%69%70").0.matches_in(path::Reading::Decoded, &segments("/pkg.zip")));
    }

    #[test]
    fn segments_are_the_path_split_at_each_slash_after_the_first() {
        for path in ["", "/", "//", "/a", "/a/", "a/b", "/a//b", "/é/ü/", "/catalog/item?id=4/2"] {
            let split: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
            assert_eq!(&segments(path)[..], split, "{path:?}");
        }
        assert!(!segments("/a/b/c/d/e/f/g/h").spilled(), "eight segments are held inline");
        let long = segments("/a/b/c/d/e/f/g/h/i");
        assert_eq!((long.spilled(), long.capacity(), long.last().copied()), (true, 9, Some("i")), "sized once");
    }

    #[test]
    fn pathological_patterns_stay_fast() {
        let path = format!("/{}", "a/".repeat(4000));
        let segs = segments(&path);
        let (glob, _) = Glob::new("/**/a/**/a/**/a/**/a/**/b");
        assert!(!glob.matches_in(path::Reading::Written, &segs));
        let long_segment = format!("/{}", "a".repeat(16 * 1024));
        let (glob, _) = Glob::new("/*a*a*a*a*a*a*a*b");
        assert!(!glob.matches_in(path::Reading::Written, &segments(&long_segment)));
    }
}
