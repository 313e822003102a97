//! The one bounded wait of the end-to-end tests: [`eventually`] looks at something (a file,
//! an endpoint, a page, a process) until the look succeeds or a limit passes, then fails
//! naming what it waited for and what the last look found. For conditions that come true
//! a moment after the action that causes them (a log line the writer flushes when idle, a
//! reload the file watcher picks up, a slot given back when a hang-up reaches the proxy),
//! where no event can be awaited instead. Never a sleep for timing: a test that passes
//! only because it waited long enough is not one of these.

use std::time::Duration;

use super::TestResult;

/// How long [`eventually`] looks before it gives up: generous, because on a busy 2-core CI
/// machine a moment can be long; it only costs time when the test is failing anyway.
pub const WAIT_LIMIT: Duration = Duration::from_secs(10);

/// The pause between two looks.
const POLL: Duration = Duration::from_millis(20);

/// [`eventually_within`] [`WAIT_LIMIT`].
pub async fn eventually<T>(what: &str, look: impl AsyncFnMut() -> TestResult<T>) -> TestResult<T> {
    eventually_within(WAIT_LIMIT, what, look).await
}

/// Runs `look` until it returns `Ok`, for at most `limit`; returns its value. An `Err` from
/// `look` means "not yet" and says what it saw instead; the last one is in the error that
/// names `what` when the limit passes. A look that must stop the test at once panics (an
/// `assert!` on something that may never change back).
pub async fn eventually_within<T>(
    limit: Duration,
    what: &str,
    mut look: impl AsyncFnMut() -> TestResult<T>,
) -> TestResult<T> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match look().await {
            Ok(value) => return Ok(value),
            Err(seen) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("waited {limit:?} for {what}; the last look found: {seen}").into());
            }
            Err(_) => tokio::time::sleep(POLL).await,
        }
    }
}
