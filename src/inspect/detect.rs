//! The detectors: the built-in credential formats ([`BUILT_IN`]) and the operator's own
//! `[[inspect.patterns]]`, run over bytes, and the [`Scanner`] that collects what they find
//! as [`Finding`]s (a detector's name and where, never the value).
//!
//! Never: reads a request, decodes a body (`decode.rs`), or keeps a matched value: a match is
//! only counted, and a name that would show one (a JSON key, a query parameter's name) is
//! withheld from the location.

use std::fmt;
use std::sync::LazyLock;

use regex::bytes::Regex;

use super::pattern::PatternConfig;

/// The built-in detectors, by name: the credential formats agents most often hold (cloud
/// keys, forge and chat tokens, private keys, signed tokens). Each is anchored on a fixed
/// prefix its issuer documents, so ordinary text does not match (docs/inspect.md lists
/// them, and what they miss).
const BUILT_IN: &[(&str, &str)] = &[
    // AWS access key ids: long-lived `AKIA`, temporary (STS) `ASIA`, 16 more of [A-Z2-7]
    // (base32), here [A-Z0-9] to be lenient.
    ("aws_access_key_id", r"(?-u:\b)(?:AKIA|ASIA)[0-9A-Z]{16}(?-u:\b)"),
    // GitHub: classic personal (`ghp_`), OAuth (`gho_`), user-to-server (`ghu_`),
    // server-to-server (`ghs_`) and refresh (`ghr_`) tokens are 36 base62 characters after
    // the prefix; fine-grained personal tokens are `github_pat_` and 82 more.
    ("github_token", r"(?:gh[pousr]_[A-Za-z0-9]{36}|github_pat_[A-Za-z0-9_]{50,})"),
    // GitLab personal, project and group access tokens.
    ("gitlab_token", r"glpat-[A-Za-z0-9_\-]{20,}"),
    // Slack bot (`xoxb-`), user (`xoxp-`), app (`xoxa-`), refresh (`xoxr-`) and legacy
    // workspace (`xoxs-`) tokens.
    ("slack_token", r"xox[abprs]-[A-Za-z0-9\-]{10,}"),
    // A PEM private key of any kind: `-----BEGIN PRIVATE KEY-----`, `RSA`, `EC`, `DSA`,
    // `OPENSSH`, `ENCRYPTED`.
    ("private_key", r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"),
    // A signed JWT: a base64url JSON header and payload (both start `{"`, so `eyJ`) and a
    // signature.
    ("jwt", r"eyJ[A-Za-z0-9_\-]{5,}\.eyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{10,}"),
];

/// The built-in detectors' names, for the config check (an operator pattern may not take one).
pub(crate) fn built_in_names() -> impl Iterator<Item = &'static str> {
    BUILT_IN.iter().map(|(name, _)| *name)
}

/// The built-in detectors, compiled once.
static COMPILED: LazyLock<Vec<(&'static str, Regex)>> = LazyLock::new(|| {
    BUILT_IN
        .iter()
        .map(|(name, pattern)| {
            // The patterns are constants: `detect::tests::every_built_in_detector_compiles`.
            (*name, Regex::new(pattern).expect("the built-in detectors compile"))
        })
        .collect()
});

/// The most findings one request reports: enough to say what and where, bounded however many
/// secrets a body carries.
const MAX_FINDINGS: usize = 16;
/// The longest name (a header, a field path) a location shows, in characters.
const MAX_NAME: usize = 64;

/// One secret found: which detector, and where. Never holds the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The detector's name: a built-in one (`aws_access_key_id`) or an operator pattern's.
    pub detector: String,
    /// Where: `host`, `path`, `query: token`, `header: x-api-key`,
    /// `body: JSON field "credentials.key"`, ...
    pub location: String,
    /// Which part of the request it was found in.
    pub place: Place,
}

/// The part of a request a finding is in: the request target's path or query (which the
/// record and the block answer then withhold), or anywhere else.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// The path.
    Path,
    /// The query.
    Query,
    /// The host, a header or the body.
    Other,
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} in {}", self.detector, self.location)
    }
}

