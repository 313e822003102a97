//! robots.txt tests: the conformance corpora in process (with the known differences), RFC
//! 9309 and SEMANTICS tables asserting opinion and reason, fetch outcomes, lint, hostile
//! input and a no-panic property.

use proptest::prelude::*;
use proptest::sample::select;

use super::*;
use crate::policy::test_support::{HOUR, MINUTE, corpus, previous, read, refresh};
use crate::policy::text::{REPORTED_FINDINGS, sha256_hex};
use crate::policy::{FetchError, Headers, MAX_TTL, Severity};

const KNOWN_DIFFERENCES: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/robots-known-differences.txt"));

/// A GET for `path_and_query` by an agent with a configured product token.
fn view<'a>(headers: &'a Headers, token: Option<&'a str>, path_and_query: &'a str) -> RequestView<'a> {
    RequestView {
        method: "GET",
        scheme: "https",
        host: "example.com",
        port: 443,
        path_and_query,
        product_token: token,
        user_agent: None,
        agent_id: "test",
        trust_level: 0,
        purposes: &[],
        headers,
    }
}

fn verdict(body: &str, token: &str, path: &str) -> SourceVerdict {
    let headers = Headers::default();
    RobotsState::parse(body.as_bytes()).evaluate(&view(&headers, Some(token), path))
}

/// The evaluator's decision with only this robots.txt in force, as explain and the proxy
/// take it: every spelling of the path is decided too (SEMANTICS R9).
fn decided(body: &str, token: &str, path: &str) -> crate::policy::Decision {
    let absent = |_: &str, _: usize| Ok::<_, std::convert::Infallible>(crate::policy::FetchOutcome::not_found());
    let Ok(mut policies) = crate::policy::Policies::read("", absent);
    policies.robots = RobotsState::parse(body.as_bytes());
    crate::policy::evaluate(&policies, &view(&Headers::default(), Some(token), path))
}

/// A reason as (code, line, rule), the parts the tables compare.
type ReasonParts = (String, Option<u32>, String);

/// An expected reason: code, line, rule.
type Expected = (&'static str, u32, &'static str);

/// Opinion, then (code, line, rule) of each reason.
fn summary(v: &SourceVerdict) -> (Opinion, Vec<ReasonParts>) {
    assert!(v.reasons.iter().all(|r| r.source == Source::Robots), "{v:?}");
    (v.opinion, v.reasons.iter().map(|r| (r.code.to_string(), r.line, r.rule.to_string())).collect())
}

fn reasons(list: &[Expected]) -> Vec<ReasonParts> {
    list.iter().map(|(code, line, rule)| (code.to_string(), Some(*line), rule.to_string())).collect()
}

// ---------------------------------------------------------------------------------------
// Conformance corpora, run in process the way `agentgate explain` runs them.

/// `path_and_query` as explain derives it: everything after the authority up to the
/// fragment, `/` when empty, a leading `/` added before a bare query.
fn explain_path(url: &str) -> String {
    let rest = match url.split_once("://") {
        Some((_, after)) => after.find(['/', '?', '#']).map_or("", |i| &after[i..]),
        None => url,
    };
    let rest = rest.split('#').next().unwrap_or("");
    if rest.starts_with('/') { rest.to_string() } else { format!("/{rest}") }
}

fn known_differences() -> Vec<(&'static str, &'static str)> {
    KNOWN_DIFFERENCES
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once('\t').unwrap_or_else(|| panic!("known-differences line without a TAB: {l:?}")))
        .collect()
}

#[test]
fn conformance_google_and_rfc9309_corpora() {
    let dir = corpus("robots");
    let known = known_differences();
    let mut seen_known = Vec::new();
    let mut failures = Vec::new();
    let mut passed = 0;
    for file in ["google.jsonl", "rfc9309.jsonl"] {
        let bytes = read(&dir.join(file));
        let text = std::str::from_utf8(&bytes).expect("google.jsonl and rfc9309.jsonl are UTF-8");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let case: serde_json::Value = serde_json::from_str(line).expect("corpus lines are JSON");
            let id = case["id"].as_str().expect("every case has an id");
            let body = case["robots"].as_str().expect("google.jsonl and rfc9309.jsonl bodies are text");
            let token = case["user_agent"].as_str().expect("every case has a user agent");
            let url = case["url"].as_str().expect("every case has a url");
            let expected = case["allowed"].as_bool().expect("every case has an expectation");
            // Through the evaluator, as explain runs it: it also decides equivalent spellings.
            let got = decided(body, token, &explain_path(url));
            let allowed = got.is_allowed();
            match known.iter().find(|(k, _)| *k == id) {
                Some(_) => {
                    seen_known.push(id.to_string());
                    if allowed == expected {
                        failures.push(format!("{id}: listed as a known difference but passes; remove it"));
                    }
                }
                None if allowed == expected => passed += 1,
                None => failures.push(format!(
                    "{file} {id}: expected allowed={expected}, got {:?} {:?}\n  ua={token:?} url={url:?} note={}",
                    got.outcome, got.reasons, case["note"]
                )),
            }
        }
    }
    for (id, _) in &known {
        if !seen_known.iter().any(|s| s == id) {
            failures.push(format!("{id}: listed as a known difference but no such case"));
        }
    }
    assert!(failures.is_empty(), "{} passed, {} failed:\n{}", passed, failures.len(), failures.join("\n"));
    assert_eq!(passed + known.len(), 145 + 49, "every corpus case ran");
}

#[test]
fn explain_path_matches_the_integrators_rule() {
    assert_eq!(explain_path(""), "/");
    assert_eq!(explain_path("http://foo.bar"), "/");
    assert_eq!(explain_path("http://foo.bar/x/y?a=b#frag"), "/x/y?a=b");
    assert_eq!(explain_path("http://foo.bar?q"), "/?q");
}

