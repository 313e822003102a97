//! `agentgate explain`: evaluate one request against policy files on disk, as the proxy
//! would against the same files fetched from the origin, and print the decision with its
//! reasons (JSON for machines and the conformance checkers, text for people).
//!
//! Owns: reading `--policy-dir` (each file and its `<file>.headers` sidecar) into the same
//! [`FetchOutcome`]s the fetcher produces (each file read up to its format's cap plus one
//! byte, as a fetch reads it, so the oversize rules apply: X6, B23, C4, D15), parsing the target URL into a [`RequestView`],
//! and rendering the result. Given a configured agent ([`Operator`], built by `Config::operator`; `--config
//! FILE --agent ID` and the admin `/explain`), the operator's side first, as the gate decides
//! it: the agent's egress lists, then the `[[rules]]` that apply to it and `bypass_hosts`;
//! when they decide, the site's files are not read. Never: policy semantics (all of that is
//! `policy::`), network.
//!
//! The interface is fixed by `../shared/conformance/README.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::agents::{Agent, Unlisted};
use crate::policy::operator::{Egress, OperatorRules};
use crate::policy::{
    self, Decision, FetchOutcome, Format, Headers, LimitKind, Outcome, Policies, PolicyReport, PolicyStatus, Reason,
    RequestView, Severity, Source, formats,
};

/// Why `explain` could not run (usage errors: exit status 2).
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    /// `--policy-dir` is not a readable directory.
    #[error(
        "--policy-dir {path}: {source}; pass a directory holding robots.txt, agents.txt, AGENTS.md, automation-preferences.txt or .well-known/tdmrep.json"
    )]
    PolicyDir {
        /// The directory given.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// A policy file or its sidecar exists but cannot be read.
    #[error("cannot read {path}: {source}")]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A `.headers` sidecar line is not `Name: value`.
    #[error("{path}:{line}: expected a header line `Name: value`, found {text:?}")]
    SidecarLine {
        /// The sidecar file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// The line as written.
        text: String,
    },
    /// A `--header` argument is not `Name: value`.
    #[error("--header {0:?}: expected `Name: value`, e.g. --header 'Content-Type: application/json'")]
    HeaderArg(String),
    /// The URL has no `scheme://`.
    #[error("url {0:?}: expected an absolute http or https URL such as https://example.com/path")]
    Url(String),
    /// `--agent` names no agent of `--config`.
    #[error(
        "agent {id:?}: no [agent] or [[agents]] entry of the config has this id (configured: {known}); leave it out for [agent]"
    )]
    UnknownAgent {
        /// The id asked for.
        id: String,
        /// The ids the config has, comma-separated (`none`).
        known: String,
    },
}

/// What the caller asked about.
#[derive(Debug, Clone, Default)]
pub struct ExplainRequest {
    /// The directory standing for the origin's policy files.
    pub policy_dir: PathBuf,
    /// The agent's product token (robots.txt and autoctl group matching).
    pub user_agent: Option<String>,
    /// The agent id (default `explain`).
    pub agent: Option<String>,
    /// AGENTS.md trust level, 0 to 5.
    pub trust_level: u8,
    /// Declared purposes (autoctl).
    pub purposes: Vec<String>,
    /// Request headers as `Name: value`.
    pub headers: Vec<String>,
    /// HTTP method.
    pub method: String,
    /// The request URL.
    pub url: String,
}

/// The decision and the state of every policy file.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// The combined decision.
    pub decision: Decision,
    /// The policy states it was made from, one per format; `None` when the operator's
    /// lists or rules decided and the site's files were not read.
    pub policies: Option<Policies>,
    /// The agent id, origin and host the request was evaluated for (limit keys).
    agent: String,
    origin: String,
    host: String,
}

/// Evaluates one request against the files in `policy_dir`.
///
/// # Errors
/// When the directory, a file, a sidecar, a `--header` or the URL cannot be used.
pub fn explain(req: &ExplainRequest) -> Result<Explanation, ExplainError> {
    explain_in(req, policy::Settings::default())
}

