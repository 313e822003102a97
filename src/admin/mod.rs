//! The admin API: a small HTTP/1.1 server on `[admin] listen`, apart from the proxy port,
//! for operators and their tools: `/healthz`, `/readyz`, `/metrics` (Prometheus text),
//! `/ca.pem`, `/policies` (an origin's cached files; `DELETE` purges them), `/explain` (a
//! live decision with its reasons), `/decisions/recent` (the latest decision-log lines) and
//! `/approvals` (held requests an operator approves or denies). With `[admin] token_sha256`
//! or `[[admin.tokens]]` set, every endpoint but `/healthz` needs
//! `Authorization: Bearer TOKEN`. The reference is `docs/admin.md`.
//!
//! Owns: the listener and its connections (`server`), routing, authentication and the
//! answers (`routes`), the policy-cache views (`policies`), the approval endpoints
//! (`approvals`), and the `[admin]` table (`config`). Never: changes policy, limits or config
//! (a purge only forgets a cached copy, which the next request fetches again), or shares the
//! proxy port.

mod approvals;
mod config;
mod policies;
mod routes;
mod server;

pub use config::{ADMIN_TOKEN_NAME, AdminConfig, AdminToken};
pub(crate) use server::{AdminServer, AdminState};
