//! The policy files of an origin: where each is fetched from, its size cap and which
//! redirects it follows (SEMANTICS X5, X6, B21, C2, C3, D15).

use http::{StatusCode, Uri};

use super::Origin;
use crate::policy::agents_md::Location;
use crate::policy::{FetchError, agents_md, agents_txt, autoctl, robots};

/// How many redirects a fetch follows; one more is [`FetchError::TooManyRedirects`]
/// (RFC 9309 §2.3.1.2, B21, C3, D15).
pub(crate) const MAX_REDIRECTS: usize = 5;

/// One policy file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PolicyFile {
    /// `/robots.txt` (RFC 9309).
    Robots,
    /// `/agents.txt` (draft-srijal-agents-policy-00).
    AgentsTxt,
    /// `/AGENTS.md` or `/.well-known/agents.md` (AGENTS-MD-SPEC-001), HTTPS only.
    AgentsMd(Location),
    /// `/automation-preferences.txt` (draft-liao-aipref-autoctl-core-01).
    Autoctl,
}

impl PolicyFile {
    /// The path on the origin.
    pub(crate) fn path(self) -> &'static str {
        match self {
            PolicyFile::Robots => "/robots.txt",
            PolicyFile::AgentsTxt => "/agents.txt",
            PolicyFile::AgentsMd(location) => location.path(),
            PolicyFile::Autoctl => "/automation-preferences.txt",
        }
    }

    /// The format's size cap: the fetcher keeps at most this many bytes plus one.
    pub(crate) fn max_bytes(self) -> usize {
        match self {
            PolicyFile::Robots => robots::MAX_BYTES,
            PolicyFile::AgentsTxt => agents_txt::MAX_BYTES,
            PolicyFile::AgentsMd(_) => agents_md::MAX_BYTES,
            PolicyFile::Autoctl => autoctl::MAX_BYTES,
        }
    }

    /// The first URL: on the origin itself, except AGENTS.md, which is always HTTPS (C2).
    pub(crate) fn url(self, origin: &Origin) -> Result<Uri, FetchError> {
        match self {
            PolicyFile::AgentsMd(_) => origin.https_url(self.path()),
            _ => origin.url(self.path()),
        }
    }

    /// True when every hop must stay on HTTPS: a redirect to plain http is
    /// [`FetchError::InsecureRedirect`] (C3).
    pub(crate) fn https_only(self) -> bool {
        matches!(self, PolicyFile::AgentsMd(_))
    }

    /// True when a response with `status` and a `Location` is a redirect to follow.
    /// AGENTS.md follows 301, 302, 307 and 308 (C3); the others 303 as well.
    pub(crate) fn follows(self, status: StatusCode) -> bool {
        match status.as_u16() {
            301 | 302 | 307 | 308 => true,
            303 => !self.https_only(),
            _ => false,
        }
    }
}
