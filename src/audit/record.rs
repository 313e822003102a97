//! The decision record: one per request, built at the edge by the gate, and its encoding as
//! one JSON line with the field names from [`super::field`] in a stable order.

use std::borrow::Cow;
use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::approval::Approval;
use super::ecs::{self, EcsOutcome};
use super::field;
use super::json::{self, Object};
use super::redact::redact_url;
use crate::policy::operator::Mode;
use crate::policy::usage::Preference;
use crate::policy::{self, Limit, LimitKind, LimitScope, Limits, Reason};

/// What the gate decided for a request, as the log's `event.action` says it (logs written
/// before that field carry it in `event.outcome`). Wider than [`policy::Outcome`]: limits,
/// monitor mode, proxy authentication and errors are decided outside the policy core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Outcome {
    /// Forwarded.
    Allow,
    /// Blocked by a policy or operator rule (403).
    Deny,
    /// Blocked until a human approves (403).
    NeedsApproval,
    /// Blocked by a rate or concurrency limit (429).
    RateLimited,
    /// Monitor mode: forwarded, but enforce mode would have blocked it.
    WouldDeny,
    /// `[auth] required` and the request carried no usable credentials: a `407` challenge,
    /// which clients such as git answer with their credentials. Not a refusal.
    AuthChallenge,
    /// The proxy could not complete the request (bad request, origin unreachable, bug).
    Error,
}

impl Outcome {
    /// Every outcome, in the order reports list them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Allow,
        Outcome::Deny,
        Outcome::NeedsApproval,
        Outcome::RateLimited,
        Outcome::WouldDeny,
        Outcome::AuthChallenge,
        Outcome::Error,
    ];

    /// The value written to `event.action`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Allow => "allow",
            Outcome::Deny => "deny",
            Outcome::NeedsApproval => "needs_approval",
            Outcome::RateLimited => "rate_limited",
            Outcome::WouldDeny => "would_deny",
            Outcome::AuthChallenge => "auth_challenge",
            Outcome::Error => "error",
        }
    }

    /// The outcome written as `value`, if it is one this version knows.
    pub fn parse(value: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|outcome| outcome.as_str() == value)
    }

    /// True when a policy or rule refused the request, or would have in monitor mode.
    pub fn is_denial(self) -> bool {
        matches!(self, Outcome::Deny | Outcome::NeedsApproval | Outcome::WouldDeny)
    }
}

impl From<policy::Outcome> for Outcome {
    fn from(outcome: policy::Outcome) -> Self {
        match outcome {
            policy::Outcome::Allow => Outcome::Allow,
            policy::Outcome::Deny => Outcome::Deny,
            policy::Outcome::NeedsApproval => Outcome::NeedsApproval,
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which line of its request a record is, as written to `event.type` (ECS; with
/// `event.category` `["network", "web"]`). Every request has exactly one line that is not a
/// `Start`, so counting requests is counting lines whose `event.type` is not `["start"]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Line {
    /// A forwarded request's decision, committed before forwarding under `[audit]
    /// on_failure = "block"`: `["start"]`. Its `End` line follows.
    Start,
    /// The request's last line: `["end"]`, or `["denied"]` when its outcome refused it
    /// (`deny`, `needs_approval`, `rate_limited`) or challenged it (`auth_challenge`).
    #[default]
    End,
    /// The `End` line of a forwarded request whose `Start` line was committed and whose
    /// decision has not changed since: `["end"]` with what identifies the request and what
    /// the end adds (status, duration, bytes, cut, error), not the decision's fields the
    /// start line already holds (`user_agent.original`, `agentgate.purposes`,
    /// `agentgate.secrets`, `agentgate.reasons`, `agentgate.limits`, `agentgate.approval.*`,
    /// `agentgate.signature.keyid`); readers merge the two by `event.id`
    /// (`docs/decision-log.md`). [`DecisionRecord::set_reasons`] turns it back into `End`.
    Completion,
    /// A passthrough tunnel's one line, written as its bytes start to flow (they are not
    /// seen, so nothing ends it): `["allowed"]`.
    TunnelOpened,
}

/// `event.category` of every line (ECS: a network event about a web request).
const EVENT_CATEGORY: [&str; 2] = ["network", "web"];

/// Who cut a response body short, as `agentgate.body.cut` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyCut {
    /// The agent stopped reading it or hung up.
    Client,
    /// The origin's body failed (a reset, a connection closed early).
    Origin,
    /// A byte budget was crossed and agentgate cut it.
    Budget,
}

impl BodyCut {
    /// The `agentgate.body.cut` value: `client`, `origin` or `budget`.
    pub fn as_str(self) -> &'static str {
        match self {
            BodyCut::Client => "client",
            BodyCut::Origin => "origin",
            BodyCut::Budget => "budget",
        }
    }
}

/// The unique id of one record: 48 bits of milliseconds since the Unix epoch, then 80
/// random bits, shown as 32 lower-case hex digits. Ids sort by time (to the millisecond),
/// so a log shipper or a person can order them without parsing `@timestamp`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(u128);

impl EventId {
    /// A fresh id for a record made at `at`.
    pub fn generate(at: SystemTime) -> Self {
        let millis = unix_millis(at) & ((1 << 48) - 1);
        let random = rand::random::<u128>() & ((1 << 80) - 1);
        EventId((u128::from(millis) << 80) | random)
    }

