//! Per-agent compliance since start, live: the console's `/agents/summary`. Counted once per
//! completed decision record, where `crate::metrics::Metrics::record` counts the request
//! metrics, with the same [`Counts`] as `agentgate audit summary` so the two read alike.
//!
//! Never: reads the log back, or grows without bound: past [`MAX_AGENTS`] names, further
//! agents are counted together under [`OTHER_AGENTS`].

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::{Counts, DecisionRecord};

/// How many agents are counted by name. Agent ids come from the config or from a client's
/// header, so a client inventing names must not grow the map without end.
pub const MAX_AGENTS: usize = 1000;

/// The name the agents past [`MAX_AGENTS`] are counted under.
pub const OTHER_AGENTS: &str = "(other agents)";

/// Requests per outcome for each agent since the process started.
#[derive(Debug, Default)]
pub struct AgentTally {
    agents: Mutex<HashMap<String, Counts>>,
}

impl AgentTally {
    /// Counts one completed record under its agent.
    pub fn count(&self, record: &DecisionRecord) {
        let mut agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        let counts = match agents.get_mut(&*record.agent) {
            Some(counts) => counts,
            None => {
                let name = if agents.len() < MAX_AGENTS { &*record.agent } else { OTHER_AGENTS };
                agents.entry(name.to_owned()).or_default()
            }
        };
        counts.add(record.outcome.as_str());
    }

    /// Each agent's counts, sorted by agent.
    pub fn snapshot(&self) -> Vec<(String, Counts)> {
        let agents = self.agents.lock().unwrap_or_else(PoisonError::into_inner);
        let mut all: Vec<(String, Counts)> =
            agents.iter().map(|(name, counts)| (name.clone(), counts.clone())).collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::audit::Outcome;
    use crate::policy::operator::Mode;

    fn record(agent: &str, outcome: Outcome) -> DecisionRecord {
        let client = SocketAddr::from(([127, 0, 0, 1], 1));
        DecisionRecord::new(outcome, Mode::Enforce, client, agent, "GET", "https://example.com/")
    }

    #[test]
    fn counts_each_agent_by_outcome() {
        let tally = AgentTally::default();
        for outcome in [Outcome::Allow, Outcome::Allow, Outcome::Deny, Outcome::WouldDeny, Outcome::RateLimited] {
            tally.count(&record("crawler", outcome));
        }
        tally.count(&record("alpha", Outcome::Deny));
        let snapshot = tally.snapshot();
        let names: Vec<&str> = snapshot.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(names, ["alpha", "crawler"]);
        let crawler = &snapshot[1].1;
        assert_eq!(
            (crawler.requests, crawler.allowed, crawler.denied, crawler.would_deny, crawler.rate_limited),
            (5, 2, 1, 1, 1)
        );
    }

    #[test]
    fn agents_past_the_cap_are_counted_together() {
        let tally = AgentTally::default();
        for i in 0..MAX_AGENTS + 3 {
            tally.count(&record(&format!("agent-{i}"), Outcome::Allow));
        }
        tally.count(&record("agent-0", Outcome::Allow));
        let snapshot = tally.snapshot();
        assert_eq!(snapshot.len(), MAX_AGENTS + 1);
        let other = snapshot.iter().find(|(name, _)| name == OTHER_AGENTS).map(|(_, counts)| counts.requests);
        assert_eq!(other, Some(3));
        assert_eq!(snapshot.iter().map(|(_, c)| c.requests).sum::<u64>(), MAX_AGENTS as u64 + 4);
    }
}
