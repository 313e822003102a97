//! Tests for automation-preferences.txt: SEMANTICS §6.4 rows by number (`semantics_d10_*`),
//! the draft's two examples and the proposed corpus under `../shared/conformance/autoctl/`,
//! hostile input, and a property test that arbitrary bytes never panic.

use proptest::prelude::*;

use super::{Autoctl, AutoctlState, MAX_BYTES, from_fetch, lint};
use crate::policy::test_support::{HOUR, MINUTE, cases, corpus, previous, read, refresh};
use crate::policy::text::{REPORTED_FINDINGS, sha256_hex};
use crate::policy::{
    AutoctlCode, FetchError, FetchOutcome, Headers, MAX_TTL, Opinion, PolicyStatus, Reason, RequestView, Severity,
    Source, SourceVerdict,
};

fn text_plain() -> Headers {
    Headers::new(vec![("Content-Type".to_owned(), "text/plain; charset=utf-8".to_owned())])
}

fn served(body: &[u8]) -> FetchOutcome {
    FetchOutcome::Response { status: 200, headers: text_plain(), body: body.to_vec(), over_cap: false }
}

fn parse(text: &str) -> AutoctlState {
    from_fetch(&served(text.as_bytes()))
}

/// One request against a file, with the defaults of the corpus (host example.com, agent
/// without a token, no purposes).
#[derive(Clone, Copy)]
struct Probe<'a> {
    method: &'a str,
    path: &'a str,
    host: &'a str,
    port: u16,
    token: Option<&'a str>,
    user_agent: Option<&'a str>,
    purposes: &'a [&'a str],
}

impl<'a> Probe<'a> {
    fn new(method: &'a str, path: &'a str) -> Self {
        Probe { method, path, host: "example.com", port: 443, token: None, user_agent: None, purposes: &[] }
    }

    fn agent(self, token: &'a str) -> Self {
        Probe { token: Some(token), ..self }
    }

    fn purposes(self, purposes: &'a [&'a str]) -> Self {
        Probe { purposes, ..self }
    }

    fn host(self, host: &'a str, port: u16) -> Self {
        Probe { host, port, ..self }
    }

    fn ask(&self, state: &AutoctlState) -> SourceVerdict {
        let purposes: Vec<String> = self.purposes.iter().map(|p| (*p).to_owned()).collect();
        let headers = Headers::default();
        let req = RequestView {
            method: self.method,
            scheme: "https",
            host: self.host,
            port: self.port,
            path_and_query: self.path,
            product_token: self.token,
            user_agent: self.user_agent,
            agent_id: "agent-1",
            trust_level: 0,
            purposes: &purposes,
            headers: &headers,
        };
        state.evaluate(&req)
    }
}

/// The opinion and, per reason, (code, line, rule as written).
type Expected<'a> = (Opinion, &'a [(&'a str, Option<u32>, &'a str)]);

fn assert_verdict(state: &AutoctlState, probe: Probe<'_>, (opinion, reasons): Expected<'_>, case: &str) {
    let verdict = probe.ask(state);
    let got: Vec<(&str, Option<u32>, &str)> =
        verdict.reasons.iter().map(|r| (r.code.as_str(), r.line, r.rule.as_ref())).collect();
    assert_eq!((verdict.opinion, got.as_slice()), (opinion, reasons), "{case}: {} {}", probe.method, probe.path);
    for reason in &verdict.reasons {
        assert_eq!(reason.source, Source::Autoctl, "{case}");
    }
}

fn codes(state: &AutoctlState) -> Vec<(Option<u32>, String)> {
    state.report().diagnostics.into_iter().map(|d| (d.line, d.code)).collect()
}

fn corpus_file(name: &str) -> Vec<u8> {
    read(&corpus("autoctl").join(name))
}

const DENY: Opinion = Opinion::Deny;
const ALLOW: Opinion = Opinion::Allow;
const NONE: Opinion = Opinion::NoOpinion;
const NO_GROUP_RULE: &str = "no group's host, scope and user-agent match this request";

#[test]
fn draft_groups_example() {
    let state = from_fetch(&served(&corpus_file("draft-groups-example.automation-preferences.txt")));
    assert_eq!(state.report().status, PolicyStatus::Valid);
    let cases: &[(Probe<'_>, Expected<'_>)] = &[
        (Probe::new("HEAD", "/"), (ALLOW, &[("autoctl.allowed", Some(5), "allowed-methods: GET, HEAD")])),
        (Probe::new("POST", "/"), (DENY, &[("autoctl.method_not_allowed", Some(5), "allowed-methods: GET, HEAD")])),
        (Probe::new("HEAD", "/admin/"), (DENY, &[("autoctl.method_not_allowed", Some(11), "allowed-methods: GET")])),
        (Probe::new("GET", "/admin/x"), (ALLOW, &[("autoctl.allowed", Some(11), "allowed-methods: GET")])),
        (Probe::new("GET", "/").host("other.example", 443), (NONE, &[("autoctl.no_group", None, NO_GROUP_RULE)])),
    ];
    for (probe, expected) in cases {
        assert_verdict(&state, *probe, *expected, "draft groups example");
    }
    let html_comments = codes(&state).iter().filter(|(_, code)| code == "html-comment").count();
    assert_eq!(html_comments, 2);
}

