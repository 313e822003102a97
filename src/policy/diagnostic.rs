//! Line-numbered findings about a policy file, and the per-file report shown by `explain`,
//! `lint` and the decision log. Parsers return these instead of failing.

/// How serious a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// Worth fixing; the file still means what it says.
    Warning,
    /// The file (or a line of it) cannot be used as written.
    Error,
}

impl Severity {
    /// `warning` or `error`, as a compiler prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// One finding about one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Warning or error.
    pub severity: Severity,
    /// 1-based line, when the finding is about one line.
    pub line: Option<u32>,
    /// A stable kebab-case code, e.g. `hash-mismatch`, `unknown-param:foo`.
    pub code: String,
    /// A human message that names the input and, where possible, the fix.
    pub message: String,
}

impl Diagnostic {
    /// A warning.
    pub fn warning(line: Option<u32>, code: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Warning, line, code: code.into(), message: message.into() }
    }

    /// An error.
    pub fn error(line: Option<u32>, code: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic { severity: Severity::Error, line, code: code.into(), message: message.into() }
    }
}

/// The state of one policy file as `explain` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyStatus {
    /// Parsed and in force.
    Valid,
    /// Recognised as this format but broken (what that means for access is per format).
    Malformed,
    /// Not there (404, or no file in `--policy-dir`), or unreachable with no opinion.
    Absent,
    /// Something was served but it is not this format (HTML soft-404, a foreign format).
    NotApplicable,
}

impl PolicyStatus {
    /// The name used in `explain` output.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyStatus::Valid => "valid",
            PolicyStatus::Malformed => "malformed",
            PolicyStatus::Absent => "absent",
            PolicyStatus::NotApplicable => "not_applicable",
        }
    }
}

/// What `explain` says about one file: status, digest, findings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyReport {
    /// Valid, malformed, absent or not applicable.
    pub status: PolicyStatus,
    /// For agents.txt the draft's content digest (SHA-256 of the directive lines); for the
    /// other files the SHA-256 of the bytes served. `None` when there is no file.
    pub digest: Option<std::sync::Arc<str>>,
    /// Every finding, warnings and errors, in line order.
    pub diagnostics: Vec<Diagnostic>,
}

impl PolicyReport {
    /// A report for a file that is not there.
    pub fn absent() -> Self {
        PolicyReport { status: PolicyStatus::Absent, digest: None, diagnostics: Vec::new() }
    }
}
