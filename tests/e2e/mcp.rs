//! `[[mcp]]` (docs/mcp.md) with the official MCP Python SDK on both sides
//! (`mcp_sdk.py`): an SDK server with tools `search`, `delete_repo` and `create_issue` over
//! Streamable HTTP on TLS from a test CA, behind agentgate's MITM, and the SDK client
//! through agentgate as its HTTPS proxy. An agent whose table allows `search` and
//! `create_*` is offered only those (JSON and event-stream answers alike); its hand-sent
//! `delete_repo` gets a JSON-RPC error naming the rule, the server never runs it, and the
//! session goes on; an agent no table scopes sees every tool; each request is recorded with
//! its method and tool and no argument; a body over `max_body` is refused and recorded; a
//! raw batch sent by curl with one refused call is answered whole and sent nowhere; a call
//! held for a human waits for the admin API's answer; `audit suggest` learns `allow_tools`.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;

use crate::admin::{admin_client, admin_url};
use crate::agents::agent;
use crate::approvals::{ADMIN, answer};
use crate::support::curl::curl;
use crate::support::pki::TestCa;
use crate::support::tools::need_python_mcp;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, bypass_all};
use agentgate::config::Config;
use agentgate::inspect::PatternConfig;
use agentgate::mcp::{McpTable, Unlisted};
use agentgate::policy::operator::Mode;

const SDK: &str = include_str!("mcp_sdk.py");
/// How long the SDK's server may take to start, and its client to run its session.
const SDK_LIMIT: Duration = Duration::from_secs(60);

/// The MCP server: an SDK process on a loopback port, and the file of the tools it ran.
struct Server {
    _child: Child,
    port: u16,
    /// The endpoint's path: `/mcp`, or `/sse` for the older HTTP+SSE transport.
    path: &'static str,
    ran: PathBuf,
    python: PathBuf,
    script: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    /// The server, its certificate from `ca`, answering POSTs as `mode` (`json` or `sse`), or
    /// speaking the older HTTP+SSE transport (`legacy`).
    async fn start(ca: &TestCa, mode: &str) -> TestResult<Server> {
        let python = need_python_mcp()?;
        let dir = tempfile::tempdir()?;
        let script = dir.path().join("mcp_sdk.py");
        std::fs::write(&script, SDK)?;
        let (cert, key) = ca.server_pem_files(dir.path())?;
        let ran = dir.path().join("ran.txt");
        std::fs::write(&ran, "")?;
        let mut child = Command::new(&python)
            .arg(&script)
            .arg("server")
            .args([&cert, &key, &ran])
            .arg(mode)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().ok_or("the server's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let first = timeout(SDK_LIMIT, lines.next_line()).await??.ok_or("the server exited before listening")?;
        let port =
            first.strip_prefix("listening ").ok_or_else(|| format!("unexpected first line {first:?}"))?.parse()?;
        let path = if mode == "legacy" { "/sse" } else { "/mcp" };
        Ok(Server { _child: child, port, path, ran, python, script, _dir: dir })
    }

    fn url(&self) -> String {
        format!("https://localhost:{}{}", self.port, self.path)
    }

    /// The tools the server ran, in order.
    fn ran(&self) -> TestResult<Vec<String>> {
        Ok(std::fs::read_to_string(&self.ran)?.lines().map(str::to_owned).collect())
    }

    /// The SDK client's session through `proxy` as agent `id` (its token is `id-token`): the
    /// tools listed, then each of `calls` (`tool=value`).
    async fn session(&self, proxy: &TestProxy, id: &str, calls: &[&str]) -> TestResult<Value> {
        let proxy_url = format!("http://{id}:{id}-token@{}", proxy.addr);
        let ca = proxy.ca_path.to_string_lossy().into_owned();
        let output = timeout(
            SDK_LIMIT,
            Command::new(&self.python)
                .arg(&self.script)
                .args(["client", &self.url(), &proxy_url, &ca])
                .args(calls)
                .kill_on_drop(true)
                .output(),
        )
        .await??;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "the SDK client failed: {stdout}\n{stderr}");
        let last = stdout.lines().last().ok_or_else(|| format!("no output: {stderr}"))?;
        Ok(serde_json::from_str(last)?)
    }
}

