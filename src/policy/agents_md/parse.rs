//! The AGENTS.md text parser: CommonMark ATX headings, fenced code and HTML comments
//! skipped, `- key: value` directives, typed values and the most-restrictive merge of
//! duplicates (SEMANTICS C6–C12, C14–C15, C19–C20, C22–C27).
//!
//! Never: evaluates a request or decides whether a fetched response is a policy.

use crate::policy::Weigh;
use std::sync::Arc;

use super::glob::{Glob, Reading};
use crate::policy::Diagnostic;
use crate::policy::text::{Findings, closest, is_token, lines};

/// The highest spec version this parser knows (AGENTS-MD-SPEC-001 changelog).
const SUPPORTED_SPEC_VERSION: (u64, u64, u64) = (1, 0, 1);

/// The default identification header (§5.7).
pub(crate) const DEFAULT_AGENT_HEADER: &str = "X-Agent-Identity";

/// A value and the line that set it, as written, for reasons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Setting<T> {
    pub value: T,
    pub line: u32,
    /// The directive line as written, trimmed.
    pub text: Arc<str>,
}

impl<T> Setting<T> {
    fn new(line: u32, text: &str, value: T) -> Self {
        Setting { value, line, text: Arc::from(text) }
    }
}

/// `authentication` (§5.2), ordered from least to most strict (C10).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Authentication {
    None,
    Optional,
    Required,
}

/// One path pattern of a Restrictions list.
#[derive(Debug, Clone)]
pub(crate) struct PathRule {
    pub glob: Glob,
    pub line: u32,
    /// The key and this one pattern as written (`disallowed-paths: /admin/*`): the
    /// pattern that matched, and memory linear in the file even for long lists.
    pub text: Arc<str>,
}

/// One `- key: value` line, kept for `explain` (C25, C27).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The section name, normalised (lower case, single spaces).
    pub section: String,
    /// The key, lower case.
    pub key: String,
    /// The value as written, trimmed.
    pub value: String,
    /// 1-based line.
    pub line: u32,
}

/// A parsed policy: the settings agentgate enforces, merged (C10, C11).
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    pub site: Option<Setting<String>>,
    pub minimum_trust_level: Option<Setting<u8>>,
    pub authentication: Option<Setting<Authentication>>,
    /// Allowed Actions, one per key, merged with AND.
    pub actions: Vec<Setting<(String, bool)>>,
    pub requests_per_minute: Option<Setting<u32>>,
    pub requests_per_hour: Option<Setting<u32>>,
    pub concurrent_sessions: Option<Setting<u32>>,
    pub disallowed: Vec<PathRule>,
    pub require_approval: Vec<PathRule>,
    pub read_only: Vec<PathRule>,
    /// True when a path pattern reads differently decoded, so the lists are matched in both
    /// readings (SEMANTICS R9).
    pub has_decoded: bool,
    pub require_agent_header: Option<Setting<bool>>,
    pub agent_header_name: Option<Setting<String>>,
    pub require_disclosure: Option<Setting<bool>>,
    pub entries: Vec<Entry>,
}

impl Policy {
    /// Whether an action is allowed, and the line that says so (`None`: the default,
    /// `read-content` true and everything else false, §5.3 and C18).
    pub(crate) fn action(&self, key: &str) -> (bool, Option<&Setting<(String, bool)>>) {
        match self.actions.iter().find(|s| s.value.0 == key) {
            Some(setting) => (setting.value.1, Some(setting)),
            None => (key == "read-content", None),
        }
    }
}

/// What parsing found: the policy (when the file has `## Identity`) and every finding.
pub(crate) struct Parsed {
    pub policy: Option<Policy>,
    pub findings: Findings,
}

/// The sections agentgate knows (§5), by normalised name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Identity,
    Trust,
    Actions,
    RateLimits,
    DataHandling,
    Restrictions,
    AgentIdentification,
    /// `x-` or unknown: entries kept, nothing enforced.
    Other,
}

const SECTIONS: [(&str, Section); 7] = [
    ("identity", Section::Identity),
    ("trust requirements", Section::Trust),
    ("allowed actions", Section::Actions),
    ("rate limits", Section::RateLimits),
    ("data handling", Section::DataHandling),
    ("restrictions", Section::Restrictions),
    ("agent identification", Section::AgentIdentification),
];

