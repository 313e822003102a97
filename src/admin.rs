//! The admin API: a small HTTP/1.1 server on `[admin] listen`, apart from the proxy port,
//! for operators and their tools: `/healthz`, `/readyz`, `/metrics` (Prometheus text),
//! `/ca.pem`, `/policies` (an origin's cached files; `DELETE` purges them), `/explain` (a
//! live decision with its reasons), `/decisions/recent` (the latest decision-log lines),
//! `/approvals` (held requests an operator approves or denies), `/agents` (each agent's egress
//! lists and the hosts granted to it), and the console at `/` for a
//! browser (`docs/console.md`). With `[admin] token_sha256` or `[[admin.tokens]]` set, every
//! endpoint but `/healthz` (and the console's login and static assets) needs
//! `Authorization: Bearer TOKEN` or a console session. The reference is `docs/admin.md`.
//!
//! Owns: the listener and its connections (`server`) with their caps (`admission`), routing and the answers (`routes`),
//! who may call (`access`: the `Host`/`Origin` check against DNS rebinding in `hosts`, the
//! tokens, the console sessions in `session`, failed attempts answered late in `throttle`),
//! the policy-cache views (`policies`), the approval endpoints (`approvals`), the agents view
//! (`agents`), the console page and its login (`console`), the live decision stream
//! (`stream`), and the `[admin]` table (`config`). Never: changes policy, limits or config (a
//! purge only forgets a cached copy, which the next request fetches again), or shares the
//! proxy port.

mod access;
mod admission;
mod agents;
mod answer;
mod approvals;
mod config;
mod console;
mod hosts;
mod policies;
mod routes;
mod server;
mod session;
mod state;
mod stream;
mod throttle;

pub(crate) use access::AdminAccess;
pub use config::{ADMIN_TOKEN_NAME, AdminConfig, AdminToken};
pub(crate) use server::AdminServer;
pub(crate) use state::{AdminState, LiveAgents};
