//! robots.txt `Content-Usage` and `Content-Signal` lines (SEMANTICS U3,
//! draft-ietf-aipref-attach §4): which of the selected group's lines apply to a path, and
//! what they state.
//!
//! `Content-Usage: [path] prefs`: a value starting with `/` has a path, ending at the first
//! space or tab; the rest is the statement. Of the rules whose path matches (robots.txt
//! pattern rules, no path = `/`), those with the longest path apply; several with that same
//! path all apply, so a "no" among them wins (vocab §7.1). A `Content-Signal` line applies
//! to the whole group. A malformed statement states nothing.
//!
//! Never: selects groups (robots.txt does, as for Allow/Disallow) or decides.

use super::vocab::{self, Dialect, MalformedPreferences};
use super::{Preference, UsageSource};
use crate::policy::pattern::{Pattern, normalized_path};
use crate::policy::robots::{UsageKey, UsageLine};

/// A `Content-Usage` line split into its path (`/` when absent) and its statement.
pub fn split_content_usage(value: &str) -> (&str, &str) {
    if !value.starts_with('/') {
        return ("/", value);
    }
    match value.find([' ', '\t']) {
        Some(end) => (&value[..end], value[end..].trim_start_matches([' ', '\t'])),
        None => (value, ""),
    }
}

/// The statement of a line with `key` and `value`, parsed in its dialect (when the file is
/// read: `UsageLine::stated`).
pub fn statement(key: UsageKey, value: &str) -> Result<vocab::Statement, MalformedPreferences> {
    match key {
        UsageKey::ContentUsage => vocab::parse(split_content_usage(value).1, Dialect::Aipref),
        UsageKey::ContentSignal => vocab::parse(value, Dialect::ContentSignal),
    }
}

