//! Recording a run and replaying it (`[record]`, `mode = "replay"`,
//! docs/evaluation-guide.md). While recording, each exchange agentgate forwards for a
//! recorded agent is kept (the request as the agent sent it, secrets as placeholders; the
//! answer as the agent got it, scrubbed; bodies up to `max_body`, each with the decision
//! log's `event.id`), with the policy files and name lookups the decisions used, in one
//! JSON-lines file ([`mod@format`]) written off the request path ([`writer`], bounded by
//! `max_bytes`). In replay, the same files answer: requests ([`replay`]), policy fetches
//! and lookups ([`network`]), so a replayed run is decided as the recorded one was and
//! nothing is resolved or dialled. `agentgate record har` turns a recording into HAR 1.2
//! ([`har`]).
//!
//! Owns: the `[record]` table ([`config`]), the format, the writer, the taps on bodies
//! ([`tap`]), matching, and the [`Session`] a proxy runs with. Never: decides (the gate
//! decides every request, replayed or not), writes the decision log, or touches a request
//! it is not handed (the proxy hooks it in at one place, `proxy::recording`).

pub mod config;
pub mod format;
pub mod har;
pub mod network;
pub mod replay;
pub mod tap;
pub mod writer;

use std::path::PathBuf;
use std::sync::Arc;

pub use config::RecordConfig;
pub use format::ReadError;
pub use replay::Recording;
pub use writer::Recorder;

use crate::fetch::PolicyTransport;
use crate::metrics::Metrics;
use crate::net::{Dial, Resolve};
use crate::policy::operator::Mode;

/// What a proxy records to, or replays from, for its whole life.
#[derive(Clone, Default)]
pub struct Session {
    recorder: Option<Recorder>,
    replay: Option<Arc<Recording>>,
}

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The recording's directory or file cannot be opened for writing.
    #[error("cannot record to {}: {source}; make the directory writable or set another [record] dir", dir.display())]
    Open {
        /// `[record] dir`.
        dir: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The recording to replay cannot be read.
    #[error("mode = \"replay\": {0}")]
    Read(#[from] ReadError),
}

/// The network seams a session's proxy resolves names and dials with.
pub type Seams = (Arc<dyn Resolve>, Arc<dyn Dial>);

impl Session {
    /// The session `[record]` asks for under `mode`: recording when `dir` is set (and not
    /// replaying), its lookups through a recording resolver; replaying from `dir`, with the
    /// resolver answering from the recording and a dialer that dials nothing; neither
    /// without a `dir`. Returns the seams the proxy is to use.
    ///
    /// # Errors
    /// [`SessionError`]: the directory cannot be written, or the recording read.
    pub fn start(
        config: &RecordConfig,
        mode: Mode,
        (resolver, dialer): Seams,
        metrics: &Arc<Metrics>,
    ) -> Result<(Session, Seams), SessionError> {
        let Some(dir) = &config.dir else { return Ok((Session::default(), (resolver, dialer))) };
        if mode == Mode::Replay {
            let recording = Arc::new(Recording::load(dir)?);
            let resolver = Arc::new(network::ReplayResolver { recording: Arc::clone(&recording) });
            let session = Session { recorder: None, replay: Some(recording) };
            return Ok((session, (resolver, Arc::new(network::NoDial))));
        }
        let recorder = Recorder::start(dir, config.max_body, config.max_bytes, Arc::clone(metrics))
            .map_err(|source| SessionError::Open { dir: dir.clone(), source })?;
        let resolver = Arc::new(network::RecordingResolver { inner: resolver, recorder: recorder.clone() });
        Ok((Session { recorder: Some(recorder), replay: None }, (resolver, dialer)))
    }

    /// The policy fetcher's transport under this session: `inner`, recorded; the recording
    /// in replay; `inner` as it is otherwise.
    pub fn transport(&self, inner: Arc<dyn PolicyTransport>) -> Arc<dyn PolicyTransport> {
        match (&self.recorder, &self.replay) {
            (_, Some(recording)) => Arc::new(network::ReplayTransport { recording: Arc::clone(recording) }),
            (Some(recorder), None) => Arc::new(network::RecordingTransport { inner, recorder: recorder.clone() }),
            (None, None) => inner,
        }
    }

    /// The recorder, while recording.
    pub fn recorder(&self) -> Option<&Recorder> {
        self.recorder.as_ref()
    }

    /// The recording answered from, in replay.
    pub fn replay(&self) -> Option<&Arc<Recording>> {
        self.replay.as_ref()
    }
}
