//! agents.txt (draft-srijal-agents-policy-00): format detection, the strict parser with
//! its content hash, longest-match evaluation, `limit=N` rate limits, the fetch-outcome
//! semantics, and `lint --fix-hash`. Rows B1–B25 of `SEMANTICS.md` §6.2.
//!
//! Owns: what a fetched `/agents.txt` means for access. A file is this format only after
//! detection (B1); then any hash or directive problem restricts the whole origin (B19).
//!
//! Never: fetches, caches or logs. The cache rules that follow from a state (drop a good
//! copy on a restricted file, B20; keep it when the origin is unreachable, B21) are
//! answered by [`AgentsTxtState::is_restricted`] and [`AgentsTxtState::keeps_cached_copy`]
//! and carried out by `fetch/`.

pub(crate) mod text;

#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;

use crate::policy::Weigh;
use std::sync::Arc;

use self::text::{Findings, JoinedDigest, Line, is_blank_byte, lines, normalized_path, split_bom, trim_blanks};
use super::pattern::Pattern;
use super::{
    Diagnostic, FetchOutcome, Limit, LimitKind, LimitScope, Opinion, PolicyReport, PolicyStatus, Reason, RequestView,
    Source, SourceVerdict,
};

/// The size cap (SEMANTICS X6): the fetcher reads at most this many bytes plus one and
/// sets `over_cap`; a larger file restricts the origin (B23).
pub const MAX_BYTES: usize = 500 * 1024;

/// How long a restricted verdict is cached before the file is fetched again (B20).
pub const RESTRICTED_TTL_S: u64 = 300;

/// The window of `limit=N`: N requests per this many seconds per (agent, origin, rule)
/// (B16).
pub const LIMIT_WINDOW_S: u32 = 60;

/// What one origin's `/agents.txt` means, built by [`from_fetch`] and evaluated per
/// request.
#[derive(Debug, Clone)]
pub struct AgentsTxtState {
    kind: Kind,
    /// The draft's content digest (B3), when the file was recognised as this format.
    digest: Option<Arc<str>>,
    diagnostics: Vec<Diagnostic>,
    metadata: Vec<Metadata>,
}

#[derive(Debug, Clone)]
enum Kind {
    /// No file (4xx, 3xx at the end of the redirects, or not in `--policy-dir`).
    Absent,
    /// 5xx or no response: no opinion, a cached valid copy stays in use (B21).
    Unreachable,
    /// Served, but not this format (HTML, a foreign format, nothing but comments).
    NotApplicable,
    /// Recognised but broken: the whole origin is denied with this reason (B19).
    Restricted(Reason),
    /// Verified: the rules, in file order.
    Valid(Vec<Rule>),
}

/// One directive line.
#[derive(Debug, Clone)]
struct Rule {
    pattern: Pattern,
    action: Action,
    /// `limit=N` on an ALLOW rule (ignored on DISALLOW, B16).
    limit: Option<u32>,
    /// The reason cited when this rule decides, built once at parse time.
    reason: Reason,
}

/// ALLOW or DISALLOW (B10).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Allow,
    Disallow,
}

/// One `# key: value` comment, kept for `explain` only (B6: it has no effect).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// 1-based line.
    pub line: u32,
    /// The key, lower case (`version`, `generated-by`, `grace-period`, ...).
    pub key: String,
    /// The value as written, trimmed.
    pub value: String,
}

