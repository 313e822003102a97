//! The recorder: lines handed over on the request path go through a bounded channel to one
//! writer thread, which appends them to `recording.jsonl` and holds the recording to
//! `[record] max_bytes`. A full channel or a spent bound drops the line, counts it in
//! `agentgate_record_dropped_total{reason}` (`queue_full`, `max_bytes`, `write_failed`) and
//! logs it once per reason; past the bound nothing new is recorded.
//!
//! Never: blocks a request (a hand-over is a `try_send`), decides what is recorded (the
//! proxy asks `RecordConfig::records`), reads the recording back (`super::replay`).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use tracing::warn;

use super::format::{FILE_NAME, Line};
use crate::metrics::Metrics;

/// How many lines may wait for the writer before new ones are dropped.
const QUEUE: usize = 1024;

/// Why a line was not recorded, as `/metrics` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dropped {
    QueueFull,
    MaxBytes,
    WriteFailed,
}

impl Dropped {
    fn as_str(self) -> &'static str {
        match self {
            Dropped::QueueFull => "queue_full",
            Dropped::MaxBytes => "max_bytes",
            Dropped::WriteFailed => "write_failed",
        }
    }
}

/// The recorder of one proxy. Cheap to clone: clones share the writer.
#[derive(Clone)]
pub struct Recorder {
    sender: SyncSender<Line>,
    shared: Arc<Shared>,
}

/// What the recorders and the writer thread share (the writer holds no sender: it ends once
/// every recorder is dropped).
struct Shared {
    /// Set once the recording reached `max_bytes`: nothing new is recorded.
    spent: AtomicBool,
    /// Which drop reasons were logged already (once each).
    logged: [AtomicBool; 3],
    max_body: u64,
    metrics: Arc<Metrics>,
}

impl Shared {
    fn dropped(&self, why: Dropped, detail: &str) {
        self.metrics.record_dropped(why.as_str());
        let index = why as usize;
        if !self.logged[index].swap(true, Ordering::Relaxed) {
            warn!(
                reason = why.as_str(),
                "{detail}; the proxy goes on serving (counted in agentgate_record_dropped_total)"
            );
        }
    }
}

impl Recorder {
    /// Opens (creating it and its directory) `dir/recording.jsonl` for appending, bounded to
    /// `max_bytes` with what it already holds, and starts the writer thread.
    ///
    /// # Errors
    /// The directory or file cannot be created or opened.
    pub fn start(dir: &Path, max_body: u64, max_bytes: u64, metrics: Arc<Metrics>) -> io::Result<Recorder> {
        fs::create_dir_all(dir)?;
        let file = OpenOptions::new().create(true).append(true).open(dir.join(FILE_NAME))?;
        let held = file.metadata()?.len();
        let (sender, receiver) = sync_channel(QUEUE);
        let shared = Arc::new(Shared { spent: AtomicBool::new(false), logged: Default::default(), max_body, metrics });
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("agentgate-record".to_owned())
            .spawn(move || write_lines(&writer, receiver, file, (held, max_bytes)))?;
        Ok(Recorder { sender, shared })
    }

    /// The most bytes of one body kept (`[record] max_body`).
    pub fn max_body(&self) -> u64 {
        self.shared.max_body
    }

    /// Hands `line` to the writer without waiting: dropped (and counted) when the writer is
    /// behind or the recording is full.
    pub fn submit(&self, line: Line) {
        if self.shared.spent.load(Ordering::Relaxed) {
            return self.shared.dropped(Dropped::MaxBytes, "the recording reached [record] max_bytes");
        }
        match self.sender.try_send(line) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => self
                .shared
                .dropped(Dropped::QueueFull, "the recording's writer is behind; an exchange was not recorded"),
            Err(TrySendError::Disconnected(_)) => self
                .shared
                .dropped(Dropped::WriteFailed, "the recording's writer stopped; an exchange was not recorded"),
        }
    }
}

/// The writer thread: appends each line, keeping the file within `max_bytes`.
fn write_lines(shared: &Shared, receiver: Receiver<Line>, mut file: File, (mut held, max_bytes): (u64, u64)) {
    for line in receiver {
        let Ok(mut text) = serde_json::to_string(&line) else { continue };
        text.push('\n');
        if shared.spent.load(Ordering::Relaxed) || held + text.len() as u64 > max_bytes {
            shared.spent.store(true, Ordering::Relaxed);
            shared.dropped(Dropped::MaxBytes, "the recording reached [record] max_bytes; no new exchange is recorded");
            continue;
        }
        match file.write_all(text.as_bytes()) {
            Ok(()) => held += text.len() as u64,
            Err(error) => shared.dropped(Dropped::WriteFailed, &format!("cannot append to the recording: {error}")),
        }
    }
}
