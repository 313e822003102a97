//! Web Bot Auth (docs/signing.md) through the real `agentgate run` binary: a signing agent's
//! requests reach a real origin (MITM'd HTTPS and plain HTTP) with `Signature-Agent`,
//! `Signature-Input` and `Signature`, which an independent verifier (`signing_verify.py`:
//! Python's `cryptography`, the signature base rebuilt from what the origin received) accepts
//! with the keys `agentgate keys` prints, and rejects once `@authority` changes; an agent's
//! own signature headers never reach the origin unless the operator passes them for an agent
//! without a key; a rotated key is picked up by reload and listed beside the old one. A
//! `Signature-Agent` naming the key directory's URL is sent as written, and the verifier
//! fetches the key set from exactly that URL.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tokio::io::AsyncWriteExt as _;
use tokio::process::Command;

use crate::reload::{base_config, replace_file};
use crate::support::binary::{Agentgate, WAIT_LIMIT};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::tools::{self, PYTHON3_CRYPTOGRAPHY};
use crate::support::wait::eventually_within;
use crate::support::{TestResult, log};

const VERIFIER: &str = include_str!("signing_verify.py");
const SIGNATURE_AGENT: &str = "https://agents.example.com";

/// python3 with `cryptography`, or an error naming the package to install.
pub(crate) async fn verifier() -> TestResult<PathBuf> {
    let python = tools::need(PYTHON3_CRYPTOGRAPHY)?;
    let imported = Command::new(&python).args(["-c", "import cryptography"]).status().await?;
    if !imported.success() {
        return Err("python3's cryptography package is missing: apt-get install python3-cryptography".into());
    }
    Ok(python)
}

/// What the origin's `/seen` saw of a GET of `url` through `client`, with extra `headers`.
async fn seen(client: &reqwest::Client, url: &str, headers: &[(&str, &str)]) -> TestResult<Value> {
    let request = headers.iter().fold(client.get(url), |request, (name, value)| request.header(*name, *value));
    let response = request.send().await?;
    assert_eq!(response.status(), 200, "{url}");
    Ok(serde_json::from_str(&response.text().await?)?)
}

