#!/usr/bin/env python3
"""The benchmark's agentgate configuration, for bench/lib.sh's write_config.

    config.py OUT WORK ORIGIN_IP TEMPLATE [OVERRIDE...]

Writes TEMPLATE to OUT with each OVERRIDE merged over it in turn, @WORK@ and @ORIGIN_IP@
replaced. Merging is by TOML table, on the text (comments kept): a `[table]` an override
has replaces the template's table of that name and its sub-tables (`[table.sub]`); a
top-level key replaces the template's key of that name; an array of tables (`[[name]]`)
is appended after what the template has. TOML forbids a table twice, so appending alone
could never change a table the template sets.
"""
import re
import sys

HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.\-\"]+)\s*\]\]?\s*(#.*)?$")
KEY = re.compile(r"^\s*([A-Za-z0-9_\-\"]+)\s*=")


def sections(text):
    """(top-level lines, [(kind, name, lines)]) of a TOML text, by header line."""
    top, tables, current = [], [], None
    for line in text.splitlines():
        match = HEADER.match(line)
        if match:
            current = (match.group(1), match.group(2), [line])
            tables.append(current)
        elif current is None:
            top.append(line)
        else:
            current[2].append(line)
    return top, tables


def top_key(line):
    match = KEY.match(line)
    return match.group(1) if match else None


def merge(base, override):
    top, tables = sections(base)
    extra_top, extra_tables = sections(override)
    replaced = {top_key(line) for line in extra_top} - {None}
    top = [line for line in top if top_key(line) not in replaced] + [l for l in extra_top if top_key(l)]
    names = {name for kind, name, _ in extra_tables if kind == "["}
    kept = [
        t for t in tables
        if not (t[0] == "[" and any(t[1] == n or t[1].startswith(n + ".") for n in names))
    ]
    out = top + [line for _, _, lines in kept + extra_tables for line in lines]
    return "\n".join(out) + "\n"


def main():
    if len(sys.argv) < 5:
        sys.exit("usage: config.py OUT WORK ORIGIN_IP TEMPLATE [OVERRIDE...]")
    out, work, origin_ip, template, *overrides = sys.argv[1:]
    with open(template) as f:
        text = f.read()
    for path in overrides:
        try:
            with open(path) as f:
                text = merge(text, f.read())
        except OSError as err:
            sys.exit(f"config.py: cannot read {path}: {err}")
    with open(out, "w") as f:
        f.write(text.replace("@WORK@", work).replace("@ORIGIN_IP@", origin_ip))


if __name__ == "__main__":
    main()
