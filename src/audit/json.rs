//! One JSON object written straight into a `String`: what a decision-log line is encoded
//! with. Keys are the field-name constants, written as they are; a string value is checked
//! whole for the three things JSON escapes (`"`, `\`, control characters) with a check that
//! vectorises, and only a string that has one goes through serde_json's escaping, so every
//! line is byte for byte what serde_json writes (serde_json's byte-at-a-time escape of every
//! key and value was a sixth of a request's instructions; `bench/RESULTS.md`).
//!
//! Never: parses JSON, reorders or drops members, or writes a value it was not given.

use std::net::IpAddr;

/// An object being written into a `String`; [`Object::end`] closes it.
pub(super) struct Object<'a> {
    out: &'a mut String,
    empty: bool,
}

impl<'a> Object<'a> {
    /// Opens an object at the end of `out`.
    pub(super) fn new(out: &'a mut String) -> Self {
        out.push('{');
        Object { out, empty: true }
    }

    /// Starts member `key`: a field-name constant, which needs no escaping.
    fn key(&mut self, key: &str) -> &mut String {
        debug_assert!(is_plain(key), "field names are plain ASCII: {key:?}");
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        self.out.push('"');
        self.out.push_str(key);
        self.out.push_str("\":");
        self.out
    }

    /// `"key":"value"`, escaped as JSON requires.
    pub(super) fn str(&mut self, key: &str, value: &str) {
        string(self.key(key), value);
    }

    /// `"key":value` for a number (itoa: no formatter in between).
    pub(super) fn u64(&mut self, key: &str, value: u64) {
        self.key(key).push_str(itoa::Buffer::new().format(value));
    }

    /// `"key":"address"`, without the formatter for IPv4 (`crate::net::host::push_ip`).
    pub(super) fn ip(&mut self, key: &str, value: IpAddr) {
        let out = self.key(key);
        out.push('"');
        crate::net::host::push_ip(out, value);
        out.push('"');
    }

    /// `"key":true`.
    pub(super) fn true_(&mut self, key: &str) {
        self.key(key).push_str("true");
    }

    /// `"key":[…]`, each item written by `each` into the line.
    pub(super) fn array<T>(
        &mut self,
        key: &str,
        items: impl IntoIterator<Item = T>,
        mut each: impl FnMut(&mut String, T),
    ) {
        let out = self.key(key);
        out.push('[');
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            each(out, item);
        }
        out.push(']');
    }

    /// Closes the object.
    pub(super) fn end(self) {
        self.out.push('}');
    }
}

/// `value` as a JSON string at the end of `out`.
pub(super) fn string(out: &mut String, value: &str) {
    if is_plain(value) {
        out.push('"');
        out.push_str(value);
        out.push('"');
    } else {
        // Rare (a quote or a control character in a URL, a rule or an error): serde_json's
        // escaping, so the line is what it always was.
        out.push_str(&serde_json::to_string(value).expect("a str always serializes to JSON"));
    }
}

/// True when JSON writes `text` as it is: no `"`, no `\`, no control character. The check
/// does not stop at the first hit, so the compiler turns it into a vector loop.
fn is_plain(text: &str) -> bool {
    !text.bytes().fold(false, |found, byte| found | (byte < 0x20) | (byte == b'"') | (byte == b'\\'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_written_as_serde_json_writes_them() {
        let cases = [
            "",
            "plain /path?q=1",
            "quote \" inside",
            "back\\slash",
            "tab\tnew\nline\r",
            "\u{1}\u{1f}\u{7f}",
            "é ✓ 🦀",
        ];
        for case in cases {
            let mut out = String::new();
            string(&mut out, case);
            assert_eq!(out, serde_json::to_string(case).unwrap(), "{case:?}");
        }
    }

    #[test]
    fn an_object_reads_back_with_every_member_in_order() {
        let mut out = String::new();
        let mut object = Object::new(&mut out);
        object.str("a.b", "x\"y");
        object.ip("ip", std::net::Ipv4Addr::LOCALHOST.into());
        object.ip("v4", "10.200.0.255".parse().unwrap());
        object.ip("v6", "::ffff:10.0.0.1".parse().unwrap());
        object.u64("n", u64::MAX);
        object.true_("t");
        object.array("list", ["p", "q"], string);
        object.array("none", Vec::<&str>::new(), string);
        object.end();
        assert_eq!(
            out,
            r#"{"a.b":"x\"y","ip":"127.0.0.1","v4":"10.200.0.255","v6":"::ffff:10.0.0.1","n":18446744073709551615,"t":true,"list":["p","q"],"none":[]}"#
        );
        let value: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(value["a.b"], "x\"y");
    }
}
