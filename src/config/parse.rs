//! A config file's TOML read into [`Config`] with every problem a parse can find in one run.
//!
//! The text is parsed once into spanned tables (a TOML syntax error stops here: the parser
//! reports one). Then the tables are deserialized into [`Config`] again and again, each time
//! without the entry the previous error was in (the innermost key, or `[[array]]` entry, at
//! its position), so a type error, an unknown key or a bad value never hides the next one;
//! what is left out takes its default. Every problem is located at `file:line:column` and
//! shows the table and the line it is on.
//!
//! Never: validates what parsed (that is `Config::problems`), or opens a file the config names.

use std::ops::Range;

use serde::Deserialize;
use toml::Spanned;
use toml::de::{DeArray, DeTable, DeValue};

use super::{Config, ConfigError, Problem};

/// More problems than this and the rest are not worth reading before fixing these.
const MAX_PROBLEMS: usize = 100;

/// A file's text parsed into [`Config`], with what did not parse.
pub(super) struct Parsed<'i> {
    text: &'i str,
    origin: &'i str,
    /// The file's tables, without the entries that did not parse.
    document: DeTable<'i>,
    /// The config, every entry that did not parse left at its default; `None` when an
    /// error could not be pinned to an entry (or there were too many), so nothing is left to
    /// validate.
    pub(super) config: Option<Config>,
    /// Each problem with the byte offset it is at, for file order.
    located: Vec<(usize, Problem)>,
}

impl<'i> Parsed<'i> {
    /// Parses `text` (from `origin`, the file name in messages).
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] when `text` is not TOML.
    pub(super) fn new(text: &'i str, origin: &'i str) -> Result<Parsed<'i>, ConfigError> {
        let document = DeTable::parse(text).map_err(|error| {
            let message = error.message().trim_end_matches('\n').trim_end_matches('.');
            match error.span() {
                Some(span) => {
                    let Problem { location, message } = locate(text, origin, span.start, message);
                    ConfigError::Syntax { location: location.unwrap_or_default(), message }
                }
                None => ConfigError::Syntax { location: origin.to_owned(), message: message.to_owned() },
            }
        })?;
        let span = document.span();
        let mut document = document.into_inner();
        let mut located = Vec::new();
        // Keys taken out, with the span of the table they were in: the `missing field` error
        // that taking out a required key causes is not the file's problem.
        let mut removed: Vec<(Range<usize>, String)> = Vec::new();
        let config = loop {
            let tables = toml::de::Deserializer::from(Spanned::new(span.clone(), document.clone()));
            let error = match Config::deserialize(tables) {
                Ok(config) => break Some(config),
                Err(error) => error,
            };
            let message = error.message().trim_end_matches('\n').trim_end_matches('.');
            let Some(at) = error.span().map(|span| span.start) else {
                located.push((text.len(), Problem { location: Some(origin.to_owned()), message: message.to_owned() }));
                break None;
            };
            let taken_out = message
                .strip_prefix("missing field `")
                .and_then(|rest| rest.strip_suffix('`'))
                .is_some_and(|key| removed.iter().any(|(table, name)| name == key && table.contains(&at)));
            if !taken_out {
                located.push((at, locate(text, origin, at, message)));
            }
            match remove_at(&mut document, &span, at) {
                Some(entry) if located.len() < MAX_PROBLEMS => removed.push(entry),
                _ => break None,
            }
        };
        located.sort_by_key(|(at, _)| *at);
        Ok(Parsed { text, origin, document, config, located })
    }

    /// The config, or every problem: first those at a place in the file, in file order, then
    /// the semantic problems of what parsed (each naming its key).
    pub(super) fn into_config(mut self) -> Result<Config, ConfigError> {
        let mut problems: Vec<Problem> = self.located.into_iter().map(|(_, problem)| problem).collect();
        if let Some(config) = &mut self.config {
            // The egress lists name their file and line in every refusal (`setting::Located`).
            for agent in std::iter::once(&mut config.agent).chain(&mut config.agents) {
                agent.locate(self.text, self.origin);
            }
            // Each secret's value is read with the config, so a reload reads it again.
            for (i, secret) in config.secrets.iter_mut().enumerate() {
                if let Err(message) = secret.load_value(i + 1) {
                    problems.push(Problem { location: None, message });
                }
            }
            // A problem inside an `[[agents]]` entry points at that entry's header.
            problems.extend(config.problems().into_iter().map(|message| Problem {
                location: agents_entry_line(self.text, &message).map(|line| format!("{}:{line}:1", self.origin)),
                message,
            }));
        }
        match self.config {
            Some(config) if problems.is_empty() => Ok(config),
            _ => Err(ConfigError::Invalid { origin: self.origin.to_owned(), problems }),
        }
    }

    /// Adds a problem at entry `index` of the array `table.key` (e.g. `upstream`,
    /// `extra_ca_files`), or at the key when the value is not an array.
    pub(super) fn problem_at_entry(&mut self, table: &str, key: &str, index: usize, message: &str) {
        let value = self.document.get(table).and_then(|t| t.get_ref().as_table()).and_then(|t| t.get(key));
        let at = match value.map(|v| (v.get_ref(), v.span())) {
            Some((DeValue::Array(items), span)) => items.get(index).map_or(span.start, |item| item.span().start),
            Some((_, span)) => span.start,
            None => {
                self.located.push((self.text.len(), Problem { location: None, message: message.to_owned() }));
                return;
            }
        };
        self.located.push((at, locate(self.text, self.origin, at, message)));
        self.located.sort_by_key(|(at, _)| *at);
    }
}

