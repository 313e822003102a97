//! The writer: [`AuditLog`] handles encode records and append their lines to one pending
//! buffer (bounded by `[audit] queue_capacity` lines); whoever holds the writer role takes
//! everything pending and appends and flushes it in one `write`. A committing request takes
//! the role itself when it is free (group commit, no thread hop); lines nobody waits for ride
//! with the next commit, or are written by the flusher thread ([`AuditWriter`]) after
//! [`LINGER`]. The flusher also does what must not block a runtime worker: stdout and other
//! non-files, a batch that needs a rotation, a reopen, a disk that turned slow, and the final
//! fsync on shutdown.
//!
//! Accounting: a line counts as written once the append and flush of its batch succeeded,
//! and as failed when it was refused or cancelled, or its batch failed. A failed batch
//! leaves no partial line: the file is truncated back to its length before the batch. The
//! log is never failed for good: every batch is a fresh attempt, so once space is freed the
//! next write succeeds, and the recovery is logged with the number of records lost meanwhile.
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
//! Never: encodes a record itself (`DecisionRecord::to_json_line` does), drops a line
//! without counting it, or fsyncs on a runtime worker.

use std::io;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde::Deserialize;
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

use super::sink::{Rotation, Sink};
use super::{AuditError, DecisionRecord, RECENT_CAPACITY, RecentDecisions};
use crate::setting::{byte_size, nonzero_caps};

/// What the gate does with a request whose record cannot be written (DESIGN §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Refuse the request (503 "decision log unavailable"): nothing passes unaudited. The
    /// default, because the log exists for the people who audit agents.
    #[default]
    Block,
    /// Handle the request anyway; the failure counter records the missing line.
    Continue,
}

impl OnFailure {
    /// The config value: `block` or `continue`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Block => "block",
            OnFailure::Continue => "continue",
        }
    }
}

/// The `[audit]` config table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditSettings {
    /// Where lines go, appended; parent directories are created. `-` means stdout.
    pub path: PathBuf,
    /// Records the queue holds before [`AuditLog::record`] waits for the writer.
    pub queue_capacity: usize,
    /// What the gate does when a record cannot be written.
    pub on_failure: OnFailure,
    /// Keep query values in `url.full` (they are `REDACTED` otherwise).
    pub log_query: bool,
    /// Rotate the file before a line would take it past this many bytes; `0` (the default)
    /// never rotates (rotate with logrotate and SIGHUP instead). Written as bytes or with a
    /// unit (`"100MiB"`).
    #[serde(deserialize_with = "byte_size")]
    pub max_file_size: u64,
    /// How many rotated files (`path.1` … `path.N`) are kept; the oldest is deleted (default 5).
    pub max_files: usize,
}

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            path: PathBuf::from("logs/decisions.jsonl"),
            queue_capacity: 8192,
            on_failure: OnFailure::Block,
            log_query: false,
            max_file_size: 0,
            max_files: 5,
        }
    }
}

/// The smallest `[audit] max_file_size`: below it most files would hold a single record.
const MIN_FILE_SIZE: u64 = 1024;

impl AuditSettings {
    /// Problems in `[audit]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        let default = Self::default();
        nonzero_caps(
            problems,
            &[
                ("[audit] queue_capacity", self.queue_capacity, default.queue_capacity),
                ("[audit] max_files", self.max_files, default.max_files),
            ],
        );
        if self.path.as_os_str().is_empty() {
            problems.push("[audit] path = \"\": must not be empty".to_owned());
        }
        let size = self.max_file_size;
        if size > 0 && size < MIN_FILE_SIZE {
            problems.push(format!(
                "[audit] max_file_size = {size}: must be 0 (no rotation) or at least {MIN_FILE_SIZE} bytes, e.g. \"100MiB\""
            ));
        }
        if size > 0 && self.path == Path::new("-") {
            problems.push(format!(
                "[audit] max_file_size = {size}: stdout (path = \"-\") is never rotated; set max_file_size = 0 or log to a file"
            ));
        }
        if size == 0 && self.max_files != default.max_files {
            problems.push(format!(
                "[audit] max_files = {}: only rotation by size keeps rotated files; set max_file_size too, e.g. \"100MiB\"",
                self.max_files
            ));
        }
    }

    /// Size rotation, when `max_file_size` asks for it.
    fn rotation(&self) -> Option<Rotation> {
        (self.max_file_size > 0).then_some(Rotation { max_bytes: self.max_file_size, keep: self.max_files })
    }
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

/// How long a line nobody waits for ([`AuditLog::record`]) may stay pending before the
/// flusher thread writes it, when no commit carries it first. Under load a commit comes
/// every few hundred microseconds and takes it along, so the flusher wakes at most once per
/// linger rather than once per line; when traffic stops, `tail -f`, the console's stream and
/// `/decisions/recent` still see the line within 2 ms, below anything a person notices.
/// A crash loses at most this much of lines nobody waited for (see `docs/decision-log.md`).
const LINGER: Duration = Duration::from_millis(2);

/// A batch written on a runtime worker that took longer than this marks the disk as slow:
/// the flusher thread writes every batch until one of its writes is quick again, so a
/// stalling disk holds the flusher, not the workers serving agents. A page-cache append of
/// a batch takes microseconds; 20 ms is well past any healthy local disk.
const SLOW_WRITE: Duration = Duration::from_millis(20);

/// State shared by the handles, the committing tasks and the flusher thread.
struct Shared {
    path: PathBuf,
    log_query: bool,
    on_failure: OnFailure,
    /// `[audit] queue_capacity`: pending lines before [`AuditLog::record`] waits.
    capacity: u64,
    /// Lines accepted into the queue.
    queued: AtomicU64,
    /// Lines flushed to the file.
    written: AtomicU64,
    /// Records never queued (refused or cancelled).
    refused: AtomicU64,
    /// Queued lines that were not written.
    lost: AtomicU64,
    /// The error of the last failed write while the log is failing; `None` once a write
    /// succeeds again.
    failure: Mutex<Option<String>>,
    /// The latest lines, fed by the writer of each batch in the file's order.
    recent: RecentDecisions,
    /// The pending lines and who writes them. Held only to append or take, never to write.
    queue: Mutex<Queue>,
    /// Wakes the flusher thread (see [`Flusher`] for when).
    wake: Condvar,
    /// Told whenever a batch is taken, so records waiting for room try again.
    room: Notify,
    /// The file. Locked only by the holder of the writer role (`Queue::writing`), so it is
    /// never contended.
    sink: Mutex<Sink>,
}

