//! One robots.txt group (RFC 9309 §2.1): its user-agent lines, its rules, and the prefix
//! index that finds the rules worth testing for a path. Picks the best matching rule by
//! RFC 9309 §2.2.2: most octets in the (normalised) pattern, `allow` on a tie.
//!
//! Never: decides which groups apply to an agent beyond naming its own user-agent lines
//! (the state merges groups), or what a match means for the request.

use crate::policy::Weigh;
use std::sync::Arc;

use std::collections::HashMap;

use super::index::{PrefixIndex, PrefixIndexBuilder};
use crate::policy::RequestView;
use crate::policy::pattern::Pattern;

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

/// An `allow` or `disallow` line.
#[derive(Debug, Clone)]
pub(super) struct Rule {
    /// True for `allow`.
    pub(super) allow: bool,
    /// The compiled pattern; `None` for an empty value, which matches nothing.
    pattern: Option<Pattern>,
    /// 1-based line.
    pub(super) line: u32,
    /// The line as written, without its comment.
    pub(super) text: Arc<str>,
}

impl Rule {
    /// A rule from its value (`raw_pattern`, already free of invalid UTF-8).
    pub(super) fn new(allow: bool, raw_pattern: &str, line: u32, text: Arc<str>) -> Self {
        let pattern = (!raw_pattern.is_empty()).then(|| Pattern::new(raw_pattern));
        Rule { allow, pattern, line, text }
    }

