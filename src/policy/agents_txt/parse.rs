//! Reads agents.txt bytes into an [`AgentsTxtState`]: detection (B1), the hash line (B7)
//! and the content digest over the directive lines (B2, B3), `# key: value` metadata (B6),
//! each directive (B9–B17, B25), and line-numbered findings. The first error, file-wide
//! causes before line order, becomes the reason the origin is restricted (B19).
//!
//! Never: evaluates a request, or decides what a fetch status means (both in
//! `agents_txt.rs`).

use std::sync::Arc;

use super::{Action, AgentsTxtState, Kind, MAX_BYTES, Metadata, Rule};
use crate::policy::pattern::Pattern;
use crate::policy::text::{Findings, JoinedDigest, Line, is_blank_byte, lines, split_bom, trim_blanks};
use crate::policy::{AgentsTxtCode, Diagnostic, Reason};

/// A line that is neither blank (B4) nor a comment (B5).
pub(super) fn is_significant(line: &[u8]) -> bool {
    line.iter().find(|&&b| !is_blank_byte(b)).is_some_and(|&b| b != b'#')
}

/// B1: the first significant line starts with `*` or looks like a directive
/// (`^/\S*[ \t]+(ALLOW|DISALLOW)\b`, case-insensitive).
pub(super) fn is_detected(first: &[u8]) -> bool {
    if first.starts_with(b"*") {
        return true;
    }
    if !first.starts_with(b"/") {
        return false;
    }
    let path_end = first.iter().position(|b| b.is_ascii_whitespace()).unwrap_or(first.len());
    let rest = &first[path_end..];
    let blanks = rest.iter().take_while(|&&b| is_blank_byte(b)).count();
    if blanks == 0 {
        return false;
    }
    let rest = &rest[blanks..];
    ["ALLOW", "DISALLOW"].iter().any(|action| {
        rest.len() >= action.len()
            && rest[..action.len()].eq_ignore_ascii_case(action.as_bytes())
            && rest.get(action.len()).is_none_or(|&b| !(b.is_ascii_alphanumeric() || b == b'_'))
    })
}

/// Parses a body: detection (B1), then the strict rules. `over_cap` means the body was
/// cut at the size cap (B23); findings go to `findings` (bounded for a report, all of
/// them for lint).
pub(super) fn parse(body: &[u8], over_cap: bool, findings: Findings) -> AgentsTxtState {
    let (_, text) = split_bom(body, false);
    let Some(first) = lines(text).find(|l| is_significant(l.bytes)) else {
        let why = if body.is_empty() { "agents.txt is empty" } else { "agents.txt has no directive or hash line" };
        return AgentsTxtState::without_file(
            Kind::NotApplicable,
            Diagnostic::warning(None, "empty", format!("{why}: not this format, no opinion")),
        );
    };
    if !is_detected(first.bytes) {
        let shown = String::from_utf8_lossy(truncate(trim_blanks(first.bytes), 60)).into_owned();
        return AgentsTxtState::without_file(
            Kind::NotApplicable,
            Diagnostic::warning(
                Some(first.number),
                "foreign-format",
                format!(
                    "`{shown}` is neither a hash line (`*<sha256>`) nor a directive (`/path ALLOW`): \
                     not this format, no opinion"
                ),
            ),
        );
    }
    Parser { findings, ..Parser::default() }.run(text, first, over_cap)
}

/// At most `max` bytes, for quoting input in messages.
fn truncate(bytes: &[u8], max: usize) -> &[u8] {
    &bytes[..bytes.len().min(max)]
}

/// The strict parse of a detected file.
#[derive(Default)]
struct Parser {
    findings: Findings,
    /// The first error, which becomes the restricted reason: file-wide causes (size,
    /// encoding) before line order, since they explain the rest.
    cause: Option<((u8, u32), Reason)>,
    rules: Vec<Rule>,
    metadata: Vec<Metadata>,
}

/// What the hash line said.
struct HashLine {
    line: u32,
    text: String,
    /// The declared digest, lower case; `None` when the line is malformed.
    declared: Option<String>,
}

