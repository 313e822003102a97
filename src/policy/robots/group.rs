//! One robots.txt group (RFC 9309 §2.1): its user-agent lines, its rules, and the prefix
//! index that finds the rules worth testing for a path. Picks the best matching rule by
//! RFC 9309 §2.2.2: most octets in the (normalised) pattern, `allow` on a tie, in one
//! reading of the file (SEMANTICS R9): a rule whose pattern escapes an unreserved character
//! is kept twice, as written for [`Reading::Written`] and decoded for [`Reading::Decoded`].
//!
//! Never: decides which groups apply to an agent beyond naming its own user-agent lines
//! (the state merges groups), or what a match means for the request.

use crate::policy::Weigh;
use std::sync::Arc;

use std::collections::HashMap;

use super::index::KeyIndex;
use super::{Span, to_u32};
use crate::policy::RequestView;
use crate::policy::path::Reading;
use crate::policy::pattern::{decoded_form, is_literal_prefix, matches_normalized, normalize};

/// The product token a `User-agent: *` line carries.
pub(super) const ANY_AGENT: &str = "*";

/// A `User-agent` line.
#[derive(Debug, Clone)]
pub(super) struct AgentLine {
    /// The product token read from the value (`*` for the catch-all group).
    pub(super) token: Box<str>,
    /// 1-based line.
    pub(super) line: u32,
    /// The line as written, without its comment.
    pub(super) text: Arc<str>,
}

/// An `allow` or `disallow` line: 24 bytes, its text kept in the file's text buffer
/// (a file of 20,000 rules holds no allocation per rule).
#[derive(Debug, Clone, Copy)]
pub(super) struct Rule {
    /// True for `allow`.
    pub(super) allow: bool,
    /// True when the pattern has no `*` and no final `$`, so a path starting with it
    /// matches.
    literal_prefix: bool,
    /// The readings of the file this rule takes part in.
    readings: Readings,
    /// 1-based line.
    pub(super) line: u32,
    /// The line as written, without its comment.
    pub(super) text: Span,
    /// The pattern, percent-normalised; empty for an empty value, which matches nothing.
    /// Usually the end of `text`; a pattern that normalising changed follows it.
    pattern: Span,
}

const _: () = assert!(std::mem::size_of::<Rule>() == 24, "a rule is 24 bytes (docs/robots.md, memory per origin)");

/// Which readings of the file (SEMANTICS R9) a rule takes part in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Readings {
    /// A pattern with no unreserved escape reads the same in both.
    Both,
    /// The written form of a pattern that has a decoded one.
    WrittenOnly,
    /// The decoded form (`/~joe/` for `/%7Ejoe/`), citing the same line.
    DecodedOnly,
}

impl Readings {
    fn include(self, reading: Reading) -> bool {
        match self {
            Readings::Both => true,
            Readings::WrittenOnly => reading == Reading::Written,
            Readings::DecodedOnly => reading == Reading::Decoded,
        }
    }
}

impl Rule {
    /// A rule from its value (`raw_pattern`, already free of invalid UTF-8) and its line as
    /// written (`line_text`), both appended to the file's text buffer; and, when the
    /// pattern escapes an unreserved character, the same rule decoded, whose pattern is
    /// appended too (SEMANTICS R9: `Disallow: /%7Ejoe/` is also read `Disallow: /~joe/`).
    pub(super) fn new(
        buffer: &mut String,
        allow: bool,
        raw_pattern: &str,
        line: u32,
        line_text: &str,
    ) -> (Self, Option<Self>) {
        let text = Span::push(buffer, line_text);
        let normalized = normalize(raw_pattern);
        let pattern = if line_text.ends_with(normalized.as_str()) {
            text.suffix(normalized.len())
        } else {
            Span::push(buffer, &normalized)
        };
        // Decoding never makes a `*` or a `$` (both reserved), so both forms are literal
        // prefixes or neither is.
        let literal_prefix = is_literal_prefix(&normalized);
        let written = Rule { allow, literal_prefix, readings: Readings::Both, line, text, pattern };
        match decoded_form(&normalized) {
            None => (written, None),
            Some(decoded) => {
                let decoded =
                    Rule { readings: Readings::DecodedOnly, pattern: Span::push(buffer, &decoded), ..written };
                (Rule { readings: Readings::WrittenOnly, ..written }, Some(decoded))
            }
        }
    }

    fn specificity(&self) -> usize {
        self.pattern.len as usize
    }

    /// True when `self` beats `other` (RFC 9309 §2.2.2): more octets, then allow over
    /// disallow; between equals the earlier line is cited.
    fn outranks(&self, other: &Rule) -> bool {
        let key = |r: &Rule| (r.specificity(), r.allow);
        match key(self).cmp(&key(other)) {
            std::cmp::Ordering::Equal => self.line < other.line,
            ordering => ordering.is_gt(),
        }
    }
}

