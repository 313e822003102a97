//! The group commit and the flusher: commits from many tasks land once and whole, a commit
//! behind a failed batch is unrecorded, lines nobody waits for still reach the file, a full
//! queue makes records wait without dropping any, shutdown writes everything pending, and a
//! slow disk or a non-file hands writing to the flusher.

use std::collections::HashSet;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::audit::record::sample;
use crate::audit::writer::sink::{LogFile, Sink};
use crate::audit::writer::testing::{TestDisk, event_ids, read, settings, unchained, wait_for_lines, wait_until};
use crate::audit::{AuditConfig, AuditError, AuditLog, Outcome, TryRecord};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_commits_from_many_tasks_each_land_once_and_whole() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    let (log, writer) =
        AuditLog::start(settings(path.clone()), crate::audit::chain::test_key()).expect("the log opens");
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
    let (log, writer) = AuditLog::start_with(
        settings(PathBuf::from("gated")),
        sink,
        crate::audit::chain::Chain::new(crate::audit::chain::test_key(), "a test"),
    )
    .expect("the log starts");
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
            tokio::spawn(async move { log.commit(&sample("bot-1", Outcome::Allow, &format!("http://h/{n}"))).await })
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
    let (log, writer) =
        AuditLog::start(settings(path.clone()), crate::audit::chain::test_key()).expect("the log opens");
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
    // As the file has them, chain fields included.
    assert_eq!(unchained(&latest.concat()), expected);
    assert_eq!(latest.concat(), std::fs::read_to_string(&path).expect("the log"));
    for line in expected.lines() {
        let streamed = format!("{}\n", live.recv().await.expect("a live line").as_ref());
        assert_eq!(unchained(&streamed), format!("{line}\n"));
    }
    writer.shutdown().await;
}

/// Polls `fut` once: true when it is still waiting.
async fn still_waiting<F: Future>(mut fut: std::pin::Pin<&mut F>) -> bool {
    std::future::poll_fn(move |cx| std::task::Poll::Ready(fut.as_mut().poll(cx).is_pending())).await
}

/// A log of `capacity` pending lines over a [`GatedDisk`] that is not a regular file: only
/// the flusher writes, so it alone can hold the role.
fn gated_log(capacity: usize) -> (GatedDisk, AuditLog, crate::audit::AuditWriter) {
    let disk = GatedDisk::new(false);
    let sink = Sink::over(Box::new(disk.clone()), None, None);
    let audit = AuditConfig { queue_capacity: capacity, ..settings(PathBuf::from("gated")) };
    let (log, writer) =
        AuditLog::start_with(audit, sink, crate::audit::chain::Chain::new(crate::audit::chain::test_key(), "a test"))
            .expect("the log starts");
    (disk, log, writer)
}

/// The `url.full` of each line of `text`, as JSON.
fn urls(text: &str) -> Vec<String> {
    text.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON")["url.full"].to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_wait_at_capacity_and_none_is_dropped() {
    let (disk, log, writer) = gated_log(2);
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
    let text = unchained(&String::from_utf8(disk.lock().text.clone()).expect("UTF-8"));
    let expected: String = (0..4).map(|n| rec(n).to_json_line(false)).collect();
    // Same records, same order (ids and timestamps differ between two `sample` calls).
    assert_eq!(urls(&text), urls(&expected));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_record_queues_while_there_is_room_and_hands_the_record_back_when_full() {
    let (disk, log, writer) = gated_log(2);
    let rec = |n: usize| sample("bot-1", Outcome::Allow, &format!("http://h/{n}"));
    assert_eq!(log.try_record(&rec(0)).expect("open"), TryRecord::Queued);
    // The flusher takes the first line after its linger and waits in `write`.
    wait_until(|| disk.lock().writes == 1).await;
    assert_eq!(log.try_record(&rec(1)).expect("open"), TryRecord::Queued);
    assert_eq!(log.try_record(&rec(2)).expect("open"), TryRecord::Queued);
    // Two lines pending: full, and the record stays the caller's (nothing counted as lost).
    assert_eq!(log.try_record(&rec(3)).expect("open"), TryRecord::Full);
    assert_eq!(log.failed_records(), 0);
    disk.allow(usize::MAX, false);
    let stats = writer.shutdown().await;
    assert_eq!((stats.written, stats.failed), (3, 0));
    let text = unchained(&String::from_utf8(disk.lock().text.clone()).expect("UTF-8"));
    assert_eq!(urls(&text), ["\"http://h/0\"", "\"http://h/1\"", "\"http://h/2\""]);
    // Once the log is shut down a record is refused and counted.
    let refused = log.try_record(&rec(4)).expect_err("closed");
    assert!(matches!(refused.cause, AuditError::Closed { .. }), "{refused:?}");
    assert_eq!(log.failed_records(), 1);
}

#[tokio::test]
async fn shutdown_writes_every_pending_line() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    let (log, writer) =
        AuditLog::start(settings(path.clone()), crate::audit::chain::test_key()).expect("the log opens");
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
    let (log, writer) = AuditLog::start_with(
        settings(PathBuf::from("slow")),
        sink,
        crate::audit::chain::Chain::new(crate::audit::chain::test_key(), "a test"),
    )
    .expect("the log starts");
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
    let (log, writer) = AuditLog::start(settings(PathBuf::from("/dev/null")), crate::audit::chain::test_key())
        .expect("/dev/null opens");
    assert_eq!(log.shared.lock_queue().inline_room, 0);
    log.commit(&sample("bot-1", Outcome::Allow, "http://h/")).await.expect("the flusher writes it");
    assert_eq!(writer.shutdown().await.written, 1);
}
