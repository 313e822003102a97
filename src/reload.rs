//! Hot reload: watch, parse, validate, swap. On SIGHUP, and when the config file changes, the
//! file is read and checked in full (`Config::load`: every problem, each at its file:line or
//! key); a good file is put in force atomically for every request that starts from then on,
//! a bad one is rejected with every error logged while the last good config keeps running.
//! SIGHUP also reopens the decision log (logrotate's `postrotate`).
//!
//! What a reload changes: the operator's `[[rules]]` (and the agents they are scoped to),
//! `bypass_hosts`, `[agent]`, `[[agents]]` (their egress lists `allow_hosts`, `deny_hosts` and
//! `unlisted` included, and their Web Bot Auth `signing` keys: a key file replaced in place is
//! picked up too, its key compared with the running one) and `[auth]`, `mode` and per-agent modes and limits, `instance`, `[mitm] passthrough_hosts`,
//! `[network]`, `[connect]`, `[robots]`, `[agents_md]`, `[approvals]`, `[inspect]` and `shutdown_grace`. What it keeps:
//! the fetched policies, the rate-limit counters and concurrency slots, the requests held for
//! approval, the remembered approvals and the hosts granted to agents, the CA and its leaf
//! cache, the upstream pool, the decision log writer and every connection (a request in
//! flight finishes under the generation it started with). The settings that need a restart
//! (`listen`, `[cache]`, `[ca]`, `[upstream]`, `[mitm] cert_cache_size`, `[connections]`,
//! `[audit]`, `[limits]`, `[admin]`, `[transparent]`, `[approvals] store` and `[approvals.redis]`:
//! [`in_force`]) keep their running values, each change logged as
//! "needs a restart".
//!
//! Never: stops the proxy, opens listeners, or decides a request (the gate does, with the
//! generation in force). See `docs/reload.md`.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::{debug, error, info, warn};

use crate::config::{Config, ConfigError};
use crate::policy::operator::Mode;
use crate::proxy::ProxyState;

/// How long the file must stay quiet after a change before it is read: an editor's save is
/// several events (truncate, write, rename), and the file is read once they are over.
const SETTLE: Duration = Duration::from_millis(200);

/// Where the config comes from: the `--config` file (or the embedded default), with the
/// command line's overrides laid over it at start and at every reload.
#[derive(Debug, Clone, Default)]
pub struct ConfigSource {
    /// The config file; `None` runs on the embedded default, which never changes.
    pub path: Option<PathBuf>,
    /// `--listen`, over `listen`.
    pub listen: Option<SocketAddr>,
    /// `--ca-dir`, over `[ca] dir`.
    pub ca_dir: Option<PathBuf>,
}

impl ConfigSource {
    /// Reads, checks and completes the config.
    ///
    /// # Errors
    /// As [`Config::load`].
    pub fn load(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.path {
            Some(path) => Config::load(path)?,
            None => Config::embedded_default(),
        };
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if let Some(dir) = &self.ca_dir {
            config.ca.dir.clone_from(dir);
        }
        Ok(config)
    }
}

/// How many reloads were put in force and how many were rejected since start (the metric
/// `agentgate_config_reloads_total{result="ok"|"error"}`, which keeps the count).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReloadCounts {
    /// Files read, checked and put in force (an unchanged file included).
    pub ok: u64,
    /// Files rejected (unreadable or invalid); the last good config kept running.
    pub failed: u64,
}

/// A reload that was put in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reloaded {
    /// The settings that changed in the file but need a restart; their running values stay.
    pub needs_restart: Vec<&'static str>,
}

/// Reloads the config of one running proxy. Cheap to share behind an `Arc`.
pub struct Reloader {
    source: ConfigSource,
    state: Arc<ProxyState>,
    /// The config in force, to compare the next file with; shared with the readers of the
    /// whole of it (`crate::app`'s admin closures), which see each reload put in force.
    running: Arc<ArcSwap<Config>>,
    /// Held through a reload, so two never interleave.
    reloading: Mutex<()>,
}

impl Reloader {
    /// The reloader of the proxy serving on `state`, whose config in force is `running`.
    pub(crate) fn new(source: ConfigSource, state: Arc<ProxyState>, running: Arc<ArcSwap<Config>>) -> Self {
        Reloader { source, state, running, reloading: Mutex::new(()) }
    }

