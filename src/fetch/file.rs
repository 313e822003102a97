//! The policy files of an origin: where each is fetched from, its size cap and which
//! redirects it follows (SEMANTICS X5, X6, B21, C2, C3, D15).

use http::{StatusCode, Uri};

use super::Origin;
use crate::policy::{FetchError, Format};

/// How many redirects a fetch follows; one more is [`FetchError::TooManyRedirects`]
/// (RFC 9309 §2.3.1.2, B21, C3, D15).
pub(crate) const MAX_REDIRECTS: usize = 5;

/// One policy file to fetch: a location of a format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PolicyFile {
    path: &'static str,
    max_bytes: usize,
    https_only: bool,
}

impl PolicyFile {
    /// The file of format `F` at `path` (its [`Format::PATH`] or [`Format::FALLBACK_PATH`]).
    pub(crate) fn of<F: Format>(path: &'static str) -> Self {
        PolicyFile { path, max_bytes: F::MAX_BYTES, https_only: F::HTTPS_ONLY }
    }

    /// The path on the origin.
    pub(crate) fn path(self) -> &'static str {
        self.path
    }

    /// The format's size cap: the fetcher keeps at most this many bytes plus one.
    pub(crate) fn max_bytes(self) -> usize {
        self.max_bytes
    }

    /// The first URL: on the origin itself, except for HTTPS-only formats (AGENTS.md, C2).
    pub(crate) fn url(self, origin: &Origin) -> Result<Uri, FetchError> {
        if self.https_only { origin.https_url(self.path) } else { origin.url(self.path) }
    }

    /// True when every hop must stay on HTTPS: a redirect to plain http is
    /// [`FetchError::InsecureRedirect`] (C3).
    pub(crate) fn https_only(self) -> bool {
        self.https_only
    }

    /// True when a response with `status` and a `Location` is a redirect to follow.
    /// HTTPS-only files follow 301, 302, 307 and 308 (AGENTS.md, C3); the others 303 as well.
    pub(crate) fn follows(self, status: StatusCode) -> bool {
        match status.as_u16() {
            301 | 302 | 307 | 308 => true,
            303 => !self.https_only,
            _ => false,
        }
    }
}
