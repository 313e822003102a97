//! A radix trie over byte strings (rule keys), answering "which keys are a prefix of this
//! text" in one walk. A group keeps two: one over the literal prefixes of its rules (the
//! pattern up to its first `*`, or up to a final `$`), walked once from the start of the
//! path; and one over the first literal piece after a leading wildcard (`/*.pdf$` is keyed
//! `.pdf`), walked from every position of the path.
//!
//! Never: decides whether a candidate matches beyond its key (the group does that with
//! [`crate::policy::pattern::Pattern`]).

/// Rule ids (indexes into the group's rule list) keyed by byte strings. Built by a
/// [`PrefixIndexBuilder`], then kept in flat arrays: a node is six integers and its children
/// and rules are ranges of two shared lists, so a file of 20,000 rules makes five
/// allocations here, not 40,000 (issue 9: memory per origin).
#[derive(Debug, Clone, Default)]
pub(super) struct PrefixIndex {
    /// Label bytes of every node, each label a range of this buffer.
    labels: Box<[u8]>,
    /// Node 0 is the root, with an empty label.
    nodes: Box<[Node]>,
    /// The children of every node, each node's a range, sorted by first label byte.
    children: Box<[u32]>,
    /// The rules of every node, each node's a range, in insertion (line) order.
    rules: Box<[u32]>,
    /// The first bytes of the root's children, as a bitmap: a cheap test before a walk.
    first_bytes: [u64; 4],
}

#[derive(Debug, Clone, Copy, Default)]
struct Node {
    /// Start of the label in `labels`.
    label_start: u32,
    /// Length of the label; only the root's is 0.
    label_len: u32,
    /// Start and length of the node's children in `children`.
    children_start: u32,
    children_len: u32,
    /// Start and length of the node's rules in `rules`: those whose key ends exactly here.
    rules_start: u32,
    rules_len: u32,
}

/// A [`PrefixIndex`] being built: a radix trie with a list per node.
#[derive(Debug, Clone)]
pub(super) struct PrefixIndexBuilder {
    labels: Vec<u8>,
    nodes: Vec<BuildNode>,
    first_bytes: [u64; 4],
}

#[derive(Debug, Clone, Default)]
struct BuildNode {
    label_start: u32,
    label_len: u32,
    /// Children, sorted by the first byte of their labels (distinct by construction).
    children: Vec<u32>,
    /// Rules whose key ends exactly here, in insertion (line) order.
    rules: Vec<u32>,
}

impl PrefixIndexBuilder {
    /// A trie holding only the root.
    pub(super) fn new() -> Self {
        PrefixIndexBuilder { labels: Vec::new(), nodes: vec![BuildNode::default()], first_bytes: [0; 4] }
    }

    /// The index in its flat form.
    pub(super) fn finish(self) -> PrefixIndex {
        let mut nodes = Vec::with_capacity(self.nodes.len());
        let mut children = Vec::new();
        let mut rules = Vec::new();
        for node in &self.nodes {
            nodes.push(Node {
                label_start: node.label_start,
                label_len: node.label_len,
                children_start: to_u32(children.len()),
                children_len: to_u32(node.children.len()),
                rules_start: to_u32(rules.len()),
                rules_len: to_u32(node.rules.len()),
            });
            children.extend_from_slice(&node.children);
            rules.extend_from_slice(&node.rules);
        }
        PrefixIndex {
            labels: self.labels.into_boxed_slice(),
            nodes: nodes.into_boxed_slice(),
            children: children.into_boxed_slice(),
            rules: rules.into_boxed_slice(),
            first_bytes: self.first_bytes,
        }
    }

