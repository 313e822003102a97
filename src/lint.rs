//! `agentgate lint`: check policy files the way a compiler checks source, so that site
//! operators can publish files that mean what they intend.
//!
//! Owns: choosing the format of each file (from its name or `--format`), printing each
//! parser's diagnostics as `file:line: severity: message [code]`, and `--fix-hash`, which
//! rewrites an agents.txt hash line in place. Never: decides what a finding means for
//! access (that is the evaluator's), fetches anything.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::policy::{Diagnostic, FORMATS, FormatInfo, Severity, Source, agents_txt};

/// The format a file name implies: the file name of a format (the last segment of
/// [`FormatInfo::file_name`]: `robots.txt`, `agents.txt`, `agents.md`,
/// `automation-preferences.txt`, `tdmrep.json`), in any case, also with a prefix such as
/// `site.robots.txt`.
pub fn format_of(path: &Path) -> Option<FormatInfo> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    FORMATS.iter().copied().find(|format| {
        let file_name = format.file_name();
        let suffix = file_name.rsplit('/').next().unwrap_or_default();
        name == suffix || name.ends_with(&format!(".{suffix}"))
    })
}

/// Reads at most `cap` plus one bytes of `path`, as the fetcher reads a body: the bytes,
/// and whether the file is over the cap (the format's oversize rule then applies). Bounded
/// whatever the file's size.
///
/// # Errors
/// When the file cannot be opened or read.
pub fn read_capped(path: &Path, cap: usize) -> std::io::Result<(Vec<u8>, bool)> {
    use std::io::Read as _;
    let mut body = Vec::new();
    std::fs::File::open(path)?.take(cap as u64 + 1).read_to_end(&mut body)?;
    let over_cap = body.len() > cap;
    Ok((body, over_cap))
}

/// Why a file could not be linted.
#[derive(Debug, thiserror::Error)]
pub enum LintError {
    /// The format cannot be told from the name.
    #[error(
        "{0}: cannot tell the format from the file name; name it robots.txt, agents.txt, AGENTS.md, automation-preferences.txt or tdmrep.json, or pass --format with one of {formats}",
        formats = FORMATS.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
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
pub fn lint_file(path: &Path, format: Option<FormatInfo>, fix_hash: bool) -> Result<FileReport, LintError> {
    let format = format.or_else(|| format_of(path)).ok_or_else(|| LintError::UnknownFormat(path.into()))?;
    let io = |source| LintError::Io { path: path.into(), source };
    let (mut body, over_cap) = read_capped(path, format.max_bytes).map_err(io)?;
    let mut fixed = false;
    if fix_hash {
        if format.source != Source::AgentsTxt {
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
    let mut diagnostics = format.lint(&body);
    diagnostics.sort_by_key(|d| d.line.unwrap_or(0));
    Ok(FileReport { path: path.into(), diagnostics, fixed })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_from_file_name() {
        let f = |n: &str| format_of(Path::new(n)).map(|format| format.source);
        assert_eq!(f("robots.txt"), Some(Source::Robots));
        assert_eq!(f("/x/cnet.robots.txt"), Some(Source::Robots));
        assert_eq!(f("AGENTS.md"), Some(Source::AgentsMd));
        assert_eq!(f("blog.agents.md"), Some(Source::AgentsMd));
        assert_eq!(f("valid-basic.agents.txt"), Some(Source::AgentsTxt));
        assert_eq!(f("automation-preferences.txt"), Some(Source::Autoctl));
        assert_eq!(f("example.tdmrep.json"), Some(Source::Tdmrep));
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
    /// cap gets the format's oversize finding.
    #[test]
    fn files_over_the_fetch_cap_are_reported_as_too_large() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cases = [
            ("agents.txt", "/a ALLOW\n", "too-large"),
            ("AGENTS.md", "# x\n", "too-large"),
            ("robots.txt", "Disallow: /a\n", "over-cap"),
            ("automation-preferences.txt", "# x\n", "too-large"),
        ];
        for (name, line, code) in cases {
            let path = dir.path().join(name);
            let format = format_of(&path).expect("a format's own file name");
            std::fs::write(&path, line.repeat(format.max_bytes / line.len() + 1)).expect("write");
            let report = lint_file(&path, None, false).expect("lint");
            assert!(report.diagnostics.iter().any(|d| d.code == code), "{name}: {}", report.render());
        }
        let agents = dir.path().join("agents.txt");
        assert!(matches!(lint_file(&agents, None, true), Err(LintError::FixHashTooLarge(_))));
    }

    #[test]
    fn an_unknown_name_lists_the_formats_to_pass() {
        let err = lint_file(Path::new("/nonexistent/policy.txt"), None, false).expect_err("no format");
        let message = err.to_string();
        assert!(
            message.ends_with("pass --format with one of robots, agents-txt, agents-md, autoctl, tdmrep"),
            "{message}"
        );
    }

    /// An AGENTS.md without Allowed Actions forbids every write; lint says so once,
    /// for the file, with the fix.
    #[test]
    fn agents_md_without_allowed_actions_is_warned_at_the_file_level() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("AGENTS.md");
        std::fs::write(&path, "# AGENTS.md\n\n## Identity\n- site: example.com\n").expect("write");
        let report = lint_file(&path, None, false).expect("lint");
        let rendered = report.render();
        let line = rendered.lines().find(|l| l.ends_with("[default-actions]")).expect("the warning");
        assert!(line.starts_with(&format!("{}: warning: no `## Allowed Actions` entries", path.display())), "{line}");
        assert!(line.contains("every write (POST") && line.contains("- submit-forms: true"), "{line}");
        assert!(!report.has_errors());

        std::fs::write(
            &path,
            "# AGENTS.md\n\n## Identity\n- site: example.com\n\n## Allowed Actions\n- access-api: true\n",
        )
        .expect("write");
        let report = lint_file(&path, None, false).expect("lint");
        assert!(!report.render().contains("default-actions"), "{}", report.render());
        // A coding-agent AGENTS.md (no Identity) is not a policy: no such warning.
        std::fs::write(&path, "# AGENTS.md\n\nRun `cargo test` before committing.\n").expect("write");
        assert!(!lint_file(&path, None, false).expect("lint").render().contains("default-actions"));
    }

    #[test]
    fn fix_hash_refuses_other_formats() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("robots.txt");
        std::fs::write(&path, "User-agent: *\n").expect("write");
        assert!(matches!(lint_file(&path, None, true), Err(LintError::FixHashFormat(_))));
    }
}
