//! `agentgate audit report --html` and the console's `/report`, over the log of a real run
//! of three agents: `alpha` and `beta` enforced (allowed, refused by robots.txt, rate-limited
//! by AGENTS.md), `gamma` in monitor mode (its refusals are `would_deny`), over two HTTPS
//! origins. The page's per-agent figures are read back and compared with `audit summary
//! --format json`'s over the same files; headless Chromium renders the page (no console
//! error, no network request, its style applied under its own policy, log values shown as
//! text) and keeps a screenshot in the test output (`CARGO_TARGET_TMPDIR/scorecard`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use agentgate::agents::AgentConfig;
use agentgate::policy::operator::Mode;
use fantoccini::Locator;
use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::Value;

use crate::agents::{agent, client_as};
use crate::audit_report::{audit, summary_json};
use crate::support::browser::{Browser, PAGE_DEADLINE};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult, header};

/// The figures each agent shows, as `audit summary --format json` names them.
const FIGURES: [&str; 11] = [
    "requests",
    "allowed",
    "denied",
    "needs_approval",
    "rate_limited",
    "would_deny",
    "auth_challenges",
    "errors",
    "sent_bytes",
    "received_bytes",
    "budget_cut",
];

/// `printf %s admin-secret | sha256sum`
const TOKEN_SHA256: &str = "16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01";
const TOKEN: &str = "admin-secret";

/// The two origins: `shop` with robots.txt (line 2: `Disallow: /private`) and AGENTS.md
/// (line 7: two requests a minute per agent); `docs` with no policy file.
async fn origins(ca: &TestCa) -> TestResult<(Origin, Origin)> {
    let agents_md = "# AGENTS.md\n\n## Identity\n- site: localhost\n\n## Rate Limits\n- requests-per-minute: 2\n";
    let shop = Site::new().serve("/AGENTS.md", 200, &[("content-type", "text/markdown")], agents_md).serve(
        "/robots.txt",
        200,
        &[("content-type", "text/plain")],
        "User-agent: *\nDisallow: /private\n",
    );
    Ok((Origin::https_site(ca, shop).await?, Origin::https_site(ca, Site::new()).await?))
}

/// alpha and beta enforced, gamma in monitor mode, each known by its proxy credentials.
fn three_agents(config: &mut agentgate::config::Config) {
    let gamma = AgentConfig { mode: Some(Mode::Monitor), ..agent("gamma", "g-token") };
    config.agents = vec![agent("alpha", "a-token"), agent("beta", "b-token"), gamma];
}

/// The agents' traffic; returns how many requests were sent.
async fn traffic(proxy: &TestProxy, shop: &Origin, docs: &Origin) -> TestResult<usize> {
    let alpha = client_as(proxy, "alpha", "a-token")?;
    for expected in [200, 200, 429] {
        assert_eq!(alpha.get(shop.url("/page")).send().await?.status(), expected);
    }
    assert_eq!(alpha.get(shop.url("/private/a")).send().await?.status(), 403);
    assert_eq!(alpha.post(docs.url("/echo")).body("order=42").send().await?.status(), 200);
    let beta = client_as(proxy, "beta", "b-token")?;
    assert_eq!(beta.get(shop.url("/page")).send().await?.status(), 200);
    for path in ["/private/b", "/private/c"] {
        assert_eq!(beta.get(shop.url(path)).send().await?.status(), 403);
    }
    assert_eq!(beta.get(docs.url("/guide")).send().await?.status(), 200);
    // gamma is evaluated in monitor mode: all forwarded, over the limit and /private would_deny.
    let gamma = client_as(proxy, "gamma", "g-token")?;
    for path in ["/page", "/page", "/page", "/private/e"] {
        assert_eq!(gamma.get(shop.url(path)).send().await?.status(), 200, "monitor mode forwards {path}");
    }
    Ok(13)
}

/// `audit summary --format json`'s figures per agent.
fn summary_figures(summary: &Value) -> BTreeMap<String, BTreeMap<String, u64>> {
    let groups = summary["groups"].as_array().cloned().unwrap_or_default();
    groups
        .iter()
        .map(|group| {
            let figures = FIGURES.iter().map(|name| (name.to_string(), group[name].as_u64().unwrap_or(u64::MAX)));
            (group["key"].as_str().unwrap_or("?").to_owned(), figures.collect())
        })
        .collect()
}

