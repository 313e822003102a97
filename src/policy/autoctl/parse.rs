//! Reading automation-preferences.txt bytes into [`Group`]s and line-numbered findings:
//! lines (CR, LF, CRLF; BOM stripped, D19), the control-byte check (D14), `#` and
//! `<!-- … -->` comments (D3, D4), directives split at the first `:` with case-insensitive
//! names (D5), and robots-style grouping (D1, D2, D6, D9, D12, D13, D17).
//!
//! Never: decides what the groups mean for a request, or what a rejected file means for
//! access (both in `autoctl.rs`).

use std::sync::Arc;

use std::borrow::Cow;

use super::group::{AllowedList, Group, HostPattern, RuleLine};
use crate::policy::Diagnostic;
use crate::policy::pattern::Pattern;
use crate::policy::text::{Findings, decode, is_token, lines, split_bom};

/// What the parser made of a body.
#[derive(Debug)]
pub(super) enum Parsed {
    /// The file is usable: its groups, in file order, and the findings.
    Groups(Vec<Group>, Vec<Diagnostic>),
    /// The file holds raw control bytes (D14): the line of the first one, and the findings.
    Rejected(u32, Vec<Diagnostic>),
}

/// Parses a body of at most the size cap (the caller checks the cap), collecting findings
/// into `findings` (bounded for a report, all of them for lint).
pub(super) fn parse(body: &[u8], mut findings: Findings) -> Parsed {
    let (_, body) = split_bom(body, false);
    let mut first_bad = None;
    for line in lines(body) {
        let (n, line) = (line.number, line.bytes);
        if let Some(&byte) = line.iter().find(|&&b| b < 0x20 && b != b'\t') {
            first_bad.get_or_insert(n);
            findings.error(n, "control-byte", || {
                format!("raw control byte 0x{byte:02X}: the file is rejected (only HTAB, CR and LF are allowed)")
            });
        }
    }
    if let Some(line) = first_bad {
        return Parsed::Rejected(line, findings.finish());
    }
    let mut grouping = Grouping::default();
    let mut in_html_comment = false;
    let mut html_comment_opened_at = 0;
    for line in lines(body) {
        let (n, decoded) = (line.number, decode(line.bytes));
        if matches!(decoded, Cow::Owned(_)) {
            findings.warn(n, "invalid-utf8", || "invalid UTF-8: the bad bytes are read as %XX escapes".to_owned());
        }
        let (text, opened) = strip_comments(&decoded, &mut in_html_comment);
        if opened {
            html_comment_opened_at = n;
            findings.warn(n, "html-comment", || {
                "<!-- --> comment stripped: the draft's examples use them, but its ABNF has only '#' comments"
                    .to_owned()
            });
        }
        let text = trim_ws(&text);
        if text.is_empty() {
            continue;
        }
        grouping.directive(n, text, &mut findings);
    }
    if in_html_comment {
        findings.warn(html_comment_opened_at, "unclosed-html-comment", || {
            "<!-- is never closed with -->: everything after it is ignored".to_owned()
        });
    }
    let groups = grouping.finish(&mut findings);
    Parsed::Groups(groups, findings.finish())
}

/// Removes `#` comments (D4: anywhere on a line) and `<!-- … -->` spans (D3: across lines,
/// tracked by `in_html_comment`), whichever opens first. Returns the remaining text and
/// whether an HTML comment opened on this line.
fn strip_comments<'a>(line: &'a str, in_html_comment: &mut bool) -> (Cow<'a, str>, bool) {
    if !*in_html_comment && !line.contains("<!--") {
        return match line.find('#') {
            Some(at) => (Cow::Borrowed(&line[..at]), false),
            None => (Cow::Borrowed(line), false),
        };
    }
    let mut out = String::new();
    let mut opened = false;
    let mut rest = line;
    loop {
        if *in_html_comment {
            match rest.find("-->") {
                Some(at) => {
                    rest = &rest[at + 3..];
                    *in_html_comment = false;
                }
                None => return (Cow::Owned(out), opened),
            }
        }
        let hash = rest.find('#');
        match rest.find("<!--") {
            Some(open) if hash.is_none_or(|h| open < h) => {
                out.push_str(&rest[..open]);
                rest = &rest[open + 4..];
                *in_html_comment = true;
                opened = true;
            }
            _ => {
                out.push_str(&rest[..hash.unwrap_or(rest.len())]);
                return (Cow::Owned(out), opened);
            }
        }
    }
}

/// Trims SP and HTAB, the ABNF's WS.
fn trim_ws(text: &str) -> &str {
    text.trim_matches([' ', '\t'])
}

