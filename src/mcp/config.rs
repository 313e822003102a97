//! `[[mcp]]`: which hosts speak MCP (`hosts`), whom a table scopes (`agents`), which tools
//! they may call (`allow_tools`, `deny_tools`, `unlisted_tools`) and whether a call's
//! arguments are logged (`log_arguments`).
//!
//! Never: reads a request or an answer (`super` does), or decides anything but a tool name's
//! ruling ([`McpTable::refusal`]).

use serde::Deserialize;

use crate::net::{canonical_hosts, is_host_pattern};
use crate::policy::operator::host_matches;

/// Every `[[mcp]]` table, in the order written: the first that names a host and scopes an
/// agent is the one its calls are ruled by.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct McpConfig {
    /// The tables as written.
    pub tables: Vec<McpTable>,
}

/// `[[mcp]]`: one rule set for the MCP servers on `hosts`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpTable {
    /// Host patterns of MCP servers (as in `allow_hosts`): `mcp.example.com`,
    /// `*.example.com`. Their `POST` bodies are read (up to `[inspect] max_body`) and ruled.
    #[serde(deserialize_with = "canonical_hosts")]
    pub hosts: Vec<String>,
    /// Agent ids this table scopes; every agent when absent.
    #[serde(default)]
    pub agents: Vec<String>,
    /// Tool-name globs (`*` any run of characters) the agents may call.
    #[serde(default)]
    pub allow_tools: Vec<String>,
    /// Tool-name globs the agents may never call; a deny wins over an allow.
    #[serde(default)]
    pub deny_tools: Vec<String>,
    /// What a tool neither list names gets (`allow`, `deny`, or `hold` for a human's
    /// approval): `deny` when `allow_tools` is set, else `allow`.
    #[serde(default)]
    pub unlisted_tools: Option<Unlisted>,
    /// Whether a `tools/call`'s arguments are logged (`agentgate.mcp.arguments`), redacted by
    /// `[[secrets]]` and `[[inspect.patterns]]`; off by default.
    #[serde(default)]
    pub log_arguments: bool,
}

/// What a tool no list names gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unlisted {
    /// Called like an allowed tool.
    Allow,
    /// Refused like a denied one.
    Deny,
    /// Held for a human's approval (`[approvals] mode = "hold"`; refused at once under
    /// `"deny"`), offered in `tools/list` since a human may let it through.
    Hold,
}

impl Unlisted {
    fn as_str(self) -> &'static str {
        match self {
            Unlisted::Allow => "allow",
            Unlisted::Deny => "deny",
            Unlisted::Hold => "hold",
        }
    }
}

/// The `[[mcp]]` ruling for a request to a host some table names.
#[derive(Debug, Clone, Copy)]
pub struct Served<'a> {
    /// The table scoping the agent; `None` when the host is named but no table scopes the
    /// agent (its calls are recorded, none refused).
    pub table: Option<&'a McpTable>,
}

impl McpConfig {
    /// `Some` when a table names `host` (canonical): requests to it are MCP's; with the first
    /// table that also scopes `agent`.
    pub fn served(&self, host: &str, agent: &str) -> Option<Served<'_>> {
        let mut naming = self.tables.iter().filter(|t| t.hosts.iter().any(|p| host_matches(p, host))).peekable();
        naming.peek()?;
        let table = naming.find(|t| t.agents.is_empty() || t.agents.iter().any(|a| a == agent));
        Some(Served { table })
    }

    /// Problems in the tables on their own, each naming the table, key, value and fix (agent
    /// ids and passthrough hosts are checked across tables, in `crate::config`).
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        for (i, table) in self.tables.iter().enumerate() {
            let at = format!("[[mcp]] #{}", i + 1);
            if table.hosts.is_empty() {
                problems.push(format!("{at} hosts is empty: name the MCP servers, e.g. hosts = [\"mcp.example.com\"]"));
            }
            for pattern in table.hosts.iter().filter(|p| !is_host_pattern(p)) {
                problems.push(format!(
                    "{at} hosts entry {pattern:?}: not a host name or `*.suffix`; write e.g. \"mcp.example.com\" \
                     (no scheme, port or path)"
                ));
            }
            for (key, globs) in [("allow_tools", &table.allow_tools), ("deny_tools", &table.deny_tools)] {
                for glob in globs.iter().filter(|g| !is_tool_glob(g)) {
                    problems.push(format!(
                        "{at} {key} entry {glob:?}: a tool name of 1 to 128 letters, digits, `_`, `-`, `.`, `/`, \
                         with `*` for any run of them; write e.g. \"create_*\""
                    ));
                }
            }
        }
    }
}

