//! What a policy format is: one [`Format`] implementation per file type, listed once in
//! [`formats!`](crate::policy::formats) (in `policy.rs`), so that the evaluator, the
//! fetcher's cache, `explain`, `lint` and the CLI iterate over the formats instead of
//! naming each (`docs/formats.md` says how to add one).
//!
//! Owns: the shape of a format (its paths and fallback location, size cap, fetch-outcome
//! semantics, stale rule, lint, verdict and report), what a stale rule is given
//! and returns ([`Previous`], [`StaleRules`], [`Refreshed`], capped at [`MAX_TTL`]), and
//! [`FormatInfo`], the same as a value for choosing a format at run time. Never: I/O, the
//! clock, or the meaning of any one format (that is its own module's, its stale rule
//! included).

use std::fmt::Debug;
use std::time::Duration;

use super::{Diagnostic, FetchOutcome, PolicyReport, RequestView, Settings, Source, SourceVerdict, Weigh};

/// One policy file format: everything the fetcher, the evaluator, `explain` and `lint`
/// need to know about it.
pub trait Format {
    /// What a fetch of the file leads to: the parsed file or what its absence means.
    type State: Clone + Debug + Weigh + Send + Sync + 'static;
    /// Where its reasons and limits come from; also its name in reports and the log.
    const SOURCE: Source;
    /// Its name on the command line (`lint --format`).
    const NAME: &'static str;
    /// Its path on the origin, and its file name in `explain --policy-dir` without the
    /// leading `/`. `lint` tells it by this name in lower case, also with a prefix such as
    /// `site.robots.txt`.
    const PATH: &'static str;
    /// A second location, fetched only when the state read at [`Format::PATH`]
    /// [falls through](Format::falls_through) (AGENTS.md's `/.well-known/agents.md`, C1).
    const FALLBACK_PATH: Option<&'static str> = None;
    /// The size cap: a fetch keeps at most this many bytes plus one (SEMANTICS X6).
    const MAX_BYTES: usize;
    /// True when every hop must stay on HTTPS (AGENTS.md, C2, C3).
    const HTTPS_ONLY: bool = false;

    /// The state a fetch outcome (or a file read from disk as one) leads to.
    fn from_fetch(outcome: &FetchOutcome) -> Self::State;

    /// For a file fetched only when a request needs it (tdmrep.json, SEMANTICS U5): its
    /// state until then. `None` (the default): every load fetches the file.
    fn unfetched() -> Option<Self::State> {
        None
    }

    /// True for the [`Format::unfetched`] state.
    fn is_unfetched(_state: &Self::State) -> bool {
        false
    }

    /// True when [`Format::FALLBACK_PATH`] is to be read after this state.
    fn falls_through(_state: &Self::State) -> bool {
        false
    }

    /// The state in force from the state at [`Format::PATH`] and, when it fell through,
    /// the one at [`Format::FALLBACK_PATH`]; `host` is the host the files came from.
    fn settle(first: Self::State, _fallback: Option<Self::State>, _host: &str) -> Self::State {
        first
    }

    /// The stale rule: which copy to serve after a re-fetch, the state just `fetched` or the
    /// `previous` one, and for how long; `ttl` is the RFC 9111 freshness lifetime of the new
    /// response (floored and capped by `fetch/`). By default every fetch replaces the cached
    /// state (automation-preferences.txt, D15).
    fn refresh(
        _previous: Option<Previous<Self::State>>,
        fetched: Self::State,
        ttl: Duration,
        _rules: &StaleRules,
    ) -> Refreshed<Self::State> {
        Refreshed::fetched(fetched, ttl)
    }

    /// This file's verdict on one request, under the operator's `settings`.
    fn evaluate(state: &Self::State, req: &RequestView<'_>, settings: Settings) -> SourceVerdict;

    /// Status, digest and findings of the file in force, for `explain`.
    fn report(state: &Self::State) -> PolicyReport;

    /// Every finding about a body, for `lint`.
    fn lint(body: &[u8]) -> Vec<Diagnostic>;
}

/// No state is kept longer than this before it is fetched again (B22, C5, D16).
pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The copy cached before a re-fetch, as a stale rule sees it.
#[derive(Debug, Clone)]
pub struct Previous<S> {
    /// The state that was in force.
    pub state: S,
    /// How long ago its freshness ran out. A copy already kept by a stale rule counts from
    /// when it first went stale, not from its last failed re-fetch.
    pub stale_for: Duration,
    /// The freshness lifetime it was fetched with.
    pub lifetime: Duration,
}

/// What a stale rule chose: the state to serve after a fetch, and how long until the file
/// is fetched again.
#[derive(Debug, Clone)]
pub struct Refreshed<S> {
    /// The state in force from now on.
    pub state: S,
    /// Time until the next fetch, at most [`MAX_TTL`].
    pub ttl: Duration,
    /// True when a stale rule kept the previous copy instead of the state just fetched;
    /// the cache then keeps counting its staleness from [`Previous::stale_for`].
    pub kept_stale: bool,
}

impl<S> Refreshed<S> {
    /// The state just fetched, for its own lifetime.
    pub fn fetched(state: S, ttl: Duration) -> Self {
        Refreshed { state, ttl: ttl.min(MAX_TTL), kept_stale: false }
    }

    /// The previous copy, kept for `ttl` more.
    pub fn kept(previous: Previous<S>, ttl: Duration) -> Self {
        Refreshed { state: previous.state, ttl: ttl.min(MAX_TTL), kept_stale: true }
    }
}

/// The operator's settings that stale rules read (`[cache]` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleRules {
    /// How long a restricted agents.txt verdict is kept (B20).
    pub agents_txt_negative_ttl: Duration,
}

/// A format as a value, for choosing one at run time (`lint`, the CLI).
#[derive(Debug, Clone, Copy)]
pub struct FormatInfo {
    /// [`Format::SOURCE`].
    pub source: Source,
    /// [`Format::NAME`].
    pub name: &'static str,
    /// [`Format::PATH`].
    pub path: &'static str,
    /// [`Format::MAX_BYTES`].
    pub max_bytes: usize,
    lint: fn(&[u8]) -> Vec<Diagnostic>,
}

impl FormatInfo {
    /// The value of format `F`.
    pub const fn of<F: Format>() -> Self {
        FormatInfo { source: F::SOURCE, name: F::NAME, path: F::PATH, max_bytes: F::MAX_BYTES, lint: F::lint }
    }

    /// The format named `name` on the command line.
    pub fn named(name: &str) -> Option<FormatInfo> {
        super::FORMATS.iter().find(|f| f.name == name).copied()
    }

    /// The file name the format is told by: its path without the `/`, in lower case.
    pub fn file_name(&self) -> String {
        self.path.trim_start_matches('/').to_ascii_lowercase()
    }

    /// [`Format::lint`].
    pub fn lint(&self, body: &[u8]) -> Vec<Diagnostic> {
        (self.lint)(body)
    }
}

impl PartialEq for FormatInfo {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for FormatInfo {}
