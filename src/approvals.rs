//! Human approvals: what happens to a request an AGENTS.md `require-human-approval` path
//! reserves for a human (SEMANTICS C16) when `[approvals] mode = "hold"`, and to a request
//! for a host outside its agent's `allow_hosts` when that agent has `unlisted = "hold"`. The
//! request is held (its client simply waits) in a bounded queue of pending approvals until an
//! operator approves or denies it through the admin API, its time runs out, or its client
//! hangs up. An approval may be remembered for the same agent, origin and path for 15
//! minutes, or (for a new host) grant the host to the agent for a while. With `[approvals]
//! store = "redis"` a fleet of replicas shares the held requests, the answers and the grants.
//!
//! Owns: the `[approvals]` table (`config`), the pending queue with its guard whose drop takes
//! a held request out of the queue (`queue`), the remembered approvals and the host grants,
//! the fleet's store in Redis (`fleet`). The facts of an approval decision ([`Approval`],
//! [`ApprovalDecision`], [`Remember`]) are the decision log's values, owned by `crate::audit`
//! and re-exported here, so the log does not import the queue.
//!
//! Never: speaks HTTP (the proxy holds the request and writes the answer, the admin API takes
//! the operator's decision), decides whether a request needs approval (the policy core does),
//! or writes the decision log. The flow is in `docs/approvals.md`.

mod config;
mod fleet;
mod queue;

// The facts of an approval decision are the decision log's values (`crate::audit`, below
// this module: the log records them, the queue and the fleet's store make them).
pub use crate::audit::{Approval, ApprovalDecision, Remember};
pub use config::{ApprovalMode, ApprovalsConfig, ApprovalsStore, FleetRedisConfig};
pub use fleet::{Fleet, Listed, ListedRule};
pub use queue::{
    AnswerError, Answered, Approvals, DECISION_POLL, GrantKey, Held, HeldRule, Hold, HostGrant, HostGrantKey,
    NotPending, Pending, QueueFull,
};

/// How long a `path-for-agent-15m` approval lets the same agent's requests to the same origin
/// and path through without asking again.
pub const REMEMBER_FOR: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// How long a `host-for-agent` grant lasts when the operator names no `ttl`.
pub const HOST_GRANT_DEFAULT: std::time::Duration = std::time::Duration::from_secs(60 * 60);

/// The longest `host-for-agent` grant: past a day, the host belongs in `allow_hosts`.
pub const HOST_GRANT_MAX: std::time::Duration = std::time::Duration::from_secs(24 * 60 * 60);
