//! `agentgate audit summary FILE`: per-agent counts from a decision log. Reads lines written
//! by any version (unknown outcomes are counted under their own name); a line that is not a
//! record is counted and reported with its line number, never fatal.

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;

use serde::Serialize;
use serde_json::{Map, Value};

use super::{AuditError, Outcome, field};

/// How many hosts and reasons each agent's top lists keep.
const TOP: usize = 10;
/// How many malformed lines the summary quotes (all are counted).
const MALFORMED_SHOWN: usize = 20;

/// What a decision log holds, per agent. Serializes for `--format json`.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// Records read (malformed and blank lines excluded).
    pub records: u64,
    /// One entry per agent, sorted by agent id.
    pub agents: Vec<AgentSummary>,
    /// Lines that were not a record.
    pub malformed_lines: u64,
    /// The first malformed lines, with why.
    pub malformed: Vec<MalformedLine>,
}

/// One agent's counts.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct AgentSummary {
    /// The `agentgate.agent` value.
    pub agent: String,
    /// Records for this agent.
    pub total: u64,
    /// Records per `event.outcome` value.
    pub outcomes: BTreeMap<String, u64>,
    /// `url.domain` of denied records (`deny`, `needs_approval`, `would_deny`), most first.
    pub top_denied_hosts: Vec<Count>,
    /// `source code` of the reasons on records that were not allowed, most first.
    pub top_reasons: Vec<Count>,
}

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
    /// 1-based line number.
    pub line: u64,
    /// Why it was skipped.
    pub error: String,
}

#[derive(Default)]
struct AgentCounts {
    total: u64,
    outcomes: BTreeMap<String, u64>,
    denied_hosts: HashMap<String, u64>,
    reasons: HashMap<String, u64>,
}

/// Reads a decision log and counts per agent, one request per `event.id`: a forwarded
/// request may have a decision line without `http.response.status_code` (written before
/// forwarding, `docs/decision-log.md`) and a completed line with the same id; the completed
/// one counts, and a decision line never completed (the response was cut off) counts on its
/// own. Blank lines are skipped; lines that are not records (bad JSON or UTF-8, no
/// `agentgate.agent` or `event.outcome`) are counted.
///
/// # Errors
/// [`AuditError::Read`] when reading itself fails; malformed content is never an error.
pub fn summarize(mut reader: impl BufRead) -> Result<Summary, AuditError> {
    let mut summary = Summary::default();
    let mut agents: BTreeMap<String, AgentCounts> = BTreeMap::new();
    let mut buf = Vec::new();
    let mut line_no = 0;
    // Decision lines waiting for their completed line, by `event.id`: as many as requests
    // were in flight together.
    let mut awaiting: HashMap<String, (String, Map<String, Value>)> = HashMap::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => break,
            Ok(_) => line_no += 1,
            Err(source) => return Err(AuditError::Read { line: line_no, source }),
        }
        if buf.trim_ascii().is_empty() {
            continue;
        }
        match parse(&buf) {
            Ok((agent, record)) => {
                let id = record.get(field::EVENT_ID).and_then(Value::as_str).map(str::to_owned);
                match id {
                    Some(id) if !record.contains_key(field::HTTP_RESPONSE_STATUS_CODE) => {
                        awaiting.insert(id, (agent, record));
                    }
                    _ => {
                        if let Some(id) = &id {
                            awaiting.remove(id);
                        }
                        summary.records += 1;
                        count(agents.entry(agent).or_default(), &record);
                    }
                }
            }
            Err(error) => {
                summary.malformed_lines += 1;
                if summary.malformed.len() < MALFORMED_SHOWN {
                    summary.malformed.push(MalformedLine { line: line_no, error });
                }
            }
        }
    }
    for (agent, record) in awaiting.into_values() {
        summary.records += 1;
        count(agents.entry(agent).or_default(), &record);
    }
    summary.agents = agents
        .into_iter()
        .map(|(agent, counts)| AgentSummary {
            agent,
            total: counts.total,
            outcomes: counts.outcomes,
            top_denied_hosts: top(counts.denied_hosts),
            top_reasons: top(counts.reasons),
        })
        .collect();
    Ok(summary)
}

