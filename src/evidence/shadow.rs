//! `agentgate audit shadow --config NEW.toml FILE...`: every logged request decided again
//! under a candidate config, against the policy files as they were served (read from the
//! archive by the digests the record's reasons carry), and the requests whose outcome would
//! change, per agent.
//!
//! The candidate's operator side (egress lists, `[[rules]]`, `bypass_hosts`) and its switches
//! that change what the site files mean (`[robots]`, `[agents_md]`, `[usage]`) apply. What a
//! replay knows: the agent, method, URL (`url.full`, query values redacted unless
//! `[audit] log_query`), purposes and `User-Agent` of the record; the agent's product token
//! and trust level come from the candidate config (an agent id the candidate does not have
//! is decided as its `[agent]`). The site's files are those whose digests the record's
//! reasons name; a file that gave no reason (an allowing robots.txt, say) is replayed as
//! absent, which decides the same unless the candidate changes who the site's rules
//! address (the product token). Records decided outside the policies (rate limits, proxy
//! authentication, errors) are counted, not replayed. Time needs no replaying: the policy
//! core has no clock, and which files were in force is what the digests say.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{EvidenceError, record_digests, verified};
use crate::audit::{LoggedRecord, field, records};
use crate::config::Config;
use crate::explain::{self, ExplainRequest, Operator};
use crate::policy::{FetchOutcome, Policies, Settings};

/// One request whose outcome the candidate changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `event.id`.
    pub id: String,
    /// `http.request.method` and `url.full` as logged.
    pub request: String,
    /// The logged outcome (`event.action`).
    pub before: String,
    /// The outcome under the candidate.
    pub after: &'static str,
    /// The candidate's reasons, `source:line: rule (code)`.
    pub reasons: Vec<String>,
}

/// A record that could not be replayed, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotReplayed {
    /// `event.id`.
    pub id: String,
    /// `agentgate.agent`.
    pub agent: String,
    /// `http.request.method` and `url.full` as logged.
    pub request: String,
    /// Why: a file not archived (or altered), a URL that cannot be decided again.
    pub why: String,
}

/// What `audit shadow` found.
#[derive(Debug, Default)]
pub struct ShadowReport {
    /// Requests decided again.
    pub replayed: u64,
    /// Per agent, the requests whose outcome changes.
    pub changes: BTreeMap<String, Vec<Change>>,
    /// Records that could not be replayed.
    pub not_replayed: Vec<NotReplayed>,
    /// Records decided outside the policies, by outcome: not replayed.
    pub skipped: BTreeMap<String, u64>,
}

impl ShadowReport {
    /// True when some request's outcome changes (the command then exits 1).
    pub fn changed(&self) -> bool {
        self.changes.values().any(|changes| !changes.is_empty())
    }

    /// The report as printed: per agent its changes, a count per change, the records not
    /// replayed and why, and the totals.
    pub fn render(&self, out: &mut impl Write) -> std::io::Result<()> {
        for (agent, changes) in &self.changes {
            writeln!(out, "agent {agent}: {} requests change", changes.len())?;
            let mut counts: BTreeMap<(&str, &str), u64> = BTreeMap::new();
            for change in changes {
                *counts.entry((&change.before, change.after)).or_default() += 1;
                writeln!(out, "  {} -> {}  {}  [{}]", change.before, change.after, change.request, change.id)?;
                for reason in &change.reasons {
                    writeln!(out, "      {reason}")?;
                }
            }
            for ((before, after), count) in counts {
                writeln!(out, "  count {before} -> {after}: {count}")?;
            }
        }
        for record in &self.not_replayed {
            writeln!(out, "not replayable: {}  {}  [{}]: {}", record.agent, record.request, record.id, record.why)?;
        }
        let changed: usize = self.changes.values().map(Vec::len).sum();
        let skipped: Vec<String> = self.skipped.iter().map(|(outcome, n)| format!("{outcome} {n}")).collect();
        let skipped =
            if skipped.is_empty() { String::new() } else { format!(" (not replayed: {})", skipped.join(", ")) };
        writeln!(
            out,
            "{} requests replayed, {changed} change, {} not replayable{skipped}",
            self.replayed,
            self.not_replayed.len()
        )
    }
}

