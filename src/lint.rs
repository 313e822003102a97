//! `agentgate lint`: check policy files the way a compiler checks source, so that site
//! operators can publish files that mean what they intend.
//!
//! Owns: choosing the format of each file (from its name or `--format`), printing each
//! parser's diagnostics as `file:line: severity: message [code]`, and `--fix-hash`, which
//! rewrites an agents.txt hash line in place. Never: decides what a finding means for
//! access (that is the evaluator's), fetches anything.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::policy::{Diagnostic, Severity, agents_md, agents_txt, autoctl, robots};

/// The four policy file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// robots.txt (RFC 9309).
    Robots,
    /// agents.txt (draft-srijal-agents-policy-00).
    AgentsTxt,
    /// AGENTS.md (AGENTS-MD-SPEC-001).
    AgentsMd,
    /// automation-preferences.txt (draft-liao-aipref-autoctl-core).
    Autoctl,
}

impl Format {
    /// The format a file name implies: `robots.txt`, `agents.txt`, `AGENTS.md`/`agents.md`
    /// and `automation-preferences.txt`, also with a prefix such as `site.robots.txt`.
    pub fn from_file_name(path: &Path) -> Option<Format> {
        let name = path.file_name()?.to_str()?.to_ascii_lowercase();
        [
            ("robots.txt", Format::Robots),
            ("agents.txt", Format::AgentsTxt),
            ("agents.md", Format::AgentsMd),
            ("automation-preferences.txt", Format::Autoctl),
        ]
        .into_iter()
        .find(|(suffix, _)| name == *suffix || name.ends_with(&format!(".{suffix}")))
        .map(|(_, format)| format)
    }

    /// The format's size cap, the one the fetcher applies (SEMANTICS X6, B23, C4, D15):
    /// a file is read up to this many bytes plus one, as a fetch reads it.
    pub fn max_bytes(self) -> usize {
        match self {
            Format::Robots => robots::MAX_BYTES,
            Format::AgentsTxt => agents_txt::MAX_BYTES,
            Format::AgentsMd => agents_md::MAX_BYTES,
            Format::Autoctl => autoctl::MAX_BYTES,
        }
    }

    /// Reads at most [`Format::max_bytes`] plus one bytes of `path`, as the fetcher reads a
    /// body: the bytes, and whether the file is over the cap (the format's oversize rule
    /// then applies). Bounded whatever the file's size.
    ///
    /// # Errors
    /// When the file cannot be opened or read.
    pub fn read_capped(self, path: &Path) -> std::io::Result<(Vec<u8>, bool)> {
        use std::io::Read as _;
        let cap = self.max_bytes();
        let mut body = Vec::new();
        std::fs::File::open(path)?.take(cap as u64 + 1).read_to_end(&mut body)?;
        let over_cap = body.len() > cap;
        Ok((body, over_cap))
    }

    fn diagnostics(self, body: &[u8]) -> Vec<Diagnostic> {
        match self {
            Format::Robots => robots::lint(body),
            Format::AgentsTxt => agents_txt::lint(body),
            Format::AgentsMd => agents_md::lint(body),
            Format::Autoctl => autoctl::lint(body),
        }
    }
}

/// Why a file could not be linted.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// The format cannot be told from the name.
    #[error(
        "{0}: cannot tell the format from the file name; name it robots.txt, agents.txt, AGENTS.md or automation-preferences.txt, or pass --format"
    )]
    UnknownFormat(PathBuf),
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `--fix-hash` on something other than agents.txt.
    #[error("{0}: --fix-hash only applies to agents.txt files")]
    FixHashFormat(PathBuf),
    /// `--fix-hash` on an agents.txt over the cap: agents never verify its hash (B23).
    #[error(
        "{0}: --fix-hash: the file is larger than {max} KiB, so agents never verify its hash; shorten it first",
        max = agents_txt::MAX_BYTES / 1024
    )]
    FixHashTooLarge(PathBuf),
}

/// The result of linting one file.
#[derive(Debug)]
pub struct FileReport {
    /// The file.
    pub path: PathBuf,
    /// Its findings, in line order.
    pub diagnostics: Vec<Diagnostic>,
    /// True when `--fix-hash` rewrote the file.
    pub fixed: bool,
}

