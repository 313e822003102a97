//! `[[inspect.patterns]]`: one operator detector, its regular expression compiled when the
//! config is read (the `regex` crate's syntax, bounded in compiled size), so one that does
//! not compile is an error at its line.
//!
//! Never runs a pattern (`detect` does) or decides where it applies (`config`).

use std::fmt;

use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;

/// The most compiled program size one operator pattern may take (the regex crate's bound).
const PATTERN_SIZE_LIMIT: usize = 1024 * 1024;

/// `[[inspect.patterns]]`: one operator detector. The regular expression (the `regex`
/// crate's syntax) is compiled when the file is read; one that does not compile is an error
/// at its line.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "PatternText")]
pub struct PatternConfig {
    /// The detector's name, as findings show it.
    pub name: String,
    regex: Regex,
}

/// A pattern as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternText {
    name: String,
    regex: String,
}

impl TryFrom<PatternText> for PatternConfig {
    type Error = PatternError;

    fn try_from(text: PatternText) -> Result<Self, PatternError> {
        PatternConfig::new(&text.name, &text.regex)
    }
}

/// A `[[inspect.patterns]]` regex that does not compile.
#[derive(Debug)]
pub struct PatternError {
    name: String,
    cause: String,
}

impl fmt::Display for PatternError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[[inspect.patterns]] {:?}: regex does not compile ({}); write it in the regex crate's syntax, e.g. \"itok_[a-z0-9]{{32}}\"",
            self.name, self.cause
        )
    }
}

impl PatternConfig {
    /// A pattern named `name` matching `regex`.
    ///
    /// # Errors
    /// [`PatternError`] naming the pattern and why it does not compile (syntax, or over the
    /// 1 MiB compiled-size bound).
    pub fn new(name: &str, regex: &str) -> Result<Self, PatternError> {
        let compiled = RegexBuilder::new(regex)
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|error| PatternError { name: name.to_owned(), cause: error.to_string() })?;
        Ok(PatternConfig { name: name.to_owned(), regex: compiled })
    }

    /// The compiled regular expression.
    pub(crate) fn regex(&self) -> &Regex {
        &self.regex
    }
}

/// Two patterns are the same when their names and texts are.
impl PartialEq for PatternConfig {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.regex.as_str() == other.regex.as_str()
    }
}

impl Eq for PatternConfig {}
