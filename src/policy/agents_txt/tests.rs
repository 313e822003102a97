//! agents.txt unit tests: SEMANTICS §6.2 rows, the conformance corpus run in-process,
//! hostile input, and properties of `fix_hash`.

use proptest::prelude::*;

use super::*;
use crate::policy::test_support::{
    HOUR, MINUTE, allows, cases, corpus, ok, previous, read, refresh, request, status, strings,
};
use crate::policy::{FetchError, Headers, Severity};

const BASIC: &str = "# version: 1.0\n*e37fd0bbf5b647010a78772b8755ffa92efe6aa07b2bb0d373b2a61adfc9435a\n/status ALLOW\n\
                     /dashboard ALLOW limit=50\n/admin DISALLOW\n";

fn state(body: &str) -> AgentsTxtState {
    from_fetch(&ok(body.as_bytes(), Some("text/plain")))
}

/// A file with a correct hash line prepended to the given directive lines.
fn signed(directives: &str) -> String {
    String::from_utf8(fix_hash(directives.as_bytes())).expect("fix_hash keeps UTF-8 input UTF-8")
}

fn verdict(state: &AgentsTxtState, method: &str, path: &str) -> SourceVerdict {
    let headers = Headers::default();
    state.evaluate(&request(method, "example.com", path, 0, &headers))
}

fn codes(state: &AgentsTxtState) -> Vec<String> {
    state.report().diagnostics.into_iter().map(|d| d.code).collect()
}

#[test]
fn draft_example_directives_verify_and_decide_by_rule() {
    let s = state(BASIC);
    assert_eq!(s.status(), PolicyStatus::Valid);
    assert_eq!(s.report().digest.as_deref(), Some("e37fd0bbf5b647010a78772b8755ffa92efe6aa07b2bb0d373b2a61adfc9435a"));
    assert_eq!(s.metadata(), &[Metadata { line: 1, key: "version".into(), value: "1.0".into() }]);

    let v = verdict(&s, "POST", "/admin/users");
    assert_eq!(v.opinion, Opinion::Deny);
    assert_eq!(v.reasons[0].code, "agents_txt.disallow");
    assert_eq!(v.reasons[0].line, Some(5));
    assert_eq!(&*v.reasons[0].rule, "/admin DISALLOW");
    assert_eq!(v.reasons[0].digest, s.report().digest);

    let v = verdict(&s, "GET", "/dashboard/x");
    assert_eq!(v.opinion, Opinion::Allow);
    assert_eq!(v.reasons[0].code, "agents_txt.allow");
    assert_eq!(v.limits.len(), 1);
    assert_eq!(v.limits[0].kind, LimitKind::Rate { requests: 50, window_s: 60 });
    assert_eq!(v.limits[0].scope, LimitScope::Rule { line: 4 });
    assert_eq!(v.limits[0].reason.code, "agents_txt.limit");
    assert_eq!(&*v.limits[0].reason.rule, "/dashboard ALLOW limit=50");

    let v = verdict(&s, "GET", "/other");
    assert_eq!((v.opinion, v.reasons.len()), (Opinion::NoOpinion, 0), "B13: unmatched path is no opinion");
}

#[test]
fn semantics_b12_tie_resolves_to_disallow() {
    for body in ["/x ALLOW\n/x DISALLOW\n", "/x DISALLOW\n/x ALLOW\n"] {
        let s = state(&signed(body));
        let v = verdict(&s, "GET", "/x/y");
        assert_eq!(v.opinion, Opinion::Deny, "{body:?}");
        assert_eq!(v.reasons[0].code, "agents_txt.disallow");
        assert_eq!(&*v.reasons[0].rule, "/x DISALLOW");
    }
}

