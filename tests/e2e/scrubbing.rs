//! What comes back from a host a secret is bound to, through the real binary: the forms of
//! the value agentgate itself made for a request (the `Basic` token it encoded, the
//! percent-encoded query value) come back as the placeholder's, and every content-coding
//! layer of the answer (stacked `Content-Encoding` lines, `Transfer-Encoding: gzip,
//! chunked`) is undone before the value is taken out, or the answer is withheld (502, and
//! recorded) (docs/secrets.md, "What comes back").

use std::io::Read;
use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use reqwest::header::AUTHORIZATION;
use sha2::{Digest, Sha256};

use crate::reload::base_config;
use crate::support::binary::Agentgate;
use crate::support::header;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::{TestResult, log};

/// A value with the characters a query value is percent-encoded for (`/+=`).
const VALUE: &str = "ghp/e2e+Scrub=Value5f2c9a7b31d04e6a/+=";
const PLACEHOLDER: &str = "agp_scrub_e2e_0001";

fn sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// `text` as agentgate percent-encodes a query value (unreserved characters kept), its hex
/// in upper or lower case.
fn percent_encoded(text: &str, upper: bool) -> String {
    text.bytes()
        .map(|b| match b {
            b if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => char::from(b).to_string(),
            b if upper => format!("%{b:02X}"),
            b => format!("%{b:02x}"),
        })
        .collect()
}

/// Which form of the value `bytes` give away, if any: the value itself, percent-decoded, or
/// base64 at any alignment (the base64 characters of (k filler bytes + value) that depend
/// on the value only: any base64 text holding the value holds one of these three).
fn gives_away(bytes: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(bytes);
    if text.contains(VALUE) {
        return Some("the value".to_owned());
    }
    for upper in [true, false] {
        if text.contains(&percent_encoded(VALUE, upper)) {
            return Some(format!("the percent-encoded value (upper-case hex: {upper})"));
        }
    }
    let mut decoded = String::new();
    let mut rest = text.as_ref();
    while let Some(at) = rest.find('%') {
        decoded.push_str(&rest[..at]);
        match rest.get(at + 1..at + 3).and_then(|hex| u8::from_str_radix(hex, 16).ok()) {
            Some(byte) => {
                decoded.push(char::from(byte));
                rest = &rest[at + 3..];
            }
            None => {
                decoded.push('%');
                rest = &rest[at + 1..];
            }
        }
    }
    decoded.push_str(rest);
    if decoded.contains(VALUE) {
        return Some("the value, percent-decoded".to_owned());
    }
    for k in 0..3 {
        let mut filled = vec![0u8; k];
        filled.extend_from_slice(VALUE.as_bytes());
        let encoded = STANDARD.encode(&filled);
        let aligned = &encoded[(8 * k).div_ceil(6)..(8 * filled.len()) / 6];
        if text.contains(aligned) {
            return Some(format!("the value in base64 after {k} bytes"));
        }
    }
    None
}

/// `bytes` and every decoding of them: gunzip (a stream of members) or inflate (zlib),
/// as many times as either applies (at most 8).
fn every_decoding(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut seen = vec![bytes.to_vec()];
    let mut current = bytes.to_vec();
    for _ in 0..8 {
        let mut out = Vec::new();
        let gunzipped = flate2::read::MultiGzDecoder::new(current.as_slice()).read_to_end(&mut out).is_ok();
        if !gunzipped || out.is_empty() {
            out.clear();
            if flate2::read::ZlibDecoder::new(current.as_slice()).read_to_end(&mut out).is_err() || out.is_empty() {
                break;
            }
        }
        seen.push(out.clone());
        current = out;
    }
    seen
}

/// The binary's config: the secret `scrub` bound to `localhost` (the origin), injected in
/// `Authorization` and the query parameter `access_token`.
fn config(dir: &Path, ca: &TestCa, value_file: &Path) -> String {
    format!(
        "{base}\n[[secrets]]\nname = \"scrub\"\nplaceholder = \"{PLACEHOLDER}\"\nvalue_file = {value_file:?}\n\
         hosts = [\"localhost\"]\nquery = [\"access_token\"]\n",
        base = base_config(dir, ca)
    )
}

/// An HTTPS origin speaking HTTP/1.1 only (ALPN), so it can answer with `Transfer-Encoding`.
fn http1_origin(ca: &TestCa) -> TestResult<Origin> {
    let mut tls = (*ca.origin_server_config()?).clone();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Origin::on_listener(listener, Some(std::sync::Arc::new(tls)), Site::new())
}

/// agentgate, started on the secret's config, with its temporary directory.
async fn start(ca: &TestCa) -> TestResult<(Agentgate, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let value_file = dir.path().join("scrub-token");
    std::fs::write(&value_file, format!("{VALUE}\n"))?;
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config(dir.path(), ca, &value_file))?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "agentgate=info").await?;
    Ok((agentgate, dir))
}

