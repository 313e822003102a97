//! The proxy edge: the accept loops (on the listeners `crate::app` bound), CONNECT with MITM or passthrough, the one request service
//! shared by plain HTTP and intercepted HTTPS, the upstream connection pool and its cap on
//! sockets to origins, the responses
//! agentgate writes itself (including `http://agentgate.local/`, in `local`), and graceful
//! shutdown, which starts and stops the admin API (`crate::admin`) with the proxy.
//!
//! It never parses policy text, decides allow or deny itself, or formats audit records: the
//! gate (`crate::gate`) decides between "request parsed" and "forward" in `service`. The life of
//! a request through the phases is written down in `docs/request-flow.md`, and which module
//! may use which in `docs/layering.md`.
//!
//! Specs: RFC 9110 §7.6 (intermediaries: hop-by-hop fields, `Via`), §9.3.6 (CONNECT), §7.8
//! (Upgrade); RFC 9112 §3.2 (request target forms); RFC 9113 §8.3 (h2 pseudo-headers).

mod answer;
mod body;
mod budget;
pub mod config;
mod conn;
mod context;
mod destination;
mod error;
mod forward;
mod headers;
mod hold;
mod inspect;
mod listener;
mod local;
mod mcp;
mod parent;
mod pool;
mod record;
mod recording;
mod resolve;
mod serve;
mod service;
mod settings;
mod tunnel;
mod upstream;

pub use config::{ConnectionsConfig, MitmConfig, ParentConnect, TransparentConfig, UpstreamConfig};
pub(crate) use conn::Admission;
pub(crate) use context::ProxyState;
pub use error::{ProxyError, StartError, TunnelError};
pub(crate) use listener::Listeners;
pub use listener::shutdown_signal;
pub use parent::ParentSetupError;
pub(crate) use resolve::GuardedConnector;
pub use settings::Settings;
pub(crate) use upstream::Upstream;
