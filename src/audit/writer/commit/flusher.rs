//! The flusher thread: writes the lines that lingered [`LINGER`] with no commit to carry
//! them, and whatever a runtime worker may not write (stdout, a device, a batch that needs a
//! rotation, a disk that turned slow); reopens the file on request, and on close writes
//! everything pending, fsyncs and ends. It also adds the signed checkpoints: every
//! `[audit] checkpoint_interval`, before a reopen and at shutdown.
//!
//! Never: runs on a runtime worker (it blocks on a condition variable, a slow disk and the
//! final fsync), or writes while a committing task holds the writer role.

use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::{Flusher, LINGER, SLOW_WRITE, Shared};

/// The flusher thread's loop: writes lines that lingered [`LINGER`], whatever a worker may
/// not write, and reopens; on close writes everything pending, fsyncs and returns.
pub(super) fn flush_lines(shared: &Shared) {
    let mut queue = shared.lock_queue();
    // Lines queued when the flusher last looked: while they keep coming it keeps lingering
    // on its own clock, so under load nobody has to wake it.
    let mut seen = 0;
    let mut checkpoint_at = Instant::now() + shared.checkpoint_interval;
    loop {
        let lingered = queue.linger_until.map(|until| until.saturating_duration_since(Instant::now()));
        let checkpoint_in = checkpoint_at.saturating_duration_since(Instant::now());
        let checkpoint_due = checkpoint_in.is_zero();
        let urgent = queue.urgent || queue.closed || !queue.reopens.is_empty() || checkpoint_due;
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
                Some(left) => {
                    let left = left.min(checkpoint_in);
                    shared.wake.wait_timeout(queue, left).unwrap_or_else(PoisonError::into_inner).0
                }
                None if !due => {
                    shared.wake.wait_timeout(queue, checkpoint_in).unwrap_or_else(PoisonError::into_inner).0
                }
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
        if checkpoint_due {
            shared.checkpoint(&mut sink, "interval");
            checkpoint_at = Instant::now() + shared.checkpoint_interval;
        }
        if !reopens.is_empty() {
            // The file logrotate renamed is sealed before it is let go.
            shared.checkpoint(&mut sink, "reopen");
            let reopened = sink.reopen().map_err(|err| err.to_string());
            for reply in reopens {
                // The caller may have given up waiting; the file is reopened all the same.
                let _ = reply.send(reopened.clone());
            }
        }
        if closing {
            // Nothing was accepted after `closed`, so this batch held the last lines; the
            // role is kept so nothing writes after the fsync.
            shared.checkpoint(&mut sink, "shutdown");
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
