//! AGENTS.md unit tests: the spec's six examples, SEMANTICS §6.3 rows, discovery, the
//! conformance corpus run in-process, and hostile input.

use proptest::prelude::*;

use super::*;
use crate::policy::test_support::{
    HOUR, MINUTE, allows, cases, corpus, ok, previous, read, refresh, request, status, strings,
};
use crate::policy::{FetchError, Headers};

const MD: Option<&str> = Some("text/markdown; charset=utf-8");

fn policy(body: &str) -> AgentsMdState {
    discover(from_fetch(&ok(body.as_bytes(), MD)), None)
}

fn eval(state: &AgentsMdState, method: &str, path: &str, trust: u8, headers: &[(&str, &str)]) -> SourceVerdict {
    let headers = Headers::new(headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect());
    state.evaluate(&request(method, "example.com", path, trust, &headers), false)
}

fn codes(state: &AgentsMdState) -> Vec<String> {
    state.report().diagnostics.into_iter().map(|d| d.code).collect()
}

fn example(name: &str) -> AgentsMdState {
    let body = read(&corpus("agents-md/examples").join(name));
    discover(from_fetch(&ok(&body, MD)), None)
}

#[test]
fn agents_md_spec_examples_are_valid_policies_without_errors() {
    let names = [
        "blog.agents.md",
        "e-commerce.agents.md",
        "enterprise-saas.agents.md",
        "government.agents.md",
        "healthcare.agents.md",
        "minimal.agents.md",
    ];
    for name in names {
        let s = example(name);
        let report = s.report();
        assert_eq!(report.status, PolicyStatus::Valid, "{name}: {:?}", report.diagnostics);
        assert!(report.diagnostics.is_empty(), "{name}: {:?}", report.diagnostics);
        assert_eq!(
            report.digest,
            Some(std::sync::Arc::<str>::from(sha256_hex(&read(&corpus("agents-md/examples").join(name)))))
        );
        assert!(!s.falls_through() && s.location() == Location::Root);
    }
}

#[test]
fn agents_md_example_blog() {
    let s = example("blog.agents.md");
    let v = eval(&s, "GET", "/posts/hello", 0, &[]);
    assert_eq!((v.opinion, v.reasons.len()), (Opinion::NoOpinion, 0));
    let kinds: Vec<LimitKind> = v.limits.iter().map(|l| l.kind).collect();
    assert_eq!(
        kinds,
        vec![
            LimitKind::Rate { requests: 20, window_s: 60 },
            LimitKind::Rate { requests: 200, window_s: 3600 },
            LimitKind::Concurrent { max: 2 }
        ]
    );
    assert!(v.limits.iter().all(|l| l.scope == LimitScope::Host && l.source == Source::AgentsMd));
    assert_eq!((v.limits[0].reason.line, v.limits[0].reason.rule.as_ref()), (Some(28), "- requests-per-minute: 20"));
    assert!(v.inject_headers.is_empty(), "require-agent-header: false");
    let again = eval(&s, "GET", "/posts/other", 0, &[]);
    assert!(std::sync::Arc::ptr_eq(&v.limits, &again.limits), "every verdict shares the file's limits, never a copy");

    let v = eval(&s, "GET", "/author/jane/edit", 0, &[]);
    assert_eq!(v.opinion, Opinion::Deny);
    let r = &v.reasons[0];
    assert_eq!(
        (r.code.as_str(), r.line, r.rule.as_ref()),
        ("agents_md.disallowed_path", Some(39), "disallowed-paths: /author/*/edit")
    );
    assert_eq!(r.digest, s.report().digest);

    let v = eval(&s, "POST", "/posts/hello", 0, &[("Content-Type", "application/x-www-form-urlencoded")]);
    assert_eq!(
        (v.opinion, v.reasons[0].code.as_str(), v.reasons[0].line),
        (Opinion::Deny, "agents_md.read_only_path", Some(40))
    );
    let v = eval(&s, "POST", "/comments", 0, &[("Content-Type", "application/x-www-form-urlencoded")]);
    assert_eq!(
        (v.opinion, v.reasons[0].code.as_str(), v.reasons[0].line),
        (Opinion::Deny, "agents_md.action_denied", Some(20))
    );
}

