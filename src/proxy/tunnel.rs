//! Connections whose requests all go to one destination: a CONNECT tunnel (`connect`), and a
//! connection the kernel redirected to `[transparent] listen` (`transparent`), whose
//! destination is its original one (`original`). Either is spliced through untouched
//! (`passthrough`, decided once at host level) or intercepted (`intercept`: TLS terminated
//! with a minted leaf, or plain HTTP), and then every inner request is served by the same
//! request service as the proxy port; a CONNECT refused before its `200` is intercepted the
//! same way, and its first inner request answered with the refusal (`refused`).
//!
//! That is the one import circle of the proxy, and it is by design: the service opens a
//! tunnel for a CONNECT (`handle_connect`), and a tunnel serves its inner requests with the
//! service. Nothing else here is used by the service but the transparent `Host` check.

mod admit;
mod connect;
mod intercept;
mod original;
mod passthrough;
mod refused;
mod transparent;

pub(crate) use connect::handle_connect;
pub(crate) use original::{check_host, named_authority};
pub(crate) use transparent::accept_loop;
