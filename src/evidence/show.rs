//! `agentgate audit show EVENT_ID FILE...`: one request's record, and for each reason that
//! names a policy file's digest, the file's text around the deciding line, read from the
//! policy archive and checked against the digest.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{EvidenceError, reasons, verified};
use crate::audit::records;

/// Lines shown before and after the deciding line.
const CONTEXT: usize = 3;

/// Prints the record of `event_id` found in `files` and, for each reason with a digest, the
/// archived file around its line (from `archive_dir`), or why it cannot be shown. `false`
/// when no record has that id.
///
/// # Errors
/// When a log cannot be read or the output refuses a write.
pub fn show(
    files: &[PathBuf],
    event_id: &str,
    archive_dir: &Path,
    out: &mut impl Write,
) -> Result<bool, EvidenceError> {
    let (records, _) = records(files)?;
    let Some(record) = records.iter().find(|r| r.id() == Some(event_id)) else { return Ok(false) };
    writeln!(out, "{}", record.to_line())?;
    for reason in reasons(record) {
        let part = |key| reason.get(key).and_then(Value::as_str).unwrap_or("?");
        let line = reason.get("line").and_then(Value::as_u64);
        let at = line.map(|l| format!(":{l}")).unwrap_or_default();
        let blocking = if reason.get("blocking").and_then(Value::as_bool) == Some(true) { " (blocking)" } else { "" };
        writeln!(out, "\nreason {}{at} {}: {}{blocking}", part("source"), part("code"), part("rule"))?;
        let Some(digest) = reason.get("digest").and_then(Value::as_str) else {
            writeln!(out, "  no policy file (the operator's config or agentgate itself decided)")?;
            continue;
        };
        match verified(archive_dir, digest) {
            Ok(archived) => {
                let s = &archived.sidecar;
                writeln!(
                    out,
                    "  {} {} served {} B, first archived {} (from {}), sha256 {digest} matches the archived body",
                    s.url, s.status, s.bytes, s.fetched_at, s.from
                )?;
                for (name, value) in &s.validators {
                    writeln!(out, "  {name}: {value}")?;
                }
                excerpt(&String::from_utf8_lossy(&archived.body), line, out)?;
            }
            Err(error) => writeln!(out, "  {error}")?,
        }
    }
    Ok(true)
}

/// The lines of `text` around `line` (1-based), numbered, the line itself marked `>`; the
/// first lines when the reason names none; control characters replaced.
fn excerpt(text: &str, line: Option<u64>, out: &mut impl Write) -> std::io::Result<()> {
    let target = line.and_then(|l| usize::try_from(l).ok()).unwrap_or(0);
    let first = target.saturating_sub(CONTEXT).max(1);
    let last = if target == 0 { 2 * CONTEXT + 1 } else { target + CONTEXT };
    for (number, text) in text.split('\n').enumerate().map(|(i, l)| (i + 1, l.trim_end_matches('\r'))) {
        if (first..=last).contains(&number) {
            let mark = if number == target { ">" } else { " " };
            // Policy text is the site's: no control character reaches the terminal.
            let text: String = text.chars().map(|c| if c.is_control() && c != '\t' { '\u{fffd}' } else { c }).collect();
            writeln!(out, "  {mark} {number:>4} | {text}")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deciding_line_is_marked_with_its_neighbours() {
        let text = "a\nb\nc\nd\ne\nf\ng\nh\ni\n";
        let mut out = Vec::new();
        excerpt(text, Some(5), &mut out).expect("written to memory");
        let shown = String::from_utf8(out).expect("UTF-8");
        assert_eq!(
            shown,
            "       2 | b\n       3 | c\n       4 | d\n  >    5 | e\n       6 | f\n       7 | g\n       8 | h\n"
        );
        let mut out = Vec::new();
        excerpt("User-agent: *\r\nDisallow: /x\u{1b}[2J\tend\r\n", Some(2), &mut out).expect("written to memory");
        let shown = String::from_utf8(out).expect("UTF-8");
        assert_eq!(
            shown, "       1 | User-agent: *\n  >    2 | Disallow: /x\u{fffd}[2J\tend\n       3 | \n",
            "no escape reaches a terminal"
        );
    }
}