// ---------------------------------------------------------------------------------------
// RFC 9309 and SEMANTICS: opinion and reasons.

const SHOP: &str = "\
# shop robots.txt
User-agent: *
Disallow: /private
Allow: /private/press

User-agent: FooBot
User-agent: BarBot
Disallow: /
Allow: /public$
Allow: /*.css
Disallow: /*.css$

User-agent: foobot
Disallow: /cart
";

#[test]
fn rfc9309_longest_match_cites_rule_and_selecting_group() {
    let cases: &[(&str, &str, Opinion, &[Expected])] = &[
        (
            "unknownbot",
            "/private/x",
            Opinion::Deny,
            &[("robots.disallow", 3, "Disallow: /private"), ("robots.group", 2, "User-agent: *")],
        ),
        (
            "unknownbot",
            "/private/press/1",
            Opinion::Allow,
            &[("robots.allow", 4, "Allow: /private/press"), ("robots.group", 2, "User-agent: *")],
        ),
        (
            "FooBot",
            "/public",
            Opinion::Allow,
            &[("robots.allow", 9, "Allow: /public$"), ("robots.group", 6, "User-agent: FooBot")],
        ),
        (
            "FooBot",
            "/public/x",
            Opinion::Deny,
            &[("robots.disallow", 8, "Disallow: /"), ("robots.group", 6, "User-agent: FooBot")],
        ),
        (
            "BarBot",
            "/public/x",
            Opinion::Deny,
            &[("robots.disallow", 8, "Disallow: /"), ("robots.group", 7, "User-agent: BarBot")],
        ),
        // Merged groups (§2.2.1): the foobot group's rule wins for FooBot and is cited
        // with its own user-agent line; BarBot does not get it.
        (
            "FooBot",
            "/cart/1",
            Opinion::Deny,
            &[("robots.disallow", 14, "Disallow: /cart"), ("robots.group", 13, "User-agent: foobot")],
        ),
        (
            "barbot",
            "/cart/1",
            Opinion::Deny,
            &[("robots.disallow", 8, "Disallow: /"), ("robots.group", 7, "User-agent: BarBot")],
        ),
        // `/*.css` and `/*.css$` are different lengths: the anchored one is longer.
        (
            "FooBot",
            "/a.css",
            Opinion::Deny,
            &[("robots.disallow", 11, "Disallow: /*.css$"), ("robots.group", 6, "User-agent: FooBot")],
        ),
        (
            "FooBot",
            "/a.css?v=1",
            Opinion::Allow,
            &[("robots.allow", 10, "Allow: /*.css"), ("robots.group", 6, "User-agent: FooBot")],
        ),
    ];
    for (token, path, opinion, expected) in cases {
        assert_eq!(summary(&verdict(SHOP, token, path)), (*opinion, reasons(expected)), "{token} {path}");
    }
}

#[test]
fn rfc9309_allow_wins_an_equal_length_tie() {
    let body = "User-agent: *\nDisallow: /page\nAllow: /page\nDisallow: /*ge\nAllow: /p*e\n";
    let v = verdict(body, "x", "/page");
    assert_eq!(
        summary(&v),
        (Opinion::Allow, reasons(&[("robots.allow", 3, "Allow: /page"), ("robots.group", 1, "User-agent: *")]))
    );
    let v = verdict(body, "x", "/pxge");
    assert_eq!(v.opinion, Opinion::Allow, "/p*e and /*ge are both 4 octets: allow wins");
    assert_eq!(v.reasons[0].line, Some(5));
}

#[test]
fn rfc9309_no_matching_rule_or_group_is_no_opinion() {
    let cases = [
        ("User-agent: *\nDisallow: /private\n", "/public"),
        ("User-agent: FooBot\nDisallow: /\n", "/x"),
        ("", "/x"),
        ("Disallow: /\n", "/x"),
        ("User-agent: *\nDisallow:\n", "/x"),
        ("User-agent: *\n", "/x"),
    ];
    for (body, path) in cases {
        assert_eq!(verdict(body, "otherbot", path), SourceVerdict::no_opinion(), "{body:?} {path}");
    }
}

#[test]
fn rfc9309_named_group_replaces_star_group() {
    let body = "User-agent: *\nDisallow: /\n\nUser-agent: FooBot\nDisallow: /admin\n";
    assert_eq!(verdict(body, "foobot", "/x"), SourceVerdict::no_opinion());
    assert_eq!(verdict(body, "foobot", "/admin").reasons[0].line, Some(5));
    assert_eq!(verdict(body, "otherbot", "/x").opinion, Opinion::Deny);
}

#[test]
fn rfc9309_several_star_groups_are_merged() {
    let body = "User-agent: *\nDisallow: /a\nUser-agent: FooBot\nAllow: /\nUser-agent: *\nDisallow: /b\n";
    assert_eq!(verdict(body, "x", "/b/1").reasons[0].line, Some(6));
    assert_eq!(verdict(body, "x", "/a/1").reasons[0].line, Some(2));
    assert_eq!(verdict(body, "foobot", "/b/1").opinion, Opinion::Allow);
}

#[test]
fn rfc9309_percent_encoding_is_normalised_on_both_sides() {
    let body = "User-agent: *\nDisallow: /ツ\nDisallow: /%e2%82%ac\nAllow: /%62\n";
    for path in ["/ツ", "/%E3%83%84/x", "/%e3%83%84", "/€", "/%E2%82%AC"] {
        assert_eq!(verdict(body, "x", path).opinion, Opinion::Deny, "{path}");
    }
    assert_eq!(verdict(body, "x", "/b").opinion, Opinion::NoOpinion, "%62 is not decoded (RFC 9309 §2.2.2 table)");
    assert_eq!(verdict(body, "x", "/%62").opinion, Opinion::Allow);
}

// ---------------------------------------------------------------------------------------
// SEMANTICS R9: no spelling unlocks a path, and the two readings of the patterns.

#[test]
fn escapes_never_unlock_a_disallowed_path() {
    let all_posts = "User-agent: *\nDisallow: /*/all_posts$\n";
    let joe = "User-agent: *\nDisallow: /%7Ejoe/\n";
    let private = "User-agent: *\nDisallow: /private\n";
    let cases: &[(&str, &str, &str)] = &[
        (all_posts, "//all_posts", "Disallow: /*/all_posts$"),
        (all_posts, "//all%5Fposts", "Disallow: /*/all_posts$"),
        (all_posts, "//all%5fposts", "Disallow: /*/all_posts$"),
        (all_posts, "/%2Fall_posts", "Disallow: /*/all_posts$"),
        (joe, "/~joe/x", "Disallow: /%7Ejoe/"),
        (joe, "/%7ejoe/x", "Disallow: /%7Ejoe/"),
        (joe, "//~joe/", "Disallow: /%7Ejoe/"),
        (private, "/%2fprivate", "Disallow: /private"),
        (private, "/%2Fprivate", "Disallow: /private"),
        (private, "/%2F%70rivate/x?y=1", "Disallow: /private"),
        (private, "/a%2F..%2Fprivate", "Disallow: /private"),
    ];
    for (body, path, rule) in cases {
        let d = decided(body, "FooBot", path);
        assert_eq!(d.outcome, crate::policy::Outcome::Deny, "{path} against {rule}");
        let got: Vec<ReasonParts> =
            d.reasons.iter().map(|r| (r.code.to_string(), r.line, r.rule.to_string())).collect();
        let want = reasons(&[("robots.disallow", 2, rule), ("robots.group", 1, "User-agent: *")]);
        assert_eq!(got, want, "{path}: the file, line and rule as written");
    }
    // `%2F` is read as `/` in the path only: a query is data.
    let star = "User-agent: *\nDisallow: /*/private\n";
    assert!(decided(star, "FooBot", "/search?q=%2Fprivate").is_allowed());
    assert!(!decided(star, "FooBot", "/search/%2Fprivate").is_allowed());
    assert!(decided(all_posts, "FooBot", "//all%5Fposts/more").is_allowed(), "the anchor still holds");
}

