//! No secret from a request reaches the diagnostic log (stderr) or the decision log: the real
//! `agentgate run` binary, logging at debug, is driven over every request path (plain HTTP,
//! MITM, blocked, malformed, origin error) with credentials in `Authorization`,
//! `Proxy-Authorization`, `Cookie` and query values, and both outputs are grepped.

use tokio::net::TcpListener;

use crate::support::binary::Agentgate;
use crate::support::log;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::exchange;
use crate::support::{TestResult, header};

/// Every secret the requests carry; none may appear in either log.
const SECRETS: [&str; 5] =
    ["authz-9b-secret", "proxyauth-9b-secret", "cookie-9b-secret", "query-9b-secret", "userinfo-9b-secret"];

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

#[tokio::test]
async fn no_secret_reaches_stderr_or_the_decision_log() -> TestResult {
    // This test's clients do not go through `TestProxy`, which installs it otherwise.
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let tls_origin = Origin::https_site(&ca, Site::new().file("/robots.txt", ROBOTS)).await?;
    let closed_port = TcpListener::bind("127.0.0.1:0").await?.local_addr()?.port();
    let dir = tempfile::tempdir()?;
    let log_path = dir.path().join("decisions.jsonl");
    let config = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {ca_dir:?}\n[upstream]\nextra_ca_files = [{origin_ca:?}]\n\
         [network]\nallow_cidrs = [\"127.0.0.0/8\"]\n[connect]\nallowed_ports = [\"1-65535\"]\n[audit]\npath = {log:?}\n[admin]\nlisten = \"off\"\n\
         [[rules]]\nhost = \"*\"\npath = \"/x\"\naction = \"allow\"\n",
        ca_dir = dir.path().join("ca"),
        origin_ca = ca.pem_path,
        log = log_path,
    );
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config)?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "debug").await?;
    let addr = agentgate.addr().to_owned();
    let client = agentgate.client_as("agent", "proxyauth-9b-secret")?;
    let with_secrets = |builder: reqwest::RequestBuilder| {
        builder.header("authorization", "Bearer authz-9b-secret").header("cookie", "session=cookie-9b-secret")
    };

    // Plain HTTP, allowed.
    let response = with_secrets(client.get(origin.url("/echo?token=query-9b-secret"))).send().await?;
    assert_eq!(response.status(), 200);
    // MITM, allowed.
    let response = with_secrets(client.get(tls_origin.url("/echo?token=query-9b-secret"))).send().await?;
    assert_eq!(response.status(), 200);
    // Blocked by robots.txt.
    let response = with_secrets(client.get(origin.url("/private?token=query-9b-secret"))).send().await?;
    assert_eq!(response.status(), 403);
    assert!(header(&response, "agentgate-decision").starts_with("deny;"));
    // Origin error: nothing listens there (an operator rule allows `/x` without a robots.txt).
    let response =
        with_secrets(client.get(format!("http://127.0.0.1:{closed_port}/x?token=query-9b-secret"))).send().await?;
    assert_eq!(response.status(), 502);
    // Refused: origin-form on the proxy port, with credentials in the target and headers.
    let head = exchange(
        addr.parse()?,
        b"GET /x?token=query-9b-secret HTTP/1.1\r\nHost: h\r\nAuthorization: Basic authz-9b-secret\r\n\
          Proxy-Authorization: Basic proxyauth-9b-secret\r\nCookie: c=cookie-9b-secret\r\nConnection: close\r\n\r\n",
    )
    .await?;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    // Refused: a scheme that is not proxied, with user info.
    let head = exchange(
        addr.parse()?,
        b"GET ftp://user:userinfo-9b-secret@h/x?token=query-9b-secret HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n",
    )
    .await?;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");

    let records = log::wait_for(&log_path, 4).await?;
    assert_eq!(records.len(), 4, "{records:#?}");
    let stderr = agentgate.kill().await?;
    let decisions = std::fs::read_to_string(&log_path)?;
    assert!(stderr.contains("request refused"), "the refusals were logged: {stderr}");
    assert!(stderr.contains("token=REDACTED"), "the refused target is shown redacted: {stderr}");
    for secret in SECRETS {
        assert!(!stderr.contains(secret), "{secret} on stderr:\n{stderr}");
        assert!(!decisions.contains(secret), "{secret} in the decision log:\n{decisions}");
    }
    Ok(())
}

