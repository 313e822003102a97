//! Request bodies as the detectors read them: their codings undone (`crate::coding`: gzip,
//! deflate, every `Content-Encoding` line and transfer coding;
//! bounded by `max_body` after decoding, so a small bomb cannot grow past it), then JSON
//! (every string, named by its field path), form (`application/x-www-form-urlencoded`, every
//! field) and `multipart/form-data` (every part, named) taken apart; any other type is read
//! as it is.
//!
//! Never: keeps a value found, or guesses: a body that says it is JSON, form-encoded,
//! multipart or compressed and is not is [`Unreadable`], and the caller follows
//! `on_unreadable`.

use std::fmt;

use http::HeaderMap;
use http::header::CONTENT_TYPE;
use serde_json::Value;

use super::detect::{Place, Scanner};
use crate::coding::{self, Undecodable};

/// Why a body could not be inspected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// Longer than `max_body` (declared, read, or once decompressed).
    TooLarge {
        /// `[inspect] max_body`.
        max_body: u64,
    },
    /// A `Content-Encoding` agentgate cannot undo (only gzip and deflate are).
    Encoding(String),
    /// Compressed bytes that do not decompress.
    Corrupt(&'static str),
    /// Says it is JSON and does not parse.
    Json,
    /// Says it is multipart and has no boundary, or its parts do not parse.
    Multipart(&'static str),
    /// A WebSocket upgrade: its frames pass after the decision.
    Upgrade,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreadable::TooLarge { max_body } => write!(f, "the body is over [inspect] max_body ({max_body} bytes)"),
            Unreadable::Encoding(name) => {
                write!(f, "Content-Encoding {name:?} cannot be decoded (gzip and deflate can)")
            }
            Unreadable::Corrupt(encoding) => write!(f, "the {encoding} body does not decompress"),
            Unreadable::Json => f.write_str("the body says it is JSON and does not parse"),
            Unreadable::Multipart(why) => write!(f, "the multipart body cannot be read: {why}"),
            Unreadable::Upgrade => f.write_str("a WebSocket upgrade: its frames cannot be inspected"),
        }
    }
}

/// Scans `body`, sent with `headers`, into `scanner`: decoded as its headers say, each part
/// named. A body that cannot be decoded is still scanned as it is (whatever matches still
/// counts), and the reason is returned.
pub(crate) fn scan_body(
    scanner: &mut Scanner<'_>,
    headers: &HeaderMap,
    body: &[u8],
    max_body: u64,
) -> Result<(), Unreadable> {
    if body.is_empty() {
        return Ok(());
    }
    let decoded = match decompress(headers, body, max_body) {
        Ok(decoded) => decoded,
        Err(unreadable) => {
            scanner.scan(body, || "body".to_owned());
            return Err(unreadable);
        }
    };
    let body = decoded.as_deref().unwrap_or(body);
    let content_type = headers.get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let media = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    let labelled_json = media == "application/json" || media.ends_with("+json");
    let parsed = if labelled_json {
        scan_json(scanner, body)
    } else if media == "application/x-www-form-urlencoded" {
        scan_form(scanner, body);
        Ok(())
    } else if media == "multipart/form-data" {
        scan_multipart(scanner, content_type, body)
    } else {
        scanner.scan(body, || "body".to_owned());
        Ok(())
    };
    if parsed.is_err() {
        scanner.scan(body, || "body".to_owned());
    }
    // Origins read a body as JSON whatever its label says (`text/json`, `text/plain`, none,
    // a second `Content-Type` line): whenever it parses, its escapes are undone too.
    if !labelled_json && let Ok(value) = serde_json::from_slice::<Value>(body) {
        walk_json(scanner, &value, &mut String::new());
    }
    parsed
}

/// The body with its codings undone (`crate::coding`: every `Content-Encoding` line and
/// any transfer coding), last applied first; `None` when it has none.
fn decompress(headers: &HeaderMap, body: &[u8], max_body: u64) -> Result<Option<Vec<u8>>, Unreadable> {
    let undone = coding::stack(headers).and_then(|stack| coding::undo(&stack, body, max_body));
    undone.map_err(|undecodable| match undecodable {
        Undecodable::NotText => Unreadable::Encoding("(not ASCII)".to_owned()),
        Undecodable::Unknown(name) => Unreadable::Encoding(name),
        Undecodable::Corrupt(coding) => Unreadable::Corrupt(coding),
        Undecodable::TooLarge { .. } => Unreadable::TooLarge { max_body },
    })
}