#[test]
fn semantics_r9_a_decoded_allow_never_widens_what_the_written_one_grants() {
    // Each reading is whole: in the decoded one every pattern is decoded and its length
    // counted decoded; the stricter reading wins, the written one on a tie (docs/robots.md).
    let escaped_allow = "User-agent: *\nDisallow: /\nAllow: /%7Ejoe/\n";
    let plain_disallow = "User-agent: *\nDisallow: /~joe/\nAllow: /%7Ejoe/pub\n";
    let escaped_disallow = "User-agent: *\nDisallow: /%7Ejoe/\nAllow: /~joe/pub\n";
    let both_escaped = "User-agent: *\nDisallow: /%7Ea/\nAllow: /%7Ea/b\n";
    let tie = "User-agent: *\nDisallow: /%7Ea\nAllow: /~a\n";
    let cases: &[(&str, &str, Opinion, Option<u32>)] = &[
        // The written Allow grants `/%7Ejoe/…` only; decoded, it does not open `/~joe/`.
        (escaped_allow, "/~joe/x", Opinion::Deny, Some(2)),
        (escaped_allow, "/%7Ejoe/x", Opinion::Allow, Some(3)),
        // Decoded, the Allow (10 octets) would beat the Disallow (6); as written it does not
        // match, so it does not beat it.
        (plain_disallow, "/~joe/pub", Opinion::Deny, Some(2)),
        // The decoded Disallow stops `/~joe/`, and the longer plain Allow still wins below it.
        (escaped_disallow, "/~joe/x", Opinion::Deny, Some(2)),
        (escaped_disallow, "/~joe/pub/x", Opinion::Allow, Some(3)),
        // Escaped alike, the file reads decoded as it reads written: the decoded reading
        // allows `/~a/b`, about which the written file says nothing (no opinion wins the tie).
        (both_escaped, "/~a/b", Opinion::NoOpinion, None),
        (both_escaped, "/~a/c", Opinion::Deny, Some(2)),
        (tie, "/~a", Opinion::Allow, Some(3)),
    ];
    for (body, path, opinion, line) in cases {
        let v = verdict(body, "x", path);
        assert_eq!((v.opinion, v.reasons.first().and_then(|r| r.line)), (*opinion, *line), "{body:?} {path}");
    }
    // The whole evaluator also decides `/%7Ejoe/x` as `/~joe/x`, which the file refuses.
    assert!(!decided(escaped_allow, "x", "/%7Ejoe/x").is_allowed());
    assert!(decided(both_escaped, "x", "/%7Ea/b").is_allowed());
}

#[test]
fn semantics_r9_decoded_rules_cost_nothing_without_an_escape() {
    let plain = RobotsState::parse(b"User-agent: *\nDisallow: /private\nAllow: /%2Fa\nAllow: /%E3%83%84\n");
    let Kind::Parsed(file) = &plain.kind else { panic!("parsed") };
    assert!(!file.has_decoded, "reserved and non-ASCII escapes are no other spelling: one reading");
    let escaped = RobotsState::parse(b"User-agent: *\nDisallow: /%7Ejoe/\n");
    let Kind::Parsed(file) = &escaped.kind else { panic!("parsed") };
    assert!(file.has_decoded);
}

#[test]
fn semantics_x1_a_disallow_denies_every_method() {
    let headers = Headers::default();
    let state = RobotsState::parse(b"User-agent: *\nDisallow: /api\nAllow: /api/public\n");
    for method in ["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH", "TRACE"] {
        let mut req = view(&headers, None, "/api/x");
        req.method = method;
        let v = state.evaluate(&req);
        assert_eq!((v.opinion, v.reasons[0].code.as_str()), (Opinion::Deny, "robots.disallow"), "{method}");
        req.path_and_query = "/api/public/1";
        assert_eq!(state.evaluate(&req).opinion, Opinion::Allow, "{method}");
    }
}

