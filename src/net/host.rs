//! The canonical host: the one spelling of a host that everything matching hosts uses
//! (operator rules, `bypass_hosts`, `[mitm] passthrough_hosts`, the policy cache key and the
//! decision log). IPv4 in any legal spelling (`127.1`, `0177.0.0.1`, `0x7f.1`,
//! `2130706433`) becomes a dotted quad, an IPv4-mapped IPv6 address becomes IPv4, IPv6 is
//! compressed, names are lower case without a trailing dot, and IDNs become their A-label.
//!
//! The parsing is the WHATWG URL host parser (`url::Host::parse`): the same rules browsers
//! and most HTTP clients use, so agentgate reads a host the way the agent's client does.
//!
//! Never: resolves names (the guard does), matches patterns (`policy::operator` does).

use std::borrow::Cow;
use std::fmt;
use std::net::IpAddr;

use url::Host;

/// A host that is not a valid host name or IP address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "host {host:?} is not a valid host name or IP address ({cause}); write e.g. example.com, 192.0.2.1 or [2001:db8::1]"
)]
pub struct HostError {
    host: String,
    cause: String,
}

/// The canonical spelling of `host` (a name, an IPv4 address in any legal spelling, or an
/// IPv6 address with or without brackets). IPv6 comes back without brackets.
///
/// A host already in canonical form (what a request's [`Origin`](crate::fetch::Origin)
/// holds, a lower-case name, a dotted quad) comes back borrowed, with no parsing of a name:
/// every request's host is made canonical for its origin and asked for again at the guard,
/// and the parser's copy cost an allocation each time (bench/RESULTS.md).
///
/// # Errors
/// [`HostError`] for an empty host, forbidden characters or an invalid IDN.
pub fn canonical_host(host: &str) -> Result<Cow<'_, str>, HostError> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        let ip = canonical_ip(ip);
        return Ok(if spells(ip, bare) { Cow::Borrowed(bare) } else { Cow::Owned(ip_text(ip)) });
    }
    // A trailing dot names the same host (RFC 1034 §3.1); WHATWG keeps it, we do not.
    let trimmed = host.strip_suffix('.').unwrap_or(host);
    if is_canonical_name(trimmed) {
        return Ok(Cow::Borrowed(trimmed));
    }
    parsed_name(host, trimmed).map(Cow::Owned)
}

/// `trimmed` (`host` without its trailing dot) through the WHATWG host parser.
fn parsed_name(host: &str, trimmed: &str) -> Result<String, HostError> {
    let error = |cause: String| HostError { host: host.to_owned(), cause };
    if trimmed.is_empty() || trimmed.ends_with('.') {
        return Err(error("empty label".to_owned()));
    }
    match Host::parse(trimmed).map_err(|e| error(e.to_string()))? {
        Host::Domain(name) => Ok(name),
        Host::Ipv4(ip) => Ok(ip_text(IpAddr::V4(ip))),
        Host::Ipv6(ip) => Ok(ip_text(canonical_ip(IpAddr::V6(ip)))),
    }
}

/// Whether the WHATWG host parser gives `name` back as it is: dot-separated non-empty labels
/// of lower-case ASCII letters, digits and `-`, none an A-label (`xn--`, which IDNA checks),
/// the last starting with a letter (a last label that is a number, `1`, `0x7f`, `017`,
/// makes the parser read the whole host as IPv4). Anything else takes the parser's way.
fn is_canonical_name(name: &str) -> bool {
    let last_is_word = name.rsplit('.').next().is_some_and(|last| last.starts_with(|c: char| c.is_ascii_lowercase()));
    last_is_word
        && name.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with("xn--")
                && label.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        })
}

/// Whether `text` is what [`push_ip`] writes for `ip`, compared as it is written.
fn spells(ip: IpAddr, text: &str) -> bool {
    /// The text still to match; a mismatch is an error, which stops the writing.
    struct Rest<'a>(&'a str);
    impl fmt::Write for Rest<'_> {
        fn write_str(&mut self, piece: &str) -> fmt::Result {
            self.0 = self.0.strip_prefix(piece).ok_or(fmt::Error)?;
            Ok(())
        }
    }
    let mut rest = Rest(text);
    write_ip(&mut rest, ip).is_ok() && rest.0.is_empty()
}

/// The host of an authority as written, `[user@]host[:port]`: `example.com:8443` →
/// `example.com`, `[::1]:80` → `[::1]` (an IPv6 literal keeps its brackets), user info left
/// out; the text as it is where it has no such parts. Not canonical (see [`canonical_host`]):
/// what the decision log's `url.domain` and a tunnel's misdirection check read.
pub fn host_part(authority: &str) -> &str {
    // Byte scans: an authority is short, and `str`'s char searchers set up `memchr` for it
    // (a request looks up its host twice).
    let start = authority.bytes().rposition(|b| b == b'@').map_or(0, |at| at + 1);
    let host_port = &authority[start..];
    if host_port.starts_with('[') {
        host_port.bytes().position(|b| b == b']').map_or(host_port, |end| &host_port[..=end])
    } else {
        host_port.bytes().position(|b| b == b':').map_or(host_port, |colon| &host_port[..colon])
    }
}

