//! What some tests need beyond a fresh machine's Rust, Python 3, curl and sh: a program from
//! a Debian package ([`need`]) or root ([`need_root`]).
//!
//! Such a test is marked `#[ignore = "needs <what>: run by scripts/test.sh"]`, so a plain
//! `cargo test` on a machine without it lists the test as ignored, with that reason, instead
//! of failing it or passing it silently. `scripts/test.sh` (the README's test command)
//! installs every package with apt and runs the ignored tests too; there a missing program
//! fails the test with the package to install, so CI cannot pass for want of a tool.
//!
//! The script's first pass runs what a bare machine runs, with `AGENTGATE_TEST_BASELINE` set:
//! there asking for any of these fails, so a test that needs one and is not marked ignored
//! (and so would fail a newcomer's `cargo test`) fails CI, naming the attribute it lacks.
//! A new tool: a constant here, its package in `scripts/test.sh`'s list.

use std::path::{Path, PathBuf};

use super::TestResult;

/// A program and the Debian package that installs it.
#[derive(Debug, Clone, Copy)]
pub struct Tool {
    /// A name looked up on `PATH`, or an absolute path.
    pub program: &'static str,
    pub package: &'static str,
}

pub const REDIS_SERVER: Tool = Tool { program: "redis-server", package: "redis-server" };
pub const CHROMIUM: Tool = Tool { program: "/usr/bin/chromium", package: "chromium" };
pub const CHROMEDRIVER: Tool = Tool { program: "/usr/bin/chromedriver", package: "chromium-driver" };
pub const CERTUTIL: Tool = Tool { program: "certutil", package: "libnss3-tools" };
pub const WGET: Tool = Tool { program: "wget", package: "wget" };
pub const IP: Tool = Tool { program: "ip", package: "iproute2" };
pub const NFT: Tool = Tool { program: "nft", package: "nftables" };
pub const PROMTOOL: Tool = Tool { program: "promtool", package: "prometheus" };
/// Squid, the parent proxy of `parent`'s tests (with its `basic_ncsa_auth` helper).
pub const SQUID: Tool = Tool { program: "squid", package: "squid" };
pub const GIT: Tool = Tool { program: "git", package: "git" };
/// Runs a program as another user (util-linux, essential on Debian): root's tests of what
/// another user may read.
pub const SETPRIV: Tool = Tool { program: "setpriv", package: "util-linux" };
/// Python 3 with the `cryptography` package (the independent Web Bot Auth verifier); the
/// test also checks that the package imports.
pub const PYTHON3_CRYPTOGRAPHY: Tool = Tool { program: "python3", package: "python3-cryptography" };

/// Python 3 with the official MCP Python SDK (`mcp` from PyPI, not a Debian package):
/// [`need_python_mcp`] checks that it imports.
pub const PYTHON3_MCP: Tool = Tool { program: "python3", package: "the mcp Python SDK (pip install mcp)" };

/// Set by `scripts/test.sh` for its pass over the tests that are not ignored.
const BASELINE: &str = "AGENTGATE_TEST_BASELINE";

/// Where `tool` is; an error naming the package when it is missing, and in the baseline pass.
pub fn need(tool: Tool) -> TestResult<PathBuf> {
    not_in_baseline(tool.program)?;
    find(tool.program).ok_or_else(|| {
        format!(
            "{} is missing: this test needs Debian's {}; scripts/test.sh installs it (apt-get install {})",
            tool.program, tool.package, tool.package
        )
        .into()
    })
}

/// `python3` with the MCP Python SDK importable; an error naming the install when it is
/// missing, and in the baseline pass.
pub fn need_python_mcp() -> TestResult<PathBuf> {
    not_in_baseline(PYTHON3_MCP.package)?;
    let python = find(PYTHON3_MCP.program).ok_or("python3 is missing: this test needs Python 3 and the mcp SDK")?;
    let imported = std::process::Command::new(&python).args(["-c", "import mcp.server.mcpserver"]).output()?;
    if !imported.status.success() {
        return Err("python3 cannot import mcp (the official MCP Python SDK, 2.x): scripts/test.sh installs it \
                    (pip install mcp)"
            .into());
    }
    Ok(python)
}

/// Ok when this process runs as root on Linux (network namespaces, nftables, running the
/// binary as another user).
pub fn need_root() -> TestResult {
    not_in_baseline("root")?;
    if !cfg!(target_os = "linux") || !is_root() {
        return Err(
            "this test needs root on Linux (network namespaces and nftables): run scripts/test.sh as root".into()
        );
    }
    Ok(())
}

/// Whether the effective user id is 0 (`Uid:` in `/proc/self/status`: real, effective, ...).
fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status.lines().find_map(|line| line.strip_prefix("Uid:")).and_then(|ids| ids.split_whitespace().nth(1)) == Some("0")
}

/// An error when the baseline pass asks for `what`.
fn not_in_baseline(what: &str) -> TestResult {
    if std::env::var_os(BASELINE).is_none() {
        return Ok(());
    }
    // libtest runs each test on a thread named after it.
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("this test");
    Err(format!(
        "{test} needs {what} but is not ignored: on a machine without it a plain `cargo test` fails. \
         Mark it #[ignore = \"needs {what}: run by scripts/test.sh\"]"
    )
    .into())
}

/// `program` if it is an existing absolute path, else the first `PATH` entry holding it.
fn find(program: &str) -> Option<PathBuf> {
    if program.contains('/') {
        return Path::new(program).is_file().then(|| PathBuf::from(program));
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|path| path.is_file())
}