    /// Reloads and counts so far.
    pub fn counts(&self) -> ReloadCounts {
        let (ok, failed) = self.state.metrics.config_reloads();
        ReloadCounts { ok, failed }
    }

    /// Reads and checks the config file and puts it in force for every request that starts
    /// from now on. Logs the outcome: each setting that needs a restart at WARN, a rejected
    /// file at ERROR with every problem (file:line, or the key and its value).
    ///
    /// # Errors
    /// The [`ConfigError`] of a file that cannot be read or is invalid; nothing changed.
    pub fn reload(&self) -> Result<Reloaded, ConfigError> {
        let origin =
            self.source.path.as_deref().map_or_else(|| "the embedded default".to_owned(), |p| p.display().to_string());
        let _reloading = self.reloading.lock().unwrap_or_else(PoisonError::into_inner);
        let running = self.running.load_full();
        let config = match self.source.load() {
            Ok(config) => config,
            Err(err) => {
                self.state.metrics.config_reload(false);
                log_rejection(&err);
                return Err(err);
            }
        };
        let (config, needs_restart) = in_force(&running, config);
        // The file is valid on its own; what would run is its live settings beside the running
        // values of those that need a restart, and a rule across tables (`[approvals] mode =
        // "hold"` needs an `[admin]` token) must hold for that too.
        let problems = config.problems();
        if !problems.is_empty() {
            let kept = needs_restart.join(", ");
            let problems = problems
                .into_iter()
                .map(|problem| crate::config::Problem {
                    location: None,
                    message: format!(
                        "{problem} (checked with the running {kept}, which a reload does not change: \
                         restart agentgate to put the file's {kept} in force)"
                    ),
                })
                .collect();
            let err = ConfigError::Invalid { origin, problems };
            self.state.metrics.config_reload(false);
            log_rejection(&err);
            return Err(err);
        }
        // A replaced key file changes no setting: its key is compared too (`docs/signing.md`).
        let keys = match crate::signing::Keys::load(
            &config.ca.dir,
            crate::agents::signing_tables(&config.agent, &config.agents),
        ) {
            Ok(keys) => keys,
            Err(err) => {
                let problems = vec![crate::config::Problem { location: None, message: err.to_string() }];
                let err = ConfigError::Invalid { origin, problems };
                self.state.metrics.config_reload(false);
                log_rejection(&err);
                return Err(err);
            }
        };
        let rekeyed = keys.keyids() != self.state.generation().gate.keyids();
        for key in &needs_restart {
            warn!(config = %origin, "config change needs a restart: {key}; the running value is kept");
        }
        if config != *running || rekeyed {
            let config = Arc::new(config);
            let gate = config.gate_settings(&keys);
            self.state.reconfigure(Arc::new(config.proxy_settings()), gate);
            self.running.store(config);
            info!(config = %origin, "config reloaded; requests from now on use it");
        } else {
            info!(config = %origin, "config reloaded; nothing that reloads changed");
        }
        self.state.metrics.config_reload(true);
        Ok(Reloaded { needs_restart })
    }

    /// Closes the decision log and opens `[audit] path` again; logs the outcome.
    pub async fn reopen_log(&self) {
        match self.state.audit.reopen().await {
            Ok(()) => info!(path = %self.running.load().audit.path.display(), "decision log reopened"),
            Err(err) => error!("{err}"),
        }
    }

