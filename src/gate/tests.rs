//! The gate's table tests, in smokescreen's style: a config, the site's policy files and one
//! request in, the answer and its decision record out (outcome, mode, agent, entry, the
//! blocking and other reason codes, whether any policy file was fetched). The files are
//! served by [`Sites`], a [`PolicyTransport`] answering from a table: the gate loads them
//! through its real cache and fetcher, with no socket. What takes more than one step (a
//! limit spent by earlier requests, a human's approval of a held request) has its own tests
//! below the table.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{HeaderMap, Response, Uri};
use http_body_util::{BodyExt, Full};

use super::*;
use crate::approvals::{Approval, ApprovalDecision, Remember};
use crate::config::Config;
use crate::fetch::{CacheSettings, PolicyTransport, TransportFuture};
use crate::metrics::Metrics;
use crate::policy::{FetchError, agents_txt};
use crate::signing::Keys;

/// The host every case asks for.
const HOST: &str = "site.test";

/// What the test transport answers for one path.
#[derive(Debug, Clone, Copy)]
enum Served {
    /// 200 with this body (`text/markdown` for a `.md` path, else `text/plain`).
    Text(&'static str),
    /// 200 with these agents.txt directives under the hash line that verifies them.
    SignedAgentsTxt(&'static str),
    /// This status, empty body.
    Status(u16),
    /// The connection was refused ([`FetchError::Unreachable`]); `true`: it timed out.
    Unreachable(bool),
    /// agentgate had no connection to spare ([`FetchError::AtCapacity`]).
    AtCapacity,
}

/// The policy files of [`HOST`], by path, served without a socket; anything not listed is a
/// 404. Counts the GETs, so a test can tell that no policy was loaded.
struct Sites {
    files: Mutex<HashMap<&'static str, Served>>,
    gets: AtomicUsize,
}

impl Sites {
    fn new(files: &[(&'static str, Served)]) -> Arc<Sites> {
        Arc::new(Sites { files: Mutex::new(files.iter().copied().collect()), gets: AtomicUsize::new(0) })
    }

    fn answer(&self, url: &Uri) -> Result<Response<crate::fetch::PolicyBody>, FetchError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        let path = url.path();
        let served = match url.host() {
            Some(HOST) => self.files.lock().expect("the file table is never poisoned").get(path).copied(),
            _ => None,
        };
        let (status, body) = match served.unwrap_or(Served::Status(404)) {
            Served::Text(text) => (200, Bytes::from_static(text.as_bytes())),
            Served::SignedAgentsTxt(directives) => (200, Bytes::from(agents_txt::fix_hash(directives.as_bytes()))),
            Served::Status(status) => (status, Bytes::new()),
            Served::Unreachable(timed_out) => {
                return Err(FetchError::Unreachable { timed_out, cause: format!("{HOST}: connection refused") });
            }
            Served::AtCapacity => {
                return Err(FetchError::AtCapacity { cause: "all 1 connections busy".to_owned() });
            }
        };
        let content_type = if path.ends_with(".md") { "text/markdown" } else { "text/plain" };
        let body = Full::new(body).map_err(|never| match never {}).boxed_unsync();
        let mut response = Response::new(body);
        *response.status_mut() = http::StatusCode::from_u16(status).expect("a test status is valid");
        response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        Ok(response)
    }
}

impl PolicyTransport for Sites {
    fn get(&self, url: Uri, _headers: HeaderMap) -> TransportFuture<'_> {
        let answer = self.answer(&url);
        Box::pin(async move { answer })
    }
}

/// The agent every case's config ends with: `sbx`, known by its address, plus `agent`'s keys.
fn config(config: &str, agent: &str) -> Config {
    let text = format!("{config}\n[[agents]]\nid = \"sbx\"\nclients = [\"127.0.0.1/32\"]\n{agent}\n");
    Config::from_toml_str(&text, "agentgate.toml").unwrap_or_else(|e| panic!("test config {text:?}: {e}"))
}

/// A gate for `config` loading its policies from `sites`, with in-process limits.
fn gate(config: &Config, sites: &Arc<Sites>) -> Gate {
    let transport: Arc<dyn PolicyTransport> = Arc::clone(sites) as Arc<dyn PolicyTransport>;
    let cache = PolicyCache::new(transport, CacheSettings::default(), Arc::new(Metrics::new()));
    Gate::new(config.gate_settings(&Keys::default()), cache, Arc::new(Limiter::in_process()))
}

/// One request as the proxy hands it to the gate.
#[derive(Debug, Clone, Copy)]
struct Request {
    method: &'static str,
    path: &'static str,
    /// The client's address (`127.0.0.1` is agent `sbx`).
    client: &'static str,
    /// `Proxy-Authorization`, when sent.
    credentials: Option<&'static str>,
    /// The addresses the network guard vetted (empty before it ran).
    addresses: &'static [IpAddr],
}

const fn get(path: &'static str) -> Request {
    Request { method: "GET", path, client: "127.0.0.1:40000", credentials: None, addresses: &[] }
}

const fn post(path: &'static str) -> Request {
    Request { method: "POST", ..get(path) }
}

impl Request {
    fn url(&self) -> String {
        format!("http://{HOST}{}", self.path)
    }

    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(credentials) = self.credentials {
            headers.insert(PROXY_AUTHORIZATION, HeaderValue::from_static(credentials));
        }
        headers
    }

    fn client(&self) -> SocketAddr {
        self.client.parse().expect("a test client address is valid")
    }

    fn origin(&self) -> Origin {
        Origin::from_uri(&self.url().parse().expect("a test URL is valid")).expect("a test URL has an origin")
    }
}

/// What the proxy would do with the gate's answer, and the record it would write.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    /// `forward`, or the block's status (`403`, `407`, `429`, `502`, `503`, `504`).
    answer: &'static str,
    /// `event.outcome`.
    outcome: &'static str,
    /// `agentgate.mode`.
    mode: &'static str,
    /// `agentgate.agent`.
    agent: String,
    /// The codes of the reasons that decided a block, in order.
    blocking: Vec<&'static str>,
    /// The codes of the other reasons, in order.
    others: Vec<&'static str>,
    /// Whether any policy file was fetched for the request.
    fetched: bool,
}

