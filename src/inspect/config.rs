//! `[inspect]`: which requests are inspected (`hosts`, `agents`), the bound on a body read
//! for it (`max_body`), what a body that cannot be read gets (`on_unreadable`), and the
//! operator's own detectors (`[[inspect.patterns]]`, compiled when the file is read).
//!
//! Never: reads a request (`super` does), or decides anything.

use serde::Deserialize;

use super::detect::built_in_names;
use super::pattern::PatternConfig;
use crate::net::{canonical_hosts, is_host_pattern};
use crate::policy::operator::host_matches;

/// The default `max_body`: 1 MiB, enough for the JSON and form bodies agents send.
const DEFAULT_MAX_BODY: u64 = 1024 * 1024;
/// The largest `max_body` accepted: every inspected request in flight may hold this much.
const MAX_MAX_BODY: u64 = 16 * 1024 * 1024;

/// `[inspect]`: inspection of what agents send (docs/inspect.md). Off by default: with
/// neither `hosts` nor `agents`, nothing is read.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InspectConfig {
    /// Host patterns whose requests are inspected: `example.com`, `*.example.com`, or `*`
    /// (every intercepted or plain-HTTP host). Empty: every host, when `agents` is set.
    /// Read in canonical form (`canonical_hosts`), so a request's check allocates nothing;
    /// set in code, write them canonical too (`crate::net::canonical_pattern`).
    #[serde(deserialize_with = "canonical_hosts")]
    pub hosts: Vec<String>,
    /// Agent ids whose requests are inspected. Empty: every agent, when `hosts` is set.
    pub agents: Vec<String>,
    /// The most body bytes read (after gzip is undone) before a request is decided; a larger
    /// body follows `on_unreadable` (default 1 MiB, at most 16 MiB).
    pub max_body: u64,
    /// What a body over `max_body`, or one that cannot be decoded, gets (default `refuse`).
    pub on_unreadable: OnUnreadable,
    /// The operator's own detectors, each a name and a regular expression.
    pub patterns: Vec<PatternConfig>,
}

impl Default for InspectConfig {
    fn default() -> Self {
        InspectConfig {
            hosts: Vec::new(),
            agents: Vec::new(),
            max_body: DEFAULT_MAX_BODY,
            on_unreadable: OnUnreadable::Refuse,
            patterns: Vec::new(),
        }
    }
}

/// What a request whose body cannot be inspected gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnUnreadable {
    /// `403` (`inspect.unreadable`), as a secret would be: fail closed.
    Refuse,
    /// Forwarded, its record saying what was not inspected.
    Allow,
}

impl InspectConfig {
    /// Whether a request from `agent` to `host` (canonical) is inspected.
    pub fn applies(&self, host: &str, agent: &str) -> bool {
        if self.hosts.is_empty() && self.agents.is_empty() {
            return false;
        }
        let host_listed = self.hosts.is_empty() || self.hosts.iter().any(|p| host_matches(p, host));
        host_listed && (self.agents.is_empty() || self.agents.iter().any(|a| a == agent))
    }

