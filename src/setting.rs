//! One config value as written: durations, socket addresses and networks, parsed with
//! messages that say what was expected, a value with the file and line it was written on
//! ([`Located`]), and the checks every table makes on its values (a timeout above zero, a cap
//! of at least one). The modules that own a config table use
//! these in their serde attributes and `problems` methods; `config` composes the tables.
//!
//! Never: knows a table or a key of its own, opens files or sockets.

use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer};

/// Parses a string value with `parse`; on failure the message says it is not a valid `what` and
/// what was `expected` (the value itself is on the line the error shows).
fn parse_value<'de, D, T>(
    deserializer: D,
    parse: impl Fn(&str) -> Option<T>,
    what: &str,
    expected: &str,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    let text = deserializer.deserialize_str(Text(expected))?;
    parse(text.trim()).ok_or_else(|| serde::de::Error::custom(format!("invalid {what}; expected {expected}")))
}

/// A string; anything else is refused saying what the string should hold (`invalid type:
/// integer `5`, expected a number with a unit, ...`), not just that it should be a string.
struct Text<'a>(&'a str);

impl serde::de::Visitor<'_> for Text<'_> {
    type Value = String;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }

    fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<String, E> {
        Ok(value.to_owned())
    }
}

const SOCKET_ADDR: &str = "host:port such as 127.0.0.1:8080 or [::1]:8080 (port 1-65535, or 0 for any free port)";

pub(crate) fn socket_addr<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SocketAddr, D::Error> {
    parse_value(deserializer, |s| SocketAddr::from_str(s).ok(), "socket address", SOCKET_ADDR)
}

/// A list of socket addresses, each as [`socket_addr`] reads one.
pub(crate) fn socket_addrs<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<SocketAddr>, D::Error> {
    let texts = Vec::<String>::deserialize(deserializer)?;
    texts
        .iter()
        .map(|text| {
            SocketAddr::from_str(text.trim()).map_err(|_| {
                serde::de::Error::custom(format!("invalid socket address {text:?}; expected a list of {SOCKET_ADDR}"))
            })
        })
        .collect()
}

pub(crate) fn optional_socket_addr<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<SocketAddr>, D::Error> {
    let parse = |s: &str| match s {
        "off" => Some(None),
        _ => SocketAddr::from_str(s).ok().map(Some),
    };
    parse_value(deserializer, parse, "socket address", &format!("\"off\" or {SOCKET_ADDR}"))
}

pub(crate) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let parse = |s: &str| humantime::parse_duration(s).ok();
    parse_value(
        deserializer,
        parse,
        "duration",
        "a number with a unit, such as \"500ms\", \"10s\", \"2m\" or \"1h 30m\"",
    )
}

const BYTE_SIZE: &str = "a number of bytes, or a number with a unit such as \"64KiB\", \"100MiB\" or \"1GB\" (B, KB, MB, GB, KiB, MiB, GiB)";

/// A size in bytes: an integer, or a string with a unit (`"100MiB"`, `"1GB"`).
pub(crate) fn byte_size<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    struct Size;
    impl serde::de::Visitor<'_> for Size {
        type Value = u64;

        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(BYTE_SIZE)
        }

        fn visit_u64<E: serde::de::Error>(self, value: u64) -> Result<u64, E> {
            Ok(value)
        }

        fn visit_i64<E: serde::de::Error>(self, value: i64) -> Result<u64, E> {
            u64::try_from(value).map_err(|_| E::custom(format!("invalid size {value}; expected {BYTE_SIZE}")))
        }

        fn visit_str<E: serde::de::Error>(self, value: &str) -> Result<u64, E> {
            parse_byte_size(value).ok_or_else(|| E::custom(format!("invalid size; expected {BYTE_SIZE}")))
        }
    }
    deserializer.deserialize_any(Size)
}

/// `"100MiB"` → 104857600; `None` for anything else than digits and one known unit.
fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let number: u64 = text[..digits].parse().ok()?;
    let unit = text[digits..].trim();
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1000,
        "mb" => 1000 * 1000,
        "gb" => 1000 * 1000 * 1000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(scale)
}

pub(crate) fn networks<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<IpNet>, D::Error> {
    let texts = Vec::<String>::deserialize(deserializer)?;
    texts
        .iter()
        .map(|text| {
            let text = text.trim();
            IpNet::from_str(text).ok().or_else(|| IpAddr::from_str(text).ok().map(IpNet::from)).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "{text:?}: invalid network; expected CIDR such as \"10.0.0.0/8\" or \"fd00::/8\", or a single address"
                ))
            })
        })
        .collect()
}

/// A config value and where it was written (`file:line`), for reasons that point the reader
/// at it. Read from TOML with its span; the config fills in the file and line once the whole
/// text is parsed ([`Located::locate`]). A value built in code has no place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    /// The value as written.
    pub value: T,
    span: std::ops::Range<usize>,
    /// `file:line` of the value, once located.
    pub at: Option<(std::sync::Arc<str>, u32)>,
}

impl<T> Located<T> {
    /// A value with no place (built in code, not read from a file).
    pub fn new(value: T) -> Self {
        Located { value, span: 0..0, at: None }
    }

    /// Records where the value is: `origin` (the file name) and the 1-based line of its span
    /// in `text`, the whole file it was read from.
    pub(crate) fn locate(&mut self, text: &str, origin: &str) {
        let start = self.span.start.min(text.len());
        let line = text.as_bytes()[..start].iter().filter(|b| **b == b'\n').count() + 1;
        self.at = Some((std::sync::Arc::from(origin), u32::try_from(line).unwrap_or(u32::MAX)));
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Located<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let spanned = toml::Spanned::<T>::deserialize(deserializer)?;
        Ok(Located { span: spanned.span(), value: spanned.into_inner(), at: None })
    }
}

/// Reports each `(key, timeout)` that is zero: a zero timeout would end every connection at once.
pub(crate) fn nonzero_timeouts(problems: &mut Vec<String>, timeouts: &[(&str, Duration)]) {
    for (key, value) in timeouts {
        if value.is_zero() {
            problems.push(format!("{key} = \"0s\": must be more than 0s, e.g. \"10s\""));
        }
    }
}

/// Reports each `(key, cap, default)` that is zero: a cap of nothing would refuse everything.
pub(crate) fn nonzero_caps<T: Copy + Default + PartialEq + std::fmt::Display>(
    problems: &mut Vec<String>,
    caps: &[(&str, T, T)],
) {
    for (key, value, default) in caps {
        if *value == T::default() {
            problems.push(format!("{key} = 0: must be at least 1; the default is {default}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_byte_size;

    #[test]
    fn byte_sizes_take_decimal_and_binary_units() {
        for (text, bytes) in [
            ("0", 0),
            ("4096", 4096),
            ("64KiB", 65_536),
            ("100 MiB", 104_857_600),
            ("1GB", 1_000_000_000),
            ("2kb", 2000),
            ("1gib", 1 << 30),
        ] {
            assert_eq!(parse_byte_size(text), Some(bytes), "{text}");
        }
        for text in ["", "MiB", "1.5MiB", "-1", "10 parsecs", "99999999999999999999", "18446744073709551615GiB"] {
            assert_eq!(parse_byte_size(text), None, "{text}");
        }
    }
}