/// The record on one line and its agent, or why the line is not one.
fn parse(line: &[u8]) -> Result<(String, Map<String, Value>), String> {
    let Value::Object(record) = serde_json::from_slice(line).map_err(|err| format!("not JSON: {err}"))? else {
        return Err("not a JSON object".to_owned());
    };
    for required in [field::AGENT, field::EVENT_OUTCOME] {
        if !record.get(required).is_some_and(Value::is_string) {
            return Err(format!("no string \"{required}\""));
        }
    }
    let agent = record.get(field::AGENT).and_then(Value::as_str).unwrap_or_default().to_owned();
    Ok((agent, record))
}

fn count(counts: &mut AgentCounts, record: &Map<String, Value>) {
    let outcome = record.get(field::EVENT_OUTCOME).and_then(Value::as_str).unwrap_or_default();
    counts.total += 1;
    *counts.outcomes.entry(outcome.to_owned()).or_default() += 1;
    if Outcome::parse(outcome).is_some_and(Outcome::is_denial) {
        let host = record.get(field::URL_DOMAIN).and_then(Value::as_str).unwrap_or("(no host)");
        *counts.denied_hosts.entry(host.to_owned()).or_default() += 1;
    }
    if outcome != Outcome::Allow.as_str() {
        let reasons = record.get(field::REASONS).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        for reason in reasons {
            let part = |key| reason.get(key).and_then(Value::as_str).unwrap_or("?");
            *counts.reasons.entry(format!("{} {}", part("source"), part("code"))).or_default() += 1;
        }
    }
}

/// The `TOP` most frequent names, ties in name order so the output is stable.
fn top(counts: HashMap<String, u64>) -> Vec<Count> {
    let mut all: Vec<Count> = counts.into_iter().map(|(name, count)| Count { name, count }).collect();
    all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.name.cmp(&b.name)));
    all.truncate(TOP);
    all
}

impl Summary {
    /// The summary as aligned plain-text tables: outcomes per agent, then top denied
    /// hosts, top reasons and malformed lines (sections without rows are left out).
    pub fn render_text(&self) -> String {
        let mut out = format!(
            "{} records from {} agents, {} malformed lines\n",
            self.records,
            self.agents.len(),
            self.malformed_lines
        );
        // Known outcomes in their usual order, then any this version does not know.
        let mut outcomes: Vec<String> = Outcome::ALL.iter().map(|o| o.as_str().to_owned()).collect();
        for agent in &self.agents {
            for seen in agent.outcomes.keys() {
                if !outcomes.contains(seen) {
                    outcomes.push(seen.clone());
                }
            }
        }
        let mut header = vec!["agent", "total"];
        header.extend(outcomes.iter().map(String::as_str));
        let rows = self.agents.iter().map(|agent| {
            let mut row = vec![agent.agent.clone(), agent.total.to_string()];
            row.extend(outcomes.iter().map(|o| agent.outcomes.get(o).copied().unwrap_or(0).to_string()));
            row
        });
        push_table(&mut out, None, &header, rows.collect());
        let tops = |pick: fn(&AgentSummary) -> &Vec<Count>| -> Vec<Vec<String>> {
            let per_agent = self.agents.iter().flat_map(|agent| pick(agent).iter().map(move |c| (agent, c)));
            per_agent.map(|(agent, c)| vec![agent.agent.clone(), c.name.clone(), c.count.to_string()]).collect()
        };
        push_table(&mut out, Some("top denied hosts"), &["agent", "host", "count"], tops(|a| &a.top_denied_hosts));
        push_table(
            &mut out,
            Some("top reasons (not allowed)"),
            &["agent", "reason", "count"],
            tops(|a| &a.top_reasons),
        );
        let malformed = self.malformed.iter().map(|m| vec![m.line.to_string(), m.error.clone()]).collect();
        let title = format!("malformed lines (first {} of {})", self.malformed.len(), self.malformed_lines);
        push_table(&mut out, Some(&title), &["line", "error"], malformed);
        out
    }
}