/// Every string in a JSON body (keys too), each named by its field path (`credentials.key`,
/// `items[2].token`).
fn scan_json(scanner: &mut Scanner<'_>, body: &[u8]) -> Result<(), Unreadable> {
    let value: Value = serde_json::from_slice(body).map_err(|_| Unreadable::Json)?;
    walk_json(scanner, &value, &mut String::new());
    Ok(())
}

fn walk_json(scanner: &mut Scanner<'_>, value: &Value, path: &mut String) {
    match value {
        Value::String(text) => {
            let shown = scanner.shown(path.as_bytes());
            scanner.scan(text.as_bytes(), || match &shown {
                Some(path) if !path.is_empty() => format!("body: JSON field \"{path}\""),
                Some(_) => "body: JSON".to_owned(),
                None => "body: a JSON field".to_owned(),
            });
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk_json(scanner, item, path);
                path.truncate(len);
            }
        }
        Value::Object(fields) => {
            for (key, item) in fields {
                scanner.scan(key.as_bytes(), || "body: a JSON field name".to_owned());
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                walk_json(scanner, item, path);
                path.truncate(len);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// Every field of a form body, percent-decoded, named.
fn scan_form(scanner: &mut Scanner<'_>, body: &[u8]) {
    let named = |name: &str| format!("body: form field \"{name}\"");
    scan_pairs(scanner, body, Place::Other, named, "body: a form field");
}

/// Every `name=value` pair of a form body or a query, percent-decoded (`+` as space): each
/// value at `named(name)` (in `place`), or at `unnamed` when the name is itself a secret (found, and
/// withheld), as is a name.
pub(crate) fn scan_pairs(
    scanner: &mut Scanner<'_>,
    text: &[u8],
    place: Place,
    named: impl Fn(&str) -> String,
    unnamed: &str,
) {
    for (name, value) in url::form_urlencoded::parse(text) {
        scanner.scan_at(name.as_bytes(), place, || format!("{unnamed} name"));
        let shown = scanner.shown(name.as_bytes());
        scanner.scan_at(value.as_bytes(), place, || match &shown {
            Some(name) => named(name),
            None => unnamed.to_owned(),
        });
    }
}

/// Every part of a `multipart/form-data` body (RFC 7578): its headers and its content, named
/// by the part's `name`.
fn scan_multipart(scanner: &mut Scanner<'_>, content_type: &str, body: &[u8]) -> Result<(), Unreadable> {
    let boundary = parameter(content_type, "boundary").ok_or(Unreadable::Multipart("no boundary parameter"))?;
    if boundary.is_empty() || boundary.len() > 70 {
        return Err(Unreadable::Multipart("the boundary is empty or over 70 characters"));
    }
    let delimiter = format!("--{boundary}");
    let mut rest = body;
    // The preamble, before the first delimiter, is ignored by recipients; scanned as the body.
    let first = find(rest, delimiter.as_bytes()).ok_or(Unreadable::Multipart("no delimiter"))?;
    scanner.scan(&rest[..first], || "body: multipart preamble".to_owned());
    rest = &rest[first + delimiter.len()..];
    let next_delimiter = format!("\r\n--{boundary}");
    loop {
        if rest.starts_with(b"--") {
            scanner.scan(&rest[2..], || "body: multipart epilogue".to_owned());
            return Ok(());
        }
        let after_line = find(rest, b"\r\n").ok_or(Unreadable::Multipart("a delimiter line does not end"))?;
        rest = &rest[after_line + 2..];
        let end = find(rest, next_delimiter.as_bytes()).ok_or(Unreadable::Multipart("no closing delimiter"))?;
        let part = &rest[..end];
        let head_end =
            find(part, b"\r\n\r\n").map(|i| (i, i + 4)).or_else(|| part.starts_with(b"\r\n").then_some((0, 2)));
        let (head, content) = match head_end {
            Some((head, content)) => (&part[..head], &part[content..]),
            None => return Err(Unreadable::Multipart("a part's headers do not end")),
        };
        let name = part_name(head);
        let shown = name.as_deref().and_then(|n| scanner.shown(n.as_bytes()));
        let place = |what: &str| match &shown {
            Some(name) => format!("body: multipart part \"{name}\"{what}"),
            None => format!("body: a multipart part{what}"),
        };
        scanner.scan(head, || place(" headers"));
        scanner.scan(content, || place(""));
        rest = &rest[end + next_delimiter.len()..];
    }
}

/// The `name` of a part's `Content-Disposition`.
fn part_name(head: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(head);
    head.split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-disposition"))
        .and_then(|(_, value)| parameter(value, "name"))
}

/// A header parameter's value (`boundary=x`, `name="x"`), unquoted.
fn parameter(value: &str, wanted: &str) -> Option<String> {
    value.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        if !name.trim().eq_ignore_ascii_case(wanted) {
            return None;
        }
        let value = value.trim();
        let unquoted = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(value);
        Some(unquoted.to_owned())
    })
}

/// Where `needle` first occurs in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() || needle.len() > haystack.len() {
        return None;
    }
    haystack.windows(needle.len()).position(|window| window == needle)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::GzEncoder;
    use http::HeaderValue;

    use super::*;

    const KEY: &str = "AKIAIOSFODNN7EXAMPLE";
    const GITHUB: &str = "ghp_0123456789abcdefghijABCDEFGHIJ012345";

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs.iter().map(|(n, v)| (http::header::HeaderName::from_static(n), HeaderValue::from_static(v))).collect()
    }

    /// What the detectors find in `body` sent with `pairs`, as text, and whether it was read.
    fn scan(pairs: &[(&'static str, &'static str)], body: &[u8]) -> (Vec<String>, Result<(), Unreadable>) {
        let mut scanner = Scanner::new(&[], &[]);
        let read = scan_body(&mut scanner, &headers(pairs), body, 1024 * 1024);
        (scanner.into_findings().iter().map(ToString::to_string).collect(), read)
    }

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(bytes).expect("in memory");
        encoder.finish().expect("in memory")
    }

    #[test]
    fn json_strings_are_named_by_their_field_path() {
        let body = format!(r#"{{"credentials":{{"key":"{KEY}"}},"items":[1,{{"t":"{GITHUB}"}}]}}"#);
        let (found, read) = scan(&[("content-type", "application/json; charset=utf-8")], body.as_bytes());
        assert_eq!(read, Ok(()));
        assert_eq!(
            found,
            [
                "aws_access_key_id in body: JSON field \"credentials.key\"",
                "github_token in body: JSON field \"items[1].t\""
            ]
        );
    }

    #[test]
    fn json_escapes_are_undone_before_scanning() {
        // `\u0041` is `A`: the raw bytes do not hold the key, the decoded string does.
        let body = br#"{"k":"\u0041KIAIOSFODNN7EXAMPLE"}"#;
        let (found, _) = scan(&[("content-type", "application/vnd.api+json")], body);
        assert_eq!(found, ["aws_access_key_id in body: JSON field \"k\""]);
    }

    #[test]
    fn json_escapes_are_undone_whatever_the_label_when_the_body_parses() {
        let body = br#"{"k":"\u0041KIAIOSFODNN7EXAMPLE"}"#;
        for label in [&[("content-type", "text/json")][..], &[("content-type", "text/plain")], &[]] {
            let (found, read) = scan(label, body);
            assert_eq!(read, Ok(()), "{label:?}");
            assert_eq!(found, ["aws_access_key_id in body: JSON field \"k\""], "{label:?}");
        }
    }

    #[test]
    fn a_secret_used_as_a_json_key_is_found_and_never_shown() {
        let body = format!(r#"{{"{KEY}":"x","{KEY}":{{"inner":"{GITHUB}"}}}}"#);
        let (found, _) = scan(&[("content-type", "application/json")], body.as_bytes());
        assert!(found.contains(&"aws_access_key_id in body: a JSON field name".to_owned()), "{found:?}");
        assert!(found.contains(&"github_token in body: a JSON field".to_owned()), "{found:?}");
        assert!(found.iter().all(|f| !f.contains(KEY)), "{found:?}");
    }

    #[test]
    fn json_that_does_not_parse_is_unreadable_and_still_scanned() {
        let body = format!(r#"{{"k":"{KEY}""#);
        let (found, read) = scan(&[("content-type", "application/json")], body.as_bytes());
        assert_eq!(read, Err(Unreadable::Json));
        assert_eq!(found, ["aws_access_key_id in body"]);
    }

    #[test]
    fn form_fields_are_percent_decoded_and_named() {
        // `%5F` is `_`: only decoding finds the token.
        let body = "a=1&token=ghp%5F0123456789abcdefghijABCDEFGHIJ012345";
        let (found, read) = scan(&[("content-type", "application/x-www-form-urlencoded")], body.as_bytes());
        assert_eq!(read, Ok(()));
        assert_eq!(found, ["github_token in body: form field \"token\""]);
    }

    #[test]
    fn multipart_parts_are_named() {
        let body = "preamble\r\n--XyZ\r\nContent-Disposition: form-data; name=\"meta\"\r\n\r\nhello\r\n--XyZ\r\n\
             Content-Disposition: form-data; name=\"key\"; filename=\"id_rsa\"\r\nContent-Type: text/plain\r\n\r\n\
             -----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn\n-----END OPENSSH PRIVATE KEY-----\n\r\n--XyZ--\r\n";
        let (found, read) = scan(&[("content-type", "multipart/form-data; boundary=XyZ")], body.as_bytes());
        assert_eq!(read, Ok(()));
        assert_eq!(found, ["private_key in body: multipart part \"key\""]);
    }

    #[test]
    fn multipart_without_a_boundary_or_an_end_is_unreadable() {
        let (_, read) = scan(&[("content-type", "multipart/form-data")], b"x");
        assert_eq!(read, Err(Unreadable::Multipart("no boundary parameter")));
        let cut = b"--b\r\nContent-Disposition: form-data; name=\"a\"\r\n\r\nAKIAIOSFODNN7EXAMPLE";
        let (found, read) = scan(&[("content-type", "multipart/form-data; boundary=b")], cut);
        assert_eq!(read, Err(Unreadable::Multipart("no closing delimiter")));
        assert_eq!(found, ["aws_access_key_id in body"], "still scanned as it is");
    }

    #[test]
    fn gzip_is_undone_before_the_type_is_read() {
        let body = gzip(format!(r#"{{"credentials":{{"key":"{KEY}"}}}}"#).as_bytes());
        let (found, read) = scan(&[("content-type", "application/json"), ("content-encoding", "gzip")], &body);
        assert_eq!(read, Ok(()));
        assert_eq!(found, ["aws_access_key_id in body: JSON field \"credentials.key\""]);
    }

    #[test]
    fn a_gzip_bomb_stops_at_max_body() {
        let body = gzip(&vec![b'a'; 4 * 1024 * 1024]);
        assert!(body.len() < 64 * 1024);
        let mut scanner = Scanner::new(&[], &[]);
        let read = scan_body(&mut scanner, &headers(&[("content-encoding", "gzip")]), &body, 1024 * 1024);
        assert_eq!(read, Err(Unreadable::TooLarge { max_body: 1024 * 1024 }));
    }

    #[test]
    fn unknown_or_corrupt_encodings_are_unreadable() {
        let (_, read) = scan(&[("content-encoding", "br")], b"x");
        assert_eq!(read, Err(Unreadable::Encoding("br".to_owned())));
        let (found, read) = scan(&[("content-encoding", "gzip")], KEY.as_bytes());
        assert_eq!(read, Err(Unreadable::Corrupt("gzip")));
        assert_eq!(found, ["aws_access_key_id in body"], "the raw bytes are still scanned");
        let (_, read) = scan(&[("content-encoding", "identity")], b"plain");
        assert_eq!(read, Ok(()));
    }

    #[test]
    fn any_other_type_is_scanned_as_it_is() {
        let (found, read) = scan(&[("content-type", "application/octet-stream")], format!("x={KEY} ").as_bytes());
        assert_eq!(read, Ok(()));
        assert_eq!(found, ["aws_access_key_id in body"]);
        let (found, _) = scan(&[], b"nothing to see");
        assert!(found.is_empty());
    }
}
