//! The fleet's approvals store (`[approvals] store = "redis"`): what every replica of a fleet
//! shares through one Redis so a human answers each held request once, on any replica.
//!
//! Owns the Redis side. Under `<key_prefix>approvals:`:
//! - `pending`, a hash of the requests held now, each field a hold's id and its value the
//!   summary the admin API lists ([`Listed`]: the replica holding it, agent, method, redacted
//!   URL, rule, expiry); written by the holding replica, removed when the hold ends or is
//!   answered. An entry past its expiry (a replica that died holding it) is never listed.
//! - `decision:<id>`, an answer taken on another replica, for the holding replica to read
//!   (its [`Fleet::take_decisions`] poll); written only while `pending` lists the id, in one
//!   script with the removal from `pending`, so an id is answered once, fleet-wide. The holder
//!   reads the decisions of its own holds only: one planted for an unknown id is never read.
//! - `grant:<sha256>`, a remembered approval (`path-for-agent-15m`, `host-for-agent`) for an
//!   agent, living in Redis as long as it lasts, so another replica follows it.
//!
//! Every call is bounded by `[approvals.redis] timeout`; a failure (error, timeout, refused
//! connection) is counted in `/metrics` (`agentgate_approvals_store_errors_total`), logged at
//! most once a second, and leaves the replica holding and deciding on its own. A value that is
//! not what this module writes (wrong shape, a decision other than approve or deny, a name
//! with characters a header cannot carry) is ignored.
//!
//! Never: holds a request or hands it an answer (`super::queue` does), speaks HTTP, or logs
//! the URL of the connection (it may hold a password).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::ConnectionManager;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Approval, ApprovalDecision, HOST_GRANT_MAX, Remember};
use crate::error_chain::error_chain;
use crate::metrics::Metrics;
use crate::redis_connection::{ConnectError, Connection, FailureLog};

/// The most pending entries one listing reads (one `HSCAN` page): the fleet's queues are each
/// bounded by `max_pending`, and a planted huge hash is never read whole.
const MAX_LISTED: usize = 1000;
/// The longest text field read back from Redis (a URL, a rule, a reason).
const MAX_TEXT: usize = 8 * 1024;

/// Takes an answer for a held request another replica holds: only while it is pending, and
/// out of `pending` in the same step. KEYS: pending, decision; ARGV: id, decision, ttl ms.
const DECIDE: &str = r"
local held = redis.call('HGET', KEYS[1], ARGV[1])
if not held then return false end
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return held
";

/// Takes a hold of this replica off the list for an answer given here: 0 when another
/// replica's answer took it first (its answer is waiting), else 1 (also when Redis lost the
/// entry, a restart without persistence: the hold is still this replica's to answer).
/// KEYS: pending, decision; ARGV: id.
const CLAIM: &str = r"
if redis.call('HDEL', KEYS[1], ARGV[1]) == 1 then return 1 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
return 1
";

/// A held request as the fleet lists it (the admin API's `GET /approvals` entry, with its
/// expiry as a time rather than seconds left).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listed {
    /// The id to answer it by.
    pub id: String,
    /// The replica holding it (its `instance` name).
    pub replica: String,
    /// The id of its decision record on the holding replica.
    pub record_id: String,
    /// The method as sent.
    pub method: String,
    /// The URL, redacted as in the decision log.
    pub url: String,
    /// The agent id.
    pub agent: String,
    /// `scheme://host:port`.
    pub origin: String,
    /// The rule that asked for a human.
    pub rule: Option<ListedRule>,
    /// The host held for the agent's `allow_hosts`, if that is why it is held.
    pub new_host: Option<String>,
    /// When it was held (ms since the epoch).
    pub held_since_ms: u64,
    /// When the holding replica's timeout ends it (ms since the epoch).
    pub expires_at_ms: u64,
}

/// The rule that asked for a human, as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListedRule {
    /// The policy file or config table.
    pub file: String,
    /// Its line, when known.
    pub line: Option<u32>,
    /// The rule as written.
    pub text: String,
}

impl Listed {
    /// True when every text is within bounds (a value read back from Redis).
    fn is_sane(&self) -> bool {
        let texts = [&self.id, &self.replica, &self.record_id, &self.method, &self.url, &self.agent, &self.origin];
        texts.iter().all(|t| t.len() <= MAX_TEXT)
            && self.rule.as_ref().is_none_or(|r| r.file.len() <= MAX_TEXT && r.text.len() <= MAX_TEXT)
            && self.new_host.as_ref().is_none_or(|h| h.len() <= MAX_TEXT)
    }
}