/// [`explain`] under the operator's `settings` (`[robots]`, `[agents_md]`, `[usage]`), as the
/// gate decides: `agentgate explain --config` ([`Operator::settings`]).
///
/// # Errors
/// When the directory, a file, a sidecar, a `--header` or the URL cannot be used.
pub fn explain_in(req: &ExplainRequest, settings: policy::Settings) -> Result<Explanation, ExplainError> {
    let target = Target::parse(&req.url)?;
    let policies = load_policies(&req.policy_dir, &target.host)?;
    explain_under(req, policies, settings)
}

/// Evaluates one request against `policies` (`req.policy_dir` is not read) under the
/// operator's `settings` (`[robots]`, `[agents_md]`, `[usage]`), as the gate decides: what
/// the admin API's `/explain` does with an origin's policies from the live cache, and what
/// `agentgate audit shadow` replays with.
///
/// # Errors
/// When a header in `req.headers` or the URL cannot be used.
pub fn explain_under(
    req: &ExplainRequest,
    policies: Policies,
    settings: policy::Settings,
) -> Result<Explanation, ExplainError> {
    let target = Target::parse(&req.url)?;
    let headers = request_headers(req)?;
    let view = target.view(req, &headers);
    let decision = policy::evaluate_with(&policies, &view, settings);
    Ok(Explanation::new(decision, Some(policies), &view))
}

/// The operator's side of a decision for one configured agent: its egress lists
/// (`allow_hosts`, `deny_hosts`) and the `[[rules]]` and `bypass_hosts` that apply to it,
/// compiled from a config exactly as the gate compiles them.
pub struct Operator {
    agent: std::sync::Arc<Agent>,
    rules: OperatorRules,
    settings: policy::Settings,
}

impl Operator {
    /// The operator's side for `agent`, under the operator's `rules` and the switches of the
    /// site files `settings`: what `Config::operator` builds for an agent of a config.
    pub fn new(agent: std::sync::Arc<Agent>, rules: OperatorRules, settings: policy::Settings) -> Operator {
        Operator { agent, rules, settings }
    }

    /// The config's switches that change what the site files mean, as the gate reads them.
    pub fn settings(&self) -> policy::Settings {
        self.settings
    }

    /// The agent: its product token, trust level and purposes fill an [`ExplainRequest`].
    pub fn agent(&self) -> &Agent {
        &self.agent
    }
}

/// The operator's decision on one request for `operator`'s agent, as the gate makes it before
/// any site file is read: a host its lists refuse (`operator.denied_host`,
/// `operator.not_allowlisted`), else the first rule that applies, else a bypass host. `None`
/// when the site's files decide ([`explain`], [`explain_under`]).
///
/// # Errors
/// When a header in `req.headers` or the URL cannot be used.
pub fn explain_operator(req: &ExplainRequest, operator: &Operator) -> Result<Option<Explanation>, ExplainError> {
    let mut target = Target::parse(&req.url)?;
    // The gate matches the canonical host (`crate::net::host`), as the proxy routes it.
    if let Ok(host) = crate::net::canonical_host(&target.host) {
        target.host = host.into_owned();
    }
    let headers = request_headers(req)?;
    let view = target.view(req, &headers);
    let agent = operator.agent.id().unwrap_or_default();
    let decision = match operator.agent.egress.decide(&target.host, target.port, &[]) {
        Egress::Denied(reason) => Some(Decision::single(Outcome::Deny, reason)),
        // As `Gate::check_egress_lists` decides it: the proxy holds such a host for a human.
        Egress::Unlisted(reason) if operator.agent.unlisted == Unlisted::Hold => {
            Some(Decision::single(Outcome::NeedsApproval, reason))
        }
        Egress::Unlisted(reason) => Some(Decision::single(Outcome::Deny, reason)),
        Egress::Admitted => operator.rules.evaluate(&view, agent, &[]),
    };
    Ok(decision.map(|decision| Explanation::new(decision, None, &view)))
}

/// `req.headers` (`Name: value` each) as the policy core reads them.
fn request_headers(req: &ExplainRequest) -> Result<Headers, ExplainError> {
    let mut headers = Headers::default();
    for raw in &req.headers {
        let (name, value) = split_header(raw).ok_or_else(|| ExplainError::HeaderArg(raw.clone()))?;
        headers.push(name, value);
    }
    Ok(headers)
}