/// The state a fetch outcome leads to (B21): 2xx is detected (B1) and parsed; 4xx and a
/// final 3xx mean no file; 5xx and failures mean no opinion, logged.
pub fn from_fetch(outcome: &FetchOutcome) -> AgentsTxtState {
    let (status, headers, body, over_cap) = match outcome {
        FetchOutcome::Failed(err) => {
            return AgentsTxtState::without_file(
                Kind::Unreachable,
                Diagnostic::warning(None, "unreachable", format!("agents.txt fetch failed ({err}): no opinion")),
            );
        }
        FetchOutcome::Response { status, headers, body, over_cap } => (*status, headers, body, *over_cap),
    };
    match status {
        200..=299 => {}
        500..=599 => {
            return AgentsTxtState::without_file(
                Kind::Unreachable,
                Diagnostic::warning(None, "unreachable", format!("agents.txt answered {status}: no opinion")),
            );
        }
        400..=499 => return AgentsTxtState::without_file(Kind::Absent, None),
        _ => {
            return AgentsTxtState::without_file(
                Kind::Absent,
                Diagnostic::warning(None, "unexpected-status", format!("agents.txt answered {status}: no file")),
            );
        }
    }
    if headers.is_html() {
        let media = headers.media_type().unwrap_or_default();
        return AgentsTxtState::without_file(
            Kind::NotApplicable,
            Diagnostic::warning(None, "foreign-format", format!("agents.txt is served as {media}: not this format")),
        );
    }
    let mut state = parse(body, over_cap);
    if let Some(media) = headers.media_type().filter(|m| m != "text/plain")
        && state.digest.is_some()
    {
        state.diagnostics.insert(
            0,
            Diagnostic::warning(
                None,
                "content-type",
                format!("agents.txt is served as {media}; the draft asks for text/plain"),
            ),
        );
    }
    state
}

/// Every finding about an agents.txt body, in line order, as `agentgate lint` prints
/// them: detection, encoding, hash line, each directive, and the hash check with the
/// digest the file should carry.
pub fn lint(body: &[u8]) -> Vec<Diagnostic> {
    parse(body, body.len() > MAX_BYTES).diagnostics
}

/// Rewrites the hash line (or inserts one before the first directive) so the file
/// verifies, keeping every other byte as it was: BOM, comments, blank lines, line
/// endings. A body that is not this format (B1) comes back unchanged; one with no
/// directive at all gets the hash of the empty rule set (B24) appended.
pub fn fix_hash(body: &[u8]) -> Vec<u8> {
    let (bom, text) = split_bom(body);
    let mut significant = lines(text).filter(|l| is_significant(l.bytes));
    let first = significant.next();
    if first.is_some_and(|l| !is_detected(l.bytes)) {
        return body.to_vec();
    }
    let replaces_first = first.is_some_and(|l| l.bytes.starts_with(b"*"));
    let mut digest = JoinedDigest::default();
    if let Some(first) = first.filter(|_| !replaces_first) {
        digest.push(first.bytes);
    }
    for line in significant {
        digest.push(line.bytes);
    }
    let hash_line = format!("*{}", digest.finish());
    let default_eol = lines(text).map(|l| l.eol).find(|eol| !eol.is_empty()).unwrap_or(b"\n");

    let mut out = Vec::with_capacity(body.len() + hash_line.len() + 2);
    out.extend_from_slice(bom);
    let Some(first) = first else {
        out.extend_from_slice(text);
        if !text.is_empty() && !text.ends_with(b"\n") && !text.ends_with(b"\r") {
            out.extend_from_slice(default_eol);
        }
        out.extend_from_slice(hash_line.as_bytes());
        out.extend_from_slice(default_eol);
        return out;
    };
    let start = first.start;
    out.extend_from_slice(&text[..start]);
    out.extend_from_slice(hash_line.as_bytes());
    if replaces_first {
        out.extend_from_slice(&text[start + first.bytes.len()..]);
    } else {
        out.extend_from_slice(default_eol);
        out.extend_from_slice(&text[start..]);
    }
    out
}

impl AgentsTxtState {
    /// A state with no file contents (absent, unreachable, not applicable).
    fn without_file(kind: Kind, diagnostic: impl Into<Option<Diagnostic>>) -> Self {
        AgentsTxtState {
            kind,
            digest: None,
            diagnostics: diagnostic.into().into_iter().collect(),
            metadata: Vec::new(),
        }
    }

