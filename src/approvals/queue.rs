//! The pending approvals: each held request's summary (what the operator is asked about)
//! and the channel its answer travels on, oldest first and bounded by `max_pending`; the
//! remembered `path-for-agent-15m` grants, a TTL cache; and the `host-for-agent` grants, a
//! cache whose entries each end at their own `until`.
//!
//! A held request owns a [`Hold`]: dropping it (the client hung up, so hyper dropped the
//! request's future) takes the entry out of the queue, so an operator is never asked about a
//! request nobody waits for. An answer is taken out of the queue as it is sent, so a request
//! is settled at most once.
//!
//! With a fleet store (`super::fleet`, `[approvals] store = "redis"`) each hold is also
//! published to the fleet, listed with the other replicas' holds, answered through whichever
//! replica an operator uses (an answer taken on another replica reaches the holder by a poll
//! every [`DECISION_POLL`]), and the grants are shared; when Redis fails, the queue goes on
//! as a replica's own.
//!
//! Never: speaks HTTP, reads the config, or writes the decision log.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;
use tokio::time::Instant;

use super::fleet::{Fleet, Listed, ListedRule, Unavailable, epoch_ms};
use super::{Approval, ApprovalDecision, HOST_GRANT_MAX, REMEMBER_FOR};

/// How often a replica looks for answers other replicas took for its holds: an answer
/// reaches the holder within this, plus one Redis round trip.
pub const DECISION_POLL: Duration = Duration::from_millis(200);

/// Remembered grants kept at most; the oldest go first past it.
const MAX_GRANTS: u64 = 10_000;

/// The rule that asked for a human, as the operator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRule {
    /// The policy file (`AGENTS.md`).
    pub file: &'static str,
    /// Its line, when known.
    pub line: Option<u32>,
    /// The rule as written.
    pub text: String,
}

/// What the operator is asked about: a held request's summary. No header, no body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The id of the request's decision record (`event.id`), which its log line carries.
    pub record_id: String,
    /// The method as sent.
    pub method: String,
    /// The URL, redacted as in the decision log.
    pub url: String,
    /// The agent id.
    pub agent: String,
    /// `scheme://host:port`.
    pub origin: String,
    /// The rule that asked for approval.
    pub rule: Option<HeldRule>,
    /// The host the agent wants to reach that its `allow_hosts` does not list, when that is
    /// why it is held (a human may grant it); `None` for a path a site reserves for a human.
    pub new_host: Option<String>,
    /// When it was held.
    pub held_since: SystemTime,
}

/// One pending approval, as `GET /approvals` lists it.
#[derive(Debug, Clone)]
pub struct Pending {
    /// The id to approve or deny it by.
    pub id: String,
    /// The held request.
    pub held: Held,
    /// When it times out.
    pub deadline: Instant,
}

/// The queue already holds `max_pending` requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{max_pending} requests are already waiting for approval ([approvals] max_pending)")]
pub struct QueueFull {
    /// The bound that was reached.
    pub max_pending: usize,
}

/// No pending approval has this id: it never existed, or it was settled, timed out or its
/// client hung up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no pending approval has id {id:?}: it was already answered, timed out, or its client hung up")]
pub struct NotPending {
    /// The id asked for.
    pub id: String,
}

/// Who the remembered grants are for: the same agent, origin and path (query aside).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GrantKey {
    /// The agent id.
    pub agent: String,
    /// `scheme://host:port`.
    pub origin: String,
    /// The path, without its query.
    pub path: String,
}

/// Who a host grant is for: one agent and one canonical host on the port the held request
/// asked for (a grant of `docs.example:443` admits nothing on `docs.example:22`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostGrantKey {
    /// The agent id.
    pub agent: String,
    /// The canonical host.
    pub host: String,
    /// The port.
    pub port: u16,
}

/// A live `host-for-agent` grant, as the admin API lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostGrant {
    /// The agent it admits.
    pub agent: String,
    /// The host it admits.
    pub host: String,
    /// The one port of the host it admits.
    pub port: u16,
    /// Who granted it, when, why and until when.
    pub approval: Approval,
}

