//! TLS: placeholder.
