//! git through the proxy, with git itself: a bare repository served by `git http-backend`
//! (smart HTTP, as a CGI) behind a small hyper origin over TLS from a test CA, and `git clone`
//! with `HTTPS_PROXY` and `GIT_SSL_CAINFO` as the README says.
//!
//! - Who git is: git (libcurl, `http.proxyAuthMethod` "anyauth") sends the
//!   credentials of `HTTPS_PROXY=http://id:token@…` only after a `407`; with `[auth] required
//!   = true` it is challenged and named by its token, while an agent matched by its address
//!   is still served without a challenge; without `required` it is the client's address,
//!   unless it sends them at once (`GIT_HTTP_PROXY_AUTHMETHOD=basic`).
//! - Why a clone was refused (item 7): git shows the body of a refused discovery
//!   (`info/refs?service=git-upload-pack`) as `remote:` lines but not of a refused POST, so
//!   the gate refuses the discovery when the POST it announces would be refused.
//!
//! The tests that run git are ignored where git is missing (`support::tools`); the gate's
//! answer to a discovery is also checked with reqwest, which every machine has.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::process::Command;
use tokio_rustls::TlsAcceptor;

use crate::agents::agent;
use crate::support::block::{self, Expected};
use crate::support::log::for_request;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::tools::{self, GIT};
use crate::support::{TestProxy, TestResult, header};

/// The file every served repository holds, and its text.
const README: (&str, &str) = ("README", "served by git http-backend\n");

/// The AGENTS.md of a site that lets agents read and call its API (git's POSTs are
/// `access-api`, SEMANTICS C17).
const ALLOWS_GIT: &str =
    "# AGENTS.md\n\n## Identity\n- site: localhost\n\n## Allowed Actions\n- read-content: true\n- access-api: true\n";

/// The AGENTS.md of a site that forbids its API in so many words, on line 8.
const FORBIDS_GIT: &str =
    "# AGENTS.md\n\n## Identity\n- site: localhost\n\n## Allowed Actions\n- read-content: true\n- access-api: false\n";

/// The AGENTS.md of the issue: no `## Allowed Actions`, so every write takes the spec's
/// default, false (§5.3, C18).
const DEFAULT_ACTIONS: &str = "# AGENTS.md\n\n## Identity\n- site: localhost\n";

/// A smart-HTTP git origin over TLS (certificate from a test CA; HTTP/1.1 and h2): every
/// path under `/repo.git/` is answered by `git http-backend` from the bare repositories in
/// its root, `/AGENTS.md` by the text given, anything else `404`.
struct GitOrigin {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GitOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GitOrigin {
    async fn start(ca: &TestCa, root: &Path, agents_md: Option<&'static str>) -> TestResult<GitOrigin> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let acceptor = TlsAcceptor::from(ca.origin_server_config()?);
        let root = Arc::new(root.to_owned());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, root) = (acceptor.clone(), Arc::clone(&root));
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = service_fn(move |request| answer(Arc::clone(&root), agents_md, request));
                    let _ = auto::Builder::new(TokioExecutor::new()).serve_connection(TokioIo::new(tls), service).await;
                });
            }
        });
        Ok(GitOrigin { addr, task })
    }

    /// The repository's URL, as an agent clones it.
    fn repo_url(&self) -> String {
        format!("https://localhost:{}/repo.git", self.addr.port())
    }
}

async fn answer(
    root: Arc<PathBuf>,
    agents_md: Option<&'static str>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path();
    let response = match agents_md {
        Some(text) if path == "/AGENTS.md" => Ok(respond(StatusCode::OK, "text/markdown", Bytes::from(text))),
        _ if path.starts_with("/repo.git/") => http_backend(&root, request).await,
        _ => Ok(respond(StatusCode::NOT_FOUND, "text/plain", Bytes::from_static(b"not found\n"))),
    };
    Ok(response.unwrap_or_else(|error| {
        respond(StatusCode::INTERNAL_SERVER_ERROR, "text/plain", Bytes::from(error.to_string()))
    }))
}

fn respond(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    response
}