/// Agents `scoped` (its table allows `search` and `create_*` on `localhost`) and `open`
/// (no table scopes it); every host skips site policies.
fn scoped(edit: impl FnOnce(&mut Config)) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        bypass_all(config);
        config.agents = vec![agent("scoped", "scoped-token"), agent("open", "open-token")];
        config.mcp.tables = vec![McpTable {
            hosts: vec!["localhost".to_owned()],
            agents: vec!["scoped".to_owned()],
            allow_tools: vec!["search".to_owned(), "create_*".to_owned()],
            deny_tools: Vec::new(),
            unlisted_tools: None,
            log_arguments: false,
        }];
        edit(config);
    }
}

fn tools(session: &Value) -> Vec<&str> {
    session["tools"].as_array().into_iter().flatten().filter_map(Value::as_str).collect()
}

/// Asserts the session's calls: each `(tool, succeeded, text it contains)`.
fn assert_calls(session: &Value, expected: &[(&str, bool, &str)]) {
    let calls = session["calls"].as_array().cloned().unwrap_or_default();
    assert_eq!(calls.len(), expected.len(), "{session:#}");
    for (call, (tool, ok, text)) in calls.iter().zip(expected) {
        assert_eq!(call["tool"], *tool, "{session:#}");
        assert_eq!(call["ok"], *ok, "{session:#}");
        assert!(call["text"].as_str().is_some_and(|t| t.contains(text)), "{text:?} in {call:#}");
    }
}