#[test]
fn agents_md_example_e_commerce() {
    let s = example("e-commerce.agents.md");
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let v = eval(&s, "GET", "/products/1", 1, &[]);
    assert_eq!(
        (v.opinion, v.reasons[0].code.as_str(), v.reasons[0].line),
        (Opinion::Deny, "agents_md.trust_level", Some(14))
    );
    let v = eval(&s, "POST", "/checkout/confirm", 2, &form);
    assert_eq!(
        (v.opinion, v.reasons[0].code.as_str(), v.reasons[0].line),
        (Opinion::NeedsApproval, "agents_md.requires_human_approval", Some(43))
    );
    let v = eval(&s, "POST", "/cart/add", 2, &form);
    assert_eq!(
        (v.opinion, v.reasons[0].code.as_str(), v.reasons[0].line),
        (Opinion::Allow, "agents_md.action_allowed", Some(20))
    );
    assert_eq!(v.inject_headers, vec![("X-Agent-Identity".to_owned(), "bot-1".to_owned())]);
    let v = eval(&s, "POST", "/cart/add", 2, &[("content-type", "multipart/form-data; boundary=x")]);
    assert_eq!((v.opinion, v.reasons[0].line), (Opinion::Deny, Some(25)), "upload-files: false");
    let v = eval(&s, "DELETE", "/cart/1", 2, &[("X-Agent-Identity", "mine")]);
    assert_eq!((v.opinion, v.reasons[0].line), (Opinion::Deny, Some(27)), "delete-data: false");
    assert!(v.inject_headers.is_empty(), "C24: a header the agent sent is kept");
}

#[test]
fn semantics_c16_precedence_table() {
    let s = policy(
        "## Identity\n- site: example.com\n## Allowed Actions\n- access-api: true\n## Restrictions\n\
         - disallowed-paths: /docs/*\n- read-only-paths: /docs/public/*, /account/*\n\
         - require-human-approval: /account/delete\n",
    );
    let table: &[(&str, &str, Opinion, &str, u32)] = &[
        ("GET", "/docs/public/a", Opinion::Deny, "agents_md.disallowed_path", 6),
        ("POST", "/docs/public/a", Opinion::Deny, "agents_md.disallowed_path", 6),
        ("POST", "/account/delete", Opinion::NeedsApproval, "agents_md.requires_human_approval", 8),
        ("POST", "/account/name", Opinion::Deny, "agents_md.read_only_path", 7),
        ("GET", "/account/name", Opinion::NoOpinion, "", 0),
        ("POST", "/api/x", Opinion::Allow, "agents_md.action_allowed", 4),
    ];
    for (method, path, opinion, code, line) in table {
        let v = eval(&s, method, path, 0, &[]);
        assert_eq!(v.opinion, *opinion, "{method} {path}");
        if !code.is_empty() {
            assert_eq!((v.reasons[0].code.as_str(), v.reasons[0].line), (*code, Some(*line)), "{method} {path}");
        }
    }
}

#[test]
fn semantics_c17_c18_actions_from_the_request() {
    let all_false = policy("## Identity\n- site: example.com\n");
    let table: &[(&str, Option<&str>, &str)] = &[
        ("POST", Some("application/x-www-form-urlencoded"), "submit-forms"),
        ("PUT", Some("multipart/form-data"), "submit-forms"),
        ("POST", Some("application/json"), "access-api"),
        ("POST", None, "access-api"),
        ("TRACE", None, "access-api"),
        ("DELETE", None, "delete-data"),
    ];
    for (method, ct, action) in table {
        let headers: Vec<(&str, &str)> = ct.map(|c| ("Content-Type", c)).into_iter().collect();
        let v = eval(&all_false, method, "/x", 0, &headers);
        assert_eq!(v.opinion, Opinion::Deny, "{method} {ct:?}");
        assert_eq!(v.reasons[0].code, "agents_md.action_denied");
        assert!(v.reasons[0].rule.starts_with(action), "{method} {ct:?}: {}", v.reasons[0].rule);
        assert_eq!(v.reasons[0].line, None, "a default has no line");
    }
    for method in ["GET", "HEAD", "OPTIONS"] {
        assert_eq!(eval(&all_false, method, "/x", 0, &[]).opinion, Opinion::NoOpinion);
    }
    let multipart = policy("## Identity\n- site: a\n## Allowed Actions\n- submit-forms: yes\n- upload-files: no\n");
    let v = eval(&multipart, "POST", "/x", 0, &[("Content-Type", "multipart/form-data; boundary=b")]);
    assert_eq!((v.opinion, v.reasons[0].line), (Opinion::Deny, Some(5)), "multipart needs upload-files too");
    let no_read = policy("## Identity\n- site: a\n## Allowed Actions\n- read-content: off\n");
    assert_eq!(eval(&no_read, "GET", "/", 0, &[]).reasons[0].line, Some(4));
}

