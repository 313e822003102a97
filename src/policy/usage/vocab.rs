//! The two dictionary syntaxes: aipref's statement of preference (draft-ietf-aipref-vocab
//! §6–7: an RFC 9651 Dictionary whose Token values `y`/`n` allow or refuse a label) and
//! Content-Signal's (`search=yes, ai-train=no`, the same Dictionary syntax with `yes`/`no`
//! and Content-Signal's label names), both parsed by the `sfv` crate, never by hand.
//!
//! RFC 9651 rules apply as written: a repeated key keeps its last value (vocab §7.1 "only
//! the last value applies"), parameters are ignored, a value that is not a Token
//! (a quoted string, a number, a bare key's `true`) states no preference but is kept, and
//! so are unknown labels (U2).
//!
//! Never: decides; says which source a dictionary came from (callers stamp that).

use super::{AI_INPUT, Preference, SEARCH, Stance, TRAIN_AI, UsageSource, Word, known_label, word};
use sfv::visitor::{DictionaryVisitor, EntryVisitor, Ignored, InnerListVisitor, ItemVisitor, ParameterVisitor};
use sfv::{BareItem, BareItemFromInput, KeyRef, Parser};
use smallvec::SmallVec;
use std::convert::Infallible;
use std::fmt;

/// Which syntax a value is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// aipref: labels `train-ai`, `search`; values `y`, `n`.
    Aipref,
    /// Content-Signal: labels `ai-train`, `search`, `ai-input`; values `yes`, `no`.
    ContentSignal,
}

/// The members of one statement, in dictionary order; a few held inline.
pub type Statement = SmallVec<[Stated; 4]>;

/// One member of a parsed dictionary: the label and value as written, and what they mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stated {
    /// The key as written.
    pub label: Word,
    /// The vocabulary purpose it stands for (U2), if any.
    pub purpose: Option<&'static str>,
    /// The value in RFC 9651 serialisation (`n`, `"n"`, `?1`, `(a b)`).
    pub value: Word,
    /// What it means.
    pub stance: Stance,
}

/// A value that is not an RFC 9651 Dictionary: no preference is read from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedPreferences {
    /// The value as written.
    pub value: String,
    /// The parser's message.
    pub why: String,
    /// The syntax expected.
    pub dialect: Dialect,
}

impl fmt::Display for MalformedPreferences {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let example = match self.dialect {
            Dialect::Aipref => "train-ai=n, search=y",
            Dialect::ContentSignal => "search=yes, ai-train=no",
        };
        write!(
            f,
            "`{}` is not a structured-field dictionary ({}), so it states no preference: write it as `{example}`",
            self.value, self.why
        )
    }
}

impl std::error::Error for MalformedPreferences {}

/// Parses a statement of preference in `dialect`, in dictionary order (a repeated key at
/// the position of its first occurrence, with its last value). `sfv` parses and hands each
/// member to `Members` as it goes: no dictionary is built, and the vocabulary's words are
/// not copied (`word`). A statement's few members are held inline: a response's
/// `Content-Usage` is parsed on every request that has one.
pub fn parse(value: &str, dialect: Dialect) -> Result<Statement, MalformedPreferences> {
    let members = Members { dialect, stated: Statement::new() };
    Parser::new(value.trim()).parse_dictionary_with_visitor(members).map_err(|error| MalformedPreferences {
        value: value.to_string(),
        why: error.to_string(),
        dialect,
    })
}

/// The preferences of a `Content-Usage` response header (attach §3); a malformed value
/// states none.
pub fn header_preferences(value: &str) -> Vec<Preference> {
    parse(value, Dialect::Aipref)
        .unwrap_or_default()
        .into_iter()
        .map(|stated| Preference {
            source: UsageSource::HeaderContentUsage,
            line: None,
            path: None,
            label: stated.label,
            purpose: stated.purpose,
            value: stated.value,
            stance: stated.stance,
        })
        .collect()
}

/// The vocabulary purpose of a label in a dialect (U2).
fn purpose_of(label: &str, dialect: Dialect) -> Option<&'static str> {
    match (dialect, label) {
        (Dialect::ContentSignal, "ai-train") => Some(TRAIN_AI),
        (Dialect::ContentSignal, "search") => Some(SEARCH),
        (Dialect::ContentSignal, "ai-input") => Some(AI_INPUT),
        (Dialect::ContentSignal, _) => None,
        (Dialect::Aipref, label) => known_label(label),
    }
}

/// The members of a dictionary as `sfv` parses them (RFC 9651 §4.2.2: a repeated key keeps
/// its first position and takes the last value).
struct Members {
    dialect: Dialect,
    stated: Statement,
}

