#!/usr/bin/env bash
# The README's test command: installs with apt what the tests need and a fresh machine
# (Debian with Rust, Python 3, curl and apt, as root) lacks, then runs every test, the ones
# a plain `cargo test` leaves ignored included. `.ci/run` runs exactly this.
#
# Two passes, each test run once:
#  1. `cargo test`, as on a machine without the tools below (AGENTGATE_TEST_BASELINE=1): a
#     test that asks for one of them there fails, naming the #[ignore] it lacks, so a
#     newcomer's plain `cargo test` never fails for want of a tool;
#  2. `cargo test -- --ignored`: the tests that need redis-server, Chromium, wget, certutil
#     or root (network namespaces), each failing, never skipping, when what it needs is
#     missing (tests/e2e/support/tools.rs).
# Arguments go to the test binaries of both passes (a name filter, `--nocapture`).
# Runs from a clean clone with ../shared beside it (the conformance corpora).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "test: run as root: apt installs what is missing, and the transparent-mode tests build network namespaces" >&2
  exit 1
fi
[ -d ../shared/conformance ] || { echo "test: ../shared/conformance is missing: the conformance corpora must sit beside the repository" >&2; exit 1; }

# What the tests run, and the Debian package of each.
need=()
want() { command -v "$1" >/dev/null 2>&1 || need+=("$2"); }
want curl curl                  # the e2e tests' command-line client
want python3 python3            # the conformance checkers, transparent mode's python client
want git git                    # the git tests (git through the proxy)
want redis-server redis-server  # limits shared by replicas
want ip iproute2                # transparent mode: network namespaces ...
want nft nftables               # ... and the nftables redirect
want /usr/bin/chromium chromium # the console's page and the Chromium recipe, headless
want /usr/bin/chromedriver chromium-driver
want wget wget                  # the wget recipe (a wgetrc)
want certutil libnss3-tools     # the Chromium recipe (an NSS database)
want promtool prometheus        # the metrics test (`promtool check metrics`)
want squid squid                # the parent proxy tests (and its basic_ncsa_auth)
want setpriv util-linux         # the CA directory another user cannot read
python3 -c 'import cryptography' 2>/dev/null || need+=(python3-cryptography) # the Web Bot Auth verifier
if [ ${#need[@]} -gt 0 ]; then
  echo "test: installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# The official MCP Python SDK (PyPI, not Debian): both sides of the [[mcp]] tests.
python3 -c 'import mcp.server.mcpserver' 2>/dev/null || { echo "test: installing the mcp Python SDK"; pip install --quiet mcp; }
# haralyzer (PyPI): the independent HAR reader of `agentgate record har`'s output (tests/e2e/record.rs).
python3 -c 'import haralyzer' 2>/dev/null || { echo "test: installing haralyzer"; pip install --quiet haralyzer; }

# cargo-machete, which the tests of scripts/check-cargo.py run (a debug build, as .ci/run's).
command -v cargo-machete >/dev/null 2>&1 || { echo "test: installing cargo-machete"; cargo install --locked --debug --quiet cargo-machete; }

# The tests of the tree's checks (scripts/check-tree.py, scripts/check-cargo.py) first: a
# run whose checks cannot be trusted stops before the cargo passes.
echo "test: the tree checks' own tests (scripts/check-tree-test.py)"
if ! out=$(python3 scripts/check-tree-test.py 2>&1); then
  printf '%s\n' "$out" >&2
  echo "test: scripts/check-tree-test.py failed (above); fix the check or its test before the cargo passes" >&2
  exit 1
fi
printf '%s\n' "$out" | tail -n 1

# Both passes run, and every test binary, whatever fails first: one run shows every failure.
failed=0
echo "test: cargo test (what a machine without the tools above runs)"
AGENTGATE_TEST_BASELINE=1 cargo test --no-fail-fast -- "$@" || failed=1
echo "test: cargo test -- --ignored (the tests that need those tools, or root)"
cargo test --no-fail-fast -- --ignored "$@" || failed=1
exit "$failed"
