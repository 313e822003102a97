//! agentgate: a forward HTTP(S) proxy that stands between AI agents and the web.
//!
//! The crate is a library so that the binary, the end-to-end tests and the benchmarks run
//! the same code. `policy` is the pure core (bytes and a request view in, a decision with
//! reasons out); every other module is an edge that does I/O around it.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub mod admin;
pub mod agents;
pub mod app;
pub mod approvals;
pub mod archive;
pub mod audit;
pub mod coding;
pub mod config;
pub mod error_chain;
pub mod evidence;
pub mod explain;
pub mod fetch;
pub mod gate;
pub mod inspect;
pub mod limits;
pub mod lint;
pub mod mcp;
pub mod metrics;
pub mod net;
pub mod policy;
pub mod proxy;
pub mod recipe;
pub mod record;
pub mod redis_connection;
pub mod reload;
pub mod secrets;
mod setting;
pub mod signing;
pub mod throttled;
pub mod tls;
pub mod token;
