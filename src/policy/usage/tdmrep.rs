//! TDMRep (W3C Text and Data Mining Reservation Protocol, final community report):
//! `/.well-known/tdmrep.json` and what a reservation means (SEMANTICS U2, U5).
//!
//! The file is a JSON array of `{"location", "tdm-reservation", "tdm-policy"}`; `location`
//! is a path pattern with robots.txt's `*` and `$`; of the entries whose location matches
//! the path, the most specific (longest pattern) applies, the first written on a tie.
//! `tdm-reservation: 1` is a "no" for `train-ai` and says nothing of other purposes; `0`
//! is a "yes"; `tdm-policy` is kept for the log.
//!
//! As a policy file ([`TdmRepFile`], the fifth format) it is fetched only for an agent
//! that declares `train-ai` ([`wanted`]): until then its state is
//! [`TdmRepState::Unfetched`].
//!
//! Never: fetches (the fetcher does; 4xx or unreachable = no preference, U5) or decides.

use super::{Preference, Stance, TRAIN_AI, Undeclared, UsageSource, Word, word};
use crate::policy::code::Source;
use crate::policy::pattern::{Pattern, normalized_path};
use crate::policy::text::sha256_hex;
use crate::policy::{
    Diagnostic, FetchOutcome, Opinion, PolicyReport, PolicyStatus, RequestView, Settings, SourceVerdict, Weigh,
};
use serde::Deserialize;
use std::fmt;
use std::sync::Arc;

/// The largest tdmrep.json read, as for the other policy files' caps.
pub const MAX_BYTES: usize = 500 * 1024;

/// A parsed tdmrep.json.
#[derive(Debug, Clone, Default)]
pub struct TdmRep {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone)]
struct Entry {
    location: Pattern,
    written: Arc<str>,
    reservation: Option<i64>,
    policy: Option<String>,
}

#[derive(Deserialize)]
struct RawEntry {
    location: String,
    #[serde(rename = "tdm-reservation")]
    reservation: Option<serde_json::Value>,
    #[serde(rename = "tdm-policy")]
    policy: Option<String>,
}

/// A tdmrep.json that is not an array of objects with a `location`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedTdmRep {
    /// The JSON parser's message.
    pub why: String,
}

impl fmt::Display for MalformedTdmRep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "tdmrep.json is not a JSON array of {{\"location\", \"tdm-reservation\", \"tdm-policy\"}} objects \
             ({}), so it states no preference: fix the file as the W3C TDMRep report describes",
            self.why
        )
    }
}

impl std::error::Error for MalformedTdmRep {}

impl TdmRep {
    /// Parses the body (the first [`MAX_BYTES`]; a longer file is malformed JSON there).
    pub fn parse(body: &[u8]) -> Result<Self, MalformedTdmRep> {
        let body = &body[..body.len().min(MAX_BYTES)];
        let raw: Vec<RawEntry> = serde_json::from_slice(body).map_err(|e| MalformedTdmRep { why: e.to_string() })?;
        let entries = raw
            .into_iter()
            .map(|entry| Entry {
                location: Pattern::new(&entry.location),
                reservation: entry.reservation.as_ref().and_then(reservation_number),
                written: entry.location.into(),
                policy: entry.policy,
            })
            .collect();
        Ok(TdmRep { entries })
    }

    /// The preferences of the most specific entry matching `path` (path and query).
    pub fn preferences(&self, path: &str) -> Vec<Preference> {
        let path = normalized_path(path);
        let best = self.entries.iter().enumerate().filter(|(_, entry)| entry.location.matches_normalized(&path)).fold(
            None::<(usize, &Entry)>,
            |best, (index, entry)| match best {
                Some((_, kept)) if kept.location.specificity() >= entry.location.specificity() => best,
                _ => Some((index, entry)),
            },
        );
        let Some((index, entry)) = best else { return Vec::new() };
        let line = u32::try_from(index + 1).ok();
        let at = |label: &'static str, value: Word, stance: Stance, purpose: Option<&'static str>| Preference {
            source: UsageSource::TdmrepJson,
            line,
            path: Some(entry.written.clone()),
            label: Word::Borrowed(label),
            purpose,
            value,
            stance,
        };
        let mut prefs = Vec::with_capacity(2);
        if let Some(reservation) = entry.reservation {
            prefs.push(at("tdm-reservation", word(&reservation.to_string()), stance(reservation), Some(TRAIN_AI)));
        }
        if let Some(policy) = &entry.policy {
            prefs.push(at("tdm-policy", Word::Owned(policy.clone()), Stance::None, None));
        }
        prefs
    }
}