/// The lines not yet written, and the writer role.
struct Queue {
    /// Encoded lines, in the order they go to the file.
    text: String,
    lines: u64,
    /// Whether a line of `text` is a commit's, whose task waits for it.
    commits: bool,
    /// The outcome the commits in `text` wait for.
    batch: Arc<Batch>,
    /// The emptied buffer of the last batch written, reused so no buffer grows per batch.
    spare: String,
    /// Someone (a committing task or the flusher) has taken the pending lines and is
    /// writing them; nobody else touches the file meanwhile.
    writing: bool,
    /// How many bytes a batch may hold for a runtime worker to write it: 0 when only the
    /// flusher writes (stdout, a device, a slow disk), else the room before a rotation.
    inline_room: u64,
    /// Shutdown has begun: nothing more is accepted.
    closed: bool,
    /// When the flusher writes the lines nobody waits for; `None` while nothing lingers.
    linger_until: Option<Instant>,
    /// The flusher should write what is pending now, not after the linger.
    urgent: bool,
    /// Callers of [`AuditLog::reopen`] waiting for the flusher to reopen the file.
    reopens: Vec<oneshot::Sender<Result<(), String>>>,
    flusher: Flusher,
}

/// What the flusher thread is doing, so it is woken only when it must be: on the
/// transition to a line lingering, for urgent work, or when the writer role it waits for is
/// released, never once per line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flusher {
    Running,
    /// Waiting for work, or for `linger_until`.
    Sleeping,
    /// Waiting for the writer role.
    WaitingForRole,
}

/// The outcome of one batch, which every commit whose line it holds waits for.
#[derive(Default)]
struct Batch {
    /// [`PENDING`], [`WRITTEN`] or [`LOST`].
    outcome: AtomicU8,
    /// Told when the batch is written or lost, and when the writer role is released while
    /// the batch is still pending (one of its committers then writes it).
    changed: Notify,
}

const PENDING: u8 = 0;
const WRITTEN: u8 = 1;
const LOST: u8 = 2;

impl Batch {
    /// `Some(true)` once written, `Some(false)` once lost.
    fn outcome(&self) -> Option<bool> {
        match self.outcome.load(Ordering::Acquire) {
            PENDING => None,
            outcome => Some(outcome == WRITTEN),
        }
    }

    fn finish(&self, written: bool) {
        self.outcome.store(if written { WRITTEN } else { LOST }, Ordering::Release);
        self.changed.notify_waiters();
    }
}

/// Lines taken from the queue by the holder of the writer role.
struct Taken {
    text: String,
    lines: u64,
    batch: Arc<Batch>,
}

impl Queue {
    fn append(&mut self, line: &str, commit: bool) {
        self.text.push_str(line);
        self.lines += 1;
        self.commits |= commit;
    }

    /// Takes every pending line and the writer role.
    fn take(&mut self) -> Taken {
        self.writing = true;
        self.commits = false;
        let text = std::mem::replace(&mut self.text, std::mem::take(&mut self.spare));
        let batch = std::mem::take(&mut self.batch);
        Taken { text, lines: std::mem::take(&mut self.lines), batch }
    }

    /// Takes the pending lines for a runtime worker to write, when the role is free and the
    /// batch is one a worker may write.
    fn take_inline(&mut self) -> Option<Taken> {
        let fits = self.text.len() as u64 <= self.inline_room;
        (!self.writing && self.lines > 0 && fits).then(|| self.take())
    }

    /// Asks the flusher to write what is pending now; true when it must be woken.
    fn call_flusher(&mut self) -> bool {
        self.urgent = true;
        self.flusher == Flusher::Sleeping
    }

    /// Starts the linger clock if it is not running; true when the flusher must be woken.
    fn linger(&mut self) -> bool {
        if self.linger_until.is_some() {
            return false;
        }
        self.linger_until = Some(Instant::now() + LINGER);
        self.flusher == Flusher::Sleeping
    }
}

impl Shared {
    fn failed_records(&self) -> u64 {
        self.refused.load(Ordering::Relaxed) + self.lost.load(Ordering::Relaxed)
    }

    fn write_error(&self) -> Option<AuditError> {
        let cause = self.failure.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        Some(AuditError::Write { path: self.path.clone(), cause })
    }

    /// Counts `lines` as lost to `err`; the first failure of a run is logged here.
    fn fail(&self, err: &io::Error, lines: u64) {
        self.lost.fetch_add(lines, Ordering::Relaxed);
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if failure.is_none() {
            tracing::error!(path = %self.path.display(), error = %err, on_failure = self.on_failure.as_str(),
                "decision log write failed; records are lost until a write succeeds again");
        }
        *failure = Some(err.to_string());
    }

    /// Counts `lines` as written; the end of a failing run is logged with what it lost.
    fn succeed(&self, lines: u64) {
        self.written.fetch_add(lines, Ordering::Relaxed);
        let mut failure = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if failure.take().is_some() {
            tracing::warn!(path = %self.path.display(), failed_records_total = self.failed_records(),
                "decision log writable again; records resume");
        }
    }

    fn lock_queue(&self) -> MutexGuard<'_, Queue> {
        // The queue is consistent after every statement that changes it: a panic elsewhere
        // leaves nothing half-done in it.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_sink(&self) -> MutexGuard<'_, Sink> {
        self.sink.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `line` once fewer than `[audit] queue_capacity` lines are pending, waiting
    /// otherwise (backpressure, never a drop); returns the batch it joined. While the queue is
    /// full and the writer role free, the waiting task writes the queue itself.
    ///
    /// # Errors
    /// `Err(())` once the log is closed.
    async fn enqueue(&self, line: &str, commit: bool) -> Result<Arc<Batch>, ()> {
        loop {
            let mut room = pin!(self.room.notified());
            room.as_mut().enable();
            {
                let mut queue = self.lock_queue();
                if queue.closed {
                    return Err(());
                }
                if queue.lines < self.capacity {
                    queue.append(line, commit);
                    self.queued.fetch_add(1, Ordering::Relaxed);
                    if !commit && queue.linger() {
                        self.wake.notify_one();
                    }
                    return Ok(Arc::clone(&queue.batch));
                }
                if let Some(taken) = queue.take_inline() {
                    drop(queue);
                    self.write_inline(taken);
                    continue;
                }
                if !queue.writing && queue.call_flusher() {
                    self.wake.notify_one();
                }
            }
            room.await;
        }
    }

    /// Waits until `batch` is written or lost, writing it on this task when the writer role
    /// is free: the group commit. Every commit that joined the batch meanwhile rides along.
    async fn wait_for(&self, batch: &Arc<Batch>) -> bool {
        let _cancelled = CommitWait { shared: self, batch };
        loop {
            let mut changed = pin!(batch.changed.notified());
            changed.as_mut().enable();
            if let Some(written) = batch.outcome() {
                return written;
            }
            let taken = {
                let mut queue = self.lock_queue();
                if queue.writing || !Arc::ptr_eq(&queue.batch, batch) {
                    // Someone writes it, or will release the role and tell this batch.
                    None
                } else if let Some(taken) = queue.take_inline() {
                    Some(taken)
                } else {
                    if queue.call_flusher() {
                        self.wake.notify_one();
                    }
                    None
                }
            };
            match taken {
                Some(taken) => self.write_inline(taken),
                None => changed.await,
            }
        }
    }

