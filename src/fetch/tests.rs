//! The fetcher and cache against the real hyper origin of the end-to-end tests on
//! 127.0.0.1:0 (plain HTTP, and HTTPS with a test CA trusted through `[upstream]
//! extra_ca_files`), serving the policy files each test chooses and counting requests per
//! path. Expiry is driven by tokio's clock (`pause`, `advance`, `resume` between requests),
//! never by sleeping.

use std::sync::Arc;
use std::time::Duration;

use super::file::PolicyFile;
use super::freshness::TtlBounds;
use super::get::Fetcher;
use super::*;
use crate::metrics::Metrics;
use crate::net::NetworkConfig;
use crate::policy::Format as _;
use crate::policy::agents_md::{AgentsMd, Location};
use crate::policy::agents_txt::AgentsTxt;
use crate::policy::robots::Robots;
use crate::policy::{FetchError, FetchOutcome, Headers, Outcome, Policies, PolicyStatus, RequestView, agents_txt};
use crate::proxy::config::UpstreamConfig;

// The end-to-end tests' origin and CA (`docs/layering.md`); these tests use only part of it.
#[allow(dead_code)]
// Shared with the e2e tests, whose crate reaches its `pub` items.
#[allow(unreachable_pub)]
#[path = "../../tests/testkit/mod.rs"]
mod testkit;

use testkit::TestResult;
use testkit::origin::{Origin as TestOrigin, Served};
use testkit::pki::TestCa;

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";
const AGENTS_MD: &str =
    "# AGENTS.md\n\n## Identity\n- site: 127.0.0.1\n\n## Restrictions\n- disallowed-paths: /md-only\n";
const CODING_AGENTS_MD: &str = "# Notes for coding agents\n\nRun `cargo test` before committing.\n";
const AUTOCTL: &str = "scope: /\nuser-agent: *\nallowed-methods: GET, HEAD\n";

fn agents_txt_body() -> String {
    String::from_utf8_lossy(&agents_txt::fix_hash(b"/txt-only DISALLOW\n")).into_owned()
}

// ---------------------------------------------------------------------------------------
// Helpers.

/// The proxy's transport, trusting `ca`; the test origins are on loopback, which the network
/// guard denies by default, so these tests opt in (`docs/security.md`).
fn transport(ca: &TestCa) -> TestResult<Arc<dyn PolicyTransport>> {
    crate::tls::install_default_provider();
    let config = crate::config::Config {
        upstream: UpstreamConfig { extra_ca_files: vec![ca.pem_path.clone()], ..UpstreamConfig::default() },
        network: NetworkConfig {
            allow_cidrs: vec!["127.0.0.0/8".parse()?, "::1/128".parse()?],
            ..NetworkConfig::default()
        },
        ..crate::config::Config::default()
    };
    Ok(crate::app::policy_transport(&config)?)
}

fn cache(ca: &TestCa) -> TestResult<PolicyCache> {
    Ok(PolicyCache::new(transport(ca)?, CacheSettings::default(), Arc::default()))
}

fn fetcher(ca: &TestCa, timeout: Duration) -> TestResult<Fetcher> {
    let ttl = TtlBounds { min: Duration::from_secs(60), max: Duration::from_secs(24 * 3600) };
    Ok(Fetcher { transport: transport(ca)?, timeout, ttl })
}

/// A new test CA.
fn test_ca() -> TestResult<TestCa> {
    TestCa::new("agentgate fetch test CA")
}

/// The cache key of `origin`, by IP (its certificate names 127.0.0.1).
fn origin_key(origin: &TestOrigin) -> Origin {
    Origin::from_uri(&origin.ip_url("/").parse().expect("a test origin's URL is valid"))
        .expect("a test origin's URL names an origin")
}

/// All four files, valid, with no cache directives.
fn serve_all(origin: &TestOrigin) -> &TestOrigin {
    origin
        .serve("/robots.txt", Served::ok(ROBOTS))
        .serve("/agents.txt", Served::ok(agents_txt_body()))
        .serve("/AGENTS.md", Served::ok(AGENTS_MD).with("content-type", "text/markdown"))
        .serve("/automation-preferences.txt", Served::ok(AUTOCTL))
}

