//! `agentgate audit summary`: counts from decision logs, grouped by agent, origin, deciding
//! reason or outcome. Reads lines written by any version (unknown outcomes are counted under
//! their own name) from any number of files, plain or gzip'd; a line that is not a record is
//! counted and reported with its file and line number, never fatal.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use comfy_table::{CellAlignment, Table, presets};
use serde::Serialize;

use super::input::{for_each_line, read_lines};
use super::query::{Filter, LoggedRecord, OnePerRequest};
use crate::audit::{AuditError, Outcome, is_checkpoint};

/// How many hosts and reasons each group's top lists keep.
pub(super) const TOP: usize = 10;
/// How many malformed lines the summary quotes (all are counted).
const MALFORMED_SHOWN: usize = 20;

/// What a summary's rows are (`--by`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    /// `agentgate.agent`: the compliance figures of each agent.
    #[default]
    Agent,
    /// The origin of `url.full` (`https://host:port`).
    Origin,
    /// The first reason that decided the block (`source code`); `-` for requests not blocked.
    Reason,
    /// The decision: `event.action` (`event.outcome` in logs written before it).
    Outcome,
    /// The MCP tool called, with its agent and server: `agent host tool` (`agentgate.mcp.tool`,
    /// `,`-joined for a batch); `-` for every other request.
    Tool,
}

impl By {
    /// The name of the row key column.
    fn column(self) -> &'static str {
        match self {
            By::Agent => "agent",
            By::Origin => "origin",
            By::Reason => "deciding reason",
            By::Outcome => "outcome",
            By::Tool => "agent server tool",
        }
    }

    fn key(self, record: &LoggedRecord) -> String {
        match self {
            By::Agent => record.agent().to_owned(),
            By::Origin => record.origin().or(record.domain()).unwrap_or("-").to_owned(),
            By::Reason => record.deciding_reason().unwrap_or_else(|| "-".to_owned()),
            By::Outcome => record.outcome().to_owned(),
            By::Tool => match record.mcp_tool() {
                Some(tool) => format!("{} {} {tool}", record.agent(), record.domain().unwrap_or("-")),
                None => "-".to_owned(),
            },
        }
    }
}

/// What decision logs hold, one row per group. Serializes for `--format json`.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// What the rows are.
    pub by: By,
    /// Requests counted (one per `event.id`; malformed lines and records outside the filter
    /// excluded).
    pub requests: u64,
    /// One row per group, sorted by key.
    pub groups: Vec<GroupSummary>,
    /// Every group together.
    pub total: Counts,
    /// Lines that were not a record.
    pub malformed_lines: u64,
    /// The first malformed lines, with where and why.
    pub malformed: Vec<MalformedLine>,
}

/// One group's counts.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct GroupSummary {
    /// The agent, origin, reason or outcome.
    pub key: String,
    /// Requests per outcome.
    #[serde(flatten)]
    pub counts: Counts,
    /// `url.domain` of requests refused or that would have been (`deny`, `needs_approval`,
    /// `would_deny`), most first.
    pub top_denied_hosts: Vec<Count>,
    /// The reason that decided each `deny`, `needs_approval`, `would_deny` or `rate_limited`
    /// (`source code`), most first: one per block, the reason `--by reason` groups it under.
    /// Reasons that only allowed, and a rule's supporting lines (`robots.group`), are not
    /// counted.
    pub top_reasons: Vec<Count>,
    /// Requests refused (or, in monitor mode, that would have been) for what the site says
    /// about their use (`usage.refused`), per purpose refused (`train-ai`, `search`,
    /// `ai-input`), most first; left out when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub usage_refused: Vec<Count>,
}

