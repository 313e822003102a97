//! Approvals shared by a fleet through Redis (`[approvals] store = "redis"`,
//! docs/approvals.md): two real `agentgate` processes and one real `redis-server`. A request
//! held on one replica is listed by the other's admin API, answered there, and forwarded or
//! refused by the replica holding it; a host granted there admits the agent's next request on
//! the other replica without a hold. An answer planted in Redis that is not an approve or a
//! deny, or for an id nobody holds, does nothing, and an agent cannot reach the store through
//! the proxy. With Redis stopped, each replica holds and answers on its own, counts the
//! failures and says so.
//!
//! Ignored by a plain `cargo test` ("needs redis-server"); `scripts/test.sh` runs them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::admin::sample;
use crate::redis::RedisServer;
use crate::reload::base_config;
use crate::support::TestResult;
use crate::support::binary::Agentgate;
use crate::support::log;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::wait::eventually;

/// `printf %s alice-secret | sha256sum`.
const ALICE_SHA256: &str = "0c848abb03307b06cf70cd4e29c157dc81af5e94ab3eb1d0c59a120269572376";

/// One replica: the real binary, its admin port, its decision log and its directory.
struct Replica {
    proxy: Agentgate,
    admin: u16,
    log: PathBuf,
    _dir: TempDir,
}

/// A free loopback port.
fn free_port() -> TestResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The replica `instance`'s config: the test base with the admin API on `admin`, alice's
/// admin token, agents `sbx` and `peer` holding every host but `site.test` for a human, and
/// approvals shared through the Redis at `url`.
fn config(dir: &Path, ca: &TestCa, instance: &str, admin: u16, url: &str) -> String {
    let base = base_config(dir, ca).replace(
        "[admin]\nlisten = \"off\"",
        &format!(
            "[admin]\nlisten = \"127.0.0.1:{admin}\"\n[[admin.tokens]]\nname = \"alice\"\nsha256 = \"{ALICE_SHA256}\""
        ),
    );
    let agents: String = ["sbx", "peer"]
        .iter()
        .map(|id| {
            format!("[[agents]]\nid = \"{id}\"\ntoken = \"{id}-secret\"\nallow_hosts = [\"site.test\"]\nunlisted = \"hold\"\n")
        })
        .collect();
    format!(
        "instance = \"{instance}\"\n{base}[approvals]\nstore = \"redis\"\ntimeout = \"30s\"\n\
         [approvals.redis]\nurl = {url:?}\ntimeout = \"200ms\"\n{agents}"
    )
}

impl Replica {
    async fn start(ca: &TestCa, instance: &str, url: &str) -> TestResult<Replica> {
        agentgate::tls::install_default_provider();
        let dir = tempfile::tempdir()?;
        let admin = free_port()?;
        let path = dir.path().join("agentgate.toml");
        std::fs::write(&path, config(dir.path(), ca, instance, admin, url))?;
        let proxy = Agentgate::start(dir.path(), &path, "agentgate=info").await?;
        Ok(Replica { proxy, admin, log: dir.path().join("decisions.jsonl"), _dir: dir })
    }

    /// A client of agent `id` through this replica.
    fn agent(&self, id: &str) -> TestResult<reqwest::Client> {
        self.proxy.client_as(id, &format!("{id}-secret"))
    }

    fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.admin)
    }

    /// `GET /approvals` with alice's token until it lists `count` held requests (bounded).
    async fn pending(&self, count: usize) -> TestResult<Vec<Value>> {
        let client = reqwest::Client::builder().no_proxy().build()?;
        eventually(&format!("GET /approvals to list {count} held"), async || {
            let response = client.get(self.admin_url("/approvals")).bearer_auth("alice-secret").send().await?;
            let body: Value = serde_json::from_str(&response.text().await?)?;
            let listed = body["pending"].as_array().ok_or("`pending` is an array")?;
            if listed.len() == count { Ok(listed.clone()) } else { Err(format!("it lists {body}").into()) }
        })
        .await
    }

    /// `POST /approvals/{id}` with alice's token and `body`: status and answer.
    async fn answer(&self, id: &str, body: Value) -> TestResult<(u16, Value)> {
        let client = reqwest::Client::builder().no_proxy().build()?;
        let response = client
            .post(self.admin_url(&format!("/approvals/{id}")))
            .bearer_auth("alice-secret")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?;
        let status = response.status().as_u16();
        Ok((status, serde_json::from_str(&response.text().await?)?))
    }

    /// The sample of metric `name` with `labels` on `/metrics` (0 when not yet counted).
    async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> TestResult<f64> {
        let client = reqwest::Client::builder().no_proxy().build()?;
        let text = client.get(self.admin_url("/metrics")).bearer_auth("alice-secret").send().await?.text().await?;
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))?;
        Ok(sample(&scrape, name, labels).unwrap_or(0.0))
    }

    /// The record of `record_id` in this replica's decision log, once it is written (bounded).
    async fn record(&self, record_id: &str) -> TestResult<Value> {
        eventually(&format!("the record {record_id}"), async || {
            let records = log::read(&self.log)?;
            let found = records.into_iter().find(|r| r["event.id"] == record_id);
            found.ok_or_else(|| format!("no record {record_id} yet").into())
        })
        .await
    }
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_request_held_on_one_replica_is_answered_on_the_other_and_its_grant_admits_the_agent_there() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let (a, b) =
        (Replica::start(&ca, "replica-a", &redis.url()).await?, Replica::start(&ca, "replica-b", &redis.url()).await?);
    let url = origin.url("/page");

    // Held on A, listed on B as A's.
    let waiting = tokio::spawn(a.agent("sbx")?.get(&url).send());
    let listed = b.pending(1).await?;
    let held = &listed[0];
    assert_eq!(
        (&held["agent"], &held["new_host"], &held["replica"]),
        (&json!("sbx"), &json!("127.0.0.1"), &json!("replica-a"))
    );
    assert_eq!(held["method"], "GET");
    assert!(held["url"].as_str().is_some_and(|u| u.ends_with("/page")), "{held}");
    assert_eq!(a.pending(1).await?[0]["id"], held["id"], "the same hold, listed by both");
    let id = held["id"].as_str().ok_or("an id")?;
    let record_id = held["record_id"].as_str().ok_or("a record id")?.to_owned();
    assert_eq!(origin.hits("/page"), 0, "nothing forwarded while held");

    // Planted in Redis: a "remembered" answer for the hold, an approval for an id nobody holds.
    let mut connection = redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?;
    let forged = r#"{"decision":"remembered","by":"mallory","reason":null,"at_ms":1,"remember":null,"until_ms":null,"replica":null}"#;
    let unknown = r#"{"decision":"approved","by":"mallory","reason":null,"at_ms":1,"remember":null,"until_ms":null,"replica":null}"#;
    redis::cmd("SET")
        .arg(format!("agentgate:approvals:decision:{id}"))
        .arg(forged)
        .query_async::<()>(&mut connection)
        .await?;
    redis::cmd("SET")
        .arg("agentgate:approvals:decision:0123456789abcdef")
        .arg(unknown)
        .query_async::<()>(&mut connection)
        .await?;
    eventually("A to read the planted answer", async || {
        let left: bool =
            redis::cmd("EXISTS").arg(format!("agentgate:approvals:decision:{id}")).query_async(&mut connection).await?;
        if left { Err("not read yet".into()) } else { Ok(()) }
    })
    .await?;
    assert_eq!(a.pending(1).await?[0]["id"], held["id"], "an answer that is not approve or deny is ignored");
    assert!(!waiting.is_finished(), "the client still waits");
    let unread: bool =
        redis::cmd("EXISTS").arg("agentgate:approvals:decision:0123456789abcdef").query_async(&mut connection).await?;
    assert!(unread, "an answer for an id nobody holds is never read");

    // Approved through B with a grant: A forwards it, the client gets the origin's answer.
    let grant = json!({"decision": "approve", "remember": "host-for-agent", "ttl": "10m"});
    let (status, body) = b.answer(id, grant).await?;
    assert_eq!((status, &body["by"]), (200, &json!("alice")), "{body}");
    let answered = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    assert_eq!(answered.status(), 200);
    assert_eq!(origin.hits("/page"), 1);
    let (status, _) = b.answer(id, json!({"decision": "deny"})).await?;
    assert_eq!(status, 404, "an id is answered once, fleet-wide");
    let record = a.record(&record_id).await?;
    assert_eq!(record["agentgate.approval.decision"], "approved", "{record:#}");
    assert_eq!(record["agentgate.approval.by"], "alice");
    assert_eq!(record["agentgate.approval.replica"], "replica-b", "which replica took the answer");

    // The grant admits the agent's next request on B at once, with no hold.
    let again = tokio::time::timeout(Duration::from_secs(5), b.agent("sbx")?.get(&url).send()).await??;
    assert_eq!(again.status(), 200);
    assert_eq!(origin.hits("/page"), 2);
    let granted = eventually("B's record of the granted request", async || {
        let records = log::read(&b.log)?;
        let found = records.into_iter().find(|r| {
            r["agentgate.reasons"]
                .as_array()
                .is_some_and(|reasons| reasons.iter().any(|reason| reason["code"] == "operator.host_approved"))
        });
        found.ok_or_else(|| "not yet".into())
    })
    .await?;
    assert_eq!(
        (&granted["event.action"], &granted["agentgate.agent"]),
        (&json!("allow"), &json!("sbx")),
        "{granted:#}"
    );
    assert!(granted.get("agentgate.approval.decision").is_none(), "admitted by the grant, not held: {granted:#}");
    assert!(b.pending(0).await?.is_empty());

    // Another agent is still held; denied through B, A refuses it.
    let refused = tokio::spawn(a.agent("peer")?.get(&url).send());
    let listed = b.pending(1).await?;
    assert_eq!(listed[0]["agent"], "peer");
    let id = listed[0]["id"].as_str().ok_or("an id")?;
    let (status, _) = b.answer(id, json!({"decision": "deny", "reason": "not this one"})).await?;
    assert_eq!(status, 200);
    let answered = std::time::Instant::now();
    let refused = tokio::time::timeout(Duration::from_secs(10), refused).await???;
    assert_eq!(refused.status(), 403);
    let took = answered.elapsed();
    assert!(took < Duration::from_secs(1), "the answer reaches the holding replica within a second: {took:?}");
    let header = refused.headers().get("agentgate-decision").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(header.contains("approval=denied; by=alice"), "{header}");
    assert_eq!(origin.hits("/page"), 2, "a denied request never reaches the origin");
    assert!(a.pending(0).await?.is_empty() && b.pending(0).await?.is_empty());

    // Answered on the replica holding it: taken off the fleet's list, so B cannot answer too.
    let approved_here = tokio::spawn(a.agent("peer")?.get(&url).send());
    let id = b.pending(1).await?[0]["id"].as_str().ok_or("an id")?.to_owned();
    let (status, _) = a.answer(&id, json!({"decision": "approve"})).await?;
    assert_eq!(status, 200);
    assert_eq!(tokio::time::timeout(Duration::from_secs(10), approved_here).await???.status(), 200);
    assert_eq!(origin.hits("/page"), 3);
    assert!(b.pending(0).await?.is_empty());
    assert_eq!(b.answer(&id, json!({"decision": "deny"})).await?.0, 404, "answered once, fleet-wide");
    assert_eq!(a.metric("agentgate_approvals_store_errors_total", &[]).await?, 0.0);
    // The store that answers held requests is never an agent's destination, nor held for one.
    redis.is_refused_through(&a.agent("sbx")?).await?;
    assert!(a.pending(0).await?.is_empty());
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn with_redis_stopped_each_replica_holds_and_answers_on_its_own_and_says_so() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let (a, b) =
        (Replica::start(&ca, "replica-a", &redis.url()).await?, Replica::start(&ca, "replica-b", &redis.url()).await?);
    redis.stop().await?;

    let waiting = tokio::spawn(a.agent("sbx")?.get(origin.url("/page")).send());
    let listed = a.pending(1).await?;
    assert_eq!(listed[0]["replica"], "replica-a");
    assert!(b.pending(0).await?.is_empty(), "B cannot see A's hold without Redis");
    let id = listed[0]["id"].as_str().ok_or("an id")?;
    let (status, body) = b.answer(id, json!({"decision": "approve"})).await?;
    assert_eq!(status, 503, "B cannot reach the store to answer A's hold: {body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("answer it on that replica")), "{body}");
    let (status, body) = a.answer(id, json!({"decision": "approve"})).await?;
    assert_eq!(status, 200, "{body}");
    let answered = tokio::time::timeout(Duration::from_secs(10), waiting).await???;
    assert_eq!(answered.status(), 200, "answered on the replica holding it");
    assert_eq!(origin.hits("/page"), 1);
    assert!(a.metric("agentgate_approvals_store_errors_total", &[]).await? >= 1.0, "the failures are counted");
    a.proxy.logged(&["the fleet's approvals store did not answer"], 1).await?;
    Ok(())
}