/// Every value of header `name` the origin saw.
fn values(seen: &Value, name: &str) -> Vec<String> {
    seen["headers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|pair| pair[0] == name)
        .filter_map(|pair| pair[1].as_str().map(str::to_owned))
        .collect()
}

/// The `keyid` of the signature the origin saw, read from `Signature-Input` by hand.
fn keyid(seen: &Value) -> TestResult<String> {
    let input = values(seen, "signature-input").join(", ");
    let start = input.find("keyid=\"").ok_or_else(|| format!("no keyid in {input:?}"))? + "keyid=\"".len();
    let end = input[start..].find('"').ok_or("unterminated keyid")?;
    Ok(input[start..start + end].to_owned())
}

/// `agentgate keys --config <config>`, parsed.
async fn keys(config: &Path) -> TestResult<Value> {
    let output = Command::new(env!("CARGO_BIN_EXE_agentgate")).arg("keys").arg("--config").arg(config).output().await?;
    assert!(output.status.success(), "agentgate keys: {}", String::from_utf8_lossy(&output.stderr));
    Ok(serde_json::from_slice(&output.stdout)?)
}

/// The kids of a JWK set, after checking each entry is an Ed25519 OKP key.
fn kids(set: &Value) -> Vec<String> {
    let keys = set["keys"].as_array().expect("a JWK set has a keys array");
    keys.iter()
        .map(|key| {
            assert_eq!((key["kty"].as_str(), key["crv"].as_str()), (Some("OKP"), Some("Ed25519")), "{key}");
            assert!(key["x"].as_str().is_some_and(|x| x.len() == 43), "a 32-byte key in base64url: {key}");
            key["kid"].as_str().expect("a kid").to_owned()
        })
        .collect()
}

/// The independent verifier's verdict on `seen` with the keys of `jwks`, `@authority`
/// replaced by `authority` when given.
async fn verify(python: &Path, seen: &Value, jwks: &Value, authority: Option<&str>) -> TestResult<Value> {
    run_verifier(python, &serde_json::json!({"seen": seen, "jwks": jwks, "authority": authority})).await
}

/// The independent verifier's verdict on `input` (see `signing_verify.py`).
async fn run_verifier(python: &Path, input: &Value) -> TestResult<Value> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("verify.py");
    std::fs::write(&script, VERIFIER)?;
    let mut child = Command::new(python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child.stdin.take().ok_or("no stdin")?.write_all(input.to_string().as_bytes()).await?;
    let output = child.wait_with_output().await?;
    assert!(output.status.success(), "the verifier crashed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or_default()
}

/// The verdict must accept, with `created` within a minute of now and `expires` after now.
fn assert_accepted(verdict: &Value, what: &str) {
    assert_eq!(verdict["ok"], true, "{what}: {verdict}");
    let created = verdict["created"].as_u64().expect("created");
    let expires = verdict["expires"].as_u64().expect("expires");
    assert!(created.abs_diff(now()) <= 60, "{what}: created {created} is now");
    assert!(expires > now() && expires - created <= 300, "{what}: expires {expires} after now, a few minutes at most");
    assert_eq!(verdict["tag"], "web-bot-auth");
    assert_eq!(verdict["components"], serde_json::json!(["@authority", "@method", "@path", "signature-agent"]));
}

#[tokio::test]
#[ignore = "needs python3-cryptography: run by scripts/test.sh"]
async fn a_signing_agents_request_arrives_signed_and_an_independent_verifier_accepts_it() -> TestResult {
    let python = verifier().await?;
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let https = Origin::https_site(&ca, Site::new()).await?;
    let http = Origin::http_site(Site::new()).await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentgate.toml");
    let text =
        format!("{}[agent]\nsigning = {{ signature_agent = {SIGNATURE_AGENT:?} }}\n", base_config(dir.path(), &ca));
    std::fs::write(&config, text)?;
    let agentgate = Agentgate::start(dir.path(), &config, "info").await?;
    // The key was created at start, owner-only, beside the CA; `keys` reads the same one.
    let key_file = dir.path().join("ca/agent-keys/default.pk8");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&key_file)?.permissions().mode() & 0o777, 0o600);
    }
    let jwks = keys(&config).await?;
    let client = agentgate.client()?;

    for url in [https.url("/seen?q=1"), http.url("/seen")] {
        let seen = seen(&client, &url, &[]).await?;
        assert_eq!(values(&seen, "signature-agent"), [format!("sig1={SIGNATURE_AGENT:?}")], "{url}");
        assert_eq!(values(&seen, "signature").len(), 1, "{url}");
        let verdict = verify(&python, &seen, &jwks, None).await?;
        assert_accepted(&verdict, &url);
        assert_eq!(kids(&jwks), [keyid(&seen)?], "the published kid is the keyid used");

        // Not vacuous: the same headers for another authority do not verify.
        let tampered = verify(&python, &seen, &jwks, Some("elsewhere.example")).await?;
        assert_eq!(tampered["ok"], false, "{url}: a changed @authority is rejected: {tampered}");
        assert_eq!(tampered["error"], "signature does not verify");
    }

    agentgate.stop().await?;
    let records = log::read(&dir.path().join("decisions.jsonl"))?;
    let signed: Vec<&Value> =
        records.iter().filter(|r| r["url.full"].as_str().is_some_and(|u| u.contains("/seen"))).collect();
    assert_eq!(signed.len(), 2);
    for record in signed {
        assert_eq!(record["agentgate.signature.keyid"].as_str(), Some(kids(&jwks)[0].as_str()), "{record}");
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs python3-cryptography: run by scripts/test.sh"]
async fn the_signature_agent_is_the_directory_url_as_configured_and_a_verifier_fetches_the_keys_there() -> TestResult {
    let python = verifier().await?;
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    // The key directory's host: its port is known before the config is written.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let path = "/.well-known/http-message-signatures-directory";
    let directory = format!("https://localhost:{}{path}", listener.local_addr()?.port());
    let dir = tempfile::tempdir()?;
    let key_file = dir.path().join("agent.pk8");
    agentgate::signing::load_or_create(&key_file)?;
    let config = dir.path().join("agentgate.toml");
    let signing = format!("[agent]\nsigning = {{ signature_agent = {directory:?}, key_file = {key_file:?} }}\n");
    std::fs::write(&config, format!("{}{signing}", base_config(dir.path(), &ca)))?;
    let jwks = keys(&config).await?;
    let keys_site = Site::new().serve(path, 200, &[("content-type", "application/json")], jwks.to_string());
    let keys_host = Origin::on_listener(listener, Some(ca.origin_server_config()?), keys_site)?;

    let site = Origin::https_site(&ca, Site::new()).await?;
    let agentgate = Agentgate::start(dir.path(), &config, "info").await?;
    let seen = seen(&agentgate.client()?, &site.url("/seen"), &[]).await?;
    assert_eq!(values(&seen, "signature-agent"), [format!("sig1={directory:?}")], "sent exactly as configured");
    let input = serde_json::json!({"seen": seen, "directory_cafile": ca.pem_path});
    let verdict = run_verifier(&python, &input).await?;
    assert_accepted(&verdict, "keys fetched from the directory URL");
    assert_eq!(verdict["directory"], Value::from(directory.clone()), "{verdict}");
    assert_eq!(keys_host.hits(path), 1, "the verifier fetched the key set from exactly that URL");
    agentgate.stop().await?;
    Ok(())
}

#[tokio::test]
async fn an_agent_cannot_forge_a_signature_and_an_agent_without_a_key_sends_none() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentgate.toml");
    let text = format!(
        "{}[[agents]]\nid = \"signer\"\ntoken = \"s\"\nsigning = {{ signature_agent = {SIGNATURE_AGENT:?} }}\n\
         [[agents]]\nid = \"plain\"\ntoken = \"p\"\n[[agents]]\nid = \"passer\"\ntoken = \"q\"\npass_signatures = true\n",
        base_config(dir.path(), &ca)
    );
    std::fs::write(&config, text)?;
    let agentgate = Agentgate::start(dir.path(), &config, "info").await?;
    let forged = [
        ("signature", "sig1=:Zm9yZ2Vk:"),
        ("signature-input", "sig1=(\"@authority\");created=1;keyid=\"forged\""),
        ("signature-agent", "sig1=\"https://forged.example\""),
    ];
    let url = origin.url("/seen");

    let signer = seen(&agentgate.client_as("signer", "s")?, &url, &forged).await?;
    for (name, value) in forged {
        assert!(
            !values(&signer, name).iter().any(|v| v.contains(value)),
            "{name} forged by the agent reached the origin"
        );
        assert_eq!(values(&signer, name).len(), 1, "only agentgate's {name}");
    }
    assert_eq!(values(&signer, "signature-agent"), [format!("sig1={SIGNATURE_AGENT:?}")]);
    // `agentgate keys --agent` publishes the key the proxy signs with.
    let output = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["keys", "--agent", "signer", "--config"])
        .arg(&config)
        .output()
        .await?;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let jwks: Value = serde_json::from_slice(&output.stdout)?;
    assert_eq!(kids(&jwks), [keyid(&signer)?]);

    let plain = seen(&agentgate.client_as("plain", "p")?, &url, &forged).await?;
    for (name, _) in forged {
        assert!(values(&plain, name).is_empty(), "an agent without a key sends no {name}: {plain}");
    }
    let passer = seen(&agentgate.client_as("passer", "q")?, &url, &forged).await?;
    for (name, value) in forged {
        assert_eq!(values(&passer, name), [value], "pass_signatures lets the agent's own {name} through");
    }

    let unknown = Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["keys", "--agent", "plain", "--config"])
        .arg(&config)
        .output()
        .await?;
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("no agent \"plain\" with a signing table"));
    agentgate.stop().await?;
    let records = log::read(&dir.path().join("decisions.jsonl"))?;
    let keyids: Vec<(&str, Option<&str>)> = records
        .iter()
        .filter(|r| r["url.full"].as_str().is_some_and(|u| u.contains("/seen")))
        .map(|r| (r["agentgate.agent"].as_str().unwrap_or_default(), r["agentgate.signature.keyid"].as_str()))
        .collect();
    let signed = keyid(&signer)?;
    assert_eq!(keyids, [("signer", Some(signed.as_str())), ("plain", None), ("passer", None)]);
    Ok(())
}

