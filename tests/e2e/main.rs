//! End-to-end tests of agentgate's proxy edge: the real proxy started in-process on
//! `127.0.0.1:0`, a real hyper origin (HTTP and HTTPS from a test CA), and real clients
//! (reqwest, curl, raw sockets). Loopback only, no fixed ports.
//!
//! No test sleeps to let something happen. What comes true a moment after its cause (a log
//! line flushed when the writer is idle, a reload, a slot given back) is looked at until it
//! holds, bounded, by the one helper `support::wait::eventually`, whose pause between two
//! looks is the suite's only sleep; everything else awaits an event (the origin's `arrived`,
//! a response, a closed connection) under a `timeout`. Tests of the proxy's own timers
//! (idle and first-byte timeouts, the approval timeout, Redis leases) set them short and wait
//! for their effect; the admin API's slowed answers to wrong tokens are the one lower bound on
//! elapsed time asserted.
//!
//! Tests that need more than a fresh machine's Rust, Python 3 and curl (redis-server,
//! Chromium, wget, root for network namespaces) are `#[ignore = "needs ..."]`: a plain
//! `cargo test` lists them as ignored with the reason, and `scripts/test.sh` installs what
//! they need and runs them too (`support::tools`).
//!
//! One binary with modules so it links once (STYLE.md §4):
//! - `forward`: absolute-form HTTP through the proxy (bodies, HEAD/204/304, keep-alive, headers);
//! - `tunnel`: CONNECT, MITM (h1/h2 on both sides, IP targets), passthrough, plain HTTP in a tunnel;
//! - `websocket`: WebSocket echo through MITM, plain HTTP, and a plain tunnel;
//! - `connections`: silent connections closed after the first-byte timeout, per-client caps,
//!   idle HTTP/1.1 and h2 connections closed (never one with a request in flight);
//! - `docker`: docker/trust-ca.sh against fake Debian and Alpine roots, compose.yml and the
//!   Dockerfile as the docs describe them;
//! - `errors`: what the proxy answers when the client or the origin is at fault;
//! - `startup`: what `agentgate run` and `config check` print for a newcomer;
//! - `cli`: every printing subcommand in a pipe its reader leaves early, `run` with nobody
//!   reading its banner, `config check` listing every problem in one run, the docs' AGENTS.md
//!   example linted and explained;
//! - `clients`: the printed recipe followed by wget (a wgetrc) and headless Chromium
//!   (`<-loopback>` and an NSS database) to a loopback HTTPS site through the proxy;
//! - `shutdown`: graceful shutdown lets in-flight requests finish;
//! - `gate`: each policy format blocks and allows over HTTP and MITM'd HTTPS, fetch outcomes;
//! - `gate_cache`: one fetch per policy file within max-age and for concurrent first requests;
//! - `inspect`: `[inspect]` refuses credentials in JSON, gzip'd, form, header, query and path
//!   before the origin sees them, passes a clean 200 KiB body byte for byte, follows
//!   `on_unreadable`, refuses WebSocket upgrades, monitors, and never shows the value;
//! - `mcp`: `[[mcp]]` with the official MCP Python SDK as server (Streamable HTTP over TLS,
//!   behind the MITM) and client: tools listed and called by an agent's table, a refused call
//!   answered with a JSON-RPC error the session goes on after, event-stream answers filtered,
//!   one record per request with method and tool, no argument logged, a body over `max_body`;
//! - `egress`: per-agent egress lists (allowlist, denylist, ports), rules scoped to agents,
//!   monitor mode, new hosts held for a human and granted for a while, `audit suggest`,
//!   `explain --config --agent`, reload;
//! - `agents`: proxy authentication (407, then credentials), agents by client address, trust
//!   levels, purposes, per-agent monitor mode, HEAD of a blocked path on h1 and h2;
//! - `limits`: AGENTS.md and agents.txt rate limits (429), concurrent sessions, withheld downloads;
//! - `redaction`: no request secret on the real binary's stderr or in its decision log;
//! - `audit`: the audit promise, nothing forwarded before its record is on disk;
//! - `audit_report`: `agentgate audit summary` and `grep` over a real run's log, rotated and gzip'd;
//! - `scorecard`: `agentgate audit report --html` and the console's `/report` over a real run of
//!   three agents, the page's figures equal to `audit summary`'s, rendered offline in Chromium;
//! - `archive`: the policy archive and its bound, `agentgate audit show` (the archived line behind
//!   a decision after the site changed its file) and `audit shadow` (a candidate config's changes
//!   to a monitor run, checked against a live run under it);
//! - `gate_log`: one decision-log line per request, redaction, monitor mode, operator rules,
//!   passthrough CONNECT decisions, shutdown with requests in flight;
//! - `unreachable`: an origin refusing or timing out is 502/504 `origin.unreachable`, not a deny;
//! - `git`: git itself through the proxy to a `git http-backend` origin: named by its token
//!   after a 407 under `[auth] required`, and a clone refused by AGENTS.md shows why;
//! - `log_schema`: what docs/decision-log.md promises a reader can check (reason digests);
//! - `record`: a run recorded (`[record]`) and replayed with the origins stopped and nothing
//!   resolved or dialled (same answers, same decisions, `replay.miss`), no secret value in the
//!   recording, `record har` read by haralyzer, the recording's `max_bytes` bound;
//! - `records`: exactly one decision record per request, whichever await its client hangs up at;
//! - `refused_connect`: a CONNECT refused before its `200` answered inside the tunnel, where
//!   curl and reqwest show it; a passthrough host's refusal and a `407` at the CONNECT;
//! - `scrubbing`: agentgate's own encodings of a secret (Basic token, percent-encoded query) and
//!   every content-coding layer of a bound host's answer, undone or withheld;
//! - `secrets`: `[[secrets]]` injected towards their hosts only, scrubbed from answers, never logged, rotated by SIGHUP;
//! - `approvals`: requests held for a human's approval, approved, denied, timed out, hung up,
//!   refused by a full queue or let through by a remembered approval; the approval API's token;
//! - `admin`: every admin endpoint, its token, `/metrics` moving with traffic, policy purge,
//!   `agentgate.local` answered with no lookup or dial;
//! - `console`: the console's login and session cookie, the live decision stream and per-agent
//!   counts, and the page in a real headless Chromium (`support::browser`);
//! - `reload`: config edits and SIGHUP reload without a restart, SIGHUP reopens the decision
//!   log, size rotation keeps every record once;
//! - `redis`: limits shared by replicas through a real redis-server (rates, concurrency
//!   leases, the store failing and coming back, memory and redis stores answering alike);
//! - `fleet_approvals`: approvals shared by two replicas through a real redis-server (a hold
//!   listed and answered on the other replica, a grant admitting there, Redis stopped);
//! - `upstream`: connections to origins bounded: a global cap across many
//!   origins, idle connections per origin, WebSocket and tunnels counted, a recorded 503 at
//!   the cap, and the binary's open files and RSS with large robots.txt files;
//! - `network`: the network guard (loopback spellings, internal ranges never dialled,
//!   policy redirects, CONNECT ports and own address, canonical operator rules, h2c);
//! - `parent`: a parent proxy (real Squid): HTTPS and plain HTTP as CONNECTs to the vetted
//!   address, policy fetches and passthrough through it, `parent_bypass`, the guard before
//!   the parent, a `407` and a parent that is down answered 502 naming it, no password shown;
//! - `transparent`: transparent mode in real network namespaces (nftables redirect, curl and
//!   python clients that ignore proxy variables, passthrough, fronting, no loop);
//! - `evidence`: the decision log's hash chain and signed checkpoints over rotation, SIGHUP,
//!   gzip and `kill -9`, `audit verify` naming each tampering, an independent Python verifier;
//! - `signing`: Web Bot Auth signatures on a signing agent's requests, verified by an
//!   independent Python verifier with the keys `agentgate keys` prints; forgery, rotation;
//! - `usage`: usage preferences (robots.txt `Content-Usage` / `Content-Signal` lines, the
//!   `Content-Usage` and `tdm-reservation` response headers, tdmrep.json fetched for training
//!   agents only) against each agent's declared purposes, with reqwest, curl and python3,
//!   over plain HTTP and MITM; monitor mode.

mod admin;
mod agents;
mod approvals;
mod archive;
mod audit;
mod audit_report;
mod bytes;
mod cli;
mod clients;
mod connections;
mod console;
mod docker;
mod egress;
mod errors;
mod evidence;
mod fleet;
mod fleet_approvals;
mod forward;
mod gate;
mod gate_cache;
mod gate_log;
mod git;
mod inspect;
mod limits;
mod log_schema;
mod mcp;
mod network;
mod parent;
mod record;
mod records;
mod redaction;
mod redis;
mod refused_connect;
mod reload;
mod scorecard;
mod scrubbing;
mod secrets;
mod shutdown;
mod signing;
mod startup;
mod support;
mod transparent;
mod tunnel;
mod unreachable;
mod upstream;
mod usage;
mod websocket;