#[test]
fn semantics_x2_product_name_from_the_user_agent_header() {
    let headers = Headers::default();
    let state = RobotsState::parse(b"User-agent: *\nDisallow: /\n\nUser-agent: ExampleBot\nDisallow: /private\n");
    let mut req = view(&headers, None, "/x");
    req.user_agent = Some("Mozilla/5.0 (compatible; ExampleBot/0.1; +https://example.com/bot)");
    assert_eq!(state.evaluate(&req), SourceVerdict::no_opinion());
    req.path_and_query = "/private/1";
    assert_eq!(
        summary(&state.evaluate(&req)),
        (
            Opinion::Deny,
            reasons(&[("robots.disallow", 5, "Disallow: /private"), ("robots.group", 4, "User-agent: ExampleBot")])
        )
    );
    // A configured product token wins over the header.
    req.product_token = Some("OtherBot");
    assert_eq!(&*state.evaluate(&req).reasons[1].rule, "User-agent: *");
    // No token and no header: the `*` group.
    req.product_token = None;
    req.user_agent = None;
    assert_eq!(state.evaluate(&req).reasons[0].line, Some(2));
}

#[test]
fn reasons_carry_the_digest_of_the_bytes_served() {
    let body = b"\xEF\xBB\xBFUser-agent: *\r\nDisallow: /x\r\n";
    let digest = sha256_hex(body);
    let headers = Headers::default();
    let state = RobotsState::parse(body);
    let v = state.evaluate(&view(&headers, Some("a"), "/x"));
    assert_eq!(v.reasons.len(), 2);
    assert!(v.reasons.iter().all(|r| r.digest.as_deref() == Some(digest.as_str())));
    assert_eq!(
        state.report(),
        PolicyReport {
            status: PolicyStatus::Valid,
            digest: Some(std::sync::Arc::<str>::from(digest)),
            diagnostics: vec![]
        }
    );
}

// ---------------------------------------------------------------------------------------
// Fetch outcomes (RFC 9309 §2.3.1).

fn response(status: u16, body: &[u8]) -> FetchOutcome {
    FetchOutcome::Response { status, headers: Headers::default(), body: body.to_vec(), over_cap: false }
}

#[test]
fn rfc9309_fetch_outcomes() {
    let headers = Headers::default();
    let req = view(&headers, Some("FooBot"), "/anything");
    let cases: &[(FetchOutcome, Opinion, Option<&str>, &str, bool)] = &[
        (response(200, b"User-agent: *\nDisallow: /\n"), Opinion::Deny, Some("robots.disallow"), "Disallow: /", false),
        (response(204, b""), Opinion::NoOpinion, None, "", false),
        (FetchOutcome::not_found(), Opinion::NoOpinion, Some("robots.unavailable"), "answered 404", false),
        (response(401, b"no"), Opinion::NoOpinion, Some("robots.unavailable"), "answered 401", false),
        (
            response(403, b"User-agent: *\nDisallow: /\n"),
            Opinion::NoOpinion,
            Some("robots.unavailable"),
            "answered 403",
            false,
        ),
        (response(500, b""), Opinion::Deny, Some("robots.unreachable"), "answered 500", true),
        (response(503, b"User-agent: *\nAllow: /\n"), Opinion::Deny, Some("robots.unreachable"), "answered 503", true),
        (response(302, b""), Opinion::Deny, Some("robots.unreachable"), "answered 302", true),
        (FetchOutcome::Failed(FetchError::Timeout), Opinion::Deny, Some("robots.unreachable"), "(timed out)", true),
        (
            FetchOutcome::Failed(FetchError::Network("connection refused".into())),
            Opinion::Deny,
            Some("robots.unreachable"),
            "(network error: connection refused)",
            true,
        ),
        (
            FetchOutcome::Failed(FetchError::TooManyRedirects),
            Opinion::Deny,
            Some("robots.unreachable"),
            "(too many redirects)",
            true,
        ),
    ];
    for (outcome, opinion, code, rule_part, unreachable) in cases {
        let state = from_fetch(outcome);
        let v = state.evaluate(&req);
        assert_eq!(v.opinion, *opinion, "{outcome:?}");
        assert_eq!(v.reasons.first().map(|r| r.code.as_str()), *code, "{outcome:?}");
        if let Some(reason) = v.reasons.first() {
            assert!(reason.rule.contains(rule_part), "{outcome:?}: {}", reason.rule);
            assert_eq!(reason.source, Source::Robots);
        }
        assert_eq!(state.is_unreachable(), *unreachable, "{outcome:?}");
    }
}

#[test]
fn rfc9309_reports_per_fetch_outcome() {
    assert_eq!(from_fetch(&FetchOutcome::not_found()).report(), PolicyReport::absent());
    let report = from_fetch(&response(503, b"")).report();
    assert_eq!((report.status, report.digest), (PolicyStatus::Absent, None));
    assert_eq!(
        report.diagnostics.iter().map(|d| (d.severity, d.code.as_str())).collect::<Vec<_>>(),
        [(Severity::Error, "unreachable")]
    );
    assert!(report.diagnostics[0].message.contains("answered 503"));
}

#[test]
fn html_is_parsed_with_a_warning() {
    let mut headers = Headers::default();
    headers.push("Content-Type", "text/html; charset=utf-8");
    let outcome = FetchOutcome::Response {
        status: 200,
        headers,
        body: b"<html>\nUser-agent: *\nDisallow: /x\n</html>\n".to_vec(),
        over_cap: false,
    };
    let state = from_fetch(&outcome);
    let report = state.report();
    assert_eq!(report.status, PolicyStatus::Valid);
    assert_eq!(report.diagnostics[0].code, "html-content-type");
    let h = Headers::default();
    assert_eq!(state.evaluate(&view(&h, None, "/x")).reasons[0].line, Some(3));
}

