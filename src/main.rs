//! The `agentgate` command line: parse arguments, call the library, print one error chain
//! and return an exit code. No logic lives here that tests cannot reach through the library.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use agentgate::explain::{self, ExplainRequest};

/// A forward HTTP(S) proxy that makes AI agents respect robots.txt, agents.txt, AGENTS.md
/// and automation-preferences.txt, and logs every decision.
#[derive(Parser)]
#[command(name = "agentgate", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate one request against policy files in a directory and explain the decision.
    Explain(ExplainArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum OutputFormat {
    Json,
    Text,
}

#[derive(Args)]
struct ExplainArgs {
    /// Directory holding robots.txt, agents.txt, AGENTS.md, .well-known/agents.md and
    /// automation-preferences.txt (each optional, each with an optional `<file>.headers`).
    #[arg(long)]
    policy_dir: PathBuf,
    /// The agent's product token, matched against robots.txt and autoctl user-agent groups.
    #[arg(long)]
    user_agent: Option<String>,
    /// The agent id.
    #[arg(long)]
    agent: Option<String>,
    /// The agent's AGENTS.md trust level (0-5).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=5))]
    trust_level: u8,
    /// A purpose the agent declares (repeatable).
    #[arg(long = "purpose")]
    purposes: Vec<String>,
    /// A request header `Name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// The request method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// Output format.
    #[arg(long, value_enum, default_value_t = OutputFormat::Json)]
    format: OutputFormat,
    /// The request URL, e.g. https://example.com/path?q=1.
    url: String,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    match cli.command {
        Command::Explain(args) => run_explain(args),
    }
}

/// Exit 0 when allowed, 1 when not, 2 on a usage error (conformance README).
fn run_explain(args: ExplainArgs) -> ExitCode {
    let request = ExplainRequest {
        policy_dir: args.policy_dir,
        user_agent: args.user_agent,
        agent: args.agent,
        trust_level: args.trust_level,
        purposes: args.purposes,
        headers: args.headers,
        method: args.method,
        url: args.url,
    };
    match explain::explain(&request) {
        Ok(explanation) => {
            match args.format {
                OutputFormat::Json => println!("{}", explanation.to_json()),
                OutputFormat::Text => print!("{}", explanation.to_text()),
            }
            if explanation.decision.is_allowed() { ExitCode::SUCCESS } else { ExitCode::from(1) }
        }
        Err(e) => {
            eprintln!("agentgate explain: {e}");
            ExitCode::from(2)
        }
    }
}
