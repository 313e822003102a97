#!/usr/bin/env python3
"""Tests of scripts/check-tree.py and scripts/check-cargo.py: each check fails, naming the file
and the fix, on a fixture tree with one planted violation, and every check passes on the
clean fixture. check-cargo.py's run the real cargo doc and cargo-machete on a one-file package.

Run: python3 scripts/check-tree-test.py   (scripts/test.sh runs it before the cargo passes)
"""

import contextlib
import importlib.util
import io
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("check_tree", os.path.join(HERE, "check-tree.py"))
check_tree = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_tree)
spec = importlib.util.spec_from_file_location("check_cargo", os.path.join(HERE, "check-cargo.py"))
check_cargo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_cargo)

CLEAN = {
    "src/lib.rs": "pub mod net;\n",
    "src/net.rs": "//! Addresses.\npub mod address;\n",
    "src/net/address.rs": (
        "//! One address.\npub fn parse() {}\n\n#[cfg(test)]\nmod tests {\n"
        "    #[test]\n    fn a_loopback_address_is_refused() {}\n}\n"
    ),
    "tests/e2e/main.rs": "mod gate;\nmod support;\n",
    "tests/e2e/gate.rs": "#[tokio::test]\nasync fn a_disallowed_path_is_refused_with_403() {}\n",
    "tests/e2e/support.rs": "pub fn helper_for_all_tests() {}\n",
    "docs/security.md": (
        "| guard | `gate::a_disallowed_path_is_refused_with_403`, "
        "`net::address::tests::a_loopback_address_is_refused`, `net::address::tests::*` |\n"
        "Not citations: `net::address`, `proxy::some_function`, `std::io::read_to_end`.\n"
    ),
    "README.md": "Run `gate::a_disallowed_path_is_refused_with_403`.\n",
    ".gitignore": "__pycache__/\n",
    "docs/layering.md": "# Layering\n\n```arrows\n# module: used\nnet:\ngate: net\n```\n",
    "src/gate.rs": "//! Decides.\nuse crate::net::address;\n",
}


class CheckTreeTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        self.write(CLEAN)
        self.git("init", "-q")
        self.git("add", "-A")
        # The real tree's allow-lists name files and fns the fixture lacks.
        self.saved = (check_tree.OVER_LIMIT, check_tree.ISSUE_NAMED)
        check_tree.OVER_LIMIT, check_tree.ISSUE_NAMED = set(), set()

    def tearDown(self):
        check_tree.OVER_LIMIT, check_tree.ISSUE_NAMED = self.saved
        self.dir.cleanup()

    def write(self, files):
        for rel, text in files.items():
            path = os.path.join(self.root, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)

    def git(self, *args):
        subprocess.run(["git", *args], cwd=self.root, check=True, capture_output=True)

    def run_all(self):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            status = check_tree.main(["check-tree.py", self.root])
        return status, out.getvalue()

    def test_the_clean_fixture_passes_every_check(self):
        status, out = self.run_all()
        self.assertEqual(status, 0, out)
        self.assertEqual(out.count(": ok"), len(check_tree.CHECKS), out)

    def test_a_production_file_over_the_limit_fails_naming_it_and_the_split(self):
        self.write({"src/net/big.rs": "fn f() {}\n" * 601 + "#[cfg(test)]\nmod tests {}\n"})
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("src/net/big.rs: 601 lines before #[cfg(test)], over 600; split it", out)

    def test_the_limit_counts_only_the_lines_before_the_tests(self):
        self.write({"src/net/big.rs": "fn f() {}\n" * 600 + "#[cfg(test)]\n" + "fn t() {}\n" * 900})
        self.assertEqual(check_tree.check_lengths(self.root), [])

    def test_a_test_module_file_is_not_held_to_the_limit(self):
        self.write({"src/net/address/tests.rs": "#[test]\nfn t() {}\n" * 400})
        self.assertEqual(check_tree.check_lengths(self.root), [])

    def test_an_allow_listed_file_back_under_the_limit_fails_so_the_list_shrinks(self):
        check_tree.OVER_LIMIT = {"src/net/address.rs"}
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("src/net/address.rs: 3 lines before #[cfg(test)], no longer over 600; remove it from OVER_LIMIT", out)

    def test_an_allow_listed_file_over_the_limit_passes(self):
        self.write({"src/net/big.rs": "fn f() {}\n" * 700})
        check_tree.OVER_LIMIT = {"src/net/big.rs"}
        self.assertEqual(check_tree.check_lengths(self.root), [])

    def test_an_arrow_the_doc_does_not_list_fails(self):
        self.write({"src/net/address.rs": "//! One address.\nuse crate::gate::decide;\n\n#[cfg(test)]\nuse crate::fixture;\n"})
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("src/net/address.rs:2: `net` uses `crate::gate`, an arrow docs/layering.md does not list", out)
        self.assertNotIn("fixture", out, "a test's import is no arrow")

    def test_code_after_a_test_module_declaration_is_still_read(self):
        self.write({"src/net.rs": "//! Addresses.\n#[cfg(test)]\nmod tests;\npub mod address;\nuse crate::gate::decide;\n"})
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("src/net.rs:5: `net` uses `crate::gate`", out)

    def test_an_arrow_the_doc_lists_that_no_code_takes_fails(self):
        self.write({"src/gate.rs": "//! Decides.\n// crate::net in a comment is no arrow\n"})
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("docs/layering.md: lists `gate: net`, which no production code of `gate` uses; drop it", out)

    def test_a_doc_citing_a_missing_e2e_test_fails_with_its_line(self):
        self.write({"docs/guide/limits.md": "Intro.\nProved by `gate::a_test_that_was_renamed_since`.\n"})
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("docs/guide/limits.md:2: cites gate::a_test_that_was_renamed_since, no such test", out)

    def test_a_doc_citing_a_missing_unit_test_fails(self):
        self.write({"README.md": "`net::address::tests::a_test_in_a_moved_module`\n"})
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("README.md:1: cites net::address::tests::a_test_in_a_moved_module, no such test", out)

    def test_a_unit_test_in_the_modules_own_tests_file_counts(self):
        self.write({
            "src/net/address/tests.rs": "#[test]\nfn an_ipv6_loopback_is_refused() {}\n",
            "README.md": "`net::address::tests::an_ipv6_loopback_is_refused`\n",
        })
        self.assertEqual(check_tree.check_citations(self.root), [])

    def test_a_wildcard_over_a_module_without_tests_fails(self):
        self.write({
            "src/net/host.rs": "pub fn canonical() {}\n",
            "docs/security.md": "`net::host::tests::*` and `proxy::gone::tests::*`\n",
        })
        problems = check_tree.check_citations(self.root)
        self.assertEqual(problems, [
            "docs/security.md:1: cites net::host::tests::*, no such test; "
            "cite the test's current name, or the test that now proves it",
        ])

    def test_an_issue_numbered_test_name_fails(self):
        self.write({"tests/e2e/gate.rs": "#[test]\nfn issue_7_a_path_is_refused() {}\n"})
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("tests/e2e/gate.rs:2: fn issue_7_a_path_is_refused is named after an issue; name it for the behaviour", out)

    def test_an_issue_number_in_a_comment_fails(self):
        self.write({"src/net.rs": "//! Addresses (issue 12).\npub mod address; // Issue 25: why\n"})
        problems = check_tree.check_issue_names(self.root)
        self.assertEqual([p.split(": a comment")[0] for p in problems], ["src/net.rs:1", "src/net.rs:2"])

    def test_an_allow_listed_issue_name_passes_until_renamed(self):
        self.write({"tests/e2e/gate.rs": "#[test]\nfn issue_7_a_path_is_refused() {}\n"})
        check_tree.ISSUE_NAMED = {"issue_7_a_path_is_refused"}
        self.assertEqual(check_tree.check_issue_names(self.root), [])
        self.write({"tests/e2e/gate.rs": "#[test]\nfn a_path_is_refused() {}\n"})
        self.assertEqual(len(check_tree.check_issue_names(self.root)), 1)

    def test_a_committed_pyc_fails_naming_the_fix(self):
        self.write({"bench/__pycache__/idle.cpython-311.pyc": "\0"})
        self.git("add", "-f", "bench/__pycache__/idle.cpython-311.pyc")
        status, out = self.run_all()
        self.assertEqual(status, 1)
        self.assertIn("bench/__pycache__/idle.cpython-311.pyc: a build or cache file is committed; git rm --cached it", out)

    def test_a_committed_target_directory_fails(self):
        self.write({"bench/origin/target/debug/floor": "x"})
        self.git("add", "-f", "bench/origin/target/debug/floor")
        self.assertEqual(len(check_tree.check_committed_cache(self.root)), 1)