#[test]
fn semantics_c17_download_is_checked_at_response_time() {
    let s = policy("## Identity\n- site: a\n");
    let mut attachment = Headers::default();
    attachment.push("Content-Disposition", "Attachment; filename=\"x.pdf\"");
    let v = s.evaluate_response(&attachment);
    assert_eq!((v.opinion, v.reasons[0].code.as_str()), (Opinion::Deny, "agents_md.action_denied"));
    assert_eq!(s.evaluate_response(&Headers::default()).opinion, Opinion::NoOpinion);
    let allowed = policy("## Identity\n- site: a\n## Allowed Actions\n- download-files: true\n");
    assert_eq!(allowed.evaluate_response(&attachment).opinion, Opinion::NoOpinion);
    assert_eq!(from_fetch(&FetchOutcome::not_found()).evaluate_response(&attachment).opinion, Opinion::NoOpinion);
}

#[test]
fn semantics_c10_c11_duplicates_take_the_most_restrictive_value() {
    let s = policy(
        "## Identity\n- site: a\n## Trust Requirements\n- minimum-trust-level: 3\n- minimum-trust-level: 1\n\
         - authentication: required\n- authentication: none\n## Rate Limits\n- requests-per-minute: 0\n\
         - requests-per-minute: 40\n- requests-per-minute: 50\n- concurrent-sessions: x\n- concurrent-sessions: 4\n\
         ## Agent Identification\n- require-agent-header: true\n- require-agent-header: false\n\
         - agent-header-name: Bad Name\n## Allowed Actions\n- access-api: true\n## Allowed Actions\n- access-api: false\n",
    );
    let p = s.policy.as_deref().expect("a policy");
    assert_eq!(p.minimum_trust_level.as_ref().map(|x| (x.value, x.line)), Some((3, 4)));
    assert_eq!(p.authentication.as_ref().map(|x| x.value), Some(parse::Authentication::Required));
    assert_eq!(p.requests_per_minute.as_ref().map(|x| (x.value, x.line)), Some((40, 10)));
    assert_eq!(p.concurrent_sessions.as_ref().map(|x| x.value), Some(4));
    assert_eq!(p.action("access-api"), (false, p.actions.first()));
    let v = eval(&s, "GET", "/", 3, &[]);
    assert_eq!(v.inject_headers, vec![("X-Agent-Identity".to_owned(), "bot-1".to_owned())]);
    let c = codes(&s);
    for code in
        ["duplicate-key", "integer-invalid:concurrent-sessions", "agent-header-name-invalid", "duplicate-section"]
    {
        assert!(c.iter().any(|x| x == code), "{code} in {c:?}");
    }
    assert_eq!(c.iter().filter(|x| *x == "duplicate-key").count(), 7, "{c:?}");
}

#[test]
fn semantics_c12_identity_without_site_is_enforced_and_malformed() {
    let s = policy("## Identity\n- contact: a@b\n## Restrictions\n- disallowed-paths: /private/*\n");
    let report = s.report();
    assert_eq!(report.status, PolicyStatus::Malformed);
    let d = &report.diagnostics[0];
    assert_eq!(
        (d.code.as_str(), d.line, d.severity),
        ("identity-site-missing", Some(1), crate::policy::Severity::Error)
    );
    assert_eq!(eval(&s, "GET", "/private/a", 0, &[]).opinion, Opinion::Deny);
}

