//! The keys of a group's rules, sorted, answering "which keys are a prefix of this text"
//! with one binary search and a walk up a chain. A group keeps two: one over the literal
//! prefixes of its rules (the pattern up to its first `*`, or up to a final `$`), searched
//! once with the path; and one over the first literal piece after a wildcard (`/*.pdf$` is
//! keyed `.pdf`), searched from every position of the path whose byte starts some key.
//!
//! The keys are spans of the file's text buffer and the rules sit in the group sorted by
//! key, so a key costs one 16-byte entry and nothing else: a file of 20,000 rules makes one
//! allocation here (memory per origin).
//!
//! Never: decides whether a candidate matches beyond its key (the group does that with
//! [`crate::policy::pattern::matches_normalized`]).

use std::ops::Range;

use super::{Span, to_u32};

/// No parent: the key has no shorter key that is a prefix of it.
const NO_PARENT: u32 = u32::MAX;

/// Distinct keys in byte order, each with the rules filed under it. The rules are the
/// group's, sorted so that each key's rules are one range: from the key's `first` up to the
/// next key's, or up to `end` for the last key.
#[derive(Debug, Clone, Default)]
pub(super) struct KeyIndex {
    entries: Box<[Entry]>,
    /// Where the rules of the last key end.
    end: u32,
    /// The first bytes of the non-empty keys, as a bitmap: a cheap test before a search.
    first_bytes: [u64; 4],
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    key: Span,
    /// The position of this key's first rule in the group.
    first: u32,
    /// The longest other key that is a prefix of this one ([`NO_PARENT`] when none): every
    /// key that is a prefix of a text is on the chain from the greatest key not above it.
    parent: u32,
}

impl KeyIndex {
    /// An index over `keyed`: (key, position of its rule in the group), sorted by key and,
    /// for equal keys, by position; positions are consecutive from the first, ending before
    /// `end`.
    pub(super) fn build(text: &str, keyed: &[(Span, u32)], end: u32) -> Self {
        let mut entries: Vec<Entry> = Vec::new();
        let mut first_bytes = [0; 4];
        // The chain of the previous key: each a prefix of the one after it.
        let mut chain: Vec<u32> = Vec::new();
        for &(key, first) in keyed {
            let bytes = key.of(text).as_bytes();
            if entries.last().is_some_and(|last| last.key.of(text).as_bytes() == bytes) {
                continue;
            }
            while chain.last().is_some_and(|&e| !bytes.starts_with(entries[e as usize].key.of(text).as_bytes())) {
                chain.pop();
            }
            if let Some(&byte) = bytes.first() {
                first_bytes[usize::from(byte >> 6)] |= 1 << (byte & 63);
            }
            let parent = chain.last().copied().unwrap_or(NO_PARENT);
            chain.push(to_u32(entries.len()));
            entries.push(Entry { key, first, parent });
        }
        KeyIndex { entries: entries.into_boxed_slice(), end, first_bytes }
    }

    /// How many distinct keys there are (key ids are below this).
    pub(super) fn key_count(&self) -> usize {
        self.entries.len()
    }

    /// True when no rule was filed here.
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// True when some non-empty key starts with `byte`.
    pub(super) fn has_key_starting_with(&self, byte: u8) -> bool {
        self.first_bytes[usize::from(byte >> 6)] & (1 << (byte & 63)) != 0
    }

    /// Calls `visit` with every key that is a prefix of `text`, longest first. Cost: one
    /// binary search, plus one step per key on the chain of the greatest key not above
    /// `text` (each step a prefix of the one before, so the chain is short).
    pub(super) fn for_each_key(&self, text: &str, find: &[u8], mut visit: impl FnMut(u32)) {
        let below = self.entries.partition_point(|e| e.key.of(text).as_bytes() <= find);
        let Some(greatest) = below.checked_sub(1) else { return };
        // A key on the chain is a prefix of the greatest key, so it is a prefix of `find`
        // exactly when it is no longer than what the two share.
        let shared = common_prefix_len(self.entries[greatest].key.of(text).as_bytes(), find);
        let mut id = to_u32(greatest);
        while id != NO_PARENT {
            let entry = &self.entries[id as usize];
            if entry.key.len as usize <= shared {
                visit(id);
            }
            id = entry.parent;
        }
    }

