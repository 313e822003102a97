//! Credentials the agent never holds (`[[secrets]]`, docs/secrets.md), through the real
//! binary: the placeholder becomes the real value towards its own host only, the value comes
//! back as the placeholder (identity and gzip answers), a placeholder or value sent anywhere
//! else (a body too, where `[inspect]` reads it) is refused, no log, stderr line (at debug),
//! console stream, admin answer or metric holds the value,
//! and a rotated value file is put in force by SIGHUP.

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use reqwest::header::AUTHORIZATION;
use sha2::{Digest, Sha256};

use crate::reload::{base_config, replace_file};
use crate::support::binary::{Agentgate, WAIT_LIMIT};
use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::wait::eventually_within;
use crate::support::{TestResult, header};

const VALUE: &str = "ghp_e2eRealValue5f2c9a7b31d04e6a";
const ROTATED: &str = "ghp_e2eRotatedValue0b8d2e4f6a1c3e";
const PLACEHOLDER: &str = "agp_github_e2e_0001";
const OTHER_TOKEN: &str = "other-agent-token-0123";

fn sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// A free loopback port for the admin API (the binary's banner does not print it).
fn free_port() -> TestResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The binary's config: agent `bot` by address, agent `other` by token, the secret `github`
/// for `bot` on `localhost`, its value in `value_file`.
fn config(dir: &Path, ca: &TestCa, admin_port: u16, value_file: &Path) -> String {
    let base = base_config(dir, ca).replace("listen = \"off\"", &format!("listen = \"127.0.0.1:{admin_port}\""));
    format!(
        "{base}\n[[agents]]\nid = \"bot\"\nclients = [\"127.0.0.1/32\"]\n\n[[agents]]\nid = \"other\"\ntoken = \"{OTHER_TOKEN}\"\n\n\
         [[secrets]]\nname = \"github\"\nplaceholder = \"{PLACEHOLDER}\"\nvalue_file = {value_file:?}\nhosts = [\"localhost\"]\n\
         agents = [\"bot\"]\nquery = [\"access_token\"]\n\n[inspect]\nhosts = [\"127.0.0.1\"]\n"
    )
}

/// `GET url` with the placeholder as a bearer token (and `x-reflect-gzip: 1` when `gzip`).
async fn with_placeholder(client: &reqwest::Client, url: &str, gzip: bool) -> TestResult<reqwest::Response> {
    let mut request = client.get(url).header(AUTHORIZATION, format!("Bearer {PLACEHOLDER}"));
    if gzip {
        request = request.header("x-reflect-gzip", "1");
    }
    Ok(request.send().await?)
}

/// A refusal's status and the code in its `agentgate-decision` header.
async fn refused(response: reqwest::Response, code: &str) -> TestResult {
    assert_eq!(response.status(), 403);
    let decision = header(&response, "agentgate-decision");
    assert!(decision.contains(code), "{code} in {decision}");
    let body = response.text().await?;
    assert!(!body.contains(VALUE) && !body.contains(ROTATED), "{body}");
    Ok(())
}

