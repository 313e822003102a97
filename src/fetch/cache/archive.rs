//! The policy cache's hook into the policy archive ([`crate::archive`]): every snapshot put
//! in force, loaded from the origin or read from the fleet's shared store, hands each file
//! that has a digest (the body its reasons will name) to the archive, which writes new ones
//! off the request path.
//!
//! Never: waits for the disk, or changes what the cache holds.

use super::{Inner, PolicyCache, Snapshot};
use crate::archive::{PolicyArchive, Served};
use crate::fetch::Origin;
use crate::policy::{FetchOutcome, Format, formats};

impl PolicyCache {
    /// Archives from now on every policy body this cache decides with into `archive`
    /// (`[audit] archive_dir`); a second call is ignored.
    pub fn archive_to(&self, archive: PolicyArchive) {
        let _ = self.inner.archive.set(archive);
    }
}

impl Inner {
    /// [`Inner::obtain`], its snapshot handed to the archive.
    pub(super) async fn obtain_archived(&self, origin: &Origin, previous: Option<&Snapshot>, wanted: bool) -> Snapshot {
        let snapshot = self.obtain(origin, previous, wanted).await;
        if let Some(archive) = self.archive.get() {
            snapshot.archive_into(archive, &origin.to_string());
        }
        snapshot
    }
}

macro_rules! archived {
    ($($field:ident: $format:ty),* $(,)?) => {
        impl Snapshot {
            /// Hands each format's body in force (the last location read, whose state is in
            /// force) to `archive` under the digest its state reports.
            fn archive_into(&self, archive: &PolicyArchive, origin: &str) {
                $(if let Some(digest) = <$format>::report(&self.policies.$field).digest
                    && let Some((path, FetchOutcome::Response { status, headers, body, .. })) =
                        self.responses.$field.last()
                {
                    let source = <$format>::SOURCE.as_str();
                    let served = Served { source, origin, path, status: *status, headers, from: self.from.as_str() };
                    archive.keep(&digest, served, body);
                })*
            }
        }
    };
}
formats!(archived);