    /// What this file says about one request: restricted denies everything (B19); else
    /// the longest matching rule decides, an ALLOW/DISALLOW tie is DISALLOW (B12), an
    /// ALLOW with `limit=N` adds a rate limit and `limit=0` denies (B16); no match is no
    /// opinion (B13). Every method and every agent is covered (B14).
    pub fn evaluate(&self, req: &RequestView<'_>) -> SourceVerdict {
        let rules = match &self.kind {
            Kind::Valid(rules) => rules,
            Kind::Restricted(reason) => return SourceVerdict::with(Opinion::Deny, reason.clone()),
            Kind::Absent | Kind::Unreachable | Kind::NotApplicable => return SourceVerdict::no_opinion(),
        };
        let path = normalized_path(req.path_and_query);
        let mut best: Option<&Rule> = None;
        for rule in rules {
            if !rule.pattern.matches_normalized(&path) {
                continue;
            }
            let better = best.is_none_or(|b| {
                let (mine, theirs) = (rule.pattern.specificity(), b.pattern.specificity());
                mine > theirs || (mine == theirs && rule.action == Action::Disallow && b.action == Action::Allow)
            });
            if better {
                best = Some(rule);
            }
        }
        let Some(rule) = best else { return SourceVerdict::no_opinion() };
        match (rule.action, rule.limit) {
            (Action::Disallow, _) => SourceVerdict::with(Opinion::Deny, rule.reason.clone()),
            (Action::Allow, Some(0)) => {
                let mut reason = rule.reason.clone();
                reason.code = "agents_txt.limit_zero".into();
                SourceVerdict::with(Opinion::Deny, reason)
            }
            (Action::Allow, Some(requests)) => {
                let line = rule.reason.line.unwrap_or(0);
                let mut verdict = SourceVerdict::with(Opinion::Allow, rule.reason.clone());
                let mut reason = rule.reason.clone();
                reason.code = "agents_txt.limit".into();
                verdict.limits.push(Limit {
                    source: Source::AgentsTxt,
                    kind: LimitKind::Rate { requests, window_s: LIMIT_WINDOW_S },
                    scope: LimitScope::Rule { line },
                    reason,
                });
                verdict
            }
            (Action::Allow, None) => SourceVerdict::with(Opinion::Allow, rule.reason.clone()),
        }
    }

    /// Status, content digest (B3: what `check_policy.py` compares) and findings, for
    /// `explain`.
    pub fn report(&self) -> PolicyReport {
        PolicyReport { status: self.status(), digest: self.digest.clone(), diagnostics: self.diagnostics.clone() }
    }

    /// Valid, malformed (restricted), absent (also unreachable) or not applicable.
    pub fn status(&self) -> PolicyStatus {
        match self.kind {
            Kind::Absent | Kind::Unreachable => PolicyStatus::Absent,
            Kind::NotApplicable => PolicyStatus::NotApplicable,
            Kind::Restricted(_) => PolicyStatus::Malformed,
            Kind::Valid(_) => PolicyStatus::Valid,
        }
    }

    /// True when the file restricts the whole origin: the cache must drop any earlier
    /// good copy and keep this verdict for [`RESTRICTED_TTL_S`] (B20).
    pub fn is_restricted(&self) -> bool {
        matches!(self.kind, Kind::Restricted(_))
    }

    /// True when the fetch failed (5xx, timeout, network): a cached valid copy within its
    /// TTL stays in use instead of this state (B21).
    pub fn keeps_cached_copy(&self) -> bool {
        matches!(self.kind, Kind::Unreachable)
    }

    /// The `# key: value` metadata comments, for `explain` (no effect, B6).
    pub fn metadata(&self) -> &[Metadata] {
        &self.metadata
    }
}

/// A line that is neither blank (B4) nor a comment (B5).
fn is_significant(line: &[u8]) -> bool {
    line.iter().find(|&&b| !is_blank_byte(b)).is_some_and(|&b| b != b'#')
}