/// Requests per outcome: the compliance figures of an evaluation.
#[derive(Debug, Default, Clone, Serialize, PartialEq, Eq)]
pub struct Counts {
    /// Every request.
    pub requests: u64,
    /// `allow`: forwarded.
    pub allowed: u64,
    /// `deny`: refused by a site policy or operator rule (403).
    pub denied: u64,
    /// `needs_approval`: refused until a human approves (403).
    pub needs_approval: u64,
    /// `would_deny`: monitor mode forwarded a request enforce mode would refuse.
    pub would_deny: u64,
    /// `rate_limited`: refused by a limit (429).
    pub rate_limited: u64,
    /// `auth_challenge`: a `407` asking for proxy credentials under `[auth] required`, which
    /// clients such as git answer by sending them; not a refusal.
    pub auth_challenges: u64,
    /// `error`: the request could not be completed (bad request, origin unreachable).
    pub errors: u64,
    /// Outcomes this version does not know, by name.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub other: BTreeMap<String, u64>,
    /// Request body bytes the agents sent (`http.request.body.bytes`).
    pub sent_bytes: u64,
    /// Response body bytes the agents received (`http.response.body.bytes`).
    pub received_bytes: u64,
    /// Responses whose body a byte budget cut short (`agentgate.body.cut: budget`).
    pub budget_cut: u64,
}

impl Counts {
    /// Counts one request with `outcome` (the decision as written, [`LoggedRecord::outcome`]).
    pub(in crate::audit) fn add(&mut self, outcome: &str) {
        self.requests += 1;
        let slot = match Outcome::parse(outcome) {
            Some(Outcome::Allow) => &mut self.allowed,
            Some(Outcome::Deny) => &mut self.denied,
            Some(Outcome::NeedsApproval) => &mut self.needs_approval,
            Some(Outcome::WouldDeny) => &mut self.would_deny,
            Some(Outcome::RateLimited) => &mut self.rate_limited,
            Some(Outcome::AuthChallenge) => &mut self.auth_challenges,
            Some(Outcome::Error) => &mut self.errors,
            None => self.other.entry(outcome.to_owned()).or_default(),
        };
        *slot += 1;
    }

    /// Adds the body bytes `record` says were sent and received.
    fn add_bytes(&mut self, record: &LoggedRecord) {
        self.sent_bytes += record.sent_bytes().unwrap_or(0);
        self.received_bytes += record.received_bytes().unwrap_or(0);
        self.budget_cut += u64::from(record.body_cut() == Some("budget"));
    }

    fn merge(&mut self, other: &Counts) {
        self.requests += other.requests;
        self.sent_bytes += other.sent_bytes;
        self.received_bytes += other.received_bytes;
        self.allowed += other.allowed;
        self.denied += other.denied;
        self.needs_approval += other.needs_approval;
        self.would_deny += other.would_deny;
        self.rate_limited += other.rate_limited;
        self.auth_challenges += other.auth_challenges;
        self.errors += other.errors;
        self.budget_cut += other.budget_cut;
        for (name, count) in &other.other {
            *self.other.entry(name.clone()).or_default() += count;
        }
    }

    /// The cells of a table row, in [`COLUMNS`] order, then one per name in `other`, then
    /// the bytes sent and received ([`BYTE_COLUMNS`]).
    fn cells(&self, other: &[&String]) -> Vec<String> {
        let known = [
            self.requests,
            self.allowed,
            self.denied,
            self.needs_approval,
            self.would_deny,
            self.rate_limited,
            self.auth_challenges,
            self.errors,
        ];
        let unknown = other.iter().map(|name| self.other.get(*name).copied().unwrap_or(0));
        let bytes = [self.sent_bytes, self.received_bytes, self.budget_cut];
        known.into_iter().chain(unknown).chain(bytes).map(|n| n.to_string()).collect()
    }
}

/// The count columns of the table, as [`Counts::cells`] fills them.
const COLUMNS: [&str; 8] =
    ["requests", "allowed", "denied", "needs_approval", "would_deny", "rate_limited", "auth_challenges", "errors"];
/// The byte columns, after the outcomes: bytes sent and received, and bodies a byte budget cut.
const BYTE_COLUMNS: [&str; 3] = ["sent bytes", "received bytes", "budget cut"];

/// A name and how often it occurred.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Count {
    /// A host, or a reason as `source code` (`robots.txt robots.disallow`).
    pub name: String,
    /// Occurrences.
    pub count: u64,
}

/// A line that was skipped because it is not a decision record.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct MalformedLine {
    /// The file it is in.
    pub file: PathBuf,
    /// 1-based line number in that file.
    pub line: u64,
    /// Why it was skipped.
    pub error: String,
}

#[derive(Default)]
struct GroupCounts {
    counts: Counts,
    denied_hosts: HashMap<String, u64>,
    reasons: HashMap<String, u64>,
    usage_refused: HashMap<String, u64>,
}

