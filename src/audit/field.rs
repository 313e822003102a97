//! The decision log's field names, in one place. They follow OpenTelemetry/ECS where a
//! convention exists and use the `agentgate.` prefix otherwise. Once released, a name is
//! never renamed: dashboards, alerts and the security team's queries depend on it. A new
//! field is added here, to [`ORDER`], and to `docs/decision-log.md` in the same commit.

/// When the decision was made: RFC 3339, UTC, milliseconds (`2026-11-22T10:15:30.123Z`).
pub const TIMESTAMP: &str = "@timestamp";
/// Unique id of the record, also sent to the agent in block responses (32 hex digits).
pub const EVENT_ID: &str = "event.id";
/// What kind of event this is, as ECS asks, on every line: `["network", "web"]`.
pub const EVENT_CATEGORY: &str = "event.category";
/// Which line of its request this is (see [`super::Line`]): `["start"]` (a forwarded
/// request's decision, written before forwarding), `["end"]` (its completion, or the one
/// line of a request answered without a start line), `["denied"]` (a blocked request's one
/// line) or `["allowed"]` (a passthrough tunnel's one line, written as it opens).
pub const EVENT_TYPE: &str = "event.type";
/// The gate's decision: `allow`, `deny`, `needs_approval`, `rate_limited`, `would_deny`,
/// `auth_challenge` or `error` (see [`super::Outcome`]). Logs written before this field
/// existed carry the decision in `event.outcome`; readers take either.
pub const EVENT_ACTION: &str = "event.action";
/// ECS's outcome: `success` (the gate did what it decided), `failure` (it could not: the
/// action is `error`) or `unknown` (a start line). See [`super::EcsOutcome`].
pub const EVENT_OUTCOME: &str = "event.outcome";
/// Time from the request head to the end of the response, in nanoseconds (ECS convention).
pub const EVENT_DURATION: &str = "event.duration";
/// The agent's IP address as seen by the proxy.
pub const CLIENT_ADDRESS: &str = "client.address";
/// The agent's TCP source port.
pub const CLIENT_PORT: &str = "client.port";
/// The agent id the gate identified (config agent, `Proxy-Authorization` user or address).
pub const AGENT: &str = "agentgate.agent";
/// `enforce` or `monitor`: see [`crate::policy::operator::Mode`].
pub const MODE: &str = "agentgate.mode";
/// Which replica wrote the record (`instance` in the config; by default the host name).
pub const INSTANCE: &str = "agentgate.instance";
/// How the request reached agentgate: `forward` (absolute-form on the proxy port), `connect`
/// (a CONNECT's own decision), `mitm` (inside an intercepted tunnel), `tunnel` (plain HTTP in
/// a tunnel), `transparent` (a connection redirected to `[transparent] listen`).
pub const ENTRY: &str = "agentgate.entry";
/// The request method as sent (`GET`, `POST`, ...).
pub const HTTP_REQUEST_METHOD: &str = "http.request.method";
/// The request URL without user info or fragment, query values redacted unless `log_query`.
pub const URL_FULL: &str = "url.full";
/// The URL's host (IPv6 literals keep their brackets, as ECS asks).
pub const URL_DOMAIN: &str = "url.domain";
/// The URL's path, without the query.
pub const URL_PATH: &str = "url.path";
/// The URL's port: the one it names, else its scheme's default.
pub const URL_PORT: &str = "url.port";
/// The vetted address a forwarded request was dialled to; only on records of requests sent on.
pub const DESTINATION_IP: &str = "destination.ip";
/// The port a forwarded request was dialled to, with `destination.ip`.
pub const DESTINATION_PORT: &str = "destination.port";
/// The request's `User-Agent` header, when it had one.
pub const USER_AGENT_ORIGINAL: &str = "user_agent.original";
/// The purposes the agent declared for this request (config, or its `agentgate-purpose`
/// header), when it declared any.
pub const PURPOSES: &str = "agentgate.purposes";
/// The secrets agentgate injected into the request and where (`github (header
/// authorization)`), never their values, when it injected any.
pub const SECRETS: &str = "agentgate.secrets";
/// Request body bytes agentgate read from the agent and sent on to the origin, counted as
/// they streamed; on `end` lines of forwarded requests.
pub const HTTP_REQUEST_BODY_BYTES: &str = "http.request.body.bytes";
/// The status the agent received (from the origin, or the proxy's own block or error answer).
pub const HTTP_RESPONSE_STATUS_CODE: &str = "http.response.status_code";
/// Response body bytes sent to the agent, counted as they streamed; on `end` lines of
/// forwarded requests.
pub const HTTP_RESPONSE_BODY_BYTES: &str = "http.response.body.bytes";
/// Set when the response body was cut short, by whom: `client` (the agent stopped reading
/// or hung up), `origin` (the origin's body failed) or `budget` (a byte budget was crossed).
/// The byte counts then say how far it got.
pub const BODY_CUT: &str = "agentgate.body.cut";
/// Why: an array of `{source, code, line, rule, digest}` objects, possibly empty.
pub const REASONS: &str = "agentgate.reasons";
/// Limits that applied: an array of `{source, kind, ..., scope, line}` objects.
pub const LIMITS: &str = "agentgate.limits";
/// The site's usage preferences that applied (SEMANTICS U6, docs/usage.md): an array of
/// `{source, line, path, label, purpose, value, stance}` objects, allowing or refusing.
pub const USAGE: &str = "agentgate.usage";
/// How a request held for a human's approval ended (`docs/approvals.md`): `approved`,
/// `denied`, `timeout`, `hung_up`, `queue_full`, `shutdown`, or `remembered` (an earlier approval let it
/// through). Only on records of such requests, with the other `agentgate.approval.*` fields.
pub const APPROVAL_DECISION: &str = "agentgate.approval.decision";
/// Who decided: the admin token's name (`anonymous` when the admin API has no token); for
/// `remembered`, who gave the approval it remembers. Absent when nobody decided.
pub const APPROVAL_BY: &str = "agentgate.approval.by";
/// The reason the operator gave, when they gave one.
pub const APPROVAL_REASON: &str = "agentgate.approval.reason";
/// When it was decided: RFC 3339, UTC, milliseconds.
pub const APPROVAL_AT: &str = "agentgate.approval.at";
/// How far an operator's answer reaches: `this-request`, `path-for-agent-15m` or
/// `host-for-agent`.
pub const APPROVAL_REMEMBER: &str = "agentgate.approval.remember";
/// When a `host-for-agent` grant ends: RFC 3339, UTC, milliseconds.
pub const APPROVAL_UNTIL: &str = "agentgate.approval.until";
/// The replica (its `instance` name) whose admin API took the answer, when it is not the one
/// that held the request (`[approvals] store = "redis"`, docs/approvals.md).
pub const APPROVAL_REPLICA: &str = "agentgate.approval.replica";
/// The Web Bot Auth `keyid` (the key's RFC 7638 thumbprint) the forwarded request was signed
/// with (`docs/signing.md`); only on records of signed requests.
pub const SIGNATURE_KEYID: &str = "agentgate.signature.keyid";
/// The JSON-RPC method of a request to an MCP server (`[[mcp]]`, docs/mcp.md), `,`-joined
/// for a batch; `response` for a message answering the server.
pub const MCP_METHOD: &str = "agentgate.mcp.method";
/// The tool a `tools/call` names (`,`-joined for a batch).
pub const MCP_TOOL: &str = "agentgate.mcp.tool";
/// A digest of the request's `Mcp-Session-Id` (16 hex digits of its SHA-256), never the id.
pub const MCP_SESSION: &str = "agentgate.mcp.session";
/// The JSON-RPC id of the request (`,`-joined for a batch).
pub const MCP_REQUEST_ID: &str = "agentgate.mcp.request_id";
/// A `tools/call`'s arguments as JSON, redacted; only with `[[mcp]] log_arguments = true`.
pub const MCP_ARGUMENTS: &str = "agentgate.mcp.arguments";
/// What went wrong, when the outcome is `error`.
pub const ERROR_MESSAGE: &str = "error.message";
/// Who is at fault, when the outcome is `error`: `client` or `origin`.
pub const ERROR_TYPE: &str = "error.type";