#[test]
fn semantics_c13_site_mismatch_is_a_warning_only() {
    let s = policy("## Identity\n- site: other.example.org\n## Restrictions\n- disallowed-paths: /x/*\n")
        .with_fetched_host("www.example.com");
    assert_eq!(s.report().status, PolicyStatus::Valid);
    assert_eq!(s.report().diagnostics[0].code, "identity-site-mismatch");
    assert_eq!(s.report().diagnostics[0].line, Some(2));
    let same = policy("## Identity\n- site: Example.com\n").with_fetched_host("example.com");
    assert!(same.report().diagnostics.is_empty());
}

#[test]
fn semantics_c1_discovery_over_both_locations() {
    let coding = b"# AGENTS.md\n## Build\n- Run cargo build.\n";
    let good = b"## Identity\n- site: example.com\n## Restrictions\n- disallowed-paths: /x/*\n";
    let html = ok(b"<!doctype html>", Some("text/html"));

    let s = discover(from_fetch(&ok(coding, MD)), Some(from_fetch(&ok(good, MD))));
    assert_eq!((s.falls_through(), s.location(), s.report().status), (false, Location::WellKnown, PolicyStatus::Valid));
    let d = &s.report().diagnostics[0];
    assert_eq!(d.code, "not-a-policy:no-identity-section");
    assert!(d.message.starts_with("/AGENTS.md has no `## Identity`"), "{}", d.message);
    assert!(d.message.ends_with("; /.well-known/agents.md applies"), "{}", d.message);
    assert_eq!(eval(&s, "GET", "/x/1", 0, &[]).reasons[0].line, Some(4));

    let s = discover(from_fetch(&html), Some(from_fetch(&FetchOutcome::not_found())));
    assert_eq!((s.falls_through(), s.report().status), (true, PolicyStatus::NotApplicable));
    assert_eq!(codes(&s), vec!["not-a-policy:html-content-type"]);
    assert_eq!(eval(&s, "POST", "/x", 0, &[]), SourceVerdict::no_opinion());

    let s = discover(from_fetch(&ok(good, MD)), Some(from_fetch(&ok(coding, MD))));
    assert_eq!((s.location(), s.report().diagnostics.len()), (Location::Root, 0), "the root file takes precedence");

    let s = discover(from_fetch(&status(404)), Some(from_fetch(&status(404))));
    assert_eq!((s.report().status, s.refetch_failed(), s.report().diagnostics.len()), (PolicyStatus::Absent, false, 0));

    let s = discover(from_fetch(&status(503)), Some(from_fetch(&status(404))));
    assert!(s.refetch_failed(), "C4: a failed re-fetch keeps a stale copy");
    let s = discover(from_fetch(&FetchOutcome::Failed(FetchError::InsecureRedirect)), None);
    assert!(s.refetch_failed() && s.falls_through());
}

#[test]
fn semantics_c4_over_cap_and_odd_content_types() {
    let big = FetchOutcome::Response {
        status: 200,
        headers: Headers::default(),
        body: vec![b'#'; MAX_BYTES + 1],
        over_cap: true,
    };
    let s = from_fetch(&big);
    assert!(s.falls_through() && !s.refetch_failed());
    assert_eq!(codes(&s), vec!["too-large"]);
    let s = from_fetch(&ok(b"## Identity\n- site: a\n", Some("application/json")));
    assert_eq!((s.report().status, codes(&s)), (PolicyStatus::Valid, vec!["unexpected-content-type".to_owned()]));
}

#[test]
fn semantics_c8_c9_fences_comments_and_bullets_never_become_policy() {
    let s = policy(
        "## Identity\n- site: a\n## Restrictions\n~~~\n- disallowed-paths: /\n~~~\n<!-- - disallowed-paths: /a -->\n\
         <!--\n- disallowed-paths: /b\n-->\n* disallowed-paths: /c\n+ read-only-paths: /d\n-disallowed-paths: /e\n\
         - disallowed-paths: /f: g\n",
    );
    for path in ["/", "/a", "/b", "/c", "/e"] {
        assert_eq!(eval(&s, "GET", path, 0, &[]).opinion, Opinion::NoOpinion, "{path}");
    }
    assert_eq!(eval(&s, "GET", "/f: g", 0, &[]).opinion, Opinion::Deny, "split at the first `:`");
    assert_eq!(codes(&s), vec!["bullet-not-hyphen", "bullet-not-hyphen"]);
}