    /// Writes a batch taken by a runtime worker, then releases the role. Synchronous: a
    /// cancelled request cannot stop it half-way.
    fn write_inline(&self, taken: Taken) {
        self.room.notify_waiters();
        let mut sink = self.lock_sink();
        let started = Instant::now();
        let written = self.write_batch(&mut sink, &taken);
        let took = started.elapsed();
        if took > SLOW_WRITE && !sink.slow {
            sink.slow = true;
            tracing::warn!(path = %self.path.display(), took_ms = took.as_millis() as u64,
                "decision log write was slow; the flusher thread writes until the disk is quick again");
        }
        let inline_room = sink.inline_room();
        drop(sink);
        self.release(taken, written, inline_room);
    }

    /// Feeds the recent ring and appends `taken`, rotating first where a line would take the
    /// file past `[audit] max_file_size`; counts each part as written or lost. True when
    /// every line was written: a commit is told its line is on disk only then (a rotation
    /// that splits a batch whose second part fails refuses the whole batch's commits).
    fn write_batch(&self, sink: &mut Sink, taken: &Taken) -> bool {
        let text = &taken.text;
        let (mut start, mut end, mut lines, mut written) = (0, 0, 0, true);
        for line in text.split_inclusive('\n') {
            self.recent.push(line);
            if sink.overflows((end - start) as u64, line.len() as u64) {
                written &= self.append(sink, &text[start..end], lines);
                sink.rotate();
                (start, lines) = (end, 0);
            }
            end += line.len();
            lines += 1;
        }
        written & self.append(sink, &text[start..end], lines)
    }

    fn append(&self, sink: &mut Sink, text: &str, lines: u64) -> bool {
        if lines == 0 {
            return true;
        }
        match sink.append(text.as_bytes()) {
            Ok(()) => {
                self.succeed(lines);
                true
            }
            Err(err) => {
                self.fail(&err, lines);
                false
            }
        }
    }

    /// Tells the batch's commits how it went, releases the writer role and hands the next
    /// batch on: to its committers (one of them takes the role), and to the flusher when it
    /// waits for the role.
    fn release(&self, taken: Taken, written: bool, inline_room: u64) {
        let Taken { mut text, batch, .. } = taken;
        text.clear();
        let next = {
            let mut queue = self.lock_queue();
            queue.writing = false;
            queue.spare = text;
            queue.inline_room = inline_room;
            if queue.flusher == Flusher::WaitingForRole {
                self.wake.notify_one();
            }
            if queue.lines >= self.capacity {
                // Records wait for room: one of them writes the full queue.
                self.room.notify_waiters();
            }
            queue.commits.then(|| Arc::clone(&queue.batch))
        };
        // Told after the role is free, so a woken commit finds the queue as it is now.
        batch.finish(written);
        if let Some(next) = next {
            next.changed.notify_waiters();
        }
    }

    /// Stops accepting lines; the flusher writes what is pending, fsyncs and ends.
    fn close(&self) {
        let mut queue = self.lock_queue();
        queue.closed = true;
        if queue.flusher == Flusher::Sleeping {
            self.wake.notify_one();
        }
    }
}

/// Makes sure the line of a commit whose request was cancelled while it waited is still
/// written promptly: without its task, nobody else might take the role for its batch.
struct CommitWait<'a> {
    shared: &'a Shared,
    batch: &'a Batch,
}

impl Drop for CommitWait<'_> {
    fn drop(&mut self) {
        if self.batch.outcome().is_none() && self.shared.lock_queue().linger() {
            self.shared.wake.notify_one();
        }
    }
}

/// The flusher thread's loop: writes lines that lingered [`LINGER`], whatever a worker may
/// not write, and reopens; on close writes everything pending, fsyncs and returns.
fn flush_lines(shared: &Shared) {
    let mut queue = shared.lock_queue();
    // Lines queued when the flusher last looked: while they keep coming it keeps lingering
    // on its own clock, so under load nobody has to wake it.
    let mut seen = 0;
    loop {
        let lingered = queue.linger_until.map(|until| until.saturating_duration_since(Instant::now()));
        let urgent = queue.urgent || queue.closed || !queue.reopens.is_empty();
        if lingered == Some(Duration::ZERO) && !urgent && (queue.lines == 0 || queue.writing) {
            // A commit carried the lines away, or is writing now and one behind it will
            // likely carry them: look again after another linger while lines keep coming,
            // sleep until the next line once they stop.
            let queued = shared.queued.load(Ordering::Relaxed);
            queue.linger_until = (queued != seen || queue.lines > 0).then(|| Instant::now() + LINGER);
            seen = queued;
            continue;
        }
        let due = urgent || lingered == Some(Duration::ZERO);
        if !due || queue.writing {
            queue.flusher = if due { Flusher::WaitingForRole } else { Flusher::Sleeping };
            queue = match lingered.filter(|_| !due) {
                Some(left) => shared.wake.wait_timeout(queue, left).unwrap_or_else(PoisonError::into_inner).0,
                None => shared.wake.wait(queue).unwrap_or_else(PoisonError::into_inner),
            };
            queue.flusher = Flusher::Running;
            continue;
        }
        queue.urgent = false;
        queue.linger_until = Some(Instant::now() + LINGER);
        seen = shared.queued.load(Ordering::Relaxed);
        let reopens = std::mem::take(&mut queue.reopens);
        let closing = queue.closed;
        let taken = queue.take();
        drop(queue);
        shared.room.notify_waiters();

        let mut sink = shared.lock_sink();
        let started = Instant::now();
        let written = shared.write_batch(&mut sink, &taken);
        if sink.slow && taken.lines > 0 && started.elapsed() <= SLOW_WRITE {
            sink.slow = false;
            tracing::info!(path = %shared.path.display(), "decision log writes are quick again");
        }
        if !reopens.is_empty() {
            let reopened = sink.reopen().map_err(|err| err.to_string());
            for reply in reopens {
                // The caller may have given up waiting; the file is reopened all the same.
                let _ = reply.send(reopened.clone());
            }
        }
        if closing {
            // Nothing was accepted after `closed`, so this batch held the last lines; the
            // role is kept so nothing writes after the fsync.
            if let Err(err) = sink.sync() {
                shared.fail(&err, 0);
            }
            taken.batch.finish(written);
            return;
        }
        let inline_room = sink.inline_room();
        drop(sink);
        shared.release(taken, written, inline_room);
        queue = shared.lock_queue();
    }
}

/// Closes the log when the last handle ([`AuditLog`] clones and the [`AuditWriter`]) is
/// dropped, so the flusher drains and ends even without [`AuditWriter::shutdown`].
struct Open(Arc<Shared>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Counts a record as refused when dropped armed: a `record` future cancelled while it
/// waits for queue space (the agent hung up) still leaves a trace in the counter.
struct RefusalGuard<'a>(Option<&'a Shared>);