/// What the policies decide for `GET path`.
fn decide(policies: &Policies, path: &str) -> Outcome {
    let headers = Headers::default();
    let view = RequestView {
        method: "GET",
        scheme: "https",
        host: "127.0.0.1",
        port: 443,
        path_and_query: path,
        product_token: None,
        user_agent: Some("ExampleBot/1.0"),
        agent_id: "test",
        trust_level: 0,
        purposes: &[],
        headers: &headers,
    };
    crate::policy::evaluate(policies, &view).outcome
}

/// Moves tokio's clock forward by `by` while no request is in flight, then lets it run on.
async fn advance(by: Duration) {
    tokio::time::pause();
    tokio::time::advance(by).await;
    tokio::time::resume();
}

/// The policies once any refresh this request started is done. A stale origin is served
/// its stale copy while one refresh runs in the background (stale-while-revalidate), so a
/// test that wants the refreshed state asks once more after the refresh.
async fn policies_refreshed(cache: &PolicyCache, key: &Origin) -> Arc<Policies> {
    cache.policies(key).await;
    cache.refreshed(key).await;
    cache.policies(key).await
}

const FOUR: [&str; 4] = ["/robots.txt", "/agents.txt", "/AGENTS.md", "/automation-preferences.txt"];

// ---------------------------------------------------------------------------------------
// The cache.

#[tokio::test]
async fn four_files_are_fetched_in_parallel_with_agentgates_user_agent() -> TestResult {
    let ca = test_ca()?;
    // Each reply is held until all four requests are in: a sequential fetcher would time out.
    let origin = TestOrigin::https(&ca).await?;
    origin
        .serve("/robots.txt", Served::ok(ROBOTS).held())
        .serve("/agents.txt", Served::ok(agents_txt_body()).held())
        .serve("/AGENTS.md", Served::ok(AGENTS_MD).held())
        .serve("/automation-preferences.txt", Served::ok(AUTOCTL).held());
    let settings = CacheSettings { fetch_timeout: Duration::from_secs(10), ..CacheSettings::default() };
    let cache = PolicyCache::new(transport(&ca)?, settings, Arc::default());
    let release = async {
        origin.held(4).await;
        origin.release_all();
    };
    let key = origin_key(&origin);
    let (policies, ()) = tokio::join!(cache.policies(&key), release);

    assert_eq!(policies.robots.report().status, PolicyStatus::Valid);
    assert_eq!(policies.agents_txt.status(), PolicyStatus::Valid);
    assert!(!policies.agents_md.falls_through());
    assert_eq!(policies.agents_md.location(), Location::Root);
    assert_eq!(policies.autoctl.report().status, PolicyStatus::Valid);
    assert_eq!(origin.hits("/.well-known/agents.md"), 0, "the root AGENTS.md is a policy");
    for path in ["/private", "/txt-only", "/md-only"] {
        assert_eq!(decide(&policies, path), Outcome::Deny, "{path}");
    }
    assert_eq!(decide(&policies, "/public"), Outcome::Allow);
    let agents = origin.user_agents();
    assert_eq!(agents.len(), 4);
    assert!(agents.iter().all(|ua| ua == USER_AGENT && ua.starts_with("agentgate/")), "{agents:?}");
    Ok(())
}

#[tokio::test]
async fn fifty_concurrent_first_requests_share_one_fetch_per_file() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin);
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    let all = futures_util::future::join_all((0..50).map(|_| cache.policies(&key))).await;
    for path in FOUR {
        assert_eq!(origin.hits(path), 1, "{path}");
    }
    assert!(all.iter().all(|p| Arc::ptr_eq(p, &all[0])), "every caller got the one snapshot");
    Ok(())
}

#[tokio::test]
async fn fresh_files_are_served_from_cache_and_only_stale_ones_refetched() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/robots.txt", Served::ok(ROBOTS).max_age(120));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    policies_refreshed(&cache, &key).await;
    advance(Duration::from_secs(100)).await;
    for _ in 0..10 {
        policies_refreshed(&cache, &key).await;
    }
    assert_eq!(origin.hits("/robots.txt"), 1, "within max-age");

    advance(Duration::from_secs(30)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/robots.txt"), 2, "after max-age");
    for path in ["/agents.txt", "/AGENTS.md", "/automation-preferences.txt"] {
        assert_eq!(origin.hits(path), 1, "{path} is still fresh");
    }
    assert_eq!(decide(&policies, "/md-only"), Outcome::Deny, "fresh states carried over");
    Ok(())
}