#[test]
fn semantics_c22_trust_level_applies_to_every_request() {
    let s = policy("## Identity\n- site: a\n## Trust Requirements\n- minimum-trust-level: 4\n");
    for (trust, opinion) in [(0, Opinion::Deny), (3, Opinion::Deny), (4, Opinion::NoOpinion), (9, Opinion::NoOpinion)] {
        assert_eq!(eval(&s, "GET", "/", trust, &[]).opinion, opinion, "trust {trust}");
    }
}

#[test]
fn semantics_c26_encodings_and_line_endings() {
    let lf = "# AGENTS.md\n## Identity\n- site: a\n## Restrictions\n- disallowed-paths: /x/*\n";
    for body in [lf.replace('\n', "\r\n"), lf.replace('\n', "\r"), format!("\u{feff}{lf}")] {
        let s = policy(&body);
        assert_eq!(s.report().status, PolicyStatus::Valid, "{body:?}");
        assert_eq!(eval(&s, "GET", "/x/y", 0, &[]).reasons[0].line, Some(5), "{body:?}");
    }
    let s = from_fetch(&ok(b"## Identity\n- site: \xff\n", None));
    assert_eq!((s.report().status, codes(&s)), (PolicyStatus::Valid, vec!["invalid-utf8".to_owned()]));
}

#[test]
fn lint_adds_advice_for_authors() {
    let diags = lint(b"## Identity\n- site: a\n## Rate Limit\n## Restrictions\n- disallowed-paths: /a/*, /, *.zip\n");
    let got: Vec<(Option<u32>, &str)> = diags.iter().map(|d| (d.line, d.code.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (None, "default-actions"),
            (Some(1), "missing-title"),
            (Some(3), "unknown-section"),
            (Some(5), "trailing-star-subtree"),
            (Some(5), "root-only-pattern"),
            (Some(5), "pattern-without-leading-slash:*.zip"),
        ]
    );
    assert!(diags[2].message.contains("did you mean `## rate limits`?"), "{}", diags[2].message);
    assert_eq!(lint(b"# AGENTS.md\n## Build\n")[0].code, "not-a-policy:no-identity-section");
}

#[test]
fn hostile_input_never_panics() {
    let huge = format!("## Identity\n- site: a\n## Restrictions\n- disallowed-paths: {}\n", "/a*,".repeat(100_000));
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"\0\0\0".to_vec(),
        b"\xEF\xBB\xBF".to_vec(),
        b"\r\r\n\n".to_vec(),
        b"## Identity\n```\n".to_vec(),
        b"## Identity\n<!--\n".to_vec(),
        b"## Identity\n- site: a\0b\n".to_vec(),
        huge.into_bytes(),
        (0..=255u8).collect(),
    ];
    for body in &bodies {
        let s = discover(from_fetch(&ok(body, None)), Some(from_fetch(&ok(body, None))));
        assert!(s.report().diagnostics.len() <= 2 * (crate::policy::text::REPORTED_FINDINGS + 1) + 1);
        let _ = eval(&s, "POST", "/a/b", 0, &[]);
        let _ = lint(body);
    }
}

