//! The writer's facade: [`AuditLog`], the cloneable handle the gate records decisions
//! with, and [`AuditWriter`], which owns the flusher thread and shuts the log down. A record
//! is encoded here (`DecisionRecord::write_json_line`, with `[audit] log_query`) and handed to
//! the commit machinery ([`commit`]: the pending lines, group commit, the flusher), which
//! appends it to the file ([`sink`]).
//!
//! [`AuditLog::commit`] is the audit promise for `on_failure = "block"`: it returns only once
//! the line is on disk (appended and flushed), so the caller forwards only what is recorded.
//!
//! The file changes only between two batches, so no line is split across files, lost or
//! written twice: [`AuditLog::reopen`] (SIGHUP, after logrotate renamed the file) closes it and
//! opens `[audit] path` afresh, and with `[audit] max_file_size` a line that would take the file
//! past the size first rotates it (`path` → `path.1` → … → `path.N`, the oldest deleted).
//! See `docs/decision-log.md` ("Durability", "Who writes").
//!
//! Never: decides what a failed record means for the request (the gate applies
//! [`Unrecorded::on_failure`]), drops a record without counting it, or fsyncs on a runtime
//! worker.

use std::cell::Cell;
use std::sync::Arc;

use ring::signature::Ed25519KeyPair;
use tokio::task::JoinHandle;

use self::commit::{Batch, Shared};
pub(super) use self::sink::rotated_path;
use self::sink::{Rotation, Sink};
use super::chain::Chain;
use super::record::LINE_CAPACITY;
use super::{AuditConfig, AuditError, DecisionRecord, OnFailure, RecentDecisions};

mod commit;
mod sink;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod tests;

thread_local! {
    /// The buffer [`AuditLog`] encodes a line into, one per thread, sized for a typical line.
    static LINE: Cell<String> = Cell::new(String::with_capacity(LINE_CAPACITY));
}

/// A record that was not written. The gate applies [`Unrecorded::on_failure`]; the record
/// is already counted in [`AuditLog::failed_records`].
#[derive(Debug, thiserror::Error)]
#[error("decision record not written ([audit] on_failure = \"{}\")", on_failure.as_str())]
pub struct Unrecorded {
    /// The configured reaction.
    pub on_failure: OnFailure,
    /// Why the record was not written.
    #[source]
    pub cause: AuditError,
}

impl Unrecorded {
    /// True when the gate must refuse the request (`on_failure = "block"`).
    pub fn blocks_request(&self) -> bool {
        self.on_failure == OnFailure::Block
    }
}

/// Counts at shutdown.
#[derive(Debug)]
pub struct AuditStats {
    /// Lines written and flushed.
    pub written: u64,
    /// Records not written (refused, cancelled, or lost to an I/O error).
    pub failed: u64,
    /// The failure, if the last write (or the final fsync) failed.
    pub error: Option<AuditError>,
}