/// Reads the policy files of one origin from a directory, with the same fetch-outcome
/// semantics as the live fetcher: a missing file is a 404, and `/.well-known/agents.md` is
/// read only when `/AGENTS.md` is not a policy (SEMANTICS C1). `host` is the host the files
/// stand for (AGENTS.md `site` is checked against it, C13).
///
/// # Errors
/// When the directory or a file in it cannot be read.
pub fn load_policies(dir: &Path, host: &str) -> Result<Policies, ExplainError> {
    std::fs::read_dir(dir).map_err(|source| ExplainError::PolicyDir { path: dir.to_path_buf(), source })?;
    Policies::read(host, |path, cap| read_outcome(dir, path, cap))
}

/// The file at `path` under `dir` as a 200 with its sidecar headers, or a 404 when absent;
/// read up to its format's cap plus one byte, as the fetcher reads a body.
fn read_outcome(dir: &Path, path: &str, cap: usize) -> Result<FetchOutcome, ExplainError> {
    let name = path.trim_start_matches('/');
    let path = dir.join(name);
    let (body, over_cap) = match crate::lint::read_capped(&path, cap) {
        Ok(read) => read,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(FetchOutcome::not_found()),
        Err(source) => return Err(ExplainError::ReadFile { path, source }),
    };
    let sidecar = dir.join(format!("{name}.headers"));
    let headers = match std::fs::read_to_string(&sidecar) {
        Ok(text) => parse_sidecar(&sidecar, &text)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Headers::default(),
        Err(source) => return Err(ExplainError::ReadFile { path: sidecar, source }),
    };
    Ok(FetchOutcome::Response { status: 200, headers, body, over_cap })
}

fn parse_sidecar(path: &Path, text: &str) -> Result<Headers, ExplainError> {
    let mut headers = Headers::default();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let (name, value) = split_header(line).ok_or_else(|| ExplainError::SidecarLine {
            path: path.to_path_buf(),
            line: i + 1,
            text: line.to_owned(),
        })?;
        headers.push(name, value);
    }
    Ok(headers)
}

fn split_header(raw: &str) -> Option<(String, String)> {
    let (name, value) = raw.split_once(':')?;
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return None;
    }
    Some((name.to_owned(), value.trim().to_owned()))
}

/// The parts of the URL the evaluator needs. Parsed by hand rather than with `http::Uri`
/// because the corpora pass URLs a client would never send (raw non-ASCII, the empty URL)
/// and the matcher, not the URL parser, must decide what they mean.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    scheme: String,
    host: String,
    port: u16,
    path_and_query: String,
}

impl Target {
    /// The request the policy core evaluates: this target, as `req` asks for it.
    fn view<'a>(&'a self, req: &'a ExplainRequest, headers: &'a Headers) -> RequestView<'a> {
        RequestView {
            method: &req.method,
            scheme: &self.scheme,
            host: &self.host,
            port: self.port,
            path_and_query: &self.path_and_query,
            product_token: req.user_agent.as_deref(),
            user_agent: headers.get("user-agent"),
            agent_id: req.agent.as_deref().unwrap_or("explain"),
            trust_level: req.trust_level,
            purposes: &req.purposes,
            headers,
        }
    }

    fn parse(url: &str) -> Result<Target, ExplainError> {
        if url.is_empty() {
            // Google's matcher maps the empty URL to "/" (GoogleOnly_SystemTest).
            return Ok(Target { scheme: "https".into(), host: String::new(), port: 443, path_and_query: "/".into() });
        }
        let (scheme, rest) = url.split_once("://").ok_or_else(|| ExplainError::Url(url.to_owned()))?;
        let scheme = scheme.to_ascii_lowercase();
        let default_port = match scheme.as_str() {
            "http" => 80,
            "https" => 443,
            _ => return Err(ExplainError::Url(url.to_owned())),
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        let authority = authority.rsplit('@').next().unwrap_or_default();
        let (host, port) = split_authority(authority, default_port).ok_or_else(|| ExplainError::Url(url.to_owned()))?;
        let path_and_query = if path.starts_with('/') { path.to_owned() } else { format!("/{path}") };
        Ok(Target { scheme, host, port, path_and_query })
    }
}