/// B1: the first significant line starts with `*` or looks like a directive
/// (`^/\S*[ \t]+(ALLOW|DISALLOW)\b`, case-insensitive).
fn is_detected(first: &[u8]) -> bool {
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
/// cut at the size cap (B23).
fn parse(body: &[u8], over_cap: bool) -> AgentsTxtState {
    let (_, text) = split_bom(body);
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
    Parser::default().run(text, first, over_cap)
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
                "too-large",
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
                    "invalid-utf8",
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
                        "hash-missing",
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
                "hash-mismatch",
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
                Kind::Valid(rules)
            }
        };
        AgentsTxtState { kind, digest: Some(computed), diagnostics: self.findings.finish(), metadata: self.metadata }
    }

    /// Records an error; the first one by cause rank and line becomes the restricted
    /// reason.
    fn error(&mut self, line: Option<u32>, code: &str, message: String, rule: String) {
        self.findings.push(Diagnostic::error(line, code, message));
        let rank = match code {
            "too-large" => 0,
            "invalid-utf8" => 1,
            _ => 2,
        };
        let order = (rank, line.unwrap_or(0));
        if self.cause.as_ref().is_none_or(|(at, _)| order < *at) {
            let mut reason = Reason::new(Source::AgentsTxt, format!("agents_txt.{}", code.replace('-', "_")), rule);
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
                "hash-line-syntax",
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
                    Action::Allow => "agents_txt.allow",
                    Action::Disallow => "agents_txt.disallow",
                };
                self.rules.push(Rule {
                    pattern: Pattern::new(parsed.path),
                    action: parsed.action,
                    limit: parsed.limit,
                    reason: Reason::new(Source::AgentsTxt, code, rule_text).at_line(number),
                });
            }
            Err(message) => {
                self.error(Some(number), "directive-syntax", message.to_string(), rule_text);
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

impl Weigh for AgentsTxtState {
    fn heap_bytes(&self) -> usize {
        let kind = match &self.kind {
            Kind::Absent | Kind::Unreachable | Kind::NotApplicable => 0,
            Kind::Restricted(reason) => reason.heap_bytes(),
            Kind::Valid(rules) => rules.heap_bytes(),
        };
        kind + self.digest.heap_bytes() + self.diagnostics.heap_bytes() + self.metadata.heap_bytes()
    }
}

impl Weigh for Rule {
    fn heap_bytes(&self) -> usize {
        // The reason's digest is the state's own `Arc`, charged once there, not per rule.
        self.pattern.heap_bytes() + self.reason.code.heap_bytes() + self.reason.rule.heap_bytes()
    }
}

impl Weigh for Metadata {
    fn heap_bytes(&self) -> usize {
        self.key.heap_bytes() + self.value.heap_bytes()
    }
}

/// agents.txt as a [`super::Format`] (draft-srijal-agents-policy-00).
#[derive(Debug, Clone, Copy)]
pub struct AgentsTxt;

impl super::Format for AgentsTxt {
    type State = AgentsTxtState;
    const SOURCE: Source = Source::AgentsTxt;
    const NAME: &'static str = "agents-txt";
    const PATH: &'static str = "/agents.txt";
    const MAX_BYTES: usize = MAX_BYTES;

    fn from_fetch(outcome: &FetchOutcome) -> AgentsTxtState {
        from_fetch(outcome)
    }

    fn refresh(
        previous: Option<super::refresh::Previous<AgentsTxtState>>,
        fetched: AgentsTxtState,
        ttl: std::time::Duration,
        rules: &super::StaleRules,
    ) -> super::refresh::Refreshed<AgentsTxtState> {
        super::refresh::agents_txt(previous, fetched, ttl, rules.agents_txt_negative_ttl)
    }

    #[inline]
    fn evaluate(state: &AgentsTxtState, req: &RequestView<'_>, _settings: super::Settings) -> SourceVerdict {
        state.evaluate(req)
    }

    fn report(state: &AgentsTxtState) -> PolicyReport {
        state.report()
    }

    fn lint(body: &[u8]) -> Vec<Diagnostic> {
        lint(body)
    }

    fn advice(code: &str) -> &'static str {
        match code {
            "agents_txt.disallow" => {
                "The site's agents.txt disallows this path for automated agents. Do not retry it; other paths may be \
                 allowed (read /agents.txt)."
            }
            "agents_txt.limit_zero" => {
                "The site's agents.txt allows zero automated requests to this path. Do not retry it."
            }
            _ => {
                "The site's agents.txt is malformed or unverifiable, and the agents.txt rules say that restricts the \
                 whole site to agents. Nothing on this site can be fetched until the site publishes a valid file; \
                 tell your user, do not retry."
            }
        }
    }
}
