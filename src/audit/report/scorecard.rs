//! `agentgate audit report --html`: the scorecard of an evaluation, per agent. The counts
//! (requests, bytes, each outcome) are `audit summary`'s own (`summarize_files` by agent,
//! the same pass); beside them this module gathers, from the same records as they are
//! counted, what a page shows and a table does not: blocks by the file (source) and code
//! that decided them, requests over time, the busiest origins and the rules that refused
//! most, with their file and line. `page` writes it as one self-contained HTML page,
//! `chart` draws the timeline as SVG.
//!
//! Never: counts a figure the summary counts (it reads the summary's), reads anything but
//! the files named, or writes a value from the log as markup (`page` escapes every one).

mod chart;
mod page;

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use super::query::{Filter, LoggedRecord};
use super::summary::{By, Summary, TOP, summarize_files_seeing};
use crate::audit::{AuditError, Outcome};

pub use page::content_security_policy;

/// The most bars a timeline has: its bucket is the shortest of [`BUCKETS`] that fits the
/// run in this many.
const MAX_BARS: u64 = 60;

/// The widths a timeline's bars may have, shortest first.
const BUCKETS: [Duration; 16] = [
    Duration::from_millis(100),
    Duration::from_millis(250),
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(10),
    Duration::from_secs(30),
    Duration::from_secs(60),
    Duration::from_secs(5 * 60),
    Duration::from_secs(15 * 60),
    Duration::from_secs(60 * 60),
    Duration::from_secs(6 * 60 * 60),
    Duration::from_secs(24 * 60 * 60),
    Duration::from_secs(7 * 24 * 60 * 60),
    Duration::from_secs(30 * 24 * 60 * 60),
    Duration::from_secs(365 * 24 * 60 * 60),
];

/// How a request ended, as the page colours it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `allow`: forwarded.
    Allowed,
    /// `would_deny`: forwarded in monitor mode; enforce mode would have refused it.
    WouldDeny,
    /// `deny`, `needs_approval`, `rate_limited`: refused.
    Refused,
    /// `error`, `auth_challenge`, or an outcome this version does not know.
    Other,
}

impl Class {
    /// Every class, in the order the timeline stacks them (bottom first).
    pub const ALL: [Class; 4] = [Class::Allowed, Class::WouldDeny, Class::Refused, Class::Other];

    /// The class of a decision as written (`event.action`).
    pub fn of(outcome: &str) -> Class {
        match Outcome::parse(outcome) {
            Some(Outcome::Allow) => Class::Allowed,
            Some(Outcome::WouldDeny) => Class::WouldDeny,
            Some(Outcome::Deny | Outcome::NeedsApproval | Outcome::RateLimited) => Class::Refused,
            _ => Class::Other,
        }
    }

    /// The word the page uses (and its CSS class).
    pub fn name(self) -> &'static str {
        match self {
            Class::Allowed => "allowed",
            Class::WouldDeny => "would-deny",
            Class::Refused => "refused",
            Class::Other => "other",
        }
    }

    fn index(self) -> usize {
        match self {
            Class::Allowed => 0,
            Class::WouldDeny => 1,
            Class::Refused => 2,
            Class::Other => 3,
        }
    }
}

/// Blocks counted under one name: refused, and (monitor mode) would have been.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Blocks {
    /// `deny`, `needs_approval`, `rate_limited`.
    pub refused: u64,
    /// `would_deny`.
    pub would_deny: u64,
}

impl Blocks {
    fn add(&mut self, class: Class) {
        match class {
            Class::Refused => self.refused += 1,
            Class::WouldDeny => self.would_deny += 1,
            Class::Allowed | Class::Other => {}
        }
    }

    fn total(&self) -> u64 {
        self.refused + self.would_deny
    }
}

/// An origin and its requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OriginCount {
    /// The origin of `url.full` (`https://host:port`), as `audit summary --by origin` keys
    /// it: else `url.domain`, else `(no host)`.
    pub origin: String,
    /// Every request to it.
    pub requests: u64,
    /// Those refused or that would have been.
    pub blocks: Blocks,
}