/// Runs every detector over the parts of one request and collects what they find.
pub(crate) struct Scanner<'c> {
    patterns: &'c [PatternConfig],
    /// Literal values with their detector names (the configured secrets' real values).
    literals: &'c [(String, &'c str)],
    findings: Vec<Finding>,
}

impl<'c> Scanner<'c> {
    /// A scanner with the built-in detectors, `patterns` and `literals`.
    pub(crate) fn new(patterns: &'c [PatternConfig], literals: &'c [(String, &'c str)]) -> Self {
        Scanner { patterns, literals, findings: Vec::new() }
    }

    /// The detectors that match `bytes`, built-in ones first.
    fn matching<'s>(&'s self, bytes: &'s [u8]) -> impl Iterator<Item = &'s str> + 's {
        let built_in = COMPILED.iter().filter(|(_, regex)| regex.is_match(bytes)).map(|(name, _)| *name);
        let operator = self.patterns.iter().filter(|p| p.regex().is_match(bytes)).map(|p| p.name.as_str());
        let literal = self
            .literals
            .iter()
            .filter(|(_, value)| memchr::memmem::find(bytes, value.as_bytes()).is_some())
            .map(|(name, _)| name.as_str());
        built_in.chain(operator).chain(literal)
    }

    /// Scans `bytes`, found at `location` (made only when something matched).
    pub(crate) fn scan(&mut self, bytes: &[u8], location: impl Fn() -> String) {
        self.scan_at(bytes, Place::Other, location);
    }

    /// Scans `bytes` of the request target's `place` (path or query).
    pub(crate) fn scan_at(&mut self, bytes: &[u8], place: Place, location: impl Fn() -> String) {
        if bytes.is_empty() || self.findings.len() >= MAX_FINDINGS {
            return;
        }
        let found: Vec<String> = self.matching(bytes).map(str::to_owned).collect();
        for detector in found {
            let finding = Finding { detector, location: location(), place };
            if self.findings.len() < MAX_FINDINGS && !self.findings.contains(&finding) {
                self.findings.push(finding);
            }
        }
    }

    /// A name (a header's, a field path, a parameter's) as a location may show it: quoted
    /// as Rust writes a string (so no control character reaches a log), cut to
    /// [`MAX_NAME`] characters, and `None` when a detector matches the name itself (the
    /// location would show the secret).
    pub(crate) fn shown(&self, name: &[u8]) -> Option<String> {
        if self.matching(name).next().is_some() {
            return None;
        }
        let text = String::from_utf8_lossy(name);
        let mut shown: String = text.chars().take(MAX_NAME).collect();
        if text.chars().count() > MAX_NAME {
            shown.push('…');
        }
        Some(shown.escape_debug().to_string())
    }

    /// What was found, in the order found.
    pub(crate) fn into_findings(self) -> Vec<Finding> {
        self.findings
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The detectors that match `text`, built-in only.
    fn detectors(text: &str) -> Vec<String> {
        let mut scanner = Scanner::new(&[], &[]);
        scanner.scan(text.as_bytes(), || "body".to_owned());
        scanner.into_findings().into_iter().map(|f| f.detector).collect()
    }

    #[test]
    fn every_built_in_detector_compiles() {
        assert_eq!(COMPILED.len(), BUILT_IN.len());
    }

    #[test]
    fn aws_access_key_ids_long_lived_and_temporary() {
        assert_eq!(detectors("key=AKIAIOSFODNN7EXAMPLE&x=1"), ["aws_access_key_id"]);
        assert_eq!(detectors(r#"{"k":"ASIAY34FZKBOKMUTVV7A"}"#), ["aws_access_key_id"]);
        // Too short, lowercase, or inside a longer word: not a key id.
        assert!(detectors("AKIAIOSFODNN7EXAMPL").is_empty());
        assert!(detectors("akiaiosfodnn7example").is_empty());
        assert!(detectors("XAKIAIOSFODNN7EXAMPLEX").is_empty());
    }

    #[test]
    fn github_tokens_of_every_kind() {
        let body = "0123456789abcdefghijABCDEFGHIJ012345";
        for prefix in ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"] {
            assert_eq!(detectors(&format!("token {prefix}{body}")), ["github_token"], "{prefix}");
        }
        let fine_grained = format!("github_pat_11ABCDEFG0{}_{}", "a".repeat(12), "b".repeat(59));
        assert_eq!(detectors(&fine_grained), ["github_token"]);
        assert!(detectors("ghp_short").is_empty());
        assert!(detectors(&format!("ghx_{body}")).is_empty());
    }

    #[test]
    fn gitlab_and_slack_tokens() {
        assert_eq!(detectors("PRIVATE-TOKEN: glpat-xxxxxxxxxxxxxxxxxxxx"), ["gitlab_token"]);
        assert!(detectors("glpat-short").is_empty());
        for prefix in ["xoxb", "xoxp", "xoxa", "xoxr", "xoxs"] {
            assert_eq!(detectors(&format!("{prefix}-1234567890-abcdef")), ["slack_token"], "{prefix}");
        }
        assert!(detectors("xoxz-1234567890-abcdef").is_empty());
    }

    #[test]
    fn private_key_blocks_of_every_kind() {
        for kind in ["", "RSA ", "EC ", "DSA ", "OPENSSH ", "ENCRYPTED "] {
            let pem = format!("-----BEGIN {kind}PRIVATE KEY-----\nMIIEvQIBADANBg\n-----END {kind}PRIVATE KEY-----\n");
            assert_eq!(detectors(&pem), ["private_key"], "{kind}");
        }
        assert!(detectors("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----").is_empty());
        assert!(detectors("-----BEGIN PUBLIC KEY-----").is_empty());
    }

    #[test]
    fn signed_jwts_only() {
        let jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U";
        assert_eq!(detectors(&format!("Bearer {jwt}")), ["jwt"]);
        // An unsigned one (`alg: none`) has no signature: not matched.
        assert!(detectors("eyJhbGciOiJub25lIn0.eyJzdWIiOiIxMjM0In0.").is_empty());
    }

    #[test]
    fn ordinary_text_matches_nothing() {
        let text = "The quick brown fox; AKIA is a prefix; ghp_ too; -----BEGIN NOTHING-----; eyJ.eyJ.";
        assert!(detectors(text).is_empty());
    }

    #[test]
    fn operator_patterns_are_named_and_run_after_the_built_in_ones() {
        let patterns = [PatternConfig::new("internal_token", r"itok_[a-z0-9]{8}").expect("compiles")];
        let mut scanner = Scanner::new(&patterns, &[]);
        scanner.scan(b"a itok_abcd1234 and AKIAIOSFODNN7EXAMPLE", || "header: x".to_owned());
        let found: Vec<String> = scanner.into_findings().iter().map(ToString::to_string).collect();
        assert_eq!(found, ["aws_access_key_id in header: x", "internal_token in header: x"]);
    }

    #[test]
    fn a_name_that_is_a_secret_is_withheld_and_others_are_escaped_and_cut() {
        let scanner = Scanner::new(&[], &[]);
        assert_eq!(scanner.shown(b"AKIAIOSFODNN7EXAMPLE"), None);
        assert_eq!(scanner.shown(b"x-api-key").as_deref(), Some("x-api-key"));
        assert_eq!(scanner.shown(b"a\nb\x1b").as_deref(), Some("a\\nb\\u{1b}"));
        let long = scanner.shown("n".repeat(100).as_bytes()).unwrap_or_default();
        assert_eq!(long.chars().count(), MAX_NAME + 1);
    }

    #[test]
    fn findings_are_bounded_and_not_repeated() {
        let mut scanner = Scanner::new(&[], &[]);
        for i in 0..100 {
            scanner.scan(b"AKIAIOSFODNN7EXAMPLE", || format!("query: p{}", i % 20));
            scanner.scan(b"AKIAIOSFODNN7EXAMPLE", || "body".to_owned());
        }
        let findings = scanner.into_findings();
        assert_eq!(findings.len(), MAX_FINDINGS);
        assert_eq!(findings.iter().filter(|f| f.location == "body").count(), 1);
    }
}