impl Parser {
    fn run(mut self, text: &[u8], first: Line<'_>, over_cap: bool) -> AgentsTxtState {
        if over_cap {
            self.error(
                None,
                AgentsTxtCode::TooLarge,
                format!("agents.txt is larger than {} KiB, so its hash cannot be verified", MAX_BYTES / 1024),
                "agents.txt is larger than the 500 KiB cap".into(),
            );
        }
        let mut digest = JoinedDigest::default();
        let mut hash_line = None;
        for line in lines(text) {
            let Ok(content) = std::str::from_utf8(line.bytes) else {
                self.error(
                    Some(line.number),
                    AgentsTxtCode::InvalidUtf8,
                    "not valid UTF-8; save the file as UTF-8".to_owned(),
                    String::from_utf8_lossy(line.bytes).trim().to_owned(),
                );
                if is_significant(line.bytes) && !(line.number == first.number && line.bytes.starts_with(b"*")) {
                    digest.push(line.bytes);
                }
                continue;
            };
            if !is_significant(line.bytes) {
                self.comment(line.number, content);
            } else if line.number == first.number && content.starts_with('*') {
                hash_line = Some(self.hash_line(line.number, content));
            } else {
                if line.number == first.number {
                    self.error(
                        Some(line.number),
                        AgentsTxtCode::HashMissing,
                        "the first directive must follow a hash line `*<sha256 of the directives>`; \
                             run `agentgate lint --fix-hash`"
                            .to_string(),
                        content.trim().to_owned(),
                    );
                }
                digest.push(line.bytes);
                self.directive(line.number, content);
            }
        }
        let count = digest.count();
        let computed: Arc<str> = Arc::from(digest.finish());
        if let Some(HashLine { line, text, declared: Some(declared) }) = hash_line
            && *declared != *computed
            && !over_cap
        {
            self.error(
                Some(line),
                AgentsTxtCode::HashMismatch,
                format!(
                    "hash mismatch: expected {declared}, found {computed} (SHA-256 of the {count} \
                     directive lines joined by \\n, no trailing newline); write `*{computed}` or run \
                     `agentgate lint --fix-hash`"
                ),
                text,
            );
        }
        let kind = match self.cause {
            Some((_, mut reason)) => {
                reason.digest = Some(computed.clone());
                Kind::Restricted(reason)
            }
            None => {
                let mut rules = self.rules;
                for rule in &mut rules {
                    rule.reason.digest = Some(computed.clone());
                }
                let has_decoded = rules.iter().any(|rule| rule.pattern.has_decoded());
                Kind::Valid { rules, has_decoded }
            }
        };
        AgentsTxtState {
            kind,
            digest: Some(computed),
            diagnostics: self.findings.finish_in_line_order(),
            metadata: self.metadata,
        }
    }

    /// Records an error; the first one by cause rank and line becomes the restricted
    /// reason, with `code`. Its finding is the code in kebab case without the file name
    /// (`agents_txt.hash_mismatch` is `hash-mismatch`).
    fn error(&mut self, line: Option<u32>, code: AgentsTxtCode, message: String, rule: String) {
        let finding = code.as_str().trim_start_matches("agents_txt.").replace('_', "-");
        self.findings.push(Diagnostic::error(line, finding, message));
        let rank = match code {
            AgentsTxtCode::TooLarge => 0,
            AgentsTxtCode::InvalidUtf8 => 1,
            _ => 2,
        };
        let order = (rank, line.unwrap_or(0));
        if self.cause.as_ref().is_none_or(|(at, _)| order < *at) {
            let mut reason = Reason::new(code, rule);
            reason.line = line;
            self.cause = Some((order, reason));
        }
    }

    fn warning(&mut self, line: u32, code: impl Into<String>, message: String) {
        self.findings.push(Diagnostic::warning(Some(line), code, message));
    }

    /// A comment or blank line: `# key: value` comments are metadata (B6).
    fn comment(&mut self, number: u32, content: &str) {
        let Some(body) = content.trim_start_matches([' ', '\t']).strip_prefix('#') else { return };
        let Some((key, value)) = body.split_once(':') else { return };
        let key = key.trim();
        if !key.is_empty() && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            self.metadata.push(Metadata { line: number, key: key.to_ascii_lowercase(), value: value.trim().into() });
        }
    }

    /// B7: after trimming trailing SP/HTAB, `*` plus 64 hex digits.
    fn hash_line(&mut self, number: u32, content: &str) -> HashLine {
        let trimmed = content.trim_end_matches([' ', '\t']);
        let hex = &trimmed[1..];
        let text = trimmed.to_owned();
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let what = if hex.starts_with([' ', '\t']) {
                "has blanks after `*`".to_owned()
            } else if hex.len() != 64 {
                format!("has {} characters after `*`, not 64 hex digits", hex.chars().count())
            } else {
                "has non-hex characters".to_owned()
            };
            self.error(
                Some(number),
                AgentsTxtCode::HashLineSyntax,
                format!(
                    "the hash line {what}; it must be `*` followed by the 64 hex digits of the \
                     SHA-256, nothing else (run `agentgate lint --fix-hash`)"
                ),
                text.clone(),
            );
            return HashLine { line: number, text, declared: None };
        }
        if hex.bytes().any(|b| b.is_ascii_uppercase()) {
            self.warning(number, "hash-not-lowercase", "write the hash in lower-case hex".to_string());
        }
        HashLine { line: number, text, declared: Some(hex.to_ascii_lowercase()) }
    }

    /// One directive line: `<path> <action> [key=value...]` (B9–B17, B25).
    fn directive(&mut self, number: u32, content: &str) {
        let rule_text = content.trim_matches([' ', '\t']).to_owned();
        match parse_directive(content) {
            Ok(parsed) => {
                for (code, message) in parsed.warnings {
                    self.warning(number, code, message.to_string());
                }
                let code = match parsed.action {
                    Action::Allow => AgentsTxtCode::Allow,
                    Action::Disallow => AgentsTxtCode::Disallow,
                };
                self.rules.push(Rule {
                    pattern: Pattern::new(parsed.path),
                    action: parsed.action,
                    limit: parsed.limit,
                    reason: Reason::new(code, rule_text).at_line(number),
                });
            }
            Err(message) => {
                self.error(Some(number), AgentsTxtCode::DirectiveSyntax, message.to_string(), rule_text);
            }
        }
    }
}

