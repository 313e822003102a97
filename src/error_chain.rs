//! Rendering an error with every cause below it, for logs, response bodies and the command
//! line's error message. Used by the proxy, by `fetch` and by the binary; it sits at the
//! bottom of the crate so that none reaches into another for it.
//!
//! Never: decides a status, logs, or keeps state.

/// Renders an error and every `source()` below it as `a: b: c`, each cause once.
///
/// hyper's and hyper-util's `Display` show one level only, so a bare `{err}` hides the cause
/// (`client error (Connect)`); this is what goes into logs and response bodies.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut next = err.source();
    while let Some(cause) = next {
        let part = cause.to_string();
        // Many messages quote their cause (`cannot read x: {source}; check ...`), and io::Error
        // displays its inner error: a cause already shown is not shown again.
        if !text.contains(&part) {
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

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read x: {0}; check the path")]
    struct Quoting(#[source] io::Error);

    #[test]
    fn error_chain_walks_sources_and_skips_repeats() {
        let inner = io::Error::new(io::ErrorKind::ConnectionRefused, "connection refused");
        assert_eq!(error_chain(&Outer(inner)), "outer: connection refused");
        let wrapped = io::Error::other(io::Error::other("same"));
        assert_eq!(error_chain(&wrapped), "same");
        let quoted = Quoting(io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(error_chain(&quoted), "cannot read x: entity not found; check the path");
    }
}
