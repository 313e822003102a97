//! Reading decision logs back, for `agentgate audit`: the files an operator names, plain or
//! gzip'd and in order ([`for_each_line`]), a line as a record and the filters the commands
//! share ([`LoggedRecord`], [`Filter`], [`Since`]), and the reports: per-group counts
//! ([`summarize_files`]), the matching records, one line per request or as written ([`grep()`]),
//! the `allow_hosts` each agent needs ([`suggest()`]), and the scorecard of an evaluation per
//! agent as one HTML page ([`scorecard()`], counted by the summary's own pass). Every report
//! counts a forwarded request once, though the log holds its decision line and its completed
//! line.
//!
//! Never: writes the decision log, or fails on a line that is not a record (it is counted
//! and quoted with its file and line).

mod grep;
mod input;
mod query;
mod scorecard;
mod suggest;
mod summary;

pub use grep::{GrepLines, GrepReport, grep};
pub use input::for_each_line;
pub use query::{Filter, LoggedRecord, NotARecord, Since, records};
pub use scorecard::{
    AgentCard, Blocks, Class, OriginCount, Rule, Scorecard, Timeline, content_security_policy, scorecard,
};
pub use suggest::{AgentHosts, Suggestion, suggest};
pub use summary::{By, Count, Counts, GroupSummary, MalformedLine, Summary, summarize, summarize_files};
