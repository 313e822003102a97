//! Proxy: placeholder.