/// `host[:port]` or `[v6][:port]` into a lower-case host without brackets and a port.
fn split_authority(authority: &str, default_port: u16) -> Option<(String, u16)> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) if !p.is_empty() => p.parse().ok()?,
        _ => default_port,
    };
    Some((host.to_ascii_lowercase(), port))
}

impl Explanation {
    fn new(decision: Decision, policies: Option<Policies>, view: &RequestView<'_>) -> Self {
        Explanation {
            decision,
            policies,
            agent: view.agent_id.to_owned(),
            origin: view.origin(),
            host: view.host.to_owned(),
        }
    }

    /// The JSON object the conformance checkers read (`../shared/conformance/README.md`),
    /// with structured diagnostics and headers to inject added.
    pub fn to_json(&self) -> Value {
        let d = &self.decision;
        let reasons: Vec<Value> = d.reasons.iter().map(reason_json).collect();
        let mut limits = Vec::new();
        let mut concurrency = Vec::new();
        for limit in d.limits.iter() {
            match limit.kind {
                LimitKind::Rate { requests, window_s } => limits.push(json!({
                    "source": limit.source.as_str(),
                    "requests": requests,
                    "window_s": window_s,
                    "scope": scope_name(limit),
                    "key": limit.key(&self.agent, &self.origin, &self.host),
                    "line": limit.reason.line,
                    "rule": limit.reason.rule,
                })),
                LimitKind::Delay { millis } => limits.push(json!({
                    "source": limit.source.as_str(),
                    "requests": 1,
                    "delay_ms": millis,
                    "scope": scope_name(limit),
                    "key": limit.key(&self.agent, &self.origin, &self.host),
                    "line": limit.reason.line,
                    "rule": limit.reason.rule,
                })),
                LimitKind::Concurrent { max } => concurrency.push(json!({
                    "source": limit.source.as_str(),
                    "max_in_flight": max,
                    "scope": scope_name(limit),
                    "key": limit.key(&self.agent, &self.origin, &self.host),
                    "line": limit.reason.line,
                    "rule": limit.reason.rule,
                })),
                LimitKind::Bytes { direction, bytes, window_s } => limits.push(json!({
                    "source": limit.source.as_str(),
                    "direction": direction.as_str(),
                    "bytes": bytes,
                    "window_s": window_s,
                    "scope": scope_name(limit),
                    "key": limit.key(&self.agent, &self.origin, &self.host),
                    "line": limit.reason.line,
                    "rule": limit.reason.rule,
                })),
            }
        }
        let mut policies = serde_json::Map::new();
        for (source, report) in self.reports() {
            let mut entry = report_json(&report);
            if let Some(fields) = entry.as_object_mut() {
                fields.extend(self.informational(source));
            }
            policies.insert(source.as_str().to_owned(), entry);
        }
        let inject: Vec<Value> = d.inject_headers.iter().map(|(n, v)| json!({"name": n, "value": v})).collect();
        json!({
            "allowed": d.is_allowed(),
            "decision": d.outcome.as_str(),
            "reasons": reasons,
            "limits": limits,
            "concurrency": concurrency,
            "inject_headers": inject,
            "usage": d.usage,
            "policies": policies,
        })
    }

    /// A human-readable explanation: the verdict, each reason with file and line, the
    /// limits, and each file's status and findings.
    pub fn to_text(&self) -> String {
        let d = &self.decision;
        let mut out = String::new();
        let _ = writeln!(out, "decision: {}", d.outcome.as_str());
        for r in &d.reasons {
            // An operator's reason names its config file and line itself (`ag.toml:32: ...`).
            let line = r.line.filter(|l| !names_its_line(&r.rule, *l)).map(|l| format!(":{l}")).unwrap_or_default();
            let _ = writeln!(out, "  {}{line}: {} ({})", r.source, r.rule, r.code);
        }
        for l in d.limits.iter() {
            let what = match l.kind {
                LimitKind::Rate { requests, window_s } => format!("{requests} requests per {window_s} s"),
                LimitKind::Delay { millis } => format!("1 request per {millis} ms"),
                LimitKind::Concurrent { max } => format!("{max} requests in flight"),
                LimitKind::Bytes { direction, bytes, window_s } => {
                    format!("{bytes} bytes {} per {window_s} s", direction.as_str())
                }
            };
            let line = l.reason.line.map(|n| format!(":{n}")).unwrap_or_default();
            let _ = writeln!(out, "limit: {what} per {} ({}{line})", scope_name(l), l.source);
        }
        for (name, value) in &d.inject_headers {
            let _ = writeln!(out, "inject header: {name}: {value}");
        }
        for p in &d.usage {
            let line = p.line.map(|l| format!(":{l}")).unwrap_or_default();
            let _ = writeln!(out, "usage: {}{line}: {}={} ({:?})", p.source, p.label, p.value, p.stance);
        }
        for (source, report) in self.reports() {
            let digest = report.digest.as_deref().map(|d| format!(" sha256={d}")).unwrap_or_default();
            let _ = writeln!(out, "{source}: {}{digest}", report.status.as_str());
            for diag in &report.diagnostics {
                let line = diag.line.map(|l| format!(":{l}")).unwrap_or_default();
                let _ = writeln!(out, "  {source}{line}: {}: {} [{}]", diag.severity.as_str(), diag.message, diag.code);
            }
        }
        out
    }