/// The figures of each agent's section of the page, from its cells' `data-figure` and
/// `data-value`.
fn page_figures(html: &str) -> BTreeMap<String, BTreeMap<String, u64>> {
    let mut agents = BTreeMap::new();
    for section in html.split("<section class=\"agent\"").skip(1) {
        let section = section.split("</section>").next().unwrap_or_default();
        let attribute = |text: &str, name: &str| -> Option<String> {
            let start = text.find(&format!("{name}=\""))? + name.len() + 2;
            Some(text[start..start + text[start..].find('"')?].to_owned())
        };
        let Some(agent) = attribute(section, "data-agent") else { continue };
        let figures = section
            .split("data-figure=\"")
            .skip(1)
            .filter_map(|cell| {
                let name = &cell[..cell.find('"')?];
                let value = attribute(cell, "data-value")?.parse().ok()?;
                Some((name.to_owned(), value))
            })
            .collect();
        agents.insert(agent, figures);
    }
    agents
}

/// The log split as rotation leaves it: `.1` gzip'd (as logrotate's `compress` does), then
/// the current file. Returns the paths oldest first.
fn rotate(dir: &Path, text: &str) -> TestResult<Vec<PathBuf>> {
    let lines: Vec<&str> = text.lines().collect();
    let half = lines.len() / 2;
    let (rotated, current) = (dir.join("decisions.jsonl.1"), dir.join("decisions.jsonl"));
    let mut gzip = GzEncoder::new(Vec::new(), Compression::default());
    gzip.write_all(lines[..half].iter().map(|l| format!("{l}\n")).collect::<String>().as_bytes())?;
    std::fs::write(&rotated, gzip.finish()?)?;
    std::fs::write(&current, lines[half..].iter().map(|l| format!("{l}\n")).collect::<String>())?;
    Ok(vec![rotated, current])
}

/// `audit report --html FILES`, checked to have succeeded.
async fn report_html(files: &[PathBuf]) -> TestResult<String> {
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let mut args = vec!["report", "--html"];
    args.extend(files.iter().map(String::as_str));
    let (stdout, stderr, ok) = audit(&args).await?;
    assert!(ok, "audit {args:?} failed: {stderr}");
    Ok(stdout)
}

#[tokio::test]
async fn audit_report_html_shows_each_agents_summary_figures_with_its_refusing_rules() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let (shop, docs) = origins(&ca).await?;
    let proxy = TestProxy::start_with(&ca, three_agents).await?;
    let sent = traffic(&proxy, &shop, &docs).await?;
    let (_, text) = proxy.finish_with_text().await?;
    let dir = tempfile::tempdir()?;
    let files = rotate(dir.path(), &text)?;

    let html = report_html(&files).await?;
    let summary = summary_json(&[], &files).await?;
    assert_eq!(summary["total"]["requests"], sent, "{summary:#}");
    let expected = summary_figures(&summary);
    assert_eq!(expected.keys().collect::<Vec<_>>(), ["alpha", "beta", "gamma"]);
    assert_eq!(page_figures(&html), expected, "the page's figures are audit summary's");
    // What the run did, as the page says it: alpha refused by robots.txt line 2 and AGENTS.md
    // line 7, gamma's would_deny by the same robots.txt rule.
    let (alpha, gamma) = (&expected["alpha"], &expected["gamma"]);
    assert_eq!((alpha["allowed"], alpha["denied"], alpha["rate_limited"], alpha["sent_bytes"]), (3, 1, 1, 8));
    assert_eq!((gamma["allowed"], gamma["would_deny"]), (2, 2));
    let section = |agent: &str| {
        let start = format!("data-agent=\"{agent}\">\n<h2>");
        html.split(&start).nth(1).and_then(|s| s.split("</section>").next()).unwrap_or_default().to_owned()
    };
    let (alpha, gamma) = (section("alpha"), section("gamma"));
    assert!(alpha.contains("<td class=\"file\">robots.txt:2</td><td>robots.disallow</td><td class=\"rule\">Disallow: /private</td><td class=\"n\">1</td><td class=\"n\">0</td>"), "{alpha}");
    assert!(alpha.contains("<td class=\"file\">AGENTS.md:7</td><td>agents_md.rate_limit</td>"), "{alpha}");
    assert!(
        gamma.contains("<td class=\"rule\">Disallow: /private</td><td class=\"n\">0</td><td class=\"n\">1</td>"),
        "{gamma}"
    );
    assert!(alpha.contains("<svg class=\"timeline\"") && alpha.contains("<rect class=\"refused\""), "{alpha}");
    assert!(html.contains(&format!("read from {}, {}", files[0].display(), files[1].display())), "both files read");
    Ok(())
}