#[test]
fn draft_full_example() {
    let state = from_fetch(&served(&corpus_file("draft-full-example.automation-preferences.txt")));
    let methods_1 = "allowed-methods: GET, HEAD";
    let purposes_1 = "allowed-purposes: PLACEHOLDER_PURPOSE1, PLACEHOLDER_PURPOSE2";
    let cases: &[(Probe<'_>, Expected<'_>)] = &[
        (
            Probe::new("GET", "/").purposes(&["PLACEHOLDER_PURPOSE2"]),
            (ALLOW, &[("autoctl.allowed", Some(9), methods_1)]),
        ),
        (
            Probe::new("GET", "/admin/").agent("ExampleBot").purposes(&["PLACEHOLDER_PURPOSE2"]),
            (DENY, &[("autoctl.purpose_not_allowed", Some(17), "allowed-purposes: PLACEHOLDER_PURPOSE1")]),
        ),
        (
            Probe::new("HEAD", "/admin/").agent("ExampleBot").purposes(&["PLACEHOLDER_PURPOSE1"]),
            (DENY, &[("autoctl.method_not_allowed", Some(16), "allowed-methods: GET")]),
        ),
        (
            Probe::new("HEAD", "/admin/").agent("OtherBot").purposes(&["PLACEHOLDER_PURPOSE1"]),
            (ALLOW, &[("autoctl.allowed", Some(9), methods_1)]),
        ),
        (Probe::new("GET", "/"), (DENY, &[("autoctl.purpose_undeclared", Some(10), purposes_1)])),
        (
            Probe::new("POST", "/").purposes(&["other"]),
            (
                DENY,
                &[
                    ("autoctl.method_not_allowed", Some(9), methods_1),
                    ("autoctl.purpose_not_allowed", Some(10), purposes_1),
                ],
            ),
        ),
    ];
    for (probe, expected) in cases {
        assert_verdict(&state, *probe, *expected, "draft full example");
    }
}

#[test]
fn semantics_d1_robots_style_grouping() {
    let text = "scope: /api/\n\nuser-agent: *\n\nallowed-methods: GET\nallowed-purposes: search\nscope: /api/v2/\nallowed-methods: POST\n";
    let state = parse(text);
    let cases: &[(Probe<'_>, Expected<'_>)] = &[
        (
            Probe::new("GET", "/api/x").purposes(&["search"]),
            (ALLOW, &[("autoctl.allowed", Some(5), "allowed-methods: GET")]),
        ),
        (Probe::new("POST", "/api/v2/x"), (ALLOW, &[("autoctl.allowed", Some(8), "allowed-methods: POST")])),
        (Probe::new("GET", "/api/v2/x"), (DENY, &[("autoctl.method_not_allowed", Some(8), "allowed-methods: POST")])),
    ];
    for (probe, expected) in cases {
        assert_verdict(&state, *probe, *expected, "D1");
    }
}

#[test]
fn semantics_d2_group_without_scope_is_ignored() {
    let state = parse("user-agent: *\nallowed-methods: GET\n");
    assert_verdict(&state, Probe::new("POST", "/"), (NONE, &[("autoctl.no_group", None, NO_GROUP_RULE)]), "D2");
    assert_eq!(codes(&state), vec![(Some(1), "group-without-scope".to_owned())]);
    assert_eq!(state.report().status, PolicyStatus::Valid);
}

#[test]
fn semantics_d3_d4_comments() {
    let text = "<!-- a\nscope: /hidden/\n-->\nScope: /docs/   # trailing\nAllowed-Methods: get, head <!-- x -->\n";
    let state = parse(text);
    let rule = "Allowed-Methods: get, head";
    assert_verdict(&state, Probe::new("HEAD", "/docs/a"), (ALLOW, &[("autoctl.allowed", Some(5), rule)]), "D3");
    assert_verdict(&state, Probe::new("POST", "/hidden/"), (NONE, &[("autoctl.no_group", None, NO_GROUP_RULE)]), "D3");
    let want: Vec<(Option<u32>, String)> = [(1, "html-comment"), (5, "html-comment"), (5, "method-not-uppercase")]
        .iter()
        .map(|(l, c)| (Some(*l), (*c).to_owned()))
        .collect();
    let mut got = codes(&state);
    got.dedup();
    assert_eq!(got, want);
}