/// The expected [`Seen`] of an enforced request by `sbx` (`agent` and `mode` are checked
/// by the cases that change them).
fn seen(
    answer: &'static str,
    outcome: &'static str,
    blocking: &[&'static str],
    others: &[&'static str],
    fetched: bool,
) -> Seen {
    let (blocking, others) = (blocking.to_vec(), others.to_vec());
    Seen { answer, outcome, mode: "enforce", agent: "sbx".to_owned(), blocking, others, fetched }
}

impl Seen {
    fn of(answer: &'static str, record: &DecisionRecord, sites: &Sites) -> Seen {
        let codes: Vec<&'static str> = record.reasons.iter().map(|r| r.code.as_str()).collect();
        let (blocking, others) = codes.split_at(record.blocking.min(codes.len()));
        Seen {
            answer,
            outcome: record.outcome.as_str(),
            mode: record.mode.as_str(),
            agent: record.agent.to_string(),
            blocking: blocking.to_vec(),
            others: others.to_vec(),
            fetched: sites.gets.load(Ordering::SeqCst) > 0,
        }
    }
}

fn status(kind: BlockKind) -> &'static str {
    match kind {
        BlockKind::Policy => "403",
        BlockKind::Unauthenticated => "407",
        BlockKind::RateLimited { .. } => "429",
        BlockKind::TooLarge => "413",
        BlockKind::AnswerTooLarge => "403",
        BlockKind::OriginUnreachable { timed_out: false } => "502",
        BlockKind::OriginUnreachable { timed_out: true } | BlockKind::ReplayMiss => "504",
        BlockKind::LimitsUnavailable | BlockKind::UpstreamAtCapacity => "503",
    }
}

/// What one request ends in: the phases the proxy runs, in its order (`identify_agent`,
/// `check_egress`, then `decide`), stopping at the first block.
enum Ended {
    Forward(Permitted),
    Block(Blocked),
}

impl Ended {
    fn seen(&self, sites: &Sites) -> Seen {
        match self {
            Ended::Forward(permitted) => Seen::of("forward", permitted.record(), sites),
            Ended::Block(blocked) => Seen::of(status(blocked.kind()), blocked.record(), sites),
        }
    }

    fn record(&self) -> &DecisionRecord {
        match self {
            Ended::Forward(permitted) => permitted.record(),
            Ended::Block(blocked) => blocked.record(),
        }
    }

    fn blocked(self) -> Blocked {
        match self {
            Ended::Block(blocked) => blocked,
            Ended::Forward(permitted) => panic!("expected a block, got {:?}", permitted.record()),
        }
    }

    fn permitted(self) -> Permitted {
        match self {
            Ended::Forward(permitted) => permitted,
            Ended::Block(blocked) => panic!("expected a forward, got {:?}", blocked.record()),
        }
    }
}

impl From<Verdict> for Ended {
    fn from(verdict: Verdict) -> Ended {
        match verdict {
            Verdict::Forward(permitted) => Ended::Forward(permitted),
            Verdict::Block(blocked) => Ended::Block(blocked),
        }
    }
}

async fn send(gate: &Gate, request: Request, admitted: Option<&Admitted>) -> Ended {
    send_then_approve(gate, request, admitted, None).await
}

/// [`send`], and when the request is held for a human's approval and `approval` is given, the
/// proxy's next step: the gate's [`Gate::approved`] with it.
async fn send_then_approve(
    gate: &Gate,
    request: Request,
    admitted: Option<&Admitted>,
    approval: Option<Approval>,
) -> Ended {
    let (client, url, headers, origin) = (request.client(), request.url(), request.headers(), request.origin());
    let agent = match gate.identify_agent(client, request.method, &url, &headers) {
        Ok(agent) => agent,
        Err(blocked) => return Ended::Block(*blocked),
    };
    let req = GateRequest {
        client,
        agent: &agent,
        origin: &origin,
        url: &url,
        method: request.method,
        path_and_query: request.path,
        headers: &headers,
        addresses: &[],
        entry: Entry::Forward,
        admitted,
    };
    // As the proxy's egress step (`proxy::hold::check_egress`): the secrets, then the lists.
    let secrets = match gate.check_secrets(&req) {
        Ok(plan) => plan,
        Err(blocked) => return Ended::Block(*blocked),
    };
    if let Err(blocked) = gate.check_egress_lists(&req) {
        return Ended::Block(*blocked);
    }
    // The network guard runs between the two phases: from here on the vetted addresses are known.
    let req = GateRequest { addresses: request.addresses, ..req };
    match (gate.decide_with(req, Some(secrets)).await, approval) {
        (Verdict::Block(blocked), Some(approval)) if blocked.needs_approval() => {
            gate.approved(blocked, approval, &req).await.into()
        }
        (verdict, _) => verdict.into(),
    }
}

/// One row of the table.
struct Case {
    name: &'static str,
    /// Top-level keys and tables, before the `sbx` agent.
    config: &'static str,
    /// More keys of the `sbx` agent.
    agent: &'static str,
    files: &'static [(&'static str, Served)],
    request: Request,
    want: Seen,
}