/// The answer's head and body as the agent got them, one text.
async fn answer_bytes(response: reqwest::Response) -> TestResult<Vec<u8>> {
    let mut all = Vec::new();
    for (name, value) in response.headers() {
        all.extend_from_slice(format!("{name}: ").as_bytes());
        all.extend_from_slice(value.as_bytes());
        all.push(b'\n');
    }
    all.extend_from_slice(&response.bytes().await?);
    Ok(all)
}

#[tokio::test]
async fn the_basic_token_and_percent_encoded_query_agentgate_made_never_come_back_from_the_bound_host() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let (agentgate, _dir) = start(&ca).await?;
    let agent = agentgate.client()?;

    // The placeholder as a Basic password, after user names of 1, 2 and 3 bytes: the value
    // sits at each of the three base64 alignments of the token agentgate encodes.
    for user in ["x", "xy", "xyz"] {
        let response = agent.get(origin.url("/reflect")).basic_auth(user, Some(PLACEHOLDER)).send().await?;
        assert_eq!(response.status(), 200, "user {user}");
        let injected = format!("Basic {}", STANDARD.encode(format!("{user}:{VALUE}")));
        assert_eq!(header(&response, "x-authorization-sha256"), sha256(&injected), "the origin got the value");
        let sent = format!("Basic {}", STANDARD.encode(format!("{user}:{PLACEHOLDER}")));
        assert_eq!(header(&response, "x-authorization"), sent, "the echo is the agent's own token");
        let bytes = answer_bytes(response).await?;
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(gives_away(&bytes), None, "user {user}: {text}");
        assert!(text.contains(&format!("authorization: {sent}")), "{text}");
    }

    // The placeholder in a query parameter: agentgate percent-encodes the value's `/+=`, the
    // origin quotes its query back.
    let response = agent.get(origin.url(&format!("/reflect?access_token={PLACEHOLDER}"))).send().await?;
    assert_eq!(response.status(), 200);
    let query = format!("access_token={}", percent_encoded(VALUE, true));
    assert_eq!(header(&response, "x-query-sha256"), sha256(&query), "the origin got the value, percent-encoded");
    let bytes = answer_bytes(response).await?;
    let text = String::from_utf8_lossy(&bytes);
    assert_eq!(gives_away(&bytes), None, "{text}");
    assert!(text.contains(&format!("query: access_token={PLACEHOLDER}")), "{text}");
    agentgate.stop().await?;
    Ok(())
}

#[tokio::test]
async fn every_coding_layer_of_a_bound_answer_is_undone_before_scrubbing_or_the_answer_is_withheld() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = http1_origin(&ca)?;
    let (agentgate, dir) = start(&ca).await?;
    let agent = agentgate.client()?;
    let bearer = format!("Bearer {PLACEHOLDER}");

    // Each answer reflects the injected value, coded as the origin was asked to.
    let decoded = [
        ("identity-gzip", "x-reflect-codings", "identity, gzip"),
        ("gzip-gzip", "x-reflect-codings", "gzip,gzip"),
        ("identity-deflate", "x-reflect-codings", "identity,deflate"),
        ("gzip-deflate", "x-reflect-codings", "gzip, deflate"),
        ("transfer-gzip", "x-reflect-transfer", "gzip"),
    ];
    for (case, name, codings) in decoded {
        let url = origin.url(&format!("/reflect?case={case}"));
        let response = agent.get(url).header(AUTHORIZATION, &bearer).header(name, codings).send().await?;
        assert_eq!(response.status(), 200, "{case}");
        assert!(response.headers().get("content-encoding").is_none(), "{case}: decoded for the agent");
        assert!(response.headers().get("transfer-encoding").is_none_or(|te| te == "chunked"), "{case}");
        let bytes = answer_bytes(response).await?;
        for (layer, seen) in every_decoding(&bytes).iter().enumerate() {
            assert_eq!(gives_away(seen), None, "{case}, decoded {layer} times: {}", String::from_utf8_lossy(seen));
        }
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains(&format!("authorization: {bearer}")), "{case}: the scrubbed echo, readable: {text}");
    }

    // A coding agentgate cannot undo, alone or under one it can: withheld, and recorded.
    let withheld = [("br", "br"), ("gzip-compress", "gzip, compress"), ("compress-gzip", "compress, gzip")];
    for (case, codings) in withheld {
        let url = origin.url(&format!("/reflect?case={case}"));
        let response =
            agent.get(url).header(AUTHORIZATION, &bearer).header("x-reflect-codings", codings).send().await?;
        assert_eq!(response.status(), 502, "{case}");
        let bytes = answer_bytes(response).await?;
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.contains("withheld"), "{case}: {text}");
        for seen in every_decoding(&bytes) {
            assert_eq!(gives_away(&seen), None, "{case}");
        }
    }
    agentgate.stop().await?;
    let records = log::read(&dir.path().join("decisions.jsonl"))?;
    for (case, _) in withheld {
        let found = log::for_request(&records, "GET", &format!("/reflect?case={case}"));
        assert!(
            found.len() == 1 && found[0]["http.response.status_code"] == 502,
            "{case}: one record of the 502: {found:#?}"
        );
    }
    Ok(())
}