/// A right-to-left override (U+202E) sent raw in the request line made `url.full`
/// read backwards in any viewer (`/invoice` U+202E `fdp.exe` shows as `/invoiceexe.pdf`). It is logged
/// percent-encoded, like every bidi and control character; the same character sent
/// percent-encoded (`%E2%80%AE`) is logged as sent. No raw one reaches the log.
#[tokio::test]
async fn bidi_and_control_characters_in_a_path_are_logged_percent_encoded() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = crate::support::TestProxy::start_with(&ca, crate::support::bypass_all).await?;
    let raw = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        origin.url("/invoice\u{202e}fdp.exe?x=\u{2066}1"),
        origin.addr
    );
    let head = exchange(proxy.addr, raw.as_bytes()).await?;
    assert!(head.starts_with("HTTP/1.1 "), "{head}");
    let encoded = proxy.client()?.get(origin.url("/invoice%E2%80%AEfdp.exe")).send().await?;
    assert_eq!(encoded.status(), 404, "the origin has no such page; it was forwarded");

    let (records, text) = proxy.finish_with_text().await?;
    let logged: Vec<&str> = records
        .iter()
        .filter_map(|record| record["url.full"].as_str())
        .filter(|url| url.contains("/invoice"))
        .collect();
    assert!(logged.contains(&origin.url("/invoice%E2%80%AEfdp.exe?x=REDACTED").as_str()), "{logged:?}");
    assert!(logged.iter().all(|url| url.ends_with("/invoice%E2%80%AEfdp.exe") || url.ends_with("?x=REDACTED")));
    assert!(!text.contains('\u{202e}') && !text.contains('\u{2066}'), "no raw bidi control in the log:\n{text}");
    Ok(())
}

/// A secret's value typed by the agent where it does not belong, in a CONNECT host name and
/// in a method, is refused; the binary at debug writes it to neither stderr (the tunnel's
/// span names its target) nor the decision log (its reason, its method), nor does the admin
/// API's `/decisions/recent` show it, in the case sent or lowered.
#[tokio::test]
async fn a_secret_value_in_a_refused_connect_host_or_method_is_in_no_output() -> TestResult {
    const VALUE: &str = "Sk9TunnelHostValue7Qx2";
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let dir = tempfile::tempdir()?;
    let value_file = dir.path().join("value");
    std::fs::write(&value_file, VALUE)?;
    let admin_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let log_path = dir.path().join("decisions.jsonl");
    let config = format!(
        "{base}\n[[secrets]]\nname = \"tunnelkey\"\nplaceholder = \"agp_tunnelkey_0001\"\nvalue_file = {value_file:?}\n\
         hosts = [\"localhost\"]\nplain_http = true\n",
        base = crate::reload::base_config(dir.path(), &ca)
            .replace("listen = \"off\"", &format!("listen = \"127.0.0.1:{admin_port}\""))
    );
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config)?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "debug").await?;
    let addr = agentgate.addr().parse()?;

    let head = crate::support::raw::refused_tunnel(addr, &format!("{VALUE}.example.test:443")).await?;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let raw = format!("X{VALUE} {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", origin.url("/m"), origin.addr);
    let head = exchange(addr, raw.as_bytes()).await?;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert_eq!(origin.hits("/m"), 0);

    let records = log::wait_for(&log_path, 2).await?;
    assert!(records.iter().all(|r| r.to_string().contains("secrets.value_leak")), "{records:#?}");
    let admin = reqwest::Client::builder().no_proxy().build()?;
    let recent = admin.get(format!("http://127.0.0.1:{admin_port}/decisions/recent")).send().await?.text().await?;
    assert!(recent.contains("secrets.value_leak"), "{recent}");
    let stderr = agentgate.kill().await?;
    assert!(stderr.contains(" DEBUG ") && stderr.contains("tunnel{"), "the tunnel's span at debug: {stderr}");
    let decisions = std::fs::read_to_string(&log_path)?;
    for (what, text) in [("stderr", &stderr), ("the decision log", &decisions), ("/decisions/recent", &recent)] {
        for value in [VALUE.to_owned(), VALUE.to_ascii_lowercase()] {
            assert!(!text.contains(&value), "{value} in {what}:\n{text}");
        }
    }
    Ok(())
}
