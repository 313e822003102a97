//! The secrets' unit tests: the check, the plan applied to a request head, the scrubber.

use std::time::Instant;

use http::header::{ACCEPT_ENCODING, AUTHORIZATION, RANGE};
use http::{HeaderMap, HeaderValue, Request};

use super::*;

const VALUE: &str = "ghp_RealTokenValue0123456789";
const PLACEHOLDER: &str = "agp_github_0001";

fn github(agents: &[&str]) -> SecretConfig {
    let toml = format!(
        "name = \"github\"\nplaceholder = \"{PLACEHOLDER}\"\nvalue_env = \"X\"\nhosts = [\"api.github.test\"]\nagents = {agents:?}\nquery = [\"access_token\"]\n"
    );
    let mut secret: SecretConfig = toml::from_str(&toml).expect("a secret table");
    secret.value = test_value(VALUE);
    secret
}

fn test_value(value: &str) -> SecretValue {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("value");
    std::fs::write(&path, value).expect("written");
    let toml =
        format!("name = \"v\"\nplaceholder = \"agp_v_000000001\"\nvalue_file = {:?}\nhosts = [\"a.test\"]\n", path);
    let mut secret: SecretConfig = toml::from_str(&toml).expect("a secret table");
    secret.load_value(1).expect("written just now");
    secret.value
}

fn request<'a>(host: &'a str, target: &'a str, headers: &'a HeaderMap, agent: &'a str) -> SecretRequest<'a> {
    SecretRequest { agent, tls: true, host, port: 443, method: "GET", path_and_query: target, headers }
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    pairs.iter().map(|(n, v)| (n.parse().expect("a name"), HeaderValue::from_str(v).expect("a value"))).collect()
}

#[test]
fn the_placeholder_is_planned_for_its_host_and_refused_everywhere_else() {
    let secrets = Secrets::new(&[github(&["bot"])], None, Instant::now());
    let sent = headers(&[("authorization", &format!("Bearer {PLACEHOLDER}"))]);
    let plan = secrets.check(&request("api.github.test", "/user", &sent, "bot"), Instant::now()).expect("bound");
    assert_eq!(plan.used(), ["github (header authorization)"]);
    assert!(plan.scrubs());

    let misuse = secrets.check(&request("gist.example", "/", &sent, "bot"), Instant::now()).expect_err("unbound");
    assert_eq!(misuse.code, OperatorCode::SecretNotBound);
    assert!(misuse.rule.contains("header authorization") && !misuse.rule.contains(VALUE), "{}", misuse.rule);
    let other = secrets.check(&request("api.github.test", "/", &sent, "intruder"), Instant::now()).expect_err("agent");
    assert_eq!(other.code, OperatorCode::SecretAgentNotAllowed);
    let plain = SecretRequest { tls: false, port: 80, ..request("api.github.test", "/", &sent, "bot") };
    let github80 = SecretConfig { hosts: vec!["api.github.test".into()], ..github(&["bot"]) };
    let secrets80 = Secrets::new(&[github80], None, Instant::now());
    assert_eq!(secrets80.check(&plain, Instant::now()).expect_err("plain").code, OperatorCode::SecretPlainHttp);
}

#[test]
fn the_real_value_is_refused_towards_any_other_host_wherever_it_hides() {
    let secrets = Secrets::new(&[github(&[])], None, Instant::now());
    let none = HeaderMap::new();
    let basic = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("x:{VALUE}"));
    let (query, label) = (format!("/?q={VALUE}"), format!("{}.evil.example", VALUE.to_ascii_lowercase()));
    let named = headers(&[(format!("x-{}", VALUE.to_ascii_lowercase()).as_str(), "1")]);
    let method = format!("M{VALUE}");
    let cases = [
        request("evil.example", "/", &named, "bot"),
        SecretRequest { method: &method, ..request("evil.example", "/", &none, "bot") },
        request("evil.example", &query, &none, "bot"),
        request("evil.example", "/?q=ghp_RealToken%56alue0123456789", &none, "bot"),
        request(&label, "/", &none, "bot"),
    ];
    for case in &cases {
        let misuse = secrets.check(case, Instant::now()).expect_err("leak");
        assert_eq!(misuse.code, OperatorCode::SecretValueLeak, "{case:?}");
        assert!(!misuse.rule.to_ascii_lowercase().contains(&VALUE.to_ascii_lowercase()), "{}", misuse.rule);
    }
    let in_basic = headers(&[("authorization", &format!("Basic {basic}"))]);
    let misuse = secrets.check(&request("evil.example", "/", &in_basic, "bot"), Instant::now()).expect_err("basic");
    assert_eq!(
        misuse.rule,
        "the value of secret \"github\" is in the header authorization of a request to evil.example:443, a host it is not bound to"
    );
    // To its own host the value is not refused (an agent that has it gains nothing there).
    assert!(secrets.check(&request("api.github.test", "/", &in_basic, "bot"), Instant::now()).is_ok());
}