/// One request answered by `git http-backend` as a CGI (RFC 3875): the request's method,
/// path, query and body in, its `Status:` and headers, a blank line and the body out.
async fn http_backend(root: &Path, request: Request<Incoming>) -> TestResult<Response<Full<Bytes>>> {
    let (parts, body) = request.into_parts();
    let body = body.collect().await?.to_bytes();
    let header = |name: &str| parts.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
    let mut command = Command::new("git");
    command
        .arg("http-backend")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", root)
        .env("GIT_PROJECT_ROOT", root)
        .env("GIT_HTTP_EXPORT_ALL", "1")
        .env("GATEWAY_INTERFACE", "CGI/1.1")
        .env("REMOTE_ADDR", "127.0.0.1")
        .env("REQUEST_METHOD", parts.method.as_str())
        .env("PATH_INFO", parts.uri.path())
        .env("QUERY_STRING", parts.uri.query().unwrap_or_default())
        .env("CONTENT_TYPE", header("content-type"))
        .env("CONTENT_LENGTH", body.len().to_string())
        .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
        .env("HTTP_GIT_PROTOCOL", header("git-protocol"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn()?;
    if let Some(mut stdin) = child.stdin.take() {
        tokio::io::AsyncWriteExt::write_all(&mut stdin, &body).await?;
    }
    let output = child.wait_with_output().await?;
    let out = output.stdout;
    let (head_end, body_start) = match out.windows(4).position(|w| w == b"\r\n\r\n") {
        Some(at) => (at, at + 4),
        None => {
            let at = out.windows(2).position(|w| w == b"\n\n").ok_or_else(|| {
                format!("git http-backend wrote no CGI header: {}", String::from_utf8_lossy(&output.stderr))
            })?;
            (at, at + 2)
        }
    };
    let mut response = Response::new(Full::new(Bytes::copy_from_slice(&out[body_start..])));
    for line in String::from_utf8_lossy(&out[..head_end]).lines() {
        let Some((name, value)) = line.split_once(':') else { continue };
        let value = value.trim();
        if name.eq_ignore_ascii_case("status") {
            let code = value.split_whitespace().next().unwrap_or("500");
            *response.status_mut() = StatusCode::from_bytes(code.as_bytes())?;
        } else {
            response
                .headers_mut()
                .append(http::HeaderName::from_bytes(name.as_bytes())?, http::HeaderValue::from_str(value)?);
        }
    }
    Ok(response)
}

/// `git args…` in `dir` with nothing from this machine's git config or environment but
/// `PATH` and `env` (so no proxy or `NO_PROXY` of the test runner's), in English, never
/// prompting; bounded, so a git that hangs fails the test.
async fn git(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> TestResult<Output> {
    let program = tools::need(GIT)?;
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("LC_ALL", "C")
        .envs(env.iter().copied())
        .kill_on_drop(true);
    Ok(tokio::time::timeout(Duration::from_secs(60), command.output()).await??)
}

/// Like [`git`], failing the test with git's stderr unless it succeeds.
async fn git_ok(dir: &Path, args: &[&str]) -> TestResult {
    let output = git(dir, args, &[]).await?;
    if !output.status.success() {
        return Err(format!("git {args:?} failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    Ok(())
}

/// A temporary directory holding `root/repo.git`, a bare repository with one commit of
/// [`README`]; clones go beside it.
async fn bare_repository() -> TestResult<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work)?;
    std::fs::create_dir_all(dir.path().join("root"))?;
    git_ok(&work, &["init", "-q", "-b", "main"]).await?;
    std::fs::write(work.join(README.0), README.1)?;
    git_ok(&work, &["add", README.0]).await?;
    git_ok(&work, &["-c", "user.name=test", "-c", "user.email=test@localhost", "commit", "-q", "-m", "first"]).await?;
    git_ok(dir.path(), &["clone", "-q", "--bare", "work", "root/repo.git"]).await?;
    Ok(dir)
}

/// `git clone <url> <into>` in `dir` through `proxy` (as the README says: the proxy
/// variables, `GIT_SSL_CAINFO`), with `user` as the proxy URL's credentials when given and
/// `env` on top.
async fn clone(
    dir: &Path,
    proxy: &TestProxy,
    user: Option<&str>,
    url: &str,
    into: &str,
    env: &[(&str, &str)],
) -> TestResult<Output> {
    let proxy_url = match user {
        Some(user) => format!("http://{user}@{}", proxy.addr),
        None => proxy.url(),
    };
    let ca = proxy.ca_path.display().to_string();
    let mut vars =
        vec![("HTTPS_PROXY", proxy_url.as_str()), ("https_proxy", proxy_url.as_str()), ("GIT_SSL_CAINFO", ca.as_str())];
    vars.extend_from_slice(env);
    git(dir, &["clone", url, into], &vars).await
}

/// Whether the clone in `dir/into` holds the repository's README.
fn cloned(dir: &Path, into: &str) -> bool {
    std::fs::read_to_string(dir.join(into).join(README.0)).is_ok_and(|text| text == README.1)
}

/// The records for the repository (`/repo.git/…`), the discovery and the POST.
fn repository_records(records: &[Value]) -> Vec<&Value> {
    records.iter().filter(|r| r["url.full"].as_str().is_some_and(|url| url.contains("/repo.git/"))).collect()
}

const GIT_TOKEN: &str = "git-secret";

#[tokio::test]
#[ignore = "needs git: run by scripts/test.sh"]
async fn with_auth_required_git_is_challenged_and_named_by_its_token_and_an_address_matched_agent_is_not_challenged()
-> TestResult {
    let ca = TestCa::new("origin CA")?;
    let dir = bare_repository().await?;
    let origin = GitOrigin::start(&ca, &dir.path().join("root"), Some(ALLOWS_GIT)).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        let local = agentgate::agents::AgentConfig {
            id: Some("local-bot".to_owned()),
            clients: vec!["127.0.0.2/32".parse().expect("a network")],
            ..Default::default()
        };
        config.agents = vec![agent("git-agent", GIT_TOKEN), local];
        config.auth.required = true;
    })
    .await?;

    let user = format!("git-agent:{GIT_TOKEN}");
    let output = clone(dir.path(), &proxy, Some(&user), &origin.repo_url(), "clone", &[]).await?;
    assert!(output.status.success(), "git clone failed: {}", String::from_utf8_lossy(&output.stderr));
    assert!(cloned(dir.path(), "clone"), "the clone holds the repository's README");

    // An agent matched by its address sends no credentials and is served at once.
    let local = proxy.client_builder()?.local_address("127.0.0.2".parse::<std::net::IpAddr>()?).build()?;
    let page = local.get(format!("https://localhost:{}/AGENTS.md", origin.addr.port())).send().await?;
    assert_eq!(page.status(), 200, "no challenge for an address-matched agent");

    let records = proxy.finish().await?;
    let repository = repository_records(&records);
    assert!(repository.len() >= 2, "the discovery and the POST at least: {records:#?}");
    for record in &repository {
        assert_eq!(record["agentgate.agent"], "git-agent", "git named by its token: {record:#}");
        assert_eq!(record["event.action"], "allow", "{record:#}");
    }
    assert!(
        repository.iter().any(|r| r["http.request.method"] == "POST"),
        "git-upload-pack's POST is among them: {repository:#?}"
    );
    // git's first CONNECT of each connection carries no credentials: challenged, once each.
    let challenged: Vec<&Value> = records.iter().filter(|r| r["http.response.status_code"] == 407).collect();
    assert!(!challenged.is_empty(), "git sent its credentials only after a 407: {records:#?}");
    assert!(challenged.iter().all(|r| r["client.address"] == "127.0.0.1" && r["http.request.method"] == "CONNECT"));
    assert!(challenged.iter().all(|r| r["event.action"] == "auth_challenge"), "a challenge, not a refusal");
    let local: Vec<&Value> = records.iter().filter(|r| r["client.address"] == "127.0.0.2").collect();
    assert!(!local.is_empty() && local.iter().all(|r| r["agentgate.agent"] == "local-bot"), "{local:#?}");
    assert!(local.iter().all(|r| r["http.response.status_code"] != 407), "never challenged: {local:#?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs git: run by scripts/test.sh"]
async fn without_auth_required_git_is_named_only_when_it_sends_its_credentials_at_once() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let dir = bare_repository().await?;
    let root = dir.path().join("root");
    // Two sites, one per clone, so their records are told apart by port.
    let first = GitOrigin::start(&ca, &root, Some(ALLOWS_GIT)).await?;
    let second = GitOrigin::start(&ca, &root, Some(ALLOWS_GIT)).await?;
    let proxy = TestProxy::start_with(&ca, |config| config.agents = vec![agent("git-agent", GIT_TOKEN)]).await?;

    let user = format!("git-agent:{GIT_TOKEN}");
    // git waits for a 407 that never comes: it is the default agent, its address.
    let output = clone(dir.path(), &proxy, Some(&user), &first.repo_url(), "anyauth", &[]).await?;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // Told to send Basic at once, it is git-agent.
    let basic = [("GIT_HTTP_PROXY_AUTHMETHOD", "basic")];
    let output = clone(dir.path(), &proxy, Some(&user), &second.repo_url(), "basic", &basic).await?;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(cloned(dir.path(), "anyauth") && cloned(dir.path(), "basic"));

    let records = proxy.finish().await?;
    for (origin, named) in [(&first, "127.0.0.1"), (&second, "git-agent")] {
        let on_site = on(&records, origin);
        assert!(on_site.len() >= 2, "the discovery and the POST at least: {records:#?}");
        assert!(on_site.iter().all(|r| r["agentgate.agent"] == named), "{named}: {on_site:#?}");
    }
    assert!(records.iter().all(|r| r["http.response.status_code"] != 407), "nothing is challenged: {records:#?}");
    Ok(())
}

/// The records for the repository on `origin`.
fn on<'a>(records: &'a [Value], origin: &GitOrigin) -> Vec<&'a Value> {
    let site = format!("localhost:{}/", origin.addr.port());
    repository_records(records)
        .into_iter()
        .filter(|r| r["url.full"].as_str().is_some_and(|u| u.contains(&site)))
        .collect()
}