/// Builds a [`Summary`] from lines of one or more logs, read in order: a forwarded request's
/// decision line may sit in a rotated file and its completed line in the next.
struct Summarizer {
    by: By,
    filter: Filter,
    summary: Summary,
    groups: BTreeMap<String, GroupCounts>,
    requests: OnePerRequest,
}

impl Summarizer {
    fn new(by: By, filter: Filter) -> Self {
        let summary = Summary { by, ..Summary::default() };
        Summarizer { by, filter, summary, groups: BTreeMap::new(), requests: OnePerRequest::default() }
    }

    /// Reads one line; `each` sees the record it counts, if any.
    fn line(&mut self, path: &Path, line: u64, bytes: &[u8], each: &mut impl FnMut(&LoggedRecord)) {
        if bytes.trim_ascii().is_empty() || is_checkpoint(bytes) {
            return;
        }
        match LoggedRecord::parse(bytes) {
            Ok(record) => {
                if let Some(record) = self.requests.next(record) {
                    self.count(&record, each);
                }
            }
            Err(not_a_record) => {
                self.summary.malformed_lines += 1;
                if self.summary.malformed.len() < MALFORMED_SHOWN {
                    let file = path.to_owned();
                    self.summary.malformed.push(MalformedLine { file, line, error: not_a_record.0 });
                }
            }
        }
    }

    fn count(&mut self, record: &LoggedRecord, each: &mut impl FnMut(&LoggedRecord)) {
        if !self.filter.matches(record) {
            return;
        }
        each(record);
        self.summary.requests += 1;
        let group = self.groups.entry(self.by.key(record)).or_default();
        group.counts.add(record.outcome());
        group.counts.add_bytes(record);
        if Outcome::parse(record.outcome()).is_some_and(Outcome::is_denial) {
            let host = record.domain().unwrap_or("(no host)");
            *group.denied_hosts.entry(host.to_owned()).or_default() += 1;
        }
        if let Some(reason) = record.deciding_reason() {
            *group.reasons.entry(reason).or_default() += 1;
        }
        for label in record.usage_refused() {
            *group.usage_refused.entry(label.to_owned()).or_default() += 1;
        }
    }

    fn finish(mut self, each: &mut impl FnMut(&LoggedRecord)) -> Summary {
        // A decision line never completed (the response was cut off) counts on its own.
        for record in &self.requests.unfinished() {
            self.count(record, each);
        }
        let mut summary = self.summary;
        for (key, group) in self.groups {
            summary.total.merge(&group.counts);
            summary.groups.push(GroupSummary {
                key,
                counts: group.counts,
                top_denied_hosts: top(group.denied_hosts),
                top_reasons: top(group.reasons),
                usage_refused: top(group.usage_refused),
            });
        }
        summary
    }
}

/// Summarizes the logs at `paths` (plain or gzip'd, in the order given: oldest rotated file
/// first), one request per `event.id`: a forwarded request may have a decision line without
/// `http.response.status_code` (written before forwarding, `docs/decision-log.md`) and a
/// completed line with the same id; the completed one counts, and a decision line never
/// completed counts on its own. Only records `filter` matches are counted. Blank lines are
/// skipped; lines that are not records are counted and the first ones quoted.
///
/// # Errors
/// [`AuditError::ReadOpen`] or [`AuditError::Read`] when a file cannot be read; malformed
/// content is never an error.
pub fn summarize_files(paths: &[impl AsRef<Path>], by: By, filter: Filter) -> Result<Summary, AuditError> {
    summarize_files_seeing(paths, by, filter, |_| {})
}

/// [`summarize_files`], handing `each` every record it counts (one per request, in the
/// filter), as it counts it: a report that shows more than the counts (`super::scorecard`)
/// reads the same records the counts come from, in one pass.
///
/// # Errors
/// As [`summarize_files`].
pub(super) fn summarize_files_seeing(
    paths: &[impl AsRef<Path>],
    by: By,
    filter: Filter,
    mut each: impl FnMut(&LoggedRecord),
) -> Result<Summary, AuditError> {
    let mut summarizer = Summarizer::new(by, filter);
    for_each_line(paths, |path, line, bytes| summarizer.line(path, line, bytes, &mut each))?;
    Ok(summarizer.finish(&mut each))
}

