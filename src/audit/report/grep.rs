//! `agentgate audit grep`: the records of decision logs that match a [`Filter`], printed
//! as the JSON lines they are, so the output is itself a decision log (for `jq`, a SIEM, or
//! `audit summary -`).
//!
//! Never: rewrites a line, or stops at a line that is not a record (it is counted).

use std::io::Write;
use std::path::Path;

use super::AuditError;
use super::input::for_each_line;
use super::query::{Filter, LoggedRecord};
use super::summary::MalformedLine;

/// What [`grep`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct GrepReport {
    /// Lines written to the output.
    pub matched: u64,
    /// Lines that were not a record (blank lines are not counted).
    pub malformed_lines: u64,
    /// The first malformed line, to show where.
    pub first_malformed: Option<MalformedLine>,
}

/// Writes every line of the logs at `paths` (plain or gzip'd, in order) whose record matches
/// `filter` to `out`, unchanged, each with its `\n`. Both lines of a forwarded request
/// (decision and completed) match alike.
///
/// # Errors
/// [`AuditError::ReadOpen`] or [`AuditError::Read`] when a file cannot be read, and
/// [`AuditError::Output`] when `out` refuses a write (a closed pipe ends the search).
pub fn grep(paths: &[impl AsRef<Path>], filter: &Filter, out: &mut impl Write) -> Result<GrepReport, AuditError> {
    let mut report = GrepReport::default();
    let mut failed = None;
    for_each_line(paths, |path, line, bytes| {
        if failed.is_some() || bytes.trim_ascii().is_empty() {
            return;
        }
        match LoggedRecord::parse(bytes) {
            Ok(record) if filter.matches(&record) => match out.write_all(bytes).and_then(|()| out.write_all(b"\n")) {
                Ok(()) => report.matched += 1,
                Err(error) => failed = Some(error),
            },
            Ok(_) => {}
            Err(not_a_record) => {
                report.malformed_lines += 1;
                report.first_malformed.get_or_insert_with(|| MalformedLine {
                    file: path.to_owned(),
                    line,
                    error: not_a_record.0,
                });
            }
        }
    })?;
    match failed {
        Some(source) => Err(AuditError::Output { source }),
        None => Ok(report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_matching_lines_unchanged_and_counts_the_rest() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let lines = [
            r#"{"agentgate.agent":"alpha","event.outcome":"deny","url.full":"https://a.example/x"}"#,
            r#"{"agentgate.agent":"beta","event.outcome":"deny","url.full":"https://a.example/y"}"#,
            "garbage",
            "",
            r#"{"agentgate.agent":"alpha","event.outcome":"allow",  "url.full":"https://b.example/"}"#,
        ];
        std::fs::write(&path, lines.join("\n")).expect("writes");
        let filter = Filter { agents: vec!["alpha".to_owned()], ..Filter::default() };
        let mut out = Vec::new();
        let report = grep(&[&path], &filter, &mut out).expect("reads");
        assert_eq!(String::from_utf8_lossy(&out), format!("{}\n{}\n", lines[0], lines[4]), "as written, spaces kept");
        assert_eq!(report.matched, 2);
        assert_eq!(report.malformed_lines, 1);
        let first = report.first_malformed.expect("one");
        assert_eq!((first.file, first.line), (path.clone(), 3));

        let filter =
            Filter { outcomes: vec!["deny".to_owned()], origins: vec!["https://a.example".to_owned()], ..filter };
        let mut out = Vec::new();
        grep(&[&path], &filter, &mut out).expect("reads");
        assert_eq!(String::from_utf8_lossy(&out), format!("{}\n", lines[0]));
    }

    #[test]
    fn a_refused_write_is_an_error() {
        struct Closed;
        impl Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        std::fs::write(&path, r#"{"agentgate.agent":"a","event.outcome":"allow"}"#).expect("writes");
        let err = grep(&[&path], &Filter::default(), &mut Closed).expect_err("the pipe is closed");
        assert!(matches!(err, AuditError::Output { .. }), "{err:?}");
    }
}
