//! The client recipe as printed, followed by the clients that need more than the proxy
//! variables: Debian's wget (GnuTLS), which ignores `SSL_CERT_FILE`, and
//! Chromium, which sends loopback addresses past `--proxy-server` and trusts its NSS database,
//! not a PEM file. Each test takes its commands from the start-up recipe
//! (`agentgate::recipe::client_recipe`, what `agentgate run` prints) and runs them with `sh`
//! in a fresh `$HOME`, against a real HTTPS origin on loopback through the real proxy; the
//! `http://agentgate.local/` page must give the same commands for its CA file and `$PROXY`.
//!
//! The proxy resolves `localhost` only: Chromium's own background requests (updates, time,
//! connectivity checks) reach agentgate and go no further.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use agentgate::net::{NetFuture, Resolve, TcpDialer};
use serde_json::Value;
use tokio::process::Command;

use crate::support::browser::{Browser, PAGE_DEADLINE};
use crate::support::log::for_request;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::tools::{self, CERTUTIL, WGET};
use crate::support::{TestProxy, TestResult};

/// `localhost` is 127.0.0.1; every other name is refused, so nothing leaves loopback.
struct LoopbackOnly;

impl Resolve for LoopbackOnly {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        Box::pin(async move {
            match name {
                "localhost" => Ok(vec![IpAddr::from([127, 0, 0, 1])]),
                _ => Err(std::io::Error::other(format!("test resolver: {name} stays unresolved"))),
            }
        })
    }
}

async fn proxy(ca: &TestCa) -> TestResult<TestProxy> {
    TestProxy::start_with_network(ca, Arc::new(LoopbackOnly), Arc::new(TcpDialer), |_| {}).await
}

/// The recipe `agentgate run` prints for `proxy`.
fn recipe(proxy: &TestProxy) -> String {
    agentgate::recipe::client_recipe(proxy.addr, &proxy.ca_path.display().to_string())
}