/// `ip` as its `Display` writes it, at the end of `out`: IPv4 octet by octet (std's
/// `Display` goes through the formatter four times, ~1,300 instructions an address, and a
/// request's host and client address are written several times: bench/RESULTS.md), IPv6
/// through its `Display`.
pub fn push_ip(out: &mut String, ip: IpAddr) {
    // fmt::Write for String fails only when a Display impl does; Ipv6Addr's never does.
    let _ = write_ip(out, ip);
}

/// [`push_ip`] into any writer: the text, or the comparison of [`spells`].
fn write_ip(out: &mut impl fmt::Write, ip: IpAddr) -> fmt::Result {
    match ip {
        IpAddr::V4(v4) => {
            let mut octet = itoa::Buffer::new();
            for (i, byte) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    out.write_char('.')?;
                }
                out.write_str(octet.format(byte))?;
            }
            Ok(())
        }
        IpAddr::V6(v6) => write!(out, "{v6}"),
    }
}

/// `ip` as its `Display` writes it ([`push_ip`]), in a `String` of its own.
pub fn ip_text(ip: IpAddr) -> String {
    let mut text = String::with_capacity(15);
    push_ip(&mut text, ip);
    text
}

/// An address as agentgate reasons about it: an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`)
/// is the IPv4 address it carries, since that is where a connect to it goes.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Who a connection comes from, for caps counted per client: its canonical address, with
/// every loopback address (127.0.0.0/8, `::1`) one client, since any local process can send
/// from any of them.
pub fn client_address(ip: IpAddr) -> IpAddr {
    match canonical_ip(ip) {
        ip if ip.is_loopback() => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        ip => ip,
    }
}

/// The canonical host as an IP address, when it is one.
pub fn as_ip(canonical: &str) -> Option<IpAddr> {
    canonical.parse().ok()
}

/// A host pattern from the config in canonical form: `*` stays, `*.suffix` keeps its
/// wildcard and canonicalizes the suffix, anything else is a host. A pattern that is not a
/// host (a CIDR, or something config validation reports) is returned lower-cased as written.
pub fn canonical_pattern(pattern: &str) -> String {
    if pattern == "*" {
        return pattern.to_owned();
    }
    if let Some(suffix) = pattern.strip_prefix("*.") {
        return match canonical_host(suffix) {
            Ok(host) => format!("*.{host}"),
            Err(_) => pattern.to_ascii_lowercase(),
        };
    }
    canonical_host(pattern).map_or_else(|_| pattern.to_ascii_lowercase(), Cow::into_owned)
}

/// A config's list of host patterns as written, each host pattern in canonical form (an IDN as
/// its A-label, an address in its one spelling), for `#[serde(deserialize_with)]`; an entry
/// that is not a host pattern is kept as written, for the table's `problems` to name.
pub fn canonical_hosts<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    let written = <Vec<String> as serde::Deserialize>::deserialize(deserializer)?;
    Ok(written.into_iter().map(|p| if p == "*" || is_host_pattern(&p) { canonical_pattern(&p) } else { p }).collect())
}