    /// The 32 lower-case hex digits, most significant first, without the formatter (the log
    /// writes an id on every line).
    fn hex(self) -> Ascii<32> {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut hex = [0; 32];
        for (i, digit) in hex.iter_mut().enumerate() {
            *digit = DIGITS[((self.0 >> (124 - 4 * i)) & 0xf) as usize];
        }
        Ascii(hex)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.hex().as_str())
    }
}

/// Fixed-width text of ASCII digits and punctuation, made without the formatter: an event id
/// or a timestamp as the log writes them.
pub(crate) struct Ascii<const N: usize>([u8; N]);

impl<const N: usize> Ascii<N> {
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(&self.0).expect("only ASCII is written into it")
    }
}

impl<const N: usize> fmt::Display for Ascii<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One request's decision as the log records it. Built by the gate once the decision is
/// known (before a block response, so the response can carry [`DecisionRecord::id`]); the
/// response fields are filled in when the response is done. The URL is kept as the request
/// had it and redacted only when the line is encoded, so no code path can skip redaction.
/// There is no header map: `Authorization`, `Cookie` and `Proxy-Authorization` cannot leak.
#[derive(Debug, Clone, PartialEq)]
pub struct DecisionRecord {
    /// When the decision was made (`@timestamp`).
    pub timestamp: SystemTime,
    /// Unique id (`event.id`).
    pub id: EventId,
    /// Which of its request's lines this is (`event.type`).
    pub line: Line,
    /// What the gate decided (`event.action`; `event.outcome` is derived, `super::ecs`).
    pub outcome: Outcome,
    /// Enforce or monitor (`agentgate.mode`).
    pub mode: Mode,
    /// The replica that wrote it (`agentgate.instance`; the gate sets it on every record).
    pub instance: Option<Arc<str>>,
    /// How the request reached agentgate (`agentgate.entry`; the gate sets it on every
    /// record of a parsed request or connection).
    pub entry: Option<&'static str>,
    /// Request head to end of response (`event.duration`, nanoseconds); `None` leaves it out.
    pub duration: Option<Duration>,
    /// The agent's address (`client.address`, `client.port`).
    pub client: SocketAddr,
    /// The agent id (`agentgate.agent`), shared with the agent's identity.
    pub agent: Arc<str>,
    /// The request method (`http.request.method`); a standard method's name is a static text.
    pub method: Cow<'static, str>,
    /// The absolute request URL as received, secrets included; redacted on encoding
    /// (`url.full`, `url.domain`).
    pub url: String,
    /// The vetted address the request is sent to (`destination.ip`, `destination.port`;
    /// written only for a request sent on).
    pub destination: Option<SocketAddr>,
    /// The `User-Agent` header (`user_agent.original`).
    pub user_agent: Option<String>,
    /// The purposes in effect for the request (`agentgate.purposes`; left out when none),
    /// shared with the agent's config when it declared them there.
    pub purposes: Arc<[String]>,
    /// The secrets injected into the request and where, never their values
    /// (`agentgate.secrets`, e.g. `github (header authorization)`; left out when none).
    pub secrets: Vec<String>,
    /// Body bytes read from the agent and sent on (`http.request.body.bytes`).
    pub request_bytes: Option<u64>,
    /// The status the agent got (`http.response.status_code`).
    pub status: Option<u16>,
    /// Body bytes sent to the agent (`http.response.body.bytes`).
    pub response_bytes: Option<u64>,
    /// Who cut the response body short, when it was (`agentgate.body.cut`).
    pub body_cut: Option<BodyCut>,
    /// Every reason from the decision, blocking ones first (`agentgate.reasons`).
    pub reasons: Vec<Reason>,
    /// How many of the leading `reasons` decided a block (0 when allowed); each is written
    /// with `"blocking": true`, so a report counts what blocked, not what allowed alongside.
    pub blocking: usize,
    /// Limits that applied (`agentgate.limits`).
    pub limits: Limits,
    /// The usage preferences that applied (`agentgate.usage`).
    pub usage: Vec<Preference>,
    /// How a request held for a human's approval ended (`agentgate.approval.*`); `None` for
    /// every other request.
    pub approval: Option<Approval>,
    /// The Web Bot Auth `keyid` the forwarded request was signed with
    /// (`agentgate.signature.keyid`); `None` when it was not signed.
    pub signature_keyid: Option<String>,
    /// The MCP request it is, on a `[[mcp]]` host (`agentgate.mcp.*`); boxed, as only MCP
    /// requests have one.
    pub mcp: Option<Box<McpFields>>,
    /// What went wrong, for outcome `error` (`error.message`). Must not hold header values.
    pub error: Option<String>,
    /// Who is at fault, for outcome `error` (`error.type`).
    pub error_type: Option<ErrorType>,
}

/// What a record of a request to an MCP server says of it (`agentgate.mcp.*`,
/// docs/mcp.md); each left out when `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpFields {
    /// The JSON-RPC method (`agentgate.mcp.method`); `None` for a `GET` stream or `DELETE`.
    pub method: Option<String>,
    /// The tool called (`agentgate.mcp.tool`).
    pub tool: Option<String>,
    /// The session id's digest, never the id (`agentgate.mcp.session`).
    pub session: Option<String>,
    /// The JSON-RPC id (`agentgate.mcp.request_id`).
    pub request_id: Option<String>,
    /// The arguments, redacted, when the table logs them (`agentgate.mcp.arguments`).
    pub arguments: Option<String>,
}