impl Drop for RefusalGuard<'_> {
    fn drop(&mut self) {
        if let Some(shared) = self.0 {
            shared.refused.fetch_add(1, Ordering::Relaxed);
        }
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
    /// Opens the log (append mode, parent directories created) and starts its flusher.
    ///
    /// # Errors
    /// [`AuditError::Open`] naming the path when it cannot be opened, so a bad path fails at
    /// start rather than at the first request; [`AuditError::ZeroQueueCapacity`].
    ///
    /// # Panics
    /// Outside a tokio runtime, as `tokio::task::spawn_blocking` does.
    pub fn start(settings: AuditSettings) -> Result<(AuditLog, AuditWriter), AuditError> {
        let sink = Sink::open(&settings.path, settings.rotation())
            .map_err(|source| AuditError::Open { path: settings.path.clone(), source })?;
        Self::start_with(settings, sink)
    }

    fn start_with(settings: AuditSettings, sink: Sink) -> Result<(AuditLog, AuditWriter), AuditError> {
        if settings.queue_capacity == 0 {
            return Err(AuditError::ZeroQueueCapacity);
        }
        let queue = Queue {
            text: String::new(),
            lines: 0,
            commits: false,
            batch: Arc::default(),
            spare: String::new(),
            writing: false,
            inline_room: sink.inline_room(),
            closed: false,
            linger_until: None,
            urgent: false,
            reopens: Vec::new(),
            flusher: Flusher::Running,
        };
        let shared = Arc::new(Shared {
            path: settings.path,
            log_query: settings.log_query,
            on_failure: settings.on_failure,
            capacity: settings.queue_capacity as u64,
            queued: AtomicU64::new(0),
            written: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            failure: Mutex::new(None),
            recent: RecentDecisions::new(RECENT_CAPACITY),
            queue: Mutex::new(queue),
            wake: Condvar::new(),
            room: Notify::new(),
            sink: Mutex::new(sink),
        });
        // A blocking thread, not an async task: it waits on a condition variable, and its
        // writes (stdout, a slow disk, rotation) and the final fsync block.
        let thread = tokio::task::spawn_blocking({
            let shared = Arc::clone(&shared);
            move || flush_lines(&shared)
        });
        let open = Arc::new(Open(Arc::clone(&shared)));
        let log = AuditLog { shared: Arc::clone(&shared), _open: Arc::clone(&open) };
        Ok((log, AuditWriter { thread, shared, _open: open }))
    }

    /// Queues `record` for writing, waiting while the queue is full (backpressure, never a
    /// drop). Returns once the line is queued, not written: it goes out with the next commit's
    /// write, or the flusher's after [`LINGER`]; a write that fails later is counted in
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

    async fn enqueue(&self, record: &DecisionRecord, commit: bool) -> Result<Arc<Batch>, Unrecorded> {
        let mut guard = RefusalGuard(Some(&self.shared));
        let line = record.to_json_line(self.shared.log_query);
        let batch = self.shared.enqueue(&line, commit).await.map_err(|()| self.unavailable())?;
        guard.0 = None;
        Ok(batch)
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
        let (ack, reopened) = oneshot::channel();
        {
            let mut queue = self.shared.lock_queue();
            if queue.closed {
                return Err(closed());
            }
            queue.reopens.push(ack);
            if queue.call_flusher() {
                self.shared.wake.notify_one();
            }
        }
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
        self.shared.written.load(Ordering::Relaxed)
    }

    /// Records not written so far (refused, cancelled, or lost to an I/O error): what the
    /// metric `agentgate_audit_failures_total` reports.
    pub fn failed_records(&self) -> u64 {
        self.shared.failed_records()
    }

    /// Records queued and not yet written or lost: the writer's backlog.
    pub fn queue_depth(&self) -> u64 {
        let shared = &self.shared;
        let done = shared.written.load(Ordering::Relaxed) + shared.lost.load(Ordering::Relaxed);
        shared.queued.load(Ordering::Relaxed).saturating_sub(done)
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

impl AuditWriter {
    /// Closes the queue, writes every record already queued, flushes and fsyncs (stdout is
    /// only flushed), and returns the counts. Records offered afterwards are refused and
    /// counted. Call it after the proxy has drained its in-flight requests.
    pub async fn shutdown(self) -> AuditStats {
        self.shared.close();
        let panicked = self.thread.await.is_err();
        let shared = &self.shared;
        let error = if panicked {
            let unaccounted = shared
                .queued
                .load(Ordering::Relaxed)
                .saturating_sub(shared.written.load(Ordering::Relaxed) + shared.lost.load(Ordering::Relaxed));
            shared.lost.fetch_add(unaccounted, Ordering::Relaxed);
            Some(AuditError::WriterPanicked { path: shared.path.clone() })
        } else {
            shared.write_error()
        };
        AuditStats { written: shared.written.load(Ordering::Relaxed), failed: shared.failed_records(), error }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::AtomicBool;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::audit::record::sample;
    use crate::audit::sink::{LogFile, rotated_path};
    use crate::audit::{Outcome, field};

    fn settings(path: PathBuf) -> AuditSettings {
        AuditSettings { path, ..AuditSettings::default() }
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).expect("the test log is readable")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_thousand_records_from_eight_tasks_make_a_thousand_distinct_lines() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("nested/logs/decisions.jsonl");
        // A small queue, so senders wait for the writer (backpressure) instead of dropping.
        let (log, writer) =
            AuditLog::start(AuditSettings { queue_capacity: 16, ..settings(path.clone()) }).expect("the log opens");
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let log = log.clone();
                tokio::spawn(async move {
                    for n in 0..125 {
                        let rec = sample(&format!("agent-{task}"), Outcome::Allow, &format!("http://h/{n}"));
                        log.record(&rec).await.expect("the log is healthy");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a sender task finishes");
        }
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (1000, 0));
        assert!(stats.error.is_none(), "{:?}", stats.error);
        assert_eq!((log.written_records(), log.failed_records()), (1000, 0));
        let text = read(&path);
        let ids: HashSet<String> = text
            .lines()
            .map(|line| {
                let value: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
                value[field::EVENT_ID].as_str().expect("each line has an id").to_owned()
            })
            .collect();
        assert_eq!(text.lines().count(), 1000);
        assert_eq!(ids.len(), 1000, "ids are distinct");
    }

    #[tokio::test]
    async fn lines_are_appended_exactly_as_encoded() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let first = sample("bot-1", Outcome::Deny, "https://a.example/p?token=secret");
        let second = sample("bot-2", Outcome::Allow, "https://b.example/");
        let (log, writer) = AuditLog::start(settings(path.clone())).expect("the log opens");
        log.record(&first).await.expect("queued");
        log.record(&second).await.expect("queued");
        assert_eq!(writer.shutdown().await.written, 2);

        // A restart appends, and `log_query` keeps query values.
        let third = sample("bot-1", Outcome::WouldDeny, "https://a.example/p?token=secret");
        let (log, writer) =
            AuditLog::start(AuditSettings { log_query: true, ..settings(path.clone()) }).expect("the log reopens");
        log.record(&third).await.expect("queued");
        assert_eq!(writer.shutdown().await.written, 1);

        let expected = [first.to_json_line(false), second.to_json_line(false), third.to_json_line(true)].concat();
        assert_eq!(read(&path), expected);
        assert!(expected.contains(r#""url.full":"https://a.example/p?token=REDACTED""#));
        assert!(expected.contains(r#""url.full":"https://a.example/p?token=secret""#));
    }

    #[tokio::test]
    async fn a_line_is_flushed_while_the_log_runs() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let (log, writer) = AuditLog::start(settings(path.clone())).expect("the log opens");
        let rec = sample("bot-1", Outcome::Allow, "http://h/");
        log.record(&rec).await.expect("queued");
        // Waits for the flush-when-idle to show (what `tail -f` sees), not a fixed delay.
        let deadline = Instant::now() + Duration::from_secs(10);
        while read(&path).is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(read(&path), rec.to_json_line(false));
        assert_eq!(log.written_records(), 1);
        writer.shutdown().await;
    }

    #[tokio::test]
    async fn a_bad_path_fails_at_start_naming_it() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let not_a_dir = dir.path().join("file");
        std::fs::write(&not_a_dir, b"").expect("a plain file");
        let path = not_a_dir.join("decisions.jsonl");
        let Err(err) = AuditLog::start(settings(path.clone())) else { panic!("opening under a file must fail") };
        assert!(matches!(err, AuditError::Open { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains(&path.display().to_string()), "{message}");
        assert!(message.contains("[audit] path"), "{message}");
    }

    #[tokio::test]
    async fn a_zero_queue_is_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let result = AuditLog::start(AuditSettings { queue_capacity: 0, ..settings(dir.path().join("d.jsonl")) });
        assert!(matches!(result, Err(AuditError::ZeroQueueCapacity)));
    }

    #[tokio::test]
    async fn issue_12_a_log_at_dev_null_shuts_down_without_an_error() {
        let (log, writer) = AuditLog::start(settings(PathBuf::from("/dev/null"))).expect("/dev/null opens");
        log.record(&sample("bot-1", Outcome::Allow, "http://h/")).await.expect("written");
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (1, 0));
        assert!(stats.error.is_none(), "no fsync error on a device: {:?}", stats.error);
    }

    #[tokio::test]
    async fn records_after_shutdown_are_refused_and_counted() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (log, writer) = AuditLog::start(settings(dir.path().join("d.jsonl"))).expect("the log opens");
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (0, 0));
        let refused = log.record(&sample("bot-1", Outcome::Allow, "http://h/")).await.expect_err("the log is closed");
        assert!(matches!(refused.cause, AuditError::Closed { .. }), "{refused:?}");
        assert!(refused.blocks_request(), "on_failure defaults to block");
        assert_eq!(log.failed_records(), 1);
    }

    /// `/dev/full` accepts the open and fails every write with ENOSPC.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn write_failures_are_counted_and_reported_without_panicking() {
        for on_failure in [OnFailure::Block, OnFailure::Continue] {
            let path = PathBuf::from("/dev/full");
            let (log, writer) =
                AuditLog::start(AuditSettings { on_failure, ..settings(path.clone()) }).expect("/dev/full opens");
            let rec = sample("bot-1", Outcome::Deny, "http://h/");
            log.record(&rec).await.expect("queued; the write fails later");
            let refused = log.commit(&rec).await.expect_err("nothing reaches /dev/full");
            assert_eq!(refused.on_failure, on_failure);
            assert_eq!(refused.blocks_request(), on_failure == OnFailure::Block);
            let message = refused.cause.to_string();
            assert!(message.contains("/dev/full") && message.contains("free disk space"), "{message}");
            let stats = writer.shutdown().await;
            assert_eq!((stats.written, stats.failed), (0, 2));
            assert!(matches!(stats.error, Some(AuditError::Write { .. })), "{:?}", stats.error);
        }
    }

    /// An in-memory disk of `capacity` bytes that takes what fits of a write, then fails with
    /// ENOSPC, as a full filesystem does; `capacity` can be raised (space freed) while it
    /// runs. With `stall_once`, its first write takes longer than [`SLOW_WRITE`].
    #[derive(Clone, Default)]
    struct TestDisk(Arc<Mutex<DiskState>>);

    #[derive(Default)]
    struct DiskState {
        bytes: Vec<u8>,
        capacity: usize,
        stall_once: bool,
    }

    impl LogFile for TestDisk {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let mut disk = self.lock();
            if std::mem::take(&mut disk.stall_once) {
                // The disk stalls (a simulated device, not a test timing).
                std::thread::sleep(SLOW_WRITE * 2);
            }
            let room = disk.capacity.saturating_sub(disk.bytes.len());
            let taken = room.min(bytes.len());
            disk.bytes.extend_from_slice(&bytes[..taken]);
            if taken == 0 && !bytes.is_empty() { Err(io::Error::from(io::ErrorKind::StorageFull)) } else { Ok(taken) }
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }

        fn len(&self) -> Option<u64> {
            Some(self.lock().bytes.len() as u64)
        }

        fn truncate(&mut self, len: u64) -> io::Result<()> {
            self.lock().bytes.truncate(len as usize);
            Ok(())
        }

        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl TestDisk {
        /// A disk with room for `capacity` bytes.
        fn filling(capacity: usize) -> Self {
            TestDisk(Arc::new(Mutex::new(DiskState { capacity, ..DiskState::default() })))
        }

        /// A roomy disk whose first write is slow, then quick.
        fn slow_once() -> Self {
            TestDisk(Arc::new(Mutex::new(DiskState { capacity: usize::MAX, stall_once: true, ..DiskState::default() })))
        }

        fn lock(&self) -> std::sync::MutexGuard<'_, DiskState> {
            self.0.lock().expect("the test disk lock is not poisoned")
        }

        fn text(&self) -> String {
            String::from_utf8(self.lock().bytes.clone()).expect("UTF-8")
        }

        fn set_capacity(&self, capacity: usize) {
            self.lock().capacity = capacity;
        }
    }

    #[tokio::test]
    async fn a_full_disk_keeps_only_whole_lines_and_the_log_recovers_when_space_returns() {
        let line_len = sample("bot-1", Outcome::Allow, "http://h/0").to_json_line(false).len();
        // Room for three lines and a half.
        let disk = TestDisk::filling(line_len * 7 / 2);
        let sink = Sink::over(Box::new(disk.clone()), None, None);
        let (log, writer) = AuditLog::start_with(settings(PathBuf::from("test-disk")), sink).expect("the log starts");
        let mut committed = 0;
        for n in 0..10 {
            let rec = sample("bot-1", Outcome::Allow, &format!("http://h/{n}"));
            if log.commit(&rec).await.is_ok() {
                committed += 1;
            }
        }
        let text = disk.text();
        assert_eq!(committed, 3, "{text}");
        assert!(text.ends_with('\n'), "no partial line: {text:?}");
        assert_eq!(text.lines().count(), committed, "every committed record, and only those: {text}");
        for line in text.lines() {
            serde_json::from_str::<serde_json::Value>(line).expect("each line is whole JSON");
        }
        assert_eq!(log.failed_records(), 7);

        // Space returns: the next record is written without a restart.
        disk.set_capacity(usize::MAX);
        log.commit(&sample("bot-1", Outcome::Allow, "http://h/after")).await.expect("the log recovered");
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (4, 7));
        assert!(stats.error.is_none(), "{:?}", stats.error);
        assert_eq!(disk.text().lines().count(), 4);
    }

    /// Every line of every file in `paths`, in order, each checked to be a whole JSON object.
    fn event_ids(paths: &[PathBuf]) -> Vec<String> {
        let mut ids = Vec::new();
        for path in paths {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            assert!(text.is_empty() || text.ends_with('\n'), "{} ends in a partial line", path.display());
            for line in text.lines() {
                let value: serde_json::Value = serde_json::from_str(line).expect("each line is whole JSON");
                ids.push(value[field::EVENT_ID].as_str().expect("each line has an id").to_owned());
            }
        }
        ids
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reopen_after_a_rename_puts_every_record_in_exactly_one_file() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let renamed = dir.path().join("decisions.jsonl.old");
        let (log, writer) = AuditLog::start(settings(path.clone())).expect("the log opens");
        // Records keep coming until the test has seen 50 written after the reopen: a fixed
        // count could all be written before the rename on a fast machine (as it once was).
        let stop = Arc::new(AtomicBool::new(false));
        let sender = {
            let (log, stop) = (log.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut sent = 0_u64;
                while !stop.load(Ordering::Relaxed) && sent < 100_000 {
                    log.record(&sample("bot-1", Outcome::Allow, &format!("http://h/{sent}"))).await.expect("queued");
                    sent += 1;
                    tokio::task::yield_now().await;
                }
                sent
            })
        };
        // logrotate's rename, then SIGHUP's reopen, while records keep coming.
        wait_until(|| log.written_records() >= 50).await;
        std::fs::rename(&path, &renamed).expect("rename the live log");
        log.reopen().await.expect("the path opens again");
        // Everything written from here on goes to the new file.
        let at_reopen = log.written_records();
        wait_until(|| log.written_records() >= at_reopen + 50).await;
        stop.store(true, Ordering::Relaxed);
        let sent = sender.await.expect("the sender finishes");
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (sent, 0));

        let (before, after) = (event_ids(std::slice::from_ref(&renamed)), event_ids(std::slice::from_ref(&path)));
        assert!(before.len() >= 50 && after.len() >= 50, "{} before, {} after", before.len(), after.len());
        let all: HashSet<String> = before.iter().chain(&after).cloned().collect();
        let sent = usize::try_from(sent).expect("a test-sized count");
        assert_eq!((before.len() + after.len(), all.len()), (sent, sent), "each record once");
    }

    #[tokio::test]
    async fn reopen_fails_with_the_path_and_keeps_the_old_file() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let logs = dir.path().join("logs");
        let path = logs.join("decisions.jsonl");
        let (log, writer) = AuditLog::start(settings(path.clone())).expect("the log opens");
        log.commit(&sample("bot-1", Outcome::Allow, "http://h/1")).await.expect("written");
        // The directory is replaced by a file: the path cannot be opened again.
        std::fs::rename(&logs, dir.path().join("moved")).expect("move the directory");
        std::fs::write(&logs, b"").expect("a file where the directory was");
        let err = log.reopen().await.expect_err("the path is under a file now");
        assert!(matches!(err, AuditError::Reopen { .. }), "{err:?}");
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
        log.commit(&sample("bot-1", Outcome::Allow, "http://h/2")).await.expect("still written to the old file");
        assert_eq!(writer.shutdown().await.written, 2);
        assert_eq!(event_ids(&[dir.path().join("moved/decisions.jsonl")]).len(), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn size_rotation_under_load_keeps_every_record_once_and_each_file_under_the_size() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let line_len = sample("agent-0", Outcome::Allow, "http://h/0").to_json_line(false).len() as u64;
        let max_file_size = line_len * 5 + line_len / 2;
        // Enough files that none is deleted: every record can be counted.
        let audit = AuditSettings { max_file_size, max_files: 1000, queue_capacity: 16, ..settings(path.clone()) };
        let (log, writer) = AuditLog::start(audit).expect("the log opens");
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let log = log.clone();
                tokio::spawn(async move {
                    for n in 0..50 {
                        let rec = sample(&format!("agent-{task}"), Outcome::Allow, &format!("http://h/{n}"));
                        log.record(&rec).await.expect("the log is healthy");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a sender task finishes");
        }
        assert_eq!(writer.shutdown().await.written, 400);
        let files: Vec<PathBuf> =
            std::iter::once(path.clone()).chain((1..=1000).map(|n| rotated_path(&path, n))).collect();
        let files: Vec<PathBuf> = files.into_iter().filter(|f| f.exists()).collect();
        for file in &files {
            let size = std::fs::metadata(file).expect("a log file").len();
            assert!(size <= max_file_size, "{} holds {size} bytes, more than {max_file_size}", file.display());
        }
        assert!(files.len() >= 400 / 5, "{} files", files.len());
        let ids = event_ids(&files);
        let distinct: HashSet<&String> = ids.iter().collect();
        assert_eq!((ids.len(), distinct.len()), (400, 400), "each record exactly once");
    }

    #[tokio::test]
    async fn rotation_keeps_max_files_and_deletes_the_oldest() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("d.jsonl");
        let line_len = sample("bot-1", Outcome::Allow, "http://h/00").to_json_line(false).len() as u64;
        // One line per file: a second would not fit (and the size is above the minimum).
        let audit =
            AuditSettings { max_file_size: line_len.max(MIN_FILE_SIZE), max_files: 2, ..settings(path.clone()) };
        let long = "x".repeat(MIN_FILE_SIZE as usize / 2);
        let (log, writer) = AuditLog::start(audit).expect("the log opens");
        for n in 0..5 {
            log.commit(&sample("bot-1", Outcome::Allow, &format!("http://h/{n}{long}"))).await.expect("written");
        }
        assert_eq!(writer.shutdown().await.written, 5);
        let urls = |file: &Path| -> Vec<String> {
            read(file)
                .lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON")["url.full"].to_string())
                .collect()
        };
        assert_eq!(urls(&path).len(), 1);
        assert!(urls(&path)[0].contains("h/4"), "the newest is in the live file");
        assert!(urls(&rotated_path(&path, 1))[0].contains("h/3"));
        assert!(urls(&rotated_path(&path, 2))[0].contains("h/2"));
        assert!(!rotated_path(&path, 3).exists(), "only max_files rotated files are kept");
    }

    /// Reads a file until it holds `lines` lines or 10 s pass (a bound for a stuck writer,
    /// never a timing assertion).
    async fn wait_for_lines(path: &Path, lines: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = read(path);
            // A line counts once whole: a read may see a `write` half done.
            if (text.lines().count() >= lines && text.ends_with('\n')) || Instant::now() > deadline {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits (bounded, as above) until `done` holds.
    async fn wait_until(mut done: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_commits_from_many_tasks_each_land_once_and_whole() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let (log, writer) = AuditLog::start(settings(path.clone())).expect("the log opens");
        // As the gate does: a commit before forwarding, a record after the response.
        let tasks: Vec<_> = (0..16)
            .map(|task| {
                let log = log.clone();
                tokio::spawn(async move {
                    for n in 0..50 {
                        let rec = sample(&format!("agent-{task}"), Outcome::Allow, &format!("http://h/{n}"));
                        log.commit(&rec).await.expect("every commit is written");
                        log.record(&sample(&format!("agent-{task}"), Outcome::Deny, &format!("http://h/{n}")))
                            .await
                            .expect("queued");
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("a committing task finishes");
        }
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (1600, 0));
        let text = read(&path);
        assert!(text.ends_with('\n'));
        let ids = event_ids(std::slice::from_ref(&path));
        let distinct: HashSet<&String> = ids.iter().collect();
        assert_eq!((ids.len(), distinct.len()), (1600, 1600), "each line once and whole");
    }

    /// A disk whose writes wait at a gate the test opens, counting each `write` and
    /// failing while `failing` is set.
    #[derive(Clone)]
    struct GatedDisk {
        state: Arc<Mutex<GatedState>>,
        opened: Arc<Condvar>,
        regular: bool,
    }

    #[derive(Default)]
    struct GatedState {
        text: Vec<u8>,
        writes: usize,
        /// Writes let through; a write beyond waits.
        allowed: usize,
        failing: bool,
    }

    impl GatedDisk {
        fn new(regular: bool) -> Self {
            GatedDisk { state: Arc::default(), opened: Arc::new(Condvar::new()), regular }
        }

        fn lock(&self) -> MutexGuard<'_, GatedState> {
            self.state.lock().expect("the test disk lock is not poisoned")
        }

        fn allow(&self, writes: usize, failing: bool) {
            let mut state = self.lock();
            state.allowed = writes;
            state.failing = failing;
            self.opened.notify_all();
        }
    }

    impl LogFile for GatedDisk {
        fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
            let mut state = self.lock();
            state.writes += 1;
            while state.writes > state.allowed {
                state = self.opened.wait(state).expect("the test disk lock is not poisoned");
            }
            if state.failing {
                return Err(io::Error::from(io::ErrorKind::StorageFull));
            }
            state.text.extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }

        fn len(&self) -> Option<u64> {
            self.regular.then(|| self.lock().text.len() as u64)
        }

        fn truncate(&mut self, len: u64) -> io::Result<()> {
            self.lock().text.truncate(len as usize);
            Ok(())
        }

        fn sync(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_commit_behind_a_failed_batch_is_unrecorded() {
        let disk = GatedDisk::new(true);
        let sink = Sink::over(Box::new(disk.clone()), None, None);
        let (log, writer) = AuditLog::start_with(settings(PathBuf::from("gated")), sink).expect("the log starts");
        // The first commit takes the writer role and waits in its `write`.
        let first = tokio::spawn({
            let log = log.clone();
            async move { log.commit(&sample("bot-1", Outcome::Allow, "http://h/first")).await }
        });
        wait_until(|| disk.lock().writes == 1).await;
        assert_eq!(disk.lock().writes, 1, "the first commit is writing");
        // Two more commits queue behind it: one batch, written once the role is free.
        let behind: Vec<_> = (0..2)
            .map(|n| {
                let log = log.clone();
                tokio::spawn(
                    async move { log.commit(&sample("bot-1", Outcome::Allow, &format!("http://h/{n}"))).await },
                )
            })
            .collect();
        wait_until(|| log.queue_depth() == 3).await;
        assert_eq!(log.queue_depth(), 3, "three lines pending");
        // The disk fails both writes.
        disk.allow(2, true);
        let first = first.await.expect("the task finishes").expect_err("the first batch failed");
        assert!(first.blocks_request() && matches!(first.cause, AuditError::Write { .. }), "{first:?}");
        for commit in behind {
            let refused = commit.await.expect("the task finishes").expect_err("the batch behind failed too");
            assert!(refused.blocks_request(), "{refused:?}");
        }
        assert_eq!(disk.lock().writes, 2, "the two commits behind went out in one write");
        assert_eq!((log.written_records(), log.failed_records()), (0, 3));
        assert!(disk.lock().text.is_empty(), "no partial line");

        // The disk recovers: the next commit is written.
        disk.allow(usize::MAX, false);
        log.commit(&sample("bot-1", Outcome::Allow, "http://h/after")).await.expect("written");
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (1, 3));
    }

    #[tokio::test]
    async fn record_lines_with_no_commit_after_them_reach_the_file() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let (log, writer) = AuditLog::start(settings(path.clone())).expect("the log opens");
        let mut live = log.recent().subscribe();
        let recs: Vec<_> = (0..3).map(|n| sample("bot-1", Outcome::Deny, &format!("http://h/{n}"))).collect();
        for rec in &recs {
            log.record(rec).await.expect("queued");
        }
        // The flusher writes them after the linger: no commit, no shutdown.
        let text = wait_for_lines(&path, 3).await;
        let expected: String = recs.iter().map(|rec| rec.to_json_line(false)).collect();
        assert_eq!(text, expected);
        assert_eq!(log.written_records(), 3);
        // The ring and the live stream hold them in the file's order.
        let latest: Vec<String> = log.recent().latest(3).iter().rev().map(|line| format!("{line}\n")).collect();
        assert_eq!(latest.concat(), expected);
        for line in expected.lines() {
            assert_eq!(live.recv().await.expect("a live line").as_ref(), line);
        }
        writer.shutdown().await;
    }

    /// Polls `fut` once: true when it is still waiting.
    async fn still_waiting<F: Future>(mut fut: std::pin::Pin<&mut F>) -> bool {
        std::future::poll_fn(move |cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_pending())).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn records_wait_at_capacity_and_none_is_dropped() {
        // Not a regular file: only the flusher writes, so it alone can hold the role.
        let disk = GatedDisk::new(false);
        let sink = Sink::over(Box::new(disk.clone()), None, None);
        let audit = AuditSettings { queue_capacity: 2, ..settings(PathBuf::from("gated")) };
        let (log, writer) = AuditLog::start_with(audit, sink).expect("the log starts");
        let rec = |n: usize| sample("bot-1", Outcome::Allow, &format!("http://h/{n}"));
        log.record(&rec(0)).await.expect("queued");
        // The flusher takes the first line after its linger and waits in `write`.
        wait_until(|| disk.lock().writes == 1).await;
        log.record(&rec(1)).await.expect("queued");
        log.record(&rec(2)).await.expect("queued");
        // Two lines pending: the next record waits for room.
        let third = rec(3);
        let mut waiting = pin!(log.record(&third));
        assert!(still_waiting(waiting.as_mut()).await, "a full queue makes record wait");
        {
            // One that gives up while it waits is counted, not silently dropped.
            let fourth = rec(4);
            let mut cancelled = pin!(log.record(&fourth));
            assert!(still_waiting(cancelled.as_mut()).await);
        }
        assert_eq!(log.failed_records(), 1, "the cancelled record is counted");
        disk.allow(usize::MAX, false);
        waiting.await.expect("queued once there is room");
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (4, 1));
        let text = String::from_utf8(disk.lock().text.clone()).expect("UTF-8");
        let expected: String = (0..4).map(|n| rec(n).to_json_line(false)).collect();
        // Same records, same order (ids and timestamps differ between two `sample` calls).
        let urls = |text: &str| -> Vec<String> {
            text.lines()
                .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON")["url.full"].to_string())
                .collect()
        };
        assert_eq!(urls(&text), urls(&expected));
    }

    #[tokio::test]
    async fn shutdown_writes_every_pending_line() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let (log, writer) = AuditLog::start(settings(path.clone())).expect("the log opens");
        for n in 0..100 {
            log.record(&sample("bot-1", Outcome::Allow, &format!("http://h/{n}"))).await.expect("queued");
        }
        // Lingering lines, no commit: shutdown writes them all and fsyncs.
        let stats = writer.shutdown().await;
        assert_eq!((stats.written, stats.failed), (100, 0));
        assert_eq!(event_ids(std::slice::from_ref(&path)).len(), 100);
        let refused = log.commit(&sample("bot-1", Outcome::Allow, "http://h/late")).await.expect_err("closed");
        assert!(matches!(refused.cause, AuditError::Closed { .. }), "{refused:?}");
    }

    #[tokio::test]
    async fn a_slow_write_hands_writing_to_the_flusher() {
        let disk = TestDisk::slow_once();
        let sink = Sink::over(Box::new(disk.clone()), None, None);
        let (log, writer) = AuditLog::start_with(settings(PathBuf::from("slow")), sink).expect("the log starts");
        let inline_room = || log.shared.lock_queue().inline_room;
        assert_eq!(inline_room(), u64::MAX, "a regular file: workers write");
        log.commit(&sample("bot-1", Outcome::Allow, "http://h/1")).await.expect("written, slowly");
        assert_eq!(inline_room(), 0, "after a slow write only the flusher writes");
        // The flusher writes the next commit, quickly: workers write again.
        log.commit(&sample("bot-1", Outcome::Allow, "http://h/2")).await.expect("written by the flusher");
        assert_eq!(inline_room(), u64::MAX, "quick again");
        assert_eq!(writer.shutdown().await.written, 2);
    }

    #[tokio::test]
    async fn stdout_and_devices_are_written_by_the_flusher_only() {
        assert_eq!(Sink::open(Path::new("-"), None).expect("stdout").inline_room(), 0);
        let (log, writer) = AuditLog::start(settings(PathBuf::from("/dev/null"))).expect("/dev/null opens");
        assert_eq!(log.shared.lock_queue().inline_room, 0);
        log.commit(&sample("bot-1", Outcome::Allow, "http://h/")).await.expect("the flusher writes it");
        assert_eq!(writer.shutdown().await.written, 1);
    }

    #[test]
    fn a_worker_writes_only_a_batch_that_fits_before_a_rotation() {
        let disk = TestDisk::filling(usize::MAX);
        let rotation = Some(Rotation { max_bytes: 4096, keep: 2 });
        let mut sink = Sink::over(Box::new(disk), Some(PathBuf::from("test-disk")), rotation);
        assert_eq!(sink.inline_room(), 4096);
        sink.append(&[b'x'; 1000]).expect("appended");
        assert_eq!(sink.inline_room(), 3096, "what is left before the rotation");
    }

    #[test]
    fn only_a_regular_file_is_rotated() {
        // Stdout stands for any sink without a length (a device, a pipe).
        let rotation = Some(Rotation { max_bytes: MIN_FILE_SIZE, keep: 2 });
        let sink = Sink::over(Box::new(io::stdout()), Some(PathBuf::from("/dev/null")), rotation);
        assert!(!sink.overflows(MIN_FILE_SIZE, MIN_FILE_SIZE), "a device is never renamed");
    }

    #[test]
    fn rotation_settings_are_checked() {
        let problems = |audit: AuditSettings| {
            let mut problems = Vec::new();
            audit.problems(&mut problems);
            problems.join("\n")
        };
        assert_eq!(problems(AuditSettings::default()), "");
        let small = problems(AuditSettings { max_file_size: 100, ..AuditSettings::default() });
        assert!(small.contains("[audit] max_file_size = 100") && small.contains("at least 1024"), "{small}");
        let stdout = problems(AuditSettings { path: "-".into(), max_file_size: 1 << 20, ..AuditSettings::default() });
        assert!(stdout.contains("stdout"), "{stdout}");
        let inert = problems(AuditSettings { max_files: 3, ..AuditSettings::default() });
        assert!(inert.contains("[audit] max_files = 3") && inert.contains("max_file_size"), "{inert}");
        let zero = problems(AuditSettings { max_file_size: 1 << 20, max_files: 0, ..AuditSettings::default() });
        assert!(zero.contains("[audit] max_files = 0: must be at least 1"), "{zero}");
    }

    #[test]
    fn settings_read_the_audit_table() {
        let defaults: AuditSettings = toml::from_str("").expect("all keys are optional");
        assert_eq!(defaults, AuditSettings::default());
        assert_eq!(defaults.path, Path::new("logs/decisions.jsonl"));
        assert_eq!((defaults.queue_capacity, defaults.on_failure, defaults.log_query), (8192, OnFailure::Block, false));

        let table = "path = \"-\"\nqueue_capacity = 64\non_failure = \"continue\"\nlog_query = true\n\
                     max_file_size = \"64KiB\"\nmax_files = 2\n";
        let set: AuditSettings = toml::from_str(table).expect("a full table");
        assert_eq!(
            set,
            AuditSettings {
                path: "-".into(),
                queue_capacity: 64,
                on_failure: OnFailure::Continue,
                log_query: true,
                max_file_size: 65_536,
                max_files: 2,
            }
        );
        let size = toml::from_str::<AuditSettings>("max_file_size = \"10 parsecs\"").expect_err("not a size");
        assert!(size.to_string().contains("\"100MiB\""), "{size}");

        let unknown = toml::from_str::<AuditSettings>("pth = \"x\"").expect_err("unknown keys are rejected");
        assert!(unknown.to_string().contains("pth"), "{unknown}");
        assert!(toml::from_str::<AuditSettings>("on_failure = \"drop\"").is_err());
    }
}