/// Decides every request of `files` again under `config`, the site's files read from
/// `archive_dir`.
///
/// # Errors
/// When a log cannot be read.
pub fn shadow(files: &[PathBuf], config: &Config, archive_dir: &Path) -> Result<ShadowReport, EvidenceError> {
    let (records, _) = records(files)?;
    let mut report = ShadowReport::default();
    let mut operators: HashMap<String, Operator> = HashMap::new();
    let settings = config.policy_settings();
    for record in &records {
        let before = record.outcome();
        if !matches!(before, "allow" | "deny" | "would_deny" | "needs_approval") {
            *report.skipped.entry(before.to_owned()).or_default() += 1;
            continue;
        }
        let agent = record.agent().to_owned();
        let operator = match operators.entry(agent.clone()) {
            std::collections::hash_map::Entry::Occupied(found) => found.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let operator = config.operator(Some(&agent)).or_else(|_| config.operator(None));
                match operator {
                    Ok(operator) => slot.insert(operator),
                    Err(error) => return Err(EvidenceError::Config(error.to_string())),
                }
            }
        };
        match replay(record, operator, settings, archive_dir) {
            Ok(explained) => {
                report.replayed += 1;
                let after = explained.decision.outcome.as_str();
                if !same(before, after) {
                    let reasons = explained.decision.reasons.iter().map(describe).collect();
                    let change = Change {
                        id: record.id().unwrap_or("?").to_owned(),
                        request: request_of(record),
                        before: before.to_owned(),
                        after,
                        reasons,
                    };
                    report.changes.entry(agent).or_default().push(change);
                }
            }
            Err(why) => report.not_replayed.push(NotReplayed {
                id: record.id().unwrap_or("?").to_owned(),
                agent,
                request: request_of(record),
                why,
            }),
        }
    }
    Ok(report)
}

/// True when the logged outcome `before` is what the candidate decides: a monitor run's
/// `would_deny` stands for a deny or a hold for approval.
fn same(before: &str, after: &str) -> bool {
    before == after || (before == "would_deny" && matches!(after, "deny" | "needs_approval"))
}

/// The record decided again: the operator's side first, then the site's files from the
/// archive under the candidate's `settings`, as the gate decides.
fn replay(
    record: &LoggedRecord,
    operator: &Operator,
    settings: Settings,
    archive_dir: &Path,
) -> Result<explain::Explanation, String> {
    let text = |key| record.field(key).and_then(Value::as_str);
    let (Some(method), Some(url)) = (text(field::HTTP_REQUEST_METHOD), text(field::URL_FULL)) else {
        return Err("the record has no http.request.method or url.full".to_owned());
    };
    let agent = operator.agent();
    let logged: Vec<String> = record
        .field(field::PURPOSES)
        .and_then(Value::as_array)
        .map(|p| p.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    let request = ExplainRequest {
        policy_dir: PathBuf::new(),
        user_agent: agent.product_token.clone(),
        agent: Some(record.agent().to_owned()),
        trust_level: agent.trust_level,
        purposes: if logged.is_empty() { agent.purposes.to_vec() } else { logged },
        headers: text(field::USER_AGENT_ORIGINAL).map(|ua| format!("User-Agent: {ua}")).into_iter().collect(),
        method: method.to_owned(),
        url: url.to_owned(),
    };
    if let Some(explained) = explain::explain_operator(&request, operator).map_err(|e| e.to_string())? {
        return Ok(explained);
    }
    let mut served: Vec<(String, FetchOutcome)> = Vec::new();
    let mut host = String::new();
    for digest in record_digests(record) {
        let archived = verified(archive_dir, digest).map_err(|e| e.to_string())?;
        host = super::host_of(&archived.sidecar.origin).to_owned();
        served.push((archived.sidecar.path.clone(), archived.outcome()));
    }
    let read = |path: &'static str, _cap: usize| -> Result<FetchOutcome, std::convert::Infallible> {
        let found = served.iter().find(|(p, _)| p == path).map(|(_, outcome)| outcome.clone());
        Ok(found.unwrap_or_else(FetchOutcome::not_found))
    };
    let host = if host.is_empty() { record.domain().unwrap_or_default().to_owned() } else { host };
    let Ok(policies) = Policies::read(&host, read);
    explain::explain_under(&request, policies, settings).map_err(|e| e.to_string())
}

/// `http.request.method url.full` as logged.
fn request_of(record: &LoggedRecord) -> String {
    let text = |key| record.field(key).and_then(Value::as_str).unwrap_or("?");
    format!("{} {}", text(field::HTTP_REQUEST_METHOD), text(field::URL_FULL))
}

/// A reason as the report prints it: `source:line: rule (code)`.
fn describe(reason: &crate::policy::Reason) -> String {
    let line = reason.line.map(|l| format!(":{l}")).unwrap_or_default();
    format!("{}{line}: {} ({})", reason.source, reason.rule, reason.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_monitor_runs_would_deny_stands_for_a_block() {
        assert!(same("would_deny", "deny") && same("would_deny", "needs_approval") && same("allow", "allow"));
        assert!(!same("would_deny", "allow") && !same("allow", "deny") && !same("deny", "needs_approval"));
    }
}
