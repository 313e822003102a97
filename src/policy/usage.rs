//! Usage preferences (SEMANTICS §6.6): what a site says its content may be *used* for, as
//! aipref `Content-Usage` (robots.txt rules and the response header), Content-Signal
//! (robots.txt) and TDMRep (`tdm-reservation` header, `/.well-known/tdmrep.json`), and the
//! decision for an agent's declared purposes.
//!
//! Owns: the one vocabulary (U2: `train-ai`, `search`, `ai-input`) and how each source's
//! labels and values map to it, the parsers of each source's syntax ([`vocab`],
//! [`robots_rules`], [`tdmrep`]), and [`decide()`] (U1, U6, U7).
//!
//! Never: fetches, reads a clock, logs, or decides where an agent may go (robots.txt
//! Allow/Disallow does; a preference never widens another source's refusal, U1).

pub mod decide;
pub mod robots_rules;
pub mod tdmrep;
pub mod vocab;

use super::Reason;
use super::code::{Advice, UsageCode};
use serde::Serialize;
use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

pub use self::decide::{Undeclared, UsageVerdict, decide};

/// The purposes agentgate knows (SEMANTICS U2): aipref's `train-ai` and `search`, and
/// `ai-input` (use as input to a model at answer time), which aipref has not named yet.
pub const LABELS: [&str; 3] = [TRAIN_AI, SEARCH, AI_INPUT];

/// AI model training (aipref vocab §4.1; Content-Signal `ai-train`; TDMRep's reservation).
pub const TRAIN_AI: &str = "train-ai";
/// Search (aipref vocab §4.2; Content-Signal `search`).
pub const SEARCH: &str = "search";
/// Use as input to a model when answering (Content-Signal `ai-input`).
pub const AI_INPUT: &str = "ai-input";

/// A label or value as a site wrote it. The vocabulary's own words are shared statics
/// ([`word`]), so a preference that states them costs no copy on the request path.
pub type Word = Cow<'static, str>;

/// The words sites write most: the labels of every dialect and the values that mean
/// something.
const WORDS: [&str; 13] =
    [TRAIN_AI, SEARCH, AI_INPUT, "ai-train", "tdm-reservation", "tdm-policy", "y", "n", "yes", "no", "?1", "0", "1"];

/// `text` as a [`Word`]: one of the common words borrowed, anything else copied.
pub fn word(text: &str) -> Word {
    match WORDS.into_iter().find(|known| *known == text) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(text.to_owned()),
    }
}

/// Where a stated preference comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum UsageSource {
    /// A `Content-Usage` line of robots.txt.
    #[serde(rename = "robots.txt Content-Usage")]
    RobotsContentUsage,
    /// A `Content-Signal` line of robots.txt.
    #[serde(rename = "robots.txt Content-Signal")]
    RobotsContentSignal,
    /// The `Content-Usage` response header.
    #[serde(rename = "header Content-Usage")]
    HeaderContentUsage,
    /// The `tdm-reservation` (or `tdm-policy`) response header.
    #[serde(rename = "header tdm-reservation")]
    HeaderTdm,
    /// `/.well-known/tdmrep.json`.
    #[serde(rename = "tdmrep.json")]
    TdmrepJson,
}

impl UsageSource {
    /// The name the log, block answers and `explain` use.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageSource::RobotsContentUsage => "robots.txt Content-Usage",
            UsageSource::RobotsContentSignal => "robots.txt Content-Signal",
            UsageSource::HeaderContentUsage => "header Content-Usage",
            UsageSource::HeaderTdm => "header tdm-reservation",
            UsageSource::TdmrepJson => "tdmrep.json",
        }
    }
}

impl fmt::Display for UsageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a stated value means for its purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Stance {
    /// `y`, `yes`, `tdm-reservation: 0`.
    Allow,
    /// `n`, `no`, `tdm-reservation: 1`.
    Refuse,
    /// Anything else, or a label outside the vocabulary: recorded, never enforced (U2).
    None,
}

impl Stance {
    /// The name the log and `explain` write.
    pub fn as_str(self) -> &'static str {
        match self {
            Stance::Allow => "allow",
            Stance::Refuse => "refuse",
            Stance::None => "none",
        }
    }
}

/// One preference a site stated, as it applies to a request: the `agentgate.usage` entry
/// of a decision record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Preference {
    /// The file or header it comes from.
    pub source: UsageSource,
    /// 1-based line in robots.txt; for tdmrep.json the 1-based entry of the array; none
    /// for a header.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    /// The path pattern or TDMRep location it was selected by, when it has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<Arc<str>>,
    /// The label as the site wrote it (`ai-train`, `train-ai`, `tdm-reservation`).
    pub label: Word,
    /// The vocabulary purpose the label stands for (U2); none for an unknown label.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub purpose: Option<&'static str>,
    /// The value as the site wrote it (`n`, `no`, `1`, `"n"`).
    pub value: Word,
    /// What the value means.
    pub stance: Stance,
}

impl Preference {
    /// True when this preference refuses `purpose`.
    pub fn refuses(&self, purpose: &str) -> bool {
        self.stance == Stance::Refuse && self.purpose == Some(purpose).and_then(known_label)
    }
}

/// The reasons of a refusal (code `usage.refused`), one per refusing preference, in
/// plain words: the source, line, label and value, which use the site refuses, and that
/// other purposes may be fine.
pub fn refusal_reasons(verdict: &UsageVerdict) -> Vec<Reason> {
    verdict
        .refusing()
        .map(|pref| {
            let purpose = pref.purpose.unwrap_or(&pref.label);
            let at = pref.path.as_deref().map(|p| format!(" for {p}")).unwrap_or_default();
            let rule = format!(
                "{}{at} says {}={}: the site refuses use for {purpose}; other purposes may be fine",
                pref.source, pref.label, pref.value
            );
            let reason = Reason::new(UsageCode::Refused, rule);
            match (pref.line, pref.source) {
                (Some(line), UsageSource::RobotsContentUsage | UsageSource::RobotsContentSignal) => {
                    reason.at_line(line)
                }
                _ => reason,
            }
        })
        .collect()
}

/// The preferences a response's headers state (U4): `Content-Usage` (its field lines
/// combined, RFC 9110 §5.3), then `tdm-reservation` and `tdm-policy`, as the response
/// carries them (`None` when absent).
pub fn response_preferences(
    content_usage: Option<&str>,
    tdm_reservation: Option<&str>,
    tdm_policy: Option<&str>,
) -> Vec<Preference> {
    let mut prefs = content_usage.map(vocab::header_preferences).unwrap_or_default();
    prefs.extend(tdmrep::header_preferences(tdm_reservation, tdm_policy));
    prefs
}

/// The vocabulary label for a declared purpose or a stated aipref label, when it is one.
pub fn known_label(label: &str) -> Option<&'static str> {
    LABELS.into_iter().find(|known| *known == label)
}

impl Advice for UsageCode {
    fn advice(self) -> &'static str {
        match self {
            UsageCode::Refused => {
                "The site says its content may not be used for a purpose you declared (the cited preference). Do not \
                 fetch it for that purpose. Other purposes may be fine: an agent that declares only purposes the site \
                 does not refuse is not blocked by this preference."
            }
        }
    }
}
