//! What every end-to-end test needs: a real origin (`origin`), test CAs (`pki`) and pattern
//! bodies (`pattern`) from `tests/testkit/`, the real proxy started in-process on `127.0.0.1:0` (`TestProxy`), and
//! clients: reqwest through the proxy, the system `curl` (`curl`), and raw sockets (`raw`);
//! the one bounded wait (`wait::eventually`) and what a test needs beyond a fresh machine
//! (`tools`: programs and root, with how such a test is marked ignored).

pub mod binary;
pub mod block;
pub mod browser;
pub mod curl;
pub mod log;
pub mod raw;
pub mod tools;
pub mod wait;
// Shared with the fetcher's unit tests, which use parts these tests do not.
#[allow(dead_code)]
#[path = "../testkit/mod.rs"]
mod testkit;

pub use testkit::{TestResult, origin, pattern, pki};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use agentgate::app::Proxy;
use agentgate::config::Config;
use agentgate::net::PortRange;
use agentgate::net::{Dial, Resolve, SystemResolver, TcpDialer};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use self::pki::TestCa;

/// Logs go to the test output when `RUST_LOG` asks for them (e.g. `RUST_LOG=agentgate=debug`).
fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// The real proxy, in-process, with a temporary CA directory, trusting `origin_ca` upstream.
pub struct TestProxy {
    /// Where the proxy listens.
    pub addr: SocketAddr,
    /// agentgate's CA certificate, PEM: what agents trust.
    pub ca_pem: String,
    /// The file holding `ca_pem`.
    pub ca_path: PathBuf,
    /// The decision log (in the temporary directory).
    pub log_path: PathBuf,
    /// Where the admin API listens (a free loopback port), unless the test turned it off.
    pub admin_addr: Option<SocketAddr>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    _ca_dir: tempfile::TempDir,
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl TestProxy {
    /// A proxy with the embedded default config, trusting `origin_ca` for origins.
    pub async fn start(origin_ca: &TestCa) -> TestResult<TestProxy> {
        TestProxy::start_with(origin_ca, |_| {}).await
    }

    /// The proxy edge on its own: every host is in `bypass_hosts`, so requests are still
    /// gated and logged but no policy file is fetched. For tests that count what the origin
    /// sees (connections) or need the origin's own failure (down, untrusted) to surface as
    /// the edge reports it rather than as a robots.txt-unreachable block.
    pub async fn start_edge(origin_ca: &TestCa) -> TestResult<TestProxy> {
        TestProxy::start_with(origin_ca, bypass_all).await
    }

    /// Like [`start`](Self::start), with `edit` applied to the config last.
    pub async fn start_with(origin_ca: &TestCa, edit: impl FnOnce(&mut Config)) -> TestResult<TestProxy> {
        TestProxy::start_with_network(origin_ca, Arc::new(SystemResolver), Arc::new(TcpDialer), edit).await
    }

    /// Like [`start_with`](Self::start_with), resolving names with `resolver` and opening
    /// every connection to an origin with `dialer` (the network guard's seams).
    pub async fn start_with_network(
        origin_ca: &TestCa,
        resolver: Arc<dyn Resolve>,
        dialer: Arc<dyn Dial>,
        edit: impl FnOnce(&mut Config),
    ) -> TestResult<TestProxy> {
        init_tracing();
        agentgate::tls::install_default_provider();
        let ca_dir = tempfile::tempdir()?;
        let mut config = Config::embedded_default();
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.ca.dir = ca_dir.path().to_owned();
        config.upstream.extra_ca_files = vec![origin_ca.pem_path.clone()];
        config.audit.path = ca_dir.path().join("decisions.jsonl");
        // The test origins live on loopback, which the network guard denies by default
        // (docs/security.md): tests opt in, and CONNECT may reach their ephemeral ports.
        config.network.allow_cidrs = vec!["127.0.0.0/8".parse()?, "::1/128".parse()?];
        config.connect.allowed_ports = vec![PortRange { first: 1, last: u16::MAX }];
        // Never the default fixed port: tests run in parallel.
        config.admin.listen = Some(SocketAddr::from(([127, 0, 0, 1], 0)));
        edit(&mut config);
        let log_path = config.audit.path.clone();
        let running = Proxy::with_network(Arc::new(config), resolver, dialer)?.bind().await?;
        let addr = running.local_addr();
        let admin_addr = running.admin_addr();
        let ca_path = running.ca_cert_path().to_owned();
        let ca_pem = std::fs::read_to_string(&ca_path)?;
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(running.run_until(async move {
            let _ = stop.await;
        }));
        Ok(TestProxy {
            addr,
            ca_pem,
            ca_path,
            log_path,
            admin_addr,
            shutdown: Some(shutdown),
            task: Some(task),
            _ca_dir: ca_dir,
        })
    }

    /// `http://127.0.0.1:<port>`: the proxy URL for clients.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A reqwest client builder using this proxy for every URL and trusting only its CA.
    pub fn client_builder(&self) -> TestResult<reqwest::ClientBuilder> {
        Ok(reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(self.url())?)
            .tls_certs_only([reqwest::Certificate::from_pem(self.ca_pem.as_bytes())?]))
    }

    /// A reqwest client through this proxy that trusts `origin_ca` instead of the proxy's CA:
    /// for passthrough tunnels, where the origin's own certificate reaches the client.
    pub fn passthrough_client(&self, origin_ca: &TestCa) -> TestResult<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .proxy(reqwest::Proxy::all(self.url())?)
            .tls_certs_only([reqwest::Certificate::from_pem(origin_ca.pem.as_bytes())?])
            .build()?)
    }

    /// A reqwest client through this proxy (h2 or HTTP/1.1 by ALPN for https URLs).
    pub fn client(&self) -> TestResult<reqwest::Client> {
        Ok(self.client_builder()?.build()?)
    }

    /// Waits (bounded) until the decision log holds at least `count` lines; returns them all.
    pub async fn log_lines(&self, count: usize) -> TestResult<Vec<serde_json::Value>> {
        log::wait_for(&self.log_path, count).await
    }

    /// Shuts the proxy down (which drains requests, then flushes and fsyncs the log), waits
    /// for it, and returns every line of the log: the exact set of records.
    pub async fn finish(self) -> TestResult<Vec<serde_json::Value>> {
        Ok(self.finish_with_text().await?.0)
    }

    /// Like [`finish`](Self::finish), also returning the log file's text (the temporary
    /// directory goes away with the proxy).
    pub async fn finish_with_text(mut self) -> TestResult<(Vec<serde_json::Value>, String)> {
        if let Some(task) = self.shut_down() {
            task.await?;
        }
        let text = std::fs::read_to_string(&self.log_path)?;
        Ok((log::read(&self.log_path)?, text))
    }

    /// Starts graceful shutdown; the handle completes when `run_until` has returned.
    pub fn shut_down(&mut self) -> Option<JoinHandle<()>> {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        self.task.take()
    }
}

/// Config edit: every host skips site policies.
pub fn bypass_all(config: &mut Config) {
    config.bypass_hosts = vec!["*".to_owned()];
}

/// The values of header `name`, joined with `, `.
pub fn header(response: &reqwest::Response, name: &str) -> String {
    let values: Vec<&str> = response.headers().get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
    values.join(", ")
}
