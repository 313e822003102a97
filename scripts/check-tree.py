#!/usr/bin/env python3
"""The tree's structural checks, run by `.ci/run` before the tests (issue 40's "checks in CI").

Each check prints one line per violation, naming the file and the fix, and the run fails if any
line was printed:
  1. no production Rust file (`src/**/*.rs`, test modules excepted) over LIMIT lines before its
     first `#[cfg(test)]` line; a file in OVER_LIMIT is tolerated while it is over, and fails
     once it is not, so the list only shrinks;
  2. every test a doc cites (`docs/**/*.md`, README.md) exists under that name;
  3. no `issue_N` in a fn name and no "issue N" in a `//` comment under src/ and tests/
     (the fns in ISSUE_NAMED excepted until renamed);
  4. no committed build or cache file (`__pycache__/`, `*.pyc`, `target/`);
  5. the arrows between the crate's top-level modules (a `crate::x` path in production code of
     `src/y*`) are exactly the ones docs/layering.md lists in its ```arrows block: a new arrow
     fails until the doc says it (and why), an arrow no code takes any more fails until the doc
     drops it.

Usage: scripts/check-tree.py [ROOT]   (ROOT defaults to the repository holding this script)
Python 3 standard library only.
"""

import os
import re
import subprocess
import sys

LIMIT = 600

# Production files over LIMIT today, each to be split by concept.
OVER_LIMIT = {
}

# Test fns still named after an issue, each to be renamed for the behaviour it proves (and
# its doc citations with it): none today; an entry carries "rename pending (issue N)".
ISSUE_NAMED = set()

CFG_TEST = re.compile(r"^\s*#\[cfg\(test\)\]")
ISSUE_FN = re.compile(r"\bfn\s+(issue_\d+\w*)")
ISSUE_WORD = re.compile(r"(?i)\bissue[ _]?\d+")
TEST_ATTR = re.compile(r"#\[(?:[\w:]+::)?test\b")
CITATION = re.compile(r"`((?:[a-z_][a-z0-9_]*::)+(?:\*|[a-z0-9_]+))`")
TEST_NAME = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+){2,}$")


def rust_files(root, top):
    base = os.path.join(root, top)
    for directory, dirs, files in os.walk(base):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".rs"):
                yield os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/")


def read(root, rel):
    with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
        return f.read()


def is_test_module(rel):
    parts = rel.split("/")
    return parts[-1] == "tests.rs" or "tests" in parts[1:-1]


def check_lengths(root):
    problems = []
    for rel in rust_files(root, "src"):
        if is_test_module(rel):
            continue
        lines = read(root, rel).splitlines()
        length = next((i for i, line in enumerate(lines) if CFG_TEST.match(line)), len(lines))
        if length > LIMIT and rel not in OVER_LIMIT:
            problems.append(
                f"{rel}: {length} lines before #[cfg(test)], over {LIMIT}; "
                "split it along the concepts it holds, each module with its //! doc"
            )
        elif length <= LIMIT and rel in OVER_LIMIT:
            problems.append(
                f"{rel}: {length} lines before #[cfg(test)], no longer over {LIMIT}; "
                "remove it from OVER_LIMIT in scripts/check-tree.py"
            )
    for rel in sorted(OVER_LIMIT):
        if not os.path.isfile(os.path.join(root, rel)):
            problems.append(f"{rel}: in OVER_LIMIT but absent; remove it from OVER_LIMIT in scripts/check-tree.py")
    return problems


def module_files(root, top, segments):
    """The files holding module `segments` under `top` (its file, and every file below it)."""
    if not segments:
        return []
    path = os.path.join(root, top, *segments)
    found = [f for f in (path + ".rs", os.path.join(path, "mod.rs")) if os.path.isfile(f)]
    if os.path.isdir(path):
        for directory, _, files in os.walk(path):
            found += [os.path.join(directory, n) for n in sorted(files) if n.endswith(".rs")]
    return found


def has_fn(files, name):
    pattern = re.compile(r"\bfn\s+" + re.escape(name) + r"\b")
    return any(pattern.search(read_abs(f)) for f in files)


def has_test(files):
    return any(TEST_ATTR.search(read_abs(f)) for f in files)


