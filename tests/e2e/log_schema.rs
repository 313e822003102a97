//! The decision log as `docs/decision-log.md` documents it for security teams, where the
//! document makes a promise a reader could check with their own tools: the
//! reasons' `digest` is the SHA-256 of the file as served, except agents.txt, whose digest is
//! the draft's content digest (SEMANTICS B3), the value its own `*<hex>` hash line carries.

use agentgate::policy::agents_txt::fix_hash;
use sha2::{Digest, Sha256};

use crate::support::log::for_request;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult};

#[tokio::test]
async fn reason_digests_are_the_served_bytes_except_agents_txt_which_logs_its_content_digest() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let robots = "User-agent: *\nDisallow: /private\n";
    let agents_txt = fix_hash(b"# agents.txt for the test origin\n/secret DISALLOW\n\n/ ALLOW\n");
    let text = String::from_utf8(agents_txt.clone())?;
    let hash_line = text.lines().find_map(|l| l.strip_prefix('*')).ok_or("fix_hash wrote a hash line")?.to_owned();
    let site = Site::new().file("/robots.txt", robots).file("/agents.txt", agents_txt.clone());
    let origin = Origin::https_site(&ca, site).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/private/a")).send().await?.status(), 403);
    assert_eq!(client.get(origin.url("/secret/b")).send().await?.status(), 403);
    let records = proxy.finish().await?;

    let digest_of = |path: &str| -> Option<String> {
        let record = for_request(&records, "GET", path).into_iter().next()?;
        record["agentgate.reasons"][0]["digest"].as_str().map(str::to_owned)
    };
    let sha256 = |bytes: &[u8]| hex::encode(Sha256::digest(bytes));
    assert_eq!(digest_of("/private/a"), Some(sha256(robots.as_bytes())), "robots.txt: the bytes served");
    assert_eq!(digest_of("/secret/b").as_deref(), Some(hash_line.as_str()), "agents.txt: its content digest");
    assert_ne!(hash_line, sha256(&agents_txt), "which is not the hash of the bytes served");
    Ok(())
}
