#!/usr/bin/env python3
"""The tree's checks that ask cargo, run by `.ci/run` after clippy (whose dependency builds
`cargo doc` reuses). Each prints one line per violation, naming the file and the fix, and
the run fails if any line was printed:
  1. the docs build without a warning: `cargo doc --no-deps --document-private-items` with
     RUSTDOCFLAGS="-D warnings". Private items included: agentgate's library is mostly
     `pub(crate)`, so without them most of its docs would go unchecked;
  2. no unused dependency in any package of the repository (the root and `bench/*`), by
     cargo-machete (`cargo install --locked --debug cargo-machete`); and every entry of a package's
     `[package.metadata.cargo-machete] ignored` list says why, in a comment on its line or
     on the line above.

Usage: scripts/check-cargo.py [ROOT]   (ROOT defaults to the repository holding this script)
Python 3 standard library, cargo and cargo-machete.
"""

import importlib.util
import os
import re
import shutil
import subprocess
import sys

DOC = ["cargo", "doc", "--no-deps", "--document-private-items"]
DIAGNOSTIC = re.compile(r"^(?:error|warning)(?:\[[^\]]*\])?: (.*)$")
LOCATION = re.compile(r"^\s*--> (.+?):(\d+):\d+$")
MACHETE_PACKAGE = re.compile(r"^(\S+) -- (.+Cargo\.toml):$")
QUOTED = re.compile(r'"([^"]*)"')


def doc_fix(message):
    if "links to private item" in message:
        return "write the item as plain `code` (public docs cannot link to it), or link a public item"
    if "unresolved link" in message:
        return "link an item that exists under that path (e.g. [`super::Item`]), or write it as plain `code`"
    if "is both" in message:
        return "say which: [`name()`] for the function, [`mod@name`] for the module"
    return "fix the doc comment there"


def check_docs(root):
    """rustdoc's warnings, as FILE:LINE: message; fix."""
    env = dict(os.environ, RUSTDOCFLAGS="-D warnings")
    try:
        run = subprocess.run(DOC, cwd=root, env=env, capture_output=True, text=True)
    except OSError as error:
        return [f"{root}: cannot run cargo doc ({error}); install Rust (rustup)"]
    if run.returncode == 0:
        return []
    problems = []
    message = None
    for line in run.stderr.splitlines():
        diagnostic = DIAGNOSTIC.match(line)
        if diagnostic:
            message = diagnostic.group(1)
            continue
        location = LOCATION.match(line)
        if location and message:
            problems.append(f"{location.group(1)}:{location.group(2)}: rustdoc: {message}; {doc_fix(message)}")
            message = None
    if not problems:
        tail = " | ".join(run.stderr.strip().splitlines()[-3:])
        problems.append(
            f"{root}: `{' '.join(DOC)}` failed ({tail}); run it with RUSTDOCFLAGS=\"-D warnings\" to see why"
        )
    return problems


def cargo_tomls(root):
    """Every package manifest in the tree (build and hidden directories skipped)."""
    found = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "target" and not d.startswith("."))
        if "Cargo.toml" in files:
            found.append(os.path.relpath(os.path.join(directory, "Cargo.toml"), root).replace(os.sep, "/"))
    return found


def check_ignored_reasons(root):
    """Each name in a `[package.metadata.cargo-machete] ignored` list has a comment saying why."""
    problems = []
    for rel in cargo_tomls(root):
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        section = in_list = False
        for number, line in enumerate(lines, 1):
            code, _, comment = line.partition("#")
            stripped = code.strip()
            if not in_list and stripped.startswith("["):
                section = stripped == "[package.metadata.cargo-machete]"
                continue
            if section and not in_list and re.match(r"ignored\s*=", stripped):
                in_list = True
                code = code.split("=", 1)[1]
            if not in_list:
                continue
            above = lines[number - 2].strip() if number >= 2 else ""
            for name in QUOTED.findall(code):
                if not comment.strip() and not above.startswith("#"):
                    problems.append(
                        f"{rel}:{number}: cargo-machete ignores {name} without a reason; "
                        "say in a comment on its line where the package uses it"
                    )
            if "]" in code:
                in_list = False
    return problems


def check_dependencies(root):
    """cargo-machete's unused dependencies, as Cargo.toml: dependency; fix."""
    if shutil.which("cargo-machete") is None:
        return ["cargo-machete is not installed; install it: cargo install --locked --debug cargo-machete (.ci/run does)"]
    run = subprocess.run(["cargo", "machete", "."], cwd=root, capture_output=True, text=True)
    problems = []
    manifest = None
    for line in run.stdout.splitlines():
        package = MACHETE_PACKAGE.match(line)
        if package:
            manifest = os.path.normpath(package.group(2)).replace(os.sep, "/")
        elif manifest and line.startswith("\t") and line.strip():
            problems.append(
                f"{manifest}: dependency {line.strip()} is not used by the package's code; remove it, or, "
                "when it is used where cargo-machete cannot see (a #[path] module, a macro), list it in "
                "[package.metadata.cargo-machete] ignored with a comment saying why"
            )
        elif not line.strip():
            manifest = None
    if run.returncode != 0 and not problems:
        problems.append(f"{root}: cargo machete failed: {run.stderr.strip() or run.stdout.strip()}")
    return problems + check_ignored_reasons(root)


CHECKS = [
    ("no unused dependency (cargo-machete)", check_dependencies),
    ("the docs build without a warning (cargo doc)", check_docs),
]


def main(argv):
    spec = importlib.util.spec_from_file_location("check_tree", os.path.join(os.path.dirname(__file__), "check-tree.py"))
    check_tree = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check_tree)
    return check_tree.run("check-cargo", CHECKS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
