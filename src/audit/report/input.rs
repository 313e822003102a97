//! Reading decision logs back for `agentgate audit`: the files an operator names, in order,
//! each plain or gzip'd (told apart by the gzip magic bytes, not the name, so `decisions.jsonl.2`
//! compressed by logrotate and `old.jsonl.gz` both read), line by line with their numbers.
//!
//! Never: interprets a line (that is `query`), or stops at a line that is not a record.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;

use crate::audit::AuditError;

/// The first two bytes of every gzip member (RFC 1952 §2.3.1).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Calls `each(path, line_number, bytes)` for every line of every file in `paths` (`-`:
/// standard input), in order;
/// line numbers start at 1 in each file and count blank lines; `bytes` keeps no `\n`. A
/// gzip'd file is decompressed as it is read (all its members, as `gzip -d` does).
///
/// # Errors
/// [`AuditError::ReadOpen`] when a file cannot be opened, [`AuditError::Read`] when reading
/// or decompressing fails part-way, naming the file and the last line read.
pub fn for_each_line(paths: &[impl AsRef<Path>], mut each: impl FnMut(&Path, u64, &[u8])) -> Result<(), AuditError> {
    for path in paths {
        let path = path.as_ref();
        // `-` is standard input: a log piped in (`zcat old.gz | agentgate audit summary -`).
        let file: Box<dyn Read> = match path == Path::new("-") {
            true => Box::new(io::stdin()),
            false => {
                Box::new(File::open(path).map_err(|source| AuditError::ReadOpen { path: path.to_owned(), source })?)
            }
        };
        let mut reader = BufReader::new(file);
        let gzip = reader
            .fill_buf()
            .map_err(|source| AuditError::Read { path: path.to_owned(), line: 0, source })?
            .starts_with(&GZIP_MAGIC);
        let reader: Box<dyn BufRead> =
            if gzip { Box::new(BufReader::new(MultiGzDecoder::new(reader))) } else { Box::new(reader) };
        read_lines(path, reader, &mut each)?;
    }
    Ok(())
}

/// The lines of one reader, numbered from 1.
pub(super) fn read_lines(
    path: &Path,
    mut reader: impl BufRead,
    each: &mut impl FnMut(&Path, u64, &[u8]),
) -> Result<(), AuditError> {
    let mut buf = Vec::new();
    let mut line = 0;
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => line += 1,
            Err(source) => return Err(AuditError::Read { path: path.to_owned(), line, source }),
        }
        let bytes = buf.strip_suffix(b"\n").unwrap_or(&buf);
        each(path, line, bytes);
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::GzEncoder;

    use super::*;

    fn lines_of(paths: &[&Path]) -> Vec<(String, u64, String)> {
        let mut seen = Vec::new();
        for_each_line(paths, |path, line, bytes| {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            seen.push((name, line, String::from_utf8_lossy(bytes).into_owned()));
        })
        .expect("the files read");
        seen
    }

    #[test]
    fn plain_and_gzip_files_read_alike_whatever_their_names() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let plain = dir.path().join("decisions.jsonl");
        std::fs::write(&plain, "a\n\nb").expect("writes");
        // Compressed, with a name that does not say so (logrotate's `compress` + `nodelaycompress`
        // style names vary); two members, as `cat a.gz b.gz` makes.
        let rotated = dir.path().join("decisions.jsonl.1");
        let mut bytes = Vec::new();
        for part in ["c\n", "d\n"] {
            let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
            encoder.write_all(part.as_bytes()).expect("compresses");
            bytes.extend(encoder.finish().expect("compresses"));
        }
        std::fs::write(&rotated, &bytes).expect("writes");

        let owned = |(f, l, t): (&str, u64, &str)| (f.to_owned(), l, t.to_owned());
        let expected: Vec<_> = [
            ("decisions.jsonl.1", 1, "c"),
            ("decisions.jsonl.1", 2, "d"),
            ("decisions.jsonl", 1, "a"),
            ("decisions.jsonl", 2, ""),
            ("decisions.jsonl", 3, "b"),
        ]
        .into_iter()
        .map(owned)
        .collect();
        assert_eq!(lines_of(&[&rotated, &plain]), expected);
    }

    #[test]
    fn a_missing_file_and_a_corrupt_gzip_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let missing = dir.path().join("nope.jsonl");
        let err = for_each_line(&[&missing], |_, _, _| {}).expect_err("no such file");
        assert!(err.to_string().contains("nope.jsonl"), "{err}");

        let corrupt = dir.path().join("broken.gz");
        std::fs::write(&corrupt, [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff, 0xff]).expect("writes");
        let err = for_each_line(&[&corrupt], |_, _, _| {}).expect_err("not valid deflate");
        assert!(matches!(err, AuditError::Read { line: 0, .. }), "{err:?}");
        assert!(err.to_string().contains("broken.gz"), "{err}");
    }

    #[test]
    fn empty_and_one_byte_files_read_as_plain() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let empty = dir.path().join("empty");
        std::fs::write(&empty, "").expect("writes");
        let one = dir.path().join("one");
        std::fs::write(&one, [0x1f]).expect("writes");
        assert_eq!(lines_of(&[&empty, &one]), vec![("one".to_owned(), 1, "\u{1f}".to_owned())]);
    }
}
