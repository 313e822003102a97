//! `[[secrets]]`: one credential the agent never holds, as the config names it (a placeholder,
//! where its real value is read from, the hosts and agents it is for), and the value read
//! when the config is loaded, so a reload that finds a new value in the file puts it in force.
//!
//! Never: holds a value written in the config itself, or shows one (`Debug` redacts it).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Deserialize;
use zeroize::Zeroizing;

use crate::net::is_host_pattern;
use crate::policy::operator::host_matches;

/// The shortest placeholder `config check` accepts: a shorter one could occur by chance in
/// a request and be replaced there.
pub const MIN_PLACEHOLDER_LEN: usize = 12;

/// The most bytes a value file may hold (a credential, not a document).
const MAX_VALUE_LEN: u64 = 16 * 1024;

/// One `[[secrets]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SecretConfig {
    /// What the decision log and the block answers call it (`agentgate.secrets`).
    pub name: String,
    /// What the agent sends in the secret's place, e.g. `agp_github_1`.
    pub placeholder: String,
    /// The environment variable holding the real value.
    #[serde(default)]
    pub value_env: Option<String>,
    /// The file holding the real value (one trailing newline is not part of it).
    #[serde(default)]
    pub value_file: Option<PathBuf>,
    /// Host patterns the secret is bound to, as `[[rules]] host` writes them, each with an
    /// optional `:port` (`api.github.com`, `*.example.com:8443`).
    pub hosts: Vec<String>,
    /// The agent ids that may use it (default: every agent).
    #[serde(default)]
    pub agents: Vec<String>,
    /// The request headers the placeholder is replaced in (default `["authorization"]`).
    #[serde(default = "authorization")]
    pub headers: Vec<String>,
    /// The query parameters the placeholder is replaced in (default: none).
    #[serde(default)]
    pub query: Vec<String>,
    /// Whether it may be injected into plain-HTTP requests, which anyone on the path can
    /// read (default `false`: only into MITM'd HTTPS).
    #[serde(default)]
    pub plain_http: bool,
    /// The value read from `value_env` or `value_file` when the config was loaded.
    #[serde(skip)]
    pub value: SecretValue,
}

fn authorization() -> Vec<String> {
    vec!["authorization".to_owned()]
}

/// A secret's real value: zeroised when the last copy is dropped, never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretValue(Option<Arc<Zeroizing<String>>>);

impl SecretValue {
    /// The value, once loaded.
    pub fn get(&self) -> Option<&str> {
        self.0.as_deref().map(|value| value.as_str())
    }

    /// The shared handle to the value (the gate keeps a retired value this way).
    pub(super) fn shared(&self) -> Option<Arc<Zeroizing<String>>> {
        self.0.clone()
    }
}

impl fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "<redacted>" } else { "<not loaded>" })
    }
}

impl SecretConfig {
    /// How a problem names this entry: `[[secrets]] #2 (github)`.
    fn described(&self, number: usize) -> String {
        format!("[[secrets]] #{number} ({})", self.name)
    }

    /// Reads the real value from `value_env` or `value_file`; `number` is the entry's 1-based
    /// position.
    ///
    /// # Errors
    /// A problem naming the key, the source and the fix, when neither or both sources are
    /// given, or the source cannot be read or is empty.
    pub fn load_value(&mut self, number: usize) -> Result<(), String> {
        let described = self.described(number);
        let text = match (&self.value_env, &self.value_file) {
            (Some(var), None) => std::env::var(var).map_err(|e| {
                format!("{described} value_env = {var:?}: cannot be read ({e}); set the variable in agentgate's environment")
            })?,
            (None, Some(path)) => read_value_file(path).map_err(|cause| {
                format!(
                    "{described} value_file = {:?}: cannot be read ({cause}); write the value into that file, readable by agentgate only",
                    path.display().to_string()
                )
            })?,
            (None, None) => {
                return Err(format!(
                    "{described}: no value source; set value_env (an environment variable) or value_file (a file), never the value itself"
                ));
            }
            (Some(_), Some(_)) => {
                return Err(format!("{described}: both value_env and value_file are set; keep one"));
            }
        };
        let value = text.strip_suffix('\n').map(|v| v.strip_suffix('\r').unwrap_or(v)).unwrap_or(&text);
        if value.is_empty() {
            return Err(format!("{described}: its value source is empty; put the credential in it"));
        }
        self.value = SecretValue(Some(Arc::new(Zeroizing::new(value.to_owned()))));
        Ok(())
    }