    fn specificity(&self) -> usize {
        self.pattern.as_ref().map_or(0, Pattern::specificity)
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
    rules: Vec<Rule>,
    /// Rules keyed by their literal prefix (see [`Group::build_index`]).
    by_prefix: PrefixIndex,
    /// Rules keyed by the first literal piece after their first wildcard (`.pdf` for
    /// `/*.pdf$`), which must occur somewhere in a matching path.
    by_inner_piece: PrefixIndex,
}

impl Group {
    /// A group with no rules yet.
    pub(super) fn new(first_agent: AgentLine) -> Self {
        Group {
            agents: vec![first_agent],
            rules: Vec::new(),
            by_prefix: PrefixIndex::default(),
            by_inner_piece: PrefixIndex::default(),
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

    /// Indexes the rules. A rule is keyed by its literal prefix or, when it has a wildcard
    /// followed by a literal piece, by that piece: whichever fewer rules share (a prefix of
    /// one octet, `/`, would make the rule a candidate for every request). Both keys must
    /// occur in a matching path, so either choice finds every match; the choice only keeps
    /// `Disallow: /*.pdf$` and `Disallow: /shop/*/item-42` from being tested for every
    /// request. Rules with an empty pattern match nothing and are not indexed.
    pub(super) fn build_index(&mut self) {
        let mut shared: HashMap<&str, u32> = HashMap::new();
        let keys: Vec<Option<(&str, Option<&str>)>> = self
            .rules
            .iter()
            .map(|rule| {
                let pattern = rule.pattern.as_ref()?;
                Some((literal_prefix(pattern), inner_piece(pattern)))
            })
            .collect();
        for (prefix, piece) in keys.iter().flatten() {
            *shared.entry(prefix).or_default() += 1;
            if let Some(piece) = piece {
                *shared.entry(piece).or_default() += 1;
            }
        }
        let (mut by_prefix, mut by_inner_piece) = (PrefixIndexBuilder::new(), PrefixIndexBuilder::new());
        for (id, key) in keys.iter().enumerate() {
            let Some((prefix, piece)) = key else { continue };
            let id = u32::try_from(id).expect("rule count is bounded by the 500 KiB parse cap");
            match piece {
                Some(piece) if prefix.len() <= 1 || shared[piece] < shared[prefix] => {
                    by_inner_piece.insert(piece.as_bytes(), id);
                }
                _ => by_prefix.insert(prefix.as_bytes(), id),
            }
        }
        self.by_prefix = by_prefix.finish();
        self.by_inner_piece = by_inner_piece.finish();
        self.rules.shrink_to_fit();
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
    /// query), keeping `best` when it outranks every match here.
    pub(super) fn best_match<'g>(&'g self, path: &str, best: &mut Option<(&'g Group, &'g Rule)>) {
        self.by_prefix.for_each_candidate(path.as_bytes(), |id| self.consider(id, path, best));
        if self.by_inner_piece.is_empty() {
            return;
        }
        // A piece may occur at many positions (`a` in a 16 KiB run of `a`s): collect each
        // node once, marking it in a bitset, so each rule is tested once and the work stays
        // linear in the path rather than in the number of occurrences.
        let mut nodes = Vec::new();
        let mut seen: Vec<u64> = Vec::new();
        let bytes = path.as_bytes();
        for (start, &byte) in bytes.iter().enumerate() {
            if self.by_inner_piece.has_key_starting_with(byte) {
                self.by_inner_piece.for_each_node(&bytes[start..], |node| {
                    if seen.is_empty() {
                        seen = vec![0; self.by_inner_piece.node_count().div_ceil(64)];
                    }
                    let (word, bit) = (node as usize / 64, node % 64);
                    if seen[word] & (1 << bit) == 0 {
                        seen[word] |= 1 << bit;
                        nodes.push(node);
                    }
                });
            }
        }
        nodes.sort_unstable();
        for node in nodes {
            for &id in self.by_inner_piece.rules_at(node) {
                self.consider(id, path, best);
            }
        }
    }

    fn consider<'g>(&'g self, id: u32, path: &str, best: &mut Option<(&'g Group, &'g Rule)>) {
        let rule = &self.rules[id as usize];
        let Some(pattern) = &rule.pattern else { return };
        if best.is_some_and(|(_, b)| !rule.outranks(b)) {
            return;
        }
        if pattern.is_literal_prefix() || pattern.matches_normalized(path) {
            *best = Some((self, rule));
        }
    }
}

/// The part of a pattern every matching path starts with: up to the first `*`, or the
/// whole pattern without a final `$` anchor.
fn literal_prefix(pattern: &Pattern) -> &str {
    let text = pattern.as_str();
    match text.find('*') {
        Some(star) => &text[..star],
        None => text.strip_suffix('$').unwrap_or(text),
    }
}

/// The first non-empty literal piece after the first `*`, without a final `$` anchor
/// (`.pdf` in `/*.pdf$`); `None` when wildcards are all there is after the prefix.
fn inner_piece(pattern: &Pattern) -> Option<&str> {
    let text = pattern.as_str();
    let text = text.strip_suffix('$').unwrap_or(text);
    let (_, after) = text.split_once('*')?;
    after.split('*').find(|piece| !piece.is_empty())
}

impl Weigh for AgentLine {
    fn heap_bytes(&self) -> usize {
        self.token.heap_bytes() + self.text.heap_bytes()
    }
}

impl Weigh for Rule {
    fn heap_bytes(&self) -> usize {
        self.pattern.heap_bytes() + self.text.heap_bytes()
    }
}

impl Weigh for Group {
    fn heap_bytes(&self) -> usize {
        self.agents.heap_bytes()
            + self.rules.heap_bytes()
            + self.by_prefix.heap_bytes()
            + self.by_inner_piece.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_prefix_stops_at_wildcard_or_anchor() {
        let cases =
            [("/a/b", "/a/b"), ("/a*b", "/a"), ("*.gif$", ""), ("/a$", "/a"), ("/a$b", "/a$b"), ("/ツ*", "/%E3%83%84")];
        for (raw, prefix) in cases {
            assert_eq!(literal_prefix(&Pattern::new(raw)), prefix, "{raw}");
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
            assert_eq!(inner_piece(&Pattern::new(raw)), piece, "{raw}");
        }
    }
}
