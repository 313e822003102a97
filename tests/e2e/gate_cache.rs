//! The policy cache seen from the origin: within a file's freshness lifetime the proxy fetches
//! it once, however many requests follow (RFC 9111, SEMANTICS B22, C5, D16), concurrent
//! first requests to a fresh origin share one fetch of each file (single flight), and the
//! cache is bounded in bytes (`[cache] max_bytes`): origins it cannot keep are fetched again,
//! and a stale file is revalidated with a conditional GET (RFC 9111 §4.3).

use std::time::Duration;

use futures_util::future::join_all;

use crate::admin::{sample, scrape};
use crate::support::block::{self, Expected};
use crate::support::origin::{Origin, POLICY_PATHS, Served, Site};
use crate::support::pki::TestCa;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult};

const MAX_AGE: &[(&str, &str)] = &[("cache-control", "max-age=3600"), ("content-type", "text/plain")];

/// A site with a robots.txt fresh for an hour that disallows `/private`; the other files
/// are 404s (no `Cache-Control`: the default lifetime).
fn cached_site() -> Site {
    Site::new().serve("/robots.txt", 200, MAX_AGE, "User-agent: *\nDisallow: /private\n")
}

/// Every policy file the origin serves was fetched exactly once. An http origin's AGENTS.md
/// is fetched from port 443 of its host, never from the origin (SEMANTICS C2).
fn assert_one_fetch_each(origin: &Origin, https: bool) {
    for (path, fetches) in origin.policy_fetches() {
        let expected = match path {
            "/AGENTS.md" | "/.well-known/agents.md" if !https => 0,
            _ => 1,
        };
        assert_eq!(fetches, expected, "{path} fetched {fetches} times: {:?}", origin.policy_fetches());
    }
}

#[tokio::test]
async fn twenty_requests_within_max_age_fetch_each_file_once() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    for https in [false, true] {
        let site = cached_site();
        let origin = if https { Origin::https_site(&ca, site).await? } else { Origin::http_site(site).await? };
        let proxy = TestProxy::start(&ca).await?;
        let client = proxy.client()?;
        for i in 0..20 {
            let path = if i % 2 == 0 { format!("/page/{i}") } else { format!("/private/{i}") };
            let response = client.get(origin.url(&path)).send().await?;
            let expected = if i % 2 == 0 { 200 } else { 403 };
            assert_eq!(response.status(), expected, "{path}: every request decided from the cached robots.txt");
        }
        assert_one_fetch_each(&origin, https);
        let records = proxy.finish().await?;
        assert_eq!(records.len(), 20, "one line per request, none for the fetches");
        assert!(
            records.iter().all(|r| !POLICY_PATHS.iter().any(|p| r["url.full"].as_str().unwrap_or("").ends_with(p))),
            "policy fetches are not in the decision log"
        );
    }
    Ok(())
}

#[tokio::test]
async fn fifty_concurrent_first_requests_share_one_fetch_per_file() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let http = Origin::http_site(cached_site()).await?;
    let https = Origin::https_site(&ca, cached_site()).await?;
    let proxy = TestProxy::start(&ca).await?;
    // One client per request, so each has its own connection (and, for https, its own
    // tunnel): fifty requests reach the gate at once, not one after another.
    let mut requests = Vec::new();
    for origin in [&http, &https] {
        for i in 0..50 {
            let client = proxy.client()?;
            let url = origin.url(&format!("/page/{i}"));
            requests.push(async move { client.get(url).send().await });
        }
    }
    for response in join_all(requests).await {
        assert_eq!(response?.status(), 200);
    }
    assert_one_fetch_each(&http, false);
    assert_one_fetch_each(&https, true);
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 100, "one line per request");
    assert!(records.iter().all(|r| r["event.action"] == "allow"));
    Ok(())
}