/// Writes a new Ed25519 key to `path` with Python's `cryptography` (PKCS#8; PEM or DER).
async fn new_key(python: &Path, path: &Path, pem: bool) -> TestResult {
    let encoding = if pem { "PEM" } else { "DER" };
    let script = format!(
        "import sys\nfrom cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey\n\
         from cryptography.hazmat.primitives import serialization as s\n\
         open(sys.argv[1], 'wb').write(Ed25519PrivateKey.generate().private_bytes(s.Encoding.{encoding}, s.PrivateFormat.PKCS8, s.NoEncryption()))\n"
    );
    let status = Command::new(python).arg("-c").arg(script).arg(path).status().await?;
    assert!(status.success(), "python wrote a key");
    Ok(())
}

/// Asks through `client` until the signature's keyid is none of `old`, then returns what the
/// origin saw (a reload is acted on a moment after the file changes).
async fn until_rekeyed(client: &reqwest::Client, url: &str, old: &[&str]) -> TestResult<Value> {
    eventually_within(WAIT_LIMIT, "requests signed with a new key", async || {
        let seen = seen(client, url, &[]).await?;
        let id = keyid(&seen)?;
        if old.contains(&id.as_str()) { Err(format!("still signed with {id}").into()) } else { Ok(seen) }
    })
    .await
}