/// One group: consecutive user-agent lines and the rules after them.
#[derive(Debug, Clone)]
pub(super) struct Group {
    pub(super) agents: Vec<AgentLine>,
    /// In line order while parsing; sorted by index key by [`Group::build_index`].
    rules: Vec<Rule>,
    /// Rules keyed by their literal prefix (see [`Group::build_index`]).
    by_prefix: KeyIndex,
    /// Rules keyed by the first literal piece after their first wildcard (`.pdf` for
    /// `/*.pdf$`), which must occur somewhere in a matching path.
    by_inner_piece: KeyIndex,
}

/// Where [`Group::build_index`] files a rule; the group's rules are sorted in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Filed {
    ByPrefix,
    ByInnerPiece,
    /// An empty pattern, which matches nothing.
    Nowhere,
}

impl Group {
    /// A group with no rules yet.
    pub(super) fn new(first_agent: AgentLine) -> Self {
        Group {
            agents: vec![first_agent],
            rules: Vec::new(),
            by_prefix: KeyIndex::default(),
            by_inner_piece: KeyIndex::default(),
        }
    }

    /// True until the group's first rule: another user-agent line still joins this group.
    pub(super) fn collecting_agents(&self) -> bool {
        self.rules.is_empty()
    }

    /// Adds a rule. Call [`Group::build_index`] after the last one.
    pub(super) fn push_rule(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// Indexes the rules (`text` is the file's text buffer). A rule is keyed by its literal
    /// prefix or, when it has a wildcard followed by a literal piece, by that piece:
    /// whichever fewer rules share (a prefix of one octet, `/`, would make the rule a
    /// candidate for every request). Both keys must occur in a matching path, so either
    /// choice finds every match; the choice only keeps `Disallow: /*.pdf$` and
    /// `Disallow: /shop/*/item-42` from being tested for every request. Rules with an empty
    /// pattern match nothing and are not indexed. The rules are sorted by where they are
    /// filed and their key, so each key's rules are one range.
    pub(super) fn build_index(&mut self, text: &str) {
        let keys: Vec<Option<(Span, Option<Span>)>> = self
            .rules
            .iter()
            .map(|rule| {
                (rule.pattern.len > 0).then(|| (literal_prefix(rule.pattern, text), inner_piece(rule.pattern, text)))
            })
            .collect();
        let mut shared: HashMap<&str, u32> = HashMap::new();
        for (prefix, piece) in keys.iter().flatten() {
            *shared.entry(prefix.of(text)).or_default() += 1;
            if let Some(piece) = piece {
                *shared.entry(piece.of(text)).or_default() += 1;
            }
        }
        let mut filed: Vec<(Filed, Span, Rule)> = keys
            .iter()
            .zip(&self.rules)
            .map(|(key, rule)| match *key {
                None => (Filed::Nowhere, Span::default(), *rule),
                Some((prefix, Some(piece))) if prefix.len <= 1 || shared[piece.of(text)] < shared[prefix.of(text)] => {
                    (Filed::ByInnerPiece, piece, *rule)
                }
                Some((prefix, _)) => (Filed::ByPrefix, prefix, *rule),
            })
            .collect();
        filed.sort_by(|a, b| (a.0, a.1.of(text), a.2.line).cmp(&(b.0, b.1.of(text), b.2.line)));
        let keyed = |by: Filed| -> Vec<(Span, u32)> {
            filed.iter().enumerate().filter(|(_, f)| f.0 == by).map(|(i, f)| (f.1, to_u32(i))).collect()
        };
        let (by_prefix, by_inner_piece) = (keyed(Filed::ByPrefix), keyed(Filed::ByInnerPiece));
        self.by_prefix = KeyIndex::build(text, &by_prefix, to_u32(by_prefix.len()));
        self.by_inner_piece = KeyIndex::build(text, &by_inner_piece, to_u32(by_prefix.len() + by_inner_piece.len()));
        // Exactly as many as there are: the parsed file is kept per origin.
        let mut rules = Vec::with_capacity(filed.len());
        rules.extend(filed.iter().map(|(_, _, rule)| *rule));
        self.rules = rules;
        self.agents.shrink_to_fit();
    }

    /// The first user-agent line that names the agent (RFC 9309 §2.2.1, SEMANTICS X2),
    /// ignoring `*`.
    pub(super) fn naming_line(&self, req: &RequestView<'_>) -> Option<&AgentLine> {
        self.agents.iter().find(|a| &*a.token != ANY_AGENT && req.names_agent(&a.token))
    }

    /// The group's `User-agent: *` line, if it has one.
    pub(super) fn any_agent_line(&self) -> Option<&AgentLine> {
        self.agents.iter().find(|a| &*a.token == ANY_AGENT)
    }

    /// Updates `best` with this group's best rule for `path` (percent-normalised path and
    /// query) in `reading`, keeping `best` when it outranks every match here. `text` is the
    /// file's text buffer.
    pub(super) fn best_match<'g>(
        &'g self,
        text: &str,
        path: &str,
        reading: Reading,
        best: &mut Option<(&'g Group, &'g Rule)>,
    ) {
        let bytes = path.as_bytes();
        self.by_prefix.for_each_key(text, bytes, |key| {
            for position in self.by_prefix.rules_of(key) {
                self.consider(position, text, path, reading, best);
            }
        });
        if self.by_inner_piece.is_empty() {
            return;
        }
        // A piece may occur at many positions (`a` in a 16 KiB run of `a`s): test each key's
        // rules once, marking the key in a bitset, so the work stays linear in the path
        // rather than in the number of occurrences.
        let mut seen: Vec<u64> = Vec::new();
        for (start, &byte) in bytes.iter().enumerate() {
            if !self.by_inner_piece.has_key_starting_with(byte) {
                continue;
            }
            self.by_inner_piece.for_each_key(text, &bytes[start..], |key| {
                if seen.is_empty() {
                    seen = vec![0; self.by_inner_piece.key_count().div_ceil(64)];
                }
                let (word, bit) = (key as usize / 64, key % 64);
                if seen[word] & (1 << bit) == 0 {
                    seen[word] |= 1 << bit;
                    for position in self.by_inner_piece.rules_of(key) {
                        self.consider(position, text, path, reading, best);
                    }
                }
            });
        }
    }