/// Memory per origin is bounded in bytes. Twelve origins on their own loopback
/// ports each serve a robots.txt of 2,000 rules (about 46 KiB, weighing a few hundred KiB
/// parsed); `[cache] max_bytes = 1 MiB` keeps only a few of them. Every request is still
/// decided by its origin's file, and on a second round the origins the cache let go are
/// fetched again. (The accounted weight itself is checked against `max_bytes` in
/// `fetch::tests::weight_stays_under_max_bytes_and_evicted_origins_are_fetched_again`.)
#[tokio::test]
async fn large_policies_on_many_origins_stay_under_max_bytes() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let rules: String = (0..2_000).map(|i| format!("Disallow: /d{:02}/p-{i:05}\n", i % 97)).collect();
    let robots = format!("User-agent: *\n{rules}");
    let mut origins = Vec::new();
    for _ in 0..12 {
        origins.push(Origin::http_site(Site::new().serve("/robots.txt", 200, MAX_AGE, robots.clone())).await?);
    }
    let proxy = TestProxy::start_with(&ca, |config| config.cache.max_bytes = 1024 * 1024).await?;
    let client = proxy.client()?;
    let expected = Expected {
        decision: "deny",
        source: "robots.txt",
        code: "robots.disallow",
        line: Some(9),
        rule: "Disallow: /d07/p-00007",
        advice: "robots.txt disallows this path",
    };
    let mut blocked = Vec::new();
    for round in 0..2 {
        for origin in &origins {
            let response = client.get(origin.url("/d07/p-00007/page")).send().await?;
            blocked.push(block::plain(response, &expected).await?);
            let allowed = client.get(origin.url(&format!("/free/{round}"))).send().await?;
            assert_eq!(allowed.status(), 200);
        }
    }
    let fetches: usize = origins.iter().map(|o| o.hits("/robots.txt")).sum();
    assert!(fetches >= 12 + 8, "at most four origins fit in 1 MiB, so most are fetched again: {fetches} fetches");
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 48, "one line per request, none for the fetches");
    for record in &blocked {
        block::logged(&records, record, "GET", &expected)?;
    }
    Ok(())
}

/// Moves tokio's clock (the in-process proxy's) forward by `by` while no request is in
/// flight, then lets it run on: what waiting `by` does to the cache, as `src/fetch/tests.rs`
/// drives it.
async fn advance(by: Duration) {
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}

/// A site whose robots.txt disallows `/private`, fresh for 60 s (the floor) with `etag`.
fn etag_site(etag: &str) -> Site {
    let headers = [("cache-control", "max-age=60"), ("etag", etag), ("content-type", "text/plain")];
    Site::new().serve("/robots.txt", 200, &headers, "User-agent: *\nDisallow: /private\n")
}

/// RFC 9111 §4.3: once two origins' robots.txt copies are stale, each refresh is
/// a conditional GET on the stored `ETag`. The unchanged file is answered `304` without a
/// body and keeps deciding; the changed one (new `ETag`) comes back whole and decides the
/// next request. `/metrics` counts the 304.
#[tokio::test]
async fn a_stale_file_is_revalidated_and_a_changed_one_decides_the_next_request() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let same = Origin::http_site(etag_site("\"r1\"")).await?;
    let changed = Origin::http_site(etag_site("\"r1\"")).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    for origin in [&same, &changed] {
        assert_eq!(client.get(origin.url("/private/a")).send().await?.status(), 403);
    }
    changed.serve("/robots.txt", Served::ok("User-agent: *\nDisallow: /other\n").with("etag", "\"r2\"").max_age(60));
    // Freshness is the proxy's clock against the copies' 60 s lifetime (the floor, C5, left
    // as it is): tokio's clock, which the in-process proxy reads, moved past it.
    advance(Duration::from_secs(61)).await;
    // A new client: the proxy closed the old one's idle connections during those 61 s, as it
    // would have in real time.
    let client = proxy.client()?;
    for origin in [&same, &changed] {
        // The stale copy is served while the one refresh runs (stale-while-revalidate).
        assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    }
    eventually("the changed robots.txt to decide", async || {
        let private = client.get(changed.url("/private/a")).send().await?.status();
        let other = client.get(changed.url("/other/a")).send().await?.status();
        if (private.as_u16(), other.as_u16()) == (200, 403) { Ok(()) } else { Err(format!("{private} {other}").into()) }
    })
    .await?;
    eventually("the unchanged robots.txt to be revalidated", async || match same.not_modified("/robots.txt") {
        1 => Ok(()),
        n => Err(format!("{n} 304s").into()),
    })
    .await?;
    assert_eq!(client.get(same.url("/private/a")).send().await?.status(), 403, "the renewed copy decides");
    assert_eq!((same.hits("/robots.txt"), same.conditional("/robots.txt")), (2, 1), "one conditional refresh");
    assert_eq!((changed.hits("/robots.txt"), changed.conditional("/robots.txt")), (2, 1));
    assert_eq!(changed.not_modified("/robots.txt"), 0, "a new ETag: fetched whole");
    let metrics = scrape(&proxy).await?;
    let fetches =
        |status| sample(&metrics, "agentgate_policy_fetches_total", &[("file", "/robots.txt"), ("status", status)]);
    assert_eq!(fetches("304"), Some(1.0));
    assert_eq!(fetches("200"), Some(3.0), "two first fetches and the changed file");
    Ok(())
}