/// How an answer was taken ([`Approvals::answer`]).
#[derive(Debug)]
pub enum Answered {
    /// Handed to a request this replica holds.
    Here(Held),
    /// Left in the fleet's store for the replica holding it.
    Fleet(Listed),
}

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// Nothing is pending as this id (any more).
    #[error(transparent)]
    NotPending(#[from] NotPending),
    /// Another replica holds it and the fleet's store did not answer.
    #[error(
        "the request {id:?} is held by another replica and the fleet's approvals store ([approvals.redis]) did not answer; answer it on that replica"
    )]
    StoreDown {
        /// The id asked for.
        id: String,
    },
}

struct Entry {
    pending: Pending,
    answer: oneshot::Sender<Approval>,
    /// Listed in the fleet's store (taken off it when the hold ends).
    published: bool,
}

struct Shared {
    /// Oldest first; at most `max_pending` long, so a scan is cheap.
    entries: Mutex<Vec<Entry>>,
    grants: moka::future::Cache<GrantKey, Arc<Approval>>,
    hosts: moka::future::Cache<HostGrantKey, Arc<Approval>>,
    /// This replica's name, as the fleet lists its holds.
    replica: String,
    /// The fleet's store, with `[approvals] store = "redis"`.
    fleet: Option<Fleet>,
}

/// A host grant lives until its approval's `until`.
struct UntilExpiry;

impl moka::Expiry<HostGrantKey, Arc<Approval>> for UntilExpiry {
    fn expire_after_create(
        &self,
        _key: &HostGrantKey,
        grant: &Arc<Approval>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        let left = grant.until.and_then(|until| until.duration_since(SystemTime::now()).ok());
        Some(left.unwrap_or(Duration::ZERO).min(HOST_GRANT_MAX))
    }
}

/// The pending approvals and remembered grants of one proxy; cheap to clone (the proxy holds
/// requests in it, the admin API answers them).
#[derive(Clone)]
pub struct Approvals {
    shared: Arc<Shared>,
}

impl Default for Approvals {
    fn default() -> Self {
        Self::new()
    }
}

impl Approvals {
    /// An empty queue and no grants, of this process alone.
    pub fn new() -> Self {
        Self::build(String::new(), None)
    }

    /// An empty queue of the replica named `replica`, shared with the fleet through `fleet`
    /// when given: then a task (ending with the last clone) looks every [`DECISION_POLL`] for
    /// answers other replicas took for its holds. Call inside a tokio runtime.
    pub fn of_replica(replica: &str, fleet: Option<Fleet>) -> Self {
        let approvals = Self::build(replica.to_owned(), fleet);
        if approvals.shared.fleet.is_some() {
            approvals.watch_decisions();
        }
        approvals
    }

    fn build(replica: String, fleet: Option<Fleet>) -> Self {
        let grants = moka::future::Cache::builder().max_capacity(MAX_GRANTS).time_to_live(REMEMBER_FOR).build();
        let hosts = moka::future::Cache::builder().max_capacity(MAX_GRANTS).expire_after(UntilExpiry).build();
        let entries = Mutex::new(Vec::new());
        Approvals { shared: Arc::new(Shared { entries, grants, hosts, replica, fleet }) }
    }

    /// Holds `held` until an answer, `timeout`, or the returned [`Hold`] is dropped.
    ///
    /// # Errors
    /// [`QueueFull`] when `max_pending` requests are already held.
    pub fn hold(&self, held: Held, timeout: Duration, max_pending: usize) -> Result<Hold, QueueFull> {
        let mut entries = self.entries();
        if entries.len() >= max_pending {
            return Err(QueueFull { max_pending });
        }
        let id = loop {
            // Unguessable, so an id cannot be answered by someone who did not list it.
            let id = format!("{:016x}", rand::random::<u64>());
            if !entries.iter().any(|e| e.pending.id == id) {
                break id;
            }
        };
        let (answer, answered) = oneshot::channel();
        let deadline = Instant::now() + timeout;
        entries.push(Entry { pending: Pending { id: id.clone(), held, deadline }, answer, published: false });
        Ok(Hold { id, deadline, answered, approvals: self.clone() })
    }

    /// How many requests are held now (`agentgate_approvals_pending`).
    pub fn pending_count(&self) -> usize {
        self.entries().len()
    }

    /// Every pending approval, oldest first.
    pub fn pending(&self) -> Vec<Pending> {
        self.entries().iter().map(|e| e.pending.clone()).collect()
    }