#[test]
fn apply_replaces_in_the_named_header_basic_credentials_and_query_only() {
    let secrets = Secrets::new(&[github(&[])], None, Instant::now());
    let basic = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("git:{PLACEHOLDER}"));
    let sent =
        headers(&[("authorization", &format!("Basic {basic}")), ("x-other", PLACEHOLDER), ("range", "bytes=0-1")]);
    let target = format!("/repos?access_token={PLACEHOLDER}&note={PLACEHOLDER}");
    let plan = secrets.check(&request("api.github.test", &target, &sent, "bot"), Instant::now()).expect("bound");
    let mut builder = Request::get(format!("https://api.github.test{target}"));
    *builder.headers_mut().expect("a builder") = sent.clone();
    let (mut parts, ()) = builder.body(()).expect("a request").into_parts();
    let made = apply(&plan, &mut parts);
    let expected = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("git:{VALUE}"));
    assert_eq!(parts.headers[AUTHORIZATION], format!("Basic {expected}").as_str());
    let made: Vec<(&str, &str)> = made.iter().map(|(text, original)| (text.as_str(), original.as_str())).collect();
    assert_eq!(made, [(expected.as_str(), basic.as_str())], "the token made, for the scrubber to put back");
    assert_eq!(parts.headers["x-other"], PLACEHOLDER, "a header the secret does not name is left alone");
    assert_eq!(parts.uri.query(), Some(format!("access_token={VALUE}&note={PLACEHOLDER}").as_str()));
    assert_eq!(parts.headers[ACCEPT_ENCODING], "identity");
    assert!(parts.headers.get(RANGE).is_none());
    assert_eq!(plan.used(), ["github (header authorization)", "github (query access_token)"]);
}

#[test]
fn the_scrubber_replaces_values_split_across_any_chunk_boundary() {
    let pairs = vec![std::sync::Arc::new(Forms::of(VALUE, PLACEHOLDER))];
    let body = format!("{{\"token\":\"{VALUE}\",\"again\":\"{VALUE}\"}}{VALUE}");
    let expected = body.replace(VALUE, PLACEHOLDER);
    for split in 1..body.len() {
        let mut scrubber = Scrubber::new(pairs.clone(), Vec::new());
        let mut out = scrubber.push(&body.as_bytes()[..split]).to_vec();
        for byte in &body.as_bytes()[split..] {
            out.extend_from_slice(&scrubber.push(&[*byte]));
        }
        out.extend_from_slice(&scrubber.finish());
        assert_eq!(String::from_utf8(out).expect("utf-8"), expected, "split at {split}");
    }
    let scrubber = Scrubber::new(pairs, Vec::new());
    assert_eq!(scrubber.text(format!("Bearer {VALUE}").as_bytes()), Some(format!("Bearer {PLACEHOLDER}").into_bytes()));
    assert_eq!(scrubber.text(b"nothing here"), None);
}

#[test]
fn the_scrubber_finds_the_percent_encoded_and_base64_forms_and_puts_back_the_agents_own_token() {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    let value = "ghp/Real+Value=0123456789abcdef";
    let pairs = vec![std::sync::Arc::new(Forms::of(value, PLACEHOLDER))];
    let (made, agents) = (STANDARD.encode(format!("x:{value}")), STANDARD.encode(format!("x:{PLACEHOLDER}")));
    let scrubber = Scrubber::new(pairs, vec![(zeroize::Zeroizing::new(made.clone()), agents.clone())]);
    let echoed = scrubber.text(format!("authorization: Basic {made}").as_bytes()).expect("the token made");
    assert_eq!(String::from_utf8(echoed).expect("utf-8"), format!("authorization: Basic {agents}"));
    for quoted in ["ghp%2FReal%2BValue%3D0123456789abcdef", "ghp%2fReal%2bValue%3d0123456789abcdef"] {
        let scrubbed = scrubber.text(format!("/x?access_token={quoted}").as_bytes()).expect("percent-encoded");
        assert!(!String::from_utf8_lossy(&scrubbed).contains(quoted), "{quoted}");
    }
    // Base64 of the value after any number of other bytes: each alignment is found.
    for before in ["", "a", "ab", "abc", "user:"] {
        let encoded = STANDARD.encode(format!("{before}{value}"));
        let scrubbed = scrubber.text(encoded.as_bytes()).expect("base64");
        let decoded = STANDARD.decode(&scrubbed).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&decoded).contains(value), "after {before:?}");
        assert!(!String::from_utf8_lossy(&scrubbed).contains(&encoded), "after {before:?}");
    }
}

