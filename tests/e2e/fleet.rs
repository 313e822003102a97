//! Policy files shared by a fleet through Redis (`[cache] store = "redis"`,
//! docs/scale-out.md): two real `agentgate` processes sharing one real `redis-server` fetch
//! each origin's policy files once between them and decide alike, revalidate a stale copy
//! once for the fleet, keep serving (each fetching for itself, counted) while Redis is
//! frozen or gone and share again once it is back, ignore a corrupt, oversized or
//! wrong-typed value planted in Redis, and wait for another replica's fetch (its lease) only
//! up to `[cache.redis] wait`. `DELETE /policies` deletes the shared copy, and an agent
//! cannot reach the store through the proxy (`network.own_address`).
//!
//! Ignored by a plain `cargo test` ("needs redis-server"); `scripts/test.sh` runs them.

use std::path::Path;
use std::time::Duration;

use futures_util::future::join_all;
use tempfile::TempDir;

use crate::admin::sample;
use crate::redis::RedisServer;
use crate::reload::base_config;
use crate::support::TestResult;
use crate::support::binary::Agentgate;
use crate::support::origin::{Origin, Served, Site};
use crate::support::pki::TestCa;
use crate::support::wait::eventually;

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// One replica: the real binary, its admin port and its directory.
struct Replica {
    proxy: Agentgate,
    client: reqwest::Client,
    admin: u16,
    _dir: TempDir,
}

/// A free loopback port.
fn free_port() -> TestResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The replica's config: the test base with the admin API on `admin` and the policy cache
/// shared through the Redis at `url`, plus `extra` lines of `[cache.redis]`.
fn config(dir: &Path, ca: &TestCa, admin: u16, url: &str, extra: &str) -> String {
    let base =
        base_config(dir, ca).replace("[admin]\nlisten = \"off\"", &format!("[admin]\nlisten = \"127.0.0.1:{admin}\""));
    format!("{base}[cache]\nstore = \"redis\"\n[cache.redis]\nurl = {url:?}\n{extra}")
}

impl Replica {
    async fn start(ca: &TestCa, url: &str, extra: &str) -> TestResult<Replica> {
        agentgate::tls::install_default_provider();
        let dir = tempfile::tempdir()?;
        let admin = free_port()?;
        let path = dir.path().join("agentgate.toml");
        std::fs::write(&path, config(dir.path(), ca, admin, url, extra))?;
        let proxy = Agentgate::start(dir.path(), &path, "agentgate=info").await?;
        let client = proxy.client()?;
        Ok(Replica { proxy, client, admin, _dir: dir })
    }

    /// The status of `GET url` through this replica.
    async fn get(&self, url: &str) -> TestResult<u16> {
        Ok(self.client.get(url).send().await?.status().as_u16())
    }

    /// `GET <path>` on the admin API, as text.
    async fn admin(&self, path: &str) -> TestResult<String> {
        let client = reqwest::Client::builder().no_proxy().build()?;
        Ok(client.get(format!("http://127.0.0.1:{}{path}", self.admin)).send().await?.text().await?)
    }

    /// `agentgate_policy_store_total{result}` (0 when not yet counted).
    async fn store_count(&self, result: &str) -> TestResult<f64> {
        let text = self.admin("/metrics").await?;
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))?;
        Ok(sample(&scrape, "agentgate_policy_store_total", &[("result", result)]).unwrap_or(0.0))
    }

    /// `DELETE /policies?origin=…` on the admin API: purges `origin`'s copy here and the
    /// shared one.
    async fn purge(&self, origin: &Origin) -> TestResult {
        let client = reqwest::Client::builder().no_proxy().build()?;
        let url = format!("http://127.0.0.1:{}/policies?origin={}", self.admin, origin_key(origin));
        let status = client.delete(url).send().await?.status();
        assert_eq!(status, 200, "DELETE /policies");
        Ok(())
    }

    /// Where `origin`'s robots.txt in force came from (`/policies`' `from`).
    async fn robots_from(&self, origin: &Origin) -> TestResult<String> {
        let key = origin_key(origin);
        let view: serde_json::Value = serde_json::from_str(&self.admin(&format!("/policies?origin={key}")).await?)?;
        Ok(view["files"]["robots.txt"]["from"].as_str().unwrap_or("").to_owned())
    }
}