    /// Hands `approval` to the request held as `id`, and takes it out of the queue.
    ///
    /// # Errors
    /// [`NotPending`] when no request is held as `id` (any more).
    pub fn settle(&self, id: &str, approval: Approval) -> Result<Held, NotPending> {
        let entry = {
            let mut entries = self.entries();
            let at = entries.iter().position(|e| e.pending.id == id).ok_or_else(|| NotPending { id: id.to_owned() })?;
            entries.remove(at)
        };
        if entry.published {
            self.withdraw(id);
        }
        // The receiver is gone only when its request was dropped this very moment.
        match entry.answer.send(approval) {
            Ok(()) => Ok(entry.pending.held),
            Err(_) => Err(NotPending { id: id.to_owned() }),
        }
    }

    /// Remembers `approval` for `key` for [`REMEMBER_FOR`] (in the fleet's store too).
    pub async fn remember(&self, key: GrantKey, approval: Approval) {
        if let Some(fleet) = &self.shared.fleet {
            let shared = fleet.grant_key(&["path", &key.agent, &key.origin, &key.path]);
            fleet.put_grant(&shared, &approval, REMEMBER_FOR).await;
        }
        self.shared.grants.insert(key, Arc::new(approval)).await;
    }

    /// The approval remembered for `key` here or by the fleet, as a `remembered` decision
    /// naming who gave it.
    pub async fn remembered(&self, key: &GrantKey) -> Option<Approval> {
        let grant = match self.shared.grants.get(key).await {
            Some(grant) => (*grant).clone(),
            None => {
                let fleet = self.shared.fleet.as_ref()?;
                fleet.grant(&fleet.grant_key(&["path", &key.agent, &key.origin, &key.path])).await?.0
            }
        };
        Some(Approval { decision: ApprovalDecision::Remembered, ..grant })
    }

    /// Grants `key`'s host to its agent until `approval.until` (at most [`HOST_GRANT_MAX`]),
    /// in the fleet's store too.
    pub async fn grant_host(&self, key: HostGrantKey, approval: Approval) {
        if let Some(fleet) = &self.shared.fleet {
            let left = approval.until.and_then(|until| until.duration_since(SystemTime::now()).ok());
            if let Some(left) = left.filter(|left| !left.is_zero()) {
                let port = key.port.to_string();
                let shared = fleet.grant_key(&["host", &key.agent, &key.host, &port]);
                fleet.put_grant(&shared, &approval, left.min(HOST_GRANT_MAX)).await;
            }
        }
        self.shared.hosts.insert(key, Arc::new(approval)).await;
    }

    /// The live grant of `key`'s host to its agent, here or by the fleet (then kept here
    /// until it ends), as a `remembered` decision naming who gave it and until when.
    pub async fn host_grant(&self, key: &HostGrantKey) -> Option<Approval> {
        let grant = match self.shared.hosts.get(key).await {
            Some(grant) => grant,
            None => {
                let fleet = self.shared.fleet.as_ref()?;
                let port = key.port.to_string();
                let (grant, _) = fleet.grant(&fleet.grant_key(&["host", &key.agent, &key.host, &port])).await?;
                let grant = Arc::new(grant);
                self.shared.hosts.insert(key.clone(), Arc::clone(&grant)).await;
                grant
            }
        };
        // The cache ends an entry on its own clock; the grant ends at `until` whatever it says.
        if grant.until.is_none_or(|until| until <= SystemTime::now()) {
            return None;
        }
        Some(Approval { decision: ApprovalDecision::Remembered, ..(*grant).clone() })
    }

    /// Every live host grant, by agent, host then port.
    pub fn host_grants(&self) -> Vec<HostGrant> {
        let now = SystemTime::now();
        let mut grants: Vec<HostGrant> = self
            .shared
            .hosts
            .iter()
            .filter(|(_, grant)| grant.until.is_some_and(|until| until > now))
            .map(|(key, grant)| HostGrant {
                agent: key.agent.clone(),
                host: key.host.clone(),
                port: key.port,
                approval: (*grant).clone(),
            })
            .collect();
        grants.sort_by(|a, b| (&a.agent, &a.host, a.port).cmp(&(&b.agent, &b.host, b.port)));
        grants
    }

    fn entries(&self) -> MutexGuard<'_, Vec<Entry>> {
        // A panic while holding the lock leaves a consistent Vec: every change is one call.
        self.shared.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn forget(&self, id: &str) {
        let mut published = false;
        self.entries().retain(|e| {
            published |= e.pending.id == id && e.published;
            e.pending.id != id
        });
        if published {
            self.withdraw(id);
        }
    }