/// Every field, in the order a line carries them. Optional fields are left out of a line
/// when they have no value; the rest keep this order.
pub const ORDER: [&str; 45] = [
    TIMESTAMP,
    EVENT_ID,
    EVENT_CATEGORY,
    EVENT_TYPE,
    EVENT_ACTION,
    EVENT_OUTCOME,
    EVENT_DURATION,
    CLIENT_ADDRESS,
    CLIENT_PORT,
    AGENT,
    MODE,
    INSTANCE,
    ENTRY,
    HTTP_REQUEST_METHOD,
    URL_FULL,
    URL_DOMAIN,
    URL_PATH,
    URL_PORT,
    DESTINATION_IP,
    DESTINATION_PORT,
    USER_AGENT_ORIGINAL,
    PURPOSES,
    SECRETS,
    HTTP_REQUEST_BODY_BYTES,
    HTTP_RESPONSE_STATUS_CODE,
    HTTP_RESPONSE_BODY_BYTES,
    BODY_CUT,
    REASONS,
    LIMITS,
    USAGE,
    APPROVAL_DECISION,
    APPROVAL_BY,
    APPROVAL_REASON,
    APPROVAL_AT,
    APPROVAL_REMEMBER,
    APPROVAL_UNTIL,
    APPROVAL_REPLICA,
    SIGNATURE_KEYID,
    MCP_METHOD,
    MCP_TOOL,
    MCP_SESSION,
    MCP_REQUEST_ID,
    MCP_ARGUMENTS,
    ERROR_MESSAGE,
    ERROR_TYPE,
];