#[test]
fn rfc9309_parse_cap_ignores_the_rest_and_the_cut_line() {
    // The cap falls inside `Disallow: /secret`: that half line must not become `/se…`.
    let mut body = b"User-agent: *\nDisallow: /a\n".to_vec();
    let filler = format!("# {}\n", "x".repeat(1000));
    while body.len() + 2 * filler.len() < MAX_BYTES {
        body.extend_from_slice(filler.as_bytes());
    }
    let pad = MAX_BYTES - body.len() - "Disallow: /se".len() - "#\n".len();
    body.extend_from_slice(format!("#{}\n", " ".repeat(pad)).as_bytes());
    body.extend_from_slice(b"Disallow: /secret\nDisallow: /\n");
    assert_eq!(&body[MAX_BYTES - 13..MAX_BYTES], b"Disallow: /se");
    let outcome =
        FetchOutcome::Response { status: 200, headers: Headers::default(), body: body.clone(), over_cap: true };
    let headers = Headers::default();
    for state in [from_fetch(&outcome), RobotsState::parse(&body)] {
        assert_eq!(state.evaluate(&view(&headers, None, "/a")).opinion, Opinion::Deny);
        assert_eq!(state.evaluate(&view(&headers, None, "/se")), SourceVerdict::no_opinion());
        assert_eq!(state.evaluate(&view(&headers, None, "/b")), SourceVerdict::no_opinion());
        let report = state.report();
        assert_eq!(report.diagnostics.iter().map(|d| d.code.as_str()).collect::<Vec<_>>(), ["over-cap"]);
        assert_eq!(report.digest, Some(std::sync::Arc::<str>::from(sha256_hex(&body))));
    }
}

// ---------------------------------------------------------------------------------------
// Grouping and the lines the matcher does not use.

#[test]
fn rfc9309_other_records_never_end_a_group_and_are_kept() {
    let body = "User-agent: a\nCrawl-delay: 5\nContent-Usage: train-ai=n\nContent-Signal: search=yes\n\
                User-agent: b\nDisallow: /x\nSitemap: https://example.com/s.xml\nDisallow: /y\n";
    let state = RobotsState::parse(body.as_bytes());
    for token in ["a", "b"] {
        assert_eq!(verdict(body, token, "/x").reasons[0].line, Some(6), "{token}");
        assert_eq!(verdict(body, token, "/y").reasons[0].line, Some(8), "{token}");
    }
    let kept: Vec<_> = state.other_lines().iter().map(|o| (o.line, o.key.as_str(), o.value.as_str())).collect();
    assert_eq!(
        kept,
        [
            (2, "Crawl-delay", "5"),
            (3, "Content-Usage", "train-ai=n"),
            (4, "Content-Signal", "search=yes"),
            (7, "Sitemap", "https://example.com/s.xml"),
        ]
    );
    assert!(state.report().diagnostics.is_empty(), "known other records need no warning");
}

#[test]
fn rfc9309_line_ends_and_comments() {
    for body in [
        "User-agent: *\nDisallow: /a # comment\n\nDisallow: /b#c\n",
        "User-agent: *\r\nDisallow: /a # comment\r\n\r\nDisallow: /b#c\r\n",
        "User-agent: *\rDisallow: /a # comment\r\rDisallow: /b#c\r",
        "User-agent: *\nDisallow: /a # comment\r\n\rDisallow: /b#c",
    ] {
        assert_eq!(
            summary(&verdict(body, "x", "/b#c")),
            (Opinion::Deny, reasons(&[("robots.disallow", 4, "Disallow: /b"), ("robots.group", 1, "User-agent: *")])),
            "{body:?}"
        );
        assert_eq!(&*verdict(body, "x", "/a").reasons[0].rule, "Disallow: /a", "{body:?}");
    }
}

#[test]
fn google_tolerances_we_accept() {
    let cases: &[(&str, &str, &str, Opinion, u32)] = &[
        // ID_LineSyntax_Line: a missing `:` between two words.
        ("user-agent FooBot\ndisallow /\n", "foobot", "/x", Opinion::Deny, 2),
        // Accepted misspellings of the keys.
        ("useragent: FooBot\ndisalow: /x\n", "foobot", "/x/1", Opinion::Deny, 2),
        ("user agent: FooBot\ndissallow: /x\n", "foobot", "/x/1", Opinion::Deny, 2),
        // User-agent values cut at the first space, and `/version` dropped.
        ("User-agent: Foo Bar\nDisallow: /\n", "foo", "/x", Opinion::Deny, 2),
        (
            "User-agent: Googlebot/2.1 (+http://www.google.com/bot.html)\nDisallow: /\n",
            "googlebot",
            "/x",
            Opinion::Deny,
            2,
        ),
        // Digits stay in the token (MJ12bot, 360Spider are real tokens).
        ("User-agent: MJ12bot\nDisallow: /\n", "mj12bot", "/x", Opinion::Deny, 2),
        // A partial BOM is skipped too.
        ("\u{FEFF}User-agent: *\nDisallow: /\n", "x", "/x", Opinion::Deny, 2),
    ];
    for (body, token, path, opinion, line) in cases {
        let v = verdict(body, token, path);
        assert_eq!((v.opinion, v.reasons[0].line), (*opinion, Some(*line)), "{body:?}");
    }
    let headers = Headers::default();
    for bom in [&b"\xEF\xBB"[..], b"\xEF"] {
        let body = [bom, b"User-agent: *\nDisallow: /\n"].concat();
        assert_eq!(RobotsState::parse(&body).evaluate(&view(&headers, None, "/")).opinion, Opinion::Deny);
    }
    // `MJ12bot` is not `MJ`, and `Foo Bar` as the agent's own token names no group.
    assert_eq!(verdict("User-agent: MJ12bot\nDisallow: /\n", "mj", "/x"), SourceVerdict::no_opinion());
    assert_eq!(verdict("User-agent: Foo Bar\nDisallow: /\n", "Foo Bar", "/x"), SourceVerdict::no_opinion());
    // Three words without a colon are not a directive.
    assert_eq!(verdict("user-agent: *\ndisallow / x\n", "x", "/x"), SourceVerdict::no_opinion());
}