/// Splits a comma list. Items are trimmed and empty items dropped; whitespace inside an
/// item also separates (`GET HEAD` reads as `GET, HEAD`), reported through the flag, since
/// reading it as one token would block what the author meant to allow (P2).
fn split_list(value: &str) -> (Vec<&str>, bool) {
    let mut missing_comma = false;
    let mut items = Vec::new();
    for item in value.split(',').map(trim_ws).filter(|i| !i.is_empty()) {
        let mut words = item.split([' ', '\t']).filter(|w| !w.is_empty());
        items.extend(words.by_ref().take(1));
        let before = items.len();
        items.extend(words);
        missing_comma |= items.len() > before;
    }
    (items, missing_comma)
}

/// The directives this draft defines (D17: every other name is ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Scope,
    Host,
    UserAgent,
    AllowedMethods,
    AllowedPurposes,
}

impl Field {
    fn parse(name: &str) -> Option<Field> {
        const FIELDS: [(&str, Field); 5] = [
            ("scope", Field::Scope),
            ("host", Field::Host),
            ("user-agent", Field::UserAgent),
            ("allowed-methods", Field::AllowedMethods),
            ("allowed-purposes", Field::AllowedPurposes),
        ];
        FIELDS.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|&(_, f)| f)
    }

    /// Header lines accumulate; a header after a rule line starts a new group (D1).
    fn is_header(self) -> bool {
        matches!(self, Field::Scope | Field::Host | Field::UserAgent)
    }
}

/// A group being read.
#[derive(Debug)]
struct Builder {
    group: Group,
    /// True once a rule line (`allowed-*`) was seen: the next header starts a new group.
    has_rule: bool,
    /// True once a user-agent line was seen (with no line at all, every agent matches).
    has_agent_line: bool,
    /// Set when a scope's meaning is unknown (D6): the whole group is ignored.
    ignored: bool,
}

/// Robots-style grouping state (D1).
#[derive(Debug, Default)]
struct Grouping {
    groups: Vec<Group>,
    current: Option<Builder>,
}

impl Grouping {
    fn directive(&mut self, n: u32, text: &str, findings: &mut Findings) {
        let Some((name, value)) = text.split_once(':') else {
            findings.warn(n, "missing-colon", || format!("'{text}' is not 'field: value'; the line is ignored"));
            return;
        };
        let (name, value) = (trim_ws(name), trim_ws(value));
        let Some(field) = Field::parse(name) else {
            // D17: ignored, but listed so `explain` shows it.
            findings.warn(n, &format!("unknown-directive:{}", name.to_ascii_lowercase()), || {
                format!("'{name}' is not a directive of this draft; ignored")
            });
            return;
        };
        if field.is_header() && self.current.as_ref().is_some_and(|b| b.has_rule) {
            self.close(findings);
        }
        let builder = self.current.get_or_insert_with(|| Builder::new(n, text));
        let group_line = builder.group.first.line;
        match field {
            Field::Scope => builder.scope(n, value, group_line, findings),
            Field::Host => builder.host(n, value, findings),
            Field::UserAgent => builder.user_agent(n, value, findings),
            Field::AllowedMethods | Field::AllowedPurposes => {
                builder.has_rule = true;
                let (tokens, missing_comma) = split_list(value);
                if missing_comma {
                    warn_missing_comma(n, findings);
                }
                let list = if field == Field::AllowedMethods {
                    check_methods(n, &tokens, group_line, findings);
                    &mut builder.group.methods
                } else {
                    &mut builder.group.purposes
                };
                add_line(list.get_or_insert_with(AllowedList::default), n, text, tokens);
            }
        }
    }

    fn close(&mut self, findings: &mut Findings) {
        let Some(builder) = self.current.take() else { return };
        let first = builder.group.first.line;
        if builder.ignored {
            return;
        }
        if builder.group.scopes.is_empty() {
            findings.warn(first, "group-without-scope", || {
                "this group has no scope line, so it is ignored (a group MUST contain at least one scope)".to_owned()
            });
            return;
        }
        if builder.group.methods.is_none() {
            findings.warn(first, "group-without-allowed-methods", || {
                "this group has no allowed-methods line: every method is disallowed in its scope".to_owned()
            });
        }
        self.groups.push(builder.group);
    }

    fn finish(mut self, findings: &mut Findings) -> Vec<Group> {
        self.close(findings);
        self.groups
    }
}

impl Builder {
    fn new(n: u32, text: &str) -> Self {
        Builder {
            group: Group {
                first: RuleLine { line: n, text: Arc::from(text) },
                scopes: Vec::new(),
                hosts: Vec::new(),
                agents: Vec::new(),
                any_agent: true,
                methods: None,
                purposes: None,
            },
            has_rule: false,
            has_agent_line: false,
            ignored: false,
        }
    }