/// Who caused an `error` outcome: what `error.type` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorType {
    /// The agent sent something unusable: a bad target, a malformed or cut-short body (4xx).
    Client,
    /// The origin could not be reached or failed the exchange (502, 504).
    Origin,
    /// agentgate's own bound refused it: every connection to origins under
    /// `[upstream] max_connections` was busy (503).
    Proxy,
}

impl ErrorType {
    /// The `error.type` value: `client`, `origin` or `proxy`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::Client => "client",
            ErrorType::Origin => "origin",
            ErrorType::Proxy => "proxy",
        }
    }
}

/// The standard methods (RFC 9110 §9, and PATCH), whose names a record never copies.
const STANDARD_METHODS: [&str; 9] = ["GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"];

/// `method` as a record keeps it: a standard method's name as a static text (no copy per
/// request), any other as written.
fn method_text(method: &str) -> Cow<'static, str> {
    STANDARD_METHODS
        .iter()
        .find(|standard| **standard == method)
        .map_or_else(|| method.to_owned().into(), |m| (*m).into())
}

impl DecisionRecord {
    /// A record stamped now with a fresh id, and no reasons, limits or response facts yet.
    pub fn new(
        outcome: Outcome,
        mode: Mode,
        client: SocketAddr,
        agent: impl Into<Arc<str>>,
        method: &str,
        url: impl Into<String>,
    ) -> Self {
        let timestamp = SystemTime::now();
        DecisionRecord {
            timestamp,
            id: EventId::generate(timestamp),
            line: Line::End,
            outcome,
            mode,
            instance: None,
            entry: None,
            duration: None,
            client,
            agent: agent.into(),
            method: method_text(method),
            url: url.into(),
            destination: None,
            user_agent: None,
            purposes: Arc::default(),
            secrets: Vec::new(),
            request_bytes: None,
            status: None,
            response_bytes: None,
            body_cut: None,
            reasons: Vec::new(),
            blocking: 0,
            limits: Limits::default(),
            usage: Vec::new(),
            approval: None,
            signature_keyid: None,
            mcp: None,
            error: None,
            error_type: None,
        }
    }

    /// Stamps the record now with a fresh id, as [`new`](Self::new) does: a record made for a
    /// request before its decision, taken over by the decision.
    pub fn restamp(&mut self) {
        self.timestamp = SystemTime::now();
        self.id = EventId::generate(self.timestamp);
    }

    /// Records `decision`'s reasons, those that decided a block marked as such. A
    /// [`Line::Completion`] becomes a whole `End` line: its decision is no longer the one its
    /// start line holds.
    pub fn set_reasons(&mut self, decision: &policy::Decision) {
        if self.line == Line::Completion {
            self.line = Line::End;
        }
        self.reasons = decision.reasons.clone();
        self.blocking = decision.blocking_reasons().len();
        self.usage = decision.usage.clone();
    }

    /// Adds the usage preferences a response stated (SEMANTICS U4, U6). They change what the
    /// decision says the site said, so a [`Line::Completion`] becomes a whole `End` line, as
    /// in [`set_reasons`](Self::set_reasons).
    pub fn add_usage(&mut self, usage: Vec<Preference>) {
        if usage.is_empty() {
            return;
        }
        if self.line == Line::Completion {
            self.line = Line::End;
        }
        if self.usage.is_empty() {
            self.usage = usage;
        } else {
            self.usage.extend(usage);
        }
    }

    /// The `event.type` of this line (see [`Line`]).
    pub fn event_type(&self) -> &'static str {
        match self.line {
            Line::Start => "start",
            Line::TunnelOpened => "allowed",
            Line::End | Line::Completion
                if matches!(
                    self.outcome,
                    Outcome::Deny | Outcome::NeedsApproval | Outcome::RateLimited | Outcome::AuthChallenge
                ) =>
            {
                "denied"
            }
            Line::End | Line::Completion => "end",
        }
    }

    /// The record as one JSON line (with its `\n`), fields in [`field::ORDER`], the URL
    /// redacted unless `log_query`, optional fields left out when empty.
    pub fn to_json_line(&self, log_query: bool) -> String {
        // Sized for a typical line, so it is written without regrowing.
        let mut line = String::with_capacity(LINE_CAPACITY);
        self.write_json_line(log_query, &mut line);
        line
    }

    /// [`to_json_line`](Self::to_json_line) at the end of `out`: what the writer encodes into
    /// a buffer it keeps, so a line costs no allocation of its own.
    pub(super) fn write_json_line(&self, log_query: bool, out: &mut String) {
        encode(self, log_query, out);
        out.push('\n');
    }
}

/// The buffer a line is encoded into: an allowed request with four reasons and three limits
/// takes about 1,300 bytes; a longer line grows it.
pub(super) const LINE_CAPACITY: usize = 2048;

/// The longest instance name kept (a DNS name's limit).
const MAX_INSTANCE: usize = 253;

