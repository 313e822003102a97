//! Where decision-log lines go: the file (or stdout) behind the writer, appended whole or
//! not at all, rotated by size (`path` → `path.1` → … → `path.N`) and reopened on SIGHUP.
//! It also says whether a runtime worker may append a batch itself ([`Sink::inline_room`]).
//!
//! Never: decides when to write, holds lines, or counts them (`commit.rs` does); rotates
//! anything but a regular file.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::audit::AuditConfig;

/// Opens `path` for appending, creating its parent directories.
fn open_file(path: &Path) -> io::Result<Box<dyn LogFile>> {
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    Ok(Box::new(OpenOptions::new().create(true).append(true).open(path)?))
}

/// `path.N` for rotated file number `n`.
pub(in crate::audit) fn rotated_path(path: &Path, n: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// Moves `path.1` … `path.(keep-1)` one number up (replacing `path.keep`), then `path` to `path.1`.
fn shift_rotated(path: &Path, keep: usize) -> io::Result<()> {
    for n in (1..keep).rev() {
        match std::fs::rename(rotated_path(path, n), rotated_path(path, n + 1)) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => return Err(err),
            _ => {}
        }
    }
    std::fs::rename(path, rotated_path(path, 1))
}

/// Where lines go: a file, stdout, or (in tests) a disk that fills up.
pub(super) struct Sink {
    out: Box<dyn LogFile>,
    /// The file's path, to reopen and rotate it; `None` for stdout.
    path: Option<PathBuf>,
    /// Bytes in the current file, as far as this writer knows (read again on every open).
    size: u64,
    rotation: Option<Rotation>,
    /// Whether the last rotation failed (logged once until one succeeds).
    rotation_failing: bool,
    /// A regular file (it has a length): a runtime worker may append to it. Stdout, a pipe
    /// or a device can block for as long as its reader likes, so only the flusher writes there.
    regular: bool,
    /// A batch write on a runtime worker was slow (`commit::SLOW_WRITE`); only the flusher
    /// writes until one of its writes is quick again. Set and cleared by the writer.
    pub(super) slow: bool,
}

/// `[audit] max_file_size` and `max_files`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rotation {
    pub(super) max_bytes: u64,
    pub(super) keep: usize,
}

impl Rotation {
    /// Size rotation, when `[audit] max_file_size` asks for it.
    pub(super) fn of(config: &AuditConfig) -> Option<Rotation> {
        (config.max_file_size > 0).then_some(Rotation { max_bytes: config.max_file_size, keep: config.max_files })
    }
}

/// What the writer needs of its file: append, and undo a failed append.
pub(super) trait LogFile: Send {
    /// Writes some of `bytes` at the end, as `io::Write::write` does.
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize>;
    /// Hands what was written to the operating system.
    fn flush(&mut self) -> io::Result<()>;
    /// The file's length, read at open and after a failed append (never per batch: a
    /// `statx` per write is a system call the hot path does not need); `None` when the sink
    /// cannot be truncated (stdout, a device).
    fn len(&self) -> Option<u64>;
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
}

impl LogFile for File {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        Write::write(self, bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        Write::flush(self)
    }

    fn len(&self) -> Option<u64> {
        // A device such as /dev/full has no length to go back to.
        self.metadata().ok().filter(std::fs::Metadata::is_file).map(|meta| meta.len())
    }

    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        // A device (`path = "/dev/null"`, a FIFO) has nothing to make durable, and fsync on
        // one fails with EINVAL: that is no write failure, so shutdown reports none.
        if self.metadata().is_ok_and(|meta| !meta.is_file()) {
            return Ok(());
        }
        self.sync_all()
    }
}

impl LogFile for io::Stdout {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        Write::write(self, bytes)
    }

    fn flush(&mut self) -> io::Result<()> {
        Write::flush(self)
    }

    fn len(&self) -> Option<u64> {
        None
    }

    fn truncate(&mut self, _len: u64) -> io::Result<()> {
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        Write::flush(self)
    }
}

impl Sink {
    pub(super) fn open(path: &Path, rotation: Option<Rotation>) -> io::Result<Sink> {
        if path == Path::new("-") {
            return Ok(Sink::over(Box::new(io::stdout()), None, None));
        }
        Ok(Sink::over(open_file(path)?, Some(path.to_owned()), rotation))
    }