    /// Problems in `[inspect]` on its own, each naming the key, its value and the fix (the
    /// agent ids and passthrough hosts are checked across tables, in `crate::config`).
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        for pattern in &self.hosts {
            if pattern != "*" && !is_host_pattern(pattern) {
                problems.push(format!(
                    "[inspect] hosts entry {pattern:?}: not a host name, `*.suffix` or `*`; write e.g. \"paste.example\" \
                     or \"*.example.com\" (no scheme, port, path or CIDR)"
                ));
            }
        }
        if self.max_body == 0 || self.max_body > MAX_MAX_BODY {
            problems.push(format!(
                "[inspect] max_body = {}: must be from 1 to {MAX_MAX_BODY} (16 MiB: each inspected request holds its \
                 body in memory); the default is {DEFAULT_MAX_BODY} (1 MiB)",
                self.max_body
            ));
        }
        for (i, pattern) in self.patterns.iter().enumerate() {
            let name = &pattern.name;
            let well_formed = !name.is_empty()
                && name.len() <= 64
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
            if !well_formed {
                problems.push(format!(
                    "[[inspect.patterns]] #{} name = {name:?}: must be 1 to 64 of letters, digits, `_`, `-`, `.`; \
                     write e.g. \"internal_token\"",
                    i + 1
                ));
            }
            if built_in_names().any(|built_in| built_in == name) {
                problems.push(format!(
                    "[[inspect.patterns]] #{} name = {name:?}: a built-in detector has this name; choose another",
                    i + 1
                ));
            }
            if self.patterns[..i].iter().any(|earlier| &earlier.name == name) {
                problems.push(format!(
                    "[[inspect.patterns]] #{} name = {name:?}: an earlier pattern has this name; give each its own",
                    i + 1
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(hosts: &[&str], agents: &[&str]) -> InspectConfig {
        InspectConfig {
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            agents: agents.iter().map(|a| (*a).to_owned()).collect(),
            ..InspectConfig::default()
        }
    }

    #[test]
    fn hosts_are_read_in_canonical_form_so_an_idn_or_an_address_spelling_matches() {
        let text = "[inspect]\nhosts = [\"*.Bücher.Example.\", \"0x7f.1\", \"not a host\"]\n";
        let config: InspectConfig = toml::from_str::<toml::Table>(text)
            .ok()
            .and_then(|t| t.get("inspect").cloned())
            .and_then(|v| v.try_into().ok())
            .expect("the table parses");
        assert_eq!(config.hosts, ["*.xn--bcher-kva.example", "127.0.0.1", "not a host"]);
        assert!(config.applies("shop.xn--bcher-kva.example", "a") && config.applies("127.0.0.1", "a"));
        let mut problems = Vec::new();
        config.problems(&mut problems);
        assert!(problems.len() == 1 && problems[0].contains("\"not a host\""), "{problems:?}");
    }

    #[test]
    fn off_by_default_and_on_for_the_listed_hosts_and_agents() {
        assert!(!InspectConfig::default().applies("example.com", "a"));
        let hosts = with(&["*.example.com", "Paste.Example"], &[]);
        assert!(hosts.applies("api.example.com", "a") && hosts.applies("paste.example", "b"));
        assert!(!hosts.applies("example.com", "a"));
        let agents = with(&[], &["sbx"]);
        assert!(agents.applies("anything.test", "sbx") && !agents.applies("anything.test", "other"));
        let both = with(&["*"], &["sbx"]);
        assert!(both.applies("x.test", "sbx") && !both.applies("x.test", "other"));
    }

    #[test]
    fn bad_hosts_sizes_and_pattern_names_are_problems() {
        let mut config = with(&["10.0.0.0/8", "https://x.test/"], &[]);
        config.max_body = 0;
        config.patterns = vec![
            PatternConfig::new("jwt", "x").expect("compiles"),
            PatternConfig::new("bad name", "x").expect("compiles"),
            PatternConfig::new("mine", "x").expect("compiles"),
            PatternConfig::new("mine", "y").expect("compiles"),
        ];
        let mut problems = Vec::new();
        config.problems(&mut problems);
        let text = problems.join("\n");
        assert_eq!(problems.len(), 6, "{text}");
        for expected in [
            "hosts entry \"10.0.0.0/8\"",
            "hosts entry \"https://x.test/\"",
            "max_body = 0",
            "a built-in detector has this name",
            "\"bad name\"",
            "an earlier pattern has this name",
        ] {
            assert!(text.contains(expected), "{expected}: {text}");
        }
        config.max_body = MAX_MAX_BODY + 1;
        problems.clear();
        config.problems(&mut problems);
        assert!(problems.iter().any(|p| p.contains("max_body = 16777217")), "{problems:?}");
    }

    #[test]
    fn a_pattern_that_does_not_compile_names_itself_and_the_fix() {
        let error = PatternConfig::new("broken", "itok_[").map(|_| ()).expect_err("does not compile");
        let text = error.to_string();
        assert!(text.contains("\"broken\"") && text.contains("regex does not compile"), "{text}");
    }
}