/// The preferences of the `tdm-reservation` and `tdm-policy` response headers.
pub fn header_preferences(reservation: Option<&str>, policy: Option<&str>) -> Vec<Preference> {
    if reservation.is_none() && policy.is_none() {
        return Vec::new();
    }
    let at = |label: &'static str, value: &str, stance: Stance, purpose: Option<&'static str>| Preference {
        source: UsageSource::HeaderTdm,
        line: None,
        path: None,
        label: Word::Borrowed(label),
        purpose,
        value: word(value),
        stance,
    };
    let mut prefs = Vec::with_capacity(2);
    if let Some(value) = reservation {
        let value = value.trim();
        let meaning = value.parse::<i64>().map(stance).unwrap_or(Stance::None);
        prefs.push(at("tdm-reservation", value, meaning, Some(TRAIN_AI)));
    }
    if let Some(value) = policy {
        prefs.push(at("tdm-policy", value.trim(), Stance::None, None));
    }
    prefs
}

/// True when a request declaring `declared` needs tdmrep.json (U5): it declares `train-ai`,
/// or declares nothing under `[usage] undeclared = "deny"` (which counts every label).
pub fn wanted<S: AsRef<str>>(declared: &[S], undeclared: Undeclared) -> bool {
    match declared.is_empty() {
        true => undeclared == Undeclared::Deny,
        false => declared.iter().any(|purpose| purpose.as_ref() == TRAIN_AI),
    }
}

/// What a fetch of `/.well-known/tdmrep.json` led to.
#[derive(Debug, Clone)]
pub enum TdmRepState {
    /// Not fetched: no request that needs it ([`wanted`]) came for this origin yet.
    Unfetched,
    /// Fetched: the file when it parsed (a 4xx, 5xx, failure or malformed file states no
    /// preference, U5), and its report.
    Fetched {
        /// The parsed file, if any.
        file: Option<Arc<TdmRep>>,
        /// Status, digest and findings, for `explain` and `/policies`.
        report: PolicyReport,
    },
}

impl TdmRepState {
    /// The state of a fetch outcome: a 2xx body parsed, anything else no file.
    pub fn from_fetch(outcome: &FetchOutcome) -> Self {
        let body = match outcome {
            FetchOutcome::Response { status: 200..=299, body, .. } => body,
            FetchOutcome::Response { .. } | FetchOutcome::Failed(_) => {
                return TdmRepState::Fetched { file: None, report: PolicyReport::absent() };
            }
        };
        let digest = Some(Arc::from(sha256_hex(body)));
        match TdmRep::parse(body) {
            Ok(file) => TdmRepState::Fetched {
                file: Some(Arc::new(file)),
                report: PolicyReport { status: PolicyStatus::Valid, digest, diagnostics: Vec::new() },
            },
            Err(malformed) => TdmRepState::Fetched {
                file: None,
                report: PolicyReport { status: PolicyStatus::Malformed, digest, diagnostics: lint_error(&malformed) },
            },
        }
    }

    /// The usage decision for one request: the preferences of the entry matching its path
    /// against its declared purposes (U1, U6); no opinion unless one refuses.
    pub fn evaluate(&self, req: &RequestView<'_>, undeclared: Undeclared) -> SourceVerdict {
        let TdmRepState::Fetched { file: Some(file), .. } = self else { return SourceVerdict::no_opinion() };
        let applied = file.preferences(req.path_and_query);
        if applied.is_empty() {
            return SourceVerdict::no_opinion();
        }
        let decided = super::decide(req.purposes, undeclared, applied);
        let mut verdict = SourceVerdict::no_opinion();
        if decided.is_refused() {
            verdict.opinion = Opinion::Deny;
            verdict.reasons = super::refusal_reasons(&decided).into();
        }
        verdict.usage = decided.applied;
        verdict
    }

    /// What `explain` and `/policies` show: not fetched yet is absent, with a note saying why.
    pub fn report(&self) -> PolicyReport {
        match self {
            TdmRepState::Fetched { report, .. } => report.clone(),
            TdmRepState::Unfetched => PolicyReport {
                diagnostics: vec![Diagnostic::warning(
                    None,
                    "not-fetched",
                    "not fetched: tdmrep.json is fetched only for an agent that declares `train-ai`",
                )],
                ..PolicyReport::absent()
            },
        }
    }
}

fn lint_error(malformed: &MalformedTdmRep) -> Vec<Diagnostic> {
    vec![Diagnostic::error(None, "malformed", malformed.to_string())]
}

impl Weigh for TdmRepState {
    fn heap_bytes(&self) -> usize {
        match self {
            TdmRepState::Unfetched => 0,
            TdmRepState::Fetched { file, report } => {
                let entries = file.as_ref().map_or(0, |file| {
                    crate::policy::weight::allocation(file.entries.capacity() * std::mem::size_of::<Entry>())
                        + file
                            .entries
                            .iter()
                            .map(|e| e.location.heap_bytes() + e.written.heap_bytes() + e.policy.heap_bytes())
                            .sum::<usize>()
                });
                entries + report.heap_bytes()
            }
        }
    }
}

