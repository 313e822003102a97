//! Rendering an error with every cause below it, for logs and response bodies. Used by the
//! proxy and by `fetch`; it sits at the bottom of the crate so that neither reaches into the
//! other for it.
//!
//! Never: decides a status, logs, or keeps state.

/// Renders an error and every `source()` below it as `a: b: c`.
///
/// hyper's and hyper-util's `Display` show one level only, so a bare `{err}` hides the cause
/// (`client error (Connect)`); this is what goes into logs and response bodies.
pub(crate) fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        // io::Error displays its inner error, which often repeats the level above.
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use std::io;

    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] io::Error);

    #[test]
    fn error_chain_walks_sources_and_skips_repeats() {
        let inner = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        assert_eq!(error_chain(&Outer(inner)), "outer: connection refused");
        let wrapped = io::Error::other(io::Error::other("same"));
        assert_eq!(error_chain(&wrapped), "same");
    }
}