/// The count of `agentgate_policy_fetches_total` for `file` and `status` in `metrics`.
fn fetches(metrics: &Metrics, file: &str, status: &str) -> usize {
    let text = metrics.encode(crate::metrics::Scraped::default());
    let sample = format!("agentgate_policy_fetches_total{{file=\"{file}\",status=\"{status}\"}} ");
    text.lines().find_map(|line| line.strip_prefix(&sample)).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// A stale robots.txt with an `ETag` is refreshed with `If-None-Match`; the `304`
/// renews it with the lifetime the 304 itself gives (RFC 9111 §4.3.4: here an hour where
/// the stored copy said two minutes), no body comes back, the state is the same, and the
/// fetch is counted with status 304.
#[tokio::test]
async fn stale_file_with_an_etag_is_revalidated_and_the_304_renews_it() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/robots.txt", Served::ok(ROBOTS).with("etag", "\"r1\"").max_age(120));
    let metrics = Arc::new(Metrics::new());
    let cache = PolicyCache::new(transport(&ca)?, CacheSettings::default(), Arc::clone(&metrics));
    let key = origin_key(&origin);
    policies_refreshed(&cache, &key).await;
    assert_eq!(origin.conditional("/robots.txt"), 0, "the first fetch has nothing to revalidate");
    // The origin's 304 now says the copy is fresh for an hour.
    origin.serve("/robots.txt", Served::ok(ROBOTS).with("etag", "\"r1\"").max_age(3600));
    advance(Duration::from_secs(121)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/robots.txt"), 2);
    assert_eq!(origin.conditional("/robots.txt"), 1, "the refresh is conditional");
    assert_eq!(origin.not_modified("/robots.txt"), 1, "and answered 304 without a body");
    assert_eq!(decide(&policies, "/private"), Outcome::Deny, "the stored copy stays in force");
    assert_eq!(fetches(&metrics, "/robots.txt", "304"), 1);
    assert_eq!(fetches(&metrics, "/robots.txt", "200"), 1);
    let text = cache.cached(&key).await.and_then(|files| files[0].text.clone());
    assert_eq!(text.as_deref(), Some(ROBOTS), "the admin API still shows the stored text");
    // Fresh for the 304's hour, not the stored two minutes.
    advance(Duration::from_secs(600)).await;
    policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/robots.txt"), 2, "renewed by the 304's own max-age");
    Ok(())
}

/// A changed file (new `ETag`) answers the conditional request with 200 and the
/// whole body, which decides from then on; a file with only `Last-Modified` is revalidated
/// with `If-Modified-Since`; a file without validators is fetched whole.
#[tokio::test]
async fn changed_file_is_fetched_whole_and_last_modified_revalidates_too() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    let modified = "Mon, 01 Jan 2024 00:00:00 GMT";
    serve_all(&origin)
        .serve("/robots.txt", Served::ok(ROBOTS).with("etag", "\"r1\"").max_age(60))
        .serve("/automation-preferences.txt", Served::ok(AUTOCTL).with("last-modified", modified).max_age(60))
        .serve("/agents.txt", Served::ok(agents_txt_body()).max_age(60));
    let metrics = Arc::new(Metrics::new());
    let cache = PolicyCache::new(transport(&ca)?, CacheSettings::default(), Arc::clone(&metrics));
    let key = origin_key(&origin);
    policies_refreshed(&cache, &key).await;
    origin.serve("/robots.txt", Served::ok("User-agent: *\nDisallow: /other\n").with("etag", "\"r2\"").max_age(60));
    advance(Duration::from_secs(61)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert_eq!(origin.conditional("/robots.txt"), 1);
    assert_eq!(origin.not_modified("/robots.txt"), 0, "a new ETag: fetched whole");
    assert_eq!(decide(&policies, "/private"), Outcome::Allow, "the new file decides");
    assert_eq!(decide(&policies, "/other"), Outcome::Deny);
    assert_eq!(origin.conditional("/automation-preferences.txt"), 1, "If-Modified-Since");
    assert_eq!(origin.not_modified("/automation-preferences.txt"), 1);
    assert_eq!(origin.conditional("/agents.txt"), 0, "no validator, nothing to send");
    assert_eq!(origin.hits("/agents.txt"), 2);
    assert_eq!(fetches(&metrics, "/robots.txt", "200"), 2);
    // The next refresh is conditional on the new ETag.
    advance(Duration::from_secs(61)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert_eq!(origin.not_modified("/robots.txt"), 1, "revalidated on the new file's ETag");
    assert_eq!(decide(&policies, "/other"), Outcome::Deny);
    Ok(())
}

/// AGENTS.md read from its fallback location (C1) is revalidated at both locations; when
/// both answer 304 the state is unchanged and nothing is parsed.
#[tokio::test]
async fn c1_agents_md_fallback_is_revalidated_at_both_locations() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin)
        .serve("/AGENTS.md", Served::ok(CODING_AGENTS_MD).with("etag", "\"a1\"").max_age(60))
        .serve("/.well-known/agents.md", Served::ok(AGENTS_MD).with("etag", "\"w1\"").max_age(60));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    assert_eq!(decide(&*policies_refreshed(&cache, &key).await, "/md-only"), Outcome::Deny);
    advance(Duration::from_secs(61)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert_eq!(origin.not_modified("/AGENTS.md"), 1);
    assert_eq!(origin.not_modified("/.well-known/agents.md"), 1);
    assert_eq!(decide(&policies, "/md-only"), Outcome::Deny, "the well-known policy stays in force");
    Ok(())
}