#[test]
fn real_world_sgppto_nul_bytes_end_the_line() {
    // sgppto.robots.txt has 7743 NUL bytes inside one Disallow line; Google reads the line
    // up to the first NUL, and so do we.
    let body = b"User-agent: *\nDisallow: /*/action~*/\0\0\0ction~stream/\nDisallow: /voe\n";
    let headers = Headers::default();
    let state = RobotsState::parse(body);
    let v = state.evaluate(&view(&headers, None, "/cal/action~week/"));
    assert_eq!((v.opinion, v.reasons[0].rule.as_ref()), (Opinion::Deny, "Disallow: /*/action~*/"));
    assert_eq!(state.evaluate(&view(&headers, None, "/voe/1")).reasons[0].line, Some(3));
}

#[test]
fn invalid_utf8_octets_match_their_percent_encoding() {
    let headers = Headers::default();
    let state = RobotsState::parse(b"User-agent: *\nDisallow: /caf\xE9\n");
    for path in ["/caf%E9", "/caf%e9/menu"] {
        let v = state.evaluate(&view(&headers, None, path));
        assert_eq!((v.opinion, v.reasons[0].rule.as_ref()), (Opinion::Deny, "Disallow: /caf\u{FFFD}"), "{path}");
    }
    assert_eq!(state.evaluate(&view(&headers, None, "/caf")), SourceVerdict::no_opinion());
    assert_eq!(state.report().diagnostics[0].code, "invalid-utf8");
}

#[test]
fn real_world_files_decide_by_their_own_rule_lines() {
    let dir = corpus("robots/real-world");
    let headers = Headers::default();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("corpus {} missing: {e}", dir.display()));
    let mut files = 0;
    for entry in entries {
        let path = entry.expect("directory entries are readable").path();
        if path.extension().is_none_or(|e| e != "txt") {
            continue;
        }
        let body = read(&path);
        let state = RobotsState::parse(&body);
        assert_eq!(state.report().status, PolicyStatus::Valid, "{}", path.display());
        // Ask about every rule's own path: whatever decides must be an allow/disallow line.
        let text = String::from_utf8_lossy(&body);
        let lines: Vec<&str> = text.lines().collect();
        for value in lines.iter().filter_map(|l| l.split_once(':')).filter(|(k, _)| k.trim().ends_with("llow")) {
            let target = value.1.trim().replace(['*', '$'], "x");
            for token in [None, Some("googlebot"), Some("bingbot")] {
                let v = state.evaluate(&view(&headers, token, &target));
                if let Some(reason) = v.reasons.first() {
                    let line = lines[reason.line.expect("rule reasons have a line") as usize - 1];
                    assert!(
                        line.to_ascii_lowercase().contains("allow"),
                        "{}: {target} decided by {line:?}",
                        path.display()
                    );
                }
            }
        }
        files += 1;
    }
    assert_eq!(files, 10);
    let twitter = read(&dir.join("twitter.robots.txt"));
    let state = RobotsState::parse(&twitter);
    let v = state.evaluate(&view(&headers, Some("googlebot"), "/search?q=%23x"));
    assert_eq!((v.opinion, v.reasons[0].line), (Opinion::Allow, Some(8)));
    let v = state.evaluate(&view(&headers, Some("googlebot"), "/search/users/1"));
    assert_eq!((v.opinion, v.reasons[0].line), (Opinion::Deny, Some(11)));
}

// ---------------------------------------------------------------------------------------
// lint.

#[test]
fn lint_names_each_finding_with_its_line() {
    let body = b"Disallow: /early\n\
User-agent FooBot\n\
User-agent: Foo Bar\n\
disalow: /typo\n\
Alow: /x\n\
Crawl-delya: 3\n\
random words here\n\
Disallow: private\n\
Allow:\n\
Disallow: /caf\xE9\n\
Disallow: /nul\0junk\n\
Sitemap: https://example.com/s.xml\n";
    let owned = lint(body);
    let found: Vec<(Option<u32>, &str)> = owned.iter().map(|d| (d.line, d.code.as_str())).collect();
    assert_eq!(
        found,
        [
            (Some(1), "rule-outside-group"),
            (Some(2), "missing-colon"),
            (Some(3), "user-agent-not-token"),
            (Some(4), "directive-typo"),
            (Some(5), "unknown-directive"),
            (Some(6), "unknown-directive"),
            (Some(7), "not-a-directive"),
            (Some(8), "pattern-not-absolute"),
            (Some(9), "empty-allow"),
            (Some(10), "invalid-utf8"),
            (Some(11), "nul-byte"),
        ]
    );
    assert!(owned.iter().all(|d| d.severity == Severity::Warning));
    let message = |line: u32| &owned.iter().find(|d| d.line == Some(line)).expect("a finding on that line").message;
    assert!(message(1).contains("add `User-agent: *` above it"), "{}", message(1));
    assert!(message(3).contains("`Foo`"), "{}", message(3));
    assert!(message(4).contains("spell it `disallow`"), "{}", message(4));
    assert!(message(5).contains("did you mean `allow`?"), "{}", message(5));
    assert!(message(6).contains("did you mean `crawl-delay`?"), "{}", message(6));
    assert!(message(8).contains("did you mean `/private`?"), "{}", message(8));
}