impl McpTable {
    /// Why a call to `tool` is refused, in plain words naming the rule; `None` when allowed.
    pub fn refusal(&self, tool: &str) -> Option<String> {
        if let Some(glob) = self.deny_tools.iter().find(|g| glob_matches(g, tool)) {
            return Some(format!("[[mcp]] deny_tools {glob:?} matches tool {tool:?}"));
        }
        if self.allow_tools.iter().any(|g| glob_matches(g, tool)) {
            return None;
        }
        match self.unlisted() {
            Unlisted::Allow => None,
            unlisted => Some(format!(
                "tool {tool:?} is not in [[mcp]] allow_tools ({}) and unlisted_tools = {:?}",
                if self.allow_tools.is_empty() { "none".to_owned() } else { self.allow_tools.join(", ") },
                unlisted.as_str()
            )),
        }
    }

    /// True when a call to `tool` waits for a human: no list names it and `unlisted_tools =
    /// "hold"`.
    pub fn holds(&self, tool: &str) -> bool {
        self.unlisted() == Unlisted::Hold
            && !self.deny_tools.iter().any(|g| glob_matches(g, tool))
            && !self.allow_tools.iter().any(|g| glob_matches(g, tool))
    }

    /// True when `tool` is offered in `tools/list`: allowed, or held for a human.
    pub fn offers(&self, tool: &str) -> bool {
        self.refusal(tool).is_none() || self.holds(tool)
    }

    /// `unlisted_tools` as written, else its default: `deny` when `allow_tools` lists any.
    fn unlisted(&self) -> Unlisted {
        self.unlisted_tools.unwrap_or(if self.allow_tools.is_empty() { Unlisted::Allow } else { Unlisted::Deny })
    }
}

/// A tool-name glob: 1 to 128 of the characters tool names use, `*` among them.
fn is_tool_glob(glob: &str) -> bool {
    !glob.is_empty()
        && glob.len() <= 128
        && glob.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'/' | b'*'))
}

