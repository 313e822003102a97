//! Reads robots.txt bytes into groups (RFC 9309 §2.1–2.2), the lines the matcher does not
//! use, and line-numbered findings. Tolerant the way Google's parser is where that is
//! harmless (see `docs/robots.md`): a missing `:`, common misspellings of the keys, a
//! partial BOM, a NUL byte ending a line. Never fails and never panics on any bytes.
//!
//! Never: evaluates a request, or decides what a fetch status means.

use std::sync::Arc;

use super::group::{AgentLine, Group, Rule};
use super::{CrawlDelay, MAX_BYTES, MAX_CRAWL_DELAY_MS, OtherLine, UsageKey, UsageLine};
use crate::policy::Diagnostic;
use crate::policy::pattern::Pattern;
use crate::policy::text::{Findings, closest, decode, lines, split_bom};
use crate::policy::usage::robots_rules::{split_content_usage, statement};

/// Lines longer than this are truncated by Google's parser (8 × 2083 − 1 bytes); agentgate
/// keeps them whole and only warns, since Google may read such a rule differently.
const GOOGLE_MAX_LINE: usize = 16_663;

/// Keys RFC 9309 leaves to "other records" that are common and need no warning.
const KNOWN_OTHER_KEYS: [&str; 8] =
    ["sitemap", "crawl-delay", "host", "clean-param", "content-usage", "content-signal", "request-rate", "visit-time"];

/// Misspellings Google's parser accepts, and the key each stands for.
const ACCEPTED_TYPOS: [(&str, Key); 8] = [
    ("useragent", Key::UserAgent),
    ("user agent", Key::UserAgent),
    ("dissallow", Key::Disallow),
    ("dissalow", Key::Disallow),
    ("disalow", Key::Disallow),
    ("diasllow", Key::Disallow),
    ("disallaw", Key::Disallow),
    ("site-map", Key::Other),
];

/// What a robots.txt body parses into.
#[derive(Debug, Clone, Default)]
pub(super) struct ParsedFile {
    /// The text buffer the rules point into.
    pub(super) text: String,
    pub(super) groups: Vec<Group>,
    pub(super) other_lines: Vec<OtherLine>,
    pub(super) crawl_delays: Vec<CrawlDelay>,
    pub(super) usage_lines: Vec<UsageLine>,
    pub(super) findings: Findings,
    /// True when some rule's pattern escapes an unreserved character, so the file reads
    /// differently decoded (SEMANTICS R9).
    pub(super) has_decoded: bool,
}

/// The directive keys that mean something to the matcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    UserAgent,
    Allow,
    Disallow,
    Other,
}

/// Parses a body (the bytes served, possibly over the cap), collecting findings into
/// `findings` (bounded for a report, all of them for lint).
pub(super) fn parse(body: &[u8], over_cap: bool, findings: Findings) -> ParsedFile {
    let mut parser = Parser { file: ParsedFile { findings, ..ParsedFile::default() } };
    let text = if over_cap || body.len() > MAX_BYTES {
        let kept = within_cap(body);
        parser.file.findings.push(Diagnostic::warning(
            None,
            "over-cap",
            format!(
                "robots.txt is larger than {MAX_BYTES} bytes (500 KiB); only its first {} bytes (whole lines) are \
                 read (RFC 9309 §2.5): move the rules that matter to the top or shrink the file",
                kept.len()
            ),
        ));
        kept
    } else {
        body
    };
    // Google's parser skips a UTF-8 byte order mark, even a partial one.
    for line in lines(split_bom(text, true).1) {
        parser.line(line.number, line.bytes);
    }
    for group in &mut parser.file.groups {
        group.build_index(&parser.file.text);
    }
    parser.file
}

/// The first `MAX_BYTES` bytes, without a last line the cap cut in two (half a rule could
/// widen or narrow it).
fn within_cap(body: &[u8]) -> &[u8] {
    let capped = &body[..body.len().min(MAX_BYTES)];
    match capped.iter().rposition(|&b| b == b'\n' || b == b'\r') {
        Some(end) => &capped[..=end],
        None => &[],
    }
}