/// A stale origin's refresh once made every request wait for the re-fetch. Now the
/// stale copy is served while exactly one refresh runs in the background: the refetch of
/// robots.txt is held at the origin until the test lets it go, and twenty requests made
/// meanwhile all get the old copy without waiting.
#[tokio::test]
async fn stale_copy_is_served_while_one_background_refresh_runs() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/robots.txt", Served::ok(ROBOTS).max_age(60));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    assert_eq!(decide(&*cache.policies(&key).await, "/private"), Outcome::Deny);
    origin.serve("/robots.txt", Served::ok("User-agent: *\nDisallow: /other\n").max_age(60).held());
    advance(Duration::from_secs(61)).await;
    for _ in 0..20 {
        let stale = cache.policies(&key).await;
        assert_eq!(decide(&stale, "/private"), Outcome::Deny, "the stale copy, without waiting");
    }
    // The one refresh is at the origin, held there; let it answer.
    origin.held(1).await;
    origin.release_all();
    cache.refreshed(&key).await;
    let fresh = cache.policies(&key).await;
    assert_eq!(decide(&fresh, "/private"), Outcome::Allow);
    assert_eq!(decide(&fresh, "/other"), Outcome::Deny);
    assert_eq!(origin.hits("/robots.txt"), 2, "one refresh for twenty stale requests");
    Ok(())
}

/// A copy stale for longer than the stale-while-revalidate window is not served: the
/// request waits for the refresh, as on the first fetch.
#[tokio::test]
async fn copy_past_the_stale_window_waits_for_the_refresh() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/robots.txt", Served::ok(ROBOTS).max_age(60));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    cache.policies(&key).await;
    origin.serve("/robots.txt", Served::ok("User-agent: *\nDisallow: /other\n").max_age(60));
    advance(Duration::from_secs(121)).await;
    let policies = cache.policies(&key).await;
    assert_eq!(decide(&policies, "/private"), Outcome::Allow, "the refreshed copy, at once");
    assert_eq!(origin.hits("/robots.txt"), 2);
    Ok(())
}

/// The cache is bounded in bytes. Origins serving a 400 KiB robots.txt each weigh
/// megabytes; with `max_bytes` room for about three of them, ten origins leave at most that
/// weight cached, the oldest are evicted, and a request to an evicted origin fetches again.
#[tokio::test]
async fn weight_stays_under_max_bytes_and_evicted_origins_are_fetched_again() -> TestResult {
    let ca = test_ca()?;
    let robots: String = (0..16_000).map(|i| format!("Disallow: /p/{i:05}/x\n")).collect();
    let robots = format!("User-agent: *\n{robots}");
    let mut origins = Vec::new();
    for _ in 0..10 {
        let origin = TestOrigin::http().await?;
        serve_all(&origin).serve("/robots.txt", Served::ok(robots.clone()));
        origins.push(origin);
    }
    let one = cache(&ca)?;
    let weight = one.policies(&origin_key(&origins[0])).await.weight() as u64;
    assert!(weight > robots.len() as u64, "a parsed robots.txt weighs at least its text: {weight}");
    let max_bytes = 3 * weight + weight / 2;
    let settings = CacheSettings::from(CacheConfig { max_bytes, ..CacheConfig::default() });
    let cache = PolicyCache::new(transport(&ca)?, settings, Arc::default());
    for origin in &origins {
        let policies = cache.policies(&origin_key(origin)).await;
        assert_eq!(decide(&policies, "/p/00007/x"), Outcome::Deny);
        cache.run_pending_tasks().await;
        assert!(cache.weighted_size() <= max_bytes, "{} > {max_bytes}", cache.weighted_size());
    }
    assert!(cache.len() <= 3, "{} origins cached", cache.len());
    let fetches = |origins: &[TestOrigin]| origins.iter().map(|o| o.hits("/robots.txt")).sum::<usize>();
    let before = fetches(&origins);
    for origin in &origins {
        assert_eq!(decide(&*cache.policies(&origin_key(origin)).await, "/p/00007/x"), Outcome::Deny);
    }
    assert!(
        fetches(&origins) >= before + 7,
        "the evicted origins are fetched again: {before} then {}",
        fetches(&origins)
    );
    cache.run_pending_tasks().await;
    assert!(cache.weighted_size() <= max_bytes);
    Ok(())
}