    /// Takes an ended hold off the fleet's list, in the background (a drop cannot wait).
    fn withdraw(&self, id: &str) {
        let (Some(fleet), Ok(runtime)) = (self.shared.fleet.clone(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let id = id.to_owned();
        runtime.spawn(async move { fleet.withdraw(&id).await });
    }

    /// Lists the hold `id` in the fleet's store, when there is one; a failure leaves it this
    /// replica's alone (counted and logged by the store).
    pub async fn publish(&self, id: &str) {
        let Some(fleet) = &self.shared.fleet else { return };
        // Marked first, so a hold that ends while this call is in flight (its client hung up,
        // dropping this future) is taken off the fleet's list by the same connection, after.
        let listed = self.entries().iter_mut().find(|e| e.pending.id == id).map(|entry| {
            entry.published = true;
            entry.pending.clone()
        });
        let Some(pending) = listed else { return };
        if !fleet.publish(&self.listed(&pending)).await
            && let Some(entry) = self.entries().iter_mut().find(|e| e.pending.id == id)
        {
            entry.published = false;
        }
    }

    /// A pending approval of this replica as the fleet lists it.
    fn listed(&self, pending: &Pending) -> Listed {
        let held = &pending.held;
        let left = pending.deadline.saturating_duration_since(Instant::now());
        Listed {
            id: pending.id.clone(),
            replica: self.shared.replica.clone(),
            record_id: held.record_id.clone(),
            method: held.method.clone(),
            url: held.url.clone(),
            agent: held.agent.clone(),
            origin: held.origin.clone(),
            rule: held.rule.as_ref().map(|r| ListedRule {
                file: r.file.to_owned(),
                line: r.line,
                text: r.text.clone(),
            }),
            new_host: held.new_host.clone(),
            held_since_ms: epoch_ms(held.held_since),
            expires_at_ms: epoch_ms(SystemTime::now() + left),
        }
    }

    /// Every held request of this replica and, with a fleet store that answers, of the
    /// others, oldest first.
    pub async fn all_pending(&self) -> Vec<Listed> {
        let mut all: Vec<Listed> = self.pending().iter().map(|pending| self.listed(pending)).collect();
        if let Some(fleet) = &self.shared.fleet
            && let Ok(fleet) = fleet.listed().await
        {
            let others: Vec<Listed> = fleet.into_iter().filter(|f| !all.iter().any(|a| a.id == f.id)).collect();
            all.extend(others);
        }
        all.sort_by_key(|listed| listed.held_since_ms);
        all
    }

    /// The held request `id`, here or elsewhere in the fleet.
    ///
    /// # Errors
    /// [`AnswerError::NotPending`] when nothing is held as `id`; [`AnswerError::StoreDown`]
    /// when it is not held here and the fleet's store did not answer.
    pub async fn find(&self, id: &str) -> Result<Listed, AnswerError> {
        if let Some(listed) = self.entries().iter().find(|e| e.pending.id == id).map(|e| self.listed(&e.pending)) {
            return Ok(listed);
        }
        let not_pending = || AnswerError::NotPending(NotPending { id: id.to_owned() });
        let fleet = self.shared.fleet.as_ref().ok_or_else(not_pending)?;
        match fleet.find(id).await {
            Ok(found) => found.ok_or_else(not_pending),
            Err(Unavailable::Store) => Err(AnswerError::StoreDown { id: id.to_owned() }),
        }
    }

    /// Answers `listed` (from [`Approvals::find`]) with `approval`: here when this replica
    /// holds it (taken off the fleet's list first, so an answer on another replica cannot
    /// also be taken; with the store down, answered here alone), else through the fleet's
    /// store for its holder, the approval naming this replica.
    ///
    /// # Errors
    /// [`AnswerError::NotPending`] when it was answered, timed out or hung up meanwhile;
    /// [`AnswerError::StoreDown`] when another replica holds it and the store did not answer.
    pub async fn answer(&self, listed: &Listed, approval: Approval) -> Result<Answered, AnswerError> {
        let id = listed.id.as_str();
        let here = self.entries().iter().find(|e| e.pending.id == id).map(|e| e.published);
        match (here, &self.shared.fleet) {
            (Some(true), Some(fleet)) => {
                if fleet.claim(id).await == Ok(false) {
                    return Err(NotPending { id: id.to_owned() }.into());
                }
                Ok(Answered::Here(self.settle(id, approval)?))
            }
            (Some(_), _) => Ok(Answered::Here(self.settle(id, approval)?)),
            (None, Some(fleet)) => {
                let approval = Approval { replica: Some(self.shared.replica.clone()), ..approval };
                match fleet.decide(listed, &approval).await {
                    Ok(Some(taken)) => Ok(Answered::Fleet(taken)),
                    Ok(None) => Err(NotPending { id: id.to_owned() }.into()),
                    Err(Unavailable::Store) => Err(AnswerError::StoreDown { id: id.to_owned() }),
                }
            }
            (None, None) => Err(NotPending { id: id.to_owned() }.into()),
        }
    }

    /// Looks every [`DECISION_POLL`] for answers other replicas took for this replica's
    /// published holds, and hands each to its request; ends with the last clone.
    fn watch_decisions(&self) {
        let weak = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(DECISION_POLL);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                let approvals = Approvals { shared };
                let Some(fleet) = approvals.shared.fleet.clone() else { return };
                let ids: Vec<String> =
                    approvals.entries().iter().filter(|e| e.published).map(|e| e.pending.id.clone()).collect();
                if ids.is_empty() {
                    continue;
                }
                for (id, approval) in fleet.take_decisions(&ids).await {
                    let (by, replica) = (approval.by.clone(), approval.replica.clone());
                    if approvals.settle(&id, approval).is_ok() {
                        tracing::info!(id, ?by, ?replica, "approval answered on another replica");
                    }
                }
            }
        });
    }
}