    /// What a file says that decides nothing but an operator wants to see: robots.txt's
    /// other records (Sitemap, Crawl-delay, ...), agents.txt metadata comments (B6), the
    /// AGENTS.md location that applied and its entries (C25, C27).
    fn informational(&self, source: Source) -> Vec<(String, Value)> {
        let Some(p) = &self.policies else { return Vec::new() };
        match source {
            Source::Robots => {
                let other =
                    p.robots.other_lines().iter().map(|o| json!({"line": o.line, "key": o.key, "value": o.value}));
                vec![("other_records".to_owned(), Value::Array(other.collect()))]
            }
            Source::AgentsTxt => {
                let meta =
                    p.agents_txt.metadata().iter().map(|m| json!({"line": m.line, "key": m.key, "value": m.value}));
                vec![("metadata".to_owned(), Value::Array(meta.collect()))]
            }
            Source::AgentsMd => {
                let entries = p
                    .agents_md
                    .entries()
                    .iter()
                    .map(|e| json!({"line": e.line, "section": e.section, "key": e.key, "value": e.value}));
                let applies = matches!(p.agents_md.report().status, PolicyStatus::Valid | PolicyStatus::Malformed);
                let location = applies.then(|| p.agents_md.location().path());
                vec![("location".to_owned(), json!(location)), ("entries".to_owned(), Value::Array(entries.collect()))]
            }
            _ => Vec::new(),
        }
    }

    /// Each format's source and report, in the order of [`formats!`]; none when the site's
    /// files were not read.
    fn reports(&self) -> Vec<(Source, PolicyReport)> {
        let Some(p) = &self.policies else { return Vec::new() };
        macro_rules! reports {
            ($($field:ident: $format:ty),* $(,)?) => {
                vec![$((<$format>::SOURCE, <$format>::report(&p.$field)),)*]
            };
        }
        formats!(reports)
    }
}

/// Whether `rule` starts with its own `file:line:` (`line`), as an operator's reasons do.
fn names_its_line(rule: &str, line: u32) -> bool {
    rule.split_once(": ").is_some_and(|(head, _)| head.ends_with(&format!(":{line}")))
}

fn scope_name(limit: &policy::Limit) -> &'static str {
    match limit.scope {
        policy::LimitScope::Agent => "agent",
        policy::LimitScope::Origin => "agent+origin",
        policy::LimitScope::Host => "agent+host",
        policy::LimitScope::Rule { .. } => "agent+origin+rule",
    }
}

fn reason_json(r: &Reason) -> Value {
    json!({"source": r.source.as_str(), "code": r.code.as_str(), "line": r.line, "rule": r.rule, "digest": r.digest})
}

