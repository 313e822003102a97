//! `agentgate audit grep`: the records of decision logs that match a [`Filter`], printed
//! as the JSON lines they are, so the output is itself a decision log (for `jq`, a SIEM, or
//! `audit summary -`). By default one line per request, as `audit summary` counts them: a
//! forwarded request's end line merged with its decision line (the end line carries what the
//! end adds, the decision line the decision), or its decision line alone when it was never
//! completed; [`GrepLines::Raw`] (`--raw`) prints every
//! matching line as written, both lines of a forwarded request included.
//!
//! Never: rewrites a line other than by that merge, or stops at a line that is not a record
//! (it is counted).

use std::borrow::Borrow;
use std::io::{self, Write};
use std::path::Path;

use super::input::for_each_line;
use super::query::{Completed, Filter, LoggedRecord, OnePerRequest};
use super::summary::MalformedLine;
use crate::audit::{AuditError, is_checkpoint};

/// Which lines [`grep`] prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum GrepLines {
    /// One line per request (the default): a forwarded request's completed line in the place
    /// it was written, or its decision line when it was never completed (those come last, by
    /// `event.id`); a blocked request's one line.
    #[default]
    PerRequest,
    /// Every matching line as written (`--raw`): a forwarded request has two, its decision
    /// line and its completed line, with the same `event.id`.
    Raw,
}

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

/// A record with the bytes it was read from, printed unchanged.
struct Line {
    record: LoggedRecord,
    bytes: Vec<u8>,
}

impl Borrow<LoggedRecord> for Line {
    fn borrow(&self) -> &LoggedRecord {
        &self.record
    }
}

impl Completed for Line {
    /// The end line as written when it holds every field of its decision line (lines
    /// written whole); else the two merged, in the schema's order.
    fn completed_by(self, end: Line) -> Line {
        if !self.record.adds_to(&end.record) {
            return end;
        }
        let record = self.record.completed_by(end.record);
        let bytes = record.to_json_line();
        Line { record, bytes }
    }
}

/// Prints the lines whose record matches, until `out` refuses a write.
struct Printer<'a, W> {
    filter: &'a Filter,
    out: &'a mut W,
    report: GrepReport,
    failed: Option<io::Error>,
}

impl<W: Write> Printer<'_, W> {
    fn print(&mut self, record: &LoggedRecord, bytes: &[u8]) {
        if self.failed.is_some() || !self.filter.matches(record) {
            return;
        }
        match self.out.write_all(bytes).and_then(|()| self.out.write_all(b"\n")) {
            Ok(()) => self.report.matched += 1,
            Err(error) => self.failed = Some(error),
        }
    }
}