    /// Whether the secret is bound to `host:port` (`host` canonical).
    pub fn is_bound_to(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|bound| {
            let (pattern, bound_port) = split_port(bound);
            bound_port.is_none_or(|p| p == port) && host_matches(pattern, host)
        })
    }

    /// Whether `agent` may use it.
    pub fn allows(&self, agent: &str) -> bool {
        self.agents.is_empty() || self.agents.iter().any(|a| a == agent)
    }

    /// This entry's problems (the value source is checked by [`load_value`](Self::load_value)):
    /// `passthrough` tells whether a host is one agentgate does not intercept.
    pub fn problems(&self, number: usize, passthrough: impl Fn(&str) -> bool, problems: &mut Vec<String>) {
        let described = self.described(number);
        if self.name.is_empty() || !self.name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            problems
                .push(format!("{described} name = {:?}: use letters, digits, `_` and `-`, e.g. \"github\"", self.name));
        }
        if self.placeholder.len() < MIN_PLACEHOLDER_LEN {
            // The example itself long enough, however short the name.
            let mut example = format!("agp_{}_", self.name);
            while example.len() + 1 < MIN_PLACEHOLDER_LEN {
                example.push('0');
            }
            example.push('1');
            problems.push(format!(
                "{described} placeholder = {:?}: at least {MIN_PLACEHOLDER_LEN} characters, so it never occurs by chance; e.g. {example:?}",
                self.placeholder
            ));
        }
        if self.placeholder.bytes().any(|b| !b.is_ascii_graphic()) {
            problems.push(format!(
                "{described} placeholder = {:?}: visible ASCII only (it goes into headers)",
                self.placeholder
            ));
        }
        if self.hosts.is_empty() {
            problems.push(format!("{described} hosts = []: bind it to the hosts it is for, e.g. [\"api.github.com\"]"));
        }
        for host in &self.hosts {
            let (pattern, port) = split_port(host);
            if pattern == "*" || !is_host_pattern(pattern) || (host.contains(':') && port.is_none()) {
                problems.push(format!(
                    "{described} hosts entry {host:?}: a host name or `*.suffix`, with an optional `:port` (not `*`: a secret is for named hosts)"
                ));
            } else if passthrough(pattern) {
                problems.push(format!(
                    "{described} hosts entry {host:?}: a [mitm] passthrough_hosts host, whose requests agentgate cannot see; remove it from one of the two"
                ));
            }
        }
        if self.headers.is_empty() && self.query.is_empty() {
            problems.push(format!("{described}: headers and query are both empty, so it is never injected; keep the default headers = [\"authorization\"]"));
        }
        for header in &self.headers {
            if http::HeaderName::try_from(header.as_str()).is_err() {
                problems.push(format!("{described} headers entry {header:?}: not a header name"));
            }
        }
    }
}

/// `host:port` as a pattern and a port (`None` when no port is written or it is not one).
fn split_port(bound: &str) -> (&str, Option<u16>) {
    match bound.rsplit_once(':') {
        Some((pattern, port)) if !pattern.is_empty() => (pattern, port.parse().ok()),
        _ => (bound, None),
    }
}

/// The problems between entries: two placeholders where one contains the other would be
/// replaced inside each other.
pub fn overlap_problems(secrets: &[SecretConfig], problems: &mut Vec<String>) {
    for (i, a) in secrets.iter().enumerate() {
        for (j, b) in secrets.iter().enumerate() {
            if i != j
                && !b.placeholder.is_empty()
                && a.placeholder.contains(&b.placeholder)
                && (i < j || a.placeholder != b.placeholder)
            {
                problems.push(format!(
                    "{} placeholder {:?} contains {} placeholder {:?}: make neither a substring of the other",
                    a.described(i + 1),
                    a.placeholder,
                    b.described(j + 1),
                    b.placeholder
                ));
            }
        }
    }
}

