//! The commit machinery behind [`super::AuditLog`]: encoded lines are appended to one
//! pending buffer (bounded by `[audit] queue_capacity` lines); whoever holds the writer role
//! takes everything pending and appends and flushes it in one `write`. A committing request
//! takes the role itself when it is free (group commit, no thread hop); lines nobody waits
//! for ride with the next commit, or are written by the flusher thread ([`flusher`]) after
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
//! The file changes only between two batches (a reopen, a rotation), so no line is split
//! across files, lost or written twice. See `docs/decision-log.md` ("Durability", "Who
//! writes").
//!
//! Never: encodes a record (the facade hands it lines), opens the file (`sink.rs` does),
//! drops a line without counting it, or fsyncs on a runtime worker.

use std::io;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;

use super::TryRecord;
use super::sink::Sink;
use crate::audit::chain::{CHECKPOINT_ROOM, Chain, GROWTH, Mark};
use crate::audit::{AuditConfig, AuditError, OnFailure, RECENT_CAPACITY, RecentDecisions};

mod flusher;
#[cfg(test)]
mod tests;

/// How long a line nobody waits for ([`super::AuditLog::record`]) may stay pending before
/// the flusher thread writes it, when no commit carries it first. Under load a commit comes
/// every few hundred microseconds and takes it along, so the flusher wakes at most once per
/// linger rather than once per line; when traffic stops, `tail -f`, the console's stream and
/// `/decisions/recent` still see the line within 2 ms, below anything a person notices.
/// A crash loses at most this much of lines nobody waited for (see `docs/decision-log.md`).
pub(super) const LINGER: Duration = Duration::from_millis(2);

/// A batch written on a runtime worker that took longer than this marks the disk as slow:
/// the flusher thread writes every batch until one of its writes is quick again, so a
/// stalling disk holds the flusher, not the workers serving agents. A page-cache append of
/// a batch takes microseconds; 20 ms is well past any healthy local disk.
pub(super) const SLOW_WRITE: Duration = Duration::from_millis(20);