    /// D6: a scope starts with `/`; `*` alone means `/`; empty is ignored; anything else
    /// (an authority, a relative path) has no known meaning and the group is ignored.
    fn scope(&mut self, n: u32, value: &str, group_line: u32, findings: &mut Findings) {
        match value {
            "" => findings.warn(n, "empty-scope", || "empty scope ignored".to_owned()),
            "*" => self.group.scopes.push(Pattern::new("/")),
            _ if value.starts_with('/') => self.group.scopes.push(Pattern::new(value)),
            _ => {
                self.ignored = true;
                findings.warn(n, "scope-not-a-path", || {
                    format!(
                        "scope '{value}' does not start with '/'; its meaning is unknown, so the group at line \
                         {group_line} is ignored"
                    )
                });
            }
        }
    }

    fn host(&mut self, n: u32, value: &str, findings: &mut Findings) {
        if value.is_empty() {
            findings.warn(n, "empty-host", || "empty host ignored".to_owned());
            return;
        }
        if !value.is_ascii() {
            findings.warn(n, "host-not-a-label", || {
                format!("host '{value}' is not ASCII: write its A-label (xn--) form; as written it matches no host")
            });
        }
        self.group.hosts.push(HostPattern::new(value));
    }

    /// D9: a comma list or repeated lines form a union; `*` matches every agent.
    fn user_agent(&mut self, n: u32, value: &str, findings: &mut Findings) {
        let (tokens, missing_comma) = split_list(value);
        if tokens.is_empty() {
            findings.warn(n, "empty-user-agent", || "empty user-agent ignored".to_owned());
            return;
        }
        if missing_comma {
            warn_missing_comma(n, findings);
        }
        if !self.has_agent_line {
            self.has_agent_line = true;
            self.group.any_agent = false;
        }
        for token in tokens {
            if token == "*" {
                self.group.any_agent = true;
                continue;
            }
            if !token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
                findings.warn(n, "user-agent-token", || {
                    format!(
                        "user-agent '{token}' is not a product token (letters, digits, '-', '_'); it may never match"
                    )
                });
            }
            self.group.agents.push(token.to_owned());
        }
    }
}

/// Adds one `allowed-methods` or `allowed-purposes` line to its list (a union, D12/D13).
fn add_line(list: &mut AllowedList, n: u32, text: &str, tokens: Vec<&str>) {
    let at = list.lines.len();
    list.lines.push(RuleLine { line: n, text: Arc::from(text) });
    list.tokens.extend(tokens.into_iter().map(|t| (t.to_owned(), at)));
}

/// Lint for `allowed-methods` tokens: D5 case warning, RFC 9110 token syntax, empty lists.
fn check_methods(n: u32, tokens: &[&str], group_line: u32, findings: &mut Findings) {
    if tokens.is_empty() {
        findings.warn(n, "empty-allowed-methods", || {
            format!("empty allowed-methods: no method is allowed in the group at line {group_line}")
        });
    }
    for token in tokens {
        if !is_token(token) {
            findings
                .warn(n, "invalid-method", || format!("'{token}' is not an HTTP method token; it matches no request"));
        } else if token.bytes().any(|b| b.is_ascii_lowercase()) {
            findings.warn(n, "method-not-uppercase", || {
                format!("method '{token}' is compared case-insensitively; write it as '{}'", token.to_ascii_uppercase())
            });
        }
    }
}

fn warn_missing_comma(n: u32, findings: &mut Findings) {
    findings.warn(n, "list-missing-comma", || "list items separated by whitespace; separate them with ','".to_owned());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantics_d3_d4_comments() {
        let cases: &[(&str, bool, &str, bool, bool)] = &[
            // line, in comment before, text kept, in comment after, opened here
            ("scope: /a # note", false, "scope: /a ", false, false),
            ("get, head <!-- note -->", false, "get, head ", false, true),
            ("a <!-- x --> b <!-- y", false, "a  b ", true, true),
            ("still inside", true, "", true, false),
            ("end --> scope: /", true, " scope: /", false, false),
            ("a # <!-- not a comment opener", false, "a ", false, false),
            ("<!-- # --> b", false, " b", false, true),
        ];
        for &(line, before, kept, after, opened) in cases {
            let mut state = before;
            let (text, was_opened) = strip_comments(line, &mut state);
            assert_eq!((text.as_ref(), state, was_opened), (kept, after, opened), "{line:?}");
        }
    }

    #[test]
    fn comma_lists_and_whitespace_lists() {
        assert_eq!(split_list("GET, HEAD"), (vec!["GET", "HEAD"], false));
        assert_eq!(split_list(" ,GET,,"), (vec!["GET"], false));
        assert_eq!(split_list("GET HEAD,\tPOST"), (vec!["GET", "HEAD", "POST"], true));
        assert_eq!(split_list(""), (vec![], false));
    }
}