#[tokio::test]
async fn max_age_above_a_day_is_capped_at_24_hours() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/robots.txt", Served::ok(ROBOTS).max_age(7 * 24 * 3600));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    policies_refreshed(&cache, &key).await;
    advance(Duration::from_secs(23 * 3600)).await;
    policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/robots.txt"), 1);
    advance(Duration::from_secs(3600 + 1)).await;
    policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/robots.txt"), 2);
    Ok(())
}

#[tokio::test]
async fn c5_no_store_is_refetched_after_the_60_second_floor_not_per_request() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/agents.txt", Served::ok(agents_txt_body()).with("cache-control", "no-store"));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    policies_refreshed(&cache, &key).await;
    advance(Duration::from_secs(59)).await;
    policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/agents.txt"), 1);
    advance(Duration::from_secs(2)).await;
    policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/agents.txt"), 2);
    Ok(())
}

#[tokio::test]
async fn robots_404_allows_everything() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/robots.txt", Served::status(404));
    let policies = cache(&ca)?.policies(&origin_key(&origin)).await;
    assert!(!policies.robots.is_unreachable());
    assert_eq!(policies.robots.report().status, PolicyStatus::Absent);
    assert_eq!(decide(&policies, "/private"), Outcome::Allow);
    Ok(())
}

#[tokio::test]
async fn robots_503_keeps_the_good_copy_and_without_one_disallows() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/robots.txt", Served::ok(ROBOTS).max_age(60));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    policies_refreshed(&cache, &key).await;
    origin.serve("/robots.txt", Served::status(503));
    advance(Duration::from_secs(61)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/robots.txt"), 2);
    assert!(!policies.robots.is_unreachable(), "the parsed copy is kept");
    assert_eq!(decide(&policies, "/public"), Outcome::Allow);
    assert_eq!(decide(&policies, "/private"), Outcome::Deny);

    cache.purge(&key).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert!(policies.robots.is_unreachable(), "no copy: unreachable disallows all");
    assert_eq!(decide(&policies, "/public"), Outcome::Deny);
    Ok(())
}

#[tokio::test]
async fn b20_malformed_agents_txt_drops_the_good_copy_and_is_refetched_after_5_minutes() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/agents.txt", Served::ok(agents_txt_body()).max_age(60));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    assert_eq!(decide(&*policies_refreshed(&cache, &key).await, "/public"), Outcome::Allow);

    origin.serve("/agents.txt", Served::ok(format!("*{}\n/a ALLOW\n", "0".repeat(64))).max_age(86_400));
    advance(Duration::from_secs(61)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/agents.txt"), 2);
    assert!(policies.agents_txt.is_restricted(), "the good copy is dropped");
    assert_eq!(decide(&policies, "/public"), Outcome::Deny);

    advance(Duration::from_secs(240)).await;
    policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/agents.txt"), 2, "the restricted verdict is cached");
    advance(Duration::from_secs(61)).await;
    policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/agents.txt"), 3, "and fetched again after 5 minutes, not after max-age");
    Ok(())
}