/// Every check of `agents-md/proposed/cases.json`, run in-process the way
/// `check_policy.py --strict` runs them through `explain`.
#[test]
fn conformance_agents_md_proposed_cases() {
    let dir = corpus("agents-md/proposed");
    let doc = cases(&dir.join("cases.json"));
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in doc["cases"].as_array().into_iter().flatten() {
        let file = case["file"].as_str().expect("every case names its file");
        let expect = &case["expect"];
        let served = ok(&read(&dir.join(file)), case["content_type"].as_str());
        let missing = FetchOutcome::not_found();
        let (root, well_known) = match case["location"].as_str().unwrap_or("AGENTS.md") {
            "AGENTS.md" => (&served, &missing),
            _ => (&missing, &served),
        };
        let host = case["host"].as_str().or(expect["fetched_from"].as_str()).unwrap_or("example.com");
        let s = discover(from_fetch(root), Some(from_fetch(well_known))).with_fetched_host(host);
        let report = s.report();
        let fail = |what: String| format!("{file}: {what}");
        let errors = strings(expect, "errors");
        let want_status = match (expect["policy"].as_bool(), errors.is_empty()) {
            (Some(true), true) => [PolicyStatus::Valid, PolicyStatus::Valid],
            (Some(true), false) => [PolicyStatus::Valid, PolicyStatus::Malformed],
            _ => [PolicyStatus::NotApplicable, PolicyStatus::NotApplicable],
        };
        if !want_status.contains(&report.status) {
            failures.push(fail(format!("status {:?}, want {want_status:?}; {:?}", report.status, report.diagnostics)));
        }
        let mut pool: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
        for w in strings(expect, "warnings").into_iter().chain(errors) {
            match pool.iter().position(|c| c.contains(&w)) {
                Some(i) => {
                    pool.remove(i);
                }
                None => failures.push(fail(format!("no warning {w} left in {pool:?}"))),
            }
        }
        let all_codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
        if let Some(reason) = expect["reason"].as_str()
            && !all_codes.iter().any(|c| c.contains(reason))
        {
            failures.push(fail(format!("reason {reason} not in {all_codes:?}")));
        }
        for (i, check) in expect["checks"].as_array().into_iter().flatten().enumerate() {
            checked += 1;
            let (method, path) = (check["method"].as_str().unwrap_or("GET"), check["path"].as_str().unwrap_or("/"));
            let trust = check["agent_trust"].as_u64().and_then(|t| u8::try_from(t).ok()).unwrap_or(0);
            let headers: Vec<(String, String)> = strings(check, "headers")
                .iter()
                .filter_map(|h| h.split_once(':').map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned())))
                .collect();
            let headers = Headers::new(headers);
            let v = s.evaluate(&request(method, host, path, trust, &headers), false);
            let want = check["allow"].as_bool().expect("agents-md checks state allow");
            if allows(&v) != want {
                failures.push(fail(format!(
                    "check {i} {method} {path}: allowed={}, want {want}; {:?}",
                    allows(&v),
                    v.reasons
                )));
            }
            if !want {
                continue;
            }
            for (key, window) in [("requests-per-minute", 60), ("requests-per-hour", 3600)] {
                let Some(effective) = expect["effective"].get(key) else { continue };
                let got: Vec<u32> = v
                    .limits
                    .iter()
                    .filter_map(|l| match l.kind {
                        LimitKind::Rate { requests, window_s } if window_s == window => Some(requests),
                        _ => None,
                    })
                    .collect();
                let want: Vec<u32> =
                    effective.as_u64().filter(|&n| n > 0).and_then(|n| u32::try_from(n).ok()).into_iter().collect();
                if got != want {
                    failures.push(fail(format!("check {i}: {key} limits {got:?}, want {want:?}")));
                }
            }
        }
    }
    assert!(checked >= 37, "only {checked} checks ran; is the corpus complete?");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..512)) {
        let s = discover(from_fetch(&ok(&body, None)), Some(from_fetch(&ok(&body, MD))));
        let _ = eval(&s, "POST", "/a/b", 0, &[]);
        let _ = lint(&body);
    }

    #[test]
    fn arbitrary_markdown_shaped_text_never_panics(
        body in "(## [a-zA-Z -]{0,12}|- [a-z-]{0,12}: [ -~]{0,20}|```|~~~|<!--|-->|#{1,7} x|\r|\n|\u{feff}|[/*a.]{0,6}){0,40}",
        path in "/[a-z/*.]{0,12}",
    ) {
        let s = policy(&format!("## Identity\n- site: a\n{body}"));
        let _ = eval(&s, "DELETE", &path, 5, &[]);
        let _ = lint(body.as_bytes());
    }
}

