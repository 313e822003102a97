#!/usr/bin/env python3
"""Heap allocations in a callgrind dump: the calls it counted to the C allocator's entry
points (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign). agentgate and the
floor use the system allocator, so every Rust allocation (and reallocation) is one of these
calls; callgrind_control --zero zeroes the call counts with the instructions, so a dump taken
after a run counts that run's allocations. Used by bench/instructions.sh.

usage: allocations.py CALLGRIND-FILE   prints the total count
"""

import re
import sys

ALLOCATORS = {"malloc", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign"}
# `cfn=(id) name` names the function the next `calls=` line calls; `(id)` alone reuses a name
# given earlier with the same id (callgrind's name compression, shared by fn= and cfn=).
NAMED = re.compile(r"^c?fn=\((\d+)\)(?: (.*))?$")


def allocations(path):
    names, callee, total = {}, None, 0
    with open(path, errors="replace") as dump:
        for line in dump:
            if line.startswith(("fn=", "cfn=")):
                match = NAMED.match(line.rstrip("\n"))
                if match:
                    ident, name = match.groups()
                    if name is not None:
                        names[ident] = name
                    if line.startswith("cfn="):
                        callee = names.get(ident)
            elif line.startswith("calls=") and callee in ALLOCATORS:
                total += int(line.split()[0][len("calls="):])
    return total


if __name__ == "__main__":
    print(allocations(sys.argv[1]))
