//! The decision log: one JSON line per request the gate decided, allowed or blocked, for the
//! security team that audits agents (DESIGN §7, §8; STYLE §2 smokescreen's canonical line).
//! Its two jobs show in its layout: writing the log, and reading it back (`report`).
//!
//! Writing owns: the [`DecisionRecord`] and its encoding, the facts of a human's approval it
//! carries ([`Approval`], made by `crate::approvals`), the field-name constants
//! ([`field`]), URL redaction ([`redact_url`]), the `[audit]` table ([`AuditConfig`]), the
//! writer ([`AuditLog`], a handle on a bounded queue with group commit, and [`AuditWriter`],
//! the thread that owns the file, flushes when idle and fsyncs on shutdown), the ring of the
//! latest lines behind the admin API's `/decisions/recent` and their live stream
//! ([`RecentDecisions`]), and per-agent counts since start ([`AgentTally`]); the hash chain
//! every line carries and the signed checkpoint lines (`chain`), and checking files against
//! them ([`verify`], `agentgate audit verify`).
//!
//! Reading back (`report`) owns the reports behind `agentgate audit`: reading logs, plain
//! or gzip'd ([`for_each_line`]), a line as a record and the filters ([`LoggedRecord`],
//! [`Filter`]), per-group counts ([`summarize_files`]), matching records ([`grep`]) and the
//! `allow_hosts` each agent needs ([`suggest`]), and the per-agent scorecard as an HTML page
//! ([`scorecard`], `agentgate audit report --html`).
//!
//! Never: changes a decision (the gate decides, then records; on a write failure it is the
//! gate that applies `[audit] on_failure`), or drops a record without counting it: every
//! record handed to [`AuditLog::record`] ends up counted as written or as failed.
//!
//! The field reference, redaction rules and durability guarantees are in
//! `docs/decision-log.md`.

use std::io;
use std::path::PathBuf;

mod approval;
mod chain;
mod config;
mod ecs;
pub mod field;
mod html;
mod json;
mod recent;
mod record;
mod redact;
mod report;
mod tally;
mod writer;

pub use approval::{Approval, ApprovalDecision, Remember};
#[cfg(test)]
pub(crate) use chain::test_key;
pub use chain::verify::{Break, BreakKind, Verified, verify};
pub use chain::{is_checkpoint, public_key_base64};
pub use config::{
    AuditConfig, DEFAULT_ARCHIVE_MAX_BYTES, DEFAULT_CHECKPOINT_INTERVAL, DEFAULT_MAX_FILE_SIZE, DEFAULT_MAX_FILES,
    OnFailure,
};
pub use ecs::EcsOutcome;
pub(crate) use html::html_text;
pub use recent::{LIVE_CAPACITY, RECENT_CAPACITY, RecentDecisions};
pub(crate) use record::instance_problems;
pub(crate) use record::rfc3339_millis;
pub use record::{BodyCut, DecisionRecord, ErrorType, EventId, Line, McpFields, Outcome, instance_name};
pub(crate) use redact::is_display_unsafe;
pub use redact::{LoggedUrl, REDACTED, redact_url};
pub use report::{
    AgentCard, AgentHosts, Blocks, By, Class, Count, Counts, Filter, GrepLines, GrepReport, GroupSummary, LoggedRecord,
    MalformedLine, NotARecord, OriginCount, Rule, Scorecard, Since, Suggestion, Summary, Timeline,
    content_security_policy, for_each_line, grep, records, scorecard, suggest, summarize, summarize_files,
};
pub use tally::{AgentTally, MAX_AGENTS, OTHER_AGENTS};
pub use writer::{AuditLog, AuditStats, AuditWriter, TryRecord, Unrecorded};

/// What can go wrong with the decision log. Each message names the file and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// The log file (or its directory) could not be opened or created at start.
    #[error(
        "cannot open the decision log {}: {source}; create the directory and make it writable, or change [audit] path",
        path.display()
    )]
    Open {
        /// The configured `[audit] path`.
        path: PathBuf,
        /// Why the operating system refused.
        source: io::Error,
    },
    /// A write, flush or fsync failed while running; the log refuses records from then on.
    #[error(
        "cannot write the decision log {}: {cause}; free disk space or fix the file's permissions (the log resumes by itself once a write succeeds)",
        path.display()
    )]
    Write {
        /// The configured `[audit] path`.
        path: PathBuf,
        /// The I/O error of the last failed write.
        cause: String,
    },
    /// A record arrived after [`AuditWriter::shutdown`] closed the log.
    #[error("the decision log {} is shut down; records are accepted only between start and shutdown", path.display())]
    Closed {
        /// The configured `[audit] path`.
        path: PathBuf,
    },
    /// The log could not be opened again on SIGHUP ([`AuditLog::reopen`]); the writer keeps
    /// writing to the file it had open, so no record is lost.
    #[error(
        "cannot reopen the decision log {}: {cause}; records still go to the file open before (renamed, if logrotate moved it); fix the directory or its permissions and send SIGHUP again",
        path.display()
    )]
    Reopen {
        /// The configured `[audit] path`.
        path: PathBuf,
        /// Why the operating system refused.
        cause: String,
    },
    /// `[audit] queue_capacity` is zero.
    #[error("[audit] queue_capacity = 0: the queue must hold at least one record (the default is 8192)")]
    ZeroQueueCapacity,
    /// The flusher thread panicked (a bug); records still queued were counted as failed.
    #[error("the decision log writer for {} stopped unexpectedly; this is a bug, please report it", path.display())]
    WriterPanicked {
        /// The configured `[audit] path`.
        path: PathBuf,
    },
    /// A log named to `agentgate audit` cannot be opened.
    #[error("cannot open {}: {source}; check the path (rotated files are decisions.jsonl.1, .2, ...)", path.display())]
    ReadOpen {
        /// The file as named.
        path: PathBuf,
        /// Why the operating system refused.
        source: io::Error,
    },
    /// Reading or decompressing a log failed part-way (not a malformed line: those are
    /// counted).
    #[error(
        "cannot read {} after line {line}: {source}; check the file is readable and, if gzip'd, complete",
        path.display()
    )]
    Read {
        /// The file being read.
        path: PathBuf,
        /// The last line read completely.
        line: u64,
        /// Why reading failed.
        source: io::Error,
    },
    /// `--since` is neither an RFC 3339 time nor a duration.
    #[error("--since {value:?}: not an RFC 3339 time (2026-11-23T10:00:00Z) or a duration before now (1h, 30m, 2days)")]
    Since {
        /// The value given.
        value: String,
    },
    /// The output of `agentgate audit grep` refused a write (a closed pipe, a full disk).
    #[error("cannot write the matching records: {source}")]
    Output {
        /// Why the write failed.
        source: io::Error,
    },
}