#[test]
fn lint_warns_about_a_malformed_content_usage_or_content_signal_line() {
    let body = b"User-agent: *\n\
Content-Usage: train-ai=n search=y\n\
Content-Usage: /open/ train-ai=y\n\
Content-Signal: search=yes; ai-train=no,\n\
Content-Signal: search=yes, ai-train=no\n";
    let owned = lint(body);
    let found: Vec<(Option<u32>, &str)> = owned.iter().map(|d| (d.line, d.code.as_str())).collect();
    assert_eq!(found, [(Some(2), "malformed-usage"), (Some(4), "malformed-usage")]);
    assert!(owned[0].message.contains("write it as `train-ai=n, search=y`"), "{}", owned[0].message);
    assert!(owned[1].message.starts_with("`Content-Signal: search=yes; ai-train=no,`"), "{}", owned[1].message);
    assert!(owned[1].message.contains("write it as `search=yes, ai-train=no`"), "{}", owned[1].message);
}

#[test]
fn lint_warns_about_size_and_long_lines() {
    let long = format!("User-agent: *\nDisallow: /{}\n", "a".repeat(17_000));
    let found: Vec<_> = lint(long.as_bytes()).into_iter().map(|d| (d.line, d.code)).collect();
    assert_eq!(found, [(Some(2), "long-line".to_string())]);
    let big = "Disallow: /x\n".repeat(MAX_BYTES / 10);
    let found = lint(big.as_bytes());
    assert_eq!((found[0].line, found[0].code.as_str()), (None, "over-cap"));
    assert_eq!(found.len(), 1 + MAX_BYTES / "Disallow: /x\n".len(), "lint keeps every finding");
}

#[test]
fn reports_keep_a_bounded_number_of_findings() {
    let body = "nonsense line here\n".repeat(1000);
    let report = RobotsState::parse(body.as_bytes()).report();
    assert_eq!(report.diagnostics.len(), REPORTED_FINDINGS + 1);
    let last = report.diagnostics.last().expect("not empty");
    assert_eq!(last.code, "too-many-findings");
    assert!(last.message.contains("900 more"), "{}", last.message);
}

// ---------------------------------------------------------------------------------------
// Hostile input: never a panic, bounded output.

#[test]
fn hostile_inputs_parse_and_evaluate() {
    let headers = Headers::default();
    let enormous_line = format!("Disallow: /{}", "a".repeat(MAX_BYTES + 10));
    let cases: Vec<(&str, Vec<u8>, Opinion)> = vec![
        ("empty", Vec::new(), Opinion::NoOpinion),
        ("binary", (0..=255u8).cycle().take(4096).collect(), Opinion::NoOpinion),
        ("nul bytes", vec![0; 1000], Opinion::NoOpinion),
        ("bom only", b"\xEF\xBB\xBF".to_vec(), Opinion::NoOpinion),
        ("crlf", b"User-agent: *\r\nDisallow: /\r\n".to_vec(), Opinion::Deny),
        ("cr only", b"User-agent: *\rDisallow: /\r".to_vec(), Opinion::Deny),
        ("only line ends", b"\r\n\n\r\r\n".repeat(1000), Opinion::NoOpinion),
        ("enormous line, over the cap", enormous_line.into_bytes(), Opinion::NoOpinion),
        ("over the cap", b"User-agent: *\nDisallow: /\n".repeat(MAX_BYTES / 10), Opinion::Deny),
        ("colons only", b":::::\n: :\n:".to_vec(), Opinion::NoOpinion),
        ("stars", b"User-agent: *\nDisallow: ************$\n".to_vec(), Opinion::Deny),
    ];
    for (name, body, opinion) in cases {
        let state = RobotsState::parse(&body);
        assert_eq!(state.evaluate(&view(&headers, None, "/")).opinion, opinion, "{name}");
        let report = state.report();
        assert_eq!(report.status, PolicyStatus::Valid, "{name}");
        assert!(report.diagnostics.len() <= REPORTED_FINDINGS + 1, "{name}");
    }
}

const KEYS: &[&str] = &["User-agent", "allow", "DISALLOW", "Sitemap", "crawl-delay", "disalow", "", "#"];
const SEPARATORS: &[&str] = &[":", ": ", " ", "\t:", "", "::"];
const VALUE_PIECES: &[&str] = &["*", "$", "/", "a", "b", "%e9", "%E9", "ツ", "\0", "\r", "\n", "#", " ", "?"];

/// Short values built from the characters that matter to the matcher.
fn value() -> impl Strategy<Value = String> {
    proptest::collection::vec(select(VALUE_PIECES), 0..12).prop_map(|pieces| pieces.concat())
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..2048), path in "/[ -~]{0,40}") {
        let headers = Headers::default();
        let state = RobotsState::parse(&body);
        let v = state.evaluate(&view(&headers, Some("FooBot"), &path));
        prop_assert!(v.reasons.len() <= 2);
        prop_assert!(state.report().diagnostics.len() <= REPORTED_FINDINGS + 1);
        prop_assert!(lint(&body).len() <= body.len() + 1);
    }

    #[test]
    fn robots_shaped_lines_never_panic(
        lines in proptest::collection::vec((select(KEYS), select(SEPARATORS), value()), 0..40),
        path in value(),
    ) {
        let body: String = lines.iter().map(|(k, sep, v)| format!("{k}{sep}{v}\n")).collect();
        let headers = Headers::default();
        let path = format!("/{path}");
        let v = RobotsState::parse(body.as_bytes()).evaluate(&view(&headers, Some("a"), &path));
        for reason in &v.reasons {
            prop_assert!(reason.line.is_some_and(|l| l >= 1));
        }
    }
}

// ---------------------------------------------------------------------------------------
// Crawl-delay (not in RFC 9309; enforced only with `[robots] honor_crawl_delay`).