    fn consider<'g>(
        &'g self,
        position: usize,
        text: &str,
        path: &str,
        reading: Reading,
        best: &mut Option<(&'g Group, &'g Rule)>,
    ) {
        let rule = &self.rules[position];
        if !rule.readings.include(reading) || best.is_some_and(|(_, b)| !rule.outranks(b)) {
            return;
        }
        if rule.literal_prefix || matches_normalized(rule.pattern.of(text), path) {
            *best = Some((self, rule));
        }
    }
}

/// The part of a pattern every matching path starts with: up to the first `*`, or the
/// whole pattern without a final `$` anchor.
fn literal_prefix(pattern: Span, text: &str) -> Span {
    let pattern_text = pattern.of(text);
    let len = match pattern_text.find('*') {
        Some(star) => star,
        None => pattern_text.strip_suffix('$').unwrap_or(pattern_text).len(),
    };
    pattern.prefix(len)
}

/// The first non-empty literal piece after the first `*`, without a final `$` anchor
/// (`.pdf` in `/*.pdf$`); `None` when wildcards are all there is after the prefix.
fn inner_piece(pattern: Span, text: &str) -> Option<Span> {
    let pattern_text = pattern.of(text);
    let body = pattern_text.strip_suffix('$').unwrap_or(pattern_text);
    let star = body.find('*')?;
    let start = star + body[star..].find(|c| c != '*')?;
    let len = body[start..].find('*').unwrap_or(body.len() - start);
    Some(pattern.sub(start, len))
}

impl Weigh for AgentLine {
    fn heap_bytes(&self) -> usize {
        self.token.heap_bytes() + self.text.heap_bytes()
    }
}

impl Weigh for Group {
    fn heap_bytes(&self) -> usize {
        self.agents.heap_bytes()
            + crate::policy::weight::allocation(self.rules.capacity() * std::mem::size_of::<Rule>())
            + self.by_prefix.heap_bytes()
            + self.by_inner_piece.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key `find` picks from `raw`'s normalised pattern, as text.
    fn key(raw: &str, find: fn(Span, &str) -> Option<Span>) -> Option<String> {
        let mut text = String::new();
        let pattern = Span::push(&mut text, &normalize(raw));
        find(pattern, &text).map(|key| key.of(&text).to_owned())
    }

    #[test]
    fn literal_prefix_stops_at_wildcard_or_anchor() {
        let cases =
            [("/a/b", "/a/b"), ("/a*b", "/a"), ("*.gif$", ""), ("/a$", "/a"), ("/a$b", "/a$b"), ("/ツ*", "/%E3%83%84")];
        for (raw, prefix) in cases {
            assert_eq!(key(raw, |p, t| Some(literal_prefix(p, t))).as_deref(), Some(prefix), "{raw}");
        }
    }

    #[test]
    fn inner_piece_is_the_first_literal_after_a_wildcard() {
        let cases = [
            ("/*.pdf$", Some(".pdf")),
            ("*/tmp/*x", Some("/tmp/")),
            ("/**a", Some("a")),
            ("/*", None),
            ("/a", None),
            ("*$", None),
        ];
        for (raw, piece) in cases {
            assert_eq!(key(raw, inner_piece).as_deref(), piece, "{raw}");
        }
    }
}
