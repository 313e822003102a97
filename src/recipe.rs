//! What `agentgate run` prints once it listens: the line scripts wait for
//! (`agentgate listening on http://ADDR ...`, grepped by bench/run.sh and the tests), where
//! the decision log, config, mode and admin API are, and the client recipe the README gives:
//! both proxy variable spellings (curl reads only lowercase `http_proxy`), the CA for every
//! client family (curl, git and Debian's wget ignore `SSL_CERT_FILE`; Chromium reads its NSS
//! database), and the traps a newcomer falls into (Node's built-in `fetch` ignores proxy
//! variables; Chromium sends loopback and link-local addresses past `--proxy-server` unless
//! told `<-loopback>`; `NO_PROXY` skips the gate; git sends an agent token only after a 407
//! unless told `GIT_HTTP_PROXY_AUTHMETHOD=basic`, and the operator is told when `[[agents]]`
//! tokens go unchallenged, or agent boundaries hold only for agents that cooperate). Each client's lines are run by the e2e tests (`clients`: wget
//! and Chromium as printed here; `git`: git with and without that variable).
//!
//! Never: reads the environment or the network; it formats what `main` hands it.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::Path;

use crate::audit::AuditConfig;
use crate::policy::operator::Mode;

/// The facts of a running proxy that the start-up text reports.
#[derive(Debug, Clone, Copy)]
pub struct Startup<'a> {
    /// Where the proxy listens.
    pub listen: SocketAddr,
    /// agentgate's CA certificate, an absolute path.
    pub ca: &'a str,
    /// The config file in use; `None` for the embedded default.
    pub config: Option<&'a Path>,
    /// The global mode.
    pub mode: Mode,
    /// `[audit]`: where the decision log goes (`-` is standard output) and how big it may grow.
    pub decision_log: &'a AuditConfig,
    /// `[admin] listen`; `None` when off.
    pub admin: Option<SocketAddr>,
    /// `[[agents]]` have tokens and `[auth] required = false`
    /// ([`crate::agents::tokens_unchallenged`]): said, with what git needs.
    pub tokens_unchallenged: bool,
    /// Agent boundaries that hold only for cooperating agents ([`crate::agents::advisories`]),
    /// each said on a `warning` line.
    pub warnings: &'a [String],
}

impl Startup<'_> {
    /// The start-up text, every line ending in `\n`. The first line is the one scripts wait
    /// for and never changes shape.
    pub fn render(&self) -> String {
        let (addr, ca) = (self.listen, self.ca);
        let mut out = format!(
            "agentgate listening on http://{addr} (CA {ca}); for agents: HTTPS_PROXY=http://{addr} HTTP_PROXY=http://{addr} SSL_CERT_FILE={ca} REQUESTS_CA_BUNDLE={ca} NODE_EXTRA_CA_CERTS={ca}\n"
        );
        let config = self.config.map_or_else(|| "embedded default (config/agentgate.toml)".to_owned(), show);
        let log = decision_log(self.decision_log);
        let admin = self.admin.map_or_else(|| "off".to_owned(), |a| format!("http://{a}"));
        let _ = writeln!(out, "  config        {config}");
        let _ = writeln!(out, "  mode          {}", self.mode.as_str());
        let _ = writeln!(out, "  decision log  {log}");
        let _ = writeln!(out, "  admin API     {admin}");
        if self.tokens_unchallenged {
            out.push_str(TOKENS_UNCHALLENGED);
        }
        for warning in self.warnings {
            let _ = writeln!(out, "  warning       {warning}");
        }
        out.push_str(&client_recipe(addr, ca));
        out
    }
}

/// What the start-up text says when `[[agents]]` have tokens and `[auth] required = false`.
const TOKENS_UNCHALLENGED: &str = "  auth          [[agents]] have tokens, but [auth] required = false: a client that sends none is the default [agent],
                and git sends its proxy credentials only after a 407 challenge. Set [auth] required = true (agents
                matched by their clients networks are still not challenged), or run git with GIT_HTTP_PROXY_AUTHMETHOD=basic.
";