/// A directive that parsed, with its warnings (code, message).
struct Directive<'a> {
    path: &'a str,
    action: Action,
    limit: Option<u32>,
    warnings: Vec<(String, String)>,
}

/// Parses one directive line; the error names the problem and the fix.
fn parse_directive(content: &str) -> Result<Directive<'_>, String> {
    let mut warnings = Vec::new();
    if content.starts_with([' ', '\t']) {
        warnings.push(("leading-whitespace".into(), "remove the blanks before the path".into()));
    }
    if content.starts_with('*') {
        return Err("a second hash line; only the first significant line may start with `*`".into());
    }
    let mut fields = content.split([' ', '\t']).filter(|f| !f.is_empty());
    let path = fields.next().unwrap_or_default();
    if !path.starts_with('/') {
        if let Some(key) = path.strip_suffix(':').filter(|k| !k.is_empty()) {
            return Err(format!(
                "`{key}:` looks like metadata, which is only allowed in a comment: write `# {}`",
                content.trim()
            ));
        }
        return Err(format!("the path `{}` must start with `/`", quote(path)));
    }
    let Some(action_text) = fields.next() else {
        return Err(format!("`{}` has no action; write `{} ALLOW` or `{} DISALLOW`", quote(path), path, path));
    };
    let action = if action_text.eq_ignore_ascii_case("ALLOW") {
        Action::Allow
    } else if action_text.eq_ignore_ascii_case("DISALLOW") {
        Action::Disallow
    } else {
        return Err(format!("unknown action `{}`; expected ALLOW or DISALLOW", quote(action_text)));
    };
    if action_text.bytes().any(|b| b.is_ascii_lowercase()) {
        warnings.push(("action-not-uppercase".into(), format!("write the action `{action_text}` in upper case")));
    }
    let mut limit = None;
    let mut seen: Vec<&str> = Vec::new();
    for param in fields {
        if param.starts_with('#') {
            return Err("inline comments are not allowed; move the `# ...` text to its own line".into());
        }
        let Some((key, value)) = param.split_once('=') else {
            return Err(format!("the parameter `{}` has no `=`; write key=value", quote(param)));
        };
        if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-')) {
            return Err(format!("the parameter name `{}` must be letters, digits, `_`, `.` or `-`", quote(key)));
        }
        if !is_param_value(value) {
            return Err(format!(
                "the value of `{key}` must be URI unreserved characters or %XX escapes, found `{}`",
                quote(value)
            ));
        }
        if seen.iter().any(|k| k.eq_ignore_ascii_case(key)) {
            return Err(format!("the parameter `{key}` is given twice"));
        }
        seen.push(key);
        if key.eq_ignore_ascii_case("limit") {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("limit=`{}` must be a whole number of requests, e.g. limit=50", quote(value)));
            }
            let n = value.parse::<u32>().unwrap_or_else(|_| {
                warnings.push(("limit-too-large".into(), format!("limit={value} is read as {}", u32::MAX)));
                u32::MAX
            });
            if action == Action::Disallow {
                warnings
                    .push(("limit-on-disallow-ignored".into(), format!("limit={value} on a DISALLOW rule is ignored")));
            } else {
                limit = Some(n);
            }
        } else {
            warnings.push((format!("unknown-param:{key}"), format!("unknown parameter `{key}` is ignored")));
        }
    }
    Ok(Directive { path, action, limit, warnings })
}

/// RFC 3986 unreserved characters and `%XX` escapes (B15).
fn is_param_value(value: &str) -> bool {
    let bytes = value.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' if i + 2 < bytes.len() && bytes[i + 1].is_ascii_hexdigit() && bytes[i + 2].is_ascii_hexdigit() => {
                i += 3
            }
            b if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') => i += 1,
            _ => return false,
        }
    }
    true
}

/// Input shown in a message, cut to a readable length.
fn quote(s: &str) -> &str {
    match s.char_indices().nth(60) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}