    /// Starts reloading on SIGHUP (which also reopens the decision log) and, with a config
    /// file, whenever that file changes. The signal handler is installed before this returns,
    /// so from then on SIGHUP never stops the process. Runs until the runtime shuts down.
    pub fn start(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        let mut hangup = hangup_signal();
        let (changes, watcher) = match &self.source.path {
            Some(path) => match watch(path) {
                Ok((changes, watcher)) => {
                    let running = self.running.load_full();
                    let log = &running.audit.path;
                    if beside(path, log) {
                        warn!(config = %path.display(), log = %log.display(),
                            "the decision log is in the config file's directory, which is watched: every write to \
                             the log wakes the watcher (a thread wake-up and a read per write); put [audit] path in \
                             a directory of its own, e.g. logs/decisions.jsonl");
                    }
                    (Some(changes), Some(watcher))
                }
                Err(err) => {
                    warn!(config = %path.display(), error = %err,
                        "cannot watch the config file; reload it with SIGHUP");
                    (None, None)
                }
            },
            None => (None, None),
        };
        let mut last = self.source.path.as_deref().and_then(|path| std::fs::read(path).ok());
        tokio::spawn(async move {
            // Watching stops when the watcher is dropped: it lives as long as this task.
            let _watcher = watcher;
            let mut changes = changes;
            loop {
                tokio::select! {
                    Some(()) = hangup.recv() => {
                        info!("SIGHUP: reopening the decision log and reloading the config");
                        self.reopen_log().await;
                        if self.source.path.is_some() {
                            let _ = self.reload();
                        } else {
                            info!("no --config file: the embedded default has nothing to reload");
                        }
                    }
                    Some(()) = next_change(&mut changes) => {
                        tokio::time::sleep(SETTLE).await;
                        if let Some(changes) = &mut changes {
                            while changes.try_recv().is_ok() {}
                        }
                        // Editors and `touch` fire events without changing a byte.
                        let now = self.source.path.as_deref().and_then(|path| std::fs::read(path).ok());
                        if now.is_some() && now == last {
                            debug!("config file event without a change");
                            continue;
                        }
                        last = now;
                        let _ = self.reload();
                    }
                    else => break,
                }
            }
        })
    }
}

/// `config` as it can be put in force next to `running`: the settings that need a restart
/// keep their running values, and each one that differs is named.
///
/// Every field of [`Config`] is named here, so a new setting does not compile until it is
/// sorted into those that reload and those that need a restart.
pub fn in_force(running: &Config, mut config: Config) -> (Config, Vec<&'static str>) {
    let mut needs_restart = Vec::new();
    let Config {
        listen,
        // Live: read from the generation in force by every request (or at shutdown).
        mode: _,
        instance: _,
        shutdown_grace: _,
        bypass_hosts: _,
        rules: _,
        agent: _,
        agents: _,
        auth: _,
        robots: _,
        agents_md: _,
        usage: _,
        network: _,
        connect: _,
        // Live but for its store, built once at start.
        approvals,
        // Read again with every load: a value file changed on disk is put in force.
        secrets: _,
        inspect: _,
        mcp: _,
        // Built once at start, or bound to what was opened then.
        cache,
        ca,
        upstream,
        mitm,
        connections,
        audit,
        limits,
        admin,
        transparent,
        record,
    } = &mut config;
    keep(&mut needs_restart, "listen", listen, &running.listen);
    keep(&mut needs_restart, "[cache]", cache, &running.cache);
    keep(&mut needs_restart, "[ca]", ca, &running.ca);
    keep(&mut needs_restart, "[upstream]", upstream, &running.upstream);
    keep(&mut needs_restart, "[mitm] cert_cache_size", &mut mitm.cert_cache_size, &running.mitm.cert_cache_size);
    keep(&mut needs_restart, "[connections]", connections, &running.connections);
    keep(&mut needs_restart, "[audit]", audit, &running.audit);
    keep(&mut needs_restart, "[limits]", limits, &running.limits);
    keep(&mut needs_restart, "[admin]", admin, &running.admin);
    keep(&mut needs_restart, "[transparent]", transparent, &running.transparent);
    keep(&mut needs_restart, "[approvals] store", &mut approvals.store, &running.approvals.store);
    keep(&mut needs_restart, "[approvals.redis]", &mut approvals.redis, &running.approvals.redis);
    keep(&mut needs_restart, "[record]", record, &running.record);
    // Replay answers from a recording loaded at start, through its own network seams.
    if (config.mode == Mode::Replay) != (running.mode == Mode::Replay) {
        keep(&mut needs_restart, "mode = \"replay\"", &mut config.mode, &running.mode);
    }
    (config, needs_restart)
}

fn keep<T: PartialEq + Clone>(needs_restart: &mut Vec<&'static str>, key: &'static str, new: &mut T, running: &T) {
    if new != running {
        needs_restart.push(key);
        new.clone_from(running);
    }
}

/// Logs a rejected file: one ERROR line per problem, each naming the file.
fn log_rejection(err: &ConfigError) {
    match err {
        ConfigError::Invalid { origin, problems } => {
            for problem in problems {
                match problem.location {
                    Some(_) => error!("config reload rejected, the last good config keeps running: {problem}"),
                    None => error!("config reload rejected, the last good config keeps running: {origin}: {problem}"),
                }
            }
        }
        other => error!("config reload rejected, the last good config keeps running: {other}"),
    }
}

