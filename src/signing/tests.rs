use super::*;

/// RFC 9421 Appendix B.1.4's Ed25519 test key.
const RFC9421_KEY: &str = "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIJ+DYvh6SEqVTm50DFtMDoQikTmiCqirVv9mWG9qfSnF\n-----END PRIVATE KEY-----\n";

#[test]
fn the_signature_base_of_rfc_9421_b_2_6_signs_to_its_signature() {
    let components = [
        Component::new("\"date\"", "Tue, 20 Apr 2021 02:07:55 GMT".to_owned()),
        Component::new("\"@method\"", "POST".to_owned()),
        Component::new("\"@path\"", "/foo".to_owned()),
        Component::new("\"@authority\"", "example.com".to_owned()),
        Component::new("\"content-type\"", "application/json".to_owned()),
        Component::new("\"content-length\"", "18".to_owned()),
    ];
    let (base, input) = signature_base(&components, ";created=1618884473;keyid=\"test-key-ed25519\"");
    assert_eq!(
        base,
        "\"date\": Tue, 20 Apr 2021 02:07:55 GMT\n\"@method\": POST\n\"@path\": /foo\n\"@authority\": example.com\n\
         \"content-type\": application/json\n\"content-length\": 18\n\"@signature-params\": (\"date\" \"@method\" \
         \"@path\" \"@authority\" \"content-type\" \"content-length\");created=1618884473;keyid=\"test-key-ed25519\""
    );
    assert!(input.starts_with("(\"date\" \"@method\""), "{input}");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("rfc.pem");
    std::fs::write(&path, RFC9421_KEY).expect("write the key");
    let pair = key::load(&path).expect("the RFC's key parses (PKCS#8 v1, PEM)");
    let signature = base64::engine::general_purpose::STANDARD.encode(pair.sign(base.as_bytes()));
    assert_eq!(signature, "wqcAqbmYJ2ji2glfAMaRy4gruYYnx2nEFN2HN6jrnDnQCK1u02Gb04v9EDgwUPiu4A0w6vuQv5lIp5WPpBKRCw==");
}

#[test]
fn the_jwk_thumbprint_is_rfc_8037s_example() {
    // RFC 8037 Appendix A.3: the thumbprint of A.2's public key.
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo")
        .expect("the RFC's x");
    assert_eq!(thumbprint(&x), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
    let jwk = jwk(&x);
    assert_eq!(jwk["kty"], "OKP");
    assert_eq!(jwk["crv"], "Ed25519");
    assert_eq!(jwk["kid"], "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
}

#[test]
fn sf_strings_are_quoted_and_escaped() {
    assert_eq!(base::sf_string("https://a.example"), "\"https://a.example\"");
    assert_eq!(base::sf_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
}

#[test]
fn a_signed_request_carries_the_three_headers_and_no_agent_sent_ones() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let pair = load_or_create(&dir.path().join("k.pk8")).expect("a new key");
    let directory = "https://agents.example.com/.well-known/http-message-signatures-directory";
    let signer = Signer::new(pair, directory).expect("an https URL");
    let mut request = Request::get("https://site.test:443/a/b?q=1")
        .header("signature", "sig1=:Zm9yZ2Vk:")
        .header("signature-input", "sig1=();created=1")
        .body(())
        .expect("a request");
    signer.sign(&mut request, UNIX_EPOCH + Duration::from_secs(1_700_000_000));
    let headers = request.headers();
    assert_eq!(headers[SIGNATURE_AGENT], format!("sig1=\"{directory}\"").as_str(), "sent exactly as configured");
    let input = headers[SIGNATURE_INPUT].to_str().expect("ASCII");
    assert!(
        input.starts_with(&format!(
            "sig1=(\"@authority\" \"@method\" \"@path\" \"signature-agent\";key=\"sig1\");created=1700000000;expires=1700000300;keyid=\"{}\";alg=\"ed25519\";nonce=\"",
            signer.keyid()
        )),
        "{input}"
    );
    assert!(input.ends_with(";tag=\"web-bot-auth\""), "{input}");
    assert_eq!(headers.get_all(SIGNATURE).iter().count(), 1);
    let signature = headers[SIGNATURE].to_str().expect("ASCII");
    assert!(signature.starts_with("sig1=:") && signature.ends_with(':') && !signature.contains("Zm9yZ2Vk"));
    assert_eq!(authority("https", "Site.Test", Some(443)), "site.test");
    assert_eq!(authority("http", "site.test", Some(8080)), "site.test:8080");
}

#[test]
fn a_key_is_created_once_owner_only_and_loaded_after() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = generated_key_path(dir.path(), Some("research"));
    assert_eq!(path, dir.path().join("agent-keys/research.pk8"));
    let first = load_or_create(&path).expect("created");
    let second = load_or_create(&path).expect("loaded");
    assert_eq!(first.public_key().as_ref(), second.public_key().as_ref());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).expect("the key file").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let dir_mode = std::fs::metadata(path.parent().expect("a directory")).expect("the key directory");
        assert_eq!(dir_mode.permissions().mode() & 0o777, 0o700);
    }
    std::fs::write(&path, b"not a key").expect("overwrite");
    let err = load_or_create(&path).expect_err("garbage");
    assert!(err.to_string().contains("is not an Ed25519 PKCS#8 private key"), "{err}");
}

#[test]
fn signing_problems_name_the_key_and_the_fix() {
    use crate::config::testing::problems;
    let found = problems(
        "[limits]\nstore = \"redis\"\n[agent]\nsigning = { signature_agent = \"http://a.example\" }\n\
         [[agents]]\nid = \"a/b\"\ntoken = \"t\"\npass_signatures = true\nsigning = { signature_agent = \"https://a.example/keys?v=1\" }\n",
    )
    .join("\n");
    for expected in [
        "[agent] signing.signature_agent = \"http://a.example\": must be an https URL",
        "[agent] signing: no key_file, so each replica would create its own key",
        "[[agents]] #1 signing.signature_agent = \"https://a.example/keys?v=1\": a key directory URL has no query",
        "[[agents]] #1 signing: no key_file, and the id \"a/b\" cannot name the generated key file",
        "[[agents]] #1 pass_signatures = true: has no effect with signing",
    ] {
        assert!(found.contains(expected), "{expected:?} missing from:\n{found}");
    }
    for url in ["https://a.example", "https://a.example/.well-known/http-message-signatures-directory"] {
        let fine = format!("[agent]\nsigning = {{ signature_agent = {url:?}, key_file = \"k.pk8\" }}\n");
        assert!(problems(&fine).is_empty(), "{:?}", problems(&fine));
    }
    // One fleet through the policy store alone also needs one key.
    let cache_only =
        problems("[cache]\nstore = \"redis\"\n[agent]\nsigning = { signature_agent = \"https://a.example\" }\n");
    assert!(cache_only.iter().any(|p| p.contains("each replica would create its own key")), "{cache_only:?}");
}