#[tokio::test]
async fn c4_agents_md_policy_survives_a_failed_refetch_for_an_hour() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve("/AGENTS.md", Served::ok(AGENTS_MD).max_age(600));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    policies_refreshed(&cache, &key).await;
    origin.serve("/AGENTS.md", Served::status(500));
    advance(Duration::from_secs(601)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert_eq!(origin.hits("/AGENTS.md"), 2);
    assert_eq!(decide(&policies, "/md-only"), Outcome::Deny, "the stale policy is kept");
    // Retried each minute (the floor) for up to an hour past expiry, then dropped.
    advance(Duration::from_secs(3600)).await;
    let policies = policies_refreshed(&cache, &key).await;
    assert!(policies.agents_md.falls_through());
    assert_eq!(decide(&policies, "/md-only"), Outcome::Allow);
    Ok(())
}

#[tokio::test]
async fn c1_coding_agent_agents_md_falls_through_to_the_well_known_policy() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin)
        .serve("/AGENTS.md", Served::ok(CODING_AGENTS_MD))
        .serve("/.well-known/agents.md", Served::ok(AGENTS_MD));
    let policies = cache(&ca)?.policies(&origin_key(&origin)).await;
    assert_eq!(origin.hits("/.well-known/agents.md"), 1);
    assert_eq!(policies.agents_md.location(), Location::WellKnown);
    assert_eq!(decide(&policies, "/md-only"), Outcome::Deny);
    Ok(())
}

#[tokio::test]
async fn purge_forces_a_refetch() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin);
    let cache = cache(&ca)?;
    let key = origin_key(&origin);
    policies_refreshed(&cache, &key).await;
    policies_refreshed(&cache, &key).await;
    cache.purge(&key).await;
    policies_refreshed(&cache, &key).await;
    for path in FOUR {
        assert_eq!(origin.hits(path), 2, "{path}");
    }
    Ok(())
}

#[tokio::test]
async fn c2_agents_md_of_an_http_origin_is_never_fetched_over_http() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::http().await?;
    serve_all(&origin).serve("/.well-known/agents.md", Served::ok(AGENTS_MD));
    // AGENTS.md goes to https://127.0.0.1:443, where the test origin is not; bound the wait
    // in case something else listens there.
    let settings = CacheSettings { fetch_timeout: Duration::from_secs(2), ..CacheSettings::default() };
    let policies = PolicyCache::new(transport(&ca)?, settings, Arc::default()).policies(&origin_key(&origin)).await;
    assert_eq!(origin.hits("/AGENTS.md"), 0);
    assert_eq!(origin.hits("/.well-known/agents.md"), 0);
    assert!(policies.agents_md.falls_through(), "no policy from plain http");
    assert_eq!(origin.hits("/robots.txt"), 1, "the other files use the origin's scheme");
    assert_eq!(decide(&policies, "/private"), Outcome::Deny);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// One file: redirects, cap, timeout.

#[tokio::test]
async fn c3_https_to_http_redirect_is_refused() -> TestResult {
    let ca = test_ca()?;
    let plain = TestOrigin::http().await?;
    plain.serve("/AGENTS.md", Served::ok(AGENTS_MD));
    let origin = TestOrigin::https(&ca).await?;
    origin.serve("/AGENTS.md", Served::redirect(302, plain.url("/AGENTS.md")));
    let fetched = fetcher(&ca, Duration::from_secs(10))?
        .fetch(&origin_key(&origin), PolicyFile::of::<AgentsMd>(AgentsMd::PATH), None)
        .await;
    assert_eq!(fetched.outcome, FetchOutcome::Failed(FetchError::InsecureRedirect));
    assert_eq!(plain.hits("/AGENTS.md"), 0);
    Ok(())
}

#[tokio::test]
async fn five_redirects_are_followed_and_a_sixth_is_too_many() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::http().await?;
    // /robots.txt -> /hop/1 -> ... -> /hop/6, mixing relative and absolute Locations.
    origin.serve("/robots.txt", Served::redirect(301, "/hop/1"));
    for n in 1..6 {
        let location = if n % 2 == 0 { origin.url(&format!("/hop/{}", n + 1)) } else { format!("{}", n + 1) };
        origin.serve(&format!("/hop/{n}"), Served::redirect([301, 302, 303, 307, 308][n % 5], location));
    }
    origin.serve("/hop/6", Served::ok(ROBOTS));
    let fetcher = fetcher(&ca, Duration::from_secs(10))?;
    let fetched = fetcher.fetch(&origin_key(&origin), PolicyFile::of::<Robots>(Robots::PATH), None).await;
    assert_eq!(fetched.outcome, FetchOutcome::Failed(FetchError::TooManyRedirects));
    assert_eq!(origin.hits("/hop/6"), 0);

    origin.serve("/hop/5", Served::ok(ROBOTS));
    let fetched = fetcher.fetch(&origin_key(&origin), PolicyFile::of::<Robots>(Robots::PATH), None).await;
    let FetchOutcome::Response { status, body, .. } = fetched.outcome else { panic!("{:?}", fetched.outcome) };
    assert_eq!((status, body.as_slice()), (200, ROBOTS.as_bytes()));
    Ok(())
}

