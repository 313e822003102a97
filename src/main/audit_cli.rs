//! `agentgate audit`: the decision-log commands of the binary (summary, report, grep,
//! suggest, verify, key, show, shadow), their arguments and how each prints its answer. The reading
//! itself is the library's (`agentgate::audit`, `agentgate::evidence`).
//!
//! Never: changes a log or an archive.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

use agentgate::reload::ConfigSource;
use agentgate::{audit, evidence};

use super::unless_reader_left;

#[derive(Subcommand)]
pub(crate) enum AuditCommand {
    /// Requests, allowed, denied, would_deny, rate_limited and errors per agent (or origin,
    /// reason, outcome, MCP tool), with the reasons that decided the blocks.
    Summary {
        /// What a row is.
        #[arg(long, value_enum, default_value_t = SummaryBy::Agent)]
        by: SummaryBy,
        #[command(flatten)]
        filter: SummaryFilter,
        /// Output format (`text` is the same as `table`).
        #[arg(long, value_enum, default_value_t = SummaryFormat::Table)]
        format: SummaryFormat,
        /// Decision logs, plain or gzip'd, oldest first (decisions.jsonl.2 decisions.jsonl.1
        /// decisions.jsonl); `-` reads standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Write the scorecard of an evaluation as one self-contained HTML page: per agent the
    /// summary's figures (requests, bytes, allowed, refused, would_deny), a timeline, blocks
    /// by source and code, top hosts and the rules that refused most with their file and line.
    Report {
        /// Write HTML (the report's one form: `audit report --html FILES > report.html`).
        #[arg(long, required = true)]
        html: bool,
        #[command(flatten)]
        filter: SummaryFilter,
        /// Decision logs, plain or gzip'd, oldest first; `-` reads standard input.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the records that match, as the JSON lines they are: one per request (a forwarded
    /// request's completed line), or with --raw every line as written.
    Grep {
        #[command(flatten)]
        filter: GrepFilter,
        /// Every matching line as written: a forwarded request's decision line (before
        /// forwarding) and its completed line (after the response), not one per request.
        #[arg(long)]
        raw: bool,
        /// Decision logs, plain or gzip'd, oldest first.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print, per agent, the allow_hosts line its requests need (learned from a monitor run),
    /// with request counts as comments; hosts the network guard refused are left out.
    Suggest {
        /// Only this agent: its allow_hosts line alone.
        #[arg(long)]
        agent: Option<String>,
        /// Decision logs, plain or gzip'd, oldest first.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print one request's record and, for each reason, the policy file's text around the
    /// deciding line, read from the policy archive and checked against the record's digest.
    /// Exits 1 when no record has the id.
    Show {
        /// The record's event.id.
        event_id: String,
        /// The policy archive ([audit] archive_dir); default: policy-archive beside the
        /// first FILE.
        #[arg(long)]
        archive: Option<PathBuf>,
        /// Decision logs, plain or gzip'd, oldest first.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Decide every logged request again under a candidate config, against the policy files
    /// as they were served (from the archive), and print per agent the requests whose
    /// outcome would change. Exits 1 when any outcome changes (so it can gate a config
    /// change), 0 when none does, 2 when it cannot run.
    Shadow {
        /// The candidate config.
        #[arg(long)]
        config: PathBuf,
        /// The policy archive ([audit] archive_dir); default: policy-archive beside the
        /// first FILE.
        #[arg(long)]
        archive: Option<PathBuf>,
        /// Decision logs, plain or gzip'd, oldest first.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Check decision logs against their hash chain and signed checkpoints: prints each break
    /// (file, line, kind), the lines verified and the lines after the last checkpoint; exits 0
    /// only when every link and signature holds.
    Verify {
        /// The checkpoint key (base64, as `agentgate audit key` prints it). Without it, each
        /// checkpoint is checked with the key it names, which proves no one in particular signed.
        #[arg(long)]
        key: Option<String>,
        /// Decision logs, plain, rotated or gzip'd, in any order.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the public key the decision log's checkpoints are signed with (standard base64 of
    /// the raw Ed25519 key); creates the key when it has no file yet, as `run` would.
    Key {
        /// The config (default: the embedded one).
        #[arg(long)]
        config: Option<PathBuf>,
        /// CA directory, overriding `[ca] dir` in the config (where the default key lives).
        #[arg(long)]
        ca_dir: Option<PathBuf>,
    },
}

/// The records `summary` and `report` count.
#[derive(Args)]
pub(crate) struct SummaryFilter {
    /// Only this agent id (repeatable: any of them).
    #[arg(long = "agent")]
    agents: Vec<String>,
    /// Only this origin (https://host:port as logged) or host (repeatable).
    #[arg(long = "origin")]
    origins: Vec<String>,
    /// Only records at or after this time: RFC 3339 (2026-11-23T10:00:00Z) or a duration
    /// before now (1h, 30m).
    #[arg(long)]
    since: Option<String>,
}

impl SummaryFilter {
    fn filter(self) -> anyhow::Result<audit::Filter> {
        let since = since(self.since.as_deref())?;
        Ok(audit::Filter { since, agents: self.agents, origins: self.origins, outcomes: Vec::new() })
    }
}

#[derive(Args)]
pub(crate) struct GrepFilter {
    /// Only this agent id (repeatable: any of them).
    #[arg(long = "agent")]
    agents: Vec<String>,
    /// Only this origin (https://host:port as logged) or host (repeatable).
    #[arg(long = "origin")]
    origins: Vec<String>,
    /// Only this outcome (repeatable).
    #[arg(long = "outcome", value_parser = clap::builder::PossibleValuesParser::new(
        audit::Outcome::ALL.iter().map(|o| o.as_str())))]
    outcomes: Vec<String>,
    /// Only records at or after this time: RFC 3339 or a duration before now (1h, 30m).
    #[arg(long)]
    since: Option<String>,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum SummaryBy {
    Agent,
    Origin,
    Reason,
    Outcome,
    /// MCP tool calls: `agent host tool` (`[[mcp]]`, docs/mcp.md); `-` for other requests.
    Tool,
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum SummaryFormat {
    /// Aligned tables with a total row.
    #[value(alias = "text")]
    Table,
    Json,
}

/// Runs one `audit` command, printing its answer to `out`; the exit status when it ran.
pub(crate) fn answer(command: AuditCommand, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    match command {
        AuditCommand::Summary { by, filter, format, files } => {
            audit_summary(&files, by, filter.filter()?, format, out)?
        }
        AuditCommand::Report { html: _, filter, files } => {
            let scorecard = audit::scorecard(&files, filter.filter()?)?;
            let sources: Vec<String> = files.iter().map(|file| file.display().to_string()).collect();
            unless_reader_left(out.write_all(scorecard.to_html(&sources).as_bytes()))?;
        }
        AuditCommand::Grep { filter, raw, files } => audit_grep(&files, filter, raw, out)?,
        AuditCommand::Suggest { agent, files } => audit_suggest(&files, agent.as_deref(), out)?,
        AuditCommand::Show { event_id, archive, files } => {
            let archive = evidence::archive_dir(archive.as_deref(), &files);
            if !evidence::show(&files, &event_id, &archive, out)? {
                eprintln!("agentgate audit show: no record has event.id {event_id:?} in the files given");
                return Ok(ExitCode::from(1));
            }
        }
        AuditCommand::Shadow { config, archive, files } => {
            return match evidence::shadow_config(&config, archive.as_deref(), &files) {
                Ok(report) => {
                    unless_reader_left(report.render(out))?;
                    Ok(if report.changed() { ExitCode::from(1) } else { ExitCode::SUCCESS })
                }
                Err(e) => {
                    eprintln!("agentgate audit shadow: {e}");
                    Ok(ExitCode::from(2))
                }
            };
        }
        AuditCommand::Verify { key, files } => return audit_verify(&files, key.as_deref(), out),
        AuditCommand::Key { config, ca_dir } => {
            let config = ConfigSource { path: config, listen: None, ca_dir }.load()?;
            let key = agentgate::signing::load_or_create(&config.audit.signing_key_path(&config.ca.dir))?;
            writeln!(out, "{}", audit::public_key_base64(&key))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn since(value: Option<&str>) -> anyhow::Result<Option<audit::Since>> {
    Ok(value.map(|v| audit::Since::parse(v, std::time::SystemTime::now())).transpose()?)
}

fn audit_summary(
    files: &[PathBuf],
    by: SummaryBy,
    filter: audit::Filter,
    format: SummaryFormat,
    out: &mut impl Write,
) -> anyhow::Result<()> {
    let by = match by {
        SummaryBy::Agent => audit::By::Agent,
        SummaryBy::Origin => audit::By::Origin,
        SummaryBy::Reason => audit::By::Reason,
        SummaryBy::Outcome => audit::By::Outcome,
        SummaryBy::Tool => audit::By::Tool,
    };
    let summary = audit::summarize_files(files, by, filter)?;
    match format {
        SummaryFormat::Json => writeln!(out, "{}", serde_json::to_string_pretty(&summary)?)?,
        SummaryFormat::Table => write!(out, "{}", summary.render_table())?,
    }
    Ok(())
}

/// Matching lines on stdout; malformed lines counted on stderr, as a note, not a failure.
fn audit_grep(files: &[PathBuf], args: GrepFilter, raw: bool, out: &mut impl Write) -> anyhow::Result<()> {
    let filter = audit::Filter {
        since: since(args.since.as_deref())?,
        agents: args.agents,
        origins: args.origins,
        outcomes: args.outcomes,
    };
    let lines = if raw { audit::GrepLines::Raw } else { audit::GrepLines::PerRequest };
    let report = audit::grep(files, &filter, lines, out)?;
    out.flush()?;
    if let Some(first) = &report.first_malformed {
        eprintln!(
            "agentgate audit grep: {} lines are not records and were skipped (first: {}:{}: {})",
            report.malformed_lines,
            first.file.display(),
            first.line,
            first.error
        );
    }
    Ok(())
}

/// The suggested lines on stdout; malformed lines counted on stderr, as a note.
fn audit_suggest(files: &[PathBuf], agent: Option<&str>, out: &mut impl Write) -> anyhow::Result<()> {
    let suggestion = audit::suggest(files, agent)?;
    out.write_all(suggestion.render(agent.is_some()).as_bytes())?;
    if let Some(first) = &suggestion.first_malformed {
        eprintln!(
            "agentgate audit suggest: {} lines are not records and were skipped (first: {}:{}: {})",
            suggestion.malformed_lines,
            first.file.display(),
            first.line,
            first.error
        );
    }
    Ok(())
}

/// The breaks and totals on stdout; exit status 1 when anything does not hold.
fn audit_verify(files: &[PathBuf], key: Option<&str>, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    use base64::Engine as _;
    let key = match key {
        Some(text) => Some(base64::engine::general_purpose::STANDARD.decode(text.trim()).map_err(|e| {
            anyhow::anyhow!("--key {text:?} is not base64 ({e}); pass what `agentgate audit key` prints")
        })?),
        None => None,
    };
    let verified = audit::verify(files, key.as_deref())?;
    verified.report(out)?;
    if key.is_none() && !verified.named_keys.is_empty() {
        eprintln!(
            "agentgate audit verify: warning: checkpoints checked with the key the files name ({}); only --key proves who signed",
            verified.named_keys.join(", ")
        );
    }
    Ok(if verified.holds() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
