//! The `agentgate` command line: parse arguments, call the library, print one error chain
//! and return an exit code. No logic lives here that tests cannot reach through the library.

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand, ValueEnum};

use agentgate::app::Proxy;
use agentgate::config::Config;
use agentgate::error_chain::error_chain;
use agentgate::explain::{self, ExplainRequest};
use agentgate::lint;
use agentgate::policy::{FORMATS, FormatInfo};
use agentgate::proxy::shutdown_signal;
use agentgate::reload::ConfigSource;
use agentgate::tls::{self, CertificateAuthority};

use audit_cli::AuditCommand;

#[path = "main/audit_cli.rs"]
mod audit_cli;

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
    /// Run the proxy (on the embedded default config unless --config is given).
    Run(RunArgs),
    /// Manage agentgate's certificate authority.
    #[command(subcommand)]
    Ca(CaCommand),
    /// Check configuration files.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Evaluate one request against policy files in a directory and explain the decision
    /// (with --config and --agent, the agent's egress lists and the operator's rules first).
    Explain(ExplainArgs),
    /// Check policy files like a compiler: `file:line: severity: message [code]`.
    Lint(LintArgs),
    /// Read a decision log.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Print the Web Bot Auth public keys of the signing agents as a JWK set: the body of
    /// `/.well-known/http-message-signatures-directory` at each agent's signature_agent origin.
    /// Creates a key that has no file yet, as `run` would.
    Keys(KeysArgs),
    /// Read a recording (`[record] dir`).
    #[command(subcommand)]
    Record(RecordCommand),
}

#[derive(Subcommand)]
enum RecordCommand {
    /// Print the recording as HAR 1.2, one entry per recorded exchange, for devtools and HAR
    /// tools.
    Har {
        /// Only this agent's exchanges.
        #[arg(long)]
        agent: Option<String>,
        /// The recording's directory (`[record] dir`).
        dir: PathBuf,
    },
}

#[derive(Args)]
struct KeysArgs {
    /// Only this agent's keys (an [[agents]] id, or [agent]'s id).
    #[arg(long)]
    agent: Option<String>,
    /// The config (default: the embedded one, which has no signing agent).
    #[arg(long)]
    config: Option<PathBuf>,
    /// CA directory, overriding `[ca] dir` in the config (where generated keys live).
    #[arg(long)]
    ca_dir: Option<PathBuf>,
}