impl<'de> DictionaryVisitor<'de> for Members {
    type Out = Statement;
    type Error = Infallible;

    fn entry(&mut self, key: &'de KeyRef) -> Result<impl EntryVisitor<'de>, Infallible> {
        let label = key.as_str();
        let index = match self.stated.iter().position(|stated| stated.label == label) {
            Some(index) => index,
            None => {
                let purpose = purpose_of(label, self.dialect);
                let value = Word::Borrowed("");
                self.stated.push(Stated { label: word(label), purpose, value, stance: Stance::None });
                self.stated.len() - 1
            }
        };
        Ok(Member { stated: &mut self.stated[index], dialect: self.dialect })
    }

    fn finish(self) -> Result<Statement, Infallible> {
        Ok(self.stated)
    }
}

/// One member's value, written into its [`Stated`].
struct Member<'a> {
    stated: &'a mut Stated,
    dialect: Dialect,
}

impl<'de> EntryVisitor<'de> for Member<'_> {
    type Error = Infallible;

    fn item(self) -> Result<impl ItemVisitor<'de>, Infallible> {
        Ok(move |item: BareItemFromInput<'de>| {
            let token = match &item {
                BareItemFromInput::Token(token) => Some(token.as_str()),
                _ => None,
            };
            let stance = match (self.dialect, token) {
                (Dialect::Aipref, Some("y")) | (Dialect::ContentSignal, Some("yes")) => Stance::Allow,
                (Dialect::Aipref, Some("n")) | (Dialect::ContentSignal, Some("no")) => Stance::Refuse,
                _ => Stance::None,
            };
            self.stated.stance = if self.stated.purpose.is_some() { stance } else { Stance::None };
            self.stated.value = render(item);
            Ok::<_, Infallible>(Ignored)
        })
    }

    fn inner_list(self) -> Result<impl InnerListVisitor<'de>, Infallible> {
        self.stated.stance = Stance::None;
        Ok(InnerList { stated: self.stated, items: String::new() })
    }
}

/// An inner list's items, rendered `(a b)` into its member's value once it ends.
struct InnerList<'a> {
    stated: &'a mut Stated,
    items: String,
}

impl<'de> InnerListVisitor<'de> for InnerList<'_> {
    type Error = Infallible;

    fn item(&mut self) -> Result<impl ItemVisitor<'de>, Infallible> {
        Ok(|item: BareItemFromInput<'de>| {
            if !self.items.is_empty() {
                self.items.push(' ');
            }
            self.items.push_str(&render(item));
            Ok::<_, Infallible>(Ignored)
        })
    }

    fn finish(self) -> Result<impl ParameterVisitor<'de>, Infallible> {
        self.stated.value = Word::Owned(format!("({})", self.items));
        Ok(Ignored)
    }
}

/// An item's value in RFC 9651 serialisation, parameters left out (they carry no meaning).
fn render(item: BareItemFromInput<'_>) -> Word {
    match item {
        BareItemFromInput::Token(token) => word(token.as_str()),
        BareItemFromInput::Boolean(true) => Word::Borrowed("?1"),
        item => Word::Owned(render_bare(&BareItem::from(item))),
    }
}

