//! The policy core: parse robots.txt, agents.txt, AGENTS.md and automation-preferences.txt
//! from bytes, and evaluate a [`RequestView`] against them into a [`Decision`] with reasons.
//!
//! Owns: one parser per format, the shared path-pattern matcher, the fetch-outcome
//! semantics (what an HTTP status or a network error means for each file), and the
//! evaluator that combines the four sources.
//!
//! Never: I/O, clocks, async, logging, environment, or types from hyper/tokio/rustls. Time,
//! when it matters, is passed in. A malformed file is data (diagnostics with line numbers),
//! never an `Err`; what it means for access is decided here, per `SEMANTICS.md`.

pub mod advice;
pub mod agents_md;
pub mod agents_txt;
pub mod autoctl;
mod code;
mod decision;
mod diagnostic;
mod evaluate;
mod format;
pub mod operator;
mod outcome;
pub mod path;
pub mod pattern;
pub mod refresh;
mod request;
pub mod robots;
#[cfg(test)]
mod test_support;
mod text;
pub mod usage;
mod weight;

pub use code::{Advice, AgentsMdCode, AgentsTxtCode, AutoctlCode, Code, OperatorCode, RobotsCode, Source};
pub use decision::{
    Decision, Direction, KeyParts, Limit, LimitKind, LimitScope, Limits, Opinion, Outcome, Reason, Reasons,
    SourceVerdict, joined,
};
pub use diagnostic::{Diagnostic, PolicyReport, PolicyStatus, Severity};
pub use evaluate::{Policies, Settings, evaluate, evaluate_with};
pub use format::{Format, FormatInfo, MAX_TTL, Previous, Refreshed, StaleRules};
pub use outcome::{FetchError, FetchOutcome, Headers};
pub use request::{HeaderLookup, RequestView};
pub use weight::{ALLOCATION_OVERHEAD, Weigh};

/// The policy formats, one `field: type` pair each: the field of [`Policies`] holding its
/// state and its [`Format`]. Listed once here, in the order they are fetched, evaluated and
/// reported; code that handles every format passes a macro that receives this list.
macro_rules! formats {
    ($callback:ident) => {
        $callback! {
            robots: $crate::policy::robots::Robots,
            agents_txt: $crate::policy::agents_txt::AgentsTxt,
            agents_md: $crate::policy::agents_md::AgentsMd,
            autoctl: $crate::policy::autoctl::Autoctl,
            tdmrep: $crate::policy::usage::tdmrep::TdmRepFile,
        }
    };
}
pub(crate) use formats;

macro_rules! format_infos {
    ($($field:ident: $format:ty),* $(,)?) => {
        [$(FormatInfo::of::<$format>()),*]
    };
}

/// Every format, for choosing one at run time (`lint`, the CLI).
pub const FORMATS: &[FormatInfo] = &formats!(format_infos);
