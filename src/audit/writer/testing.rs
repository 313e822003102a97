//! What the writer's tests share: a config for a path, reading a log back, an in-memory disk
//! that fills up or stalls, and bounded waits (a bound for a stuck writer, never a timing
//! assertion).

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::commit::SLOW_WRITE;
use super::sink::LogFile;
use crate::audit::{AuditConfig, field, is_checkpoint};

pub(super) fn settings(path: PathBuf) -> AuditConfig {
    AuditConfig { path, ..AuditConfig::default() }
}

/// The log at `path` as the records were encoded: checkpoint lines left out, and each
/// line's chain fields (`agentgate.chain.prev`, `agentgate.chain.start`) taken off.
pub(super) fn read(path: &Path) -> String {
    unchained(&std::fs::read_to_string(path).expect("the test log is readable"))
}

/// `text` without checkpoint lines and chain fields (see [`read`]).
pub(super) fn unchained(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if is_checkpoint(line.as_bytes()) {
            continue;
        }
        let Some(rest) = line.strip_prefix("{\"agentgate.chain.prev\":\"").and_then(|rest| rest.get(66..)) else {
            out.push_str(line);
            continue;
        };
        let rest = match rest.strip_prefix("\"agentgate.chain.start\":") {
            Some(start) => {
                let mut reason = serde_json::Deserializer::from_str(start).into_iter::<String>();
                let _ = reason.next();
                &start[reason.byte_offset() + 1..]
            }
            None => rest,
        };
        out.push('{');
        out.push_str(rest);
    }
    out
}

/// An in-memory disk of `capacity` bytes that takes what fits of a write, then fails with
/// ENOSPC, as a full filesystem does; `capacity` can be raised (space freed) while it
/// runs. With `stall_once`, its first write takes longer than [`SLOW_WRITE`].
#[derive(Clone, Default)]
pub(super) struct TestDisk(Arc<Mutex<DiskState>>);

#[derive(Default)]
pub(super) struct DiskState {
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
    pub(super) fn filling(capacity: usize) -> Self {
        TestDisk(Arc::new(Mutex::new(DiskState { capacity, ..DiskState::default() })))
    }

    /// A roomy disk whose first write is slow, then quick.
    pub(super) fn slow_once() -> Self {
        TestDisk(Arc::new(Mutex::new(DiskState { capacity: usize::MAX, stall_once: true, ..DiskState::default() })))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, DiskState> {
        self.0.lock().expect("the test disk lock is not poisoned")
    }

    pub(super) fn text(&self) -> String {
        unchained(&String::from_utf8(self.lock().bytes.clone()).expect("UTF-8"))
    }

    pub(super) fn set_capacity(&self, capacity: usize) {
        self.lock().capacity = capacity;
    }
}

/// Every line of every file in `paths`, in order, each checked to be a whole JSON object.
pub(super) fn event_ids(paths: &[PathBuf]) -> Vec<String> {
    let mut ids = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        assert!(text.is_empty() || text.ends_with('\n'), "{} ends in a partial line", path.display());
        for line in text.lines().filter(|line| !is_checkpoint(line.as_bytes())) {
            let value: serde_json::Value = serde_json::from_str(line).expect("each line is whole JSON");
            ids.push(value[field::EVENT_ID].as_str().expect("each line has an id").to_owned());
        }
    }
    ids
}

/// Reads a file until it holds `lines` lines or 10 s pass (a bound for a stuck writer,
/// never a timing assertion).
pub(super) async fn wait_for_lines(path: &Path, lines: usize) -> String {
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
pub(super) async fn wait_until(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}