impl FileReport {
    /// True when any finding is an error.
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(|d| d.severity == Severity::Error)
    }

    /// Compiler-style lines: `path:line: severity: message [code]`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let path = self.path.display();
        if self.fixed {
            let _ = writeln!(out, "{path}: hash line rewritten");
        }
        for d in &self.diagnostics {
            let line = d.line.map(|l| format!(":{l}")).unwrap_or_default();
            let _ = writeln!(out, "{path}{line}: {}: {} [{}]", d.severity.as_str(), d.message, d.code);
        }
        out
    }
}

/// Lints one file; with `fix_hash`, first rewrites an agents.txt hash line so the file
/// verifies, then lints the result. The file is read as the fetcher reads it: up to the
/// format's cap plus one byte, so a file over the cap gets the format's oversize finding.
///
/// # Errors
/// When the format is unknown, the file cannot be read or written, or `fix_hash` is asked
/// of a file that is not agents.txt.
pub fn lint_file(path: &Path, format: Option<Format>, fix_hash: bool) -> Result<FileReport, LintError> {
    let format =
        format.or_else(|| Format::from_file_name(path)).ok_or_else(|| LintError::UnknownFormat(path.into()))?;
    let io = |source| LintError::Io { path: path.into(), source };
    let (mut body, over_cap) = format.read_capped(path).map_err(io)?;
    let mut fixed = false;
    if fix_hash {
        if format != Format::AgentsTxt {
            return Err(LintError::FixHashFormat(path.into()));
        }
        if over_cap {
            return Err(LintError::FixHashTooLarge(path.into()));
        }
        let rewritten = agents_txt::fix_hash(&body);
        if rewritten != body {
            std::fs::write(path, &rewritten).map_err(io)?;
            body = rewritten;
            fixed = true;
        }
    }
    let mut diagnostics = format.diagnostics(&body);
    diagnostics.sort_by_key(|d| d.line.unwrap_or(0));
    Ok(FileReport { path: path.into(), diagnostics, fixed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_from_file_name() {
        let f = |n: &str| Format::from_file_name(Path::new(n));
        assert_eq!(f("robots.txt"), Some(Format::Robots));
        assert_eq!(f("/x/cnet.robots.txt"), Some(Format::Robots));
        assert_eq!(f("AGENTS.md"), Some(Format::AgentsMd));
        assert_eq!(f("blog.agents.md"), Some(Format::AgentsMd));
        assert_eq!(f("valid-basic.agents.txt"), Some(Format::AgentsTxt));
        assert_eq!(f("automation-preferences.txt"), Some(Format::Autoctl));
        assert_eq!(f("notes.txt"), None);
        assert_eq!(f("myrobots.txt"), None);
    }

    #[test]
    fn fix_hash_rewrites_a_mismatched_agents_txt() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("agents.txt");
        let wrong = format!("*{}\n/admin DISALLOW\n", "0".repeat(64));
        std::fs::write(&path, wrong).expect("write");
        let before = lint_file(&path, None, false).expect("lint");
        assert!(before.has_errors(), "a wrong hash is an error: {}", before.render());
        let after = lint_file(&path, None, true).expect("fix");
        assert!(after.fixed);
        assert!(!after.has_errors(), "{}", after.render());
        let again = lint_file(&path, None, false).expect("lint");
        assert!(!again.has_errors(), "{}", again.render());
    }

    /// SEMANTICS X6, B23, C4, D15: lint reads a file as the fetcher does, so a file over the
    /// cap gets the format's oversize finding (issue 9).
    #[test]
    fn files_over_the_fetch_cap_are_reported_as_too_large() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cases = [
            ("agents.txt", Format::AgentsTxt, "/a ALLOW\n", "too-large"),
            ("AGENTS.md", Format::AgentsMd, "# x\n", "too-large"),
            ("robots.txt", Format::Robots, "Disallow: /a\n", "over-cap"),
            ("automation-preferences.txt", Format::Autoctl, "# x\n", "too-large"),
        ];
        for (name, format, line, code) in cases {
            let path = dir.path().join(name);
            std::fs::write(&path, line.repeat(format.max_bytes() / line.len() + 1)).expect("write");
            let report = lint_file(&path, None, false).expect("lint");
            assert!(report.diagnostics.iter().any(|d| d.code == code), "{name}: {}", report.render());
        }
        let agents = dir.path().join("agents.txt");
        assert!(matches!(lint_file(&agents, None, true), Err(LintError::FixHashTooLarge(_))));
    }

    #[test]
    fn fix_hash_refuses_other_formats() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("robots.txt");
        std::fs::write(&path, "User-agent: *\n").expect("write");
        assert!(matches!(lint_file(&path, None, true), Err(LintError::FixHashFormat(_))));
    }
}