/// RFC 9309 WS, plus the vertical tab and form feed Google also trims.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | 0x0B | 0x0C)
}

fn trim_ws(bytes: &[u8]) -> &[u8] {
    let start = bytes.iter().position(|&b| !is_ws(b)).unwrap_or(bytes.len());
    let end = bytes.iter().rposition(|&b| !is_ws(b)).map_or(start, |e| e + 1);
    &bytes[start..end]
}

/// Text for display: invalid UTF-8 replaced by U+FFFD.
fn display(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Splits a trimmed, comment-free line into key and value. `Some((key, value, true))`
/// when the `:` was missing and whitespace separated exactly two words (Google accepts
/// `disallow /`); `None` when the line is not a directive at all.
fn split_directive(content: &[u8]) -> Option<(&[u8], &[u8], bool)> {
    let (key, value, missing_colon) = match content.iter().position(|&b| b == b':') {
        Some(colon) => (trim_ws(&content[..colon]), trim_ws(&content[colon + 1..]), false),
        None => {
            let gap = content.iter().position(|&b| is_ws(b))?;
            let value = trim_ws(&content[gap..]);
            if value.iter().any(|&b| is_ws(b)) {
                return None;
            }
            (&content[..gap], value, true)
        }
    };
    (!key.is_empty()).then_some((key, value, missing_colon))
}

/// The key a directive stands for, and the correct spelling when it was a misspelling.
fn classify(key: &[u8]) -> (Key, Option<&'static str>) {
    let lower = key.to_ascii_lowercase();
    match lower.as_slice() {
        b"user-agent" => (Key::UserAgent, None),
        b"allow" => (Key::Allow, None),
        b"disallow" => (Key::Disallow, None),
        _ => match ACCEPTED_TYPOS.iter().find(|(typo, _)| typo.as_bytes() == lower) {
            Some((_, Key::UserAgent)) => (Key::UserAgent, Some("user-agent")),
            Some((_, Key::Disallow)) => (Key::Disallow, Some("disallow")),
            Some((_, _)) => (Key::Other, Some("sitemap")),
            None => (Key::Other, None),
        },
    }
}

/// The product token a user-agent value stands for: the first word, without a
/// `/version` (Google cuts `Foo Bar` to `Foo` too; RFC 9309 tokens are one word).
fn product_token(value: &str) -> &str {
    let word = value.split(|c: char| c.is_ascii_whitespace()).next().unwrap_or(value);
    if word.starts_with('*') {
        return word;
    }
    word.split('/').next().unwrap_or(word)
}

/// A `Crawl-delay` value in milliseconds: seconds as digits with an optional fraction
/// (`2`, `0.5`, `.5`, `1.`), digits past the millisecond dropped; huge values saturate.
/// `None` for anything else: empty, negative, signs, exponents, units.
fn delay_millis(value: &str) -> Option<u64> {
    let (whole, fraction) = value.split_once('.').unwrap_or((value, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
        return None;
    }
    // Only digits are left, so parsing fails only on overflow.
    let seconds = if whole.is_empty() { 0 } else { whole.parse::<u64>().unwrap_or(u64::MAX) };
    let millis = fraction.bytes().chain(std::iter::repeat(b'0')).take(3).fold(0, |n, b| n * 10 + u64::from(b - b'0'));
    Some(seconds.saturating_mul(1000).saturating_add(millis))
}

/// The closest known key within edit distance 2, for "did you mean" hints.
fn suggest_key(key: &str) -> Option<&'static str> {
    const CANDIDATES: [&str; 11] = [
        "user-agent",
        "allow",
        "disallow",
        "sitemap",
        "crawl-delay",
        "host",
        "clean-param",
        "content-usage",
        "content-signal",
        "request-rate",
        "visit-time",
    ];
    closest(&key.to_ascii_lowercase(), CANDIDATES)
}

struct Parser {
    file: ParsedFile,
}

impl Parser {
    fn warn(&mut self, line: u32, code: &str, message: String) {
        self.file.findings.push(Diagnostic::warning(Some(line), code, message));
    }

    fn line(&mut self, number: u32, raw: &[u8]) {
        if raw.len() > GOOGLE_MAX_LINE {
            self.warn(
                number,
                "long-line",
                format!(
                    "the line is {} bytes long; Google's parser cuts lines after {GOOGLE_MAX_LINE} bytes, so \
                     Google may read this rule differently: shorten it",
                    raw.len()
                ),
            );
        }
        // Google's parser reads a line as a C string: it ends at a NUL byte. No real path
        // holds a NUL, so this only drops junk (seen in the wild after a rule).
        let raw = match raw.iter().position(|&b| b == 0) {
            Some(nul) => {
                self.warn(number, "nul-byte", "a NUL byte; the rest of the line is ignored: remove it".to_string());
                &raw[..nul]
            }
            None => raw,
        };
        if std::str::from_utf8(raw).is_err() {
            self.warn(
                number,
                "invalid-utf8",
                "not valid UTF-8; shown with U+FFFD and matched with its bytes %-encoded: save \
                     the file as UTF-8"
                    .to_string(),
            );
        }
        let content = trim_ws(raw.split(|&b| b == b'#').next().unwrap_or(raw));
        if content.is_empty() {
            return;
        }
        let Some((key, value, missing_colon)) = split_directive(content) else {
            self.warn(number, "not-a-directive", format!("`{}` is not `key: value` and is ignored", display(content)));
            return;
        };
        let text: Box<str> = display(content).into();
        if missing_colon {
            self.warn(
                number,
                "missing-colon",
                format!(
                    "`{text}` has no `:`; read as `{}: {}` (as Google does): add the colon",
                    display(key),
                    display(value)
                ),
            );
        }
        let (kind, typo_of) = classify(key);
        if let Some(correct) = typo_of {
            self.warn(
                number,
                "directive-typo",
                format!("`{}` is read as `{correct}` (as Google does): spell it `{correct}`", display(key)),
            );
        }
        match kind {
            Key::UserAgent => self.user_agent(number, value, text),
            Key::Allow | Key::Disallow => self.rule(number, kind == Key::Allow, value, text),
            Key::Other if key.eq_ignore_ascii_case(b"crawl-delay") => {
                self.crawl_delay(number, value, text);
                self.other(number, key, value, false);
            }
            Key::Other => {
                self.usage(number, key, value);
                self.other(number, key, value, typo_of.is_some());
            }
        }
    }

    /// A `Content-Usage` or `Content-Signal` line: kept for the group it sits in (SEMANTICS
    /// U3; like the lines the matcher does not use, it never ends a group). One outside any
    /// group is ignored, as RFC 9309 ignores other rules there; it stays in `other_lines`.
    /// A statement that is not a structured-field dictionary states nothing: warned about.
    fn usage(&mut self, number: u32, key: &[u8], value: &[u8]) {
        let kind = if key.eq_ignore_ascii_case(b"content-usage") {
            UsageKey::ContentUsage
        } else if key.eq_ignore_ascii_case(b"content-signal") {
            UsageKey::ContentSignal
        } else {
            return;
        };
        let group = self.file.groups.len().checked_sub(1);
        let value: Arc<str> = display(value).into();
        let stated = statement(kind, &value).unwrap_or_else(|malformed| {
            self.warn(number, "malformed-usage", format!("`{}: {value}`: {malformed}", display(key)));
            Default::default()
        });
        // Kept for the file's life: a `Vec` of exactly its members.
        let stated = stated.into_vec();
        let path = (kind == UsageKey::ContentUsage).then(|| split_content_usage(&value).0);
        let pattern = path.map(Pattern::new);
        let path = path.map(Arc::from);
        let line = UsageLine { group: group.unwrap_or(0), line: number, key: kind, value, path, pattern, stated };
        if group.is_some() {
            self.file.usage_lines.push(line);
        }
    }

    fn user_agent(&mut self, number: u32, value: &[u8], text: Box<str>) {
        let value = display(value);
        let token = product_token(&value);
        if token != value {
            self.warn(
                number,
                "user-agent-not-token",
                format!(
                    "`User-agent: {value}` is read as the product token `{token}` (a product token is \
                     one word of letters, `-` and `_`, RFC 9309 §2.2.1): write `User-agent: {token}`"
                ),
            );
        }
        if token.is_empty() {
            self.warn(number, "empty-user-agent", "`User-agent:` has no value, so it names no agent".to_string());
        }
        let agent = AgentLine { token: token.into(), line: number, text: text.into() };
        // Consecutive user-agent lines share a group; only a rule ends the run. Lines the
        // matcher does not use (Sitemap, Crawl-delay, ...) never end a group.
        match self.file.groups.last_mut() {
            Some(group) if group.collecting_agents() => group.agents.push(agent),
            _ => self.file.groups.push(Group::new(agent)),
        }
    }

    fn rule(&mut self, number: u32, allow: bool, value: &[u8], text: Box<str>) {
        let pattern = decode(value);
        if pattern.is_empty() && allow {
            self.warn(number, "empty-allow", format!("`{text}` has no path, so it matches nothing: remove it"));
        } else if !pattern.is_empty() && !pattern.starts_with('/') && !pattern.starts_with('*') {
            self.warn(
                number,
                "pattern-not-absolute",
                format!(
                    "pattern `{pattern}` does not start with `/` or `*`, so it matches no path \
                     (RFC 9309 §2.2.2): did you mean `/{pattern}`?"
                ),
            );
        }
        let Some(group) = self.file.groups.last_mut() else {
            self.warn(
                number,
                "rule-outside-group",
                format!(
                    "`{text}` comes before any `User-agent` line and is ignored: add `User-agent: *` \
                     above it"
                ),
            );
            return;
        };
        let (rule, decoded) = Rule::new(&mut self.file.text, allow, &pattern, number, &text);
        group.push_rule(rule);
        if let Some(decoded) = decoded {
            group.push_rule(decoded);
            self.file.has_decoded = true;
        }
    }

    /// A `Crawl-delay` line: kept for the group it sits in (lines the matcher does not use
    /// never end a group), or ignored with a finding.
    fn crawl_delay(&mut self, number: u32, value: &[u8], text: Box<str>) {
        let value = display(value);
        let Some(group) = self.file.groups.len().checked_sub(1) else {
            self.warn(
                number,
                "crawl-delay-outside-group",
                format!("`{text}` comes before any `User-agent` line and is ignored: move it into a group"),
            );
            return;
        };
        let Some(millis) = delay_millis(&value) else {
            self.warn(
                number,
                "crawl-delay-invalid",
                format!("`{text}` is not a number of seconds (such as 2 or 0.5) and is ignored: fix the value"),
            );
            return;
        };
        if millis > u64::from(MAX_CRAWL_DELAY_MS) {
            self.warn(
                number,
                "crawl-delay-capped",
                format!(
                    "`{text}` is longer than {} s; agentgate honours at most {} s between requests: lower it",
                    MAX_CRAWL_DELAY_MS / 1000,
                    MAX_CRAWL_DELAY_MS / 1000
                ),
            );
        }
        let millis = u32::try_from(millis.min(u64::from(MAX_CRAWL_DELAY_MS))).unwrap_or(MAX_CRAWL_DELAY_MS);
        self.file.crawl_delays.push(CrawlDelay { group, millis, line: number, text: text.into() });
    }

    fn other(&mut self, number: u32, key: &[u8], value: &[u8], typo: bool) {
        let key = display(key);
        let lower = key.to_ascii_lowercase();
        if !typo && !KNOWN_OTHER_KEYS.contains(&lower.as_str()) {
            let hint = match suggest_key(&key) {
                Some(known) => format!(": did you mean `{known}`?"),
                None => String::from(
                    " (other records have no effect on access, RFC 9309 §2.2.4): remove it or fix its name",
                ),
            };
            self.warn(number, "unknown-directive", format!("unknown directive `{key}` is ignored{hint}"));
        }
        self.file.other_lines.push(OtherLine { line: number, key, value: display(value) });
    }
}