/// The `agentgate.instance` of this process: `configured` when set, else the host name
/// (`/etc/hostname`, else `$HOSTNAME`), else `agentgate`. Read when the gate is built.
pub fn instance_name(configured: &str) -> Arc<str> {
    if !configured.is_empty() {
        return Arc::from(configured);
    }
    let from_file = std::fs::read_to_string("/etc/hostname").ok();
    let name = [from_file, std::env::var("HOSTNAME").ok()]
        .into_iter()
        .flatten()
        .map(|text| text.lines().next().unwrap_or_default().trim().to_owned())
        .find(|name| !name.is_empty() && name.len() <= MAX_INSTANCE && !name.chars().any(char::is_control));
    Arc::from(name.as_deref().unwrap_or("agentgate"))
}

/// Problems in `instance`, each naming the value and the fix.
pub(crate) fn instance_problems(instance: &str, problems: &mut Vec<String>) {
    if instance.len() > MAX_INSTANCE || instance.chars().any(|c| c.is_control() || c.is_whitespace()) {
        problems.push(format!(
            "instance = {instance:?}: at most {MAX_INSTANCE} bytes, no spaces or control characters; \
             write e.g. \"agentgate-1\", or \"\" for the host name"
        ));
    }
}

/// A record for tests: a fixed client, `GET`, enforce mode.
#[cfg(test)]
pub(super) fn sample(agent: &str, outcome: Outcome, url: &str) -> DecisionRecord {
    let client = SocketAddr::from(([127, 0, 0, 1], 40_000));
    DecisionRecord::new(outcome, Mode::Enforce, client, agent, "GET", url)
}

/// Writes `record` as one JSON object, members in the schema's order (`docs/decision-log.md`).
fn encode(record: &DecisionRecord, log_query: bool, out: &mut String) {
    let url = redact_url(&record.url, log_query);
    let mut map = Object::new(out);
    map.str(field::TIMESTAMP, rfc3339_millis(record.timestamp).as_str());
    map.str(field::EVENT_ID, record.id.hex().as_str());
    map.array(field::EVENT_CATEGORY, EVENT_CATEGORY, json::string);
    map.array(field::EVENT_TYPE, [record.event_type()], json::string);
    map.str(field::EVENT_ACTION, record.outcome.as_str());
    map.str(field::EVENT_OUTCOME, EcsOutcome::of(record).as_str());
    if let Some(duration) = record.duration {
        map.u64(field::EVENT_DURATION, u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX));
    }
    map.ip(field::CLIENT_ADDRESS, record.client.ip());
    map.u64(field::CLIENT_PORT, record.client.port().into());
    map.str(field::AGENT, &record.agent);
    map.str(field::MODE, record.mode.as_str());
    if let Some(instance) = &record.instance {
        map.str(field::INSTANCE, instance);
    }
    if let Some(entry) = record.entry {
        map.str(field::ENTRY, entry);
    }
    map.str(field::HTTP_REQUEST_METHOD, &record.method);
    map.str(field::URL_FULL, &url.full);
    if let Some(domain) = &url.domain {
        map.str(field::URL_DOMAIN, domain);
    }
    ecs::url_parts(&mut map, &url.full);
    ecs::destination(&mut map, record);
    // The decision's fields are on the start line, which a completion follows.
    let decision = record.line != Line::Completion;
    if let Some(user_agent) = record.user_agent.as_ref().filter(|_| decision) {
        map.str(field::USER_AGENT_ORIGINAL, user_agent);
    }
    if decision && !record.purposes.is_empty() {
        map.array(field::PURPOSES, record.purposes.iter(), |out, purpose| json::string(out, purpose));
    }
    if decision && !record.secrets.is_empty() {
        map.array(field::SECRETS, &record.secrets, |out, secret| json::string(out, secret));
    }
    if let Some(bytes) = record.request_bytes {
        map.u64(field::HTTP_REQUEST_BODY_BYTES, bytes);
    }
    if let Some(status) = record.status {
        map.u64(field::HTTP_RESPONSE_STATUS_CODE, status.into());
    }
    if let Some(bytes) = record.response_bytes {
        map.u64(field::HTTP_RESPONSE_BODY_BYTES, bytes);
    }
    if let Some(cut) = record.body_cut {
        map.str(field::BODY_CUT, cut.as_str());
    }
    if decision {
        let blocking = record.blocking;
        map.array(field::REASONS, record.reasons.iter().enumerate(), |out, (i, r)| reason(out, r, i < blocking));
    }
    if decision && !record.limits.is_empty() {
        map.array(field::LIMITS, record.limits.iter(), limit);
    }
    if decision && !record.usage.is_empty() {
        map.array(field::USAGE, &record.usage, preference);
    }
    if let Some(approval) = record.approval.as_ref().filter(|_| decision) {
        map.str(field::APPROVAL_DECISION, approval.decision.as_str());
        if let Some(by) = &approval.by {
            map.str(field::APPROVAL_BY, by);
        }
        if let Some(reason) = &approval.reason {
            map.str(field::APPROVAL_REASON, reason);
        }
        map.str(field::APPROVAL_AT, rfc3339_millis(approval.at).as_str());
        if let Some(remember) = approval.remember {
            map.str(field::APPROVAL_REMEMBER, remember.as_str());
        }
        if let Some(until) = approval.until {
            map.str(field::APPROVAL_UNTIL, rfc3339_millis(until).as_str());
        }
        if let Some(replica) = &approval.replica {
            map.str(field::APPROVAL_REPLICA, replica);
        }
    }
    if let Some(keyid) = record.signature_keyid.as_ref().filter(|_| decision) {
        map.str(field::SIGNATURE_KEYID, keyid);
    }
    if let Some(mcp) = record.mcp.as_ref().filter(|_| decision) {
        let fields = [
            (field::MCP_METHOD, &mcp.method),
            (field::MCP_TOOL, &mcp.tool),
            (field::MCP_SESSION, &mcp.session),
            (field::MCP_REQUEST_ID, &mcp.request_id),
            (field::MCP_ARGUMENTS, &mcp.arguments),
        ];
        for (key, value) in fields {
            if let Some(value) = value {
                map.str(key, value);
            }
        }
    }
    if let Some(message) = &record.error {
        map.str(field::ERROR_MESSAGE, message);
    }
    if let Some(error_type) = record.error_type {
        map.str(field::ERROR_TYPE, error_type.as_str());
    }
    map.end();
}