#[derive(Args)]
struct LintArgs {
    /// The format of every FILE; by default it comes from each file name.
    #[arg(long, value_parser = format_parser())]
    format: Option<FormatInfo>,
    /// Rewrite the hash line of agents.txt files so they verify.
    #[arg(long)]
    fix_hash: bool,
    /// Policy files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Args)]
struct RunArgs {
    /// TOML config file; without it the embedded default (config/agentgate.toml) is used.
    #[arg(long, env = "AGENTGATE_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address, overriding `listen` in the config.
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// CA directory, overriding `[ca] dir` in the config.
    #[arg(long)]
    ca_dir: Option<PathBuf>,
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Subcommand)]
enum CaCommand {
    /// Print the CA certificate (PEM), creating the CA first if there is none.
    Export {
        /// CA directory.
        #[arg(long, default_value = "certs")]
        ca_dir: PathBuf,
    },
    /// Create the CA; refuses to replace an existing one without --force.
    Init {
        /// CA directory.
        #[arg(long, default_value = "certs")]
        ca_dir: PathBuf,
        /// Replace an existing CA (agents must trust the new certificate).
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Validate a config file and report every problem with its key and location.
    Check {
        /// The TOML file.
        file: PathBuf,
    },
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
    /// An agentgate config: the agent (--agent, else [agent]) is decided as the proxy decides
    /// it, its egress lists and the operator's [[rules]] and bypass_hosts first; its
    /// product_token, trust_level and purposes apply unless given here.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The agent id (with --config, an [[agents]] id of that config).
    #[arg(long)]
    agent: Option<String>,
    /// The agent's AGENTS.md trust level (0-5; default 0).
    #[arg(long, value_parser = clap::value_parser!(u8).range(0..=5))]
    trust_level: Option<u8>,
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
    tls::install_default_provider();
    // Everything a command prints goes through `out` (never `print!`, which panics when the
    // reader has gone): a write error comes back as an error like any other.
    let mut out = io::BufWriter::new(io::stdout());
    let result = answer(cli.command, &mut out).and_then(|code| {
        unless_reader_left(out.flush())?;
        Ok(code)
    });
    match result {
        Ok(code) => code,
        // The reader took what it wanted and closed the pipe (`| head`): not an error.
        Err(e) if e.chain().any(|cause| cause.downcast_ref::<io::Error>().is_some_and(reader_left)) => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("agentgate: {}", error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Runs `command`, printing its answer to `out`; the exit status when it ran.
fn answer(command: Command, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    match command {
        Command::Run(args) => run_proxy(args, out)?,
        Command::Ca(CaCommand::Export { ca_dir }) => {
            write!(out, "{}", CertificateAuthority::load_or_create(&ca_dir)?.cert_pem())?;
        }
        Command::Ca(CaCommand::Init { ca_dir, force }) => {
            let ca = CertificateAuthority::create(&ca_dir, force)?;
            eprintln!("agentgate: CA written to {}", ca.cert_path().display());
        }
        Command::Config(ConfigCommand::Check { file }) => check_config(&file, out)?,
        Command::Explain(args) => return run_explain(args, out),
        Command::Lint(args) => return run_lint(args, out),
        Command::Audit(command) => return audit_cli::answer(command, out),
        Command::Keys(KeysArgs { agent, config, ca_dir }) => {
            let config = ConfigSource { path: config, listen: None, ca_dir }.load()?;
            let set = agentgate::signing::directory(
                &config.ca.dir,
                agentgate::agents::signing_tables(&config.agent, &config.agents),
                agent.as_deref(),
            )?;
            writeln!(out, "{}", serde_json::to_string_pretty(&set)?)?;
        }
        Command::Record(RecordCommand::Har { agent, dir }) => {
            let lines = agentgate::record::format::read(&dir)?;
            let har = agentgate::record::har::har(&lines, agent.as_deref());
            writeln!(out, "{}", serde_json::to_string_pretty(&har)?)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `error` is a write to a pipe whose reader has closed it: standard output is the
/// only pipe these commands write to.
fn reader_left(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::BrokenPipe
}

/// A write, where the reader having left ends the printing without failing the command, so
/// a command with a verdict (explain, lint) still exits with it.
fn unless_reader_left(written: io::Result<()>) -> io::Result<()> {
    written.or_else(|e| if reader_left(&e) { Ok(()) } else { Err(e) })
}

/// Runs the proxy until a shutdown signal; the banner goes to `out`.
fn run_proxy(args: RunArgs, out: &mut impl Write) -> anyhow::Result<()> {
    init_tracing(args.log_format);
    let source = ConfigSource { path: args.config, listen: args.listen, ca_dir: args.ca_dir };
    let config = source.load()?;
    // Every agent connection, tunnel and origin connection is a file descriptor: use all the
    // hard limit allows ([connections] max_connections is the cap that should bite first).
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(error) => tracing::warn!(%error, "cannot raise the open-file limit; keeping the current one"),
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async move {
        let config = std::sync::Arc::new(config);
        let config_path = source.path.clone();
        let running = Proxy::new(std::sync::Arc::clone(&config))?.bind().await?;
        // Before the banner: a SIGTERM sent as soon as it is printed must stop agentgate
        // gracefully, not kill it (the handlers are installed by this call).
        let shutdown = shutdown_signal();
        // Before the banner: from now on SIGHUP reloads and reopens the log, never stops agentgate.
        running.reloader(source).start();
        let addr = running.local_addr();
        // Absolute, so the printed variables work from any directory or container mount.
        let ca_path = running.ca_cert_path();
        let ca = std::fs::canonicalize(ca_path).unwrap_or_else(|_| ca_path.to_path_buf()).display().to_string();
        let warnings = agentgate::agents::advisories(&config.auth, &config.agent, &config.agents);
        let startup = agentgate::recipe::Startup {
            listen: addr,
            ca: &ca,
            config: config_path.as_deref(),
            mode: config.mode,
            decision_log: &config.audit,
            admin: running.admin_addr(),
            tokens_unchallenged: agentgate::agents::tokens_unchallenged(&config.auth, &config.agents),
            warnings: &warnings,
        };
        // The banner is for whoever reads it; a proxy nobody watches still serves.
        if let Err(error) = out.write_all(startup.render().as_bytes()).and_then(|()| out.flush()) {
            tracing::warn!(%error, "cannot print the start-up banner to stdout; running without it");
        }
        running.run_until(shutdown).await;
        Ok(())
    })
}

/// `--format`: one of the formats' names, listed in `--help`.
fn format_parser() -> impl clap::builder::TypedValueParser<Value = FormatInfo> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(FORMATS.iter().map(|f| f.name))
        .try_map(|name| FormatInfo::named(&name).ok_or(format!("no format is named {name}")))
}

/// Exit 0 when no file has errors, 1 when one has, 2 when a file cannot be read; when the
/// reader leaves, linting stops there, with the status of the files linted so far.
fn run_lint(args: LintArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let format = args.format;
    let mut code = ExitCode::SUCCESS;
    for file in &args.files {
        match lint::lint_file(file, format, args.fix_hash) {
            Ok(report) => {
                if report.has_errors() {
                    code = ExitCode::from(1);
                }
                if let Err(e) = out.write_all(report.render().as_bytes()) {
                    unless_reader_left(Err(e))?;
                    return Ok(code);
                }
            }
            Err(e) => {
                unless_reader_left(out.flush())?;
                eprintln!("agentgate lint: {e}");
                return Ok(ExitCode::from(2));
            }
        }
    }
    Ok(code)
}

fn check_config(file: &std::path::Path, out: &mut impl Write) -> anyhow::Result<()> {
    let config = Config::check(file)?;
    writeln!(out, "{}: ok (listen {}, mode {})", file.display(), config.listen, config.mode.as_str())?;
    for warning in agentgate::agents::advisories(&config.auth, &config.agent, &config.agents) {
        writeln!(out, "{}: warning: {warning}", file.display())?;
    }
    Ok(())
}

fn init_tracing(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Exit 0 when allowed, 1 when not (whether or not the reader read it all), 2 on a usage
/// error (conformance README).
fn run_explain(args: ExplainArgs, out: &mut impl Write) -> anyhow::Result<ExitCode> {
    let mut request = ExplainRequest {
        policy_dir: args.policy_dir,
        user_agent: args.user_agent,
        agent: args.agent,
        trust_level: args.trust_level.unwrap_or(0),
        purposes: args.purposes,
        headers: args.headers,
        method: args.method,
        url: args.url,
    };
    let explained = match args.config {
        None => explain::explain(&request),
        Some(path) => {
            let operator = Config::load(&path)
                .map_err(|e| e.to_string())
                .and_then(|config| config.operator(request.agent.as_deref()).map_err(|e| e.to_string()));
            let operator = match operator {
                Ok(operator) => operator,
                Err(e) => {
                    eprintln!("agentgate explain: {e}");
                    return Ok(ExitCode::from(2));
                }
            };
            let agent = operator.agent();
            request.user_agent = request.user_agent.or_else(|| agent.product_token.clone());
            request.trust_level = args.trust_level.unwrap_or(agent.trust_level);
            if request.purposes.is_empty() {
                request.purposes = agent.purposes.to_vec();
            }
            match explain::explain_operator(&request, &operator) {
                Ok(Some(explanation)) => Ok(explanation),
                Ok(None) => explain::explain_in(&request, operator.settings()),
                Err(e) => Err(e),
            }
        }
    };
    match explained {
        Ok(explanation) => {
            let text = match args.format {
                OutputFormat::Json => format!("{}\n", explanation.to_json()),
                OutputFormat::Text => explanation.to_text(),
            };
            unless_reader_left(out.write_all(text.as_bytes()))?;
            Ok(if explanation.decision.is_allowed() { ExitCode::SUCCESS } else { ExitCode::from(1) })
        }
        Err(e) => {
            eprintln!("agentgate explain: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