/// Parses decoded text. `advice` is lint's parse: it adds the lint-only findings (C6
/// title, C14 subtree) and keeps every finding.
pub(crate) fn parse(text: &str, advice: bool) -> Parsed {
    let findings = if advice { Findings::all() } else { Findings::default() };
    let mut p = Parser { advice, findings, ..Parser::default() };
    for line in lines(text.as_bytes()) {
        // Lines split at ASCII CR/LF of valid UTF-8 are valid UTF-8.
        let content = std::str::from_utf8(line.bytes).unwrap_or_default();
        p.line(line.number, content);
    }
    if advice && !p.title_seen {
        p.findings.push(Diagnostic::warning(
            Some(1),
            "missing-title",
            "the file does not start with `# AGENTS.md`; add it as the first line (optional, §4.3)",
        ));
    }
    let policy = p.identity_line.map(|identity_line| {
        if p.policy.site.is_none() {
            p.findings.push(Diagnostic::error(
                Some(identity_line),
                "identity-site-missing",
                "`## Identity` has no `- site: <domain>`; add the site's domain".to_string(),
            ));
        }
        p.policy
    });
    Parsed { policy, findings: p.findings }
}

#[derive(Default)]
struct Parser {
    advice: bool,
    findings: Findings,
    policy: Policy,
    /// The open code fence: its character and length.
    fence: Option<(u8, usize)>,
    in_html_comment: bool,
    section: Option<(Section, String)>,
    seen_sections: Vec<String>,
    /// (section, key) pairs seen, for `duplicate-key`.
    seen_keys: Vec<(String, String)>,
    identity_line: Option<u32>,
    title_seen: bool,
}

impl Parser {
    fn warn(&mut self, line: u32, code: impl Into<String>, message: String) {
        self.findings.push(Diagnostic::warning(Some(line), code, message.to_string()));
    }

    fn line(&mut self, number: u32, content: &str) {
        if let Some(fence) = self.fence {
            if closes_fence(content, fence) {
                self.fence = None;
            }
            return;
        }
        if self.in_html_comment {
            self.in_html_comment = !content.contains("-->");
            return;
        }
        if let Some(fence) = opens_fence(content) {
            self.fence = Some(fence);
            return;
        }
        let trimmed = content.trim_matches([' ', '\t']);
        if let Some(rest) = trimmed.strip_prefix("<!--") {
            self.in_html_comment = !rest.contains("-->");
            return;
        }
        if let Some((level, name, closing)) = atx_heading(content) {
            if level == 2 {
                self.heading(number, name, closing);
            } else if level == 1 && self.section.is_none() && name.eq_ignore_ascii_case("agents.md") {
                self.title_seen = true;
            }
            return;
        }
        if trimmed.starts_with('#') || self.section.is_none() {
            return;
        }
        if let Some(directive) = trimmed.strip_prefix("- ") {
            match directive.split_once(':') {
                Some((key, value)) => self.directive(number, key, value.trim(), trimmed),
                None if self.advice => self.warn(
                    number,
                    "directive-without-colon",
                    format!("`{trimmed}` has no `:`; write `- key: value`"),
                ),
                None => {}
            }
        } else if (trimmed.starts_with("* ") || trimmed.starts_with("+ ")) && trimmed.contains(':') {
            let fixed = format!("- {}", &trimmed[2..]);
            self.warn(number, "bullet-not-hyphen", format!("`{trimmed}` is ignored; directives use `-`: `{fixed}`"));
        }
    }

    fn heading(&mut self, number: u32, name: String, closing: bool) {
        if closing {
            self.warn(
                number,
                "heading-closing-hashes",
                format!("closing `#`s on `## {name}` are dropped; write `## {name}`"),
            );
        }
        let known = SECTIONS.iter().find(|(n, _)| *n == name).map(|&(_, s)| s);
        let section = known.unwrap_or(Section::Other);
        if known.is_some() && self.seen_sections.contains(&name) {
            self.warn(number, "duplicate-section", format!("`## {name}` appears again; its entries are merged"));
        }
        if section == Section::Identity && self.identity_line.is_none() {
            self.identity_line = Some(number);
        }
        if known.is_none()
            && !name.starts_with("x-")
            && let Some(near) = closest(&name, SECTIONS.iter().map(|(n, _)| *n))
        {
            self.warn(
                number,
                "unknown-section",
                format!("unknown section `## {name}` is ignored; did you mean `## {near}`?"),
            );
        }
        self.seen_sections.push(name.clone());
        self.section = Some((section, name));
    }

