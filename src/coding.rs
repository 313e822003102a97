//! The content codings of a message, and undoing them: [`stack`] reads every coding a
//! message's fields say its body is in, in the order they were applied (each
//! `Content-Encoding` field line, each of its comma-separated codings, then any
//! `Transfer-Encoding` coding other than `chunked`), and [`undo`] decodes the gzip and
//! deflate layers, last applied first, within a bound. The request inspector and the
//! response scrubber both read bodies through this one reading, so neither can be passed a
//! layer the other would see (docs/secrets.md, "What comes back").
//!
//! Never: guesses a coding no field names, decodes past its bound, or decodes any layer
//! when one of them is a coding it cannot undo.

use std::fmt;
use std::io::Read;

use flate2::read::{MultiGzDecoder, ZlibDecoder};
use http::HeaderMap;
use http::header::{CONTENT_ENCODING, TRANSFER_ENCODING};

/// One layer of a body's coding (`identity` is no layer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coding {
    /// `gzip` (or `x-gzip`): one or more gzip members.
    Gzip,
    /// `deflate`: the zlib format (RFC 9110 §8.4.1.2).
    Deflate,
    /// Any other coding (`br`, `compress`, `zstd`, ...), named as sent (at most 32
    /// characters).
    Other(String),
}

impl fmt::Display for Coding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Coding::Gzip => f.write_str("gzip"),
            Coding::Deflate => f.write_str("deflate"),
            Coding::Other(name) => f.write_str(name),
        }
    }
}

/// Why a body's codings could not be undone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Undecodable {
    /// A coding field whose value is not text.
    #[error("a coding field of the message is not ASCII text")]
    NotText,
    /// A coding only gzip and deflate decoders could undo, and this is neither.
    #[error("its body is {0:?}-coded, which agentgate cannot decode (gzip and deflate it can)")]
    Unknown(String),
    /// Bytes that do not decode as the coding says.
    #[error("its {0} body does not decode")]
    Corrupt(&'static str),
    /// A layer that decodes to more than the bound.
    #[error("its body decodes to over {max} bytes")]
    TooLarge {
        /// The bound the caller gave.
        max: u64,
    },
}

/// The codings `headers` name, in the order they were applied: every `Content-Encoding`
/// line in turn, then the `Transfer-Encoding` codings but `chunked`; `identity` left out.
///
/// # Errors
/// [`Undecodable::NotText`] when a coding field's value is not ASCII.
pub fn stack(headers: &HeaderMap) -> Result<Vec<Coding>, Undecodable> {
    let mut codings = Vec::new();
    let fields = headers.get_all(CONTENT_ENCODING).into_iter().chain(headers.get_all(TRANSFER_ENCODING));
    for value in fields {
        let text = value.to_str().map_err(|_| Undecodable::NotText)?;
        for name in text.split(',').map(|c| c.trim().to_ascii_lowercase()) {
            match name.as_str() {
                "" | "identity" | "chunked" => {}
                "gzip" | "x-gzip" => codings.push(Coding::Gzip),
                "deflate" => codings.push(Coding::Deflate),
                _ => codings.push(Coding::Other(name.chars().take(32).collect())),
            }
        }
    }
    Ok(codings)
}

/// `body` with every layer of `stack` undone, last applied first; `None` when the stack is
/// empty (the body is as it is). Each layer decodes to at most `max` bytes.
///
/// # Errors
/// [`Undecodable::Unknown`] (before anything is decoded) when a layer is neither gzip nor
/// deflate; [`Undecodable::Corrupt`] or [`Undecodable::TooLarge`] for a layer that does not
/// decode within `max`.
pub fn undo(stack: &[Coding], body: &[u8], max: u64) -> Result<Option<Vec<u8>>, Undecodable> {
    if let Some(Coding::Other(name)) = stack.iter().find(|c| matches!(c, Coding::Other(_))) {
        return Err(Undecodable::Unknown(name.clone()));
    }
    let mut current: Option<Vec<u8>> = None;
    for coding in stack.iter().rev() {
        let input = current.as_deref().unwrap_or(body);
        current = Some(match coding {
            Coding::Gzip => bounded(MultiGzDecoder::new(input), max, "gzip")?,
            Coding::Deflate => bounded(ZlibDecoder::new(input), max, "deflate")?,
            Coding::Other(name) => return Err(Undecodable::Unknown(name.clone())),
        });
    }
    Ok(current)
}

/// Reads `decoder` to the end, at most `max` bytes.
fn bounded(decoder: impl Read, max: u64, coding: &'static str) -> Result<Vec<u8>, Undecodable> {
    let mut output = Vec::new();
    decoder.take(max.saturating_add(1)).read_to_end(&mut output).map_err(|_| Undecodable::Corrupt(coding))?;
    if output.len() as u64 > max {
        return Err(Undecodable::TooLarge { max });
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use http::HeaderValue;

    use super::*;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn deflate(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn headers(fields: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn every_content_encoding_line_and_the_transfer_codings_but_chunked_are_read_in_order() {
        let read = stack(&headers(&[
            ("content-encoding", "identity"),
            ("content-encoding", "gzip, Deflate"),
            ("transfer-encoding", "x-gzip, chunked"),
        ]));
        assert_eq!(read, Ok(vec![Coding::Gzip, Coding::Deflate, Coding::Gzip]));
        assert_eq!(stack(&headers(&[("transfer-encoding", "chunked")])), Ok(vec![]));
        assert_eq!(stack(&headers(&[("content-encoding", "br")])), Ok(vec![Coding::Other("br".to_owned())]));
    }

    #[test]
    fn stacked_layers_are_undone_last_applied_first() {
        let body = deflate(&gzip(b"the value"));
        assert_eq!(undo(&[Coding::Gzip, Coding::Deflate], &body, 1024), Ok(Some(b"the value".to_vec())));
        assert_eq!(undo(&[], b"as it is", 1024), Ok(None));
    }

    #[test]
    fn an_unknown_layer_anywhere_decodes_nothing_and_a_bomb_stops_at_the_bound() {
        let body = gzip(b"x");
        let stack = [Coding::Other("compress".to_owned()), Coding::Gzip];
        assert_eq!(undo(&stack, &body, 1024), Err(Undecodable::Unknown("compress".to_owned())));
        let bomb = gzip(&vec![0u8; 100_000]);
        assert_eq!(undo(&[Coding::Gzip], &bomb, 1000), Err(Undecodable::TooLarge { max: 1000 }));
        assert_eq!(undo(&[Coding::Deflate], b"not zlib", 1000), Err(Undecodable::Corrupt("deflate")));
    }
}