#[test]
fn semantics_b12_longest_match_wins_and_b11_uses_rfc9309_patterns() {
    let s = state(&signed("/a ALLOW\n/a/b DISALLOW\n/a/b/c ALLOW\n/*.pdf$ DISALLOW\n/q?x= DISALLOW\n/ツ DISALLOW\n"));
    let table: &[(&str, Opinion, Option<u32>)] = &[
        ("/a/x", Opinion::Allow, Some(2)),
        ("/a/b/x", Opinion::Deny, Some(3)),
        ("/a/b/c/d", Opinion::Allow, Some(4)),
        ("/docs/x.pdf", Opinion::Deny, Some(5)),
        ("/docs/x.pdf?y", Opinion::NoOpinion, None),
        ("/q?x=1", Opinion::Deny, Some(6)),
        ("/%e3%83%84", Opinion::Deny, Some(7)),
    ];
    for (path, opinion, line) in table {
        let v = verdict(&s, "GET", path);
        assert_eq!(v.opinion, *opinion, "{path}");
        assert_eq!(v.reasons.first().and_then(|r| r.line), *line, "{path}");
    }
}

#[test]
fn semantics_b16_limit_zero_denies_and_limit_on_disallow_is_ignored() {
    let s = state(&signed("/a ALLOW limit=0\n/b DISALLOW limit=5\n"));
    let v = verdict(&s, "GET", "/a");
    assert_eq!(v.opinion, Opinion::Deny);
    assert_eq!((v.reasons[0].code.as_str(), v.reasons[0].line), ("agents_txt.limit_zero", Some(2)));
    let v = verdict(&s, "GET", "/b");
    assert_eq!((v.opinion, v.limits.len()), (Opinion::Deny, 0));
    assert!(codes(&s).contains(&"limit-on-disallow-ignored".to_owned()));
}

#[test]
fn semantics_r9_patterns_decide_as_written_and_decoded() {
    let s = state(&signed("/%7Ejoe/ DISALLOW\n/ ALLOW\n/%7Epub/ ALLOW limit=5\n/~x/ DISALLOW\n/%7Ex/ok ALLOW\n"));
    // The decoded DISALLOW stops the plain spelling, citing the line as written.
    let v = verdict(&s, "GET", "/~joe/x");
    assert_eq!(v.opinion, Opinion::Deny);
    assert_eq!((v.reasons[0].line, &*v.reasons[0].rule), (Some(2), "/%7Ejoe/ DISALLOW"));
    assert_eq!(verdict(&s, "GET", "/%7ejoe/x").opinion, Opinion::Deny, "and the escaped one, as written");
    // A decoded ALLOW never widens: as written, `/~x/ok` is disallowed by line 5.
    let v = verdict(&s, "GET", "/~x/ok");
    assert_eq!((v.opinion, v.reasons[0].line), (Opinion::Deny, Some(5)));
    // Both readings allow `/~pub/x`: the written one's reason, and the decoded one's limit.
    let v = verdict(&s, "GET", "/~pub/x");
    assert_eq!((v.opinion, v.reasons[0].line), (Opinion::Allow, Some(3)));
    assert_eq!(v.limits.len(), 1, "{v:?}");
    assert_eq!(v.limits[0].scope, LimitScope::Rule { line: 4 });
    assert_eq!(verdict(&s, "GET", "/%7Epub/x").limits.len(), 1, "the same limit, counted once");
}

#[test]
fn semantics_b19_restricted_denies_every_request_with_the_cause() {
    let table: &[(&str, &str, Option<u32>)] = &[
        ("/a ALLOW\n", "agents_txt.hash_missing", Some(1)),
        (
            "*0000000000000000000000000000000000000000000000000000000000000000\n/a ALLOW\n",
            "agents_txt.hash_mismatch",
            Some(1),
        ),
        (
            "*e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855 \\\n",
            "agents_txt.hash_line_syntax",
            Some(1),
        ),
        (
            "* e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n",
            "agents_txt.hash_line_syntax",
            Some(1),
        ),
        ("*e3b0\n", "agents_txt.hash_line_syntax", Some(1)),
    ];
    for (body, code, line) in table {
        let s = state(body);
        assert!(s.is_restricted(), "{body:?}");
        assert_eq!(s.status(), PolicyStatus::Malformed);
        for (method, path) in [("GET", "/"), ("HEAD", "/anything"), ("DELETE", "/a")] {
            let v = verdict(&s, method, path);
            assert_eq!(v.opinion, Opinion::Deny, "{body:?} {method} {path}");
            assert_eq!((v.reasons[0].code.as_str(), v.reasons[0].line), (*code, *line), "{body:?}");
            assert!(v.reasons[0].digest.is_some());
        }
    }
}