const ROBOTS_PRIVATE: (&str, Served) = ("/robots.txt", Served::Text("User-agent: *\nDisallow: /private\n"));
const AGENTS_MD: &str = "# AGENTS.md\n\n## Identity\n- site: site.test\n\n## Trust Requirements\n\
                         - minimum-trust-level: 0\n\n## Restrictions\n- disallowed-paths: /drafts/*\n\
                         - require-human-approval: /account/*\n\n## Allowed Actions\n- access-api: true\n";
const AUTOCTL: (&str, Served) = ("/automation-preferences.txt", Served::Text("scope: /\nallowed-methods: GET, HEAD\n"));
/// An admin token, which `unlisted = "hold"` needs (someone must be able to approve).
const ADMIN: &str = "[admin]\ntoken_sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n";
const VETTED_10: &[IpAddr] = &[IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))];

fn cases() -> Vec<Case> {
    vec![
        // No files, no rules: allowed; robots.txt's 404 rides along.
        Case {
            name: "no policy files",
            config: "",
            agent: "",
            files: &[],
            request: get("/"),
            want: seen("forward", "allow", &[], &["robots.unavailable"], true),
        },
        // Operator rules come first; a match loads no policy.
        Case {
            name: "operator deny rule",
            config: "[[rules]]\nhost = \"site.test\"\npath = \"/admin\"\naction = \"deny\"\n",
            agent: "",
            files: &[],
            request: get("/admin/x"),
            want: seen("403", "deny", &["operator.deny"], &[], false),
        },
        Case {
            name: "an operator allow rule skips the site's files",
            config: "[[rules]]\nhost = \"*.test\"\npath = \"/private\"\naction = \"allow\"\n",
            agent: "",
            files: &[ROBOTS_PRIVATE],
            request: get("/private"),
            want: seen("forward", "allow", &[], &["operator.allow"], false),
        },
        Case {
            name: "a rule scoped to another agent does not apply",
            config: "[[rules]]\nhost = \"site.test\"\npath = \"/\"\nagents = [\"other\"]\naction = \"deny\"\n\
                     [[agents]]\nid = \"other\"\nclients = [\"192.0.2.9/32\"]\n",
            agent: "",
            files: &[ROBOTS_PRIVATE],
            request: get("/public"),
            want: seen("forward", "allow", &[], &[], true),
        },
        Case {
            name: "a rule scoped to this agent applies",
            config: "[[rules]]\nhost = \"site.test\"\npath = \"/\"\nagents = [\"sbx\"]\naction = \"deny\"\n",
            agent: "",
            files: &[],
            request: get("/public"),
            want: seen("403", "deny", &["operator.deny"], &[], false),
        },
        Case {
            name: "a bypass host loads no policy",
            config: "bypass_hosts = [\"site.test\"]\n",
            agent: "",
            files: &[ROBOTS_PRIVATE],
            request: get("/private"),
            want: seen("forward", "allow", &[], &["operator.bypass"], false),
        },
        Case {
            name: "a deny rule still applies to a bypass host",
            config: "bypass_hosts = [\"site.test\"]\n[[rules]]\nhost = \"site.test\"\npath = \"/admin\"\naction = \"deny\"\n",
            agent: "",
            files: &[],
            request: get("/admin"),
            want: seen("403", "deny", &["operator.deny"], &[], false),
        },
        // The agent's egress lists, before anything is looked up.
        Case {
            name: "a host allow_hosts does not list",
            config: "",
            agent: "allow_hosts = [\"docs.test\"]",
            files: &[],
            request: get("/"),
            want: seen("403", "deny", &["operator.not_allowlisted"], &[], false),
        },
        Case {
            name: "a host allow_hosts lists goes on to the site's files",
            config: "",
            agent: "allow_hosts = [\"*.test\"]",
            files: &[ROBOTS_PRIVATE],
            request: get("/private"),
            want: seen("403", "deny", &["robots.disallow", "robots.group"], &[], true),
        },
        Case {
            name: "deny_hosts wins over allow_hosts",
            config: "",
            agent: "allow_hosts = [\"site.test\"]\ndeny_hosts = [\"site.test\"]",
            files: &[],
            request: get("/"),
            want: seen("403", "deny", &["operator.denied_host"], &[], false),
        },
        Case {
            name: "a deny_hosts CIDR catches the vetted addresses",
            config: "",
            agent: "deny_hosts = [\"10.0.0.0/8\"]",
            files: &[],
            request: Request { addresses: VETTED_10, ..get("/") },
            want: seen("403", "deny", &["operator.denied_host"], &[], false),
        },
        Case {
            name: "unlisted = hold: the unlisted host waits for a human",
            config: ADMIN,
            agent: "allow_hosts = [\"docs.test\"]\nunlisted = \"hold\"",
            files: &[],
            request: get("/"),
            want: seen("403", "needs_approval", &["operator.not_allowlisted"], &[], false),
        },
        Case {
            name: "monitor: an unlisted host is would_deny, still without a policy fetch",
            config: "",
            agent: "allow_hosts = [\"docs.test\"]\nmode = \"monitor\"",
            files: &[],
            request: get("/"),
            want: Seen { mode: "monitor", ..seen("forward", "would_deny", &["operator.not_allowlisted"], &[], false) },
        },
        // Each format's file.
        Case {
            name: "robots.txt disallows, citing the rule and its group",
            config: "",
            agent: "",
            files: &[ROBOTS_PRIVATE],
            request: get("/private/a"),
            want: seen("403", "deny", &["robots.disallow", "robots.group"], &[], true),
        },
        Case {
            name: "robots.txt allows what it does not disallow",
            config: "",
            agent: "",
            files: &[ROBOTS_PRIVATE],
            request: get("/public"),
            want: seen("forward", "allow", &[], &[], true),
        },
        Case {
            name: "a policy file itself is always allowed",
            config: "",
            agent: "",
            files: &[("/robots.txt", Served::Text("User-agent: *\nDisallow: /\n"))],
            request: get("/robots.txt"),
            want: seen("forward", "allow", &[], &["policy_file"], true),
        },
        Case {
            name: "agents.txt disallows",
            config: "",
            agent: "",
            files: &[("/agents.txt", Served::SignedAgentsTxt("/admin DISALLOW\n/ ALLOW\n"))],
            request: get("/admin"),
            want: seen("403", "deny", &["agents_txt.disallow"], &["robots.unavailable"], true),
        },
        Case {
            name: "an agents.txt whose hash does not verify restricts the whole site",
            config: "",
            agent: "",
            files: &[(
                "/agents.txt",
                Served::Text("*0000000000000000000000000000000000000000000000000000000000000000\n/ ALLOW\n"),
            )],
            request: get("/"),
            want: seen("403", "deny", &["agents_txt.hash_mismatch"], &["robots.unavailable"], true),
        },
        Case {
            name: "AGENTS.md disallows a path",
            config: "",
            agent: "",
            files: &[("/AGENTS.md", Served::Text(AGENTS_MD))],
            request: get("/drafts/a"),
            want: seen("403", "deny", &["agents_md.disallowed_path"], &["robots.unavailable"], true),
        },
        Case {
            name: "AGENTS.md asks a human to approve a write",
            config: "",
            agent: "",
            files: &[("/AGENTS.md", Served::Text(AGENTS_MD))],
            request: post("/account/delete"),
            want: seen("403", "needs_approval", &["agents_md.requires_human_approval"], &["robots.unavailable"], true),
        },
        Case {
            name: "a deny beats a needs-approval",
            config: "",
            agent: "",
            files: &[
                ("/AGENTS.md", Served::Text(AGENTS_MD)),
                ("/robots.txt", Served::Text("User-agent: *\nDisallow: /account\n")),
            ],
            request: post("/account/delete"),
            want: seen(
                "403",
                "deny",
                &["robots.disallow", "robots.group"],
                &["agents_md.requires_human_approval"],
                true,
            ),
        },
        Case {
            name: "automation-preferences.txt refuses a method",
            config: "",
            agent: "",
            files: &[AUTOCTL],
            request: post("/form"),
            want: seen("403", "deny", &["autoctl.method_not_allowed"], &["robots.unavailable"], true),
        },
        Case {
            name: "automation-preferences.txt allows a listed method",
            config: "",
            agent: "",
            files: &[AUTOCTL],
            request: get("/form"),
            want: seen("forward", "allow", &[], &["robots.unavailable", "autoctl.allowed"], true),
        },
        // Files that could not be fetched.
        Case {
            name: "robots.txt answering 503 disallows everything",
            config: "",
            agent: "",
            files: &[("/robots.txt", Served::Status(503))],
            request: get("/"),
            want: seen("403", "deny", &["robots.unreachable"], &[], true),
        },
        Case {
            name: "an origin refusing the connection is 502, not a deny",
            config: "",
            agent: "",
            files: &[("/robots.txt", Served::Unreachable(false))],
            request: get("/"),
            want: seen("502", "error", &["origin.unreachable"], &["robots.unreachable"], true),
        },
        Case {
            name: "an origin whose connection timed out is 504",
            config: "",
            agent: "",
            files: &[("/robots.txt", Served::Unreachable(true))],
            request: get("/"),
            want: seen("504", "error", &["origin.unreachable"], &["robots.unreachable"], true),
        },
        Case {
            name: "agentgate at its own cap on connections is 503",
            config: "",
            agent: "",
            files: &[("/robots.txt", Served::AtCapacity)],
            request: get("/"),
            want: seen("503", "error", &["upstream.at_capacity"], &["robots.unreachable"], true),
        },
        Case {
            name: "agents.txt and AGENTS.md answering 5xx have no opinion",
            config: "",
            agent: "",
            files: &[("/agents.txt", Served::Status(502)), ("/AGENTS.md", Served::Status(503))],
            request: post("/"),
            want: seen("forward", "allow", &[], &["robots.unavailable"], true),
        },
        Case {
            name: "automation-preferences.txt answering 503 allows safe methods only",
            config: "",
            agent: "",
            files: &[("/automation-preferences.txt", Served::Status(503))],
            request: post("/"),
            want: seen("403", "deny", &["autoctl.unavailable"], &["robots.unavailable"], true),
        },
        // Modes.
        Case {
            name: "monitor mode forwards a deny as would_deny, reasons kept",
            config: "mode = \"monitor\"\n",
            agent: "",
            files: &[ROBOTS_PRIVATE],
            request: get("/private"),
            want: Seen {
                mode: "monitor",
                ..seen("forward", "would_deny", &["robots.disallow", "robots.group"], &[], true)
            },
        },
        Case {
            name: "an agent in monitor mode under a global enforce",
            config: "",
            agent: "mode = \"monitor\"",
            files: &[("/AGENTS.md", Served::Text(AGENTS_MD))],
            request: post("/account/x"),
            want: Seen {
                mode: "monitor",
                ..seen("forward", "would_deny", &["agents_md.requires_human_approval"], &["robots.unavailable"], true)
            },
        },
        Case {
            name: "an agent in enforce mode under a global monitor",
            config: "mode = \"monitor\"\n",
            agent: "mode = \"enforce\"",
            files: &[ROBOTS_PRIVATE],
            request: get("/private"),
            want: seen("403", "deny", &["robots.disallow", "robots.group"], &[], true),
        },
        Case {
            name: "monitor mode still answers an unreachable origin 502",
            config: "mode = \"monitor\"\n",
            agent: "",
            files: &[("/robots.txt", Served::Unreachable(false))],
            request: get("/"),
            want: Seen {
                mode: "monitor",
                ..seen("502", "error", &["origin.unreachable"], &["robots.unreachable"], true)
            },
        },
        // Who the agent is.
        Case {
            name: "the default agent is named by its address",
            config: "",
            agent: "",
            files: &[],
            request: Request { client: "192.0.2.7:5000", ..get("/") },
            want: Seen {
                agent: "192.0.2.7".to_owned(),
                ..seen("forward", "allow", &[], &["robots.unavailable"], true)
            },
        },
        Case {
            name: "[auth] required: no credentials is a 407 challenge, in monitor mode too",
            config: "mode = \"monitor\"\n[auth]\nrequired = true\n",
            agent: "",
            files: &[],
            request: Request { client: "192.0.2.7:5000", ..get("/") },
            want: Seen {
                mode: "monitor",
                agent: "192.0.2.7".to_owned(),
                ..seen("407", "auth_challenge", &["auth.required"], &[], false)
            },
        },
        Case {
            name: "[auth] required: a wrong token is 407",
            config: "[auth]\nrequired = true\n",
            agent: "token = \"right\"",
            files: &[],
            // sbx:wrong
            request: Request { client: "192.0.2.7:5000", credentials: Some("Basic c2J4Ondyb25n"), ..get("/") },
            want: Seen { agent: "192.0.2.7".to_owned(), ..seen("407", "deny", &["auth.invalid"], &[], false) },
        },
        Case {
            name: "[auth] required: the right token names the agent",
            config: "[auth]\nrequired = true\n",
            agent: "token = \"right\"",
            files: &[],
            // sbx:right
            request: Request { client: "192.0.2.7:5000", credentials: Some("Basic c2J4OnJpZ2h0"), ..get("/") },
            want: seen("forward", "allow", &[], &["robots.unavailable"], true),
        },
    ]
}