#[tokio::test]
async fn body_over_the_cap_is_cut_at_cap_plus_one_without_reading_on() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::http().await?;
    origin.serve("/robots.txt", Served::ok("").endless());
    // The body never ends: the fetch only returns because it stops reading at the cap.
    let fetched = fetcher(&ca, Duration::from_secs(30))?
        .fetch(&origin_key(&origin), PolicyFile::of::<Robots>(Robots::PATH), None)
        .await;
    let FetchOutcome::Response { status, body, over_cap, .. } = fetched.outcome else {
        panic!("{:?}", fetched.outcome)
    };
    assert_eq!(status, 200);
    assert!(over_cap);
    assert_eq!(body.len(), crate::policy::robots::MAX_BYTES + 1);
    Ok(())
}

#[tokio::test]
async fn origin_that_never_answers_times_out() -> TestResult {
    let ca = test_ca()?;
    let origin = TestOrigin::http().await?;
    // Held and never released: the origin never answers.
    origin.serve("/agents.txt", Served::ok("").held());
    let fetched = fetcher(&ca, Duration::from_millis(300))?
        .fetch(&origin_key(&origin), PolicyFile::of::<AgentsTxt>(AgentsTxt::PATH), None)
        .await;
    assert_eq!(fetched.outcome, FetchOutcome::Failed(FetchError::Timeout));
    assert_eq!(fetched.ttl, Duration::from_secs(60), "a failure is retried after the floor");
    Ok(())
}

#[test]
fn policies_future_is_send_so_the_proxy_can_await_it_in_spawned_tasks() -> TestResult {
    fn assert_send<T: Send>(_: &T) {}
    let ca = test_ca()?;
    let cache = cache(&ca)?;
    let origin = Origin::from_uri(&"https://example.com/".parse()?)?;
    assert_send(&cache.policies(&origin));
    assert_send(&cache.purge(&origin));
    Ok(())
}

/// SEMANTICS U5: tdmrep.json, fetched only on demand, is not asked for by a load that does
/// not want it; a request that wants it waits for a load fetching it alone (the other files
/// carried over while fresh); from then on it is revalidated like any other file.
#[tokio::test]
async fn tdmrep_json_is_fetched_only_when_wanted_then_revalidated_like_the_others() -> TestResult {
    use crate::policy::usage::tdmrep::TdmRepState;
    const TDMREP: &str = r#"[{"location": "/books/*", "tdm-reservation": 1}]"#;
    let path = "/.well-known/tdmrep.json";
    let ca = test_ca()?;
    let origin = TestOrigin::https(&ca).await?;
    serve_all(&origin).serve(path, Served::ok(TDMREP).with("etag", "\"t1\"").max_age(120));
    let cache = cache(&ca)?;
    let key = origin_key(&origin);

    let unwanted = cache.policies(&key).await;
    assert!(matches!(unwanted.tdmrep, TdmRepState::Unfetched), "{:?}", unwanted.tdmrep);
    assert_eq!(origin.hits(path), 0, "not asked for without a request that needs it");
    let wanted = cache.policies_for(&key, true).await;
    assert!(matches!(wanted.tdmrep, TdmRepState::Fetched { file: Some(_), .. }), "{:?}", wanted.tdmrep);
    assert_eq!(origin.hits(path), 1);
    for other in FOUR.iter().filter(|p| **p != "/AGENTS.md") {
        assert_eq!(origin.hits(other), 1, "{other} carried over, not fetched again");
    }
    cache.policies_for(&key, true).await;
    cache.policies(&key).await;
    assert_eq!(origin.hits(path), 1, "cached");

    advance(Duration::from_secs(121)).await;
    let refreshed = policies_refreshed(&cache, &key).await;
    assert_eq!((origin.hits(path), origin.conditional(path), origin.not_modified(path)), (2, 1, 1), "revalidated");
    assert!(matches!(refreshed.tdmrep, TdmRepState::Fetched { file: Some(_), .. }), "kept in force");
    Ok(())
}