#[tokio::test]
async fn the_console_serves_the_report_of_the_running_log_to_an_admin_only() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let (shop, docs) = origins(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        three_agents(config);
        config.admin.token_sha256 = Some(TOKEN_SHA256.to_owned());
    })
    .await?;
    let sent = traffic(&proxy, &shop, &docs).await?;
    // Every request's line is on disk (a forwarded one's two lines).
    let lines = proxy.log_lines(sent).await?;
    let forwarded = lines.iter().filter(|l| l["event.type"] == serde_json::json!(["start"])).count();
    proxy.log_lines(sent + forwarded).await?;

    let admin = reqwest::Client::builder().no_proxy().build()?;
    let url = format!("http://{}/report", proxy.admin_addr.ok_or("the test proxy has no admin address")?);
    let bare = admin.get(&url).send().await?;
    assert_eq!(bare.status(), 401, "the report needs the admin token");
    let page = admin.get(&url).bearer_auth(TOKEN).send().await?;
    assert_eq!(page.status(), 200);
    assert!(header(&page, "content-type").starts_with("text/html"));
    let policy = header(&page, "content-security-policy");
    assert!(
        policy.starts_with("default-src 'none'; style-src 'sha256-") && policy.ends_with("frame-ancestors 'none'"),
        "{policy}"
    );
    let html = page.text().await?;
    let summary = summary_json(&[], std::slice::from_ref(&proxy.log_path)).await?;
    assert_eq!(page_figures(&html), summary_figures(&summary), "the console's report is audit summary's");
    assert_eq!(summary["total"]["requests"], sent);

    let console = admin.get(url.replace("/report", "/")).bearer_auth(TOKEN).send().await?.text().await?;
    assert!(console.contains(r#"<a id="report-link" href="/report">"#), "the console links to it");
    proxy.finish().await?;
    Ok(())
}

/// A line shaped as a hostile site and agent would want it: markup in the URL (its origin is
/// shown) and a site's rule text (a real proxy writes what the site's file says as the rule); its
/// `@timestamp` is `AT`.
const HOSTILE: &str = r#"{"@timestamp":"AT","event.id":"ffffffffffffffffffffffffffffffff","event.type":["denied"],"event.action":"deny","agentgate.agent":"beta","url.full":"https://<img src=x onerror=document.title='pwned'>/<script>document.title='pwned'</script>","url.domain":"x.test","agentgate.reasons":[{"source":"robots.txt","code":"robots.disallow","line":3,"rule":"Disallow: /<script>document.title='pwned'</script>","blocking":true}]}"#;

#[tokio::test]
#[ignore = "needs chromium and chromium-driver: run by scripts/test.sh"]
async fn browser_renders_the_report_offline_with_the_summarys_figures_and_log_values_as_text() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let (shop, docs) = origins(&ca).await?;
    let proxy = TestProxy::start_with(&ca, three_agents).await?;
    traffic(&proxy, &shop, &docs).await?;
    let (_, text) = proxy.finish_with_text().await?;
    let output = Path::new(env!("CARGO_TARGET_TMPDIR")).join("scorecard");
    std::fs::create_dir_all(&output)?;
    let log = output.join("decisions.jsonl");
    let last: Value = serde_json::from_str(text.lines().last().ok_or("an empty log")?)?;
    let hostile = HOSTILE.replace("AT", last["@timestamp"].as_str().ok_or("a timestamp")?);
    std::fs::write(&log, format!("{text}{hostile}\n"))?;
    let page = output.join("report.html");
    std::fs::write(&page, report_html(std::slice::from_ref(&log)).await?)?;
    let expected = summary_figures(&summary_json(&[], std::slice::from_ref(&log)).await?);

    let browser = Browser::start_logging().await?;
    let file_url = url::Url::from_file_path(&page).map_err(|()| format!("{} as a URL", page.display()))?;
    // What the browser did before (its new tab page) is not the report's.
    browser.log("browser").await?;
    browser.client.goto(file_url.as_str()).await?;
    browser
        .wait_until("document.querySelectorAll('section.agent').length === 3", "three agents", PAGE_DEADLINE)
        .await?;

    // The figures as the browser shows them: each cell's exact value, and its text.
    let shown = browser
        .eval(
            "Object.fromEntries([...document.querySelectorAll('section.agent')].map(s => [s.dataset.agent, \
             Object.fromEntries([...s.querySelectorAll('table.figures td[data-figure]')].map(td => \
             [td.dataset.figure, [Number(td.dataset.value), td.textContent]]))]))",
        )
        .await?;
    let mut figures = BTreeMap::new();
    for (agent, cells) in shown.as_object().ok_or("an object")? {
        let mut values = BTreeMap::new();
        for (name, cell) in cells.as_object().ok_or("an object")? {
            let value = cell[0].as_u64().ok_or("a number")?;
            if !name.ends_with("_bytes") {
                assert_eq!(cell[1], value.to_string(), "{agent} {name} shows its value");
            }
            values.insert(name.clone(), value);
        }
        figures.insert(agent.clone(), values);
    }
    assert_eq!(figures, expected, "the figures the browser shows are audit summary's");

    // The hostile values are text on the page: no element came of them, nothing ran.
    assert_eq!(browser.eval("document.scripts.length + document.images.length").await?, 0);
    assert_eq!(browser.eval("document.title").await?, "agentgate report");
    let beta = browser.eval("document.querySelector('section.agent[data-agent=\"beta\"]').innerText").await?;
    let beta = beta.as_str().unwrap_or_default();
    assert!(beta.contains("Disallow: /<script>document.title='pwned'</script>"), "{beta}");
    assert!(beta.contains("<img src=x onerror=document.title='pwned'>"), "{beta}");
    // The page's own style applies under its policy (the header is dark), and its charts
    // are drawn inside their boxes.
    let header = browser.eval("getComputedStyle(document.querySelector('header')).backgroundColor").await?;
    assert_eq!(header, "rgb(29, 36, 48)");
    let inside = "[...document.querySelectorAll('svg.timeline rect')].every(r => { const b = r.getBBox(); \
                  return b.x >= 0 && b.y >= 0 && b.x + b.width <= 720.5 && b.y + b.height <= 180.5; })";
    assert_eq!(browser.eval(inside).await?, true);
    assert!(browser.eval("document.querySelectorAll('svg.timeline rect').length").await?.as_u64() > Some(3));
    browser.client.find(Locator::Css("#agents a[href='#agent-2']")).await?;

    // No console message above info, and no request but the page itself.
    let console = browser.log("browser").await?;
    let errors: Vec<&Value> =
        console.iter().filter(|entry| entry["level"] != "INFO" && entry["level"] != "DEBUG").collect();
    assert!(errors.is_empty(), "console: {errors:#?}");
    let requests: Vec<String> = browser
        .log("performance")
        .await?
        .iter()
        .filter_map(|entry| serde_json::from_str::<Value>(entry["message"].as_str()?).ok())
        .filter(|event| event["message"]["method"] == "Network.requestWillBeSent")
        .filter_map(|event| event["message"]["params"]["request"]["url"].as_str().map(str::to_owned))
        .collect();
    // From the report's own request on (the new tab page it replaced loads its parts as it goes).
    let own = requests.iter().position(|url| *url == file_url.as_str()).ok_or("the report's own request")?;
    assert_eq!(requests[own..], [file_url.to_string()], "the page fetched nothing");

    browser.screenshot_to(&output.join("report.png")).await?;
    browser.screenshot_for_docs("report.png").await?;
    browser.close().await?;
    Ok(())
}