/// Takes out of `table` (spanning `span`) the innermost entry at byte offset `at`: a key
/// whose key or value is there, a table in an array of tables whose header is there, or a
/// whole table whose header is there. Returns the span of the table the entry was in and
/// the entry's key, or `None` when no entry is at `at`.
///
/// A table's span is its header (`[upstream]`) or, inline, its braces; its keys may be
/// anywhere below, so every table is searched, not only the one whose span holds `at`.
fn remove_at(table: &mut DeTable<'_>, span: &Range<usize>, at: usize) -> Option<(Range<usize>, String)> {
    let mut here = None;
    for (key, value) in table.iter_mut() {
        let value_span = value.span();
        match value.get_mut() {
            DeValue::Table(inner) => {
                if let Some(found) = remove_at(inner, &value_span, at) {
                    return Some(found);
                }
            }
            DeValue::Array(items) => {
                for item in items.iter_mut() {
                    let item_span = item.span();
                    if let DeValue::Table(inner) = item.get_mut()
                        && let Some(found) = remove_at(inner, &item_span, at)
                    {
                        return Some(found);
                    }
                }
                let header = items.iter().position(|item| item.get_ref().is_table() && item.span().contains(&at));
                if let Some(index) = header {
                    let item_span = items.get(index).map(Spanned::span).unwrap_or_default();
                    let mut rest = DeArray::new();
                    for (i, item) in items.iter().enumerate() {
                        if i != index {
                            rest.push(item.clone());
                        }
                    }
                    *items = rest;
                    return Some((item_span, key.get_ref().to_string()));
                }
            }
            _ => {}
        }
        if here.is_none() && (key.span().contains(&at) || value_span.contains(&at)) {
            here = Some(key.get_ref().to_string());
        }
    }
    let key = here?;
    table.remove(key.as_str());
    Some((span.clone(), key))
}

/// The line of the `[[agents]]` header a problem names (`[[agents]] #2 ...`): the `n`th
/// such header of `text`, 1-based.
fn agents_entry_line(text: &str, message: &str) -> Option<usize> {
    let rest = message.strip_prefix("[[agents]] #")?;
    let n: usize = rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()?;
    let headers = text.lines().enumerate().filter(|(_, line)| line.trim_start().starts_with("[[agents]]"));
    headers.map(|(i, _)| i + 1).nth(n.checked_sub(1)?)
}