/// `origin` as the cache names it (`/policies?origin=`, the shared store's keys).
fn origin_key(origin: &Origin) -> String {
    origin.url("/").trim_end_matches('/').to_owned()
}

/// The shared store's key of `origin`'s copy (the default `key_prefix`).
fn shared_key(origin: &Origin) -> String {
    format!("agentgate:policies:{}", origin_key(origin))
}

/// Makes `origin`'s copy in Redis what `by` of waiting would make it: every file's
/// freshness moved back by `by`, its Redis TTL kept. `replica`, which fetched it, purges its
/// own copy first (which deletes the shared one too), so that no replica holds a fresher one.
async fn age_shared_copy(
    connection: &mut redis::aio::MultiplexedConnection,
    replica: &Replica,
    origin: &Origin,
    by: Duration,
) -> TestResult {
    let key = shared_key(origin);
    let stored = eventually("the fetched copy to be shared", async || {
        let stored: Option<Vec<u8>> = redis::cmd("GET").arg(&key).query_async(connection).await?;
        stored.ok_or_else(|| format!("no value at {key}").into())
    })
    .await?;
    let ttl_ms: i64 = redis::cmd("PTTL").arg(&key).query_async(connection).await?;
    assert!(ttl_ms > 0, "the shared copy has a TTL: {ttl_ms}");
    let mut value: serde_json::Value = serde_json::from_slice(&stored)?;
    let by_ms = u64::try_from(by.as_millis())?;
    for file in value["files"].as_array_mut().ok_or("the shared copy lists its files")? {
        for field in ["fresh_until_ms", "stale_since_ms"] {
            let at = file[field].as_u64().ok_or_else(|| format!("{field} in {file}"))?;
            file[field] = at.checked_sub(by_ms).ok_or("a time before the epoch")?.into();
        }
    }
    replica.purge(origin).await?;
    redis::cmd("SET")
        .arg(&key)
        .arg(serde_json::to_vec(&value)?)
        .arg("PX")
        .arg(ttl_ms)
        .query_async::<()>(connection)
        .await?;
    Ok(())
}

/// A site whose robots.txt disallows `/private`, with `headers`.
fn site(headers: &[(&str, &str)]) -> Site {
    Site::new().serve("/robots.txt", 200, headers, ROBOTS)
}