/// An approval as it travels through Redis.
#[derive(Debug, Serialize, Deserialize)]
struct Wire {
    decision: String,
    by: Option<String>,
    reason: Option<String>,
    at_ms: u64,
    remember: Option<String>,
    until_ms: Option<u64>,
    replica: Option<String>,
}

/// A name a header may carry: letters, digits and `-_.@`, at most 64 of them.
fn is_name(text: &str) -> bool {
    !text.is_empty() && text.len() <= 64 && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
}

/// Milliseconds since the epoch.
pub(crate) fn epoch_ms(at: SystemTime) -> u64 {
    u64::try_from(at.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis()).unwrap_or(u64::MAX)
}

fn from_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

impl Wire {
    fn of(approval: &Approval) -> Wire {
        Wire {
            decision: approval.decision.as_str().to_owned(),
            by: approval.by.clone(),
            reason: approval.reason.clone(),
            at_ms: epoch_ms(approval.at),
            remember: approval.remember.map(|r| r.as_str().to_owned()),
            until_ms: approval.until.map(epoch_ms),
            replica: approval.replica.clone(),
        }
    }

    /// The approval, if it is one this module writes: approved or denied by a named token.
    fn approval(self) -> Option<Approval> {
        let decision = match self.decision.as_str() {
            "approved" => ApprovalDecision::Approved,
            "denied" => ApprovalDecision::Denied,
            _ => return None,
        };
        let replica_ok = self
            .replica
            .as_ref()
            .is_none_or(|r| !r.is_empty() && r.len() <= 253 && !r.chars().any(|c| c.is_control() || c.is_whitespace()));
        let names_ok = self.by.as_deref().is_some_and(is_name) && replica_ok;
        let reason_ok = self.reason.as_ref().is_none_or(|r| r.chars().count() <= 500);
        let remember = match self.remember.as_deref() {
            None => None,
            Some(text) => Some(Remember::parse(text)?),
        };
        let until = self.until_ms.map(from_ms);
        let until_ok = until.is_none_or(|until| until <= SystemTime::now() + HOST_GRANT_MAX);
        (names_ok && reason_ok && until_ok).then(|| Approval {
            decision,
            by: self.by,
            reason: self.reason,
            at: from_ms(self.at_ms),
            remember,
            until,
            replica: self.replica,
        })
    }
}

/// Why an answer could not be taken through the fleet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// Redis did not answer in time, or answered an error.
    Store,
}

/// The fleet's store. Cheap to clone.
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

struct Inner {
    manager: ConnectionManager,
    decide: redis::Script,
    claim: redis::Script,
    prefix: String,
    timeout: Duration,
    replica: String,
    metrics: Arc<Metrics>,
    failure_log: FailureLog,
}

impl Fleet {
    /// A store on `connection` (the resolved `[approvals.redis]`) for the replica named
    /// `replica`, counting into `metrics`. Connects on first use.
    ///
    /// # Errors
    /// [`ConnectError`] when the connection cannot be set up.
    pub fn new(
        connection: &Connection<'_>,
        replica: &str,
        extra_ca_files: &[PathBuf],
        metrics: Arc<Metrics>,
    ) -> Result<Self, ConnectError> {
        let manager = connection.connect(extra_ca_files)?;
        Ok(Fleet {
            inner: Arc::new(Inner {
                manager,
                decide: redis::Script::new(DECIDE),
                claim: redis::Script::new(CLAIM),
                prefix: format!("{}approvals:", connection.key_prefix),
                timeout: connection.timeout,
                replica: replica.to_owned(),
                metrics,
                failure_log: FailureLog::default(),
            }),
        })
    }

    /// This replica's name in the fleet.
    pub fn replica(&self) -> &str {
        &self.inner.replica
    }

    fn pending_key(&self) -> String {
        format!("{}pending", self.inner.prefix)
    }

    fn decision_key(&self, id: &str) -> String {
        format!("{}decision:{id}", self.inner.prefix)
    }

    /// The key of a remembered approval: its kind and parts, hashed (a path may hold anything).
    pub fn grant_key(&self, parts: &[&str]) -> String {
        let mut hash = Sha256::new();
        for part in parts {
            hash.update(part.as_bytes());
            hash.update([0]);
        }
        format!("{}grant:{}", self.inner.prefix, hex::encode(hash.finalize()))
    }