    fn directive(&mut self, number: u32, raw_key: &str, value: &str, text: &str) {
        let Some((section, section_name)) = self.section.clone() else { return };
        let key = raw_key.trim().to_ascii_lowercase();
        if key.is_empty() || value.is_empty() {
            return;
        }
        if !key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') {
            self.warn(number, "key-invalid-chars", format!("key `{key}` should be letters, digits and `-` only"));
        }
        let pair = (section_name.clone(), key.clone());
        if self.seen_keys.contains(&pair) {
            self.warn(
                number,
                "duplicate-key",
                format!("`{key}` is set again in `## {section_name}`; the most restrictive value applies"),
            );
        } else {
            self.seen_keys.push(pair);
        }
        self.policy.entries.push(Entry { section: section_name, key: key.clone(), value: value.into(), line: number });
        match (section, key.as_str()) {
            (Section::Identity, "site") => self.policy.site = Some(Setting::new(number, text, value.to_owned())),
            (Section::Identity, "spec-version") => self.spec_version(number, value),
            (Section::Trust, "minimum-trust-level") => {
                if let Some(mut level) = self.integer(number, &key, value) {
                    if level > 5 {
                        self.warn(number, "trust-level-clamped", format!("minimum-trust-level {level} is read as 5"));
                        level = 5;
                    }
                    let level = u8::try_from(level).unwrap_or(5);
                    if self.policy.minimum_trust_level.as_ref().is_none_or(|s| level > s.value) {
                        self.policy.minimum_trust_level = Some(Setting::new(number, text, level));
                    }
                }
            }
            (Section::Trust, "authentication") => {
                let auth = match value.to_ascii_lowercase().as_str() {
                    "required" => Authentication::Required,
                    "optional" => Authentication::Optional,
                    "none" => Authentication::None,
                    _ => {
                        self.warn(
                            number,
                            "authentication-invalid",
                            format!("authentication `{value}` is read as `none`; use required, optional or none"),
                        );
                        Authentication::None
                    }
                };
                if self.policy.authentication.as_ref().is_none_or(|s| auth > s.value) {
                    self.policy.authentication = Some(Setting::new(number, text, auth));
                }
            }
            (Section::Actions, _) => {
                if let Some(allowed) = self.boolean(number, &key, value) {
                    match self.policy.actions.iter_mut().find(|s| s.value.0 == key) {
                        Some(existing) if existing.value.1 && !allowed => {
                            *existing = Setting::new(number, text, (key.clone(), false))
                        }
                        Some(_) => {}
                        None => self.policy.actions.push(Setting::new(number, text, (key.clone(), allowed))),
                    }
                }
            }
            (Section::RateLimits, "requests-per-minute" | "requests-per-hour" | "concurrent-sessions") => {
                let Some(n) = self.integer(number, &key, value) else { return };
                let slot = match key.as_str() {
                    "requests-per-minute" => &mut self.policy.requests_per_minute,
                    "requests-per-hour" => &mut self.policy.requests_per_hour,
                    _ => &mut self.policy.concurrent_sessions,
                };
                if n > 0 && slot.as_ref().is_none_or(|s| n < s.value) {
                    *slot = Some(Setting::new(number, text, n));
                }
            }
            (Section::Restrictions, "disallowed-paths" | "require-human-approval" | "read-only-paths") => {
                let rules = self.path_list(number, &key, value);
                let list = match key.as_str() {
                    "disallowed-paths" => &mut self.policy.disallowed,
                    "require-human-approval" => &mut self.policy.require_approval,
                    _ => &mut self.policy.read_only,
                };
                self.policy.has_decoded |= rules.iter().any(|rule| rule.glob.has_decoded());
                list.extend(rules);
            }
            (Section::AgentIdentification, "require-agent-header" | "require-disclosure") => {
                if let Some(flag) = self.boolean(number, &key, value) {
                    let slot = if key == "require-agent-header" {
                        &mut self.policy.require_agent_header
                    } else {
                        &mut self.policy.require_disclosure
                    };
                    // Most restrictive (C10): a requirement, once stated, stays.
                    if slot.as_ref().is_none_or(|s| flag && !s.value) {
                        *slot = Some(Setting::new(number, text, flag));
                    }
                }
            }
            (Section::AgentIdentification, "agent-header-name") => {
                if is_token(value) {
                    self.policy.agent_header_name = Some(Setting::new(number, text, value.to_owned()));
                } else {
                    self.warn(
                        number,
                        "agent-header-name-invalid",
                        format!("`{value}` is not an HTTP header name; {DEFAULT_AGENT_HEADER} is used"),
                    );
                }
            }
            _ => {}
        }
    }

    /// C19: `true/yes/1/on`, `false/no/0/off`; anything else warns and is ignored, so the
    /// key's default applies.
    fn boolean(&mut self, number: u32, key: &str, value: &str) -> Option<bool> {
        match value.to_ascii_lowercase().as_str() {
            "true" | "yes" | "1" | "on" => Some(true),
            "false" | "no" | "0" | "off" => Some(false),
            _ => {
                self.warn(
                    number,
                    format!("boolean-invalid:{key}"),
                    format!("{key}: `{value}` is not a boolean (true/false/yes/no/on/off/1/0); the default applies"),
                );
                None
            }
        }
    }

    /// C20: `^[0-9]+$` up to `u32::MAX`; anything else warns and is omitted.
    fn integer(&mut self, number: u32, key: &str, value: &str) -> Option<u32> {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            self.warn(
                number,
                format!("integer-invalid:{key}"),
                format!("{key}: `{value}` is not a whole number; the setting is ignored"),
            );
            return None;
        }
        match value.parse::<u32>() {
            Ok(n) => Some(n),
            Err(_) => {
                self.warn(number, format!("integer-too-large:{key}"), format!("{key}: {value} is too large; ignored"));
                None
            }
        }
    }

    /// A comma-separated list of path patterns (§6.5, C14, C15).
    fn path_list(&mut self, number: u32, key: &str, value: &str) -> Vec<PathRule> {
        let mut rules = Vec::new();
        for pattern in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (glob, reading) = Glob::new(pattern);
            match reading {
                Reading::LastSegment => self.warn(
                    number,
                    format!("pattern-without-leading-slash:{pattern}"),
                    format!("`{pattern}` does not start with `/`; it is matched against the last path segment"),
                ),
                Reading::TrailingStarSubtree if self.advice => self.warn(
                    number,
                    "trailing-star-subtree",
                    format!("trailing /* treated as subtree: `{pattern}` covers every path below it"),
                ),
                Reading::RootOnly if self.advice => self.warn(
                    number,
                    "root-only-pattern",
                    "`/` matches only the home page; write `/**` for the whole site".into(),
                ),
                _ => {}
            }
            rules.push(PathRule { glob, line: number, text: Arc::from(format!("{key}: {pattern}")) });
        }
        rules
    }

    /// §13.2: a newer version warns (C25); the file is parsed anyway.
    fn spec_version(&mut self, number: u32, value: &str) {
        let mut parts = value.split('.').map(|p| p.parse::<u64>().ok());
        let version = (parts.next().flatten(), parts.next().unwrap_or(Some(0)), parts.next().unwrap_or(Some(0)));
        match version {
            (Some(major), Some(minor), Some(patch)) if parts.next().is_none() => {
                if (major, minor, patch) > SUPPORTED_SPEC_VERSION {
                    self.warn(
                        number,
                        "spec-version-newer",
                        format!("spec-version {value} is newer than 1.0.1, which agentgate knows; parsed anyway"),
                    );
                }
            }
            _ => self.warn(number, "spec-version-invalid", format!("spec-version `{value}` is not like 1.0.0")),
        }
    }
}