#[tokio::test]
async fn table() {
    let mut failures = Vec::new();
    for case in cases() {
        let sites = Sites::new(case.files);
        let gate = gate(&config(case.config, case.agent), &sites);
        let ended = send(&gate, case.request, None).await;
        let seen = ended.seen(&sites);
        let record = ended.record();
        assert_eq!(record.method, case.request.method, "{}", case.name);
        assert_eq!(record.url, case.request.url(), "{}", case.name);
        // A 407 is answered before the request is routed, so it has no entry.
        let entry = if seen.answer == "407" { None } else { Some("forward") };
        assert_eq!(record.entry, entry, "{}", case.name);
        if seen != case.want {
            failures.push(format!("{}:\n  want {:?}\n  seen {:?}", case.name, case.want, seen));
        }
    }
    assert!(failures.is_empty(), "{} of the table's cases failed:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_entry_is_documented_in_the_decision_log() {
    let doc = include_str!("../../docs/decision-log.md");
    let row =
        doc.lines().find(|line| line.starts_with("| `agentgate.entry`")).expect("docs/decision-log.md has the row");
    let entries = [Entry::Forward, Entry::Mitm, Entry::PlainTunnel, Entry::Connect, Entry::Transparent { tls: true }];
    for entry in entries {
        assert!(row.contains(&format!("`{}`", entry.as_str())), "{} is not in: {row}", entry.as_str());
    }
    assert!(Entry::Transparent { tls: true }.is_tls() && !Entry::Transparent { tls: false }.is_tls());
    assert!(Entry::Mitm.is_tls() && !Entry::PlainTunnel.is_tls());
}

#[tokio::test]
async fn an_agents_own_limit_blocks_the_request_past_it_with_a_retry_after() {
    let sites = Sites::new(&[]);
    let gate = gate(&config("", "[agents.limits]\nrequests_per_minute = 2"), &sites);
    for n in 1..=2 {
        // A permit is spent when it is taken, whether or not it is kept.
        let permitted = send(&gate, get("/"), None).await.permitted();
        assert_eq!(permitted.record().outcome.as_str(), "allow", "request {n}");
    }
    let blocked = send(&gate, get("/"), None).await.blocked();
    let BlockKind::RateLimited { retry_after_s } = blocked.kind() else {
        panic!("the third request is not rate limited: {:?}", blocked.record());
    };
    assert!((1..=60).contains(&retry_after_s), "Retry-After {retry_after_s} s is within the minute");
    assert_eq!(Seen::of("429", blocked.record(), &sites).blocking, ["operator.rate_limit"]);
    assert_eq!(blocked.record().outcome.as_str(), "rate_limited");
}

#[tokio::test]
async fn a_held_request_a_human_approves_is_forwarded_with_its_reasons_and_the_approval() {
    let sites = Sites::new(&[("/AGENTS.md", Served::Text(AGENTS_MD))]);
    let gate = gate(&config("", ""), &sites);
    let request = post("/account/delete");
    let held = send(&gate, request, None).await.blocked();
    assert!(held.needs_approval(), "an AGENTS.md approval path holds: {:?}", held.record());
    let approval = Approval {
        decision: ApprovalDecision::Approved,
        by: Some("ops".to_owned()),
        reason: None,
        at: std::time::SystemTime::now(),
        remember: Some(Remember::ThisRequest),
        until: None,
        replica: None,
    };
    let permitted = send_then_approve(&gate, request, None, Some(approval.clone())).await.permitted();
    let record = permitted.record();
    assert_eq!(record.outcome.as_str(), "allow");
    assert_eq!(record.blocking, 0, "no reason blocks an approved request");
    assert!(record.reasons.iter().any(|r| r.code.as_str() == "agents_md.requires_human_approval"));
    assert_eq!(record.approval.as_ref(), Some(&approval));
}

#[test]
fn an_unauthenticated_request_is_recorded_with_secret_values_redacted() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let value = "ghp_Unauthenticated0123456789abcdef";
    let value_file = dir.path().join("gh-token");
    std::fs::write(&value_file, value).expect("the value file");
    let secrets = format!(
        "[auth]\nrequired = true\n[[secrets]]\nname = \"gh\"\nplaceholder = \"agp_gh_placeholder_1\"\n\
         value_file = {value_file:?}\nhosts = [\"api.github.test\"]\n"
    );
    let config = config(&secrets, "token = \"sbx-token\"");
    let gate = gate(&config, &Sites::new(&[]));
    let mut headers = HeaderMap::new();
    headers.insert(USER_AGENT, HeaderValue::from_str(&format!("bot/{value}")).expect("a header value"));
    let client: SocketAddr = "10.9.9.9:4000".parse().expect("an address");
    let url = format!("http://{}.example/{value}", value.to_ascii_lowercase());
    let blocked = gate.identify_agent(client, "GET", &url, &headers).expect_err("no credentials: 407");
    let record = blocked.record();
    for text in [record.url.as_str(), &record.method, record.user_agent.as_deref().unwrap_or_default()] {
        assert!(!text.to_ascii_lowercase().contains(&value.to_ascii_lowercase()), "{text}");
    }
}

