//! The real `agentgate run` binary as a child process, for what only a process shows: its
//! stderr (the diagnostic log), signals (SIGHUP, SIGTERM) and config-file reloads. Readiness
//! is the line agentgate prints once it listens; stderr is collected as it comes.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::task::JoinHandle;

use super::TestResult;
use super::wait::eventually_within;

/// How long a test waits for the binary to log something, act on a signal or exit.
pub const WAIT_LIMIT: Duration = Duration::from_secs(15);

/// `agentgate run --config <config>` with its stdout as lines and stderr discarded, for a
/// test about what it prints there (the ready line, the start-up summary, a decision log on
/// `-`). Killed when the child is dropped.
pub fn run_reading_stdout(config: &Path) -> TestResult<(Child, Lines<BufReader<ChildStdout>>)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["run", "--config"])
        .arg(config)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
    Ok((child, stdout))
}

/// `agentgate run --config <file>`, running.
pub struct Agentgate {
    child: Child,
    addr: String,
    ca_pem: Vec<u8>,
    stderr: Arc<Mutex<String>>,
    collector: JoinHandle<()>,
}

impl Agentgate {
    /// Starts the binary on `config` with `RUST_LOG=rust_log` and waits until it listens; its
    /// CA is under `dir/ca` (the config's `[ca] dir`).
    pub async fn start(dir: &Path, config: &Path, rust_log: &str) -> TestResult<Agentgate> {
        Agentgate::start_with(Command::new(env!("CARGO_BIN_EXE_agentgate")), dir, config, rust_log).await
    }

    /// Like [`start`](Self::start), with `env` added to its environment (a password the
    /// config names by its variable).
    pub async fn start_with_env(
        dir: &Path,
        config: &Path,
        rust_log: &str,
        env: &[(&str, &str)],
    ) -> TestResult<Agentgate> {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agentgate"));
        command.envs(env.iter().copied());
        Agentgate::start_with(command, dir, config, rust_log).await
    }

    /// Like [`start`](Self::start), inside the network namespace `netns` (`ip netns exec`,
    /// which also puts `/etc/netns/<netns>/hosts` in place of `/etc/hosts`).
    pub async fn start_in_netns(netns: &str, dir: &Path, config: &Path, rust_log: &str) -> TestResult<Agentgate> {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", netns, env!("CARGO_BIN_EXE_agentgate")]);
        Agentgate::start_with(command, dir, config, rust_log).await
    }

    /// Runs `command` (the binary, or a wrapper that execs it) with `run --config <config>`.
    async fn start_with(mut command: Command, dir: &Path, config: &Path, rust_log: &str) -> TestResult<Agentgate> {
        let mut child = command
            .args(["run", "--config"])
            .arg(config)
            .env("RUST_LOG", rust_log)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()?;
        let mut stdout = BufReader::new(child.stdout.take().ok_or("no stdout")?).lines();
        let mut lines = BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
        let stderr = Arc::new(Mutex::new(String::new()));
        let collector = tokio::spawn({
            let stderr = Arc::clone(&stderr);
            async move {
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut text = stderr.lock().unwrap_or_else(PoisonError::into_inner);
                    text.push_str(&line);
                    text.push('\n');
                }
            }
        });
        let banner = stdout.next_line().await?.ok_or("agentgate exited before listening")?;
        let addr = banner
            .strip_prefix("agentgate listening on http://")
            .and_then(|rest| rest.split_whitespace().next())
            .ok_or_else(|| format!("unexpected banner: {banner}"))?
            .to_owned();
        let ca_pem = std::fs::read(dir.join("ca/agentgate-ca.pem"))?;
        Ok(Agentgate { child, addr, ca_pem, stderr, collector })
    }

    /// Its process id (for `/proc/<pid>/...`); `None` once it has exited.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// A size in `/proc/<pid>/status`, in KiB: `VmRSS` (resident now), `VmHWM` (the peak).
    pub fn memory_kib(&self, field: &str) -> TestResult<u64> {
        let pid = self.child.id().ok_or("agentgate has exited")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let line = status
            .lines()
            .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
            .ok_or_else(|| format!("no {field} line in /proc/{pid}/status"))?;
        Ok(line.split_whitespace().next().ok_or_else(|| format!("no {field} value"))?.parse()?)
    }

    /// The proxy address, `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// A client through the proxy, trusting its CA only.
    pub fn client(&self) -> TestResult<reqwest::Client> {
        self.client_through(reqwest::Proxy::all(format!("http://{}", self.addr))?)
    }

    /// A client through the proxy with Basic proxy credentials, trusting its CA only.
    pub fn client_as(&self, user: &str, password: &str) -> TestResult<reqwest::Client> {
        self.client_through(reqwest::Proxy::all(format!("http://{}", self.addr))?.basic_auth(user, password))
    }

    fn client_through(&self, proxy: reqwest::Proxy) -> TestResult<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .proxy(proxy)
            .tls_certs_only([reqwest::Certificate::from_pem(&self.ca_pem)?])
            .build()?)
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Waits (bounded) until stderr holds `count` lines containing every one of `needles`.
    pub async fn logged(&self, needles: &[&str], count: usize) -> TestResult<String> {
        let what = format!("{count} lines with {needles:?} on agentgate's stderr");
        eventually_within(WAIT_LIMIT, &what, async || {
            let text = self.stderr();
            let found = text.lines().filter(|line| needles.iter().all(|n| line.contains(n))).count();
            if found >= count { Ok(text) } else { Err(format!("{found} such lines in:\n{text}").into()) }
        })
        .await
    }

    /// Sends `signal` (`HUP`, `TERM`) with kill(1).
    pub async fn signal(&self, signal: &str) -> TestResult {
        let pid = self.child.id().ok_or("agentgate has exited")?;
        let status = Command::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().await?;
        assert!(status.success(), "kill -{signal} {pid}");
        Ok(())
    }

    /// SIGTERM, then waits for the graceful exit (the log flushed and fsynced).
    pub async fn stop(mut self) -> TestResult {
        self.signal("TERM").await?;
        let status = tokio::time::timeout(WAIT_LIMIT, self.child.wait()).await??;
        assert!(status.success(), "agentgate exits cleanly on SIGTERM: {status}\n{}", self.stderr());
        Ok(())
    }

    /// SIGKILL, then its whole stderr once the pipe is closed.
    pub async fn kill(mut self) -> TestResult<String> {
        self.child.start_kill()?;
        self.child.wait().await?;
        tokio::time::timeout(WAIT_LIMIT, &mut self.collector).await??;
        Ok(self.stderr())
    }
}
