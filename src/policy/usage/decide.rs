//! The usage decision (SEMANTICS U1, U6, U7): an agent's declared purposes against every
//! preference that applied, from every source.
//!
//! A declared purpose (a vocabulary label, compared literally as D13 says) that any
//! preference refuses refuses the request: the most restrictive wins. An agent that
//! declared nothing is never refused under `undeclared = "record"`; under `"deny"` it is
//! treated as declaring every label. Every preference is kept, refusing or not, so the
//! record shows what the site said.
//!
//! Never: reads sources, or says how the refusal is answered (the gate does).

use super::{LABELS, Preference};

/// What `[usage] undeclared` says about an agent without a declared purpose (U7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Undeclared {
    /// Preferences are recorded, not enforced (the default).
    #[default]
    Record,
    /// The agent counts as declaring every label, so any "no" refuses it.
    Deny,
}

/// The outcome: every preference that applied, and which of them refuse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageVerdict {
    /// Every preference that applied, in source order (the `agentgate.usage` field).
    pub applied: Vec<Preference>,
    /// Indexes into `applied` of the preferences that refuse a purpose the agent declared.
    refusing: Vec<usize>,
    /// The purposes refused, each once, in vocabulary order.
    pub refused_purposes: Vec<&'static str>,
}

impl UsageVerdict {
    /// True when some declared purpose is refused (code `usage.refused`).
    pub fn is_refused(&self) -> bool {
        !self.refusing.is_empty()
    }

    /// The preferences that refuse a declared purpose: the reasons of a refusal.
    pub fn refusing(&self) -> impl Iterator<Item = &Preference> {
        self.refusing.iter().map(|&i| &self.applied[i])
    }
}

/// Decides `applied` for an agent declaring `declared`.
pub fn decide<S: AsRef<str>>(declared: &[S], undeclared: Undeclared, applied: Vec<Preference>) -> UsageVerdict {
    // Read in place, never collected: this runs for every response that states a preference.
    let every_label = declared.is_empty() && undeclared == Undeclared::Deny;
    let refuses_declared = |pref: &Preference| match every_label {
        true => LABELS.into_iter().any(|label| pref.refuses(label)),
        false => declared.iter().any(|purpose| pref.refuses(purpose.as_ref())),
    };
    let refusing: Vec<usize> =
        applied.iter().enumerate().filter(|(_, pref)| refuses_declared(pref)).map(|(i, _)| i).collect();
    let refused_purposes =
        LABELS.into_iter().filter(|label| refusing.iter().any(|&i| applied[i].refuses(label))).collect();
    UsageVerdict { applied, refusing, refused_purposes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::usage::tdmrep::header_preferences as tdm_header;
    use crate::policy::usage::vocab::header_preferences;
    use crate::policy::usage::{AI_INPUT, SEARCH, TRAIN_AI};

    fn site() -> Vec<Preference> {
        let mut prefs = header_preferences("train-ai=n, search=y");
        prefs.extend(tdm_header(Some("0"), None));
        prefs
    }

    #[test]
    fn a_declared_purpose_the_site_refuses_is_refused_with_its_reason() {
        let verdict = decide(&[TRAIN_AI], Undeclared::Record, site());
        assert!(verdict.is_refused());
        assert_eq!(verdict.refused_purposes, vec![TRAIN_AI]);
        let reasons: Vec<(&str, &str)> = verdict.refusing().map(|p| (&*p.label, &*p.value)).collect();
        assert_eq!(reasons, vec![("train-ai", "n")]);
        assert_eq!(verdict.applied.len(), 3, "every preference is kept");
    }

    #[test]
    fn the_most_restrictive_source_wins_over_an_allowing_one() {
        let mut prefs = tdm_header(Some("1"), None);
        prefs.extend(header_preferences("train-ai=y"));
        assert!(decide(&[TRAIN_AI], Undeclared::Record, prefs).is_refused());
    }

    #[test]
    fn a_training_refusal_does_not_refuse_search_or_answering() {
        assert!(!decide(&[SEARCH], Undeclared::Record, site()).is_refused());
        assert!(!decide(&[AI_INPUT], Undeclared::Record, site()).is_refused());
        assert!(decide(&[SEARCH, TRAIN_AI], Undeclared::Record, site()).is_refused());
    }

    #[test]
    fn an_agent_declaring_nothing_is_recorded_unless_undeclared_denies() {
        let verdict = decide::<&str>(&[], Undeclared::Record, site());
        assert!(!verdict.is_refused());
        assert_eq!(verdict.applied.len(), 3);
        let verdict = decide::<&str>(&[], Undeclared::Deny, site());
        assert!(verdict.is_refused());
        assert_eq!(verdict.refused_purposes, vec![TRAIN_AI]);
    }

    #[test]
    fn unknown_labels_and_purposes_are_never_enforced() {
        let prefs = header_preferences("genai=n, train-ai=\"n\"");
        assert!(!decide(&["genai", TRAIN_AI], Undeclared::Deny, prefs).is_refused());
    }

    #[test]
    fn no_preferences_allow() {
        let verdict = decide(&[TRAIN_AI], Undeclared::Deny, Vec::new());
        assert!(!verdict.is_refused());
        assert!(verdict.applied.is_empty());
    }
}