/// An ATX heading (C7): up to 3 spaces, 1–6 `#`, then SP/HTAB or the end; the optional
/// closing `#`s dropped, whitespace collapsed, lower case. Returns (level, name, whether
/// closing `#`s were dropped).
fn atx_heading(line: &str) -> Option<(usize, String, bool)> {
    let indent = line.bytes().take_while(|&b| b == b' ').count();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let level = rest.bytes().take_while(|&b| b == b'#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let rest = &rest[level..];
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let mut text = rest.trim_matches([' ', '\t']);
    let mut closing = false;
    let without = text.trim_end_matches('#');
    if without.len() < text.len() && (without.is_empty() || without.ends_with([' ', '\t'])) {
        text = without.trim_end_matches([' ', '\t']);
        closing = true;
    }
    let name = text.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    Some((level, name, closing))
}

/// A fence opening (C8): up to 3 spaces, then 3 or more backticks or tildes.
fn opens_fence(line: &str) -> Option<(u8, usize)> {
    let indent = line.bytes().take_while(|&b| b == b' ').count();
    let rest = line.as_bytes().get(indent..)?;
    let &ch = rest.first()?;
    let len = rest.iter().take_while(|&&b| b == ch).count();
    (indent <= 3 && (ch == b'`' || ch == b'~') && len >= 3).then_some((ch, len))
}

/// Whether a line closes the open fence: the same character, at least as many, nothing
/// after but blanks.
fn closes_fence(line: &str, (ch, len): (u8, usize)) -> bool {
    opens_fence(line).is_some_and(|(c, n)| {
        c == ch && n >= len && line.trim_start_matches(' ')[n..].trim_matches([' ', '\t']).is_empty()
    })
}

impl<T: Weigh> Weigh for Setting<T> {
    fn heap_bytes(&self) -> usize {
        self.value.heap_bytes() + self.text.heap_bytes()
    }
}

impl Weigh for Authentication {
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl Weigh for PathRule {
    fn heap_bytes(&self) -> usize {
        self.glob.heap_bytes() + self.text.heap_bytes()
    }
}

impl Weigh for Entry {
    fn heap_bytes(&self) -> usize {
        self.section.heap_bytes() + self.key.heap_bytes() + self.value.heap_bytes()
    }
}

impl Weigh for Policy {
    fn heap_bytes(&self) -> usize {
        self.site.heap_bytes()
            + self.minimum_trust_level.heap_bytes()
            + self.authentication.heap_bytes()
            + self.actions.heap_bytes()
            + self.requests_per_minute.heap_bytes()
            + self.requests_per_hour.heap_bytes()
            + self.concurrent_sessions.heap_bytes()
            + self.disallowed.heap_bytes()
            + self.require_approval.heap_bytes()
            + self.read_only.heap_bytes()
            + self.require_agent_header.heap_bytes()
            + self.agent_header_name.heap_bytes()
            + self.require_disclosure.heap_bytes()
            + self.entries.heap_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (level, name, closing hashes dropped)
    type Heading<'a> = Option<(usize, &'a str, bool)>;

    #[test]
    fn semantics_c7_atx_headings() {
        let table: &[(&str, Heading<'_>)] = &[
            ("## Identity", Some((2, "identity", false))),
            ("## Identity ##", Some((2, "identity", true))),
            ("   ## Rate   Limits", Some((2, "rate limits", false))),
            ("    ## code", None),
            ("##Identity", None),
            ("##", Some((2, "", false))),
            ("## C#", Some((2, "c#", false))),
            ("### Notes", Some((3, "notes", false))),
            ("####### seven", None),
            ("#\tAGENTS.md", Some((1, "agents.md", false))),
        ];
        for (line, want) in table {
            let got = atx_heading(line);
            assert_eq!(got.as_ref().map(|(l, n, c)| (*l, n.as_str(), *c)), *want, "{line:?}");
        }
    }

    #[test]
    fn semantics_c8_fences() {
        assert_eq!(opens_fence("```markdown"), Some((b'`', 3)));
        assert_eq!(opens_fence("   ~~~~"), Some((b'~', 4)));
        assert_eq!(opens_fence("    ```"), None);
        assert!(closes_fence("````", (b'`', 3)));
        assert!(!closes_fence("```rust", (b'`', 3)));
        assert!(!closes_fence("~~~", (b'`', 3)));
    }

    #[test]
    fn semantics_c27_near_misses() {
        assert_eq!(closest("rate limit", SECTIONS.iter().map(|(n, _)| *n)), Some("rate limits"));
        assert_eq!(closest("identiy", SECTIONS.iter().map(|(n, _)| *n)), Some("identity"));
        assert_eq!(closest("build", SECTIONS.iter().map(|(n, _)| *n)), None);
    }
}