/// One `agentgate.reasons` element: `{"source", "code", "line", "rule", "digest",
/// "blocking"}`, `line` and `digest` left out when unknown, `blocking` written only when
/// true (this reason decided the block).
fn reason(out: &mut String, reason: &Reason, blocking: bool) {
    let mut map = Object::new(out);
    map.str("source", reason.source.as_str());
    map.str("code", reason.code.as_str());
    if let Some(line) = reason.line {
        map.u64("line", line.into());
    }
    map.str("rule", &reason.rule);
    if let Some(digest) = &reason.digest {
        map.str("digest", digest);
    }
    if blocking {
        map.true_("blocking");
    }
    map.end();
}

/// One `agentgate.usage` element: `{"source", "line", "path", "label", "purpose", "value",
/// "stance"}`, `line`, `path` and `purpose` left out when the preference has none.
fn preference(out: &mut String, pref: &Preference) {
    let mut map = Object::new(out);
    map.str("source", pref.source.as_str());
    if let Some(line) = pref.line {
        map.u64("line", line.into());
    }
    if let Some(path) = &pref.path {
        map.str("path", path);
    }
    map.str("label", &pref.label);
    if let Some(purpose) = pref.purpose {
        map.str("purpose", purpose);
    }
    map.str("value", &pref.value);
    map.str("stance", pref.stance.as_str());
    map.end();
}

/// One `agentgate.limits` element: `{"source", "kind": "rate", "requests", "window_s",
/// "scope", "line"}`, `{"source", "kind": "delay", "requests": 1, "delay_ms", "scope", "line"}`
/// (robots.txt `Crawl-delay`), `{"source", "kind": "concurrent", "max", "scope", "line"}` or
/// `{"source", "kind": "bytes", "direction", "bytes", "window_s", "scope", "line"}` (a byte budget).
fn limit(out: &mut String, limit: &Limit) {
    let mut map = Object::new(out);
    map.str("source", limit.source.as_str());
    match limit.kind {
        LimitKind::Rate { requests, window_s } => {
            map.str("kind", "rate");
            map.u64("requests", requests.into());
            map.u64("window_s", window_s.into());
        }
        LimitKind::Delay { millis } => {
            map.str("kind", "delay");
            map.u64("requests", 1);
            map.u64("delay_ms", millis.into());
        }
        LimitKind::Concurrent { max } => {
            map.str("kind", "concurrent");
            map.u64("max", max.into());
        }
        LimitKind::Bytes { direction, bytes, window_s } => {
            map.str("kind", "bytes");
            map.str("direction", direction.as_str());
            map.u64("bytes", bytes);
            map.u64("window_s", window_s.into());
        }
    }
    let scope = match limit.scope {
        LimitScope::Agent => "agent",
        LimitScope::Origin => "origin",
        LimitScope::Host => "host",
        LimitScope::Rule { .. } => "rule",
    };
    map.str("scope", scope);
    if let Some(line) = limit.reason.line {
        map.u64("line", line.into());
    }
    map.end();
}

fn unix_millis(at: SystemTime) -> u64 {
    // A clock before 1970 is a broken clock; the epoch is the least wrong answer.
    at.duration_since(UNIX_EPOCH).map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
}

/// `at` as RFC 3339 in UTC with milliseconds, e.g. `2023-11-14T22:13:20.000Z`, as humantime's
/// `format_rfc3339_millis` writes it but without the formatter (the log writes one on every
/// line; through humantime and `write!` it cost ~700 instructions, bench/RESULTS.md). Years
/// 1970 to 9999 only, as humantime: a clock outside them is a broken clock, and the nearest
/// time it can write is the least wrong answer.
pub(crate) fn rfc3339_millis(at: SystemTime) -> Ascii<24> {
    let latest = UNIX_EPOCH + Duration::from_millis(253_402_300_799_999);
    let since = at.clamp(UNIX_EPOCH, latest).duration_since(UNIX_EPOCH).unwrap_or_default();
    let (days, seconds) = (since.as_secs() / 86_400, since.as_secs() % 86_400);
    let (year, month, day) = civil_date(days);
    let mut text = *b"0000-00-00T00:00:00.000Z";
    let fields = [
        (0..4, year),
        (5..7, month),
        (8..10, day),
        (11..13, seconds / 3600),
        (14..16, seconds / 60 % 60),
        (17..19, seconds % 60),
        (20..23, u64::from(since.subsec_millis())),
    ];
    for (range, mut value) in fields {
        for digit in text[range].iter_mut().rev() {
            *digit = b'0' + (value % 10) as u8;
            value /= 10;
        }
    }
    Ascii(text)
}

