"""An independent reader of agentgate's HAR export: haralyzer (PyPI) parses the file and
reads every entry through its own classes, and each object's required fields are checked as
the HAR 1.2 specification (W3C Web Performance draft, "HTTP Archive (HAR) format") lists
them, without agentgate's code.

Usage: har_check.py FILE
Prints one JSON object: `entries` (per entry: method, url, status, statusText, mimeType,
the SHA-256 of the response body as decoded from `text` and `encoding`, the request's
postData text) and `problems` (each naming the entry and the field).
"""

import base64
import hashlib
import json
import sys

from haralyzer import HarEntry, HarParser

REQUIRED = {
    "log": ["version", "creator", "entries"],
    "creator": ["name", "version"],
    "entry": ["startedDateTime", "time", "request", "response", "cache", "timings"],
    "request": ["method", "url", "httpVersion", "cookies", "headers", "queryString", "headersSize", "bodySize"],
    "response": [
        "status",
        "statusText",
        "httpVersion",
        "cookies",
        "headers",
        "content",
        "redirectURL",
        "headersSize",
        "bodySize",
    ],
    "content": ["size", "mimeType"],
    "timings": ["send", "wait", "receive"],
    "postData": ["mimeType", "text"],
}


def missing(obj, kind, where, problems):
    if not isinstance(obj, dict):
        problems.append(f"{where}: {kind} is not an object")
        return
    for field in REQUIRED[kind]:
        if field not in obj:
            problems.append(f"{where}: {kind}.{field} is missing")


def pairs(items, where, problems):
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not isinstance(item.get("value"), str):
            problems.append(f"{where}: {item!r} is not a name/value pair")


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        har = json.load(f)
    parser = HarParser(har)
    log = parser.har_data
    problems = []
    missing(log, "log", "log", problems)
    missing(log.get("creator"), "creator", "log", problems)
    if log.get("version") != "1.2":
        problems.append(f"log.version is {log.get('version')!r}, not 1.2")
    entries = []
    for index, raw in enumerate(log.get("entries", [])):
        where = f"entry {index}"
        missing(raw, "entry", where, problems)
        missing(raw.get("request"), "request", where, problems)
        missing(raw.get("response"), "response", where, problems)
        missing(raw["response"].get("content"), "content", where, problems)
        missing(raw.get("timings"), "timings", where, problems)
        if "postData" in raw["request"]:
            missing(raw["request"]["postData"], "postData", where, problems)
        entry = HarEntry(raw)
        if entry.startTime is None:
            problems.append(f"{where}: startedDateTime {raw.get('startedDateTime')!r} is not a date")
        request, response = entry.request, entry.response
        for name, items in [
            ("request.headers", request.headers),
            ("request.queryString", request.queryString),
            ("request.cookies", request.cookies),
            ("response.headers", response.headers),
        ]:
            pairs(items, f"{where} {name}", problems)
        for name, value in [
            ("time", raw.get("time")),
            ("request.bodySize", request.bodySize),
            ("response.bodySize", response.bodySize),
            ("response.status", response.status),
        ]:
            if not isinstance(value, (int, float)):
                problems.append(f"{where}: {name} is not a number")
        content = raw["response"]["content"]
        text = content.get("text", "")
        body = base64.b64decode(text) if content.get("encoding") == "base64" else text.encode("utf-8")
        entries.append(
            {
                "method": request.method,
                "url": request.url,
                "httpVersion": request.httpVersion,
                "status": response.status,
                "statusText": response.statusText,
                "mimeType": response.mimeType,
                "sha256": hashlib.sha256(body).hexdigest(),
                "postData": raw["request"].get("postData", {}).get("text"),
                "authorization": request.get_header_value("authorization"),
            }
        )
    print(json.dumps({"entries": entries, "problems": problems}))


if __name__ == "__main__":
    main()