/// SIGHUP as a stream; if its handler cannot be installed, logged, and nothing arrives.
fn hangup_signal() -> mpsc::Receiver<()> {
    let (tx, rx) = mpsc::channel(1);
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(mut hangup) => {
                tokio::spawn(async move {
                    while hangup.recv().await.is_some() {
                        // A SIGHUP already waiting covers this one.
                        let _ = tx.try_send(());
                    }
                });
            }
            Err(err) => warn!(error = %err, "cannot listen for SIGHUP; config reloads only when the file changes"),
        }
    }
    #[cfg(not(unix))]
    drop(tx);
    rx
}

/// The directory holding `path`: what [`watch`] watches.
fn directory_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Whether the decision log `log` is written in the directory holding the config file
/// `config`. inotify cannot watch a directory for one name only, so then every append to the
/// log is an event the watcher thread wakes for, reads and drops: about three system calls
/// and a context switch per write, a third of agentgate's system calls per request in the
/// benchmark (bench/RESULTS.md, round 3). Stdout (`-`) is never beside anything.
fn beside(config: &Path, log: &Path) -> bool {
    if log == Path::new("-") {
        return false;
    }
    let (config_dir, log_dir) = (directory_of(config), directory_of(log));
    // Both exist by now (the log's directory is created when the log is opened).
    match (config_dir.canonicalize(), log_dir.canonicalize()) {
        (Ok(config_dir), Ok(log_dir)) => config_dir == log_dir,
        _ => config_dir == log_dir,
    }
}

/// Watches the directory holding `path` (editors replace a file by renaming another over
/// it, which a watch on the file itself would miss) for events on the file's name.
fn watch(path: &Path) -> io::Result<(mpsc::Receiver<()>, RecommendedWatcher)> {
    let name = path.file_name().map(ToOwned::to_owned).ok_or_else(|| io::Error::other("not a file name"))?;
    let dir = directory_of(path);
    let (tx, rx) = mpsc::channel(1);
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
        Ok(event) => {
            let ours = event.paths.iter().any(|p| p.file_name() == Some(name.as_os_str()));
            if ours && !matches!(event.kind, EventKind::Access(_)) {
                // One pending change covers any number of events.
                let _ = tx.try_send(());
            }
        }
        Err(err) => warn!(error = %err, "config file watch error"),
    })
    .map_err(io::Error::other)?;
    watcher.watch(&dir, RecursiveMode::NonRecursive).map_err(io::Error::other)?;
    Ok((rx, watcher))
}