/// `example.com` (an IDN too), `*.example.com`, or an IP address in any spelling the
/// canonical host accepts: what `[mitm] passthrough_hosts` accepts.
pub fn is_host_pattern(pattern: &str) -> bool {
    let wildcard = pattern.starts_with("*.");
    let Ok(name) = canonical_host(pattern.strip_prefix("*.").unwrap_or(pattern)) else { return false };
    if name.parse::<IpAddr>().is_ok() {
        return !wildcard;
    }
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(host: &str) -> String {
        canonical_host(host).map_or_else(|e| format!("error: {e}"), Cow::into_owned)
    }

    #[test]
    fn every_spelling_of_loopback_is_one_dotted_quad() {
        for spelling in ["127.0.0.1", "127.1", "0177.0.0.1", "0x7f.1", "2130706433", "0x7F000001", "127.0.0.1."] {
            assert_eq!(canonical(spelling), "127.0.0.1", "{spelling}");
        }
        assert_eq!(canonical("[::ffff:127.0.0.1]"), "127.0.0.1");
        assert_eq!(canonical("::ffff:7f00:1"), "127.0.0.1");
        assert_eq!(canonical("127.0.0.2"), "127.0.0.2");
    }

    #[test]
    fn ipv6_is_compressed_without_brackets() {
        assert_eq!(canonical("[0:0:0:0:0:0:0:1]"), "::1");
        assert_eq!(canonical("[FD00::1]"), "fd00::1");
        assert_eq!(canonical("[64:ff9b::10.0.0.1]"), "64:ff9b::a00:1");
    }

    #[test]
    fn names_are_lower_case_a_labels_without_the_trailing_dot() {
        assert_eq!(canonical("Example.COM."), "example.com");
        assert_eq!(canonical("LOCALHOST"), "localhost");
        assert_eq!(canonical("bücher.example"), "xn--bcher-kva.example");
        assert_eq!(canonical("XN--BCHER-KVA.example"), "xn--bcher-kva.example");
    }

    #[test]
    fn hostile_hosts_are_errors_naming_the_host() {
        for bad in ["", ".", "a..", "exa mple.com", "a/b", "[::1", "xn--a.example"] {
            let err = canonical_host(bad).expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        // One enormous label: an answer, not a panic.
        let _ = canonical_host(&"a".repeat(100_000));
    }

    /// The way every host took before the fast paths: the address's text made anew, the
    /// name through the WHATWG parser.
    fn parsed(host: &str) -> Result<String, HostError> {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        match bare.parse::<IpAddr>() {
            Ok(ip) => Ok(ip_text(canonical_ip(ip))),
            Err(_) => parsed_name(host, host.strip_suffix('.').unwrap_or(host)),
        }
    }

    #[test]
    fn a_host_taken_as_it_is_gets_the_answer_the_parser_gives() {
        let long_label = format!("{}.example", "a".repeat(64));
        let long_name = format!("{}.example", ["abcdefghi"; 30].join("."));
        let hosts = [
            // Canonical already: taken as they are.
            "example.com",
            "a-b.example-1.com",
            "localhost",
            "1.2.example",
            "0x7f.example",
            "-a.example",
            "a-.example",
            "ab--cd.example",
            "example.com.",
            long_label.as_str(),
            long_name.as_str(),
            "127.0.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "[::1]",
            "::1",
            "2001:db8::1",
            // Not canonical: parsed.
            "Example.com",
            "EXAMPLE.COM.",
            "bücher.example",
            "xn--bcher-kva.example",
            "XN--BCHER-KVA.example",
            "xn--a.example",
            "a_b.example",
            "a%41.example",
            "example.123",
            "example.0x1f",
            "example.017",
            "example.1.",
            "1.example.9",
            "127.1",
            "0x7f.1",
            "0177.0.0.1",
            "2130706433",
            "127.000.0.1",
            "127.0.0.1.",
            "[::ffff:127.0.0.1]",
            "::ffff:7f00:1",
            "[0:0:0:0:0:0:0:1]",
            "[FD00::1]",
            "2001:DB8::1",
            "[64:ff9b::10.0.0.1]",
            "a..b",
            "a.",
            ".",
            "",
            "exa mple.com",
        ];
        for host in hosts {
            let fast = canonical_host(host).map(Cow::into_owned).map_err(|e| e.to_string());
            assert_eq!(fast, parsed(host).map_err(|e| e.to_string()), "{host:?}");
        }
        for canonical in ["example.com", "localhost", "127.0.0.2", "::1", "2001:db8::1"] {
            assert!(matches!(canonical_host(canonical), Ok(Cow::Borrowed(_))), "{canonical} is taken as it is");
        }
        assert!(matches!(canonical_host("[::1]"), Ok(Cow::Borrowed("::1"))));
        assert!(matches!(canonical_host("example.com."), Ok(Cow::Borrowed("example.com"))));
        for parsed in ["Example.com", "127.1", "[::ffff:127.0.0.1]", "2001:DB8::1"] {
            assert!(matches!(canonical_host(parsed), Ok(Cow::Owned(_))), "{parsed} is parsed");
        }
    }

    #[test]
    fn host_part_of_an_authority() {
        assert_eq!(host_part("example.com:8443"), "example.com");
        assert_eq!(host_part("[::1]:80"), "[::1]");
        assert_eq!(host_part("Example.com"), "Example.com");
        assert_eq!(host_part("user@example.com:80"), "example.com");
        assert_eq!(host_part("example.com:"), "example.com");
        assert_eq!(host_part("[::1]"), "[::1]");
    }

    #[test]
    fn ip_text_is_what_display_writes() {
        for ip in
            ["0.0.0.0", "10.200.0.255", "255.255.255.255", "127.0.0.2", "::", "::1", "2001:db8::1", "::ffff:10.0.0.1"]
        {
            let ip: IpAddr = ip.parse().expect("a literal address");
            assert_eq!(ip_text(ip), ip.to_string());
            let mut out = "x".to_owned();
            push_ip(&mut out, ip);
            assert_eq!(out, format!("x{ip}"));
        }
    }

    #[test]
    fn patterns_keep_their_wildcard() {
        assert_eq!(canonical_pattern("*"), "*");
        assert_eq!(canonical_pattern("*.Bücher.example."), "*.xn--bcher-kva.example");
        assert_eq!(canonical_pattern("0x7f.1"), "127.0.0.1");
        assert_eq!(canonical_pattern("10.0.0.0/8"), "10.0.0.0/8");
    }
}