/// `/.well-known/tdmrep.json` as a [`crate::policy::Format`] (U5): fetched only when a
/// request needs it, as [`wanted`] says; every fetch replaces the cached state.
#[derive(Debug, Clone, Copy)]
pub struct TdmRepFile;

impl crate::policy::Format for TdmRepFile {
    type State = TdmRepState;
    const SOURCE: Source = Source::Tdmrep;
    const NAME: &'static str = "tdmrep";
    const PATH: &'static str = "/.well-known/tdmrep.json";
    const MAX_BYTES: usize = MAX_BYTES;

    fn from_fetch(outcome: &FetchOutcome) -> TdmRepState {
        TdmRepState::from_fetch(outcome)
    }

    fn unfetched() -> Option<TdmRepState> {
        Some(TdmRepState::Unfetched)
    }

    fn is_unfetched(state: &TdmRepState) -> bool {
        matches!(state, TdmRepState::Unfetched)
    }

    #[inline]
    fn evaluate(state: &TdmRepState, req: &RequestView<'_>, settings: Settings) -> SourceVerdict {
        state.evaluate(req, settings.usage_undeclared)
    }

    fn report(state: &TdmRepState) -> PolicyReport {
        state.report()
    }

    fn lint(body: &[u8]) -> Vec<Diagnostic> {
        TdmRep::parse(body).err().map(|malformed| lint_error(&malformed)).unwrap_or_default()
    }
}

/// `1` reserves (a "no" for training), `0` does not; anything else states nothing.
fn stance(reservation: i64) -> Stance {
    match reservation {
        1 => Stance::Refuse,
        0 => Stance::Allow,
        _ => Stance::None,
    }
}

/// TDMRep writes the reservation as the number 0 or 1; a string "1" is read too.
fn reservation_number(value: &serde_json::Value) -> Option<i64> {
    match value {
        serde_json::Value::Number(n) => n.as_i64(),
        serde_json::Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"[
        {"location": "/", "tdm-reservation": 0},
        {"location": "/books/*", "tdm-reservation": 1, "tdm-policy": "https://example.com/policy.json"},
        {"location": "/books/free/*", "tdm-reservation": 0}
    ]"#;

    fn summary(path: &str) -> Vec<(Option<u32>, String, String, Stance)> {
        let file = TdmRep::parse(FILE.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        file.preferences(path)
            .into_iter()
            .map(|p| (p.line, p.label.into_owned(), p.value.into_owned(), p.stance))
            .collect()
    }

    #[test]
    fn the_most_specific_matching_location_applies() {
        assert_eq!(summary("/index.html"), vec![(Some(1), "tdm-reservation".into(), "0".into(), Stance::Allow)]);
        assert_eq!(
            summary("/books/a"),
            vec![
                (Some(2), "tdm-reservation".into(), "1".into(), Stance::Refuse),
                (Some(2), "tdm-policy".into(), "https://example.com/policy.json".into(), Stance::None),
            ]
        );
        assert_eq!(summary("/books/free/a"), vec![(Some(3), "tdm-reservation".into(), "0".into(), Stance::Allow)]);
    }

    #[test]
    fn a_reservation_refuses_training_only() {
        let prefs = TdmRep::parse(FILE.as_bytes()).map(|f| f.preferences("/books/a")).unwrap_or_default();
        assert!(prefs[0].refuses(TRAIN_AI));
        assert!(!prefs[0].refuses(crate::policy::usage::SEARCH));
    }

    #[test]
    fn no_matching_location_states_nothing() {
        let file = TdmRep::parse(br#"[{"location": "/a/", "tdm-reservation": 1}]"#).unwrap_or_default();
        assert!(file.preferences("/b").is_empty());
    }

    #[test]
    fn malformed_files_are_errors_that_name_the_fix() {
        for body in [&b"{}"[..], b"not json", br#"[{"tdm-reservation": 1}]"#] {
            let message = TdmRep::parse(body).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(message.contains("W3C TDMRep"), "{message}");
        }
    }

    #[test]
    fn the_file_is_wanted_for_training_or_for_nothing_declared_under_deny() {
        assert!(wanted(&["search", "train-ai"], Undeclared::Record));
        assert!(!wanted(&["search", "ai-input"], Undeclared::Deny));
        assert!(!wanted::<&str>(&[], Undeclared::Record));
        assert!(wanted::<&str>(&[], Undeclared::Deny));
    }

    #[test]
    fn headers_map_reservation_and_keep_the_policy() {
        let prefs = header_preferences(Some(" 1 "), Some("https://example.com/p"));
        assert_eq!(prefs.len(), 2);
        assert!(prefs[0].refuses(TRAIN_AI));
        assert_eq!(prefs[1].stance, Stance::None);
        assert_eq!(header_preferences(Some("0"), None)[0].stance, Stance::Allow);
        assert_eq!(header_preferences(Some("yes"), None)[0].stance, Stance::None);
        assert!(header_preferences(None, None).is_empty());
    }
}