/// The next change, or never when nothing is watched.
async fn next_change(changes: &mut Option<mpsc::Receiver<()>>) -> Option<()> {
    match changes {
        Some(changes) => changes.recv().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::from_toml_str(text, "test.toml").expect("a valid test config")
    }

    /// `[admin]` with a token (`printf %s admin-secret | sha256sum`), which holding needs.
    const ADMIN_TOKEN: &str =
        "[admin]\ntoken_sha256 = \"16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01\"\n";

    #[test]
    fn live_settings_change_and_restart_settings_keep_their_running_values() {
        let running = config(&format!("listen = \"127.0.0.1:8080\"\n{ADMIN_TOKEN}"));
        let edited = config(&format!(
            "listen = \"127.0.0.1:9999\"\nmode = \"monitor\"\ninstance = \"replica-2\"\n[[rules]]\nhost = \"*\"\naction = \"deny\"\n\
             [mitm]\npassthrough_hosts = [\"bank.example\"]\ncert_cache_size = 5\n[audit]\npath = \"other.jsonl\"\n\
             [connect]\nallowed_ports = [443]\n[limits]\nstore = \"redis\"\n[approvals]\nmode = \"hold\"\n\
             store = \"redis\"\n[approvals.redis]\ntimeout = \"1s\"\n{ADMIN_TOKEN}"
        ));
        let (in_force, needs) = in_force(&running, edited);
        assert_eq!(
            needs,
            ["listen", "[mitm] cert_cache_size", "[audit]", "[limits]", "[approvals] store", "[approvals.redis]"]
        );
        assert_eq!(
            (in_force.approvals.store, &in_force.approvals.redis),
            (running.approvals.store, &running.approvals.redis),
            "the fleet's store is built once, at start"
        );
        assert_eq!(in_force.limits, running.limits, "the limiter is built once, at start");
        assert_eq!(in_force.instance, "replica-2");
        assert_eq!(in_force.listen, running.listen);
        assert_eq!(in_force.mitm.cert_cache_size, running.mitm.cert_cache_size);
        assert_eq!(in_force.audit, running.audit);
        assert_eq!(in_force.mode, crate::policy::operator::Mode::Monitor);
        assert_eq!(in_force.rules.len(), 1);
        assert_eq!(in_force.mitm.passthrough_hosts(), ["bank.example"]);
        assert!(!in_force.connect.allows(80));
        assert_eq!(in_force.approvals.mode, crate::approvals::ApprovalMode::Hold);
    }

    #[test]
    fn the_recording_and_replay_need_a_restart_but_an_agents_record_is_live() {
        let running = config("[[agents]]\nid = \"a\"\ntoken = \"t\"\nrecord = true\n[record]\ndir = \"rec\"\n");
        let edited = config(
            "[[agents]]\nid = \"a\"\ntoken = \"t\"\n[[agents]]\nid = \"b\"\ntoken = \"u\"\nrecord = true\n\
             [record]\ndir = \"other\"\nall = false\n",
        );
        let (recording, needs) = in_force(&running, edited);
        assert_eq!(needs, ["[record]"]);
        assert_eq!(recording.record, running.record);
        assert_eq!((recording.agents[0].record, recording.agents[1].record), (false, true));
        let replaying = config("mode = \"replay\"\n[record]\ndir = \"rec\"\n");
        let (replaying, needs) = in_force(&running, replaying);
        assert_eq!(needs, ["mode = \"replay\""]);
        assert_eq!(replaying.mode, Mode::Enforce);
    }

    #[test]
    fn holding_for_a_human_checks_the_admin_token_that_runs_not_the_one_in_the_file() {
        let running = config("");
        let token = "[admin]\ntoken_sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n";
        let edited = config(&format!("{token}[agent]\nallow_hosts = [\"a.example\"]\nunlisted = \"hold\"\n"));
        let (in_force, needs) = in_force(&running, edited);
        assert_eq!(needs, ["[admin]"], "the token needs a restart");
        let problems = in_force.problems();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(
            problems[0]
                .starts_with("[agent] unlisted = \"hold\" holds requests for a human's approval, but no admin token")
        );
    }

    #[test]
    fn a_decision_log_beside_the_config_is_noticed() {
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::create_dir(dir.path().join("logs")).expect("a log directory");
        let config = dir.path().join("agentgate.toml");
        assert!(beside(&config, &dir.path().join("decisions.jsonl")));
        assert!(beside(&config, &dir.path().join("logs/../decisions.jsonl")), "the same directory, spelled otherwise");
        assert!(!beside(&config, &dir.path().join("logs/decisions.jsonl")), "a subdirectory is not watched");
        assert!(!beside(&config, Path::new("-")), "stdout");
        assert!(beside(Path::new("agentgate.toml"), Path::new("./decisions.jsonl")));
    }

    #[test]
    fn an_unchanged_file_needs_nothing() {
        let running = config("");
        let (in_force, needs) = in_force(&running, running.clone());
        assert!(needs.is_empty());
        assert_eq!(in_force, running);
    }

    #[test]
    fn the_command_line_overrides_every_load() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("agentgate.toml");
        std::fs::write(&path, "listen = \"127.0.0.1:8080\"\n").expect("write the config");
        let source = ConfigSource {
            path: Some(path.clone()),
            listen: Some("127.0.0.1:0".parse().expect("an address")),
            ca_dir: Some(dir.path().join("ca")),
        };
        let loaded = source.load().expect("loads");
        assert_eq!((loaded.listen.port(), loaded.ca.dir), (0, dir.path().join("ca")));
        std::fs::write(&path, "listen = 8080\n").expect("break the config");
        let err = source.load().expect_err("a value of the wrong type").to_string();
        assert!(err.contains(&format!("\n  - {}:1:10: listen = 8080", path.display())), "{err}");
    }
}