/// State shared by the handles, the committing tasks and the flusher thread.
pub(super) struct Shared {
    /// `[audit] path`, for error messages.
    pub(super) path: PathBuf,
    /// `[audit] log_query`, for the facade's encoding.
    pub(super) log_query: bool,
    /// `[audit] on_failure`, for the facade's refusals.
    pub(super) on_failure: OnFailure,
    /// `[audit] queue_capacity`: pending lines before [`super::AuditLog::record`] waits.
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
    pub(super) recent: RecentDecisions,
    /// The pending lines and who writes them. Held only to append or take, never to write.
    queue: Mutex<Queue>,
    /// Wakes the flusher thread (see [`Flusher`] for when).
    wake: Condvar,
    /// Told whenever a batch is taken, so records waiting for room try again.
    room: Notify,
    /// The file. Locked only by the holder of the writer role (`Queue::writing`), so it is
    /// never contended.
    sink: Mutex<Sink>,
    /// The hash chain, linked in the order lines reach the file. Locked, after `sink`, only
    /// by the holder of the writer role.
    chain: Mutex<Chain>,
    /// `[audit] checkpoint_interval`.
    pub(super) checkpoint_interval: Duration,
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
    /// Callers of [`super::AuditLog::reopen`] waiting for the flusher to reopen the file.
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
pub(super) struct Batch {
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
        // As chained, with room for the checkpoint that seals the file at its rotation.
        let chained = self.text.len() as u64 + self.lines * GROWTH as u64 + CHECKPOINT_ROOM as u64;
        let fits = chained <= self.inline_room;
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
    /// The shared state of a log writing to `sink`, under `config`.
    ///
    /// # Errors
    /// [`AuditError::ZeroQueueCapacity`].
    pub(super) fn new(config: AuditConfig, sink: Sink, chain: Chain) -> Result<Shared, AuditError> {
        if config.queue_capacity == 0 {
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
        Ok(Shared {
            path: config.path,
            log_query: config.log_query,
            on_failure: config.on_failure,
            capacity: config.queue_capacity as u64,
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
            chain: Mutex::new(chain),
            checkpoint_interval: config.checkpoint_interval,
        })
    }

    /// Starts the flusher thread. A blocking thread, not an async task: it waits on a
    /// condition variable, and its writes (stdout, a slow disk, rotation) and the final
    /// fsync block.
    ///
    /// # Panics
    /// Outside a tokio runtime, as `tokio::task::spawn_blocking` does.
    pub(super) fn start_flusher(self: &Arc<Self>) -> JoinHandle<()> {
        let shared = Arc::clone(self);
        tokio::task::spawn_blocking(move || flusher::flush_lines(&shared))
    }

    /// Lines written and flushed so far.
    pub(super) fn written_records(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Records not written so far: refused, cancelled, or lost to an I/O error.
    pub(super) fn failed_records(&self) -> u64 {
        self.refused.load(Ordering::Relaxed) + self.lost.load(Ordering::Relaxed)
    }

    /// Records queued and not yet written or lost.
    pub(super) fn queue_depth(&self) -> u64 {
        let done = self.written.load(Ordering::Relaxed) + self.lost.load(Ordering::Relaxed);
        self.queued.load(Ordering::Relaxed).saturating_sub(done)
    }

    /// After the flusher thread panicked: counts every line still queued as lost.
    pub(super) fn lose_queued(&self) {
        self.lost.fetch_add(self.queue_depth(), Ordering::Relaxed);
    }

    /// The error of the last write while the log is failing; `None` when it is healthy.
    pub(super) fn write_error(&self) -> Option<AuditError> {
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

    fn lock_chain(&self) -> MutexGuard<'_, Chain> {
        // Linking is consistent after every statement: a panic leaves no half-linked state.
        self.chain.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Appends `line` once fewer than `[audit] queue_capacity` lines are pending, waiting
    /// otherwise (backpressure, never a drop); returns the batch it joined. While the queue is
    /// full and the writer role free, the waiting task writes the queue itself. A line never
    /// queued (the log closed, or the caller gave up waiting) is counted as refused.
    ///
    /// # Errors
    /// `Err(())` once the log is closed.
    pub(super) async fn enqueue(&self, line: &str, commit: bool) -> Result<Arc<Batch>, ()> {
        let mut refused = RefusalGuard(Some(self));
        let batch = self.enqueue_line(line, commit).await?;
        refused.0 = None;
        Ok(batch)
    }

    /// Appends `line` when fewer than `[audit] queue_capacity` lines are pending, without
    /// waiting: [`TryRecord::Full`] otherwise. A line refused because the log is closed is
    /// counted as refused.
    ///
    /// # Errors
    /// `Err(())` once the log is closed.
    pub(super) fn try_enqueue(&self, line: &str) -> Result<TryRecord, ()> {
        let mut queue = self.lock_queue();
        if queue.closed {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(());
        }
        if queue.lines >= self.capacity {
            return Ok(TryRecord::Full);
        }
        self.push(&mut queue, line, false);
        Ok(TryRecord::Queued)
    }

    /// Appends `line` to the pending lines (which have room for it), starting the linger
    /// clock for a line nobody waits for.
    fn push(&self, queue: &mut Queue, line: &str, commit: bool) {
        queue.append(line, commit);
        self.queued.fetch_add(1, Ordering::Relaxed);
        if !commit && queue.linger() {
            self.wake.notify_one();
        }
    }

    async fn enqueue_line(&self, line: &str, commit: bool) -> Result<Arc<Batch>, ()> {
        loop {
            let mut room = pin!(self.room.notified());
            room.as_mut().enable();
            {
                let mut queue = self.lock_queue();
                if queue.closed {
                    return Err(());
                }
                if queue.lines < self.capacity {
                    self.push(&mut queue, line, commit);
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
    pub(super) async fn wait_for(&self, batch: &Arc<Batch>) -> bool {
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

    /// Chains each line of `taken` (`agentgate.chain.prev`, in the order they reach the
    /// file), feeds the recent ring and appends the lines, rotating first where a line
    /// would take the file past `[audit] max_file_size` (the file is sealed with a checkpoint
    /// before); counts each part as written or lost, and unlinks a lost part from the chain.
    /// True when every line was written: a commit is told its line is on disk only then (a
    /// rotation that splits a batch whose second part fails refuses the whole batch's
    /// commits).
    fn write_batch(&self, sink: &mut Sink, taken: &Taken) -> bool {
        let text = &taken.text;
        let mut chain = self.lock_chain();
        let mut out = std::mem::take(&mut chain.buffer);
        out.clear();
        let (mut lines, mut written, mut mark) = (0, true, chain.mark());
        // Line by line with memchr's vector search: `split_inclusive`'s byte search in core
        // was ~800 instructions a line (bench/RESULTS.md).
        let mut from = 0;
        while from < text.len() {
            let to = memchr::memchr(b'\n', &text.as_bytes()[from..]).map_or(text.len(), |newline| from + newline + 1);
            let line = &text[from..to];
            from = to;
            if sink.overflows(out.len() as u64, (line.len() + GROWTH + CHECKPOINT_ROOM) as u64) {
                chain.checkpoint("rotation", SystemTime::now(), &mut out);
                written &= self.append(sink, &mut chain, mark, &out, lines);
                sink.rotate();
                out.clear();
                (lines, mark) = (0, chain.mark());
            }
            // The ring (admin API, console) holds the line byte for byte as the file does.
            let linked = out.len();
            chain.link(line, &mut out);
            self.recent.push(&out[linked..]);
            lines += 1;
        }
        written &= self.append(sink, &mut chain, mark, &out, lines);
        out.clear();
        chain.buffer = out;
        written
    }

    /// Seals the file with a signed checkpoint (for `reason`) when lines were written since
    /// the last one. A checkpoint is no record: it is not counted as written.
    pub(super) fn checkpoint(&self, sink: &mut Sink, reason: &str) {
        let mut chain = self.lock_chain();
        if chain.since() == 0 {
            return;
        }
        let mark = chain.mark();
        let mut out = std::mem::take(&mut chain.buffer);
        out.clear();
        chain.checkpoint(reason, SystemTime::now(), &mut out);
        if let Err(err) = sink.append(out.as_bytes()) {
            chain.restore(mark);
            self.fail(&err, 0);
        }
        out.clear();
        chain.buffer = out;
    }

    fn append(&self, sink: &mut Sink, chain: &mut Chain, mark: Mark, text: &str, lines: u64) -> bool {
        if text.is_empty() {
            return true;
        }
        match sink.append(text.as_bytes()) {
            Ok(()) => {
                self.succeed(lines);
                true
            }
            Err(err) => {
                // The lines are not in the file: the next line chains to the last one that is.
                chain.restore(mark);
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

    /// Asks the flusher to close the file and open `[audit] path` again between two
    /// batches; the receiver gets the outcome. `None` once the log is closed.
    pub(super) fn request_reopen(&self) -> Option<oneshot::Receiver<Result<(), String>>> {
        let (ack, reopened) = oneshot::channel();
        let mut queue = self.lock_queue();
        if queue.closed {
            return None;
        }
        queue.reopens.push(ack);
        if queue.call_flusher() {
            self.wake.notify_one();
        }
        Some(reopened)
    }

    /// Stops accepting lines; the flusher writes what is pending, fsyncs and ends.
    pub(super) fn close(&self) {
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