    /// Adds a rule under a key.
    pub(super) fn insert(&mut self, prefix: &[u8], rule: u32) {
        if let Some(&first) = prefix.first() {
            self.first_bytes[usize::from(first >> 6)] |= 1 << (first & 63);
        }
        let mut node = 0;
        let mut pos = 0;
        loop {
            let Some(&first) = prefix.get(pos) else {
                self.nodes[node].rules.push(rule);
                return;
            };
            match self.child_slot(node, first) {
                Err(slot) => {
                    let leaf = self.push_node(&prefix[pos..], rule);
                    self.nodes[node].children.insert(slot, leaf);
                    return;
                }
                Ok(slot) => {
                    let child = self.nodes[node].children[slot] as usize;
                    let common = common_prefix_len(self.label(child), &prefix[pos..]);
                    if common < self.nodes[child].label_len as usize {
                        node = self.split(node, slot, common);
                    } else {
                        node = child;
                    }
                    pos += common;
                }
            }
        }
    }

    fn label(&self, node: usize) -> &[u8] {
        let n = &self.nodes[node];
        &self.labels[n.label_start as usize..(n.label_start + n.label_len) as usize]
    }

    /// Where the child starting with `byte` is (`Ok`) or would go (`Err`).
    fn child_slot(&self, node: usize, byte: u8) -> Result<usize, usize> {
        self.nodes[node]
            .children
            .binary_search_by_key(&byte, |&c| self.labels[self.nodes[c as usize].label_start as usize])
    }

    fn push_node(&mut self, label: &[u8], rule: u32) -> u32 {
        let label_start = to_u32(self.labels.len());
        self.labels.extend_from_slice(label);
        self.nodes.push(BuildNode {
            label_start,
            label_len: to_u32(label.len()),
            children: Vec::new(),
            rules: vec![rule],
        });
        to_u32(self.nodes.len() - 1)
    }

    /// Splits the child at `slot` of `parent` after `at` bytes of its label; returns the new
    /// middle node, which takes the first `at` bytes and the old child as its only child.
    fn split(&mut self, parent: usize, slot: usize, at: usize) -> usize {
        let child = self.nodes[parent].children[slot];
        let (start, len) = (self.nodes[child as usize].label_start, self.nodes[child as usize].label_len);
        let at = to_u32(at);
        self.nodes.push(BuildNode { label_start: start, label_len: at, children: vec![child], rules: Vec::new() });
        let middle = self.nodes.len() - 1;
        let c = &mut self.nodes[child as usize];
        c.label_start = start + at;
        c.label_len = len - at;
        self.nodes[parent].children[slot] = to_u32(middle);
        middle
    }
}

impl PrefixIndex {
    /// How many nodes the trie has (node ids are below this).
    pub(super) fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// True when no rule was inserted.
    pub(super) fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// True when some non-empty key starts with `byte`.
    pub(super) fn has_key_starting_with(&self, byte: u8) -> bool {
        self.first_bytes[usize::from(byte >> 6)] & (1 << (byte & 63)) != 0
    }

    /// Calls `visit` with every rule whose key is a prefix of `text`, shortest key first.
    /// Cost: one step per node on the path, plus the candidates.
    pub(super) fn for_each_candidate(&self, text: &[u8], mut visit: impl FnMut(u32)) {
        self.for_each_node(text, |node| self.rules_at(node).iter().for_each(|&rule| visit(rule)));
    }

    /// Calls `visit` with every node holding rules whose key is a prefix of `text`,
    /// shortest key first.
    pub(super) fn for_each_node(&self, text: &[u8], mut visit: impl FnMut(u32)) {
        if self.nodes.is_empty() {
            return;
        }
        let mut node = 0;
        let mut pos = 0;
        loop {
            if self.nodes[node].rules_len > 0 {
                visit(to_u32(node));
            }
            let Some(&next) = text.get(pos) else { return };
            let Some(child) = self.child(node, next) else { return };
            let label = self.label(child);
            if !text[pos..].starts_with(label) {
                return;
            }
            pos += label.len();
            node = child;
        }
    }

    /// The rules stored at a node, in insertion order.
    pub(super) fn rules_at(&self, node: u32) -> &[u32] {
        let n = &self.nodes[node as usize];
        &self.rules[n.rules_start as usize..(n.rules_start + n.rules_len) as usize]
    }