    /// Runs one Redis call within `timeout`; a failure is counted, logged at most once a
    /// second, and `Err`.
    async fn call<T>(&self, what: &str, call: impl Future<Output = redis::RedisResult<T>>) -> Result<T, Unavailable> {
        let error = match tokio::time::timeout(self.inner.timeout, call).await {
            Ok(Ok(answer)) => return Ok(answer),
            Ok(Err(error)) => error_chain(&error),
            Err(_) => format!("no answer within {:?} ([approvals.redis] timeout)", self.inner.timeout),
        };
        self.inner.metrics.approvals_store_error();
        if self.inner.failure_log.due() {
            tracing::warn!(
                call = what, %error,
                "the fleet's approvals store did not answer; this replica holds and decides its own requests alone"
            );
        }
        Err(Unavailable::Store)
    }

    /// Publishes a hold of this replica to the fleet; true when Redis took it.
    pub async fn publish(&self, listed: &Listed) -> bool {
        let Ok(value) = serde_json::to_string(listed) else { return false };
        let mut connection = self.inner.manager.clone();
        let hset = redis::cmd("HSET").arg(self.pending_key()).arg(&listed.id).arg(value).to_owned();
        self.call("HSET", hset.query_async::<i64>(&mut connection)).await.is_ok()
    }

    /// Takes a published hold of this replica off the fleet's list, for an answer given here:
    /// `Ok(false)` when another replica's answer took it first, else `Ok(true)`.
    ///
    /// # Errors
    /// `Unavailable` when Redis did not answer.
    pub async fn claim(&self, id: &str) -> Result<bool, Unavailable> {
        let mut connection = self.inner.manager.clone();
        let mut invocation = self.inner.claim.key(self.pending_key());
        invocation.key(self.decision_key(id)).arg(id);
        Ok(self.call("claim", invocation.invoke_async::<i64>(&mut connection)).await? == 1)
    }

    /// Takes a hold that ended (answered, timed out, hung up) off the fleet, with any answer
    /// left for it.
    pub async fn withdraw(&self, id: &str) {
        let mut connection = self.inner.manager.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("HDEL").arg(self.pending_key()).arg(id).ignore();
        pipe.cmd("DEL").arg(self.decision_key(id)).ignore();
        let _ = self.call("HDEL+DEL", pipe.query_async::<()>(&mut connection)).await;
    }

    /// The holds the fleet lists now, past their expiry left out, at most `MAX_LISTED`.
    ///
    /// # Errors
    /// `Unavailable` when Redis did not answer.
    pub async fn listed(&self) -> Result<Vec<Listed>, Unavailable> {
        let mut connection = self.inner.manager.clone();
        let scan = redis::cmd("HSCAN").arg(self.pending_key()).arg(0).arg("COUNT").arg(MAX_LISTED).to_owned();
        let (_, fields): (String, Vec<String>) = self.call("HSCAN", scan.query_async(&mut connection)).await?;
        let now = epoch_ms(SystemTime::now());
        Ok(fields
            .chunks(2)
            .take(MAX_LISTED)
            .filter_map(|pair| match pair {
                [id, value] => serde_json::from_str::<Listed>(value).ok().filter(|l| &l.id == id),
                _ => None,
            })
            .filter(|listed| listed.is_sane() && listed.expires_at_ms > now)
            .collect())
    }

    /// The hold listed as `id`, if any and not past its expiry.
    ///
    /// # Errors
    /// `Unavailable` when Redis did not answer.
    pub async fn find(&self, id: &str) -> Result<Option<Listed>, Unavailable> {
        let mut connection = self.inner.manager.clone();
        let hget = redis::cmd("HGET").arg(self.pending_key()).arg(id).to_owned();
        let value: Option<String> = self.call("HGET", hget.query_async(&mut connection)).await?;
        let now = epoch_ms(SystemTime::now());
        Ok(value
            .and_then(|value| serde_json::from_str::<Listed>(&value).ok())
            .filter(|listed| listed.id == id && listed.is_sane() && listed.expires_at_ms > now))
    }

    /// Answers the hold `id` another replica holds: `Ok(Some(listed))` when it was pending
    /// (now taken off the list, the answer left for its holder until its expiry), `Ok(None)`
    /// when nothing is pending as `id`.
    ///
    /// # Errors
    /// `Unavailable` when Redis did not answer.
    pub async fn decide(&self, listed: &Listed, approval: &Approval) -> Result<Option<Listed>, Unavailable> {
        let Ok(value) = serde_json::to_string(&Wire::of(approval)) else { return Ok(None) };
        let left = listed.expires_at_ms.saturating_sub(epoch_ms(SystemTime::now()));
        // Kept a little past the hold's end, for a holder polling as its time runs out.
        let ttl_ms = left.saturating_add(5_000);
        let mut connection = self.inner.manager.clone();
        let mut invocation = self.inner.decide.key(self.pending_key());
        invocation.key(self.decision_key(&listed.id)).arg(&listed.id).arg(value).arg(ttl_ms);
        let held: Option<String> = self.call("decide", invocation.invoke_async(&mut connection)).await?;
        Ok(held.and_then(|value| serde_json::from_str::<Listed>(&value).ok()))
    }