/// The crawl delay for an agent: (milliseconds, line, rule).
fn crawl_delay(body: &str, token: Option<&str>) -> Option<(u32, Option<u32>, String)> {
    let headers = Headers::default();
    let limit = RobotsState::parse(body.as_bytes()).crawl_delay(&view(&headers, token, "/"))?;
    assert_eq!((limit.source, limit.scope.clone()), (Source::Robots, crate::policy::LimitScope::Origin));
    assert_eq!(limit.reason.code, "robots.crawl_delay");
    let LimitKind::Delay { millis } = limit.kind else { panic!("a crawl delay is a Delay: {limit:?}") };
    Some((millis, limit.reason.line, limit.reason.rule.to_string()))
}

#[test]
fn crawl_delay_comes_from_the_group_chosen_for_the_agent() {
    let body = "User-agent: *\nCrawl-delay: 5\nDisallow: /x\n\nUser-agent: FooBot\nCrawl-delay: 1.5 # slow\nAllow: /\n";
    assert_eq!(crawl_delay(body, Some("FooBot")), Some((1500, Some(6), "Crawl-delay: 1.5".to_owned())));
    assert_eq!(crawl_delay(body, Some("OtherBot")), Some((5000, Some(2), "Crawl-delay: 5".to_owned())));
    assert_eq!(crawl_delay(body, None), Some((5000, Some(2), "Crawl-delay: 5".to_owned())));
    // A group naming the agent without a delay: no delay, even though `*` has one.
    let named_without = "User-agent: *\nCrawl-delay: 5\nDisallow: /y\n\nUser-agent: FooBot\nDisallow: /x\n";
    assert_eq!(crawl_delay(named_without, Some("FooBot")), None);
    // Two groups naming the agent are merged; the longer delay applies.
    let merged = "User-agent: FooBot\nCrawl-delay: 1\nDisallow: /a\n\nUser-agent: FooBot\nCrawl-delay: 3\n";
    assert_eq!(crawl_delay(merged, Some("FooBot")).map(|d| (d.0, d.1)), Some((3000, Some(6))));
}

#[test]
fn crawl_delay_values_invalid_zero_and_capped() {
    for value in ["-1", "abc", "1e3", "", "2s", "+2", "1.2.3", "."] {
        let body = format!("User-agent: *\nCrawl-delay: {value}\n");
        assert_eq!(crawl_delay(&body, None), None, "{value:?} is ignored");
        let findings: Vec<String> = lint(body.as_bytes()).into_iter().map(|d| d.code).collect();
        assert_eq!(findings, ["crawl-delay-invalid"], "{value:?}");
    }
    assert_eq!(crawl_delay("User-agent: *\nCrawl-delay: 0\n", None), None, "0 is no delay");
    assert_eq!(crawl_delay("User-agent: *\nCrawl-delay: .25\n", None).map(|d| d.0), Some(250));
    assert_eq!(crawl_delay("User-agent: *\nCrawl-delay: 0.0004\n", None), None, "below a millisecond");
    let capped = "User-agent: *\nCrawl-delay: 86400\n";
    assert_eq!(crawl_delay(capped, None).map(|d| d.0), Some(MAX_CRAWL_DELAY_MS));
    let findings: Vec<String> = lint(capped.as_bytes()).into_iter().map(|d| d.code).collect();
    assert_eq!(findings, ["crawl-delay-capped"]);
    let huge = "User-agent: *\nCrawl-delay: 99999999999999999999999\n";
    assert_eq!(crawl_delay(huge, None).map(|d| d.0), Some(MAX_CRAWL_DELAY_MS), "saturates, never panics");
    let outside = "Crawl-delay: 5\nUser-agent: *\nDisallow: /x\n";
    assert_eq!(crawl_delay(outside, None), None);
    let findings: Vec<String> = lint(outside.as_bytes()).into_iter().map(|d| d.code).collect();
    assert_eq!(findings, ["crawl-delay-outside-group"]);
}

#[test]
fn crawl_delay_never_ends_a_group_and_changes_no_rule() {
    let body = "User-agent: FooBot\nCrawl-delay: 2\nUser-agent: BarBot\nDisallow: /private\n";
    assert_eq!(crawl_delay(body, Some("BarBot")).map(|d| d.0), Some(2000), "one group for both agents");
    assert_eq!(verdict(body, "BarBot", "/private").opinion, Opinion::Deny);
    assert_eq!(verdict(body, "FooBot", "/private").opinion, Opinion::Deny);
}

// The stale rule (RFC 9309 §2.3.1.4, DESIGN §5).

fn fetched(status: u16) -> RobotsState {
    from_fetch(&FetchOutcome::Response { status, headers: Headers::default(), body: Vec::new(), over_cap: false })
}

const CACHED: &[u8] = b"User-agent: *\nDisallow: /private\n";

#[test]
fn robots_unreachable_keeps_a_parsed_copy_however_long_it_is_stale() {
    let cached = RobotsState::parse(CACHED);
    let refreshed = refresh::<Robots>(previous(cached, 30 * 24 * HOUR, HOUR), fetched(503), MINUTE);
    assert!(refreshed.kept_stale);
    assert!(!refreshed.state.is_unreachable());
    assert_eq!(refreshed.ttl, MINUTE);
}

#[test]
fn robots_unreachable_without_a_parsed_copy_disallows() {
    let timed_out = from_fetch(&FetchOutcome::Failed(FetchError::Timeout));
    let refreshed = refresh::<Robots>(None, timed_out, MINUTE);
    assert!(refreshed.state.is_unreachable() && !refreshed.kept_stale);
    let after_404 = refresh::<Robots>(previous(fetched(404), MINUTE, HOUR), fetched(500), MINUTE);
    assert!(after_404.state.is_unreachable() && !after_404.kept_stale);
}

#[test]
fn robots_answer_replaces_the_copy_and_ttl_is_capped() {
    let cached = RobotsState::parse(CACHED);
    let refreshed = refresh::<Robots>(previous(cached, MINUTE, HOUR), fetched(404), 48 * HOUR);
    assert_eq!(refreshed.state.report().status, PolicyStatus::Absent);
    assert_eq!(refreshed.ttl, MAX_TTL);
}