#[test]
fn semantics_b4_hash_mismatch_message_names_both_digests() {
    let s = state("*0000000000000000000000000000000000000000000000000000000000000000\n");
    let d = &s.report().diagnostics[0];
    assert_eq!((d.severity, d.line, d.code.as_str()), (Severity::Error, Some(1), "hash-mismatch"));
    assert!(d.message.contains("expected 0000000000000000"), "{}", d.message);
    assert!(d.message.contains("found e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
}

#[test]
fn semantics_b9_to_b17_directive_syntax_table() {
    // (directive line, error?, expected diagnostic code)
    let table: &[(&str, bool, &str)] = &[
        ("/a ALLOW # note", true, "directive-syntax"),
        ("/a ALLOW limit", true, "directive-syntax"),
        ("/a ALLOW =5", true, "directive-syntax"),
        ("/a ALLOW limit=5 limit=6", true, "directive-syntax"),
        ("/a ALLOW limit=5 LIMIT=6", true, "directive-syntax"),
        ("/a ALLOW limit=fast", true, "directive-syntax"),
        ("/a ALLOW limit=-1", true, "directive-syntax"),
        ("/a ALLOW limit=", true, "directive-syntax"),
        ("/a ALLOW x=a/b", true, "directive-syntax"),
        ("a ALLOW", true, "directive-syntax"),
        ("version: 1.0", true, "directive-syntax"),
        ("/a", true, "directive-syntax"),
        ("/a BLOCK", true, "directive-syntax"),
        ("*1111111111111111111111111111111111111111111111111111111111111111", true, "directive-syntax"),
        ("/a allow", false, "action-not-uppercase"),
        ("/a Disallow", false, "action-not-uppercase"),
        ("/a ALLOW foo=bar", false, "unknown-param:foo"),
        ("/a ALLOW x.y_z-1=%41~", false, "unknown-param:x.y_z-1"),
        ("/a\t \tALLOW   limit=3", false, ""),
        ("/a ALLOW limit=99999999999", false, "limit-too-large"),
        ("  /a ALLOW", false, "leading-whitespace"),
        ("/a ALLOW \t", false, ""),
    ];
    for (line, is_error, code) in table {
        let s = state(&signed(&format!("/ok ALLOW\n{line}\n")));
        assert_eq!(s.is_restricted(), *is_error, "{line:?}: {:?}", s.report().diagnostics);
        if !code.is_empty() {
            let d = s.report().diagnostics.into_iter().find(|d| d.code == *code);
            let d = d.unwrap_or_else(|| panic!("{line:?}: no {code} in {:?}", codes(&s)));
            assert_eq!(d.line, Some(3), "{line:?}");
        }
        if *is_error {
            assert_eq!(verdict(&s, "GET", "/ok").reasons[0].code, "agents_txt.directive_syntax", "{line:?}");
        }
    }
}

#[test]
fn semantics_b6_metadata_in_comments_has_no_effect() {
    let s = state(&signed("# grace-period: 3600\n/a DISALLOW\n"));
    assert!(s.metadata().iter().any(|m| m.key == "grace-period" && m.value == "3600"));
    assert_eq!(verdict(&s, "GET", "/a").opinion, Opinion::Deny);
}

#[test]
fn semantics_b24_hash_only_file_is_valid_with_no_opinion() {
    let s = state("*e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n");
    assert_eq!(s.status(), PolicyStatus::Valid);
    let v = verdict(&s, "POST", "/anything");
    assert_eq!((v.opinion, v.reasons.len()), (Opinion::NoOpinion, 0));
}

#[test]
fn semantics_b1_detection_table() {
    let table: &[(&[u8], Option<&str>, PolicyStatus, &str)] = &[
        (b"", None, PolicyStatus::NotApplicable, "empty"),
        (b"# only a comment\n\n  \t\n", None, PolicyStatus::NotApplicable, "empty"),
        (b"User-Agent: *\nDisallow: /\n", None, PolicyStatus::NotApplicable, "foreign-format"),
        (b"Name: Shop\n", None, PolicyStatus::NotApplicable, "foreign-format"),
        (b"/a ALLOWED\n", None, PolicyStatus::NotApplicable, "foreign-format"),
        (b"/a ALLOW\n", Some("text/html; charset=utf-8"), PolicyStatus::NotApplicable, "foreign-format"),
        (b"\x00\x01\xff\xfe", None, PolicyStatus::NotApplicable, "foreign-format"),
        (b"/a allow=x\n", None, PolicyStatus::Malformed, "hash-missing"),
        (b"/a\tDISALLOW\n", None, PolicyStatus::Malformed, "hash-missing"),
        (b"*\n", None, PolicyStatus::Malformed, "hash-line-syntax"),
    ];
    for (body, ct, want, code) in table {
        let s = from_fetch(&ok(body, *ct));
        assert_eq!(s.status(), *want, "{body:?}");
        assert!(codes(&s).iter().any(|c| c == code), "{body:?}: {:?}", codes(&s));
        if *want == PolicyStatus::NotApplicable {
            let v = verdict(&s, "POST", "/admin");
            assert_eq!((v.opinion, v.reasons.len()), (Opinion::NoOpinion, 0));
            assert_eq!(s.report().digest, None);
        }
    }
}

#[test]
fn semantics_b21_fetch_outcomes() {
    let table = [
        (status(404), PolicyStatus::Absent, false),
        (status(403), PolicyStatus::Absent, false),
        (status(503), PolicyStatus::Absent, true),
        (FetchOutcome::Failed(FetchError::Timeout), PolicyStatus::Absent, true),
        (FetchOutcome::Failed(FetchError::TooManyRedirects), PolicyStatus::Absent, true),
        (status(304), PolicyStatus::Absent, false),
        (FetchOutcome::not_found(), PolicyStatus::Absent, false),
    ];
    for (outcome, want, keeps) in table {
        let s = from_fetch(&outcome);
        assert_eq!((s.status(), s.keeps_cached_copy(), s.is_restricted()), (want, keeps, false), "{outcome:?}");
        assert_eq!(verdict(&s, "DELETE", "/").opinion, Opinion::NoOpinion);
    }
    let s = from_fetch(&status(502));
    assert_eq!(s.report().diagnostics[0].code, "unreachable");
}

#[test]
fn semantics_b23_over_cap_restricts_without_a_hash_check() {
    let mut body = BASIC.as_bytes().to_vec();
    body.resize(MAX_BYTES + 1, b'\n');
    let s = from_fetch(&FetchOutcome::Response {
        status: 200,
        headers: Headers::default(),
        body: body.clone(),
        over_cap: true,
    });
    assert!(s.is_restricted());
    assert_eq!(codes(&s), vec!["too-large"]);
    let v = verdict(&s, "GET", "/status");
    assert_eq!(
        (v.opinion, v.reasons[0].code.as_str(), v.reasons[0].line),
        (Opinion::Deny, "agents_txt.too_large", None)
    );
    assert_eq!(lint(&body), s.report().diagnostics);
}

#[test]
fn semantics_b8_invalid_utf8_restricts() {
    let s = state("");
    assert!(!s.is_restricted());
    let s =
        from_fetch(&ok(b"*e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n/a ALLOW \xff\n", None));
    assert!(s.is_restricted());
    let v = verdict(&s, "GET", "/");
    assert_eq!((v.reasons[0].code.as_str(), v.reasons[0].line), ("agents_txt.invalid_utf8", Some(2)));
}

#[test]
fn semantics_b2_b8_line_endings_and_bom_keep_the_digest() {
    let digest = state(BASIC).report().digest;
    for body in [BASIC.replace('\n', "\r\n"), BASIC.replace('\n', "\r"), format!("\u{feff}{BASIC}")] {
        let s = state(&body);
        assert_eq!((s.status(), s.report().digest), (PolicyStatus::Valid, digest.clone()), "{body:?}");
    }
}

#[test]
fn hostile_input_never_panics_and_stays_bounded() {
    let huge_line = format!("/{} ALLOW\n", "a".repeat(MAX_BYTES - 10));
    let many_bad = "/a ALLOW x\n".repeat(40_000);
    let bodies: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"\0\0\0".to_vec(),
        b"*\0".to_vec(),
        b"/\0 ALLOW\0".to_vec(),
        b"\xEF\xBB\xBF".to_vec(),
        b"\r\r\r\n\n".to_vec(),
        huge_line.into_bytes(),
        signed(&many_bad).into_bytes(),
        (0..=255u8).collect(),
    ];
    for body in &bodies {
        let s = from_fetch(&ok(body, None));
        assert!(s.report().diagnostics.len() <= crate::policy::text::REPORTED_FINDINGS + 1);
        let _ = verdict(&s, "GET", "/a");
        let _ = lint(body);
        let _ = fix_hash(body);
    }
    let s = from_fetch(&ok(bodies[7].as_slice(), None));
    assert!(s.is_restricted());
    assert_eq!(s.report().diagnostics.last().map(|d| d.code.as_str()), Some("too-many-findings"));
}

#[test]
fn fix_hash_repairs_the_draft_example() {
    let draft = read(&corpus("agents-txt").join("draft-example.agents.txt"));
    assert!(from_fetch(&ok(&draft, None)).is_restricted());
    let fixed = fix_hash(&draft);
    let s = from_fetch(&ok(&fixed, None));
    assert_eq!(s.status(), PolicyStatus::Valid, "{:?}", s.report().diagnostics);
    assert_eq!(s.report().digest.as_deref(), Some("e37fd0bbf5b647010a78772b8755ffa92efe6aa07b2bb0d373b2a61adfc9435a"));
    let before: Vec<&[u8]> = draft.split(|&b| b == b'\n').collect();
    let after: Vec<&[u8]> = fixed.split(|&b| b == b'\n').collect();
    assert_eq!(before.len(), after.len());
    let changed: Vec<usize> = (0..before.len()).filter(|&i| before[i] != after[i]).collect();
    assert_eq!(changed, vec![1], "only the hash line changes");
}

#[test]
fn fix_hash_inserts_before_the_first_directive_and_keeps_line_endings() {
    let fixed = fix_hash(b"\xEF\xBB\xBF# c\r\n/a ALLOW\r\n/b DISALLOW");
    let want_hash = crate::policy::text::sha256_hex(b"/a ALLOW\n/b DISALLOW");
    assert_eq!(fixed, format!("\u{feff}# c\r\n*{want_hash}\r\n/a ALLOW\r\n/b DISALLOW").into_bytes());
    assert_eq!(fix_hash(b""), b"*e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n");
    assert_eq!(fix_hash(b"# x"), b"# x\n*e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n");
    assert_eq!(fix_hash(b"User-agent: *\n"), b"User-agent: *\n", "a foreign file is left alone");
}

#[test]
fn lint_reports_every_finding_in_line_order() {
    let diags =
        lint(b"*E37FD0BBF5B647010A78772B8755FFA92EFE6AA07B2BB0D373B2A61ADFC9435X\n/a allow\n/b BLOCK\n/c ALLOW x\n");
    let got: Vec<(Option<u32>, &str)> = diags.iter().map(|d| (d.line, d.code.as_str())).collect();
    assert_eq!(
        got,
        vec![
            (Some(1), "hash-line-syntax"),
            (Some(2), "action-not-uppercase"),
            (Some(3), "directive-syntax"),
            (Some(4), "directive-syntax")
        ]
    );
    assert!(diags[2].message.starts_with("unknown action `BLOCK`"), "{}", diags[2].message);
}

/// Every check of `agents-txt/proposed/cases.json` and the two upstream examples, run
/// in-process the way `check_policy.py --strict` runs them through `explain`.
#[test]
fn conformance_agents_txt_proposed_cases() {
    let dir = corpus("agents-txt/proposed");
    let doc = cases(&dir.join("cases.json"));
    let mut failures = Vec::new();
    let mut checked = 0;
    let all =
        doc["cases"].as_array().into_iter().flatten().chain(doc["upstream_examples"].as_array().into_iter().flatten());
    for case in all {
        let file = case["file"].as_str().expect("every case names its file");
        let expect = &case["expect"];
        let s = from_fetch(&ok(&read(&dir.join(file)), case["content_type"].as_str()));
        let report = s.report();
        let fail = |what: String| format!("{file}: {what}");
        let want_status = match expect["verdict"].as_str() {
            Some("valid") => PolicyStatus::Valid,
            Some("restricted") => PolicyStatus::Malformed,
            Some("not_applicable") => PolicyStatus::NotApplicable,
            other => panic!("{file}: unknown verdict {other:?}"),
        };
        if report.status != want_status {
            failures.push(fail(format!("status {:?}, want {want_status:?}; {:?}", report.status, report.diagnostics)));
        }
        if let Some(digest) = expect["digest"].as_str()
            && report.digest.as_deref() != Some(digest)
        {
            failures.push(fail(format!("digest {:?}, want {digest}", report.digest)));
        }
        let diag_codes: Vec<&str> = report.diagnostics.iter().map(|d| d.code.as_str()).collect();
        for w in strings(expect, "warnings") {
            if !diag_codes.iter().any(|c| c.contains(&w)) {
                failures.push(fail(format!("no warning {w}; got {diag_codes:?}")));
            }
        }
        let mut checks = expect["checks"].as_array().cloned().unwrap_or_default();
        if checks.is_empty() {
            checks.push(
                serde_json::json!({"method": "GET", "path": "/", "allow": want_status != PolicyStatus::Malformed}),
            );
        }
        for (i, check) in checks.iter().enumerate() {
            checked += 1;
            let (method, path) = (check["method"].as_str().unwrap_or("GET"), check["path"].as_str().unwrap_or("/"));
            let v = verdict(&s, method, path);
            let want = check["allow"].as_bool().expect("agents-txt checks state allow");
            if allows(&v) != want {
                failures.push(fail(format!(
                    "check {i} {method} {path}: allowed={}, want {want}; {:?}",
                    allows(&v),
                    v.reasons
                )));
            }
            if let Some(reason) = expect["reason"].as_str() {
                let in_reasons = v.reasons.iter().any(|r| r.code.as_str().contains(&reason.replace('-', "_")));
                if !in_reasons && !diag_codes.iter().any(|c| c.contains(reason)) {
                    failures.push(fail(format!("check {i}: reason {reason} not in {:?} or {diag_codes:?}", v.reasons)));
                }
            }
            if let Some(limit) = check.get("limit") {
                let want = (limit["requests"].as_u64(), limit["window_s"].as_u64());
                let found = v.limits.iter().any(|l| match l.kind {
                    LimitKind::Rate { requests, window_s } => want == (Some(requests.into()), Some(window_s.into())),
                    LimitKind::Delay { .. } | LimitKind::Concurrent { .. } | LimitKind::Bytes { .. } => false,
                });
                if !found {
                    failures.push(fail(format!("check {i} {method} {path}: limit {limit} not in {:?}", v.limits)));
                }
            }
        }
    }
    assert!(checked >= 90, "only {checked} checks ran; is the corpus complete?");
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// One line of a well-formed file, for the properties below.
fn well_formed_line() -> impl Strategy<Value = String> {
    let directive = (
        "/[a-z0-9/._~%-]{0,12}\\*?[a-z]{0,3}\\$?(\\?[a-z]=[0-9])?",
        prop::sample::select(vec!["ALLOW", "DISALLOW", "allow", "Disallow"]),
        "[ \t]{1,3}",
        prop::option::of(prop::sample::select(vec!["limit=0", "limit=50", "foo=bar", "limit=7 x.y=%41"])),
    )
        .prop_map(|(path, action, sep, param)| match param {
            Some(p) => format!("{path}{sep}{action}{sep}{p}"),
            None => format!("{path}{sep}{action}"),
        });
    prop_oneof![4 => directive, 1 => "[ \t]*#[ -~]{0,20}", 1 => "[ \t]{0,3}"]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn fix_hash_output_of_well_formed_input_always_verifies(
        bom in any::<bool>(),
        old_hash in prop::option::of("\\*[0-9a-fA-F \\\\]{0,70}"),
        body in prop::collection::vec(well_formed_line(), 0..12),
        eol in prop::sample::select(vec!["\n", "\r\n", "\r"]),
    ) {
        let mut text = String::new();
        if bom { text.push('\u{feff}'); }
        if let Some(h) = &old_hash { text.push_str(h); text.push_str(eol); }
        for line in &body { text.push_str(line); text.push_str(eol); }
        let fixed = fix_hash(text.as_bytes());
        let s = from_fetch(&ok(&fixed, None));
        prop_assert_eq!(s.status(), PolicyStatus::Valid, "{:?} -> {:?}: {:?}", text, String::from_utf8_lossy(&fixed), s.report().diagnostics);
        prop_assert_eq!(fix_hash(&fixed), fixed.clone(), "fixing twice changes nothing");
    }

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..512), over_cap in any::<bool>()) {
        let s = from_fetch(&FetchOutcome::Response { status: 200, headers: Headers::default(), body: body.clone(), over_cap });
        let _ = verdict(&s, "GET", "/a/b?c");
        let _ = lint(&body);
        let _ = from_fetch(&ok(&fix_hash(&body), None));
    }

    #[test]
    fn arbitrary_agents_txt_shaped_text_never_panics(body in "(\\*[0-9a-f]{0,64}|/[ -~]{0,10}|[ \t#=a-zA-Z0-9%]{0,10}|\r|\n|\u{feff}){0,30}") {
        let s = from_fetch(&ok(body.as_bytes(), None));
        let _ = verdict(&s, "POST", "/");
        let fixed = fix_hash(body.as_bytes());
        let _ = lint(&fixed);
    }
}