/// Appends a table: columns padded to their widest cell, numbers right-aligned. A titled
/// table with no rows is left out.
fn push_table(out: &mut String, title: Option<&str>, header: &[&str], rows: Vec<Vec<String>>) {
    if let Some(title) = title {
        if rows.is_empty() {
            return;
        }
        out.push('\n');
        out.push_str(title);
        out.push('\n');
    }
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|col| {
            let cells = std::iter::once(&header).chain(&rows).filter_map(|row| row.get(col));
            cells.map(|cell| cell.chars().count()).max().unwrap_or(0)
        })
        .collect();
    let numeric: Vec<bool> = (0..header.len())
        .map(|col| !rows.is_empty() && rows.iter().all(|row| row.get(col).is_some_and(|c| c.parse::<u64>().is_ok())))
        .collect();
    for row in std::iter::once(&header).chain(&rows) {
        let cells = row.iter().zip(&widths).zip(&numeric).map(|((cell, &width), &numeric)| {
            if numeric { format!("{cell:>width$}") } else { format!("{cell:<width$}") }
        });
        out.push_str(cells.collect::<Vec<_>>().join("  ").trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Read, Write};

    use super::*;
    use crate::audit::record::sample;
    use crate::audit::{AuditLog, AuditSettings};
    use crate::policy::{Reason, Source};

    /// A log written by the real writer, then damaged by hand.
    async fn write_log(path: &std::path::Path) {
        let (log, writer) =
            AuditLog::start(AuditSettings { path: path.to_path_buf(), ..AuditSettings::default() }).expect("opens");
        let robots = Reason::new(Source::Robots, "robots.disallow", "Disallow: /private").at_line(4);
        let hash = Reason::new(Source::AgentsTxt, "agents_txt.hash_mismatch", "digest differs");
        let records = [
            ("bot-a", Outcome::Allow, "https://ok.example/", vec![robots.clone()]),
            ("bot-a", Outcome::Allow, "https://ok.example/x", vec![]),
            ("bot-a", Outcome::Deny, "https://shop.example/private?q=1", vec![robots.clone()]),
            ("bot-a", Outcome::Deny, "https://shop.example/private/2", vec![robots.clone()]),
            ("bot-a", Outcome::Deny, "https://news.example/", vec![hash.clone()]),
            ("bot-a", Outcome::RateLimited, "https://ok.example/y", vec![]),
            ("crawler-b", Outcome::WouldDeny, "https://news.example/a", vec![hash, robots]),
            ("crawler-b", Outcome::Error, "http://down.example/", vec![]),
        ];
        for (n, (agent, outcome, url, reasons)) in records.into_iter().enumerate() {
            let mut rec = sample(agent, outcome, url);
            rec.reasons = reasons;
            log.record(&rec).await.expect("queued");
            if n == 0 {
                // A forwarded request: its decision line, then the completed line, one request.
                rec.status = Some(200);
                log.record(&rec).await.expect("queued");
            }
        }
        assert_eq!(writer.shutdown().await.written, 9);
        let mut file = std::fs::OpenOptions::new().append(true).open(path).expect("reopens");
        let damage: &[&[u8]] = &[
            b"not json\n",
            b"\n",
            b"{\"event.outcome\":\"deny\"}\n",
            b"[1,2]\n",
            b"{\"agentgate.agent\":\"bot-a\",\"event.outcome\":\"defer\"}\n",
            b"\xff\xfe\n",
            b"{\"agentgate.agent\":\"bot-a\",\"event.out",
        ];
        for bytes in damage {
            file.write_all(bytes).expect("appends");
        }
    }

    fn counts(pairs: &[(&str, u64)]) -> Vec<Count> {
        pairs.iter().map(|(name, count)| Count { name: (*name).to_owned(), count: *count }).collect()
    }

    #[tokio::test]
    async fn summarizes_a_log_from_the_writer_and_skips_malformed_lines() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        write_log(&path).await;
        let file = std::fs::File::open(&path).expect("opens");
        let summary = summarize(BufReader::new(file)).expect("reading works");

        let outcomes = |pairs: &[(&str, u64)]| pairs.iter().map(|(o, n)| ((*o).to_owned(), *n)).collect();
        let malformed = |line, error: &str| MalformedLine { line, error: error.to_owned() };
        let expected = Summary {
            records: 9,
            agents: vec![
                AgentSummary {
                    agent: "bot-a".to_owned(),
                    total: 7,
                    outcomes: outcomes(&[("allow", 2), ("defer", 1), ("deny", 3), ("rate_limited", 1)]),
                    top_denied_hosts: counts(&[("shop.example", 2), ("news.example", 1)]),
                    top_reasons: counts(&[
                        ("robots.txt robots.disallow", 2),
                        ("agents.txt agents_txt.hash_mismatch", 1),
                    ]),
                },
                AgentSummary {
                    agent: "crawler-b".to_owned(),
                    total: 2,
                    outcomes: outcomes(&[("error", 1), ("would_deny", 1)]),
                    top_denied_hosts: counts(&[("news.example", 1)]),
                    top_reasons: counts(&[
                        ("agents.txt agents_txt.hash_mismatch", 1),
                        ("robots.txt robots.disallow", 1),
                    ]),
                },
            ],
            malformed_lines: 5,
            malformed: vec![
                malformed(10, "not JSON: expected ident at line 1 column 2"),
                malformed(12, "no string \"agentgate.agent\""),
                malformed(13, "not a JSON object"),
                malformed(15, "not JSON: expected value at line 1 column 1"),
                malformed(16, "not JSON: EOF while parsing a string at line 1 column 37"),
            ],
        };
        assert_eq!(summary, expected);

        assert_eq!(
            summary.render_text(),
            "\
9 records from 2 agents, 5 malformed lines
agent      total  allow  deny  needs_approval  rate_limited  would_deny  error  defer
bot-a          7      2     3               0             1           0      0      1
crawler-b      2      0     0               0             0           1      1      0

top denied hosts
agent      host          count
bot-a      shop.example      2
bot-a      news.example      1
crawler-b  news.example      1

top reasons (not allowed)
agent      reason                               count
bot-a      robots.txt robots.disallow               2
bot-a      agents.txt agents_txt.hash_mismatch      1
crawler-b  agents.txt agents_txt.hash_mismatch      1
crawler-b  robots.txt robots.disallow               1

malformed lines (first 5 of 5)
line  error
  10  not JSON: expected ident at line 1 column 2
  12  no string \"agentgate.agent\"
  13  not a JSON object
  15  not JSON: expected value at line 1 column 1
  16  not JSON: EOF while parsing a string at line 1 column 37
"
        );

        let json = serde_json::to_value(&summary).expect("serializes");
        assert_eq!(json["agents"][0]["outcomes"]["deny"], 3);
        assert_eq!(json["malformed"][0]["line"], 10);
    }

    #[test]
    fn an_empty_log_summarizes_to_nothing() {
        let summary = summarize(&b""[..]).expect("reading works");
        assert_eq!(summary, Summary::default());
        assert_eq!(
            summary.render_text(),
            "0 records from 0 agents, 0 malformed lines\nagent  total  allow  deny  needs_approval  rate_limited  would_deny  error\n"
        );
    }

    #[test]
    fn a_read_error_is_an_error_naming_the_line() {
        struct Failing(usize);
        impl Read for Failing {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let line = b"{\"agentgate.agent\":\"a\",\"event.outcome\":\"allow\"}\n";
                if self.0 == 0 {
                    return Err(std::io::Error::other("disk went away"));
                }
                self.0 -= 1;
                buf[..line.len()].copy_from_slice(line);
                Ok(line.len())
            }
        }
        let err = summarize(BufReader::new(Failing(2))).expect_err("the read fails");
        assert!(matches!(err, AuditError::Read { line: 2, .. }), "{err:?}");
        assert!(err.to_string().contains("after line 2: disk went away"), "{err}");
    }
}