/// The scoped agent's session: offered search and create_issue, search runs, delete_repo is
/// refused by name and never reaches the server, and a later search still runs.
async fn assert_scoped_session(server: &Server, proxy: &TestProxy) -> TestResult<Value> {
    let session = server.session(proxy, "scoped", &["search=bugs", "delete_repo=core", "search=again"]).await?;
    assert_eq!(tools(&session), ["create_issue", "search"], "{session:#}");
    assert_calls(
        &session,
        &[
            ("search", true, "3 issues match bugs"),
            ("delete_repo", false, "(mcp.tool_refused): tool \"delete_repo\" is not in [[mcp]] allow_tools"),
            ("search", true, "3 issues match again"),
        ],
    );
    assert_eq!(server.ran()?, ["search", "search"], "the server never ran delete_repo");
    Ok(session)
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn a_scoped_agent_is_offered_and_may_call_only_its_allowed_tools() -> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "json").await?;
    let proxy = TestProxy::start_with(&ca, scoped(|_| {})).await?;
    let session = assert_scoped_session(&server, &proxy).await?;
    let answered: Vec<&str> =
        session["answered_as"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(answered.iter().all(|a| *a == "application/json" || a.is_empty()), "JSON answers: {answered:?}");
    let records = proxy.finish().await?;
    let refused: Vec<&Value> = records.iter().filter(|r| r["agentgate.mcp.tool"] == "delete_repo").collect();
    assert_eq!(refused.len(), 1, "{records:#?}");
    assert_eq!(refused[0]["event.action"], "deny");
    assert_eq!(refused[0]["http.response.status_code"], 200, "a JSON-RPC error, not a 403");
    assert_eq!(refused[0]["agentgate.reasons"][0]["code"], "mcp.tool_refused");
    assert_eq!(refused[0]["agentgate.reasons"][0]["blocking"], true);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn a_tools_list_answered_as_an_event_stream_is_filtered_the_same_way() -> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "sse").await?;
    let proxy = TestProxy::start_with(&ca, scoped(|_| {})).await?;
    let session = assert_scoped_session(&server, &proxy).await?;
    let answered: Vec<&str> =
        session["answered_as"].as_array().into_iter().flatten().filter_map(Value::as_str).collect();
    assert!(answered.contains(&"text/event-stream"), "the server answered as an event stream: {answered:?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn an_agent_no_table_scopes_is_offered_every_tool() -> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "json").await?;
    let proxy = TestProxy::start_with(&ca, scoped(|_| {})).await?;
    let session = server.session(&proxy, "open", &["delete_repo=core"]).await?;
    assert_eq!(tools(&session), ["create_issue", "delete_repo", "search"], "{session:#}");
    assert_calls(&session, &[("delete_repo", true, "deleted core")]);
    assert_eq!(server.ran()?, ["delete_repo"]);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn each_json_rpc_request_is_recorded_with_its_method_and_tool_and_never_its_arguments() -> TestResult {
    const SEARCHED: &str = "needle-7f3a91";
    const DELETED: &str = "repo-c4e2d8";
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "json").await?;
    let proxy = TestProxy::start_with(&ca, scoped(|_| {})).await?;
    let session =
        server.session(&proxy, "scoped", &[&format!("search={SEARCHED}"), &format!("delete_repo={DELETED}")]).await?;
    assert_calls(&session, &[("search", true, SEARCHED), ("delete_repo", false, "mcp.tool_refused")]);
    let admin = proxy.admin_addr.ok_or("the admin API listens")?;
    let recent = reqwest::get(format!("http://{admin}/decisions/recent")).await?.text().await?;
    let metrics = reqwest::get(format!("http://{admin}/metrics")).await?.text().await?;
    let (records, text) = proxy.finish_with_text().await?;
    for value in [SEARCHED, DELETED] {
        assert!(!text.contains(value), "{value} in the decision log:\n{text}");
        assert!(!recent.contains(value), "{value} in the admin API:\n{recent}");
        assert!(!metrics.contains(value), "{value} in /metrics");
    }
    let posts: Vec<&Value> = records.iter().filter(|r| r["http.request.method"] == "POST").collect();
    let methods: Vec<&str> = posts.iter().filter_map(|r| r["agentgate.mcp.method"].as_str()).collect();
    assert_eq!(methods.len(), posts.len(), "every POST names its JSON-RPC method: {records:#?}");
    for expected in ["initialize", "notifications/initialized", "tools/list"] {
        assert_eq!(methods.iter().filter(|m| **m == expected).count(), 1, "{expected}: {methods:?}");
    }
    let calls: Vec<(&str, &str)> = posts
        .iter()
        .filter(|r| r["agentgate.mcp.method"] == "tools/call")
        .map(|r| (r["agentgate.mcp.tool"].as_str().unwrap_or(""), r["event.action"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(calls, [("search", "allow"), ("delete_repo", "deny")], "{records:#?}");
    let listed = posts.iter().find(|r| r["agentgate.mcp.method"] == "tools/list").ok_or("a tools/list record")?;
    assert!(listed["agentgate.mcp.request_id"].is_string(), "{listed:#}");
    // One session, named by a digest that is the same on each of its requests after the first.
    let sessions: Vec<&str> = records.iter().filter_map(|r| r["agentgate.mcp.session"].as_str()).collect();
    assert!(sessions.len() >= 4 && sessions.iter().all(|s| *s == sessions[0]), "{sessions:?}");
    assert!(sessions[0].len() == 16 && sessions[0].bytes().all(|b| b.is_ascii_hexdigit()), "{sessions:?}");
    assert!(records.iter().all(|r| r.get("agentgate.mcp.arguments").is_none()));
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn a_body_over_max_body_to_an_mcp_host_is_refused_and_recorded() -> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "json").await?;
    let proxy = TestProxy::start_with(&ca, scoped(|config| config.inspect.max_body = 1024)).await?;
    let query = "x".repeat(4096);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"search","arguments":{{"query":"{query}"}}}}}}"#
    );
    let client = crate::agents::client_as(&proxy, "scoped", "scoped-token")?;
    let response = client
        .post(server.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body)
        .send()
        .await?;
    assert_eq!(response.status(), 413);
    let answer: Value = serde_json::from_str(&response.text().await?)?;
    assert_eq!(answer["error"]["data"]["code"], "mcp.unreadable", "{answer:#}");
    assert!(answer["error"]["message"].as_str().is_some_and(|m| m.contains("max_body = 1024")), "{answer:#}");
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["event.action"], "deny");
    assert_eq!(records[0]["http.response.status_code"], 413);
    assert_eq!(records[0]["agentgate.reasons"][0]["code"], "mcp.unreadable");
    assert!(server.ran()?.is_empty(), "the server ran nothing");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn audit_suggest_learns_allow_tools_from_a_monitor_run_and_that_table_refuses_a_tool_never_used() -> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "json").await?;
    // Monitor mode, a table allowing search alone: every tool is offered, and the call the
    // table refuses is forwarded, recorded `would_deny`.
    let monitor = TestProxy::start_with(
        &ca,
        scoped(|config| {
            config.mode = Mode::Monitor;
            config.mcp.tables[0].allow_tools = vec!["search".to_owned()];
        }),
    )
    .await?;
    let session = server.session(&monitor, "scoped", &["search=bugs", "create_issue=flaky"]).await?;
    assert_eq!(
        tools(&session),
        ["create_issue", "delete_repo", "search"],
        "monitor mode withholds nothing: {session:#}"
    );
    assert_calls(&session, &[("search", true, "3 issues match"), ("create_issue", true, "opened flaky")]);
    let records = monitor.finish().await?;
    let created = records.iter().find(|r| r["agentgate.mcp.tool"] == "create_issue").ok_or("a create_issue record")?;
    assert_eq!(created["event.action"], "would_deny", "{created:#}");
    assert_eq!(created["agentgate.reasons"][0]["code"], "mcp.tool_refused", "{created:#}");
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("decisions.jsonl");
    std::fs::write(&log, records.iter().map(|r| format!("{r}\n")).collect::<String>())?;

    let (code, suggested, stderr) =
        crate::egress::agentgate(&["audit", "suggest", "--agent", "scoped", &log.display().to_string()]).await?;
    assert_eq!(code, 0, "{stderr}");
    let table = suggested
        .find("\n[[mcp]]\n")
        .map(|at| &suggested[at + 1..])
        .ok_or_else(|| format!("no [[mcp]]:\n{suggested}"))?;
    assert!(
        table.contains("\"create_issue\",  # 1 call\n") && table.contains("\"search\",        # 1 call\n"),
        "{table}"
    );
    assert!(!table.contains("delete_repo"), "{table}");
    let file = format!("[[agents]]\nid = \"scoped\"\ntoken = \"scoped-token\"\n{table}");
    let learned = Config::from_toml_str(&file, "suggested.toml")?.mcp;

    // In force: the tools it used are offered and run; the one it never used is refused.
    let enforce = TestProxy::start_with(&ca, scoped(|config| config.mcp = learned)).await?;
    let session = server.session(&enforce, "scoped", &["delete_repo=core", "create_issue=again"]).await?;
    assert_eq!(tools(&session), ["create_issue", "search"], "{session:#}");
    assert_calls(&session, &[("delete_repo", false, "mcp.tool_refused"), ("create_issue", true, "opened again")]);
    assert_eq!(server.ran()?, ["search", "create_issue", "create_issue"]);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn a_held_tool_call_waits_for_a_human_who_approves_one_and_denies_another() -> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Arc::new(Server::start(&ca, "json").await?);
    let proxy = Arc::new(
        TestProxy::start_with(
            &ca,
            scoped(|config| {
                crate::approvals::hold(config);
                config.mcp.tables[0].allow_tools = vec!["search".to_owned()];
                config.mcp.tables[0].unlisted_tools = Some(Unlisted::Hold);
            }),
        )
        .await?,
    );
    let (in_session, through) = (Arc::clone(&server), Arc::clone(&proxy));
    let session = tokio::spawn(async move {
        in_session
            .session(&through, "scoped", &["create_issue=held-one", "delete_repo=held-two"])
            .await
            .map_err(|e| e.to_string())
    });
    let mut answered = Vec::new();
    for (value, decision) in [("held-one", "approve"), ("held-two", "deny")] {
        let held = eventually(&format!("the call with {value} held"), async || {
            let url = admin_url(&proxy, "/approvals")?;
            let text = admin_client()?.get(url).bearer_auth(ADMIN).send().await?.text().await?;
            let body: Value = serde_json::from_str(&text)?;
            let pending = body["pending"].as_array().cloned().unwrap_or_default();
            match pending.as_slice() {
                [one] if !answered.contains(&one["id"]) => Ok(one.clone()),
                _ => Err(format!("waiting for one new held call: {body}").into()),
            }
        })
        .await?;
        let shown = held.to_string();
        assert!(shown.contains(value) && shown.contains("tools/call") && shown.contains("localhost"), "{shown}");
        let id = held["id"].as_str().ok_or("an id")?;
        let (status, _) = answer(&proxy, id, Some(ADMIN), serde_json::json!({"decision": decision})).await?;
        assert_eq!(status, 200);
        answered.push(held["id"].clone());
    }
    let session = session.await?.map_err(|e| e.to_string())?;
    assert_eq!(tools(&session), ["create_issue", "delete_repo", "search"], "held tools are offered: {session:#}");
    assert_calls(
        &session,
        &[("create_issue", true, "opened held-one"), ("delete_repo", false, "held for a human's approval: denied")],
    );
    assert_eq!(server.ran()?, ["create_issue"], "the denied call never reached the server");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn with_log_arguments_a_calls_arguments_are_logged_redacted_by_the_inspect_patterns() -> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "json").await?;
    let proxy = TestProxy::start_with(
        &ca,
        scoped(|config| {
            config.mcp.tables[0].log_arguments = true;
            config.inspect.patterns = PatternConfig::new("ticket", "tkt_[a-z0-9]{8}").into_iter().collect();
        }),
    )
    .await?;
    let session = server.session(&proxy, "scoped", &["search=open words tkt_ab12cd34"]).await?;
    assert_calls(&session, &[("search", true, "open words tkt_ab12cd34")]);
    let (records, text) = proxy.finish_with_text().await?;
    assert!(!text.contains("tkt_ab12cd34"), "the pattern's match in the log:\n{text}");
    let call = records.iter().find(|r| r["agentgate.mcp.tool"] == "search").ok_or("the search record")?;
    assert_eq!(call["agentgate.mcp.arguments"], r#"{"query":"open words REDACTED"}"#, "{call:#}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn a_raw_batch_with_one_refused_call_is_answered_whole_by_curl_and_nothing_is_sent() -> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "json").await?;
    let proxy = TestProxy::start_with(&ca, scoped(|_| {})).await?;
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"search","arguments":{"query":"a"}}},
        {"jsonrpc":"2.0","id":"two","method":"tools/call","params":{"name":"delete_repo","arguments":{"repo":"core"}}}]"#;
    let (proxy_url, ca_file) = (proxy.url(), proxy.ca_path.to_string_lossy().into_owned());
    let out = curl(&[
        "--proxy",
        &proxy_url,
        "--proxy-user",
        "scoped:scoped-token",
        "--cacert",
        &ca_file,
        "-H",
        "content-type: application/json",
        "-H",
        "accept: application/json, text/event-stream",
        "--data-binary",
        batch,
        &server.url(),
    ])
    .await?;
    assert_eq!(out.status, 200);
    let answer: Value = serde_json::from_slice(&out.body)?;
    assert_eq!(answer[0]["id"], 1, "{answer:#}");
    assert_eq!(answer[0]["error"]["code"], agentgate::mcp::NOT_SENT, "{answer:#}");
    assert_eq!(answer[1]["id"], "two", "{answer:#}");
    assert_eq!(answer[1]["error"]["code"], agentgate::mcp::TOOL_REFUSED, "{answer:#}");
    assert!(answer[1]["error"]["message"].as_str().is_some_and(|m| m.contains("\"delete_repo\"")), "{answer:#}");
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["agentgate.mcp.method"], "tools/call,tools/call");
    assert_eq!(records[0]["agentgate.mcp.tool"], "search,delete_repo");
    assert_eq!(records[0]["agentgate.mcp.request_id"], "1,two");
    assert_eq!(answer[1]["error"]["data"]["event_id"], records[0]["event.id"]);
    assert!(server.ran()?.is_empty(), "a batch goes whole or not at all");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the mcp Python SDK: run by scripts/test.sh"]
async fn the_older_http_and_sse_transport_has_its_tools_list_filtered_and_refusals_answered_on_its_event_stream()
-> TestResult {
    let ca = TestCa::new("MCP origin CA")?;
    let server = Server::start(&ca, "legacy").await?;
    let proxy = TestProxy::start_with(&ca, scoped(|_| {})).await?;
    // The refused call's error comes on the stream, where this transport's client reads it:
    // the client goes on at once (it would wait for its own timeout were it only the answer
    // to the POST).
    assert_scoped_session(&server, &proxy).await?;
    let records = proxy.finish().await?;
    let methods: Vec<&str> = records.iter().filter_map(|r| r["agentgate.mcp.method"].as_str()).collect();
    assert!(methods.contains(&"tools/list") && methods.contains(&"tools/call"), "{records:#?}");
    Ok(())
}