// The stale rule (B20, B21).

/// A verified agents.txt (the digest of `/private DISALLOW`).
fn valid() -> AgentsTxtState {
    state(&signed("/private DISALLOW\n"))
}

fn fetched_503() -> AgentsTxtState {
    from_fetch(&status(503))
}

#[test]
fn b20_restricted_agents_txt_drops_a_valid_copy_for_the_negative_ttl() {
    assert_eq!(valid().status(), PolicyStatus::Valid);
    let broken = state("*0000\n/a ALLOW\n");
    assert!(broken.is_restricted());
    let refreshed = refresh::<AgentsTxt>(previous(valid(), MINUTE, HOUR), broken, 24 * HOUR);
    assert!(refreshed.state.is_restricted() && !refreshed.kept_stale);
    assert_eq!(refreshed.ttl, 5 * MINUTE, "agents_txt_negative_ttl, whatever the lifetime");
}

#[test]
fn b21_unreachable_agents_txt_keeps_a_valid_copy_within_its_lifetime() {
    let refreshed = refresh::<AgentsTxt>(previous(valid(), 10 * MINUTE, HOUR), fetched_503(), MINUTE);
    assert!(refreshed.kept_stale);
    assert_eq!(refreshed.state.status(), PolicyStatus::Valid);
    assert_eq!(refreshed.ttl, MINUTE);

    let near_end = refresh::<AgentsTxt>(previous(valid(), HOUR - MINUTE / 2, HOUR), fetched_503(), MINUTE);
    assert_eq!(near_end.ttl, MINUTE / 2, "never kept past one more lifetime");

    let expired = refresh::<AgentsTxt>(previous(valid(), HOUR, HOUR), fetched_503(), MINUTE);
    assert!(!expired.kept_stale);
    assert_eq!(expired.state.status(), PolicyStatus::Absent);
}

#[test]
fn b21_only_a_valid_copy_is_kept() {
    let not_applicable = from_fetch(&ok(b"<html>hi</html>", None));
    let refreshed = refresh::<AgentsTxt>(previous(not_applicable, MINUTE, HOUR), fetched_503(), MINUTE);
    assert!(!refreshed.kept_stale);
}