/// Closes the log when the last handle ([`AuditLog`] clones and the [`AuditWriter`]) is
/// dropped, so the flusher drains and ends even without [`AuditWriter::shutdown`].
struct Open(Arc<Shared>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A cheap, cloneable handle for recording decisions. Every clone feeds the same log.
#[derive(Clone)]
pub struct AuditLog {
    shared: Arc<Shared>,
    _open: Arc<Open>,
}

/// Owns the flusher thread; [`AuditWriter::shutdown`] drains, flushes and fsyncs the log.
/// Dropping it without shutdown still drains once every [`AuditLog`] is gone, and the
/// tokio runtime waits for that on exit, but nothing then reports the counts.
pub struct AuditWriter {
    thread: JoinHandle<()>,
    shared: Arc<Shared>,
    _open: Arc<Open>,
}

impl AuditLog {
    /// Opens the log (append mode, parent directories created) and starts its flusher; the
    /// hash chain picks up from the file's last line, and checkpoints are signed with `key`
    /// (`[audit] signing_key_file`).
    ///
    /// # Errors
    /// [`AuditError::Open`] naming the path when it cannot be opened, so a bad path fails at
    /// start rather than at the first request; [`AuditError::ZeroQueueCapacity`].
    ///
    /// # Panics
    /// Outside a tokio runtime, as `tokio::task::spawn_blocking` does.
    pub fn start(config: AuditConfig, key: Ed25519KeyPair) -> Result<(AuditLog, AuditWriter), AuditError> {
        let sink = Sink::open(&config.path, Rotation::of(&config))
            .map_err(|source| AuditError::Open { path: config.path.clone(), source })?;
        let chain = Chain::resume(&config.path, key);
        Self::start_with(config, sink, chain)
    }

    fn start_with(config: AuditConfig, sink: Sink, chain: Chain) -> Result<(AuditLog, AuditWriter), AuditError> {
        let shared = Arc::new(Shared::new(config, sink, chain)?);
        let thread = shared.start_flusher();
        let open = Arc::new(Open(Arc::clone(&shared)));
        let log = AuditLog { shared: Arc::clone(&shared), _open: Arc::clone(&open) };
        Ok((log, AuditWriter { thread, shared, _open: open }))
    }

    /// Queues `record` for writing, waiting while the queue is full (backpressure, never a
    /// drop). Returns once the line is queued, not written: it goes out with the next commit's
    /// write, or the flusher's after `commit::LINGER`; a write that fails later is counted in
    /// [`AuditLog::failed_records`].
    ///
    /// # Errors
    /// [`Unrecorded`] when the log is shut down; the record is counted in
    /// [`AuditLog::failed_records`] and the gate applies [`Unrecorded::on_failure`].
    pub async fn record(&self, record: &DecisionRecord) -> Result<(), Unrecorded> {
        self.enqueue(record, false).await.map(drop)
    }

    /// Writes `record` and returns once it is appended and flushed: what the gate waits for
    /// before it forwards a request under `on_failure = "block"`. When no batch is being
    /// written, the calling task writes the pending lines itself (its own and any queued
    /// before it); otherwise it waits for the batch holding its line.
    ///
    /// # Errors
    /// [`Unrecorded`] when the write failed (the file is left without a partial line) or the
    /// log is shut down; the record is counted in [`AuditLog::failed_records`].
    pub async fn commit(&self, record: &DecisionRecord) -> Result<(), Unrecorded> {
        let batch = self.enqueue(record, true).await?;
        if self.shared.wait_for(&batch).await { Ok(()) } else { Err(self.unavailable()) }
    }

    /// Queues `record` at once when the queue has room, as [`AuditLog::record`] does, with no
    /// task to wait on: what a record completed where nothing can wait (a `Drop`, a body's
    /// poll) tries first. [`TryRecord::Full`] leaves the record to the caller, to wait for
    /// room with [`AuditLog::record`] on a task of its own (a spawned task per record cost
    /// its allocation, a move of the record and a wake of another worker: bench/RESULTS.md
    /// Round 16).
    ///
    /// # Errors
    /// [`Unrecorded`] when the log is shut down; the record is counted in
    /// [`AuditLog::failed_records`].
    pub fn try_record(&self, record: &DecisionRecord) -> Result<TryRecord, Unrecorded> {
        let line = self.encode(record);
        let queued = self.shared.try_enqueue(&line);
        give_back(line);
        queued.map_err(|()| self.unavailable())
    }

    async fn enqueue(&self, record: &DecisionRecord, commit: bool) -> Result<Arc<Batch>, Unrecorded> {
        let line = self.encode(record);
        let queued = self.shared.enqueue(&line, commit).await;
        give_back(line);
        queued.map_err(|()| self.unavailable())
    }

    /// `record`'s line, encoded into this thread's line buffer, which is taken for the wait
    /// and given back ([`give_back`]) to the thread it ends on: a 2 KiB buffer allocated and
    /// freed for every line cost ~850 instructions a line (bench/RESULTS.md).
    fn encode(&self, record: &DecisionRecord) -> String {
        let mut line = LINE.with(|line| line.take());
        line.clear();
        record.write_json_line(self.shared.log_query, &mut line);
        line
    }

    /// Closes the log file and opens `[audit] path` again, between two batches: what SIGHUP
    /// does after logrotate renamed the file. Every line queued before goes to the old file,
    /// every line after to the new one. Stdout is left as it is.
    ///
    /// # Errors
    /// [`AuditError::Reopen`] when the path cannot be opened (the writer keeps the old file,
    /// so no record is lost); [`AuditError::Closed`] after shutdown.
    pub async fn reopen(&self) -> Result<(), AuditError> {
        let closed = || AuditError::Closed { path: self.shared.path.clone() };
        let reopened = self.shared.request_reopen().ok_or_else(closed)?;
        match reopened.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(cause)) => Err(AuditError::Reopen { path: self.shared.path.clone(), cause }),
            Err(_) => Err(closed()),
        }
    }

    /// The configured reaction to a failed record.
    pub fn on_failure(&self) -> OnFailure {
        self.shared.on_failure
    }

    /// Lines written and flushed so far.
    pub fn written_records(&self) -> u64 {
        self.shared.written_records()
    }

    /// Records not written so far (refused, cancelled, or lost to an I/O error): what the
    /// metric `agentgate_audit_failures_total` reports.
    pub fn failed_records(&self) -> u64 {
        self.shared.failed_records()
    }

    /// Records queued and not yet written or lost: the writer's backlog.
    pub fn queue_depth(&self) -> u64 {
        self.shared.queue_depth()
    }

    /// The error of the last write while the log is failing; `None` when it is healthy.
    pub fn write_error(&self) -> Option<AuditError> {
        self.shared.write_error()
    }

    /// The latest lines handed to the writer (admin API `/decisions/recent`).
    pub fn recent(&self) -> &RecentDecisions {
        &self.shared.recent
    }

    fn unavailable(&self) -> Unrecorded {
        let cause = self.shared.write_error().unwrap_or_else(|| AuditError::Closed { path: self.shared.path.clone() });
        Unrecorded { on_failure: self.shared.on_failure, cause }
    }
}

/// Returns a line buffer [`AuditLog::encode`] took to this thread. A buffer a long line grew
/// is let go: a thread keeps at most a few typical lines.
fn give_back(line: String) {
    if line.capacity() <= 8 * LINE_CAPACITY {
        LINE.with(|kept| kept.set(line));
    }
}

/// What [`AuditLog::try_record`] did with its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryRecord {
    /// Queued: it goes out with the next batch, as [`AuditLog::record`]'s would.
    Queued,
    /// Not queued: `[audit] queue_capacity` lines are pending.
    Full,
}

impl AuditWriter {
    /// Closes the queue, writes every record already queued, flushes and fsyncs (stdout is
    /// only flushed), and returns the counts. Records offered afterwards are refused and
    /// counted. Call it after the proxy has drained its in-flight requests.
    pub async fn shutdown(self) -> AuditStats {
        self.shared.close();
        let panicked = self.thread.await.is_err();
        let shared = &self.shared;
        let error = if panicked {
            shared.lose_queued();
            Some(AuditError::WriterPanicked { path: shared.path.clone() })
        } else {
            shared.write_error()
        };
        AuditStats { written: shared.written_records(), failed: shared.failed_records(), error }
    }
}