fn read_value_file(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    let mut text = String::new();
    file.take(MAX_VALUE_LEN + 1).read_to_string(&mut text).map_err(|e| e.to_string())?;
    if text.len() as u64 > MAX_VALUE_LEN {
        return Err(format!("over {MAX_VALUE_LEN} bytes, not a credential"));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(placeholder: &str, hosts: &[&str]) -> SecretConfig {
        SecretConfig {
            name: "github".to_owned(),
            placeholder: placeholder.to_owned(),
            value_env: None,
            value_file: None,
            hosts: hosts.iter().map(|h| (*h).to_owned()).collect(),
            agents: Vec::new(),
            headers: authorization(),
            query: Vec::new(),
            plain_http: false,
            value: SecretValue::default(),
        }
    }

    #[test]
    fn a_value_file_is_read_without_its_newline_and_never_shown() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("token");
        std::fs::write(&path, "ghp_real_value\n").expect("written");
        let mut s = SecretConfig { value_file: Some(path), ..secret("agp_github_0001", &["api.github.com"]) };
        s.load_value(1).expect("readable");
        assert_eq!(s.value.get(), Some("ghp_real_value"));
        assert!(!format!("{s:?}").contains("ghp_real_value"), "{s:?}");
    }

    #[test]
    fn an_unreadable_or_missing_source_names_the_key_and_the_fix() {
        let mut s =
            SecretConfig { value_file: Some("/nonexistent/token".into()), ..secret("agp_github_0001", &["a.test"]) };
        let problem = s.load_value(1).expect_err("missing file");
        assert!(
            problem.starts_with("[[secrets]] #1 (github) value_file = \"/nonexistent/token\": cannot be read"),
            "{problem}"
        );
        let mut none = secret("agp_github_0001", &["a.test"]);
        assert!(none.load_value(2).expect_err("no source").contains("set value_env"));
        let mut env = SecretConfig {
            value_env: Some("AGENTGATE_TEST_UNSET_SECRET_VAR".into()),
            ..secret("agp_github_0001", &["a.test"])
        };
        assert!(env.load_value(1).expect_err("unset").contains("value_env = \"AGENTGATE_TEST_UNSET_SECRET_VAR\""));
    }

    #[test]
    fn short_placeholders_passthrough_hosts_and_overlaps_are_refused() {
        let mut problems = Vec::new();
        secret("short", &["bank.test"]).problems(1, |host| host == "bank.test", &mut problems);
        assert!(problems[0].contains("at least 12 characters"), "{problems:?}");
        assert!(problems[1].contains("passthrough_hosts"), "{problems:?}");
        // The suggested placeholder is itself long enough, however short the name.
        let mut problems = Vec::new();
        SecretConfig { name: "gh".to_owned(), ..secret("agp_gh_1", &["a.test"]) }.problems(1, |_| false, &mut problems);
        let example = problems[0].rsplit_once("e.g. ").map(|(_, e)| e.trim_matches('"')).unwrap_or_default();
        assert!(example.starts_with("agp_gh_") && example.len() >= MIN_PLACEHOLDER_LEN, "{problems:?}");
        let mut problems = Vec::new();
        overlap_problems(
            &[secret("agp_github_1000", &["a.test"]), secret("agp_github_100", &["a.test"])],
            &mut problems,
        );
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("make neither a substring"), "{problems:?}");
    }

    #[test]
    fn a_secret_is_bound_to_its_hosts_and_ports() {
        let s = secret("agp_github_0001", &["api.github.com", "*.example.com:8443"]);
        assert!(s.is_bound_to("api.github.com", 443));
        assert!(s.is_bound_to("a.example.com", 8443));
        assert!(!s.is_bound_to("a.example.com", 443));
        assert!(!s.is_bound_to("github.com", 443));
    }
}