/// `message` at byte offset `at` of `text`: `origin:line:column`, and the message prefixed
/// with the line as written (up to 120 characters) and the table header above it.
pub(super) fn locate(text: &str, origin: &str, at: usize, message: &str) -> Problem {
    let at = at.min(text.len());
    let at = (0..=at).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(0);
    let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[at..].find('\n').map_or(text.len(), |i| at + i);
    let line = text[..at].matches('\n').count() + 1;
    let column = text[line_start..at].chars().count() + 1;
    let source_line = text[line_start..line_end].trim();
    // The table header above the line says which `listen` or `path` this is.
    let table = text[..line_start]
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('[') && !source_line.starts_with('['))
        .map(|header| format!("{} ", header.split('#').next().unwrap_or(header).trim()))
        .unwrap_or_default();
    let shown: String = source_line.chars().take(120).collect();
    Problem { location: Some(format!("{origin}:{line}:{column}")), message: format!("{table}{shown}: {message}") }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError, Problem};

    fn problems(text: &str) -> Vec<Problem> {
        match Config::from_toml_str(text, "a.toml") {
            Err(ConfigError::Invalid { problems, .. }) => problems,
            other => panic!("expected problems for {text:?}, got {other:?}"),
        }
    }

    fn located(problems: &[Problem]) -> Vec<String> {
        problems.iter().filter_map(|p| Some(format!("{} {}", p.location.as_deref()?, p.message))).collect()
    }

    #[test]
    fn a_problem_inside_an_agents_entry_names_its_line() {
        let text = "[agent]\n\n[[agents]]\nid = \"a\"\ntoken = \"t\"\n\n[[agents]]\nid = \"b\"\nunlisted = \"hold\"\n";
        let found = problems(text);
        let hold = found.iter().find(|p| p.message.starts_with("[[agents]] #2 unlisted")).expect("the hold problem");
        assert_eq!(hold.location.as_deref(), Some("a.toml:7:1"), "{found:?}");
    }

    #[test]
    fn one_error_per_table_never_hides_the_next() {
        let text = "shutdown_grace = 5\n[mitm]\npassthrough = []\n[upstream]\nconnect_timeout = \"1 parsec\"\nidle_timeout = \"soon\"\n[network]\nallow_cidrs = [\"10.0.0.0/33\"]\n[approvals]\ntimeout = \"2h\"\n";
        let found = problems(text);
        let shown = located(&found);
        let starts = [
            "a.toml:1:18 shutdown_grace = 5: invalid type: integer `5`, expected a number with a unit",
            "a.toml:3:1 [mitm] passthrough = []: unknown field `passthrough`",
            "a.toml:5:19 [upstream] connect_timeout = \"1 parsec\": invalid duration",
            "a.toml:6:16 [upstream] idle_timeout = \"soon\": invalid duration",
            "a.toml:8:15 [network] allow_cidrs = [\"10.0.0.0/33\"]: \"10.0.0.0/33\": invalid network",
        ];
        assert_eq!(shown.len(), starts.len(), "{shown:#?}");
        for (line, start) in shown.iter().zip(starts) {
            assert!(line.starts_with(start), "{line}\nshould start with\n{start}");
        }
        // What parsed is still validated: the semantic problem comes after, unlocated.
        assert_eq!(found.len(), 6, "{found:#?}");
        assert_eq!(found[5].location, None);
        assert!(found[5].message.starts_with("[approvals] timeout = \"2h\""), "{found:#?}");
    }

    #[test]
    fn entries_of_arrays_of_tables_are_read_one_by_one() {
        let text = "[[rules]]\nhost = \"a.example\"\naction = \"block\"\n[[rules]]\naction = \"deny\"\ncolour = \"red\"\n[[agents]]\nid = \"a\"\ntoken = \"t\"\nlimits = { requests_per_minute = \"many\", per_day = 3 }\n";
        let shown = located(&problems(text));
        let starts = [
            // The key taken out for its bad value is not then reported as missing.
            "a.toml:3:10 [[rules]] action = \"block\": unknown variant `block`",
            // A key that is really missing is, at the header of its table.
            "a.toml:4:1 [[rules]]: missing field `host`",
            "a.toml:6:1 [[rules]] colour = \"red\": unknown field `colour`",
            "a.toml:10:34 [[agents]] limits = { requests_per_minute = \"many\", per_day = 3 }: invalid type: string \"many\"",
            "a.toml:10:42 [[agents]] limits",
        ];
        assert_eq!(shown.len(), starts.len(), "{shown:#?}");
        for (line, start) in shown.iter().zip(starts) {
            assert!(line.starts_with(start), "{line}\nshould start with\n{start}");
        }
    }

    #[test]
    fn a_syntax_error_stops_the_parse_with_its_place() {
        let err = Config::from_toml_str("listen = \"127.0.0.1:8080\"\n[mitm\n", "a.toml").unwrap_err();
        assert!(matches!(err, ConfigError::Syntax { ref location, .. } if location == "a.toml:2:6"), "{err:?}");
    }
}