/// Whether `name` matches `glob`, whose `*` stands for any run of characters (none too).
fn glob_matches(glob: &str, name: &str) -> bool {
    let mut pieces = glob.split('*');
    let first = pieces.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else { return false };
    let pieces: Vec<&str> = pieces.collect();
    let Some((last, middle)) = pieces.split_last() else { return rest.is_empty() };
    for piece in middle {
        match rest.find(piece) {
            Some(at) => rest = &rest[at + piece.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> McpConfig {
        #[derive(Deserialize)]
        struct File {
            mcp: McpConfig,
        }
        toml::from_str::<File>(text).expect("parses").mcp
    }

    #[test]
    fn globs_match_whole_names_with_star_for_any_run() {
        for (glob, name, matches) in [
            ("search", "search", true),
            ("search", "search2", false),
            ("create_*", "create_issue", true),
            ("create_*", "create_", true),
            ("create_*", "recreate_issue", false),
            ("*_repo", "delete_repo", true),
            ("*", "anything", true),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
        ] {
            assert_eq!(glob_matches(glob, name), matches, "{glob} vs {name}");
        }
    }

    #[test]
    fn a_deny_wins_and_unlisted_tools_default_to_deny_once_some_are_allowed() {
        let config = parsed(
            "[[mcp]]\nhosts = [\"mcp.test\"]\nallow_tools = [\"search\", \"create_*\", \"delete_*\"]\n\
             deny_tools = [\"delete_repo\"]\n",
        );
        let table = &config.tables[0];
        assert_eq!(table.refusal("search"), None);
        assert_eq!(table.refusal("create_issue"), None);
        assert_eq!(table.refusal("delete_branch"), None);
        let denied = table.refusal("delete_repo").expect("denied");
        assert!(denied.contains("deny_tools \"delete_repo\""), "{denied}");
        let unlisted = table.refusal("merge").expect("unlisted");
        assert!(unlisted.contains("unlisted_tools = \"deny\"") && unlisted.contains("\"merge\""), "{unlisted}");
        let open = parsed("[[mcp]]\nhosts = [\"mcp.test\"]\ndeny_tools = [\"drop_*\"]\n");
        assert_eq!(open.tables[0].refusal("anything"), None);
        assert!(open.tables[0].refusal("drop_table").is_some());
        let closed = parsed("[[mcp]]\nhosts = [\"mcp.test\"]\nunlisted_tools = \"deny\"\n");
        assert!(closed.tables[0].refusal("search").is_some());
        let held = parsed(
            "[[mcp]]\nhosts = [\"mcp.test\"]\nallow_tools = [\"search\"]\ndeny_tools = [\"drop_*\"]\nunlisted_tools = \"hold\"\n",
        );
        let held = &held.tables[0];
        assert!(held.holds("merge") && held.offers("merge") && held.refusal("merge").is_some());
        assert!(!held.holds("search") && !held.holds("drop_table") && !held.offers("drop_table"));
        assert!(!table.holds("merge"));
    }

    #[test]
    fn the_first_table_scoping_the_agent_rules_and_a_named_host_is_served_to_all() {
        let config = parsed(
            "[[mcp]]\nhosts = [\"*.Tools.Test\"]\nagents = [\"sbx\"]\nallow_tools = [\"search\"]\n\
             [[mcp]]\nhosts = [\"mcp.tools.test\"]\nagents = [\"ci\"]\n",
        );
        let sbx = config.served("mcp.tools.test", "sbx").expect("named");
        assert_eq!(sbx.table.map(|t| t.allow_tools.clone()), Some(vec!["search".to_owned()]));
        let ci = config.served("mcp.tools.test", "ci").expect("named");
        assert!(ci.table.is_some_and(|t| t.allow_tools.is_empty()));
        let other = config.served("mcp.tools.test", "other").expect("named");
        assert!(other.table.is_none());
        assert!(config.served("example.test", "sbx").is_none());
    }

    #[test]
    fn bad_hosts_and_globs_are_problems_naming_the_table_and_fix() {
        let config = parsed(
            "[[mcp]]\nhosts = []\n[[mcp]]\nhosts = [\"https://mcp.test/\"]\nallow_tools = [\"bad name\"]\n\
             deny_tools = [\"\"]\n",
        );
        let mut problems = Vec::new();
        config.problems(&mut problems);
        let text = problems.join("\n");
        assert_eq!(problems.len(), 4, "{text}");
        for expected in [
            "[[mcp]] #1 hosts is empty",
            "[[mcp]] #2 hosts entry \"https://mcp.test/\"",
            "allow_tools entry \"bad name\"",
            "deny_tools entry \"\"",
        ] {
            assert!(text.contains(expected), "{expected}: {text}");
        }
        let unknown = toml::from_str::<toml::Table>("[[mcp]]\nhosts = [\"a.test\"]\nallow_tool = [\"x\"]\n")
            .ok()
            .and_then(|t| t.get("mcp").cloned())
            .map(|v| v.try_into::<McpConfig>().map(|_| ()).expect_err("unknown key").to_string());
        assert!(unknown.is_some_and(|e| e.contains("allow_tool")));
    }
}