    fn label(&self, node: usize) -> &[u8] {
        let n = &self.nodes[node];
        &self.labels[n.label_start as usize..(n.label_start + n.label_len) as usize]
    }

    /// The child of `node` whose label starts with `byte`.
    fn child(&self, node: usize, byte: u8) -> Option<usize> {
        let n = &self.nodes[node];
        let children = &self.children[n.children_start as usize..(n.children_start + n.children_len) as usize];
        let slot = children.binary_search_by_key(&byte, |&c| self.labels[self.nodes[c as usize].label_start as usize]);
        slot.ok().map(|slot| children[slot] as usize)
    }
}

fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Offsets and counts are bounded by the robots.txt size cap (500 KiB), far below `u32::MAX`.
fn to_u32(n: usize) -> u32 {
    u32::try_from(n).expect("robots.txt index sizes are bounded by the 500 KiB parse cap")
}

impl Weigh for PrefixIndex {
    fn heap_bytes(&self) -> usize {
        use crate::policy::weight::allocation;
        allocation(self.labels.len())
            + allocation(self.nodes.len() * std::mem::size_of::<Node>())
            + allocation(self.children.len() * 4)
            + allocation(self.rules.len() * 4)
    }
}

use crate::policy::Weigh;
#[cfg(test)]
mod tests {
    use super::*;

    fn candidates(index: &PrefixIndex, path: &str) -> Vec<u32> {
        let mut out = Vec::new();
        index.for_each_candidate(path.as_bytes(), |r| out.push(r));
        out
    }

    #[test]
    fn finds_every_prefix_of_the_path_and_nothing_else() {
        let mut index = PrefixIndexBuilder::new();
        let prefixes = ["/a/b", "/a", "", "/a/bc", "/ab", "/x", "/a/b", "/a/"];
        for (i, p) in prefixes.iter().enumerate() {
            index.insert(p.as_bytes(), i as u32);
        }
        let index = index.finish();
        assert_eq!(candidates(&index, "/a/bcd"), vec![2, 1, 7, 0, 6, 3]);
        assert_eq!(candidates(&index, "/a"), vec![2, 1]);
        assert_eq!(candidates(&index, "/abc"), vec![2, 1, 4]);
        assert_eq!(candidates(&index, "/y"), vec![2]);
        assert_eq!(candidates(&index, ""), vec![2]);
    }

    #[test]
    fn agrees_with_a_plain_scan() {
        let prefixes: Vec<String> =
            (0..300).map(|i| format!("/{}", "ab".repeat(i % 7) + &"c".repeat(i % 3) + &(i % 5).to_string())).collect();
        let mut index = PrefixIndexBuilder::new();
        for (i, p) in prefixes.iter().enumerate() {
            index.insert(p.as_bytes(), i as u32);
        }
        let index = index.finish();
        for path in ["/ababc1", "/abababab", "/cc2", "/", "/ab0x", "/ababababababcc4/z"] {
            let mut got = candidates(&index, path);
            got.sort_unstable();
            let want: Vec<u32> =
                (0..prefixes.len() as u32).filter(|&i| path.starts_with(&prefixes[i as usize])).collect();
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn ten_thousand_rules_offer_only_the_prefixes_of_the_path() {
        let mut index = PrefixIndexBuilder::new();
        for i in 0..10_000u32 {
            index.insert(format!("/section-{}/page-{i}", i % 100).as_bytes(), i);
        }
        index.insert(b"/section-7/", 10_000);
        let index = index.finish();
        assert_eq!(candidates(&index, "/section-7/page-307/x"), vec![10_000, 307]);
        assert_eq!(candidates(&index, "/section-7/page-3"), vec![10_000]);
        assert!(index.nodes.len() <= 2 * 10_001 + 1, "a radix trie has at most 2n nodes: {}", index.nodes.len());
    }
}
