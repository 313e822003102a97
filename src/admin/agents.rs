//! `GET /agents`: each configured agent (`[agent]` and every `[[agents]]` entry) with its mode
//! and egress lists as the config in force has them (`allow_hosts`, `deny_hosts`, `unlisted`),
//! and the hosts granted to it now (`host-for-agent` approvals, each with who granted it and
//! until when). The per-agent counts are `/agents/summary` (`super::console`).
//!
//! Never: changes a list or a grant (the config file and `POST /approvals/{id}` do).

use http::{Response, StatusCode};
use serde_json::{Value, json};

use super::answer::{AdminBody, json_response};
use super::state::AdminState;
use crate::agents::AgentConfig;
use crate::approvals::HostGrant;
use crate::audit::rfc3339_millis;

/// `GET /agents`: `{"agents": [{"table", "id", "mode", "allow_hosts", "deny_hosts",
/// "unlisted", "grants": [...]}]}`, `[agent]` first. The default agent's grants are those
/// of every agent id no `[[agents]]` entry has (the default agent's id is each client's
/// address, unless `[agent] id` names it).
pub(super) fn list(state: &AdminState) -> Response<AdminBody> {
    let live = (state.agents)();
    let grants = state.approvals.host_grants();
    let entries: Vec<&str> = live.agents.iter().filter_map(|a| a.id.as_deref()).collect();
    let default_grants: Vec<&HostGrant> = grants.iter().filter(|g| !entries.contains(&g.agent.as_str())).collect();
    let mut agents = vec![agent_json("[agent]", &live.default, live.mode, &default_grants)];
    for (i, agent) in live.agents.iter().enumerate() {
        let own: Vec<&HostGrant> = grants.iter().filter(|g| agent.id.as_deref() == Some(g.agent.as_str())).collect();
        agents.push(agent_json(&format!("[[agents]] #{}", i + 1), agent, live.mode, &own));
    }
    json_response(StatusCode::OK, &json!({"agents": agents}))
}

fn agent_json(table: &str, agent: &AgentConfig, global: crate::policy::operator::Mode, grants: &[&HostGrant]) -> Value {
    let grants: Vec<Value> = grants
        .iter()
        .map(|grant| {
            let approval = &grant.approval;
            json!({
                "agent": grant.agent,
                "host": grant.host,
                "port": grant.port,
                "by": approval.by,
                "reason": approval.reason,
                "at": rfc3339_millis(approval.at).to_string(),
                "until": approval.until.map(|until| rfc3339_millis(until).to_string()),
            })
        })
        .collect();
    json!({
        "table": table,
        "id": agent.id,
        "mode": agent.mode.unwrap_or(global).as_str(),
        "allow_hosts": agent.allow_hosts.as_ref().map(|list| &list.value),
        "deny_hosts": agent.deny_hosts.as_ref().map(|list| &list.value),
        "unlisted": agent.unlisted.as_str(),
        "grants": grants,
    })
}