    pub(super) fn over(out: Box<dyn LogFile>, path: Option<PathBuf>, rotation: Option<Rotation>) -> Sink {
        let size = out.len();
        // Only a regular file is rotated: a device (`/dev/null`) or a pipe has no size to
        // keep, and renaming it would move the device itself.
        if rotation.is_some() && size.is_none() {
            tracing::warn!(path = ?path, "the decision log is not a regular file; [audit] max_file_size is ignored");
        }
        let rotation = rotation.filter(|_| size.is_some());
        let regular = size.is_some();
        Sink { out, path, size: size.unwrap_or(0), rotation, rotation_failing: false, regular, slow: false }
    }

    /// How many bytes a batch may hold for a runtime worker to append it: none when only the
    /// flusher writes (not a regular file, or slow), else what fits before a rotation, so a
    /// worker never renames files or fsyncs.
    pub(super) fn inline_room(&self) -> u64 {
        if !self.regular || self.slow {
            return 0;
        }
        self.rotation.map_or(u64::MAX, |r| r.max_bytes.saturating_sub(self.size))
    }

    /// Appends `bytes` whole, or not at all: after a failed write (a full disk may take part
    /// of it) the file is truncated back by what this append wrote. Counting the bytes
    /// written, rather than reading the length before every append, keeps a system call off
    /// every batch and stays right when someone else truncated the file meanwhile.
    pub(super) fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let mut written = 0;
        let result = loop {
            if written == bytes.len() {
                break self.out.flush();
            }
            match self.out.write(&bytes[written..]) {
                Ok(0) => break Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => written += n,
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) => break Err(err),
            }
        };
        match &result {
            Ok(()) => self.size += bytes.len() as u64,
            Err(_) => {
                if written > 0
                    && let Some(now) = self.out.len()
                    && let Err(err) = self.out.truncate(now.saturating_sub(written as u64))
                {
                    tracing::error!(error = %err, "cannot truncate the decision log back after a failed write; a partial line may remain");
                }
                self.size = self.out.len().unwrap_or(self.size);
            }
        }
        result
    }

    /// Whether a line of `next` bytes, after `pending` bytes not yet written, would take a
    /// file that is not empty past `[audit] max_file_size`: then the file is rotated first.
    pub(super) fn overflows(&self, pending: u64, next: u64) -> bool {
        self.rotation.is_some_and(|r| self.size + pending > 0 && self.size + pending + next > r.max_bytes)
    }

    /// Renames the file to `path.1` (after moving `path.1` to `path.2` and so on, the last
    /// one replaced) and opens a new one. On failure the old file stays in use: lines are
    /// never lost to a rotation, the file only grows past its size.
    pub(super) fn rotate(&mut self) {
        let (Some(path), Some(rotation)) = (&self.path, self.rotation) else { return };
        if self.size == 0 {
            return;
        }
        let rotated = shift_rotated(path, rotation.keep).and_then(|()| open_file(path));
        match rotated {
            Ok(file) => {
                self.replace(file);
                self.rotation_failing = false;
            }
            Err(err) => {
                if !self.rotation_failing {
                    tracing::error!(path = %path.display(), error = %err,
                        "cannot rotate the decision log; writing on past [audit] max_file_size");
                }
                self.rotation_failing = true;
            }
        }
    }

    /// Closes the file (fsynced) and opens its path again; stdout is left as it is.
    pub(super) fn reopen(&mut self) -> io::Result<()> {
        let Some(path) = &self.path else { return Ok(()) };
        let file = open_file(path)?;
        self.replace(file);
        Ok(())
    }

    fn replace(&mut self, file: Box<dyn LogFile>) {
        if let Err(err) = self.out.sync() {
            tracing::warn!(error = %err, "cannot fsync the decision log before closing it");
        }
        let size = file.len();
        if size.is_none() {
            // Reopened as a device or a pipe: never renamed (see `over`).
            self.rotation = None;
        }
        self.regular = size.is_some();
        self.size = size.unwrap_or(0);
        self.out = file;
    }

    pub(super) fn sync(&mut self) -> io::Result<()> {
        self.out.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::config::MIN_FILE_SIZE;
    use crate::audit::writer::testing::TestDisk;

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
}
