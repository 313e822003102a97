//! The writer as the gate uses it: records from many tasks, the file appended as encoded,
//! a bad path or queue refused at start, write failures counted and recovered from, reopen
//! after a rename, and rotation by size.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::sink::rotated_path;
use super::testing::{TestDisk, event_ids, read, settings, wait_for_lines, wait_until};
use super::*;
use crate::audit::config::MIN_FILE_SIZE;
use crate::audit::record::sample;
use crate::audit::{Outcome, field};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_records_from_eight_tasks_make_a_thousand_distinct_lines() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("nested/logs/decisions.jsonl");
    // A small queue, so senders wait for the writer (backpressure) instead of dropping.
    let (log, writer) =
        AuditLog::start(AuditConfig { queue_capacity: 16, ..settings(path.clone()) }, crate::audit::chain::test_key())
            .expect("the log opens");
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
    let (log, writer) =
        AuditLog::start(settings(path.clone()), crate::audit::chain::test_key()).expect("the log opens");
    log.record(&first).await.expect("queued");
    log.record(&second).await.expect("queued");
    assert_eq!(writer.shutdown().await.written, 2);

    // A restart appends, and `log_query` keeps query values.
    let third = sample("bot-1", Outcome::WouldDeny, "https://a.example/p?token=secret");
    let (log, writer) =
        AuditLog::start(AuditConfig { log_query: true, ..settings(path.clone()) }, crate::audit::chain::test_key())
            .expect("the log reopens");
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
    let (log, writer) =
        AuditLog::start(settings(path.clone()), crate::audit::chain::test_key()).expect("the log opens");
    let rec = sample("bot-1", Outcome::Allow, "http://h/");
    log.record(&rec).await.expect("queued");
    // Waits for the flush-when-idle to show (what `tail -f` sees), not a fixed delay.
    assert_eq!(wait_for_lines(&path, 1).await, rec.to_json_line(false));
    // The count follows the write that put the line in the file: a bounded wait for it too.
    let counted = async {
        while log.written_records() < 1 {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), counted).await.expect("the line is counted");
    assert_eq!(log.written_records(), 1);
    writer.shutdown().await;
}

#[tokio::test]
async fn a_bad_path_fails_at_start_naming_it() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"").expect("a plain file");
    let path = not_a_dir.join("decisions.jsonl");
    let Err(err) = AuditLog::start(settings(path.clone()), crate::audit::chain::test_key()) else {
        panic!("opening under a file must fail")
    };
    assert!(matches!(err, AuditError::Open { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("[audit] path"), "{message}");
}

#[tokio::test]
async fn a_zero_queue_is_refused() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let result = AuditLog::start(
        AuditConfig { queue_capacity: 0, ..settings(dir.path().join("d.jsonl")) },
        crate::audit::chain::test_key(),
    );
    assert!(matches!(result, Err(AuditError::ZeroQueueCapacity)));
}

#[tokio::test]
async fn a_log_at_dev_null_shuts_down_without_an_error() {
    let (log, writer) = AuditLog::start(settings(PathBuf::from("/dev/null")), crate::audit::chain::test_key())
        .expect("/dev/null opens");
    log.record(&sample("bot-1", Outcome::Allow, "http://h/")).await.expect("written");
    let stats = writer.shutdown().await;
    assert_eq!((stats.written, stats.failed), (1, 0));
    assert!(stats.error.is_none(), "no fsync error on a device: {:?}", stats.error);
}

#[tokio::test]
async fn records_after_shutdown_are_refused_and_counted() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (log, writer) =
        AuditLog::start(settings(dir.path().join("d.jsonl")), crate::audit::chain::test_key()).expect("the log opens");
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
            AuditLog::start(AuditConfig { on_failure, ..settings(path.clone()) }, crate::audit::chain::test_key())
                .expect("/dev/full opens");
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

#[tokio::test]
async fn a_full_disk_keeps_only_whole_lines_and_the_log_recovers_when_space_returns() {
    // As chained: each line carries `agentgate.chain.prev`.
    let line_len =
        sample("bot-1", Outcome::Allow, "http://h/0").to_json_line(false).len() + crate::audit::chain::GROWTH;
    // Room for three lines and a half.
    let disk = TestDisk::filling(line_len * 7 / 2);
    let sink = Sink::over(Box::new(disk.clone()), None, None);
    let (log, writer) = AuditLog::start_with(
        settings(PathBuf::from("test-disk")),
        sink,
        crate::audit::chain::Chain::new(crate::audit::chain::test_key(), "a test"),
    )
    .expect("the log starts");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_after_a_rename_puts_every_record_in_exactly_one_file() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    let renamed = dir.path().join("decisions.jsonl.old");
    let (log, writer) =
        AuditLog::start(settings(path.clone()), crate::audit::chain::test_key()).expect("the log opens");
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
    let (log, writer) =
        AuditLog::start(settings(path.clone()), crate::audit::chain::test_key()).expect("the log opens");
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
    let audit = AuditConfig { max_file_size, max_files: 1000, queue_capacity: 16, ..settings(path.clone()) };
    let (log, writer) = AuditLog::start(audit, crate::audit::chain::test_key()).expect("the log opens");
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
    let files: Vec<PathBuf> = std::iter::once(path.clone()).chain((1..=1000).map(|n| rotated_path(&path, n))).collect();
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
    let audit = AuditConfig { max_file_size: line_len.max(MIN_FILE_SIZE), max_files: 2, ..settings(path.clone()) };
    let long = "x".repeat(MIN_FILE_SIZE as usize / 2);
    let (log, writer) = AuditLog::start(audit, crate::audit::chain::test_key()).expect("the log opens");
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