/// A held request's place in the queue. Dropping it takes the request out of the queue.
pub struct Hold {
    id: String,
    deadline: Instant,
    answered: oneshot::Receiver<Approval>,
    approvals: Approvals,
}

impl Hold {
    /// The id an operator answers it by.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Waits for the operator's answer, or until the deadline: then [`ApprovalDecision::Timeout`].
    pub async fn answer(mut self) -> Approval {
        match tokio::time::timeout_at(self.deadline, &mut self.answered).await {
            Ok(Ok(approval)) => approval,
            // The sender is dropped only by `forget` (this guard's own drop) or `settle`,
            // which sends first: treat it as the timeout it cannot be anything but.
            Ok(Err(_)) => Approval::undecided(ApprovalDecision::Timeout),
            Err(_) => {
                // An answer sent as time ran out wins: the operator was told it was taken.
                self.answered.close();
                self.answered.try_recv().unwrap_or_else(|_| Approval::undecided(ApprovalDecision::Timeout))
            }
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.approvals.forget(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::approvals::Remember;

    fn held(record_id: &str) -> Held {
        Held {
            record_id: record_id.to_owned(),
            method: "POST".to_owned(),
            url: "https://shop.example:443/checkout".to_owned(),
            agent: "alpha".to_owned(),
            origin: "https://shop.example:443".to_owned(),
            rule: Some(HeldRule { file: "AGENTS.md", line: Some(7), text: "/checkout".to_owned() }),
            new_host: None,
            held_since: SystemTime::now(),
        }
    }

    fn approved(by: &str) -> Approval {
        Approval {
            decision: ApprovalDecision::Approved,
            by: Some(by.to_owned()),
            reason: Some("ok".to_owned()),
            at: SystemTime::now(),
            remember: Some(Remember::ThisRequest),
            until: None,
            replica: None,
        }
    }

    const MINUTE: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn the_queue_is_bounded_and_lists_oldest_first() {
        let approvals = Approvals::new();
        let first = approvals.hold(held("r1"), MINUTE, 2).expect("room for one");
        let second = approvals.hold(held("r2"), MINUTE, 2).expect("room for two");
        assert_eq!(approvals.hold(held("r3"), MINUTE, 2).err(), Some(QueueFull { max_pending: 2 }));
        let listed: Vec<String> = approvals.pending().into_iter().map(|p| p.held.record_id).collect();
        assert_eq!(listed, ["r1", "r2"]);
        assert_ne!(first.id(), second.id());
        drop(first);
        assert!(approvals.hold(held("r3"), MINUTE, 2).is_ok(), "a dropped hold makes room");
    }

    #[tokio::test]
    async fn dropping_the_hold_removes_the_entry() {
        let approvals = Approvals::new();
        let hold = approvals.hold(held("r1"), MINUTE, 10).expect("room");
        let id = hold.id().to_owned();
        assert_eq!(approvals.pending().len(), 1);
        drop(hold);
        assert!(approvals.pending().is_empty());
        assert_eq!(approvals.settle(&id, approved("alice")), Err(NotPending { id }));
    }

    #[tokio::test]
    async fn an_answer_reaches_the_hold_and_a_second_one_finds_nothing() {
        let approvals = Approvals::new();
        let hold = approvals.hold(held("r1"), MINUTE, 10).expect("room");
        let id = hold.id().to_owned();
        let settled = approvals.settle(&id, approved("alice")).expect("pending");
        assert_eq!(settled.record_id, "r1");
        assert!(approvals.pending().is_empty(), "settled is out of the queue");
        assert_eq!(approvals.settle(&id, approved("bob")), Err(NotPending { id: id.clone() }));
        let answer = hold.answer().await;
        assert_eq!((answer.decision, answer.by.as_deref()), (ApprovalDecision::Approved, Some("alice")));
    }

    #[tokio::test(start_paused = true)]
    async fn nobody_answering_is_a_timeout_that_leaves_the_queue() {
        let approvals = Approvals::new();
        let hold = approvals.hold(held("r1"), Duration::from_secs(5), 10).expect("room");
        let id = hold.id().to_owned();
        let answer = hold.answer().await;
        assert_eq!((answer.decision, answer.by), (ApprovalDecision::Timeout, None));
        assert!(approvals.pending().is_empty());
        assert!(approvals.settle(&id, approved("alice")).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_taken_as_time_runs_out_is_honoured() {
        let approvals = Approvals::new();
        let hold = approvals.hold(held("r1"), Duration::from_secs(5), 10).expect("room");
        let id = hold.id().to_owned();
        tokio::time::advance(Duration::from_secs(6)).await;
        // The operator was told 200, so the request must not then be refused as timed out.
        approvals.settle(&id, approved("alice")).expect("still listed until its waiter wakes");
        assert_eq!(hold.answer().await.decision, ApprovalDecision::Approved);
    }

    #[tokio::test]
    async fn a_grant_is_remembered_per_agent_origin_and_path() {
        let approvals = Approvals::new();
        let key =
            GrantKey { agent: "alpha".into(), origin: "https://shop.example:443".into(), path: "/checkout".into() };
        assert!(approvals.remembered(&key).await.is_none());
        approvals.remember(key.clone(), approved("alice")).await;
        let grant = approvals.remembered(&key).await.expect("remembered");
        assert_eq!((grant.decision, grant.by.as_deref()), (ApprovalDecision::Remembered, Some("alice")));
        let other = GrantKey { agent: "beta".into(), ..key };
        assert!(approvals.remembered(&other).await.is_none(), "another agent is asked again");
    }

    #[tokio::test]
    async fn a_host_grant_admits_its_agent_and_host_until_it_ends() {
        let approvals = Approvals::new();
        let key = HostGrantKey { agent: "sbx".into(), host: "new.example".into(), port: 443 };
        assert!(approvals.host_grant(&key).await.is_none());
        let until = SystemTime::now() + Duration::from_secs(3600);
        let grant = Approval { remember: Some(Remember::HostForAgent), until: Some(until), ..approved("alice") };
        approvals.grant_host(key.clone(), grant).await;
        let found = approvals.host_grant(&key).await.expect("granted");
        assert_eq!(
            (found.decision, found.by.as_deref(), found.until),
            (ApprovalDecision::Remembered, Some("alice"), Some(until))
        );
        let other_agent = HostGrantKey { agent: "other".into(), ..key.clone() };
        assert!(approvals.host_grant(&other_agent).await.is_none(), "another agent is still refused");
        let other_port = HostGrantKey { port: 22, ..key.clone() };
        assert!(approvals.host_grant(&other_port).await.is_none(), "another port of the host is still refused");
        let listed = approvals.host_grants();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].agent.as_str(), listed[0].host.as_str(), listed[0].port), ("sbx", "new.example", 443));

        let ended = HostGrantKey { agent: "sbx".into(), host: "old.example".into(), port: 443 };
        let past = Approval { until: Some(SystemTime::now() - Duration::from_secs(1)), ..approved("bob") };
        approvals.grant_host(ended.clone(), past).await;
        assert!(approvals.host_grant(&ended).await.is_none(), "a grant past its until admits nothing");
        assert_eq!(approvals.host_grants().len(), 1, "nor is it listed");
    }
}