/// The preferences the selected group's lines state for `path` (path and query, as
/// requested), in file order; malformed lines contribute nothing. The patterns and statements
/// were made when the file was read: nothing is parsed here.
pub fn preferences<'a>(lines: impl Iterator<Item = &'a UsageLine> + Clone, path: &str) -> Vec<Preference> {
    let path = normalized_path(path);
    let matching = |line: &&UsageLine| line.pattern.as_ref().is_some_and(|p| p.matches_normalized(&path));
    let longest =
        lines.clone().filter(matching).filter_map(|line| line.pattern.as_ref()).map(Pattern::specificity).max();
    lines
        .filter(|line| match line.key {
            UsageKey::ContentSignal => true,
            UsageKey::ContentUsage => matching(line) && line.pattern.as_ref().map(Pattern::specificity) == longest,
        })
        .flat_map(|line| {
            let source = match line.key {
                UsageKey::ContentUsage => UsageSource::RobotsContentUsage,
                UsageKey::ContentSignal => UsageSource::RobotsContentSignal,
            };
            // The path as the file was read: shared, not copied per request.
            line.stated.iter().map(move |stated| Preference {
                source,
                line: Some(line.line),
                path: line.path.clone(),
                label: stated.label.clone(),
                purpose: stated.purpose,
                value: stated.value.clone(),
                stance: stated.stance,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::robots::RobotsState;
    use crate::policy::test_support::request;
    use crate::policy::{Headers, RequestView};

    fn view<'a>(headers: &'a Headers, agent: &'a str, path: &'a str) -> RequestView<'a> {
        RequestView { product_token: Some(agent), ..request("GET", "example.com", path, 0, headers) }
    }
    use crate::policy::usage::{SEARCH, Stance, TRAIN_AI};

    /// (line, label, value, stance) of what `robots` states for `agent` at `path`.
    fn stated(robots: &str, agent: &str, path: &str) -> Vec<(u32, String, String, Stance)> {
        let headers = Headers::default();
        let state = RobotsState::parse(robots.as_bytes());
        let req = view(&headers, agent, path);
        preferences(state.usage_lines(&req), path)
            .into_iter()
            .map(|p| (p.line.unwrap_or(0), p.label.into_owned(), p.value.into_owned(), p.stance))
            .collect()
    }

    fn row(line: u32, label: &str, value: &str, stance: Stance) -> (u32, String, String, Stance) {
        (line, label.to_string(), value.to_string(), stance)
    }

    const ATTACH_EXAMPLE: &str = "User-Agent: *\nAllow: /\nDisallow: /never/\nContent-Usage: train-ai=n\n\
                                  Content-Usage: /ai-ok/ train-ai=y\n\nUser-Agent: ExampleBot\nAllow: /\n\
                                  Content-Usage: train-ai=y\n";

    #[test]
    fn the_attach_drafts_example_gives_its_table() {
        assert_eq!(stated(ATTACH_EXAMPLE, "OtherBot", "/x"), vec![row(4, "train-ai", "n", Stance::Refuse)]);
        assert_eq!(stated(ATTACH_EXAMPLE, "OtherBot", "/ai-ok/x"), vec![row(5, "train-ai", "y", Stance::Allow)]);
        assert_eq!(stated(ATTACH_EXAMPLE, "ExampleBot", "/x"), vec![row(9, "train-ai", "y", Stance::Allow)]);
    }

    #[test]
    fn the_longest_matching_path_applies_with_wildcards_and_anchors() {
        let robots = "User-agent: *\nContent-Usage: /a train-ai=n\nContent-Usage: /a*.html$ train-ai=y\n";
        assert_eq!(stated(robots, "b", "/a/x.html"), vec![row(3, "train-ai", "y", Stance::Allow)]);
        assert_eq!(stated(robots, "b", "/a/x.htmlx"), vec![row(2, "train-ai", "n", Stance::Refuse)]);
        assert_eq!(stated(robots, "b", "/b"), vec![]);
    }

    #[test]
    fn conflicting_rules_with_the_same_path_all_apply() {
        let robots = "User-agent: *\nContent-Usage: /p/ train-ai=y\nContent-Usage: /p/ train-ai=n\n";
        assert_eq!(
            stated(robots, "b", "/p/x"),
            vec![row(2, "train-ai", "y", Stance::Allow), row(3, "train-ai", "n", Stance::Refuse)]
        );
    }

    #[test]
    fn lines_outside_any_group_are_ignored() {
        let robots = "Content-Usage: train-ai=n\nContent-Signal: ai-train=no\nUser-agent: *\nDisallow: /x\n";
        assert_eq!(stated(robots, "b", "/y"), vec![]);
    }

    #[test]
    fn content_signal_applies_to_its_whole_group_and_only_to_it() {
        let robots = "User-agent: *\nContent-Signal: search=yes, ai-train=no\nDisallow: /private/\n\n\
                      User-agent: mybot\nAllow: /\nContent-Signal: ai-train=yes\n";
        assert_eq!(
            stated(robots, "other", "/deep/x"),
            vec![row(2, "search", "yes", Stance::Allow), row(2, "ai-train", "no", Stance::Refuse)]
        );
        assert_eq!(stated(robots, "mybot", "/deep/x"), vec![row(7, "ai-train", "yes", Stance::Allow)]);
    }

    #[test]
    fn usage_lines_do_not_end_a_group_or_change_allow_and_disallow() {
        let with = "User-agent: a\nContent-Usage: train-ai=n\nUser-agent: b\nDisallow: /x\n";
        let without = "User-agent: a\nUser-agent: b\nDisallow: /x\n";
        let headers = Headers::default();
        for agent in ["a", "b", "c"] {
            let req = view(&headers, agent, "/x");
            assert_eq!(
                RobotsState::parse(with.as_bytes()).evaluate(&req).opinion,
                RobotsState::parse(without.as_bytes()).evaluate(&req).opinion,
                "{agent}"
            );
        }
        assert_eq!(stated(with, "b", "/y"), vec![row(2, "train-ai", "n", Stance::Refuse)]);
    }

    #[test]
    fn a_malformed_line_states_nothing_and_a_path_only_line_too() {
        let robots = "User-agent: *\nContent-Usage: train-ai=n search=y\nContent-Usage: /p/\n";
        assert_eq!(stated(robots, "b", "/p/x"), vec![]);
        assert_eq!(stated(robots, "b", "/q"), vec![]);
    }

    #[test]
    fn the_path_and_label_are_recorded() {
        let headers = Headers::default();
        let state = RobotsState::parse(b"User-agent: *\nContent-Usage: /docs/ search=n\n");
        let req = view(&headers, "b", "/docs/a");
        let prefs = preferences(state.usage_lines(&req), "/docs/a");
        assert_eq!(prefs.len(), 1);
        assert_eq!(prefs[0].path.as_deref(), Some("/docs/"));
        assert_eq!(prefs[0].purpose, Some(SEARCH));
        assert_eq!(prefs[0].source, UsageSource::RobotsContentUsage);
        assert!(!prefs[0].refuses(TRAIN_AI));
        assert!(prefs[0].refuses(SEARCH));
    }

    #[test]
    fn split_content_usage_reads_the_path_up_to_the_first_space_or_tab() {
        assert_eq!(split_content_usage("/a/\ttrain-ai=y"), ("/a/", "train-ai=y"));
        assert_eq!(split_content_usage("train-ai=y"), ("/", "train-ai=y"));
        assert_eq!(split_content_usage("/a/"), ("/a/", ""));
    }
}