#[tokio::test]
#[ignore = "needs git: run by scripts/test.sh"]
async fn a_git_clone_refused_by_agents_md_prints_the_sites_reason_and_a_site_allowing_it_clones() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let dir = bare_repository().await?;
    let root = dir.path().join("root");
    let forbids = GitOrigin::start(&ca, &root, Some(FORBIDS_GIT)).await?;
    let defaults = GitOrigin::start(&ca, &root, Some(DEFAULT_ACTIONS)).await?;
    let allows = GitOrigin::start(&ca, &root, Some(ALLOWS_GIT)).await?;
    let proxy = TestProxy::start(&ca).await?;

    let refused = clone(dir.path(), &proxy, None, &forbids.repo_url(), "forbidden", &[]).await?;
    assert!(!refused.status.success(), "the clone is refused");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    for expected in [
        "remote: agentgate blocked this request: GET https://localhost:",
        "remote: - AGENTS.md line 8: \"- access-api: false\" [agents_md.action_denied]",
        "/repo.git/git-upload-pack (Content-Type: application/x-git-upload-pack-request)",
        "[git.refused_for_post]",
    ] {
        assert!(stderr.contains(expected), "git's stderr shows {expected:?}:\n{stderr}");
    }
    assert!(!stderr.contains("RPC failed"), "refused before the POST: {stderr}");

    // The site: no Allowed Actions, so the spec's default forbids the POST.
    let refused = clone(dir.path(), &proxy, None, &defaults.repo_url(), "defaults", &[]).await?;
    assert!(!refused.status.success(), "the clone is refused");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    let default = "remote: - AGENTS.md: \"access-api defaults to false when an AGENTS.md exists (§5.3)\"";
    assert!(stderr.contains(default), "git's stderr shows {default:?}:\n{stderr}");

    let output = clone(dir.path(), &proxy, None, &allows.repo_url(), "allowed", &[]).await?;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(cloned(dir.path(), "allowed"));

    let records = proxy.finish().await?;
    for origin in [&forbids, &defaults] {
        let on_site = on(&records, origin);
        assert_eq!(on_site.len(), 1, "the discovery alone: git sent no POST: {on_site:#?}");
        let discovery = on_site[0];
        assert_eq!(discovery["http.request.method"], "GET");
        assert_eq!(discovery["event.action"], "deny");
        assert_eq!(discovery["agentgate.reasons"][0]["code"], "agents_md.action_denied", "{discovery:#}");
        assert_eq!(discovery["agentgate.reasons"][1]["code"], "git.refused_for_post", "{discovery:#}");
    }
    let allowed = on(&records, &allows);
    assert!(allowed.iter().any(|r| r["http.request.method"] == "POST"), "{allowed:#?}");
    assert!(allowed.iter().all(|r| r["event.action"] == "allow"), "{allowed:#?}");
    Ok(())
}

