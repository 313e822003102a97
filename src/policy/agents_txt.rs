//! Placeholder until the agents_txt parser lands: the file is always treated as absent.

use super::{FetchOutcome, PolicyReport, RequestView, SourceVerdict};

/// The agents_txt policy state for one origin.
#[derive(Debug, Clone)]
pub struct AgentsTxtState;

/// The state a fetch outcome leads to.
pub fn from_fetch(_outcome: &FetchOutcome) -> AgentsTxtState {
    AgentsTxtState
}

impl AgentsTxtState {
    /// What this file says about one request.
    pub fn evaluate(&self, _req: &RequestView<'_>) -> SourceVerdict {
        SourceVerdict::no_opinion()
    }

    /// Status, digest and findings for explain.
    pub fn report(&self) -> PolicyReport {
        PolicyReport::absent()
    }
}