fn render_bare(item: &BareItem) -> String {
    match item {
        BareItem::Token(token) => token.as_str().to_string(),
        BareItem::String(string) => format!("{:?}", string.as_str()),
        BareItem::Boolean(true) => "?1".to_string(),
        BareItem::Boolean(false) => "?0".to_string(),
        BareItem::Integer(n) => n.to_string(),
        BareItem::Decimal(d) => d.to_string(),
        BareItem::ByteSequence(bytes) => format!(":{} bytes:", bytes.len()),
        BareItem::Date(date) => date.to_string(),
        BareItem::DisplayString(text) => format!("%{text:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stances(value: &str, dialect: Dialect) -> Vec<(String, Option<&'static str>, String, Stance)> {
        parse(value, dialect)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|s| (s.label.into_owned(), s.purpose, s.value.into_owned(), s.stance))
            .collect()
    }

    #[test]
    fn aipref_y_and_n_allow_and_refuse_their_labels() {
        assert_eq!(
            stances("train-ai=n, search=y", Dialect::Aipref),
            vec![
                ("train-ai".into(), Some(TRAIN_AI), "n".into(), Stance::Refuse),
                ("search".into(), Some(SEARCH), "y".into(), Stance::Allow),
            ]
        );
    }

    #[test]
    fn a_repeated_key_keeps_its_last_value_as_rfc_9651_says() {
        assert_eq!(
            stances("train-ai=y, search=y, train-ai=n", Dialect::Aipref),
            vec![
                ("train-ai".into(), Some(TRAIN_AI), "n".into(), Stance::Refuse),
                ("search".into(), Some(SEARCH), "y".into(), Stance::Allow),
            ]
        );
    }

    #[test]
    fn parameters_are_ignored() {
        assert_eq!(
            stances("train-ai=n;until=2027;why=\"x\"", Dialect::Aipref),
            vec![("train-ai".into(), Some(TRAIN_AI), "n".into(), Stance::Refuse)]
        );
    }

    #[test]
    fn a_quoted_value_states_no_preference_but_is_kept() {
        assert_eq!(
            stances("train-ai=\"n\", search", Dialect::Aipref),
            vec![
                ("train-ai".into(), Some(TRAIN_AI), "\"n\"".into(), Stance::None),
                ("search".into(), Some(SEARCH), "?1".into(), Stance::None),
            ]
        );
    }

    #[test]
    fn unknown_labels_are_kept_and_never_enforced() {
        assert_eq!(
            stances("genai=n, train-ai=y", Dialect::Aipref),
            vec![
                ("genai".into(), None, "n".into(), Stance::None),
                ("train-ai".into(), Some(TRAIN_AI), "y".into(), Stance::Allow),
            ]
        );
    }

    #[test]
    fn labels_are_case_sensitive_tokens_so_uppercase_is_malformed() {
        assert!(parse("Train-AI=n", Dialect::Aipref).is_err());
    }

    #[test]
    fn aipref_values_other_than_y_and_n_state_nothing() {
        assert_eq!(
            stances("train-ai=no", Dialect::Aipref),
            vec![("train-ai".into(), Some(TRAIN_AI), "no".into(), Stance::None)]
        );
    }

    #[test]
    fn content_signal_maps_ai_train_search_and_ai_input() {
        assert_eq!(
            stances("search=yes, ai-train=no, ai-input=no", Dialect::ContentSignal),
            vec![
                ("search".into(), Some(SEARCH), "yes".into(), Stance::Allow),
                ("ai-train".into(), Some(TRAIN_AI), "no".into(), Stance::Refuse),
                ("ai-input".into(), Some(AI_INPUT), "no".into(), Stance::Refuse),
            ]
        );
    }

    #[test]
    fn content_signal_does_not_read_aipref_labels_or_values() {
        assert_eq!(
            stances("train-ai=no, search=y", Dialect::ContentSignal),
            vec![
                ("train-ai".into(), None, "no".into(), Stance::None),
                ("search".into(), Some(SEARCH), "y".into(), Stance::None),
            ]
        );
    }

    #[test]
    fn a_malformed_dictionary_is_an_error_naming_the_value_and_the_fix() {
        let err = parse("search=yes ai-train=no", Dialect::ContentSignal).err();
        let message = err.map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("`search=yes ai-train=no`"), "{message}");
        assert!(message.contains("search=yes, ai-train=no"), "{message}");
        assert!(parse("train-ai=n,", Dialect::Aipref).is_err());
    }

    #[test]
    fn the_header_states_aipref_preferences_and_a_malformed_one_none() {
        let prefs = header_preferences("train-ai=n");
        assert_eq!(prefs.len(), 1);
        assert_eq!(prefs[0].source, UsageSource::HeaderContentUsage);
        assert!(prefs[0].refuses(TRAIN_AI));
        assert!(header_preferences("train-ai=n search=y").is_empty());
    }

    #[test]
    fn values_other_than_tokens_are_kept_in_rfc_9651_serialisation() {
        assert_eq!(
            stances("train-ai=(a \"b\");x=1, search=?0, genai=2.5, x=:aGk=:, y=-7, ai-input", Dialect::Aipref),
            vec![
                ("train-ai".into(), Some(TRAIN_AI), "(a \"b\")".into(), Stance::None),
                ("search".into(), Some(SEARCH), "?0".into(), Stance::None),
                ("genai".into(), None, "2.5".into(), Stance::None),
                ("x".into(), None, ":2 bytes:".into(), Stance::None),
                ("y".into(), None, "-7".into(), Stance::None),
                ("ai-input".into(), Some(AI_INPUT), "?1".into(), Stance::None),
            ]
        );
    }

    #[test]
    fn a_repeated_key_takes_the_last_value_whatever_its_kind() {
        assert_eq!(
            stances("train-ai=(n), search=y, train-ai=n, search=\"y\"", Dialect::Aipref),
            vec![
                ("train-ai".into(), Some(TRAIN_AI), "n".into(), Stance::Refuse),
                ("search".into(), Some(SEARCH), "\"y\"".into(), Stance::None),
            ]
        );
    }

    #[test]
    fn an_empty_value_states_nothing() {
        assert_eq!(stances("", Dialect::Aipref), vec![]);
    }
}