/// The gate's answer to a discovery, with reqwest: refused with the POST's reasons when the
/// POST would be, the dumb protocol's `info/refs` and a site allowing the POST untouched, and
/// in monitor mode forwarded with the same reasons as `would_deny`.
#[tokio::test]
async fn a_discovery_whose_post_is_refused_is_refused_with_the_posts_reasons() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let markdown = |text: &str| Site::new().serve("/AGENTS.md", 200, &[("content-type", "text/markdown")], text);
    let forbids = Origin::https_site(&ca, markdown(FORBIDS_GIT)).await?;
    let allows = Origin::https_site(&ca, markdown(ALLOWS_GIT)).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    let discovery = "/repo.git/info/refs?service=git-upload-pack";

    let expected = Expected {
        decision: "deny",
        source: "AGENTS.md",
        code: "agents_md.action_denied",
        line: Some(8),
        rule: "access-api: false",
        advice: "does not allow this kind of action",
    };
    let record = block::plain(client.get(forbids.url(discovery)).send().await?, &expected).await?;
    let push = client.get(forbids.url("/repo.git/info/refs?service=git-receive-pack")).send().await?;
    assert_eq!(push.status(), 403, "a push's discovery too");
    let body = push.text().await?;
    for said in [
        "- operator: \"git sends POST /repo.git/git-receive-pack (Content-Type: application/x-git-receive-pack-request) after this discovery request",
        "[git.refused_for_post]",
        "This is the first request of a git clone, fetch or push",
    ] {
        assert!(body.contains(said), "{said:?} in:\n{body}");
    }
    let dumb = client.get(forbids.url("/repo.git/info/refs")).send().await?;
    assert_eq!(dumb.status(), 200, "the dumb protocol's GET announces no POST");
    let allowed = client.get(allows.url(discovery)).send().await?;
    assert_eq!(allowed.status(), 200, "a site that allows the POST gets its discovery");

    let records = proxy.finish().await?;
    block::logged(&records, &record, "GET", &expected)?;
    let logged = crate::support::log::by_id(&records, &record)?;
    let note = &logged["agentgate.reasons"][1];
    assert_eq!(note["source"], "operator", "{logged:#}");
    assert_eq!(note["code"], "git.refused_for_post", "{logged:#}");
    assert!(note["rule"].as_str().is_some_and(|r| r.contains("POST /repo.git/git-upload-pack")), "{logged:#}");
    let upload = for_request(&records, "GET", "/repo.git/info/refs?service=REDACTED");
    assert_eq!(upload.len(), 3, "the refused discovery, the push's and the allowed one: {records:#?}");

    // Monitor mode: forwarded, recorded would_deny with the same reasons.
    let proxy = TestProxy::start_with(&ca, |config| config.mode = agentgate::policy::operator::Mode::Monitor).await?;
    let response = proxy.client()?.get(forbids.url(discovery)).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "agentgate-decision"), "", "a forwarded answer carries no block header");
    let records = proxy.finish().await?;
    let watched = for_request(&records, "GET", "/repo.git/info/refs?service=REDACTED");
    assert_eq!(watched.len(), 1, "{records:#?}");
    assert_eq!(watched[0]["event.action"], "would_deny");
    assert_eq!(watched[0]["agentgate.reasons"][1]["code"], "git.refused_for_post");
    Ok(())
}