PACKAGE = '[package]\nname = "fixture"\nversion = "0.1.0"\nedition = "2021"\npublish = false\n\n[workspace]\n'


class CheckCargoTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.root = self.dir.name
        self.write({
            "Cargo.toml": PACKAGE + "\n[dependencies]\n",
            "src/lib.rs": "//! A fixture.\n\n/// One.\npub fn one() -> u8 {\n    1\n}\n",
        })

    def tearDown(self):
        self.dir.cleanup()

    def write(self, files):
        CheckTreeTest.write(self, files)

    def test_the_clean_package_passes_both_checks(self):
        self.assertEqual(check_cargo.check_docs(self.root), [])
        self.assertEqual(check_cargo.check_dependencies(self.root), [])

    def test_a_broken_doc_link_fails_naming_the_file_line_and_fix(self):
        self.write({"src/lib.rs": "//! A fixture.\n\n/// One, unlike [`Missing`].\npub fn one() {}\n"})
        problems = check_cargo.check_docs(self.root)
        self.assertEqual(len(problems), 1, problems)
        self.assertTrue(problems[0].startswith("src/lib.rs:3: rustdoc: unresolved link to `Missing`; link an item"), problems)

    def test_a_public_doc_linking_a_private_item_fails(self):
        self.write({"src/lib.rs": "//! A fixture.\n\n/// Calls [`helper`].\npub fn one() {\n    helper()\n}\n\nfn helper() {}\n"})
        problems = check_cargo.check_docs(self.root)
        self.assertEqual(len(problems), 1, problems)
        self.assertIn("src/lib.rs:3: rustdoc: public documentation for `one` links to private item `helper`", problems[0])
        self.assertIn("write the item as plain `code`", problems[0])

    def test_an_unused_dependency_fails_naming_the_manifest_and_the_fix(self):
        self.write({
            "Cargo.toml": PACKAGE + '\n[dependencies]\nitoa = "1"\n',
            "bench/peer/Cargo.toml": PACKAGE.replace("fixture", "peer") + '\n[dependencies]\nmemchr = "2"\n',
            "bench/peer/src/main.rs": "fn main() {}\n",
        })
        problems = check_cargo.check_dependencies(self.root)
        self.assertEqual(sorted(p.split(" is not used")[0] for p in problems), [
            "Cargo.toml: dependency itoa",
            "bench/peer/Cargo.toml: dependency memchr",
        ], problems)
        self.assertIn("remove it, or", problems[0])

    def test_an_ignored_dependency_passes_only_with_a_reason(self):
        ignored = '\n[dependencies]\nitoa = "1"\n\n[package.metadata.cargo-machete]\nignored = [\n    "itoa",\n]\n'
        self.write({"Cargo.toml": PACKAGE + ignored})
        self.assertEqual(check_cargo.check_dependencies(self.root), [
            "Cargo.toml:14: cargo-machete ignores itoa without a reason; say in a comment on its line where the package uses it",
        ])
        self.write({"Cargo.toml": PACKAGE + ignored.replace('"itoa",', '"itoa", # used by a macro')})
        self.assertEqual(check_cargo.check_dependencies(self.root), [])


if __name__ == "__main__":
    result = unittest.main(exit=False, verbosity=1).result
    failed = len(result.failures) + len(result.errors)
    print(f"check-tree tests: {result.testsRun - failed} passed, {failed} failed")
    sys.exit(1 if failed or not result.wasSuccessful() else 0)