/// A rule that decided blocks: the first deciding reason of each, with where it is.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Rule {
    /// The origin whose file it is (`https://host:port`), `-` when the record has no URL.
    pub origin: String,
    /// The reason's `source`: the file (`robots.txt`, `AGENTS.md`, ...) or `operator`.
    pub source: String,
    /// The reason's 1-based `line`, when one line decided.
    pub line: Option<u64>,
    /// The reason's `code` (`robots.disallow`).
    pub code: String,
    /// The rule as written.
    pub rule: String,
}

/// One agent's card: what the page shows beside the summary's counts.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AgentCard {
    /// `agentgate.agent`, the summary group's key.
    pub agent: String,
    /// Blocks by the `source` of the reason that decided them, most first.
    pub by_source: Vec<(String, Blocks)>,
    /// Blocks by the `source code` of the reason that decided them, most first.
    pub by_code: Vec<(String, Blocks)>,
    /// The origins with the most requests, most first.
    pub top_origins: Vec<OriginCount>,
    /// The rules that decided the most blocks, most first.
    pub top_rules: Vec<(Rule, Blocks)>,
    /// Requests per time bucket and class, over the whole report's span.
    pub timeline: Timeline,
}

/// Requests over time: `bars[i][class]` counts the requests in
/// `[start + i × bucket, start + (i + 1) × bucket)`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Timeline {
    /// The start of the first bar (the first record's time, rounded down to the bucket).
    pub start: Option<SystemTime>,
    /// The width of a bar.
    pub bucket: Duration,
    /// Per bar, the requests of each class in [`Class::ALL`] order.
    pub bars: Vec<[u64; 4]>,
    /// Requests without a readable `@timestamp`, in no bar.
    pub untimed: u64,
}

/// The scorecard: the summary by agent, and one card per group, in the same order.
#[derive(Debug, Default)]
pub struct Scorecard {
    /// `audit summary --by agent` over the same files and filter.
    pub summary: Summary,
    /// One per `summary.groups`, same order.
    pub cards: Vec<AgentCard>,
    /// The first and last request's time, when any had one.
    pub span: Option<(SystemTime, SystemTime)>,
}

/// What is gathered of one agent while the files are read.
#[derive(Default)]
struct Gathered {
    by_source: HashMap<String, Blocks>,
    by_code: HashMap<String, Blocks>,
    origins: HashMap<String, OriginCount>,
    rules: HashMap<Rule, Blocks>,
    times: Vec<(SystemTime, Class)>,
    untimed: u64,
}

impl Gathered {
    fn see(&mut self, record: &LoggedRecord) {
        let class = Class::of(record.outcome());
        match record.timestamp() {
            Some(at) => self.times.push((at, class)),
            None => self.untimed += 1,
        }
        let host = record.origin().or(record.domain()).unwrap_or("(no host)");
        let entry = self.origins.entry(host.to_owned()).or_insert_with(|| OriginCount {
            origin: host.to_owned(),
            requests: 0,
            blocks: Blocks::default(),
        });
        entry.requests += 1;
        entry.blocks.add(class);
        if !matches!(class, Class::Refused | Class::WouldDeny) {
            return;
        }
        // The reason that decided, as the summary's top reasons and `--by reason` count it.
        let Some(reason) = record.deciding_reason_objects().into_iter().next() else { return };
        let part = |key: &str| reason.get(key).and_then(Value::as_str).unwrap_or("?").to_owned();
        let (source, code) = (part("source"), part("code"));
        self.by_source.entry(source.clone()).or_default().add(class);
        self.by_code.entry(format!("{source} {code}")).or_default().add(class);
        let rule = Rule {
            origin: record.origin().unwrap_or("-").to_owned(),
            source,
            line: reason.get("line").and_then(Value::as_u64),
            code,
            rule: reason.get("rule").and_then(Value::as_str).unwrap_or_default().to_owned(),
        };
        self.rules.entry(rule).or_default().add(class);
    }