def read_abs(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def doc_files(root):
    found = []
    if os.path.isfile(os.path.join(root, "README.md")):
        found.append("README.md")
    for directory, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        found += [
            os.path.relpath(os.path.join(directory, n), root).replace(os.sep, "/")
            for n in sorted(files)
            if n.endswith(".md")
        ]
    return found


def top_modules(root, top):
    base = os.path.join(root, top)
    if not os.path.isdir(base):
        return set()
    names = set()
    for entry in os.listdir(base):
        if entry.endswith(".rs"):
            names.add(entry[:-3])
        elif os.path.isdir(os.path.join(base, entry)):
            names.add(entry)
    return names - {"main", "lib", "mod"}


def cited_test_exists(root, segments, e2e, src):
    """Whether `segments` (a citation split on `::`) names a test that exists."""
    *path, name = segments
    candidates = []
    if path[0] in e2e:
        candidates.append(module_files(root, "tests/e2e", path[:-1] if path[-1] == "tests" else path))
    if path[0] in src:
        module = path[: path.index("tests")] if "tests" in path else path
        candidates.append(module_files(root, "src", module))
    for files in candidates:
        if files and (has_test(files) if name == "*" else has_fn(files, name)):
            return True
    return False


def check_citations(root):
    e2e = top_modules(root, "tests/e2e") - {"support"}
    src = top_modules(root, "src")
    problems = []
    for rel in doc_files(root):
        for number, line in enumerate(read(root, rel).splitlines(), 1):
            for token in CITATION.findall(line):
                segments = token.split("::")
                if segments[0] in ("crate", "agentgate"):
                    segments = segments[1:]
                if len(segments) < 2 or not (segments[-1] == "*" or TEST_NAME.match(segments[-1])):
                    continue
                if segments[0] not in e2e and segments[0] not in src:
                    continue
                if not cited_test_exists(root, segments, e2e, src):
                    problems.append(
                        f"{rel}:{number}: cites {token}, no such test; "
                        "cite the test's current name, or the test that now proves it"
                    )
    return problems


def check_issue_names(root):
    problems = []
    seen = set()
    for top in ("src", "tests"):
        for rel in rust_files(root, top):
            for number, line in enumerate(read(root, rel).splitlines(), 1):
                for name in ISSUE_FN.findall(line):
                    seen.add(name)
                    if name not in ISSUE_NAMED:
                        problems.append(
                            f"{rel}:{number}: fn {name} is named after an issue; "
                            "name it for the behaviour it proves"
                        )
                comment = line.find("//")
                if comment >= 0 and ISSUE_WORD.search(line[comment:]):
                    problems.append(
                        f"{rel}:{number}: a comment cites an issue number; "
                        "say what the code does and why, not which issue asked for it"
                    )
    for name in sorted(ISSUE_NAMED - seen):
        problems.append(f"scripts/check-tree.py: ISSUE_NAMED lists {name}, no such fn; remove it from ISSUE_NAMED")
    return problems


def check_committed_cache(root):
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
        ).stdout.decode("utf-8", "replace")
    except (OSError, subprocess.CalledProcessError) as error:
        return [f"{root}: git ls-files failed ({error}); run the check inside a git checkout"]
    problems = []
    for rel in filter(None, listed.split("\0")):
        parts = rel.split("/")
        if "__pycache__" in parts[:-1] or rel.endswith(".pyc") or "target" in parts[:-1]:
            problems.append(f"{rel}: a build or cache file is committed; git rm --cached it and list it in .gitignore")
    return problems


ARROWS = re.compile(r"^```arrows\n(.*?)^```", re.S | re.M)
CRATE_PATH = re.compile(r"\bcrate::([a-z_][a-z0-9_]*)")
# The binary and the library root wire everything: no arrow of theirs is listed.
ROOTS = {"main", "lib"}


def module_arrows(root):
    """{module: {used module: first place}} over production code under src/."""
    arrows = {}
    for rel in rust_files(root, "src"):
        if is_test_module(rel):
            continue
        module = rel.split("/")[1].removesuffix(".rs")
        if module in ROOTS:
            continue
        lines = read(root, rel).splitlines()
        for number, line in enumerate(lines, 1):
            if CFG_TEST.match(line):
                # `#[cfg(test)] mod tests;` (or a test-only `use`) is one item; an inline
                # test module is the rest of the file.
                following = lines[number] if number < len(lines) else ""
                if following.rstrip().endswith(";"):
                    lines[number] = ""
                    continue
                break
            code = line.split("//")[0]
            for used in CRATE_PATH.findall(code):
                if used != module:
                    arrows.setdefault(module, {}).setdefault(used, f"{rel}:{number}")
    return arrows


def check_arrows(root):
    doc = "docs/layering.md"
    if not os.path.isfile(os.path.join(root, doc)):
        return [f"{doc}: absent; it lists the arrows between the crate's modules in an ```arrows block"]
    block = ARROWS.search(read(root, doc))
    if not block:
        return [f"{doc}: no ```arrows block; list each module's arrows as `module: used used ...`"]
    listed = {}
    for line in block.group(1).splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        module, _, used = line.partition(":")
        listed[module.strip()] = set(used.split())
    problems = []
    found = module_arrows(root)
    for module in sorted(found):
        for used, place in sorted(found[module].items()):
            if used not in listed.get(module, set()):
                problems.append(
                    f"{place}: `{module}` uses `crate::{used}`, an arrow {doc} does not list; "
                    f"remove the import, or add `{used}` to `{module}:` in its ```arrows block and say why"
                )
    for module in sorted(listed):
        for used in sorted(listed[module] - set(found.get(module, {}))):
            problems.append(f"{doc}: lists `{module}: {used}`, which no production code of `{module}` uses; drop it")
    return problems


CHECKS = [
    ("production files within the line limit", check_lengths),
    ("every test a doc cites exists", check_citations),
    ("no issue numbers in test names or comments", check_issue_names),
    ("no committed build or cache files", check_committed_cache),
    ("the module arrows are the ones docs/layering.md lists", check_arrows),
]


def run(name, checks, argv):
    """Runs each (title, check) of `checks` on the repository in argv[1] (default: the one
    holding this script), printing `name: title: ok` or its problems; 1 when any was found.
    scripts/check-cargo.py runs its checks through this too."""
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    failed = 0
    for title, check in checks:
        problems = check(root)
        print(f"{name}: {title}: {'ok' if not problems else f'{len(problems)} problem(s)'}")
        for problem in problems:
            print(problem)
        failed += len(problems)
    return 1 if failed else 0


def main(argv):
    return run("check-tree", CHECKS, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
