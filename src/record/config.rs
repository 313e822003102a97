//! `[record]`: where a run is recorded (`dir`), how much of each body (`max_body`) and of
//! the whole recording (`max_bytes`) is kept, and whose exchanges (`all`, or `[[agents]]
//! record = true`). Owned here, composed into the config by `crate::config`
//! (docs/layering.md); restart-only on reload (`crate::reload`), but for the agents' own
//! `record`, read live.
//!
//! Never: opens the directory (the recorder and the replay do), decides what is recorded
//! for a request (the proxy asks [`RecordConfig::records`]).

use std::path::PathBuf;

use serde::Deserialize;

use crate::agents::AgentConfig;
use crate::policy::operator::Mode;

/// The default `max_body`: 1 MiB of each body is kept.
const DEFAULT_MAX_BODY: u64 = 1024 * 1024;
/// The default `max_bytes`: 1 GiB for the whole recording.
const DEFAULT_MAX_BYTES: u64 = 1024 * 1024 * 1024;

/// `[record]` (docs/config.md, docs/evaluation-guide.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RecordConfig {
    /// The recording's directory: written while recording, read by `mode = "replay"` and
    /// `agentgate record har` (unset: nothing is recorded).
    pub dir: Option<PathBuf>,
    /// The most bytes of one body kept; a longer body is kept cut and marked (default 1 MiB).
    pub max_body: u64,
    /// The most bytes the recording may hold; past it no new exchange is recorded (default 1 GiB).
    pub max_bytes: u64,
    /// Whether every agent's exchanges are recorded (default false: only those of the
    /// `[agent]` or `[[agents]]` entries with `record = true`).
    pub all: bool,
}

impl Default for RecordConfig {
    fn default() -> Self {
        RecordConfig { dir: None, max_body: DEFAULT_MAX_BODY, max_bytes: DEFAULT_MAX_BYTES, all: false }
    }
}

impl RecordConfig {
    /// Whether the exchanges of the agent `id` (its id in the log) are recorded under
    /// `mode`: its `[[agents]]` entry's `record`, or `[agent]`'s for an agent no entry names;
    /// never in replay, never without a `dir`.
    pub fn records(&self, mode: Mode, id: &str, default: &AgentConfig, agents: &[AgentConfig]) -> bool {
        let entry = agents.iter().find(|a| a.id.as_deref() == Some(id)).unwrap_or(default);
        self.dir.is_some() && mode != Mode::Replay && (self.all || entry.record)
    }

    /// Every problem with `[record]` under `mode` and the agents' `record` and `mode` keys,
    /// each naming the key and the fix.
    pub fn problems(&self, mode: Mode, agent: &AgentConfig, agents: &[AgentConfig], problems: &mut Vec<String>) {
        let asked = self.all || agent.record || agents.iter().any(|a| a.record);
        let example = "e.g. dir = \"recordings/run-1\"";
        if self.dir.is_none() {
            if mode == Mode::Replay {
                problems
                    .push(format!("mode = \"replay\" needs a recording to answer from: set [record] dir, {example}"));
            }
            if asked {
                problems.push(format!(
                    "[record] all or an agent's record = true asks for a recording, but [record] dir is not set: set it, {example}"
                ));
            }
        } else if mode == Mode::Replay && asked {
            problems.push(
                "mode = \"replay\" answers from [record] dir and records nothing: remove [record] all and the agents' record = true, or use mode = \"enforce\" to record".to_owned(),
            );
        } else if mode != Mode::Replay && !asked {
            problems.push(
                "[record] dir is set but nothing is recorded: set [record] all = true, or record = true on an [[agents]] entry, or mode = \"replay\" to answer from it".to_owned(),
            );
        }
        if self.max_body == 0 {
            problems.push(format!("[record] max_body = 0: must be at least 1 byte; the default is {DEFAULT_MAX_BODY}"));
        }
        if self.max_bytes < self.max_body {
            problems.push(format!(
                "[record] max_bytes = {} is less than max_body = {}: raise max_bytes (default {DEFAULT_MAX_BYTES})",
                self.max_bytes, self.max_body
            ));
        }
        let named = std::iter::once(("[agent]".to_owned(), agent))
            .chain(agents.iter().enumerate().map(|(i, a)| (format!("[[agents]] #{}", i + 1), a)));
        for (name, entry) in named {
            if entry.mode == Some(Mode::Replay) {
                problems.push(format!(
                    "{name} mode = \"replay\": replay is for the whole proxy; write mode = \"replay\" at the top level and remove it here"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recorded(id: &str) -> AgentConfig {
        AgentConfig { id: Some(id.to_owned()), record: true, ..AgentConfig::default() }
    }

    #[test]
    fn only_the_agents_asked_for_are_recorded_and_never_in_replay() {
        let config = RecordConfig { dir: Some("rec".into()), ..RecordConfig::default() };
        let agents = [recorded("a"), AgentConfig { id: Some("b".to_owned()), ..AgentConfig::default() }];
        let default = AgentConfig::default();
        assert!(config.records(Mode::Enforce, "a", &default, &agents));
        assert!(!config.records(Mode::Enforce, "b", &default, &agents));
        assert!(!config.records(Mode::Enforce, "127.0.0.1", &default, &agents));
        assert!(config.records(Mode::Enforce, "127.0.0.1", &AgentConfig { record: true, ..default.clone() }, &agents));
        assert!(!config.records(Mode::Replay, "a", &default, &agents));
        let all = RecordConfig { all: true, ..config.clone() };
        assert!(all.records(Mode::Monitor, "b", &default, &agents));
        assert!(!RecordConfig { dir: None, ..all }.records(Mode::Enforce, "b", &default, &agents));
    }

    #[test]
    fn problems_name_the_key_and_the_fix() {
        let problems = |config: &RecordConfig, mode, agents: &[AgentConfig]| {
            let mut found = Vec::new();
            config.problems(mode, &AgentConfig::default(), agents, &mut found);
            found
        };
        let none = RecordConfig::default();
        assert!(problems(&none, Mode::Enforce, &[]).is_empty());
        assert!(problems(&none, Mode::Replay, &[])[0].contains("set [record] dir"));
        assert!(problems(&none, Mode::Enforce, &[recorded("a")])[0].contains("[record] dir is not set"));
        let dir = RecordConfig { dir: Some("rec".into()), ..RecordConfig::default() };
        assert!(problems(&dir, Mode::Enforce, &[])[0].contains("nothing is recorded"));
        assert!(problems(&dir, Mode::Replay, &[]).is_empty());
        assert!(problems(&dir, Mode::Replay, &[recorded("a")])[0].contains("records nothing"));
        let zero = RecordConfig { max_body: 0, all: true, ..dir.clone() };
        assert!(problems(&zero, Mode::Enforce, &[])[0].contains("max_body = 0"));
        let replaying = AgentConfig { mode: Some(Mode::Replay), ..recorded("a") };
        let found = problems(&RecordConfig { all: true, ..dir }, Mode::Enforce, &[replaying]);
        assert!(found[0].contains("[[agents]] #1 mode = \"replay\""), "{found:?}");
    }
}