/// [`summarize_files`] over one reader, by agent, every record: for a log already in memory.
///
/// # Errors
/// [`AuditError::Read`] when reading fails.
pub fn summarize(reader: impl BufRead) -> Result<Summary, AuditError> {
    let mut summarizer = Summarizer::new(By::Agent, Filter::default());
    let mut nothing = |_: &LoggedRecord| {};
    read_lines(Path::new("-"), reader, &mut |path: &Path, line, bytes: &[u8]| {
        summarizer.line(path, line, bytes, &mut nothing)
    })?;
    Ok(summarizer.finish(&mut nothing))
}

/// The `TOP` most frequent names, ties in name order so the output is stable.
fn top(counts: HashMap<String, u64>) -> Vec<Count> {
    let mut all: Vec<Count> = counts.into_iter().map(|(name, count)| Count { name, count }).collect();
    all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    all.truncate(TOP);
    all
}

impl Summary {
    /// The summary as terminal tables: one row per group with a total row, then the top
    /// deciding reasons, the usage refusals per purpose, the top denied hosts and the malformed lines (tables without rows
    /// are left out). Numbers are right-aligned.
    pub fn render_table(&self) -> String {
        let mut out = format!(
            "{} requests in {} groups by {}, {} malformed lines\n",
            self.requests,
            self.groups.len(),
            self.by.column(),
            self.malformed_lines
        );
        let other: Vec<&String> = self.total.other.keys().collect();
        let mut header = vec![self.by.column()];
        header.extend(COLUMNS);
        header.extend(other.iter().map(|name| name.as_str()));
        header.extend(BYTE_COLUMNS);
        let mut rows: Vec<Vec<String>> = self
            .groups
            .iter()
            .map(|group| std::iter::once(group.key.clone()).chain(group.counts.cells(&other)).collect())
            .collect();
        rows.push(std::iter::once("total".to_owned()).chain(self.total.cells(&other)).collect());
        push_table(&mut out, None, &header, rows);

        let tops = |pick: fn(&GroupSummary) -> &Vec<Count>| -> Vec<Vec<String>> {
            let per_group = self.groups.iter().flat_map(|group| pick(group).iter().map(move |c| (group, c)));
            per_group.map(|(group, c)| vec![group.key.clone(), c.name.clone(), c.count.to_string()]).collect()
        };
        if self.by != By::Reason {
            let header = [self.by.column(), "deciding reason", "requests"];
            push_table(&mut out, Some("top reasons for blocks"), &header, tops(|g| &g.top_reasons));
        }
        let header = [self.by.column(), "purpose refused", "requests"];
        push_table(&mut out, Some("usage refusals (usage.refused)"), &header, tops(|g| &g.usage_refused));
        if self.by != By::Origin {
            let header = [self.by.column(), "host", "requests"];
            push_table(&mut out, Some("top denied hosts"), &header, tops(|g| &g.top_denied_hosts));
        }
        let malformed = self
            .malformed
            .iter()
            .map(|m| vec![m.file.display().to_string(), m.line.to_string(), m.error.clone()])
            .collect();
        let title = format!("malformed lines (first {} of {})", self.malformed.len(), self.malformed_lines);
        push_table(&mut out, Some(&title), &["file", "line", "error"], malformed);
        out
    }
}

/// Appends a table (markdown-style borders: it reads in a terminal and pastes into a
/// report), numeric columns right-aligned. A titled table with no rows is left out.
fn push_table(out: &mut String, title: Option<&str>, header: &[&str], rows: Vec<Vec<String>>) {
    if let Some(title) = title {
        if rows.is_empty() {
            return;
        }
        out.push('\n');
        out.push_str(title);
        out.push('\n');
    }
    let mut table = Table::new();
    table.load_style(presets::ASCII_MARKDOWN).set_header(header.iter().copied());
    for (index, column) in table.column_iter_mut().enumerate() {
        let numeric = rows.iter().all(|row| row.get(index).is_some_and(|c| c.parse::<u64>().is_ok()));
        if numeric && !rows.is_empty() {
            column.set_cell_alignment(CellAlignment::Right);
        }
    }
    for row in rows {
        table.add_row(row);
    }
    out.push_str(&table.to_string());
    out.push('\n');
}

#[cfg(test)]
mod tests;