/// Writes the lines of the logs at `paths` (plain or gzip'd, in order) whose record matches
/// `filter` to `out`, unchanged, each with its `\n`: one per request, or every line as
/// written, as `lines` says.
///
/// # Errors
/// [`AuditError::ReadOpen`] or [`AuditError::Read`] when a file cannot be read, and
/// [`AuditError::Output`] when `out` refuses a write (a closed pipe ends the search).
pub fn grep(
    paths: &[impl AsRef<Path>],
    filter: &Filter,
    lines: GrepLines,
    out: &mut impl Write,
) -> Result<GrepReport, AuditError> {
    let mut printer = Printer { filter, out, report: GrepReport::default(), failed: None };
    let mut requests = OnePerRequest::<Line>::default();
    for_each_line(paths, |path, line, bytes| {
        if printer.failed.is_some() || bytes.trim_ascii().is_empty() || is_checkpoint(bytes) {
            return;
        }
        match LoggedRecord::parse(bytes) {
            Ok(record) if lines == GrepLines::Raw => printer.print(&record, bytes),
            Ok(record) => {
                if let Some(line) = requests.next(Line { record, bytes: bytes.to_vec() }) {
                    printer.print(&line.record, &line.bytes);
                }
            }
            Err(not_a_record) => {
                printer.report.malformed_lines += 1;
                printer.report.first_malformed.get_or_insert_with(|| MalformedLine {
                    file: path.to_owned(),
                    line,
                    error: not_a_record.0,
                });
            }
        }
    })?;
    for line in requests.unfinished() {
        printer.print(&line.record, &line.bytes);
    }
    match printer.failed {
        Some(source) => Err(AuditError::Output { source }),
        None => Ok(printer.report),
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
        let report = grep(&[&path], &filter, GrepLines::PerRequest, &mut out).expect("reads");
        assert_eq!(String::from_utf8_lossy(&out), format!("{}\n{}\n", lines[0], lines[4]), "as written, spaces kept");
        assert_eq!(report.matched, 2);
        assert_eq!(report.malformed_lines, 1);
        let first = report.first_malformed.expect("one");
        assert_eq!((first.file, first.line), (path.clone(), 3));

        let filter =
            Filter { outcomes: vec!["deny".to_owned()], origins: vec!["https://a.example".to_owned()], ..filter };
        let mut out = Vec::new();
        grep(&[&path], &filter, GrepLines::PerRequest, &mut out).expect("reads");
        assert_eq!(String::from_utf8_lossy(&out), format!("{}\n", lines[0]));
    }

    #[test]
    fn one_line_per_request_unless_raw() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (older, newer) = (dir.path().join("decisions.jsonl.1"), dir.path().join("decisions.jsonl"));
        let line = |id: &str, outcome: &str, status: Option<u16>| {
            let status = status.map_or_else(String::new, |s| format!(r#","http.response.status_code":{s}"#));
            format!(r#"{{"event.id":"{id}","agentgate.agent":"a","event.outcome":"{outcome}"{status}}}"#)
        };
        // 01 forwarded (its completed line in the next file), 02 blocked (one line), 03
        // forwarded and never completed, 04 forwarded and completed as an error.
        let (decided_1, completed_1) = (line("01", "allow", None), line("01", "allow", Some(200)));
        let (blocked_2, unfinished_3) = (line("02", "deny", Some(403)), line("03", "allow", None));
        let (decided_4, failed_4) = (line("04", "allow", None), line("04", "error", Some(502)));
        std::fs::write(
            &older,
            format!(
                "{decided_1}
{unfinished_3}
{decided_4}
"
            ),
        )
        .expect("writes");
        std::fs::write(
            &newer,
            format!(
                "{blocked_2}
{failed_4}
{completed_1}
"
            ),
        )
        .expect("writes");
        let run = |filter: &Filter, lines| {
            let mut out = Vec::new();
            let report = grep(&[&older, &newer], filter, lines, &mut out).expect("reads");
            (String::from_utf8(out).expect("UTF-8"), report.matched)
        };
        let every = Filter::default();
        let per_request = format!(
            "{blocked_2}
{failed_4}
{completed_1}
{unfinished_3}
"
        );
        assert_eq!(run(&every, GrepLines::PerRequest), (per_request, 4));
        let raw = format!(
            "{decided_1}
{unfinished_3}
{decided_4}
{blocked_2}
{failed_4}
{completed_1}
"
        );
        assert_eq!(run(&every, GrepLines::Raw), (raw, 6));
        // The filter reads the request's record as completed: 04 ended as an error.
        let errors = Filter { outcomes: vec!["error".to_owned()], ..Filter::default() };
        assert_eq!(
            run(&errors, GrepLines::PerRequest),
            (
                format!(
                    "{failed_4}
"
                ),
                1
            )
        );
        let allowed = Filter { outcomes: vec!["allow".to_owned()], ..Filter::default() };
        assert_eq!(run(&allowed, GrepLines::Raw).1, 4, "as written, 04's decision line was an allow");
    }

    #[test]
    fn an_end_line_that_leaves_the_decision_to_its_start_line_is_printed_merged_in_schema_order() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let start = concat!(
            r#"{"event.id":"01","event.type":["start"],"event.outcome":"allow","agentgate.agent":"a","#,
            r#""url.full":"https://a.example/x","agentgate.reasons":[{"source":"robots.txt","code":"robots.allow"}]}"#
        );
        let end = concat!(
            r#"{"event.id":"01","event.type":["end"],"event.outcome":"allow","agentgate.agent":"a","#,
            r#""url.full":"https://a.example/x","http.response.status_code":200}"#
        );
        std::fs::write(&path, format!("{start}\n{end}\n")).expect("writes");
        let mut out = Vec::new();
        grep(&[&path], &Filter::default(), GrepLines::PerRequest, &mut out).expect("reads");
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            concat!(
                r#"{"event.id":"01","event.type":["end"],"event.outcome":"allow","agentgate.agent":"a","#,
                r#""url.full":"https://a.example/x","http.response.status_code":200,"#,
                r#""agentgate.reasons":[{"code":"robots.allow","source":"robots.txt"}]}"#,
                "\n"
            ),
            "the end line's fields and the decision's, in the order of field::ORDER"
        );
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
        let err =
            grep(&[&path], &Filter::default(), GrepLines::PerRequest, &mut Closed).expect_err("the pipe is closed");
        assert!(matches!(err, AuditError::Output { .. }), "{err:?}");
    }
}