#[tokio::test]
#[ignore = "needs python3-cryptography: run by scripts/test.sh"]
async fn a_rotated_key_is_picked_up_by_reload_and_the_directory_lists_old_and_new() -> TestResult {
    let python = verifier().await?;
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let dir = tempfile::tempdir()?;
    let (first, second) = (dir.path().join("first.pem"), dir.path().join("second.pk8"));
    new_key(&python, &first, true).await?;
    let config = dir.path().join("agentgate.toml");
    let base = base_config(dir.path(), &ca);
    let signing = |key_file: &Path, previous: &[&Path]| {
        format!(
            "{base}[agent]\nsigning = {{ signature_agent = {SIGNATURE_AGENT:?}, key_file = {key_file:?}, previous_key_files = {previous:?} }}\n"
        )
    };
    std::fs::write(&config, signing(&first, &[]))?;
    let agentgate = Agentgate::start(dir.path(), &config, "info").await?;
    let client = agentgate.client()?;
    let url = origin.url("/seen");
    let before = seen(&client, &url, &[]).await?;
    let jwks = keys(&config).await?;
    assert_accepted(&verify(&python, &before, &jwks, None).await?, "the first key");
    let old = keyid(&before)?;

    // A new key file, the old one kept in the directory for the overlap: the config edit reloads.
    new_key(&python, &second, false).await?;
    replace_file(&config, &signing(&second, &[&first]))?;
    let after = until_rekeyed(&client, &url, &[&old]).await?;
    let new = keyid(&after)?;
    let jwks = keys(&config).await?;
    assert_eq!(kids(&jwks), [new.clone(), old.clone()], "the directory lists the new key and the old one");
    assert_accepted(&verify(&python, &after, &jwks, None).await?, "the new key");

    // The key file replaced in place (same path, same config): SIGHUP picks up its key.
    let replacement = dir.path().join("third.pk8");
    new_key(&python, &replacement, false).await?;
    std::fs::rename(&replacement, &second)?;
    agentgate.signal("HUP").await?;
    let third = until_rekeyed(&client, &url, &[&old, &new]).await?;
    let jwks = keys(&config).await?;
    assert_eq!(kids(&jwks), [keyid(&third)?, old], "the replaced key and the overlap's old one");
    assert_accepted(&verify(&python, &third, &jwks, None).await?, "the replaced key");

    // A key file that cannot be read rejects the reload, naming it; the running key stays.
    let missing = dir.path().join("missing.pk8");
    replace_file(&config, &signing(&missing, &[&first]))?;
    agentgate.logged(&["config reload rejected", "missing.pk8"], 1).await?;
    assert_eq!(keyid(&seen(&client, &url, &[]).await?)?, keyid(&third)?);
    agentgate.stop().await?;
    Ok(())
}
