//! The container files, without a container engine (none runs here): `docker/trust-ca.sh`
//! run with `sh` against temporary directories laid out like a Debian and an Alpine root,
//! with a stub `update-ca-certificates` first on `PATH` that records its call (a test seam
//! for a distro tool) and adds the local certificates to the bundle as the real one does;
//! the CA from a file and fetched through the real proxy with curl; and `docker/compose.yml`
//! and the `Dockerfile` read for what the docs promise.

use std::path::{Path, PathBuf};
use std::process::Output;

use yaml_rust2::{Yaml, YamlLoader};

use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The stub: records its arguments in `$ROOT/update-ca-certificates.args`, then appends the
/// local certificates to the bundle.
const STUB: &str = r#"#!/bin/sh
printf '%s\n' "$@" > "$ROOT/update-ca-certificates.args"
mkdir -p "$ROOT/etc/ssl/certs"
cat "$ROOT"/usr/local/share/ca-certificates/*.crt >> "$ROOT/etc/ssl/certs/ca-certificates.crt"
echo "1 added, 0 removed; done."
"#;

/// A temporary root with `marker` (`etc/debian_version` or `etc/alpine-release`), and a
/// directory holding the stub, for `PATH`.
fn fake_root(marker: &str) -> TestResult<(tempfile::TempDir, tempfile::TempDir)> {
    let root = tempfile::tempdir()?;
    std::fs::create_dir_all(root.path().join("etc/ssl/certs"))?;
    std::fs::write(root.path().join(marker), "12.0\n")?;
    std::fs::write(root.path().join("etc/ssl/certs/ca-certificates.crt"), "# system roots\n")?;
    let bin = tempfile::tempdir()?;
    let stub = bin.path().join("update-ca-certificates");
    std::fs::write(&stub, STUB)?;
    let mut permissions = std::fs::metadata(&stub)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&stub, permissions)?;
    Ok((root, bin))
}

/// `sh docker/trust-ca.sh ARGS` with `ROOT`, the stub first on `PATH`, no proxy variables
/// but those in `env`.
async fn trust_ca(root: &Path, bin: &Path, args: &[&str], env: &[(&str, &str)]) -> TestResult<Output> {
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut command = tokio::process::Command::new("sh");
    command.arg(repo("docker/trust-ca.sh")).args(args).env("ROOT", root).env("PATH", path);
    for name in ["http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "AGENTGATE_CA_URL", "no_proxy", "NO_PROXY"] {
        command.env_remove(name);
    }
    command.envs(env.iter().copied());
    Ok(command.output().await?)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const EXPORTS: &str = "\
export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
export REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
export CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
export GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt
export NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/agentgate-ca.crt
";

#[tokio::test]
async fn trust_ca_installs_a_ca_file_into_a_debian_root_and_prints_the_exports() -> TestResult {
    let ca = TestCa::new("agentgate test CA")?;
    let (root, bin) = fake_root("etc/debian_version")?;
    let out = trust_ca(root.path(), bin.path(), &[&ca.pem_path.display().to_string()], &[]).await?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), EXPORTS, "only the exports on stdout: {}", text(&out.stderr));

    let installed = root.path().join("usr/local/share/ca-certificates/agentgate-ca.crt");
    assert_eq!(std::fs::read_to_string(&installed)?, ca.pem);
    let bundle = std::fs::read_to_string(root.path().join("etc/ssl/certs/ca-certificates.crt"))?;
    assert!(bundle.starts_with("# system roots\n") && bundle.contains(&ca.pem), "{bundle}");
    // Debian's tool was told every directory under ROOT.
    let args = std::fs::read_to_string(root.path().join("update-ca-certificates.args"))?;
    let local = format!("--localcertsdir\n{}/usr/local/share/ca-certificates\n", root.path().display());
    let etc = format!("--etccertsdir\n{}/etc/ssl/certs\n", root.path().display());
    assert!(args.contains(&local) && args.contains(&etc), "{args}");
    Ok(())
}

#[tokio::test]
async fn trust_ca_fetches_the_ca_through_the_proxy_into_an_alpine_root() -> TestResult {
    let ca = TestCa::new("agentgate test CA")?;
    let origin = Origin::http_site(Site::new().serve(
        "/ca.pem",
        200,
        &[("content-type", "application/x-pem-file")],
        ca.pem.clone(),
    ))
    .await?;
    let proxy = TestProxy::start(&ca).await?;
    let (root, bin) = fake_root("etc/alpine-release")?;
    let url = origin.url("/ca.pem");
    let proxy_url = proxy.url();
    let env = [("AGENTGATE_CA_URL", url.as_str()), ("HTTP_PROXY", proxy_url.as_str())];
    let out = trust_ca(root.path(), bin.path(), &[], &env).await?;
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), EXPORTS);
    let installed = root.path().join("usr/local/share/ca-certificates/agentgate-ca.crt");
    assert_eq!(std::fs::read_to_string(installed)?, ca.pem);
    // Alpine's tool takes no directories: called bare.
    assert_eq!(std::fs::read_to_string(root.path().join("update-ca-certificates.args"))?, "\n");
    // The fetch went through agentgate (uppercase HTTP_PROXY was enough) and was recorded.
    assert_eq!(origin.hits("/ca.pem"), 1);
    let records = proxy.finish().await?;
    let fetched = crate::support::log::for_request(&records, "GET", "/ca.pem");
    assert_eq!(fetched.len(), 1, "{records:#?}");
    assert_eq!(fetched[0]["event.action"], "allow");
    Ok(())
}

#[tokio::test]
async fn trust_ca_refuses_what_is_not_a_certificate_and_installs_nothing() -> TestResult {
    let (root, bin) = fake_root("etc/debian_version")?;
    let bogus = root.path().join("bogus.pem");
    std::fs::write(&bogus, "<html>not found</html>\n")?;
    let out = trust_ca(root.path(), bin.path(), &[&bogus.display().to_string()], &[]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "", "nothing to eval");
    assert!(text(&out.stderr).contains("is not a PEM certificate"), "{}", text(&out.stderr));
    assert!(!root.path().join("usr/local/share/ca-certificates/agentgate-ca.crt").exists());

    let missing = trust_ca(root.path(), bin.path(), &["/nonexistent/ca.pem"], &[]).await?;
    assert_eq!(missing.status.code(), Some(1));
    assert!(text(&missing.stderr).contains("cannot read /nonexistent/ca.pem"), "{}", text(&missing.stderr));
    Ok(())
}

fn get<'a>(yaml: &'a Yaml, path: &[&str]) -> &'a Yaml {
    path.iter().fold(yaml, |node, key| &node[*key])
}

#[test]
fn compose_file_parses_with_agentgate_and_an_agent_that_trusts_the_ca_through_the_proxy() -> TestResult {
    let docs = YamlLoader::load_from_str(&std::fs::read_to_string(repo("docker/compose.yml"))?)?;
    let compose = docs.first().ok_or("docker/compose.yml is empty")?;
    let services = get(compose, &["services"]).as_hash().ok_or("no services")?;
    let names: Vec<&str> = services.keys().filter_map(Yaml::as_str).collect();
    assert_eq!(names, ["agentgate", "agent"]);

    let agentgate = get(compose, &["services", "agentgate"]);
    let volumes: Vec<&str> = agentgate["volumes"].as_vec().ok_or("volumes")?.iter().filter_map(Yaml::as_str).collect();
    assert_eq!(volumes, ["certs:/var/lib/agentgate/certs", "logs:/var/lib/agentgate/logs"]);
    let ports: Vec<&str> = agentgate["ports"].as_vec().ok_or("ports")?.iter().filter_map(Yaml::as_str).collect();
    assert_eq!(ports, ["127.0.0.1:8080:8080"], "published on the host's loopback only");

    let agent = get(compose, &["services", "agent"]);
    assert_eq!(get(agent, &["depends_on", "agentgate", "condition"]).as_str(), Some("service_healthy"));
    for name in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
        assert_eq!(agent["environment"][name].as_str(), Some("http://agentgate:8080"), "{name}");
    }
    assert_eq!(agent["environment"]["no_proxy"].as_str(), Some("agentgate"));
    let mounts: Vec<&str> = agent["volumes"].as_vec().ok_or("volumes")?.iter().filter_map(Yaml::as_str).collect();
    assert_eq!(mounts, ["./trust-ca.sh:/usr/local/bin/trust-ca.sh:ro"]);
    let command: Vec<&str> = agent["command"].as_vec().ok_or("command")?.iter().filter_map(Yaml::as_str).collect();
    assert!(command.iter().any(|c| c.contains("eval \"$$(sh /usr/local/bin/trust-ca.sh)\"")), "{command:?}");
    Ok(())
}

#[test]
fn dockerfile_runs_unprivileged_with_volumes_and_a_healthcheck_on_the_admin_port() -> TestResult {
    let dockerfile = std::fs::read_to_string(repo("Dockerfile"))?;
    assert!(
        dockerfile.contains("\nFROM rust:1-bookworm AS build\n")
            && dockerfile.contains("\nFROM debian:bookworm-slim\n")
    );
    assert!(dockerfile.contains("\nUSER agentgate\n"));
    assert!(dockerfile.contains("VOLUME [\"/var/lib/agentgate/certs\", \"/var/lib/agentgate/logs\"]"));
    assert!(dockerfile.contains("CMD [\"curl\", \"-fsS\", \"-o\", \"/dev/null\", \"http://127.0.0.1:9090/healthz\"]"));
    // The health check reaches the admin API where the container config binds it.
    let config = agentgate::config::Config::load(&repo("docker/agentgate.toml"))?;
    assert_eq!(config.admin.listen.map(|a| a.to_string()).as_deref(), Some("127.0.0.1:9090"));
    assert_eq!(config.listen.to_string(), "0.0.0.0:8080");
    Ok(())
}
