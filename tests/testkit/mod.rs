//! The test origin and test CA, in one home for both test suites: the end-to-end tests
//! include it from `tests/e2e/support/`, the fetcher's unit tests from `src/fetch/tests.rs`
//! (`docs/layering.md`, "One test origin"). It never names `agentgate`, so the library's own
//! tests can compile it too.
//!
//! - `origin`: a real hyper origin on `127.0.0.1:0`, plain or TLS, with fixed routes and the
//!   files each test serves (settable while it runs);
//! - `pki`: test CAs made with rcgen, and the TLS config of an origin one of them signed;
//! - `pattern`: large bodies made and checked on the fly.

#[path = "origin.rs"]
pub mod origin;
#[path = "pattern.rs"]
pub mod pattern;
#[path = "pki.rs"]
pub mod pki;

/// Tests return errors instead of panicking on them.
pub type TestResult<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;
