//! `[approvals]`: whether a request that needs a human's approval is refused at once or held
//! for one, for how long, and how many may wait at once. Owned here, composed into the config
//! by `crate::config` (docs/layering.md); live on reload (`crate::reload`).
//!
//! Never: holds a request (`super::queue` and the proxy do).

use std::time::Duration;

use serde::Deserialize;

use crate::setting::{duration, nonzero_caps};

/// The longest `[approvals] timeout`: past that an agent's connection (and its concurrency
/// slot at the origin's side of the proxy) is held for nothing anybody is watching.
const MAX_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// What a `needs_approval` request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// 403 at once (`agents_md.requires_human_approval`): nobody is asked.
    Deny,
    /// Held until an operator approves or denies it, or `timeout` passes.
    Hold,
}

/// `[approvals]` (`docs/approvals.md`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalsConfig {
    /// `deny` (the default: 403 at once) or `hold` (wait for an operator).
    pub mode: ApprovalMode,
    /// How long a held request waits for an answer before it is refused (default `60s`).
    #[serde(deserialize_with = "duration")]
    pub timeout: Duration,
    /// How many requests may be held at once; past it a new one is refused at once (default 100).
    pub max_pending: usize,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self { mode: ApprovalMode::Deny, timeout: Duration::from_secs(60), max_pending: 100 }
    }
}

impl ApprovalsConfig {
    /// Problems in `[approvals]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        if self.timeout.is_zero() || self.timeout > MAX_TIMEOUT {
            problems.push(format!(
                "[approvals] timeout = \"{}\": must be more than 0s and at most 1h; the default is \"60s\"",
                humantime::format_duration(self.timeout)
            ));
        }
        let default = Self::default().max_pending;
        nonzero_caps(problems, &[("[approvals] max_pending", self.max_pending, default)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::testing::problems;
    use crate::config::{Config, ConfigError, Problem};

    /// `[admin]` with a token (`printf %s admin-secret | sha256sum`), which holding needs.
    const ADMIN_TOKEN: &str =
        "[admin]\ntoken_sha256 = \"16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01\"\n";

    #[test]
    fn every_key_parses_and_defaults_are_the_documented_ones() {
        let config = Config::from_toml_str(
            &format!("[approvals]\nmode = \"hold\"\ntimeout = \"90s\"\nmax_pending = 3\n{ADMIN_TOKEN}"),
            "agentgate.toml",
        )
        .expect("a valid [approvals] table");
        assert_eq!(
            config.approvals,
            ApprovalsConfig { mode: ApprovalMode::Hold, timeout: Duration::from_secs(90), max_pending: 3 }
        );
        let default = ApprovalsConfig::default();
        assert_eq!(
            (default.mode, default.timeout, default.max_pending),
            (ApprovalMode::Deny, Duration::from_secs(60), 100)
        );
    }

    #[test]
    fn timeout_and_max_pending_name_key_value_and_fix() {
        assert_eq!(
            problems("[approvals]\ntimeout = \"0s\"\nmax_pending = 0\n"),
            [
                "[approvals] timeout = \"0s\": must be more than 0s and at most 1h; the default is \"60s\"",
                "[approvals] max_pending = 0: must be at least 1; the default is 100",
            ]
        );
        assert_eq!(
            problems("[approvals]\ntimeout = \"2h\"\n"),
            ["[approvals] timeout = \"2h\": must be more than 0s and at most 1h; the default is \"60s\""]
        );
        assert!(problems("[approvals]\ntimeout = \"1h\"\nmax_pending = 1\n").is_empty());
    }

    #[test]
    fn hold_needs_an_admin_token() {
        let found = problems("[approvals]\nmode = \"hold\"\n");
        assert_eq!(found.len(), 1, "{found:?}");
        for part in [
            "[approvals] mode = \"hold\" holds requests for a human's approval, but no admin token is configured",
            "the agent itself included, could approve its own request",
            "set [admin] token_sha256 (or add [[admin.tokens]]) to the output of `printf %s TOKEN | sha256sum`",
            "or set it to \"deny\"",
        ] {
            assert!(found[0].contains(part), "{part:?} in {found:?}");
        }
        assert!(problems(&format!("[approvals]\nmode = \"hold\"\n{ADMIN_TOKEN}")).is_empty());
        let named = "[approvals]\nmode = \"hold\"\n[[admin.tokens]]\nname = \"alice\"\n\
                     sha256 = \"0c848abb03307b06cf70cd4e29c157dc81af5e94ab3eb1d0c59a120269572376\"\n";
        assert!(problems(named).is_empty(), "a named token is a token");
        assert!(problems("[approvals]\nmode = \"deny\"\n").is_empty(), "nothing is held: no token needed");
    }

    #[test]
    fn hold_needs_an_admin_api_to_answer_on() {
        let found = problems(&format!("[approvals]\nmode = \"hold\"\n{ADMIN_TOKEN}listen = \"off\"\n"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("but [admin] listen = \"off\": nobody could answer them"), "{found:?}");
    }

    #[test]
    fn an_unknown_mode_or_key_is_a_located_problem() {
        for text in ["[approvals]\nmode = \"ask\"\n", "[approvals]\nmax_pendng = 3\n"] {
            let err = Config::from_toml_str(text, "agentgate.toml").expect_err("rejected");
            let located = |problems: &[Problem]| problems.len() == 1 && problems[0].location.is_some();
            assert!(matches!(&err, ConfigError::Invalid { problems, .. } if located(problems)), "{err}");
            assert!(err.to_string().contains("[approvals]"), "{err}");
        }
    }
}