#[tokio::test]
async fn a_request_let_through_takes_over_its_undecided_record_as_the_gate_would_have_made_it() {
    let sites = Sites::new(&[ROBOTS_PRIVATE]);
    let gate = gate(&config("", ""), &sites);
    let (request, private) = (get("/open"), get("/private"));
    let (client, headers, origin) = (request.client(), request.headers(), request.origin());
    let (url, private_url) = (request.url(), private.url());
    let agent = gate.identify_agent(client, "GET", &url, &headers).unwrap_or_else(|blocked| panic!("{blocked:?}"));
    let req = GateRequest {
        client,
        agent: &agent,
        origin: &origin,
        url: &url,
        method: "GET",
        path_and_query: request.path,
        headers: &headers,
        addresses: &[],
        entry: Entry::Forward,
        admitted: None,
    };
    // Made as the proxy makes it: before the network guard vetted the addresses.
    let undecided = gate.undecided(&req);
    let req = GateRequest { addresses: VETTED_10, ..req };
    let made = Ended::from(gate.decide_with(req, None).await).permitted().into_record();
    let mut handed = Some(undecided.clone());
    let taken = Ended::from(gate.decide_reusing(req, None, || handed.take()).await).permitted().into_record();
    assert!(handed.is_none(), "the undecided record was taken");
    assert_ne!(taken.id, undecided.id, "stamped anew");
    assert_eq!(taken.destination, made.destination);
    assert_eq!(DecisionRecord { timestamp: made.timestamp, id: made.id, ..taken }, made);
    // A refusal may be held for a human: the request keeps its undecided record meanwhile.
    let refused = GateRequest { url: &private_url, path_and_query: private.path, ..req };
    let mut handed = Some(undecided);
    let blocked = Ended::from(gate.decide_reusing(refused, None, || handed.take()).await).blocked();
    assert_eq!(Seen::of("403", blocked.record(), &sites).blocking, ["robots.disallow", "robots.group"]);
    assert!(handed.is_some(), "a refusal leaves the undecided record where it was");
}