#[tokio::test]
async fn a_secret_reaches_only_its_host_comes_back_as_the_placeholder_and_is_never_logged() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let dir = tempfile::tempdir()?;
    let value_file = dir.path().join("github-token");
    std::fs::write(&value_file, format!("{VALUE}\n"))?;
    let admin_port = free_port()?;
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config(dir.path(), &ca, admin_port, &value_file))?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "agentgate=debug").await?;
    let bot = agentgate.client()?;
    // The console's live decision stream, read from now on.
    let admin = reqwest::Client::builder().no_proxy().build()?;
    let streamed = Arc::new(Mutex::new(String::new()));
    let mut stream = admin.get(format!("http://127.0.0.1:{admin_port}/decisions/stream")).send().await?;
    assert_eq!(stream.status(), 200);
    let reader = tokio::spawn({
        let streamed = Arc::clone(&streamed);
        async move {
            while let Ok(Some(chunk)) = stream.chunk().await {
                streamed.lock().unwrap_or_else(PoisonError::into_inner).push_str(&String::from_utf8_lossy(&chunk));
            }
        }
    });

    // To its host: the origin gets the value in the header and the query; the agent gets
    // the placeholder back in the reflected header and body, identity and gzip alike.
    let url = origin.url(&format!("/reflect?access_token={PLACEHOLDER}"));
    for gzip in [false, true] {
        let response = with_placeholder(&bot, &url, gzip).await?;
        assert_eq!(response.status(), 200, "gzip {gzip}");
        assert_eq!(header(&response, "x-authorization-sha256"), sha256(&format!("Bearer {VALUE}")));
        assert_eq!(header(&response, "x-query-sha256"), sha256(&format!("access_token={VALUE}")));
        assert_eq!(header(&response, "x-authorization"), format!("Bearer {PLACEHOLDER}"));
        assert!(response.headers().get("content-encoding").is_none(), "decoded for the agent");
        let body = response.text().await?;
        assert!(body.contains(&format!("authorization: Bearer {PLACEHOLDER}")), "{body}");
        assert!(body.contains(&format!("query: access_token={PLACEHOLDER}")), "{body}");
        assert!(!body.contains(VALUE), "{body}");
    }
    assert_eq!(origin.hits("/reflect"), 2);
    // curl too: the origin got the value, curl reads the placeholder.
    let ca_file = dir.path().join("ca/agentgate-ca.pem");
    let (proxy, ca_file, auth) = (
        format!("http://{}", agentgate.addr()),
        ca_file.display().to_string(),
        format!("Authorization: Bearer {PLACEHOLDER}"),
    );
    let out = crate::support::curl::curl(&["--proxy", &proxy, "--cacert", &ca_file, "-H", &auth, &url]).await?;
    assert_eq!(out.status, 200);
    assert!(out.headers.contains(&sha256(&format!("Bearer {VALUE}"))), "{}", out.headers);
    let body = String::from_utf8_lossy(&out.body);
    assert!(body.contains(&format!("authorization: Bearer {PLACEHOLDER}")) && !body.contains(VALUE), "{body}");
    assert_eq!(origin.hits("/reflect"), 3);

    // Anywhere else, or by another agent: refused, nothing reaches the origin.
    refused(with_placeholder(&bot, &origin.ip_url("/reflect"), false).await?, "secrets.not_bound").await?;
    let other = agentgate.client_as("other", OTHER_TOKEN)?;
    refused(with_placeholder(&other, &url, false).await?, "secrets.agent_not_allowed").await?;
    // The real value, typed by an agent that learned it, towards another host.
    refused(bot.get(origin.ip_url(&format!("/reflect?q={VALUE}"))).send().await?, "secrets.value_leak").await?;
    refused(bot.get(origin.ip_url("/reflect")).header("x-token", VALUE).send().await?, "secrets.value_leak").await?;
    // In a body, where request inspection reads it (`[inspect]` on 127.0.0.1).
    let body = format!("{{\"note\":\"{VALUE}\"}}");
    let posted =
        bot.post(origin.ip_url("/reflect")).header("content-type", "application/json").body(body).send().await?;
    refused(posted, "inspect.secret_in_request").await?;
    assert_eq!(origin.hits("/reflect"), 3, "no refused request reached the origin");

    // Rotation: the file changes, SIGHUP reloads; the new value goes out, the old one is
    // still refused towards other hosts.
    replace_file(&value_file, ROTATED)?;
    agentgate.signal("HUP").await?;
    eventually_within(WAIT_LIMIT, "the rotated value injected", async || {
        let response = with_placeholder(&bot, &url, false).await?;
        match header(&response, "x-authorization-sha256") {
            seen if seen == sha256(&format!("Bearer {ROTATED}")) => Ok(()),
            seen => Err(format!("the origin saw {seen}").into()),
        }
    })
    .await?;
    refused(bot.get(origin.ip_url("/reflect")).header("x-token", VALUE).send().await?, "secrets.value_leak").await?;

    // Nowhere on the way out: the console's stream, the admin API, the metrics, stderr at
    // debug, the log.
    eventually_within(WAIT_LIMIT, "the stream carrying the refusals", async || {
        let text = streamed.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if text.matches("secrets.value_leak").count() >= 3 { Ok(()) } else { Err(format!("so far: {text}").into()) }
    })
    .await?;
    reader.abort();
    let text = streamed.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert!(text.contains("agentgate.secrets") && !text.contains(VALUE) && !text.contains(ROTATED), "{text}");
    for path in ["/decisions/recent", "/metrics", "/agents"] {
        let text = admin.get(format!("http://127.0.0.1:{admin_port}{path}")).send().await?.text().await?;
        assert!(!text.contains(VALUE) && !text.contains(ROTATED), "{path}: {text}");
    }
    let stderr = agentgate.stderr();
    assert!(
        stderr.contains(" DEBUG ") && stderr.contains("status=403"),
        "stderr at debug, with the refusals: {stderr}"
    );
    assert!(!stderr.contains(VALUE) && !stderr.contains(ROTATED), "{stderr}");
    agentgate.stop().await?;
    let log = std::fs::read_to_string(dir.path().join("decisions.jsonl"))?;
    assert!(!log.contains(VALUE) && !log.contains(ROTATED), "{log}");
    let used = log.lines().filter(|line| {
        line.contains(r#""agentgate.secrets":["github (header authorization)","github (query access_token)"]"#)
    });
    assert!(used.count() >= 3, "the injected requests name the secret and where: {log}");
    Ok(())
}