    fn card(self, agent: String, span: Option<(SystemTime, SystemTime)>) -> AgentCard {
        let mut top_origins: Vec<OriginCount> = self.origins.into_values().collect();
        top_origins.sort_by(|a, b| b.requests.cmp(&a.requests).then_with(|| a.origin.cmp(&b.origin)));
        top_origins.truncate(TOP);
        let mut top_rules: Vec<(Rule, Blocks)> = self.rules.into_iter().collect();
        top_rules.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then_with(|| a.0.cmp(&b.0)));
        top_rules.truncate(TOP);
        AgentCard {
            agent,
            by_source: most_first(self.by_source),
            by_code: most_first(self.by_code),
            top_origins,
            top_rules,
            timeline: Timeline::of(&self.times, self.untimed, span),
        }
    }
}

/// Every name with its blocks, most first, ties by name.
fn most_first(counts: HashMap<String, Blocks>) -> Vec<(String, Blocks)> {
    let mut all: Vec<(String, Blocks)> = counts.into_iter().collect();
    all.sort_by(|a, b| b.1.total().cmp(&a.1.total()).then_with(|| a.0.cmp(&b.0)));
    all
}

impl Timeline {
    /// The bars of `times` over `span` (the whole report's, so every agent's timeline has the
    /// same axis): the shortest bucket of [`BUCKETS`] that covers the span in [`MAX_BARS`].
    fn of(times: &[(SystemTime, Class)], untimed: u64, span: Option<(SystemTime, SystemTime)>) -> Timeline {
        let Some((first, last)) = span else { return Timeline { untimed, ..Timeline::default() } };
        let length = last.duration_since(first).unwrap_or_default();
        let bucket = BUCKETS
            .into_iter()
            .find(|bucket| length.as_millis() / bucket.as_millis() < u128::from(MAX_BARS))
            // Longer than the longest bucket covers in MAX_BARS (a log with a clock gone
            // wrong): bars as wide as it takes.
            .unwrap_or_else(|| {
                let millis = u64::try_from(length.as_millis()).unwrap_or(u64::MAX);
                Duration::from_millis(millis.div_ceil(MAX_BARS - 1))
            });
        let since_epoch = |at: SystemTime| at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_millis();
        let width = bucket.as_millis();
        let start_ms = since_epoch(first) / width * width;
        let bar = |at: SystemTime| usize::try_from((since_epoch(at).saturating_sub(start_ms)) / width).unwrap_or(0);
        let count = bar(last) + 1;
        let mut bars = vec![[0u64; 4]; count];
        for (at, class) in times {
            // Every time lies within the span, which gives the bars' count; clamp anyway.
            let index = bar(*at).min(count - 1);
            bars[index][class.index()] += 1;
        }
        let start = SystemTime::UNIX_EPOCH + Duration::from_millis(u64::try_from(start_ms).unwrap_or(u64::MAX));
        Timeline { start: Some(start), bucket, bars, untimed }
    }
}

/// The scorecard of the logs at `paths` (plain or gzip'd, oldest first), for the records
/// `filter` matches: the summary by agent, and each agent's card from the same records.
///
/// # Errors
/// As [`summarize_files`](super::summarize_files): a file that cannot be read; malformed
/// lines are counted, never an error.
pub fn scorecard(paths: &[impl AsRef<Path>], filter: Filter) -> Result<Scorecard, AuditError> {
    let mut gathered: HashMap<String, Gathered> = HashMap::new();
    let summary = summarize_files_seeing(paths, By::Agent, filter, |record| {
        gathered.entry(record.agent().to_owned()).or_default().see(record);
    })?;
    let times = gathered.values().flat_map(|g| g.times.iter().map(|(at, _)| *at));
    let span = times.clone().min().zip(times.max());
    let cards = summary
        .groups
        .iter()
        .map(|group| gathered.remove(&group.key).unwrap_or_default().card(group.key.clone(), span))
        .collect();
    Ok(Scorecard { summary, cards, span })
}

impl Scorecard {
    /// The scorecard as one self-contained HTML page (`page`), naming `sources` (the files
    /// read) under its heading.
    pub fn to_html(&self, sources: &[String]) -> String {
        page::render(self, sources)
    }
}

#[cfg(test)]
mod tests;