/// C23 `authentication: required`: the reason on every verdict for the host, and the
/// strict reading that denies a write carrying neither `Authorization` nor `Cookie`.
#[test]
fn semantics_c23_authentication_required_is_logged_and_strict_denies_unauthenticated_writes() {
    let s = policy(
        "## Identity\n- site: example.com\n## Trust Requirements\n- authentication: required\n## Allowed Actions\n\
         - access-api: true\n",
    );
    let strict = |method: &str, headers: &[(&str, &str)]| {
        let headers = Headers::new(headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect());
        s.evaluate(&request(method, "example.com", "/api", 0, &headers), true)
    };
    let code_and_line = |v: &SourceVerdict| -> Vec<(String, Option<u32>)> {
        v.reasons.iter().map(|r| (r.code.to_string(), r.line)).collect()
    };

    let read = eval(&s, "GET", "/a", 0, &[]);
    assert!(allows(&read));
    assert_eq!(code_and_line(&read), [("agents_md.authentication_missing".to_owned(), Some(4))]);
    assert_eq!(&*read.reasons[0].rule, "- authentication: required");
    let advisory = eval(&s, "POST", "/api", 0, &[("Content-Type", "application/json")]);
    assert!(allows(&advisory), "without strict mode it is only logged");
    assert!(code_and_line(&advisory).contains(&("agents_md.authentication_missing".to_owned(), Some(4))));
    let with_cookie = eval(&s, "POST", "/api", 0, &[("Cookie", "session=1")]);
    assert!(code_and_line(&with_cookie).contains(&("agents_md.authentication_present".to_owned(), Some(4))));

    let denied = strict("POST", &[("Content-Type", "application/json")]);
    assert_eq!(denied.opinion, Opinion::Deny);
    assert_eq!(code_and_line(&denied), [("agents_md.authentication_missing".to_owned(), Some(4))]);
    assert!(allows(&strict("GET", &[])), "strict mode denies writes only");
    assert!(allows(&strict("POST", &[("Authorization", "Bearer x")])));

    let optional = policy("## Identity\n- site: example.com\n## Trust Requirements\n- authentication: optional\n");
    let headers = Headers::default();
    let v = optional.evaluate(&request("POST", "example.com", "/api", 0, &headers), true);
    assert!(v.reasons.iter().all(|r| !r.code.as_str().starts_with("agents_md.authentication")), "{v:?}");
}

#[test]
fn semantics_r9_globs_match_as_written_and_decoded() {
    let s = policy(
        "## Identity\n- site: example.com\n## Restrictions\n- disallowed-paths: /%7Ejoe/*\n\
         - require-human-approval: /%6Frders/*\n## Allowed Actions\n- access-api: true\n",
    );
    // The decoded glob stops the plain spelling, citing the line as written.
    for path in ["/~joe/x", "/%7ejoe/x"] {
        let v = eval(&s, "GET", path, 0, &[]);
        let cited = v.reasons.first().map(|r| (r.code.as_str(), r.line, r.rule.as_ref()));
        assert_eq!(v.opinion, Opinion::Deny, "{path}");
        assert_eq!(cited, Some(("agents_md.disallowed_path", Some(4), "disallowed-paths: /%7Ejoe/*")), "{path}");
    }
    let v = eval(&s, "POST", "/orders/new", 0, &[]);
    assert_eq!((v.opinion, v.reasons[0].code.as_str()), (Opinion::NeedsApproval, "agents_md.requires_human_approval"));
    assert_eq!(eval(&s, "GET", "/~jane/x", 0, &[]).opinion, Opinion::NoOpinion);
}

#[test]
fn c4_agents_md_policy_kept_for_an_hour_after_a_failed_refetch() {
    let policy = from_fetch(&ok(b"# AGENTS.md\n\n## Identity\n- site: example.com\n", None));
    assert!(!policy.falls_through());
    let failed = || from_fetch(&status(502));
    let kept = refresh::<AgentsMd>(previous(policy.clone(), 20 * MINUTE, HOUR), failed(), 5 * MINUTE);
    assert!(kept.kept_stale && !kept.state.falls_through());
    assert_eq!(kept.ttl, 5 * MINUTE);
    let last = refresh::<AgentsMd>(previous(policy.clone(), 58 * MINUTE, HOUR), failed(), 5 * MINUTE);
    assert_eq!(last.ttl, 2 * MINUTE);
    let gone = refresh::<AgentsMd>(previous(policy.clone(), HOUR, HOUR), failed(), 5 * MINUTE);
    assert!(gone.state.falls_through() && !gone.kept_stale);
    let removed = refresh::<AgentsMd>(previous(policy, MINUTE, HOUR), from_fetch(&status(404)), HOUR);
    assert!(removed.state.falls_through() && !removed.kept_stale, "a 404 removes the policy");
}
