//! Where the config's agent boundaries hold only for agents that cooperate, said as warnings
//! with the fix (`agentgate config check` and the start-up banner print them; nothing is
//! refused, since each can be what the operator means):
//!
//! - an `[[agents]]` entry known by its token alone carries `allow_hosts`, `deny_hosts` or
//!   `limits` while `[auth] required = false` and the default `[agent]` has none of its own:
//!   a client that sends no token, or a wrong one, is the default `[agent]`, so the entry's
//!   lists and limits bind only an agent that chooses to send its token. (A secret's `agents`
//!   is not on the list: the default `[agent]` is not one of the ids it names, so dropping
//!   the token loses the secret.)
//! - a `clients` network holds a loopback address: any process on the host can send from it
//!   (`curl --interface 127.0.0.2`) and be that agent.
//!
//! Never: changes or refuses a config (`super::agent_problems` refuses what is wrong).

use std::net::{Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::{AgentConfig, AgentLimits, AuthConfig};

/// Every advisory boundary of the `[auth]`, `[agent]` and `[[agents]]` tables, each a
/// sentence naming the entries and the fix.
pub fn advisories(auth: &AuthConfig, default: &AgentConfig, agents: &[AgentConfig]) -> Vec<String> {
    let mut said = Vec::new();
    if !auth.required {
        let escaped: Vec<String> = agents
            .iter()
            .filter(|agent| (agent.token.is_some() || agent.token_sha256.is_some()) && agent.clients.is_empty())
            .filter_map(|agent| {
                let keys = unbound_by_default(agent, default);
                (!keys.is_empty()).then(|| format!("\"{}\" ({})", agent.id.as_deref().unwrap_or("?"), keys.join(", ")))
            })
            .collect();
        if !escaped.is_empty() {
            said.push(format!(
                "[[agents]] {} are known by their token only, but [auth] required = false and the default [agent] has none of \
                 those keys: a client that sends no token or a wrong one is the default [agent], so those lists and limits bind \
                 only an agent that chooses to send its token. Set [auth] required = true, or give [agent] its own allow_hosts \
                 (and deny_hosts, limits) for clients without a token",
                escaped.join(", ")
            ));
        }
    }
    for agent in agents {
        let loopback: Vec<String> =
            agent.clients.iter().filter(|net| holds_loopback(net)).map(IpNet::to_string).collect();
        if let Some(first) = loopback.first() {
            let first = first.split('/').next().unwrap_or(first);
            said.push(format!(
                "[[agents]] \"{}\" clients = {loopback:?} holds a loopback address: any process on this host can send from it \
                 (curl --interface {first}) and be \"{}\". Identify local agents by token (token_sha256, with [auth] required = \
                 true), or run them in a network namespace or container with an address of its own",
                agent.id.as_deref().unwrap_or("?"),
                agent.id.as_deref().unwrap_or("?"),
            ));
        }
    }
    said
}

/// The keys `agent` sets that the default `[agent]` leaves unset.
fn unbound_by_default(agent: &AgentConfig, default: &AgentConfig) -> Vec<&'static str> {
    let lists = |a: &AgentConfig| a.allow_hosts.is_some();
    let denies = |a: &AgentConfig| a.deny_hosts.as_ref().is_some_and(|list| !list.value.is_empty());
    let limits = |a: &AgentConfig| a.limits != AgentLimits::default();
    [("allow_hosts", lists as fn(&AgentConfig) -> bool), ("deny_hosts", denies), ("limits", limits)]
        .into_iter()
        .filter(|(_, sets)| sets(agent) && !sets(default))
        .map(|(key, _)| key)
        .collect()
}

/// Whether `net` holds an address of 127.0.0.0/8 or `::1`.
fn holds_loopback(net: &IpNet) -> bool {
    match net {
        IpNet::V4(net) => net.network().is_loopback() || net.contains(&Ipv4Addr::new(127, 0, 0, 1)),
        IpNet::V6(net) => net.contains(&Ipv6Addr::LOCALHOST),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml: &str) -> (AuthConfig, AgentConfig, Vec<AgentConfig>) {
        #[derive(serde::Deserialize)]
        struct Tables {
            #[serde(default)]
            auth: AuthConfig,
            #[serde(default)]
            agent: AgentConfig,
            #[serde(default)]
            agents: Vec<AgentConfig>,
        }
        let tables: Tables = toml::from_str(toml).expect("valid tables");
        (tables.auth, tables.agent, tables.agents)
    }

    const ALPHA: &str = "[[agents]]\nid = \"alpha\"\ntoken = \"t\"\nallow_hosts = [\"docs.test\"]\nlimits = { requests_per_minute = 5 }\n";

    #[test]
    fn a_token_agents_lists_without_required_auth_and_an_open_default_are_said_with_the_fix() {
        let (auth, default, agents) = parse(ALPHA);
        let said = advisories(&auth, &default, &agents);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].starts_with("[[agents]] \"alpha\" (allow_hosts, limits) are known by their token only"),
            "{}",
            said[0]
        );
        assert!(said[0].contains("Set [auth] required = true, or give [agent] its own allow_hosts"), "{}", said[0]);

        for fixed in ["[auth]\nrequired = true\n", "[agent]\nallow_hosts = []\nlimits = { requests_per_hour = 9 }\n"] {
            let (auth, default, agents) = parse(&format!("{fixed}{ALPHA}"));
            assert_eq!(advisories(&auth, &default, &agents), Vec::<String>::new(), "{fixed}");
        }
        // Known by its address, it cannot drop it; without lists or limits nothing is escaped.
        let by_address = ALPHA.replace("token = \"t\"\n", "token = \"t\"\nclients = [\"10.0.0.0/24\"]\n");
        let bare = "[[agents]]\nid = \"beta\"\ntoken = \"t\"\n";
        for quiet in [by_address.as_str(), bare] {
            let (auth, default, agents) = parse(quiet);
            assert_eq!(advisories(&auth, &default, &agents), Vec::<String>::new(), "{quiet}");
        }
    }

    #[test]
    fn a_loopback_clients_network_is_said_with_the_fix() {
        for clients in ["127.0.0.2", "127.0.0.0/8", "::1", "0.0.0.0/0"] {
            let (auth, default, agents) = parse(&format!("[[agents]]\nid = \"local\"\nclients = [\"{clients}\"]\n"));
            let said = advisories(&auth, &default, &agents);
            assert_eq!(said.len(), 1, "{clients}: {said:?}");
            assert!(
                said[0].contains("holds a loopback address: any process on this host can send from it"),
                "{}",
                said[0]
            );
        }
        let (auth, default, agents) = parse("[[agents]]\nid = \"lan\"\nclients = [\"10.0.0.0/8\", \"fd00::/8\"]\n");
        assert_eq!(advisories(&auth, &default, &agents), Vec::<String>::new());
    }
}