    /// The answers other replicas left for `ids` (this replica's published holds), each taken
    /// out of Redis as it is read; one that is not an approve or deny is dropped.
    pub async fn take_decisions(&self, ids: &[String]) -> Vec<(String, Approval)> {
        let mut pipe = redis::pipe();
        for id in ids {
            pipe.cmd("GETDEL").arg(self.decision_key(id));
        }
        let mut connection = self.inner.manager.clone();
        let Ok(values) = self.call("GETDEL", pipe.query_async::<Vec<Option<String>>>(&mut connection)).await else {
            return Vec::new();
        };
        ids.iter()
            .zip(values)
            .filter_map(|(id, value)| {
                let approval = serde_json::from_str::<Wire>(&value?).ok().and_then(Wire::approval);
                if approval.is_none() {
                    tracing::warn!(id, "the fleet's approvals store held an answer that is not one; ignored");
                }
                Some((id.clone(), approval?))
            })
            .collect()
    }

    /// Shares a remembered approval under `key` until `ttl` ends.
    pub async fn put_grant(&self, key: &str, approval: &Approval, ttl: Duration) {
        let Ok(value) = serde_json::to_string(&Wire::of(approval)) else { return };
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut connection = self.inner.manager.clone();
        let set = redis::cmd("SET").arg(key).arg(value).arg("PX").arg(ms).to_owned();
        let _ = self.call("SET", set.query_async::<()>(&mut connection)).await;
    }

    /// The remembered approval another replica shared under `key`, with the time it has left.
    pub async fn grant(&self, key: &str) -> Option<(Approval, Duration)> {
        let mut connection = self.inner.manager.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("GET").arg(key).cmd("PTTL").arg(key);
        let (value, ttl_ms): (Option<String>, i64) = self.call("GET", pipe.query_async(&mut connection)).await.ok()?;
        let approval = serde_json::from_str::<Wire>(&value?).ok().and_then(Wire::approval)?;
        let left = Duration::from_millis(u64::try_from(ttl_ms).ok()?);
        (approval.decision == ApprovalDecision::Approved && !left.is_zero()).then_some((approval, left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn approval(decision: ApprovalDecision, by: &str) -> Approval {
        Approval {
            decision,
            by: Some(by.to_owned()),
            reason: Some("ok".to_owned()),
            at: from_ms(1_700_000_000_000),
            remember: Some(Remember::HostForAgent),
            until: Some(SystemTime::now() + Duration::from_secs(600)),
            replica: Some("replica-b".to_owned()),
        }
    }

    fn through_wire(approval: &Approval) -> Option<Approval> {
        serde_json::from_str::<Wire>(&serde_json::to_string(&Wire::of(approval)).ok()?).ok()?.approval()
    }

    #[test]
    fn an_answer_goes_through_redis_unchanged_to_the_millisecond() {
        let sent = approval(ApprovalDecision::Approved, "alice");
        let got = through_wire(&sent).expect("an approval");
        let until_ms = sent.until.map(epoch_ms);
        assert_eq!(Approval { until: until_ms.map(from_ms), ..sent }, got);
        assert!(through_wire(&approval(ApprovalDecision::Denied, "bob")).is_some());
    }

    #[test]
    fn only_an_approve_or_deny_by_a_header_safe_name_is_read_back() {
        for decision in [ApprovalDecision::Remembered, ApprovalDecision::Timeout, ApprovalDecision::Shutdown] {
            assert!(through_wire(&approval(decision, "alice")).is_none(), "{decision:?}");
        }
        assert!(through_wire(&approval(ApprovalDecision::Approved, "alice\r\nx: y")).is_none(), "no header injection");
        let anonymous = Approval { by: None, ..approval(ApprovalDecision::Approved, "alice") };
        assert!(through_wire(&anonymous).is_none(), "an answer names who gave it");
        let forever = Approval {
            until: Some(SystemTime::now() + HOST_GRANT_MAX + Duration::from_secs(3600)),
            ..approval(ApprovalDecision::Approved, "alice")
        };
        assert!(through_wire(&forever).is_none(), "no grant past the longest one");
        let bad_remember = r#"{"decision":"approved","by":"alice","reason":null,"at_ms":1,"remember":"forever","until_ms":null,"replica":null}"#;
        assert!(serde_json::from_str::<Wire>(bad_remember).ok().and_then(Wire::approval).is_none());
    }
}