/// The proleptic Gregorian (year, month, day) of `days` after 1970-01-01 (Howard Hinnant's
/// `civil_from_days`, for days on or after the epoch).
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z - era * 146_097;
    let year_of_era = (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 { shifted_month + 3 } else { shifted_month - 9 };
    (year_of_era + era * 400 + u64::from(month <= 2), month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{AgentsMdCode, AgentsTxtCode, OperatorCode, RobotsCode, Source};

    fn at(millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(millis)
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_millis() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (1_700_000_000_007, "2023-11-14T22:13:20.007Z"),
            (1_709_251_199_999, "2024-02-29T23:59:59.999Z"),
            (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
            (253_402_300_799_000, "9999-12-31T23:59:59.000Z"),
            (253_402_300_800_000, "9999-12-31T23:59:59.999Z"),
        ];
        for (millis, expected) in cases {
            assert_eq!(rfc3339_millis(at(millis)).to_string(), expected, "{millis}");
        }
    }

    #[test]
    fn timestamps_are_what_humantime_writes_across_its_range() {
        let latest = 253_402_300_799_999_u64;
        // Every day boundary of four leap cycles, then a stride through the whole range.
        let days = (0..4 * 1461).map(|day| day * 86_400_000 + 86_399_999);
        let stride = (0..=100_000).map(|i| latest / 100_000 * i + i % 1000);
        for millis in days.chain(stride).chain([latest]) {
            let expected = humantime::format_rfc3339_millis(at(millis)).to_string();
            assert_eq!(rfc3339_millis(at(millis)).to_string(), expected, "{millis}");
        }
    }

    #[test]
    fn event_ids_sort_by_time_and_differ() {
        let earlier = EventId::generate(at(1_700_000_000_000));
        let later = EventId::generate(at(1_700_000_000_001));
        assert!(earlier < later);
        assert_eq!(earlier.to_string().len(), 32);
        assert!(earlier.to_string().starts_with("018bcfe56800"), "{earlier}");
        assert_eq!(EventId(0xab << 120 | 0x0f).to_string(), format!("{:032x}", 0xab_u128 << 120 | 0x0f));
        let same_ms: std::collections::HashSet<_> = (0..1000).map(|_| EventId::generate(at(5))).collect();
        assert_eq!(same_ms.len(), 1000);
    }

    #[test]
    fn the_instance_is_the_configured_name_else_the_host_name() {
        assert_eq!(&*instance_name("replica-7"), "replica-7");
        let default = instance_name("");
        assert!(!default.is_empty() && !default.contains('\n'), "{default:?}");
        let mut problems = Vec::new();
        instance_problems("two words", &mut problems);
        instance_problems("replica-7", &mut problems);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("instance = \"two words\""), "{problems:?}");
    }

    #[test]
    fn event_type_tells_a_requests_lines_apart() {
        let mut rec = fixed_record();
        assert_eq!(rec.event_type(), "denied", "a block's one line");
        rec.outcome = Outcome::Allow;
        assert_eq!(rec.event_type(), "end");
        rec.line = Line::Start;
        assert_eq!(rec.event_type(), "start");
        rec.outcome = Outcome::WouldDeny;
        rec.line = Line::End;
        assert_eq!(rec.event_type(), "end", "monitor mode forwarded it");
        rec.outcome = Outcome::RateLimited;
        assert_eq!(rec.event_type(), "denied");
        rec.outcome = Outcome::Allow;
        rec.line = Line::Completion;
        assert_eq!(rec.event_type(), "end", "a forwarded request's end after its start");
        rec.line = Line::TunnelOpened;
        assert_eq!(rec.event_type(), "allowed");
        assert!(rec.to_json_line(false).contains(r#""event.category":["network","web"],"event.type":["allowed"]"#));
    }

    #[test]
    fn a_standard_method_is_kept_without_a_copy_and_any_method_as_written() {
        for method in STANDARD_METHODS {
            assert!(matches!(method_text(method), Cow::Borrowed(m) if m == method), "{method}");
        }
        for method in ["get", "Get", "PROPFIND", "M-SEARCH", ""] {
            assert!(matches!(method_text(method), Cow::Owned(m) if m == method), "{method:?}");
        }
        let client = SocketAddr::from(([10, 0, 0, 7], 51234));
        let record = DecisionRecord::new(Outcome::Allow, Mode::Enforce, client, "bot-1", "PROPFIND", "http://e.test/");
        assert!(record.to_json_line(false).contains(r#""http.request.method":"PROPFIND""#));
    }

    #[test]
    fn outcomes_round_trip_and_map_from_policy() {
        for outcome in Outcome::ALL {
            assert_eq!(Outcome::parse(outcome.as_str()), Some(outcome));
        }
        assert_eq!(Outcome::parse("maybe"), None);
        assert_eq!(Outcome::from(policy::Outcome::NeedsApproval), Outcome::NeedsApproval);
        assert_eq!(Outcome::from(policy::Outcome::Deny).as_str(), "deny");
    }

    fn fixed_record() -> DecisionRecord {
        let mut rec = DecisionRecord::new(
            Outcome::Deny,
            Mode::Enforce,
            "10.0.0.7:51234".parse().expect("a literal socket address"),
            "bot-1",
            "GET",
            "https://user:pw@Example.com/private/x?q=secret",
        );
        rec.timestamp = at(1_700_000_000_123);
        rec.id = EventId(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef);
        rec
    }

    #[test]
    fn a_minimal_line_has_exactly_the_required_fields_in_order() {
        assert_eq!(
            fixed_record().to_json_line(false),
            concat!(
                r#"{"@timestamp":"2023-11-14T22:13:20.123Z","event.id":"0123456789abcdef0123456789abcdef","#,
                r#""event.category":["network","web"],"event.type":["denied"],"#,
                r#""event.action":"deny","event.outcome":"success","#,
                r#""client.address":"10.0.0.7","client.port":51234,"agentgate.agent":"bot-1","#,
                r#""agentgate.mode":"enforce","http.request.method":"GET","#,
                r#""url.full":"https://Example.com/private/x?q=REDACTED","url.domain":"example.com","#,
                r#""url.path":"/private/x","url.port":443,"agentgate.reasons":[]}"#,
                "\n"
            )
        );
    }

    #[test]
    fn a_full_line_carries_every_field_in_order() {
        let mut rec = fixed_record();
        rec.outcome = Outcome::Error;
        rec.mode = Mode::Monitor;
        rec.duration = Some(Duration::from_micros(1500));
        rec.user_agent = Some("ExampleBot/1.0 \"quoted\"\n".to_owned());
        rec.purposes = Arc::from(["search".to_owned()]);
        rec.secrets = vec!["github (header authorization)".to_owned()];
        rec.status = Some(502);
        rec.request_bytes = Some(12);
        rec.response_bytes = Some(0);
        rec.body_cut = Some(BodyCut::Origin);
        rec.reasons = vec![
            Reason::new(RobotsCode::Disallow, "Disallow: /private")
                .at_line(4)
                .with_digest(Some(std::sync::Arc::<str>::from("ab".repeat(32)))),
            Reason::new(OperatorCode::Allow, "host = example.com"),
        ];
        rec.limits = Limits::from([
            Limit {
                source: Source::AgentsTxt,
                kind: LimitKind::Rate { requests: 10, window_s: 60 },
                scope: LimitScope::Rule { line: 3 },
                reason: Reason::new(AgentsTxtCode::Limit, "/ ALLOW limit=10").at_line(3),
            },
            Limit {
                source: Source::AgentsMd,
                kind: LimitKind::Concurrent { max: 2 },
                scope: LimitScope::Host,
                reason: Reason::new(AgentsMdCode::ConcurrentSessions, "concurrent-sessions: 2"),
            },
        ]);
        rec.approval = Some(Approval {
            decision: crate::audit::ApprovalDecision::Denied,
            by: Some("alice".to_owned()),
            reason: Some("not on a Friday".to_owned()),
            at: at(1_700_000_001_000),
            remember: Some(crate::audit::Remember::HostForAgent),
            until: Some(at(1_700_003_601_000)),
            replica: Some("replica-b".to_owned()),
        });
        rec.error = Some("origin unreachable: connection refused".to_owned());
        rec.error_type = Some(ErrorType::Origin);
        rec.signature_keyid = Some("kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k".to_owned());
        rec.instance = Some(Arc::from("replica-2"));
        rec.mcp = Some(Box::new(McpFields {
            method: Some("tools/call".to_owned()),
            tool: Some("search".to_owned()),
            session: Some("0123456789abcdef".to_owned()),
            request_id: Some("7".to_owned()),
            arguments: Some(r#"{"q":"x"}"#.to_owned()),
        }));
        rec.entry = Some("transparent");
        rec.destination = Some("93.184.215.14:443".parse().expect("a literal socket address"));
        rec.usage = crate::policy::usage::vocab::header_preferences("train-ai=n");
        let line = rec.to_json_line(true);
        let value: serde_json::Value = serde_json::from_str(&line).expect("the encoder writes JSON");
        let keys: Vec<&str> = value.as_object().expect("a line is an object").keys().map(String::as_str).collect();
        let mut sorted_order = field::ORDER.to_vec();
        sorted_order.sort_unstable();
        assert_eq!(keys, sorted_order, "every field present");
        let positions: Vec<usize> =
            field::ORDER.iter().map(|key| line.find(&format!("\"{key}\":")).expect(key)).collect();
        assert!(positions.is_sorted(), "keys in field::ORDER: {line}");
        assert_eq!(
            line,
            concat!(
                r#"{"@timestamp":"2023-11-14T22:13:20.123Z","event.id":"0123456789abcdef0123456789abcdef","#,
                r#""event.category":["network","web"],"event.type":["end"],"#,
                r#""event.action":"error","event.outcome":"failure","#,
                r#""event.duration":1500000,"client.address":"10.0.0.7","client.port":51234,"#,
                r#""agentgate.agent":"bot-1","agentgate.mode":"monitor","agentgate.instance":"replica-2","#,
                r#""agentgate.entry":"transparent","http.request.method":"GET","#,
                r#""url.full":"https://Example.com/private/x?q=secret","url.domain":"example.com","#,
                r#""url.path":"/private/x","url.port":443,"destination.ip":"93.184.215.14","destination.port":443,"#,
                r#""user_agent.original":"ExampleBot/1.0 \"quoted\"\n","agentgate.purposes":["search"],"#,
                r#""agentgate.secrets":["github (header authorization)"],"#,
                r#""http.request.body.bytes":12,"http.response.status_code":502,"#,
                r#""http.response.body.bytes":0,"agentgate.body.cut":"origin","agentgate.reasons":[{"source":"robots.txt","code":"robots.disallow","#,
                r#""line":4,"rule":"Disallow: /private","digest":"abababababababababababababababababababababababababababababababab"},"#,
                r#"{"source":"operator","code":"operator.allow","rule":"host = example.com"}],"#,
                r#""agentgate.limits":[{"source":"agents.txt","kind":"rate","requests":10,"window_s":60,"scope":"rule","line":3},"#,
                r#"{"source":"AGENTS.md","kind":"concurrent","max":2,"scope":"host"}],"#,
                r#""agentgate.usage":[{"source":"header Content-Usage","label":"train-ai","purpose":"train-ai","#,
                r#""value":"n","stance":"refuse"}],"#,
                r#""agentgate.approval.decision":"denied","agentgate.approval.by":"alice","#,
                r#""agentgate.approval.reason":"not on a Friday","agentgate.approval.at":"2023-11-14T22:13:21.000Z","#,
                r#""agentgate.approval.remember":"host-for-agent","agentgate.approval.until":"2023-11-14T23:13:21.000Z","#,
                r#""agentgate.approval.replica":"replica-b","#,
                r#""agentgate.signature.keyid":"kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k","#,
                r#""agentgate.mcp.method":"tools/call","agentgate.mcp.tool":"search","#,
                r#""agentgate.mcp.session":"0123456789abcdef","agentgate.mcp.request_id":"7","#,
                r#""agentgate.mcp.arguments":"{\"q\":\"x\"}","#,
                r#""error.message":"origin unreachable: connection refused","error.type":"origin"}"#,
                "\n"
            )
        );
    }

    #[test]
    fn a_completion_line_carries_what_the_end_adds_and_leaves_the_decision_to_its_start_line() {
        let mut rec = fixed_record();
        rec.outcome = Outcome::Allow;
        rec.user_agent = Some("ExampleBot/1.0".to_owned());
        rec.purposes = Arc::from(["search".to_owned()]);
        rec.secrets = vec!["github (header authorization)".to_owned()];
        rec.reasons = vec![Reason::new(OperatorCode::Allow, "host = example.com")];
        rec.limits = Limits::from([Limit {
            source: Source::AgentsMd,
            kind: LimitKind::Concurrent { max: 2 },
            scope: LimitScope::Host,
            reason: Reason::new(AgentsMdCode::ConcurrentSessions, "concurrent-sessions: 2"),
        }]);
        rec.signature_keyid = Some("kid".to_owned());
        rec.line = Line::Start;
        let start = rec.to_json_line(false);
        rec.line = Line::Completion;
        rec.duration = Some(Duration::from_micros(1500));
        rec.request_bytes = Some(0);
        rec.status = Some(200);
        rec.response_bytes = Some(1024);
        assert_eq!(
            rec.to_json_line(false),
            concat!(
                r#"{"@timestamp":"2023-11-14T22:13:20.123Z","event.id":"0123456789abcdef0123456789abcdef","#,
                r#""event.category":["network","web"],"event.type":["end"],"#,
                r#""event.action":"allow","event.outcome":"success","#,
                r#""event.duration":1500000,"client.address":"10.0.0.7","client.port":51234,"#,
                r#""agentgate.agent":"bot-1","agentgate.mode":"enforce","http.request.method":"GET","#,
                r#""url.full":"https://Example.com/private/x?q=REDACTED","url.domain":"example.com","#,
                r#""url.path":"/private/x","url.port":443,"http.request.body.bytes":0,"http.response.status_code":200,"http.response.body.bytes":1024}"#,
                "\n"
            )
        );
        assert!(start.contains(r#""event.action":"allow","event.outcome":"unknown","#), "{start}");
        for field in [
            "user_agent.original",
            "agentgate.purposes",
            "agentgate.secrets",
            "agentgate.reasons",
            "agentgate.limits",
            "agentgate.signature.keyid",
        ] {
            assert!(start.contains(&format!("\"{field}\":")), "the start line holds {field}: {start}");
        }
        // A decision changed after the start line (C17's would_deny): written whole again.
        rec.outcome = Outcome::WouldDeny;
        rec.set_reasons(&policy::Decision::single(policy::Outcome::Deny, Reason::new(OperatorCode::Allow, "x")));
        assert_eq!(rec.line, Line::End);
        assert!(rec.to_json_line(false).contains(r#""agentgate.reasons":[{"#), "written whole");
    }
}
