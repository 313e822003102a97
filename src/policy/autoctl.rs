//! Placeholder until the autoctl parser lands: the file is always treated as absent.

use super::{FetchOutcome, PolicyReport, RequestView, SourceVerdict};

/// The autoctl policy state for one origin.
#[derive(Debug, Clone)]
pub struct AutoctlState;

/// The state a fetch outcome leads to.
pub fn from_fetch(_outcome: &FetchOutcome) -> AutoctlState {
    AutoctlState
}

impl AutoctlState {
    /// What this file says about one request.
    pub fn evaluate(&self, _req: &RequestView<'_>) -> SourceVerdict {
        SourceVerdict::no_opinion()
    }

    /// Status, digest and findings for explain.
    pub fn report(&self) -> PolicyReport {
        PolicyReport::absent()
    }
}