#[test]
fn a_rotated_value_stays_watched_for_the_grace_period_then_is_forgotten() {
    let now = Instant::now();
    let old = Secrets::new(&[github(&[])], None, now);
    let rotated = SecretConfig { value: test_value("ghp_NewTokenValue9876543210"), ..github(&[]) };
    let new = Secrets::new(&[rotated], Some(&old), now);
    let none = HeaderMap::new();
    let leak = request("evil.example", "/?q=ghp_RealTokenValue0123456789", &none, "bot");
    assert_eq!(new.check(&leak, now).expect_err("retired, still watched").code, OperatorCode::SecretValueLeak);
    assert!(new.check(&leak, now + RETIRED_GRACE + std::time::Duration::from_secs(1)).is_ok());
    let plan = new.check(&request("api.github.test", "/", &none, "bot"), now).expect("bound");
    assert_eq!(plan.scrub.len(), 2, "the new value and the retired one are scrubbed");
    let shown = format!("{:?}", new.retired);
    assert!(
        shown.contains("github") && !shown.contains("ghp_RealTokenValue"),
        "a retired value is never shown: {shown}"
    );
}

#[test]
fn redact_replaces_a_value_in_any_letter_case() {
    let secrets = Secrets::new(&[github(&[])], None, Instant::now());
    let text =
        format!("CONNECT {}.evil.example:443 {} é{VALUE}", VALUE.to_ascii_lowercase(), VALUE.to_ascii_uppercase());
    let redacted = secrets.redact(&text).expect("it holds the value");
    assert_eq!(redacted, "CONNECT [secret github].evil.example:443 [secret github] é[secret github]");
    assert_eq!(secrets.redact("nothing here"), None);
}

#[test]
fn the_forms_of_each_value_are_made_once_when_the_secrets_load_and_scrub_as_before() {
    let now = Instant::now();
    let secrets = Secrets::new(&[github(&[])], None, now);
    let none = HeaderMap::new();
    let bound = request("api.github.test", "/", &none, "bot");
    let (first, second) = (secrets.check(&bound, now).expect("bound"), secrets.check(&bound, now).expect("bound"));
    let loaded = secrets.live_forms[0].as_ref().expect("the value is loaded");
    assert!(Arc::ptr_eq(&first.scrub[0], loaded) && Arc::ptr_eq(&second.scrub[0], loaded), "shared, not made again");
    // Raw (percent-encoding changes none of its characters, so those forms are the same)
    // and base64 at three alignments.
    assert_eq!(format!("{loaded:?}"), "Forms(4 forms)", "never the value");
    let scrubber = first.scrubber(Vec::new()).expect("the host has a secret");
    let encoded = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("u:{VALUE}"));
    let scrubbed = scrubber.text(format!("{VALUE} {encoded}").as_bytes()).expect("both forms found");
    let scrubbed = String::from_utf8(scrubbed).expect("utf-8");
    assert!(scrubbed.starts_with(&format!("{PLACEHOLDER} ")) && !scrubbed.contains(&encoded), "{scrubbed}");
    // A retired value keeps the forms it was loaded with.
    let rotated = SecretConfig { value: test_value("ghp_NewTokenValue9876543210"), ..github(&[]) };
    let next = Secrets::new(&[rotated], Some(&secrets), now);
    assert!(Arc::ptr_eq(&next.retired[0].forms, loaded), "the retired value's forms are the ones made at load");
}

#[test]
fn a_value_is_found_in_a_host_or_header_name_in_any_case_and_a_target_without_escapes_is_not_copied() {
    let now = Instant::now();
    let secrets = Secrets::new(&[github(&[])], None, now);
    let none = HeaderMap::new();
    let host = format!("{}.evil.example", VALUE.to_ascii_lowercase());
    let misuse = secrets.check(&request(&host, "/", &none, "bot"), now).expect_err("in the host name");
    assert!(misuse.rule.contains("in the host name"), "{}", misuse.rule);
    let named = headers(&[(&format!("x-{}", VALUE.to_ascii_lowercase()), "1")]);
    let misuse = secrets.check(&request("evil.example", "/", &named, "bot"), now).expect_err("in a header name");
    assert!(misuse.rule.contains("in the header names"), "{}", misuse.rule);
    let plain = request("evil.example", "/a/b?c=d", &none, "bot");
    assert!(Places::of(&plain).decoded_target.is_none(), "nothing to decode, nothing copied");
    let escaped = format!("/x?q={}", VALUE.replace('_', "%5F"));
    let misuse = secrets.check(&request("evil.example", &escaped, &none, "bot"), now).expect_err("escaped");
    assert!(misuse.rule.contains("path or query"), "{}", misuse.rule);
}