/// The command starting with `start` in `text`: from there to the end of its line, a line
/// ending in `\` joined with the next.
fn command(text: &str, start: &str) -> TestResult<String> {
    let joined = text.replace("\\\n", " ");
    let line = joined.lines().find_map(|line| line.find(start).map(|at| &line[at..]));
    let line = line.ok_or_else(|| format!("no command starting {start:?} in:\n{text}"))?;
    Ok(line.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Asserts that `http://agentgate.local/` gives the recipe's commands starting with each of
/// `starts`, for its CA file (`/usr/local/share/ca-certificates/agentgate-ca.crt`, step 1 of
/// the page) and `$PROXY`.
async fn page_agrees(proxy: &TestProxy, starts: &[&str]) -> TestResult {
    let page = proxy.client()?.get("http://agentgate.local/").send().await?.text().await?;
    let page = page
        .replace("/usr/local/share/ca-certificates/agentgate-ca.crt", &proxy.ca_path.display().to_string())
        .replace("\"$PROXY\"", &proxy.url());
    let recipe = recipe(proxy);
    for start in starts {
        assert_eq!(command(&page, start)?, command(&recipe, start)?, "the page and the banner differ");
    }
    Ok(())
}

/// `script` run by `sh` with `HOME` set to `home` and no proxy or wget setting inherited.
async fn sh(home: &Path, script: &str) -> TestResult<std::process::Output> {
    let mut command = Command::new("sh");
    command.args(["-c", script]).env("HOME", home);
    for name in
        ["http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "no_proxy", "NO_PROXY", "WGETRC", "SSL_CERT_FILE"]
    {
        command.env_remove(name);
    }
    Ok(command.output().await?)
}

/// The record of the one `GET` of `url`.
fn the_get<'a>(records: &'a [Value], url: &str) -> TestResult<&'a Value> {
    match for_request(records, "GET", url).as_slice() {
        [one] => Ok(one),
        other => Err(format!("{} records for GET {url}: {records:#?}", other.len()).into()),
    }
}

#[tokio::test]
#[ignore = "needs wget: run by scripts/test.sh"]
async fn wget_with_the_recipes_wgetrc_goes_through_agentgate_and_ssl_cert_file_alone_does_not() -> TestResult {
    let wget = tools::need(WGET)?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = proxy(&ca).await?;
    let recipe = recipe(&proxy);
    let proxies = command(&recipe, "export http_proxy=")?;
    let cas = command(&recipe, "export SSL_CERT_FILE=")?;
    let wgetrc = command(&recipe, "echo ca_certificate=")?;
    page_agrees(&proxy, &["echo ca_certificate="]).await?;
    let home = tempfile::tempdir()?;
    let get = |path: &str| format!("{} -q -O - {}", wget.display(), origin.url(path));

    // The exports alone: wget goes to agentgate but does not trust its CA.
    let refused = sh(home.path(), &format!("{proxies}\n{cas}\n{}", get("/without-wgetrc"))).await?;
    assert_eq!(refused.status.code(), Some(5), "wget's exit status for a failed TLS verification");
    assert!(refused.stdout.is_empty());
    assert_eq!(origin.hits("/without-wgetrc"), 0);

    // With the wgetrc line: through agentgate, verified.
    let fetched = sh(home.path(), &format!("{proxies}\n{cas}\n{wgetrc}\n{}", get("/page"))).await?;
    let body = String::from_utf8_lossy(&fetched.stdout);
    assert!(fetched.status.success(), "{}", String::from_utf8_lossy(&fetched.stderr));
    assert!(body.starts_with("page GET /page\n") && body.contains("via: 1.1 agentgate"), "{body}");
    assert_eq!(
        std::fs::read_to_string(home.path().join(".wgetrc"))?,
        format!("ca_certificate={}\n", proxy.ca_path.display())
    );

    let records = proxy.finish().await?;
    let record = the_get(&records, &origin.url("/page"))?;
    assert_eq!(
        (&record["event.action"], &record["http.response.status_code"]),
        (&Value::from("allow"), &Value::from(200))
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs chromium, chromium-driver and certutil (libnss3-tools): run by scripts/test.sh"]
async fn chromium_with_the_recipes_flags_and_nss_database_reaches_a_loopback_https_site_through_agentgate() -> TestResult
{
    tools::need(CERTUTIL)?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = proxy(&ca).await?;
    let recipe = recipe(&proxy);
    let trust = command(&recipe, "mkdir -p ~/.pki/nssdb")?;
    let start = command(&recipe, "chromium --proxy-server=")?;
    page_agrees(&proxy, &["mkdir -p ~/.pki/nssdb", "chromium --proxy-server="]).await?;

    // The CA into a fresh user's NSS database, as printed.
    let home = tempfile::tempdir()?;
    let trusted = sh(home.path(), &trust).await?;
    assert!(trusted.status.success(), "{trust}: {}", String::from_utf8_lossy(&trusted.stderr));
    // The flags as the shell splits them (the recipe quotes `<-loopback>`).
    let words = sh(home.path(), &start.replacen("chromium", "printf '%s\\n'", 1)).await?;
    let flags: Vec<String> = String::from_utf8(words.stdout)?.lines().map(str::to_owned).collect();
    let quiet = "--no-first-run --disable-background-networking --disable-component-update --disable-sync"
        .split(' ')
        .map(str::to_owned);
    let expected: Vec<String> =
        [format!("--proxy-server={}", proxy.url()), "--proxy-bypass-list=<-loopback>".to_owned()]
            .into_iter()
            .chain(quiet)
            .collect();
    assert_eq!(flags, expected);

    let browser = Browser::start_with(&flags, home.path()).await?;
    let url = origin.url("/page");
    assert!(url.starts_with("https://localhost:"), "a loopback HTTPS site: {url}");
    browser.client.goto(&url).await?;
    let loaded = "document.body && document.body.innerText.startsWith('page GET /page')";
    browser.wait_until(loaded, "the origin's page, over TLS from agentgate's CA", PAGE_DEADLINE).await?;
    let text = browser.eval("document.body.innerText").await?;
    let text = text.as_str().unwrap_or_default();
    assert!(text.lines().any(|line| line.starts_with("via: ") && line.ends_with(" agentgate")), "{text}");
    assert_eq!(browser.eval("location.href").await?, Value::from(url.clone()));
    browser.close().await?;

    let records = proxy.finish().await?;
    let record = the_get(&records, &url)?;
    assert_eq!(
        (&record["event.action"], &record["http.response.status_code"]),
        (&Value::from("allow"), &Value::from(200))
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver: run by scripts/test.sh"]
async fn chromium_with_proxy_server_alone_sends_loopback_straight_to_the_site() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let proxy = proxy(&ca).await?;
    let home = tempfile::tempdir()?;
    let browser = Browser::start_with(&[format!("--proxy-server={}", proxy.url())], home.path()).await?;
    let url = origin.url("/direct");
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    browser.client.goto(&url).await?;
    browser
        .wait_until(
            "document.body && document.body.innerText.startsWith('page GET /direct')",
            "the page",
            PAGE_DEADLINE,
        )
        .await?;
    let text = browser.eval("document.body.innerText").await?;
    assert!(!text.as_str().unwrap_or_default().contains("agentgate"), "no Via: agentgate: {text}");
    browser.close().await?;
    assert_eq!(origin.hits("/direct"), 1);
    let records = proxy.finish().await?;
    assert!(for_request(&records, "GET", "/direct").is_empty(), "agentgate never saw it: {records:#?}");
    Ok(())
}