/// The origin's requests for robots.txt, agents.txt and automation-preferences.txt (an http
/// origin's AGENTS.md is fetched from port 443 of its host, never from it: SEMANTICS C2).
fn fetches(origin: &Origin) -> [usize; 3] {
    ["/robots.txt", "/agents.txt", "/automation-preferences.txt"].map(|path| origin.hits(path))
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn two_replicas_fetch_each_policy_file_once_for_fifty_requests_and_decide_alike() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site(&[("cache-control", "max-age=3600")])).await?;
    let replicas = [Replica::start(&ca, &redis.url(), "").await?, Replica::start(&ca, &redis.url(), "").await?];
    let answers = join_all((0..50).map(|i| {
        let path = if i % 2 == 0 { format!("/page/{i}") } else { format!("/private/{i}") };
        let replica = &replicas[(i / 2) % 2];
        let url = origin.url(&path);
        async move { (i, replica.get(&url).await) }
    }))
    .await;
    for (i, status) in answers {
        assert_eq!(status?, if i % 2 == 0 { 200 } else { 403 }, "request {i}");
    }
    assert_eq!(fetches(&origin), [1, 1, 1], "one fetch of each file for the fleet");
    for replica in &replicas {
        assert_eq!(replica.get(&origin.url("/private/x")).await?, 403, "both decide alike");
    }
    let mut from = [replicas[0].robots_from(&origin).await?, replicas[1].robots_from(&origin).await?];
    from.sort();
    assert_eq!(from, ["origin", "shared_store"], "one fetched, the other read the shared copy");
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_stale_copy_is_revalidated_once_for_the_fleet_and_a_changed_file_reaches_both() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let headers = [("cache-control", "max-age=60"), ("etag", "\"r1\"")];
    let same = Origin::http_site(site(&headers)).await?;
    let changed = Origin::http_site(site(&headers)).await?;
    let replicas = [Replica::start(&ca, &redis.url(), "").await?, Replica::start(&ca, &redis.url(), "").await?];
    let mut connection = redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?;
    // The copies' lifetime is the 60 s floor (C5), which stays in force: what goes stale is
    // the copy in Redis, aged by 61 s, with no replica holding a fresher one of its own.
    for origin in [&same, &changed] {
        assert_eq!(replicas[0].get(&origin.url("/private/a")).await?, 403);
        age_shared_copy(&mut connection, &replicas[0], origin, Duration::from_secs(61)).await?;
    }
    assert_eq!((same.hits("/robots.txt"), changed.hits("/robots.txt")), (1, 1));
    changed.serve("/robots.txt", Served::ok("User-agent: *\nDisallow: /other\n").with("etag", "\"r2\"").max_age(60));
    for replica in &replicas {
        for origin in [&same, &changed] {
            // The stale copy is served while the fleet's one refresh runs.
            assert_eq!(replica.get(&origin.url("/page")).await?, 200);
        }
    }
    for replica in &replicas {
        eventually("each replica to decide by the changed robots.txt", async || {
            let (private, other) =
                (replica.get(&changed.url("/private/a")).await?, replica.get(&changed.url("/other/a")).await?);
            if (private, other) == (200, 403) { Ok(()) } else { Err(format!("{private} {other}").into()) }
        })
        .await?;
        eventually("the unchanged copy to be renewed", async || match replica.robots_from(&same).await {
            Ok(_) if same.not_modified("/robots.txt") == 1 => Ok(()),
            _ => Err("no 304 yet".into()),
        })
        .await?;
        assert_eq!(replica.get(&same.url("/private/a")).await?, 403, "the renewed copy decides");
    }
    assert_eq!((same.hits("/robots.txt"), same.conditional("/robots.txt")), (2, 1), "one revalidation for two");
    assert_eq!((changed.hits("/robots.txt"), changed.conditional("/robots.txt")), (2, 1));
    assert_eq!(changed.not_modified("/robots.txt"), 0, "a new ETag: fetched whole, once");
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn with_redis_frozen_then_killed_replicas_fetch_for_themselves_and_sharing_resumes() -> TestResult {
    let redis = RedisServer::start().await?;
    let port = redis.port;
    let ca = TestCa::new("origin CA")?;
    let replicas = [Replica::start(&ca, &redis.url(), "").await?, Replica::start(&ca, &redis.url(), "").await?];
    let through_both = async |origin: &Origin| -> TestResult {
        for replica in &replicas {
            assert_eq!(replica.get(&origin.url("/private/a")).await?, 403, "still deciding");
            assert_eq!(replica.get(&origin.url("/page")).await?, 200, "still serving");
        }
        Ok(())
    };
    let shared = Origin::http_site(site(&[])).await?;
    through_both(&shared).await?;
    assert_eq!(shared.hits("/robots.txt"), 1, "shared while Redis answers");

    redis.pause(true).await?;
    let frozen = Origin::http_site(site(&[])).await?;
    through_both(&frozen).await?;
    assert_eq!(frozen.hits("/robots.txt"), 2, "each replica fetched for itself");
    for replica in &replicas {
        assert!(replica.store_count("failure").await? >= 1.0, "the fallback is counted");
    }
    replicas[0].proxy.logged(&["the shared policy store did not answer"], 1).await?;

    redis.stop().await?;
    let gone = Origin::http_site(site(&[])).await?;
    through_both(&gone).await?;
    assert_eq!(gone.hits("/robots.txt"), 2, "each replica fetched for itself");

    let _redis = RedisServer::start_on(port).await?;
    // The replicas reconnect on their next calls; a new origin each look, until one is
    // fetched once for both.
    eventually("sharing to resume", async || {
        let origin = Origin::http_site(site(&[])).await?;
        through_both(&origin).await?;
        match origin.hits("/robots.txt") {
            1 => Ok(()),
            n => Err(format!("{n} fetches").into()),
        }
    })
    .await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn corrupt_oversized_or_wrong_typed_values_planted_in_redis_are_ignored_and_refetched() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let replica = Replica::start(&ca, &redis.url(), "").await?;
    let mut connection = redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?;
    let origins =
        [Origin::http_site(site(&[])).await?, Origin::http_site(site(&[])).await?, Origin::http_site(site(&[])).await?];
    let key = shared_key;
    let corrupt = br#"{"version":1,"origin":"x","files":[{"#.to_vec();
    let oversized = vec![b'{'; 16 * 1024 * 1024];
    redis::cmd("SET").arg(key(&origins[0])).arg(corrupt).query_async::<()>(&mut connection).await?;
    redis::cmd("SET").arg(key(&origins[1])).arg(oversized).query_async::<()>(&mut connection).await?;
    redis::cmd("LPUSH").arg(key(&origins[2])).arg("policy").query_async::<()>(&mut connection).await?;
    for origin in &origins {
        assert_eq!(replica.get(&origin.url("/private/a")).await?, 403, "decided by the origin's own file");
        assert_eq!(origin.hits("/robots.txt"), 1, "refetched");
    }
    assert!(replica.store_count("corrupt").await? >= 3.0, "each planted value counted");
    // The fetched copy replaced the planted value.
    let stored: Vec<u8> = redis::cmd("GET").arg(key(&origins[0])).query_async(&mut connection).await?;
    assert!(stored.starts_with(br#"{"version":1,"#), "{:?}", String::from_utf8_lossy(&stored[..40.min(stored.len())]));
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn the_other_replica_waits_for_the_lease_up_to_the_bound_then_fetches_itself() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site(&[])).await?;
    origin.serve("/robots.txt", Served::ok(ROBOTS).held());
    let wait = "wait = \"1s\"\n";
    let replicas = [Replica::start(&ca, &redis.url(), wait).await?, Replica::start(&ca, &redis.url(), wait).await?];
    let url = origin.url("/private/a");
    let first = replicas[0].get(&url);
    let second = async {
        // Replica 0 holds the lease: its fetch of robots.txt is held at the origin.
        origin.held(1).await;
        let answer = replicas[1].get(&url);
        let released = async {
            // Replica 1 waited out the lease and fetched itself, while replica 0's fetch is
            // still held: two requests for robots.txt in flight at once.
            origin.held(2).await;
            origin.release_all();
        };
        let (answer, ()) = tokio::join!(answer, released);
        answer
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!((first?, second?), (403, 403));
    assert_eq!(origin.hits("/robots.txt"), 2);
    assert_eq!(replicas[1].store_count("wait_timeout").await?, 1.0, "the wait ran out once");
    assert_eq!(replicas[0].store_count("wait_timeout").await?, 0.0);
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn an_agent_cannot_reach_the_shared_store_through_the_proxy() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    // Loopback is allowed for the test's origins; the store's address is refused all the same.
    let replica = Replica::start(&ca, &redis.url(), "").await?;
    redis.is_refused_through(&replica.client).await
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn delete_policies_purges_the_shared_copy_and_the_next_request_fetches_again() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site(&[("cache-control", "max-age=3600")])).await?;
    let replica = Replica::start(&ca, &redis.url(), "").await?;
    assert_eq!(replica.get(&origin.url("/private/a")).await?, 403);
    let mut connection = redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?;
    let key = shared_key(&origin);
    let exists = async |connection: &mut redis::aio::MultiplexedConnection| -> TestResult<bool> {
        Ok(redis::cmd("EXISTS").arg(&key).query_async::<i64>(connection).await? == 1)
    };
    assert!(exists(&mut connection).await?, "the copy is shared");
    replica.purge(&origin).await?;
    assert!(!exists(&mut connection).await?, "DELETE /policies deleted the shared copy");
    assert_eq!(replica.get(&origin.url("/private/a")).await?, 403);
    assert_eq!(origin.hits("/robots.txt"), 2, "fetched again, neither copy kept");
    Ok(())
}