    /// The positions in the group of the rules filed under a key, in line order.
    pub(super) fn rules_of(&self, id: u32) -> Range<usize> {
        let start = self.entries[id as usize].first;
        let end = self.entries.get(id as usize + 1).map_or(self.end, |next| next.first);
        start as usize..end as usize
    }

    /// The bytes this index holds on the heap, its one allocation's overhead included.
    pub(super) fn heap_bytes(&self) -> usize {
        crate::policy::weight::allocation(std::mem::size_of_val(&*self.entries))
    }
}

fn common_prefix_len(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An index over `keys` (each a rule), with the text buffer holding them.
    fn index(keys: &[&str]) -> (String, KeyIndex, Vec<usize>) {
        let mut text = String::new();
        let mut order: Vec<usize> = (0..keys.len()).collect();
        order.sort_by_key(|&i| (keys[i], i));
        let mut keyed = Vec::new();
        for (position, &i) in order.iter().enumerate() {
            let key = Span::push(&mut text, keys[i]);
            keyed.push((key, to_u32(position)));
        }
        let index = KeyIndex::build(&text, &keyed, to_u32(keys.len()));
        (text, index, order)
    }

    /// The rules (as indexes into the keys given) whose key is a prefix of `path`.
    fn candidates((text, index, order): &(String, KeyIndex, Vec<usize>), path: &str) -> Vec<usize> {
        let mut out = Vec::new();
        index.for_each_key(text, path.as_bytes(), |id| out.extend(index.rules_of(id).map(|p| order[p])));
        out
    }

    #[test]
    fn finds_every_prefix_of_the_path_and_nothing_else() {
        let built = index(&["/a/b", "/a", "", "/a/bc", "/ab", "/x", "/a/b", "/a/"]);
        assert_eq!(candidates(&built, "/a/bcd"), vec![3, 0, 6, 7, 1, 2]);
        assert_eq!(candidates(&built, "/a"), vec![1, 2]);
        assert_eq!(candidates(&built, "/abc"), vec![4, 1, 2]);
        assert_eq!(candidates(&built, "/y"), vec![2]);
        assert_eq!(candidates(&built, ""), vec![2]);
    }

    #[test]
    fn agrees_with_a_plain_scan() {
        let prefixes: Vec<String> =
            (0..300).map(|i| format!("/{}", "ab".repeat(i % 7) + &"c".repeat(i % 3) + &(i % 5).to_string())).collect();
        let keys: Vec<&str> = prefixes.iter().map(String::as_str).collect();
        let built = index(&keys);
        for path in ["/ababc1", "/abababab", "/cc2", "/", "/ab0x", "/ababababababcc4/z", "/abab0", "/ababa"] {
            let mut got = candidates(&built, path);
            got.sort_unstable();
            let want: Vec<usize> = (0..keys.len()).filter(|&i| path.starts_with(keys[i])).collect();
            assert_eq!(got, want, "{path}");
        }
    }

    #[test]
    fn ten_thousand_rules_offer_only_the_prefixes_of_the_path() {
        let mut keys: Vec<String> = (0..10_000).map(|i| format!("/section-{}/page-{i}", i % 100)).collect();
        keys.push("/section-7/".to_owned());
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let built = index(&keys);
        assert_eq!(candidates(&built, "/section-7/page-307/x"), vec![307, 10_000]);
        assert_eq!(candidates(&built, "/section-7/page-3"), vec![10_000]);
        assert_eq!(built.1.key_count(), 10_001);
    }
}