#[tokio::test]
async fn config_check_refuses_a_secret_on_a_passthrough_host_or_with_an_unreadable_value() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agentgate.toml");
    std::fs::write(
        &path,
        format!(
            "[mitm]\npassthrough_hosts = [\"bank.example\"]\n[[secrets]]\nname = \"bank\"\nplaceholder = \"agp_bank_token_1\"\n\
             value_file = {:?}\nhosts = [\"bank.example\"]\n",
            dir.path().join("missing")
        ),
    )?;
    let output = tokio::time::timeout(
        WAIT_LIMIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate")).args(["config", "check"]).arg(&path).output(),
    )
    .await??;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("[[secrets]] #1 (bank) value_file = "), "{stderr}");
    assert!(stderr.contains("cannot be read"), "{stderr}");
    assert!(
        stderr.contains("[[secrets]] #1 (bank) hosts entry \"bank.example\": a [mitm] passthrough_hosts host"),
        "{stderr}"
    );
    Ok(())
}

/// A lower-case hex key (many APIs issue them) fits in a header name and in a method: there
/// too it is refused towards a host it is not bound to, and nothing reaches the origin. A
/// method longer than any real one is refused 400 and recorded.
#[tokio::test]
async fn a_value_in_a_header_name_or_the_method_is_refused_towards_another_host() -> TestResult {
    const HEX: &str = "3f9a0c7e5b1d2468ace01357";
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let dir = tempfile::tempdir()?;
    let value_file = dir.path().join("hex-key");
    std::fs::write(&value_file, format!("{HEX}\n"))?;
    let config_path = dir.path().join("agentgate.toml");
    let config = format!(
        "{base}\n[[agents]]\nid = \"bot\"\nclients = [\"127.0.0.1/32\"]\n\n[[secrets]]\nname = \"hexkey\"\n\
         placeholder = \"agp_hexkey_e2e_0001\"\nvalue_file = {value_file:?}\nhosts = [\"localhost\"]\n",
        base = base_config(dir.path(), &ca)
    );
    std::fs::write(&config_path, config)?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "agentgate=debug").await?;
    let bot = agentgate.client()?;
    let url = origin.ip_url("/reflect");

    let named = bot.get(&url).header(format!("x-{HEX}"), "1").send().await?;
    refused(named, "secrets.value_leak").await?;
    let method = reqwest::Method::from_bytes(format!("M{HEX}").as_bytes())?;
    refused(bot.request(method, &url).send().await?, "secrets.value_leak").await?;
    let long = reqwest::Method::from_bytes("M".repeat(33).as_bytes())?;
    assert_eq!(bot.request(long, &url).send().await?.status(), 400, "a 33-byte method");
    assert_eq!(origin.hits("/reflect"), 0, "no refused request reached the origin");

    agentgate.stop().await?;
    let log = std::fs::read_to_string(dir.path().join("decisions.jsonl"))?;
    assert_eq!(log.matches("secrets.value_leak").count(), 2, "{log}");
    assert!(log.contains(r#""http.response.status_code":400"#), "the long method recorded: {log}");
    assert!(!log.contains(HEX), "{log}");
    Ok(())
}