#[test]
fn semantics_d5_case() {
    let state = parse("SCOPE: /\nALLOWED-METHODS: Get\nAllowed-Purposes: Search\n");
    let rule = "ALLOWED-METHODS: Get";
    let purposes = "Allowed-Purposes: Search";
    let cases: &[(Probe<'_>, Expected<'_>)] = &[
        (Probe::new("get", "/").purposes(&["Search"]), (ALLOW, &[("autoctl.allowed", Some(2), rule)])),
        (Probe::new("GET", "/").purposes(&["search"]), (DENY, &[("autoctl.purpose_not_allowed", Some(3), purposes)])),
    ];
    for (probe, expected) in cases {
        assert_verdict(&state, *probe, *expected, "D5");
    }
}

#[test]
fn semantics_d6_scope_forms() {
    let cases: &[(&str, Probe<'_>, Expected<'_>)] = &[
        (
            "scope: *\nallowed-methods: GET",
            Probe::new("POST", "/x"),
            (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods: GET")]),
        ),
        (
            "scope: /*.pdf$\nallowed-methods: HEAD",
            Probe::new("GET", "/a.pdf"),
            (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods: HEAD")]),
        ),
        (
            "scope: /*.pdf$\nallowed-methods: HEAD",
            Probe::new("GET", "/a.pdf?x"),
            (NONE, &[("autoctl.no_group", None, NO_GROUP_RULE)]),
        ),
        (
            "scope: /s?q=1\nallowed-methods: GET",
            Probe::new("POST", "/s?q=1&r"),
            (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods: GET")]),
        ),
        (
            "scope: /ツ\nallowed-methods: GET",
            Probe::new("POST", "/%e3%83%84"),
            (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods: GET")]),
        ),
        (
            "scope: example.com/admin\nscope: /\nallowed-methods: GET",
            Probe::new("POST", "/"),
            (NONE, &[("autoctl.no_group", None, NO_GROUP_RULE)]),
        ),
        ("scope:\nallowed-methods: GET", Probe::new("POST", "/"), (NONE, &[("autoctl.no_group", None, NO_GROUP_RULE)])),
    ];
    for (text, probe, expected) in cases {
        assert_verdict(&parse(text), *probe, *expected, text);
    }
    assert_eq!(
        codes(&parse("scope: example.com/admin\nallowed-methods: GET")),
        vec![(Some(1), "scope-not-a-path".to_owned())]
    );
    let empty = codes(&parse("scope:\nallowed-methods: GET"));
    assert_eq!(empty, vec![(Some(1), "empty-scope".to_owned()), (Some(1), "group-without-scope".to_owned())]);
}

#[test]
fn semantics_d7_longest_scope_in_normalised_octets() {
    // "/ツ" is 2 characters but 10 octets once percent-encoded ("/%E3%83%84"), so it beats
    // "/%E3%83" (7 octets), which also matches.
    let text = "scope: /*\nallowed-methods: GET\n\nscope: /ツ\nallowed-methods: POST\n\nscope: /%e3%83\nallowed-methods: PUT\n";
    let state = parse(text);
    let post = (ALLOW, &[("autoctl.allowed", Some(5), "allowed-methods: POST")][..]);
    assert_verdict(&state, Probe::new("POST", "/ツ/x"), post, "D7");
    assert_verdict(&state, Probe::new("POST", "/%e3%83%84"), post, "D7");
    let put = (DENY, &[("autoctl.method_not_allowed", Some(8), "allowed-methods: PUT")][..]);
    assert_verdict(&state, Probe::new("POST", "/%E3%83x"), put, "D7");
}

#[test]
fn semantics_d8_host_specificity() {
    let text = "scope: /\nallowed-methods: GET\n\nhost: *.example.com\nscope: /\nallowed-methods: HEAD\n\nhost: www.example.com\nhost: api.example.com:8443\nscope: /\nallowed-methods: PUT\n";
    let state = parse(text);
    let cases: &[(Probe<'_>, Expected<'_>)] = &[
        (
            Probe::new("PUT", "/").host("www.example.com", 443),
            (ALLOW, &[("autoctl.allowed", Some(11), "allowed-methods: PUT")]),
        ),
        (
            Probe::new("PUT", "/").host("api.example.com", 8443),
            (ALLOW, &[("autoctl.allowed", Some(11), "allowed-methods: PUT")]),
        ),
        (
            Probe::new("PUT", "/").host("api.example.com", 443),
            (DENY, &[("autoctl.method_not_allowed", Some(6), "allowed-methods: HEAD")]),
        ),
        (
            Probe::new("HEAD", "/").host("shop.example.com", 443),
            (ALLOW, &[("autoctl.allowed", Some(6), "allowed-methods: HEAD")]),
        ),
        (
            Probe::new("HEAD", "/").host("example.com", 443),
            (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods: GET")]),
        ),
    ];
    for (probe, expected) in cases {
        assert_verdict(&state, *probe, *expected, "D8");
    }
    let state = parse("host: bücher.example\nscope: /\nallowed-methods: GET\n");
    assert_verdict(
        &state,
        Probe::new("POST", "/").host("xn--bcher-kva.example", 443),
        (NONE, &[("autoctl.no_group", None, NO_GROUP_RULE)]),
        "D8 U-label",
    );
    assert_eq!(codes(&state), vec![(Some(1), "host-not-a-label".to_owned())]);
}

#[test]
fn semantics_d9_user_agent_tokens() {
    let text = "user-agent: FooBot, bar2bot\nuser-agent: BazBot\nscope: /\nallowed-methods: POST\n\nuser-agent: *\nscope: /\nallowed-methods: GET\n\nuser-agent: OnlyBot\nscope: /only/\nallowed-methods: PUT\n";
    let state = parse(text);
    let post = (ALLOW, &[("autoctl.allowed", Some(4), "allowed-methods: POST")][..]);
    let star = (DENY, &[("autoctl.method_not_allowed", Some(8), "allowed-methods: GET")][..]);
    let mut from_header = Probe::new("POST", "/");
    from_header.user_agent = Some("Mozilla/5.0 (compatible; BazBot/0.1; +https://example.com/bot)");
    let cases: &[(Probe<'_>, Expected<'_>)] = &[
        (Probe::new("POST", "/").agent("foobot"), post),
        (Probe::new("POST", "/").agent("BAR2BOT"), post),
        (Probe::new("POST", "/").agent("BazBot"), post),
        (from_header, post),
        (Probe::new("POST", "/").agent("QuxBot"), star),
        (Probe::new("POST", "/"), star),
        (Probe::new("POST", "/only/x").agent("QuxBot"), star),
        (
            Probe::new("PUT", "/only/x").agent("OnlyBot"),
            (ALLOW, &[("autoctl.allowed", Some(12), "allowed-methods: PUT")]),
        ),
    ];
    for (probe, expected) in cases {
        assert_verdict(&state, *probe, *expected, "D9");
    }
}

#[test]
fn semantics_d10_scope_beats_user_agent() {
    let text = "user-agent: ExampleBot\nscope: /\nallowed-methods: GET, HEAD, POST\n\nuser-agent: *\nscope: /admin/\nallowed-methods: GET\n";
    let state = parse(text);
    let admin = (DENY, &[("autoctl.method_not_allowed", Some(7), "allowed-methods: GET")][..]);
    let cases: &[(Probe<'_>, Expected<'_>)] = &[
        (Probe::new("POST", "/admin/users").agent("ExampleBot"), admin),
        (
            Probe::new("POST", "/form").agent("ExampleBot"),
            (ALLOW, &[("autoctl.allowed", Some(3), "allowed-methods: GET, HEAD, POST")]),
        ),
        (Probe::new("POST", "/form").agent("OtherBot"), (NONE, &[("autoctl.no_group", None, NO_GROUP_RULE)])),
        (Probe::new("HEAD", "/admin/").agent("OtherBot"), admin),
    ];
    for (probe, expected) in cases {
        assert_verdict(&state, *probe, *expected, "D10");
    }
}

#[test]
fn semantics_d10_later_group_wins_and_groups_are_not_merged() {
    let state = parse("scope: /\nallowed-methods: GET, POST\n\nscope: /\nallowed-methods: GET\n");
    assert_verdict(
        &state,
        Probe::new("POST", "/x"),
        (DENY, &[("autoctl.method_not_allowed", Some(5), "allowed-methods: GET")]),
        "D10",
    );
    // A more specific group grants what `/` does not: the author's choice (D10).
    let state = parse("scope: /\nallowed-methods: GET\nscope: /api/\nallowed-methods: DELETE\n");
    assert_verdict(
        &state,
        Probe::new("DELETE", "/api/x"),
        (ALLOW, &[("autoctl.allowed", Some(4), "allowed-methods: DELETE")]),
        "D10",
    );
    assert_verdict(
        &state,
        Probe::new("GET", "/api/x"),
        (DENY, &[("autoctl.method_not_allowed", Some(4), "allowed-methods: DELETE")]),
        "D10",
    );
}

#[test]
fn semantics_d12_methods() {
    let cases: &[(&str, Probe<'_>, Expected<'_>)] = &[
        (
            "scope: /\nallowed-methods: GET",
            Probe::new("HEAD", "/"),
            (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods: GET")]),
        ),
        (
            "scope: /\nallowed-methods:",
            Probe::new("GET", "/"),
            (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods:")]),
        ),
        (
            "scope: /\nallowed-methods: QUERY",
            Probe::new("QUERY", "/"),
            (ALLOW, &[("autoctl.allowed", Some(2), "allowed-methods: QUERY")]),
        ),
        (
            "scope: /\nallowed-methods: GET\nallowed-methods: PUT",
            Probe::new("PUT", "/"),
            (ALLOW, &[("autoctl.allowed", Some(3), "allowed-methods: PUT")]),
        ),
        (
            "scope: /\nallowed-methods: GET\nallowed-methods: PUT",
            Probe::new("POST", "/"),
            (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods: GET")]),
        ),
        (
            "scope: /private/\nuser-agent: *",
            Probe::new("GET", "/private/"),
            (DENY, &[("autoctl.no_allowed_methods", Some(1), "scope: /private/")]),
        ),
        (
            "scope: /\nallowed-purposes: search",
            Probe::new("GET", "/").purposes(&["search"]),
            (DENY, &[("autoctl.no_allowed_methods", Some(1), "scope: /")]),
        ),
        (
            "scope: /\nallowed-methods: GET HEAD",
            Probe::new("HEAD", "/"),
            (ALLOW, &[("autoctl.allowed", Some(2), "allowed-methods: GET HEAD")]),
        ),
    ];
    for (text, probe, expected) in cases {
        assert_verdict(&parse(text), *probe, *expected, text);
    }
    assert_eq!(codes(&parse("scope: /\nallowed-methods:")), vec![(Some(2), "empty-allowed-methods".to_owned())]);
    assert_eq!(codes(&parse("scope: /x/")), vec![(Some(1), "group-without-allowed-methods".to_owned())]);
    assert_eq!(codes(&parse("scope: /\nallowed-methods: GET HEAD")), vec![(Some(2), "list-missing-comma".to_owned())]);
    assert_eq!(codes(&parse("scope: /\nallowed-methods: G(ET")), vec![(Some(2), "invalid-method".to_owned())]);
}

#[test]
fn semantics_d13_purposes() {
    let state = parse("scope: /\nallowed-methods: GET, HEAD\nallowed-purposes: search, ai-input\n");
    let line = "allowed-purposes: search, ai-input";
    let allowed = (ALLOW, &[("autoctl.allowed", Some(2), "allowed-methods: GET, HEAD")][..]);
    let not_allowed = (DENY, &[("autoctl.purpose_not_allowed", Some(3), line)][..]);
    let cases: &[(&[&str], Expected<'_>)] = &[
        (&["search"], allowed),
        (&["search", "ai-input"], allowed),
        (&["train-ai"], not_allowed),
        (&["search", "train-ai"], not_allowed),
        (&["Search"], not_allowed),
        (&[], (DENY, &[("autoctl.purpose_undeclared", Some(3), line)])),
    ];
    for (purposes, expected) in cases {
        assert_verdict(&state, Probe::new("GET", "/a").purposes(purposes), *expected, &format!("D13 {purposes:?}"));
    }
    let state = parse("scope: /\nallowed-methods: GET\n");
    let unrestricted = (ALLOW, &[("autoctl.allowed", Some(2), "allowed-methods: GET")][..]);
    assert_verdict(&state, Probe::new("GET", "/").purposes(&["anything"]), unrestricted, "D13 unrestricted");
}

#[test]
fn semantics_d14_control_bytes_reject_the_file() {
    for (body, line) in [
        (&b"scope: /\nallowed-methods: GET, POST\0\n"[..], 2),
        (b"\x01", 1),
        (b"scope: /\r\x0b\r\n", 2),
        (b"a\n\x1b[31m", 2),
    ] {
        let state = from_fetch(&served(body));
        let report = state.report();
        assert_eq!(report.status, PolicyStatus::Malformed, "{body:?}");
        assert_eq!(report.digest, Some(std::sync::Arc::<str>::from(sha256_hex(body))));
        assert_eq!(codes(&state), vec![(Some(line), "control-byte".to_owned())], "{body:?}");
        assert_eq!(report.diagnostics[0].severity, Severity::Error);
        let rule = format!(
            "automation-preferences.txt is rejected: raw control byte on line {line}: only GET, HEAD and OPTIONS are \
             allowed until a good fetch"
        );
        let want = Reason::new(AutoctlCode::Unavailable, rule).at_line(line).with_digest(report.digest);
        assert_eq!(Probe::new("GET", "/").ask(&state), SourceVerdict::with(ALLOW, want.clone()));
        assert_eq!(Probe::new("POST", "/").ask(&state), SourceVerdict::with(DENY, want));
    }
    // HTAB is WS; DEL (0x7F) is not below U+0020.
    let state = parse("scope:\t/\nallowed-methods:\tGET,\tPOST\x7f\n");
    assert_eq!(state.report().status, PolicyStatus::Valid);
    assert_verdict(
        &state,
        Probe::new("POST", "/"),
        (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods:\tGET,\tPOST\x7f")]),
        "D14",
    );
}

/// A fetch outcome, the status it gives, the opinions on GET and POST, and POST's reason
/// (code, rule).
type FetchCase = (FetchOutcome, PolicyStatus, Opinion, Opinion, Option<(&'static str, String)>);

#[test]
fn semantics_d15_fetch_outcomes() {
    let html = Headers::new(vec![("content-type".to_owned(), "Text/HTML; charset=utf-8".to_owned())]);
    let policy = b"scope: /\nallowed-methods: GET\n".to_vec();
    let response = |status, headers: Headers, body: &[u8], over_cap| FetchOutcome::Response {
        status,
        headers,
        body: body.to_vec(),
        over_cap,
    };
    let unavailable = |why: &str| format!("{why}: only GET, HEAD and OPTIONS are allowed until a good fetch");
    let too_large = unavailable("automation-preferences.txt is larger than 500 KiB");
    let big = vec![b'#'; MAX_BYTES + 1];
    let cases: Vec<FetchCase> = vec![
        (response(200, html, &policy, false), PolicyStatus::NotApplicable, NONE, NONE, None),
        (
            response(200, Headers::default(), b"\xEF\xBB\xBF \n<!DOCTYPE html><p>\0", false),
            PolicyStatus::NotApplicable,
            NONE,
            NONE,
            None,
        ),
        (response(200, Headers::default(), b"<HTML><body>", false), PolicyStatus::NotApplicable, NONE, NONE, None),
        (FetchOutcome::not_found(), PolicyStatus::Absent, NONE, NONE, None),
        (response(403, Headers::default(), &policy, false), PolicyStatus::Absent, NONE, NONE, None),
        (response(304, Headers::default(), b"", false), PolicyStatus::Absent, NONE, NONE, None),
        (FetchOutcome::Failed(FetchError::TooManyRedirects), PolicyStatus::Absent, NONE, NONE, None),
        (
            response(503, Headers::default(), b"busy", false),
            PolicyStatus::Absent,
            ALLOW,
            DENY,
            Some(("autoctl.unavailable", unavailable("automation-preferences.txt answered 503"))),
        ),
        (
            FetchOutcome::Failed(FetchError::Timeout),
            PolicyStatus::Absent,
            ALLOW,
            DENY,
            Some(("autoctl.unavailable", unavailable("fetching automation-preferences.txt failed: timed out"))),
        ),
        (
            FetchOutcome::Failed(FetchError::Network("connection refused".to_owned())),
            PolicyStatus::Absent,
            ALLOW,
            DENY,
            Some((
                "autoctl.unavailable",
                unavailable("fetching automation-preferences.txt failed: network error: connection refused"),
            )),
        ),
        (
            response(200, text_plain(), &policy, true),
            PolicyStatus::Malformed,
            ALLOW,
            DENY,
            Some(("autoctl.unavailable", too_large.clone())),
        ),
        (
            response(200, text_plain(), &big, false),
            PolicyStatus::Malformed,
            ALLOW,
            DENY,
            Some(("autoctl.unavailable", too_large)),
        ),
        (
            response(204, text_plain(), b"", false),
            PolicyStatus::Valid,
            NONE,
            NONE,
            Some(("autoctl.no_group", NO_GROUP_RULE.to_owned())),
        ),
    ];
    for (outcome, status, get, post, post_reason) in cases {
        let state = from_fetch(&outcome);
        let case = format!("{outcome:?}").chars().take(120).collect::<String>();
        assert_eq!(state.report().status, status, "{case}");
        assert_eq!(Probe::new("GET", "/").ask(&state).opinion, get, "{case}");
        let verdict = Probe::new("POST", "/").ask(&state);
        assert_eq!(verdict.opinion, post, "{case}");
        let got = verdict.reasons.first().map(|r| (r.code.as_str(), r.rule.to_string()));
        assert_eq!(got, post_reason, "{case}");
    }
}

#[test]
fn semantics_d17_unknown_directives_are_listed_not_enforced() {
    let state = parse(
        "scope: /\nallowed-methods: GET\nrate-limit: 10/minute\nAutomation-Technologies: headless\nnot a directive\n",
    );
    assert_verdict(
        &state,
        Probe::new("GET", "/"),
        (ALLOW, &[("autoctl.allowed", Some(2), "allowed-methods: GET")]),
        "D17",
    );
    let want: Vec<(Option<u32>, String)> =
        [(3, "unknown-directive:rate-limit"), (4, "unknown-directive:automation-technologies"), (5, "missing-colon")]
            .iter()
            .map(|(l, c)| (Some(*l), (*c).to_owned()))
            .collect();
    assert_eq!(codes(&state), want);
    assert!(state.report().diagnostics.iter().all(|d| d.severity == Severity::Warning));
}

#[test]
fn semantics_d19_line_endings_and_bom_give_the_same_verdicts() {
    let lf = "# c\nscope: /\nallowed-methods: GET\n";
    let variants = [lf.to_owned(), lf.replace('\n', "\r\n"), lf.replace('\n', "\r"), format!("\u{feff}{lf}")];
    for text in &variants {
        let state = parse(text);
        assert_eq!(
            state.report().digest,
            Some(std::sync::Arc::<str>::from(sha256_hex(text.as_bytes()))),
            "the digest covers the bytes served"
        );
        assert_eq!(codes(&state), vec![], "{text:?}");
        let want = Reason::new(AutoctlCode::MethodNotAllowed, "allowed-methods: GET")
            .at_line(3)
            .with_digest(Some(std::sync::Arc::<str>::from(sha256_hex(text.as_bytes()))));
        assert_eq!(Probe::new("PUT", "/").ask(&state), SourceVerdict::with(DENY, want), "{text:?}");
    }
}

#[test]
fn hostile_input_is_bounded() {
    let huge_line = format!("scope: /{}\nallowed-methods: GET", "a".repeat(MAX_BYTES - 40));
    let many_warnings = "x\n".repeat(MAX_BYTES / 2);
    let many_groups = "scope: /\nallowed-methods: GET\n".repeat(MAX_BYTES / 30);
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"\xEF\xBB\xBF".to_vec(),
        b"\0\0\0".to_vec(),
        (0..=255u8).collect(),
        b"\xFF\xFEs\0c\0o\0p\0e\0".to_vec(),
        b"<!--".to_vec(),
        b"\r\r\r\n\n".to_vec(),
        huge_line.into_bytes(),
        many_warnings.into_bytes(),
        many_groups.into_bytes(),
    ];
    for body in &bodies {
        let state = from_fetch(&served(body));
        let report = state.report();
        assert!(report.diagnostics.len() <= REPORTED_FINDINGS + 1, "{} findings", report.diagnostics.len());
        assert_eq!(report.digest, Some(std::sync::Arc::<str>::from(sha256_hex(body))));
        let _ = Probe::new("DELETE", "/a?b").agent("bot").ask(&state);
        // The report keeps the first findings lint shows, then says how many it left out.
        let all = lint(body);
        match report.diagnostics.split_last() {
            Some((note, kept)) if note.code == "too-many-findings" => {
                assert_eq!(&all[..kept.len()], kept);
                assert!(all.len() > kept.len(), "lint keeps every finding");
            }
            _ => assert_eq!(all, report.diagnostics),
        }
    }
    let capped = from_fetch(&served(&bodies[8])).report().diagnostics;
    assert_eq!(capped.last().map(|d| d.code.as_str()), Some("too-many-findings"));
    assert_eq!(lint(&bodies[8]).len(), MAX_BYTES / 2, "lint keeps every finding");
    let invalid = parse_bytes(b"scope: /a\xFF\nallowed-methods: GET\n");
    assert_eq!(codes(&invalid), vec![(Some(1), "invalid-utf8".to_owned())]);
    assert_verdict(
        &invalid,
        Probe::new("POST", "/a%ff"),
        (DENY, &[("autoctl.method_not_allowed", Some(2), "allowed-methods: GET")]),
        "invalid UTF-8 scope",
    );
    let unclosed = parse("scope: /\n<!-- never closed\nallowed-methods: GET\n");
    assert_verdict(
        &unclosed,
        Probe::new("GET", "/"),
        (DENY, &[("autoctl.no_allowed_methods", Some(1), "scope: /")]),
        "unclosed comment",
    );
    assert_eq!(
        codes(&unclosed),
        vec![
            (Some(2), "html-comment".to_owned()),
            (Some(2), "unclosed-html-comment".to_owned()),
            (Some(1), "group-without-allowed-methods".to_owned())
        ]
    );
}

fn parse_bytes(body: &[u8]) -> AutoctlState {
    from_fetch(&served(body))
}

#[test]
fn content_type_other_than_text_plain_is_parsed_with_a_warning() {
    let headers = Headers::new(vec![("Content-Type".to_owned(), "application/octet-stream".to_owned())]);
    let state =
        from_fetch(&FetchOutcome::Response { status: 200, headers, body: b"scope: /\n".to_vec(), over_cap: false });
    assert_eq!(state.report().status, PolicyStatus::Valid);
    assert_eq!(
        codes(&state),
        vec![(None, "content-type".to_owned()), (Some(1), "group-without-allowed-methods".to_owned())]
    );
}

/// The proposed corpus and the draft's examples, in process: every check through
/// `from_fetch` + `evaluate` + `report`, as `agentgate explain` runs them.
#[test]
fn conformance_corpus() {
    let path = corpus("autoctl").join("proposed/cases.json");
    let doc = cases(&path);
    let cases = doc["cases"].as_array().into_iter().chain(doc["upstream_examples"].as_array()).flatten();
    let (mut checks, mut failures) = (0, Vec::new());
    for case in cases {
        let file = case["file"].as_str().unwrap_or_else(|| panic!("{}: a case without 'file'", path.display()));
        let body = corpus_file(&format!("proposed/{file}"));
        let mut headers = Headers::default();
        if let Some(content_type) = case["content_type"].as_str() {
            headers.push("Content-Type", content_type);
        }
        let state = from_fetch(&FetchOutcome::Response { status: 200, headers, body, over_cap: false });
        let want_status = match case["file_status"].as_str() {
            Some("rejected") => PolicyStatus::Malformed,
            Some(other) => panic!("{file}: file_status {other:?} not handled by this test"),
            None => PolicyStatus::Valid,
        };
        if state.report().status != want_status {
            failures.push(format!("{file}: status {:?}, want {want_status:?}", state.report().status));
        }
        for (i, check) in case["checks"].as_array().into_iter().flatten().enumerate() {
            checks += 1;
            let purposes: Vec<&str> =
                check["purposes"].as_array().into_iter().flatten().filter_map(|p| p.as_str()).collect();
            let host = check["request_host"].as_str().or(case["host"].as_str()).unwrap_or("example.com");
            let mut probe =
                Probe::new(check["method"].as_str().unwrap_or("GET"), check["path"].as_str().unwrap_or("/"))
                    .host(host, 443)
                    .purposes(&purposes);
            probe.token = check["agent"].as_str().filter(|a| *a != "*");
            let verdict = probe.ask(&state);
            let allowed = verdict.opinion != Opinion::Deny;
            if Some(allowed) != check["allow"].as_bool() {
                failures.push(format!("{file} check {i}: allowed={allowed}, reasons {:?}", verdict.reasons));
            }
            if !allowed && verdict.reasons.is_empty() {
                failures.push(format!("{file} check {i}: a deny without a reason"));
            }
        }
    }
    assert_eq!(checks, 37, "the corpus README counts 37 checks");
    assert!(failures.is_empty(), "{} of {checks} checks failed:\n{}", failures.len(), failures.join("\n"));
}

/// Lines that look like this format, so the property test reaches the grouping and the
/// matcher, not only the first `missing-colon`.
fn directive_like() -> impl Strategy<Value = String> {
    let field = prop::sample::select(vec![
        "scope",
        "Scope",
        "host",
        "user-agent",
        "allowed-methods",
        "allowed-purposes",
        "x-ext",
        "",
        "<!--",
        "-->",
    ]);
    let value = "[ -~\t]{0,12}|\\*|/[a-z*$%?]{0,6}|[*.a-z:\\[\\]0-9]{0,10}|GET, ?HEAD|\u{fffd}ツ";
    let eol = prop::sample::select(vec!["\n", "\r\n", "\r", " # c\n", " <!-- c -->\n", "\n\n"]);
    prop::collection::vec((field, value, eol), 0..24)
        .prop_map(|lines| lines.into_iter().map(|(f, v, e)| format!("{f}:{v}{e}")).collect())
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..2048), method in "[A-Za-z]{0,7}", path in "/[ -~]{0,24}") {
        let state = from_fetch(&served(&body));
        let report = state.report();
        prop_assert_eq!(report.digest, Some(std::sync::Arc::<str>::from(sha256_hex(&body))));
        let _ = Probe::new(&method, &path).agent("bot").ask(&state);
        prop_assert_eq!(lint(&body), report.diagnostics);
    }

    #[test]
    fn directive_like_files_never_panic(text in directive_like(), method in "GET|HEAD|POST|get", path in "/[a-z./%?]{0,12}") {
        let state = parse(&text);
        prop_assert_eq!(state.report().status, PolicyStatus::Valid);
        let verdict = Probe::new(&method, &path).agent("bot").purposes(&["search"]).ask(&state);
        prop_assert!(verdict.opinion != Opinion::Deny || !verdict.reasons.is_empty());
        prop_assert!(verdict.reasons.iter().all(|r| r.line.is_some() || r.code == "autoctl.no_group"));
    }
}

#[test]
fn semantics_r9_scopes_select_as_written_and_decoded() {
    // A scope that escapes `~` selects its group for the plain spelling too.
    let escaped =
        "user-agent: *\nscope: /\nallowed-methods: GET, POST\n\nuser-agent: *\nscope: /%7Ejoe/\nallowed-methods: GET\n";
    let state = parse(escaped);
    let not_post: Expected<'_> = (DENY, &[("autoctl.method_not_allowed", Some(7), "allowed-methods: GET")]);
    assert_verdict(&state, Probe::new("POST", "/~joe/x"), not_post, "decoded scope");
    assert_verdict(&state, Probe::new("POST", "/%7Ejoe/x"), not_post, "written scope");
    let get: Expected<'_> = (ALLOW, &[("autoctl.allowed", Some(3), "allowed-methods: GET, POST")]);
    assert_verdict(&state, Probe::new("GET", "/~joe/x"), get, "both allow: the written reading's reason");
    // A decoded scope never widens: as written, only the first group scopes `/~joe/`.
    let plain_first = "user-agent: *\nscope: /~joe/\nallowed-methods: GET\n\nuser-agent: *\nscope: /%7Ejoe/\nallowed-methods: GET, POST\n";
    let state = parse(plain_first);
    let not_post: Expected<'_> = (DENY, &[("autoctl.method_not_allowed", Some(3), "allowed-methods: GET")]);
    assert_verdict(&state, Probe::new("POST", "/~joe/x"), not_post, "written reading");
}

#[test]
fn d15_autoctl_failure_replaces_a_good_copy() {
    let good = previous(from_fetch(&served(b"User-agent: *\nAllowed-methods: GET\n")), MINUTE, HOUR);
    let failed = FetchOutcome::Response { status: 503, headers: Headers::default(), body: Vec::new(), over_cap: false };
    let refreshed = refresh::<Autoctl>(good, from_fetch(&failed), 48 * HOUR);
    assert!(!refreshed.kept_stale);
    assert_eq!(refreshed.ttl, MAX_TTL);
}
