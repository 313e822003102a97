//! What a policy load says in the run log at `info`: one line per load naming each file
//! fetched and its outcome, and a line for each file that is not a policy at all. Each file's
//! own line (URL, redirects, freshness, time) is at `debug`, in `fetch::get`.
//!
//! Never: decides, fetches or keeps anything.

use super::Origin;
use super::cache::Responses;
use crate::policy::{FetchOutcome, Format};

/// Appends `responses` to a load's one log line: `/robots.txt 200 149 B`, `/agents.txt 404`,
/// `/AGENTS.md failed (timed out)`, separated by `, `. Each file's own line (URL, redirects,
/// freshness, time) is at `debug` (`fetch::get`).
pub(super) fn describe(line: &mut String, responses: &Responses) {
    use std::fmt::Write as _;
    for (path, outcome) in responses.iter() {
        let separator = if line.is_empty() { "" } else { ", " };
        let _ = match outcome {
            FetchOutcome::Response { status, body, over_cap: false, .. } if !body.is_empty() => {
                write!(line, "{separator}{path} {status} {} B", body.len())
            }
            FetchOutcome::Response { status, body, over_cap: true, .. } => {
                write!(line, "{separator}{path} {status} over the cap (first {} B kept)", body.len().saturating_sub(1))
            }
            FetchOutcome::Response { status, .. } => write!(line, "{separator}{path} {status}"),
            FetchOutcome::Failed(error) => write!(line, "{separator}{path} failed ({error})"),
        };
    }
}

/// Says, at `info` and once per change of the file, that a file the origin serves is not a
/// policy (an AGENTS.md written for coding agents, without `## Identity`, C1), so an operator
/// who expected its rules to apply sees why they do not; the origin's `/policies` view shows
/// the same finding.
pub(super) fn say_not_a_policy<F: Format>(origin: &Origin, state: &F::State) {
    for finding in F::report(state).diagnostics.iter().filter(|d| d.code.starts_with("not-a-policy")) {
        tracing::info!(origin = %origin, file = F::PATH, why = %finding.message, "not a policy: none of its rules apply");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::policy::{FetchError, Headers};

    #[test]
    fn a_loads_files_are_told_in_one_line() {
        let response = |body: &str, over_cap| FetchOutcome::Response {
            status: 200,
            headers: Headers::default(),
            body: body.as_bytes().to_vec(),
            over_cap,
        };
        let ok = |body: &str| response(body, false);
        let mut line = String::new();
        describe(&mut line, &Arc::from([("/robots.txt", ok("User-agent: *\n"))]));
        describe(
            &mut line,
            &Arc::from([
                ("/AGENTS.md", FetchOutcome::not_found()),
                ("/.well-known/agents.md", FetchOutcome::Failed(FetchError::Timeout)),
            ]),
        );
        let cut = response("12345", true);
        describe(&mut line, &Arc::from([("/agents.txt", cut)]));
        assert_eq!(
            line,
            "/robots.txt 200 14 B, /AGENTS.md 404, /.well-known/agents.md failed (timed out), /agents.txt 200 over the cap (first 4 B kept)"
        );
    }
}
