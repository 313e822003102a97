"""An independent verifier of agentgate's decision-log hash chain and signed checkpoints,
written from docs/decision-log.md ("Tamper evidence") without agentgate's code: hashlib for
SHA-256, `cryptography` for Ed25519.

Usage: chain_verify.py [--key BASE64] FILE...  (plain or gzip'd, in any order)
Prints one JSON object: the line count, the chain head, the checkpoints verified and every
break as {file, line, kind}: `link` (the line's agentgate.chain.prev is not the SHA-256 of
the line before it, without its newline), `first` (a file's first line chains to no line
given and it is not the oldest), `signature`, `count`.
"""

import base64
import gzip
import hashlib
import json
import sys

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

ZEROS = "0" * 64


def read(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def parse(line):
    try:
        value = json.loads(line)
        return value if isinstance(value, dict) else {}
    except ValueError:
        return {}


def main(argv):
    key = None
    if argv[:1] == ["--key"]:
        key = base64.b64decode(argv[1])
        argv = argv[2:]
    files = [(path, read(path)) for path in argv]
    last = {hashlib.sha256(lines[-1]).hexdigest(): path for path, lines in files if lines}
    first_prev = {path: parse(lines[0]).get("agentgate.chain.prev") for path, lines in files if lines}
    follows = {}
    for path, prev in first_prev.items():
        if prev in last and last[prev] != path:
            follows[last[prev]] = path
    heads = [path for path, _ in files if path not in follows.values()]

    def first_time(path):
        for line in dict(files)[path]:
            stamp = parse(line).get("@timestamp")
            if stamp:
                return stamp
        return ""

    heads.sort(key=first_time)
    order = []
    for head in heads:
        at = head
        while at is not None and at not in order:
            order.append(at)
            at = follows.get(at)

    breaks, count, checkpoints, head = [], 0, 0, None
    since = None
    for n, path in enumerate(order):
        for number, line in enumerate(dict(files)[path], start=1):
            count += 1
            record = parse(line)
            prev = record.get("agentgate.chain.prev")
            if "agentgate.chain.start" in record:
                since = 0
            elif number == 1 and head is not None and prev != head:
                breaks.append({"file": path, "line": number, "kind": "first"})
                since = None
            elif number == 1 and head is None:
                pass
            elif prev != head:
                breaks.append({"file": path, "line": number, "kind": "link"})
            if record.get("event.action") == "checkpoint":
                lines = record.get("agentgate.checkpoint.lines")
                text = "agentgate decision-log checkpoint v1\nprev %s\nlines %s\ntime %s\n" % (
                    prev, lines, record.get("@timestamp"))
                try:
                    public = key or base64.b64decode(record["agentgate.checkpoint.key"])
                    Ed25519PublicKey.from_public_bytes(public).verify(
                        base64.b64decode(record["agentgate.checkpoint.signature"]), text.encode())
                    checkpoints += 1
                except (InvalidSignature, KeyError, ValueError):
                    breaks.append({"file": path, "line": number, "kind": "signature"})
                if since is not None and since != lines:
                    breaks.append({"file": path, "line": number, "kind": "count"})
                since = 0
            elif since is not None:
                since += 1
            head = hashlib.sha256(line).hexdigest()
    print(json.dumps({"lines": count, "head": head, "checkpoints": checkpoints, "order": order,
                      "breaks": breaks}))


if __name__ == "__main__":
    main(sys.argv[1:])