/// One file's state as JSON: status, digest, and its findings both as `warnings` strings
/// and as structured `diagnostics` (also the admin API's `/policies`).
pub fn report_json(report: &PolicyReport) -> Value {
    // `warnings` carries every finding as "code: message" so that the checkers' substring
    // comparison finds the code; `diagnostics` has the same findings structured.
    let warnings: Vec<String> = report.diagnostics.iter().map(|d| format!("{}: {}", d.code, d.message)).collect();
    let diagnostics: Vec<Value> = report
        .diagnostics
        .iter()
        .map(|d| {
            json!({
                "severity": match d.severity { Severity::Warning => "warning", Severity::Error => "error" },
                "line": d.line,
                "code": d.code,
                "message": d.message,
            })
        })
        .collect();
    json!({
        "status": report.status.as_str(),
        "digest": report.digest,
        "warnings": warnings,
        "diagnostics": diagnostics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> Target {
        match Target::parse(url) {
            Ok(t) => t,
            Err(e) => panic!("{url}: {e}"),
        }
    }

    #[test]
    fn url_parts() {
        let t = target("https://Example.COM:8443/a/b?x=1#frag");
        assert_eq!(
            t,
            Target {
                scheme: "https".into(),
                host: "example.com".into(),
                port: 8443,
                path_and_query: "/a/b?x=1".into()
            }
        );
        assert_eq!(target("http://foo.bar").path_and_query, "/");
        assert_eq!(target("http://foo.bar?x").path_and_query, "/?x");
        assert_eq!(target("http://foo.bar//folder/a.php").path_and_query, "//folder/a.php");
        assert_eq!(target("http://[::1]:9/x").host, "::1");
        assert_eq!(target("http://[::1]/x").port, 80);
        assert_eq!(target("http://foo.bar/foo/bar/ツ").path_and_query, "/foo/bar/ツ");
        assert_eq!(target("").path_and_query, "/");
    }

    #[test]
    fn bad_urls_are_usage_errors() {
        assert!(Target::parse("example.com/x").is_err());
        assert!(Target::parse("ftp://example.com/x").is_err());
        assert!(Target::parse("http://example.com:99999/").is_err());
    }

    #[test]
    fn headers_need_a_colon_and_a_name() {
        assert_eq!(split_header("Content-Type: text/html"), Some(("Content-Type".into(), "text/html".into())));
        assert_eq!(split_header("nocolon"), None);
        assert_eq!(split_header(": x"), None);
    }

    fn explain_get(dir: &Path, path: &str) -> Value {
        let request = ExplainRequest {
            policy_dir: dir.to_owned(),
            method: "GET".into(),
            url: format!("https://example.com{path}"),
            ..ExplainRequest::default()
        };
        explain(&request).expect("explain").to_json()
    }

    /// SEMANTICS B23 (explain once called a 600 KiB agents.txt valid while the fetcher
    /// caps it): over the cap, the file is malformed / too-large and restricts the site.
    #[test]
    fn semantics_b23_agents_txt_over_the_cap_is_too_large_and_restricts() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut body = crate::policy::agents_txt::fix_hash(b"/ ALLOW\n");
        body.resize(600 * 1024, b'\n');
        std::fs::write(dir.path().join("agents.txt"), body).expect("write agents.txt");
        let json = explain_get(dir.path(), "/");
        let report = &json["policies"]["agents.txt"];
        assert_eq!(report["status"], "malformed", "{json:#}");
        assert_eq!(report["diagnostics"][0]["code"], "too-large", "{json:#}");
        assert_eq!(json["decision"], "deny", "{json:#}");
        assert_eq!(json["reasons"][0]["code"], "agents_txt.too_large", "{json:#}");
    }

    /// SEMANTICS C1, C4: an AGENTS.md over 1 MiB is no policy, so `/.well-known/agents.md`
    /// applies instead, as when the fetcher caps it.
    #[test]
    fn semantics_c4_agents_md_over_the_cap_falls_through_to_well_known() {
        let dir = tempfile::tempdir().expect("temp dir");
        let policy =
            "# AGENTS.md\n\n## Identity\n- site: example.com\n\n## Restrictions\n- disallowed-paths: /private/*\n";
        let mut root = policy.as_bytes().to_vec();
        root.resize(1100 * 1024, b'\n');
        std::fs::write(dir.path().join("AGENTS.md"), root).expect("write AGENTS.md");
        std::fs::create_dir(dir.path().join(".well-known")).expect("mkdir");
        let well_known = policy.replace("/private/*", "/secret/*");
        std::fs::write(dir.path().join(".well-known/agents.md"), well_known).expect("write agents.md");
        let json = explain_get(dir.path(), "/secret/x");
        let report = &json["policies"]["AGENTS.md"];
        assert_eq!(report["location"], "/.well-known/agents.md", "{json:#}");
        assert_eq!(json["decision"], "deny", "{json:#}");
        assert_eq!(json["reasons"][0]["code"], "agents_md.disallowed_path", "{json:#}");
        assert_eq!(explain_get(dir.path(), "/private/x")["decision"], "allow", "the oversized root is ignored");
    }

    /// SEMANTICS U5: `.well-known/tdmrep.json` in the policy directory is read and listed;
    /// its reserved location refuses a `train-ai` purpose only.
    #[test]
    fn tdmrep_json_is_listed_and_its_reservation_refuses_training() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir(dir.path().join(".well-known")).expect("mkdir");
        let tdmrep = r#"[{"location": "/books/*", "tdm-reservation": 1}]"#;
        std::fs::write(dir.path().join(".well-known/tdmrep.json"), tdmrep).expect("write tdmrep.json");
        let explain_for = |purpose: &str| {
            let request = ExplainRequest {
                policy_dir: dir.path().to_owned(),
                purposes: vec![purpose.to_owned()],
                method: "GET".into(),
                url: "https://example.com/books/a".into(),
                ..ExplainRequest::default()
            };
            explain(&request).expect("explain").to_json()
        };
        let json = explain_for("train-ai");
        assert_eq!(json["policies"]["tdmrep.json"]["status"], "valid", "{json:#}");
        assert_eq!(json["decision"], "deny", "{json:#}");
        assert_eq!(json["reasons"][0]["code"], "usage.refused", "{json:#}");
        assert_eq!(json["usage"][0]["source"], "tdmrep.json", "{json:#}");
        assert_eq!(json["usage"][0]["path"], "/books/*", "{json:#}");
        assert_eq!(explain_for("search")["decision"], "allow");
    }

    /// `explain --config` reads the site's files under the config's switches, as the gate
    /// does: `[usage] undeclared = "deny"` refuses a request that declares no purpose where a
    /// site refuses one.
    #[test]
    fn explain_under_a_config_applies_its_switches_as_the_gate_does() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("robots.txt"), "User-agent: *\nContent-Usage: train-ai=n\n")
            .expect("write robots.txt");
        let config = crate::config::Config::from_toml_str("[usage]\nundeclared = \"deny\"\n", "agentgate.toml")
            .expect("a config");
        let operator = config.operator(None).expect("the [agent] table");
        let request = ExplainRequest {
            policy_dir: dir.path().to_owned(),
            method: "GET".into(),
            url: "https://example.com/a".into(),
            ..ExplainRequest::default()
        };
        assert_eq!(explain(&request).expect("explain").to_json()["decision"], "allow", "default switches");
        let json = explain_in(&request, operator.settings()).expect("explain").to_json();
        assert_eq!(json["decision"], "deny", "{json:#}");
        assert_eq!(json["reasons"][0]["code"], "usage.refused", "{json:#}");
    }

    #[test]
    fn json_names_limit_keys_and_informational_records() {
        let dir = tempfile::tempdir().expect("temp dir");
        let agents = crate::policy::agents_txt::fix_hash(b"/dashboard ALLOW limit=50\n");
        std::fs::write(dir.path().join("agents.txt"), agents).expect("write agents.txt");
        std::fs::write(dir.path().join("robots.txt"), "User-agent: *\nDisallow: /x\nSitemap: https://e.test/s.xml\n")
            .expect("write robots.txt");
        let request = ExplainRequest {
            policy_dir: dir.path().to_owned(),
            agent: Some("bot-1".into()),
            method: "GET".into(),
            url: "https://example.com/dashboard".into(),
            ..ExplainRequest::default()
        };
        let json = explain(&request).expect("explain").to_json();
        let limit = &json["limits"][0];
        assert_eq!(limit["key"], "agents.txt|bot-1|https://example.com:443|line=2");
        assert_eq!((limit["requests"].as_u64(), limit["window_s"].as_u64()), (Some(50), Some(60)));
        let robots = &json["policies"]["robots.txt"];
        assert_eq!(robots["other_records"][0]["key"], "Sitemap");
        assert_eq!(robots["other_records"][0]["line"], 3);
        assert!(json["policies"]["AGENTS.md"]["location"].is_null(), "no AGENTS.md, so no location");
    }
}