/// The client recipe for a proxy at `addr` with its CA at `ca`: the README's, filled in.
pub fn client_recipe(addr: SocketAddr, ca: &str) -> String {
    format!(
        "\
Agents, in a shell (curl reads only the lowercase proxy variables, most others either):
  export http_proxy=http://{addr} https_proxy=http://{addr} HTTP_PROXY=http://{addr} HTTPS_PROXY=http://{addr}
  export SSL_CERT_FILE={ca} REQUESTS_CA_BUNDLE={ca} CURL_CA_BUNDLE={ca} GIT_SSL_CAINFO={ca} NODE_EXTRA_CA_CERTS={ca}
Or fetch the CA through the proxy itself: curl -x http://{addr} -o agentgate-ca.pem http://agentgate.local/ca.pem
git with an agent token (HTTPS_PROXY=http://id:token@{addr}) sends it only after a 407 challenge; to send it at once:
  export GIT_HTTP_PROXY_AUTHMETHOD=basic
Node.js: the built-in fetch ignores proxy variables; use undici's EnvHttpProxyAgent
  (import {{ setGlobalDispatcher, EnvHttpProxyAgent }} from 'undici'; setGlobalDispatcher(new EnvHttpProxyAgent())).
wget (Debian's, GnuTLS) ignores SSL_CERT_FILE: give it the CA in its wgetrc (or --ca-certificate={ca}):
  echo ca_certificate={ca} >> ~/.wgetrc
Chromium: --proxy-server alone sends localhost, 127.0.0.0/8, [::1] and link-local addresses (169.254.0.0/16,
  fe80::/10) straight to the site: start it with <-loopback>, and trust the CA in its NSS database
  (certutil is in Debian's libnss3-tools):
  mkdir -p ~/.pki/nssdb && certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n agentgate -i {ca}
  chromium --proxy-server=http://{addr} --proxy-bypass-list='<-loopback>' --no-first-run --disable-background-networking --disable-component-update --disable-sync
  (the last four flags cut most of Chromium's own traffic to Google, which would go through agentgate as the agent;
  set allow_hosts on the agent for what is left; as root Chromium also needs --no-sandbox)
NO_PROXY/no_proxy: hosts listed there (e.g. localhost,127.0.0.1) go past agentgate, neither gated nor logged.
"
    )
}

/// A path as absolute as can be said without touching the file system's links.
fn show(path: &Path) -> String {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string()
}

/// Where the decision log goes and how big it may grow on disk.
fn decision_log(audit: &AuditConfig) -> String {
    const MIB: u64 = 1024 * 1024;
    if audit.path == Path::new("-") {
        return "standard output".to_owned();
    }
    let path = show(&audit.path);
    match audit.disk_bound() {
        Some(bound) if audit.max_file_size.is_multiple_of(MIB) => format!(
            "{path} (rotated at {} MiB, {} kept: at most {} MiB)",
            audit.max_file_size / MIB,
            audit.max_files,
            bound / MIB
        ),
        Some(bound) => format!(
            "{path} (rotated at {} bytes, {} kept: at most {bound} bytes)",
            audit.max_file_size, audit.max_files
        ),
        None => format!("{path} (not rotated by agentgate: max_file_size = 0; rotate it with logrotate)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_keeps_its_shape_and_the_rest_names_where_things_are() {
        let audit = AuditConfig { path: "/var/log/agentgate/decisions.jsonl".into(), ..AuditConfig::default() };
        let startup = Startup {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            ca: "/var/lib/agentgate/certs/agentgate-ca.pem",
            config: Some(Path::new("/etc/agentgate/agentgate.toml")),
            mode: Mode::Monitor,
            decision_log: &audit,
            admin: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            tokens_unchallenged: false,
            warnings: &[],
        };
        let text = startup.render();
        let mut lines = text.lines();
        let first = lines.next().unwrap_or_default();
        assert!(first.starts_with("agentgate listening on http://127.0.0.1:8080 (CA /var/lib/agentgate/certs/agentgate-ca.pem); for agents: HTTPS_PROXY=http://127.0.0.1:8080 "), "{first}");
        assert_eq!(lines.next(), Some("  config        /etc/agentgate/agentgate.toml"));
        assert_eq!(lines.next(), Some("  mode          monitor"));
        assert_eq!(
            lines.next(),
            Some("  decision log  /var/log/agentgate/decisions.jsonl (rotated at 100 MiB, 10 kept: at most 1100 MiB)")
        );
        assert_eq!(lines.next(), Some("  admin API     http://127.0.0.1:9090"));
        let ca = "/var/lib/agentgate/certs/agentgate-ca.pem";
        assert!(text.contains("export http_proxy=http://127.0.0.1:8080 https_proxy=http://127.0.0.1:8080 "), "{text}");
        assert!(text.contains(&format!("CURL_CA_BUNDLE={ca} GIT_SSL_CAINFO={ca}")), "{text}");
        assert!(text.contains("EnvHttpProxyAgent") && text.contains("neither gated nor logged"), "{text}");
        assert!(text.contains(&format!("  echo ca_certificate={ca} >> ~/.wgetrc\n")), "{text}");
        let chromium = "  chromium --proxy-server=http://127.0.0.1:8080 --proxy-bypass-list='<-loopback>' --no-first-run --disable-background-networking --disable-component-update --disable-sync\n";
        assert!(text.contains(chromium) && text.contains(&format!("-n agentgate -i {ca}\n")), "{text}");

        let stdout = AuditConfig { path: "-".into(), ..AuditConfig::default() };
        let defaults = Startup { config: None, decision_log: &stdout, admin: None, ..startup }.render();
        assert!(defaults.contains("  config        embedded default (config/agentgate.toml)\n"), "{defaults}");
        assert!(defaults.contains("  decision log  standard output\n"), "{defaults}");
        assert!(defaults.contains("  admin API     off\n"), "{defaults}");
        assert!(!text.contains("  auth  ") && text.contains("  export GIT_HTTP_PROXY_AUTHMETHOD=basic\n"), "{text}");

        let unrotated = AuditConfig { max_file_size: 0, ..audit.clone() };
        let unrotated = Startup { decision_log: &unrotated, ..startup }.render();
        assert!(
            unrotated
                .contains("decisions.jsonl (not rotated by agentgate: max_file_size = 0; rotate it with logrotate)\n"),
            "{unrotated}"
        );
        let odd = AuditConfig { max_file_size: 5000, max_files: 2, ..audit.clone() };
        let odd = Startup { decision_log: &odd, ..startup }.render();
        assert!(odd.contains("(rotated at 5000 bytes, 2 kept: at most 15000 bytes)\n"), "{odd}");

        let warnings = ["the default [agent] is open".to_owned()];
        let warned = Startup { warnings: &warnings, ..startup }.render();
        assert!(warned.contains("\n  warning       the default [agent] is open\n"), "{warned}");

        let unchallenged = Startup { tokens_unchallenged: true, ..startup }.render();
        let mut lines = unchallenged.lines().skip(5);
        let auth = lines.next().unwrap_or_default();
        assert!(
            auth.starts_with("  auth          [[agents]] have tokens, but [auth] required = false"),
            "{unchallenged}"
        );
        assert!(
            unchallenged.contains("Set [auth] required = true")
                && unchallenged.contains("GIT_HTTP_PROXY_AUTHMETHOD=basic.")
        );
    }
}
