//! A real headless Chromium for the console tests, driven over WebDriver: `chromedriver`
//! (Debian's `chromium-driver`) started on a free loopback port, one fresh profile per
//! browser, and `fantoccini` as the client. A test that starts one is marked ignored ("needs
//! chromium and chromium-driver"); `scripts/test.sh` installs both and runs it, and a missing
//! one fails it naming the package (`support::tools`).
//!
//! Every wait looks at the page until it shows what is waited for ([`Browser::wait_until`],
//! `support::wait`); none sleeps blind.

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use serde_json::{Value, json};
use tokio::process::{Child, Command};

use super::TestResult;
use super::tools::{self, CHROMEDRIVER, CHROMIUM};
use super::wait::eventually_within;

/// How long the page may take to show what a test waits for. The issue asks for a decision
/// in the live stream "within a second"; CI machines are noisy, so the bound is 5 s and the
/// test names the figure it waits for.
pub const PAGE_DEADLINE: Duration = Duration::from_secs(5);

/// How long chromedriver may take to listen.
const DRIVER_DEADLINE: Duration = Duration::from_secs(20);

/// A headless Chromium session and the chromedriver serving it (killed on drop).
pub struct Browser {
    pub client: Client,
    _driver: Child,
    _profile: tempfile::TempDir,
}

impl Browser {
    /// Starts chromedriver and a headless Chromium with a fresh profile, reaching every
    /// address directly (the admin API is never reached through a proxy from the environment).
    pub async fn start() -> TestResult<Browser> {
        Browser::launch(&["--no-proxy-server".to_owned()], None, false).await
    }

    /// Like [`start`](Self::start), keeping what the page logs to its console and every
    /// network request the browser makes (DevTools' `Network` events), for [`log`](Self::log).
    pub async fn start_logging() -> TestResult<Browser> {
        Browser::launch(&["--no-proxy-server".to_owned()], None, true).await
    }

    /// Like [`start`](Self::start), with `flags` in place of `--no-proxy-server` (a proxy
    /// and its bypass rules, say) and `$HOME` set to `home`, where Chromium on Linux finds
    /// the NSS database of certificates its user trusts (`~/.pki/nssdb`).
    pub async fn start_with(flags: &[String], home: &Path) -> TestResult<Browser> {
        Browser::launch(flags, Some(home), false).await
    }

    async fn launch(flags: &[String], home: Option<&Path>, logging: bool) -> TestResult<Browser> {
        let chromium = tools::need(CHROMIUM)?;
        let chromedriver = tools::need(CHROMEDRIVER)?;
        let port = free_port()?;
        let mut driver = Command::new(chromedriver);
        driver.arg(format!("--port={port}"));
        if let Some(home) = home {
            // chromedriver passes its environment on to Chromium.
            driver.env("HOME", home);
        }
        let driver = driver
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        eventually_within(DRIVER_DEADLINE, &format!("chromedriver listening on {address}"), async || {
            Ok(tokio::net::TcpStream::connect(address).await?)
        })
        .await?;
        let profile = tempfile::tempdir()?;
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1400,1500",
        ]
        .into_iter()
        .map(str::to_owned)
        .chain(flags.iter().cloned())
        .chain([format!("--user-data-dir={}", profile.path().display())])
        .collect::<Vec<_>>();
        let mut capabilities = serde_json::Map::new();
        capabilities.insert("goog:chromeOptions".to_owned(), json!({"binary": chromium, "args": args}));
        if logging {
            capabilities.insert("goog:loggingPrefs".to_owned(), json!({"browser": "ALL", "performance": "ALL"}));
        }
        let client = ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://{address}"))
            .await?;
        Ok(Browser { client, _driver: driver, _profile: profile })
    }

    /// Looks at the page until `condition` (a JavaScript expression) is true, for at most
    /// `deadline`; the error names `what` and what the page showed last.
    pub async fn wait_until(&self, condition: &str, what: &str, deadline: Duration) -> TestResult {
        let look = format!("return [Boolean({condition}), document.body ? document.body.innerText : ''];");
        eventually_within(deadline, what, async || {
            let value = self.client.execute(&look, vec![]).await?;
            match (&value[0], value[1].as_str()) {
                (Value::Bool(true), _) => Ok(()),
                (_, text) => Err(format!("the page shows:\n{}", text.unwrap_or_default()).into()),
            }
        })
        .await
    }

    /// The value of a JavaScript expression.
    pub async fn eval(&self, expression: &str) -> TestResult<Value> {
        Ok(self.client.execute(&format!("return {expression};"), vec![]).await?)
    }

    /// Saves a screenshot as `docs/NAME` when `AGENTGATE_SCREENSHOTS` is set: how the
    /// README's pictures are taken, from a real run (`docs/console.md`).
    pub async fn screenshot_for_docs(&self, name: &str) -> TestResult {
        if std::env::var_os("AGENTGATE_SCREENSHOTS").is_none() {
            return Ok(());
        }
        let png = self.client.screenshot().await?;
        std::fs::write(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs").join(name), png)?;
        Ok(())
    }

    /// The entries of chromedriver's log `kind` since the last call (`browser`: the page's
    /// console, each `{level, message}`; `performance`: DevTools events, each `message` a
    /// JSON text); only for a browser from [`start_logging`](Self::start_logging).
    pub async fn log(&self, kind: &str) -> TestResult<Vec<Value>> {
        let entries = self.client.issue_cmd(ReadLog(kind.to_owned())).await?;
        Ok(entries.as_array().cloned().ok_or_else(|| format!("the {kind} log is not a list: {entries}"))?)
    }

    /// Saves a screenshot of the page as `path`.
    pub async fn screenshot_to(&self, path: &Path) -> TestResult {
        std::fs::write(path, self.client.screenshot().await?)?;
        Ok(())
    }

    /// Ends the session (Chromium exits); chromedriver is killed when `self` drops.
    pub async fn close(self) -> TestResult {
        self.client.clone().close().await?;
        Ok(())
    }
}

/// chromedriver's log endpoint (`POST /session/{id}/se/log`), which W3C WebDriver lacks.
#[derive(Debug)]
struct ReadLog(String);

impl fantoccini::wd::WebDriverCompatibleCommand for ReadLog {
    fn endpoint(&self, base: &url::Url, session: Option<&str>) -> Result<url::Url, url::ParseError> {
        base.join(&format!("session/{}/se/log", session.unwrap_or_default()))
    }

    fn method_and_body(&self, _: &url::Url) -> (http::Method, Option<String>) {
        (http::Method::POST, Some(json!({"type": self.0}).to_string()))
    }
}

/// A loopback port free at the time of asking (chromedriver takes no port 0).
fn free_port() -> TestResult<u16> {
    Ok(TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?.local_addr()?.port())
}
