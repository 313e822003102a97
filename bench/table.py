#!/usr/bin/env python3
"""Prints bench/run.sh's table (Markdown) from the files its runs left in WORK.

usage: table.py WORK CLK_TCK SECONDS CONNECTIONS
Per run: WORK/NAME.json (oha --output-format json); for runs through agentgate, the floor proxy or the peer also
WORK/NAME.proc ("user_ticks system_ticks vm_hwm_kib"); WORK/idle-{keepalive,mitm}.json (bench/idle.py).
"""

import json
import os
import sys

# (label, agentgate run, matching direct run)
SCENARIOS = [
    ("HTTP, keep-alive", "proxy-http", "direct-http"),
    ("MITM HTTPS, keep-alive", "mitm-keepalive", "direct-https"),
    ("MITM HTTPS, new connection per request", "mitm-newconn", "direct-https-newconn"),
    ("MITM HTTPS, 1 MiB, keep-alive", "mitm-1m", "direct-https-1m"),
    ("HTTP, first request to an unseen origin", "proxy-unseen", "direct-unseen"),
    ("MITM HTTPS, first request to an unseen origin", "proxy-unseen-https", "direct-unseen-https"),
]
# The floor proxy's run beside an agentgate run: the same requests through hyper's server and
# pooled client (for MITM also a minted, cached leaf and rustls both ways) with nothing else
# (bench/origin/src/bin/floor.rs).
FLOORS = {"proxy-http": "floor-http", "mitm-keepalive": "floor-mitm-keepalive", "proxy-unseen-https": "floor-unseen-https"}
# The peer's run beside an agentgate run: the same requests through hudsucker with no policy and
# no log (bench/peer), when bench/run.sh built it.
PEERS = {"proxy-http": "peer-http", "mitm-keepalive": "peer-mitm-keepalive"}


def load(work, name):
    with open(os.path.join(work, f"{name}.json")) as f:
        return json.load(f)


def completed(result):
    """Responses received (any status); requests cut off by the deadline are not counted."""
    return sum(result["statusCodeDistribution"].values())


def non_200(result):
    """Responses other than 200, and errors other than oha cutting requests off at the deadline."""
    errors = sum(n for error, n in result["errorDistribution"].items() if "deadline" not in error)
    return sum(n for status, n in result["statusCodeDistribution"].items() if status != "200") + errors


def row(label, result, direct_rps, proc, clk_tck):
    rps = result["metrics"]["requests_per_sec"]
    latency = result["metrics"]["latency_ms"]
    ratio = f"{rps / direct_rps:.2f}" if direct_rps else "–"
    cpu = user = system = rss = "–"
    if proc is not None:
        user_ticks, system_ticks, hwm_kib = proc
        done = completed(result)
        if done:
            per_request = lambda ticks: f"{ticks / clk_tck / done * 1e6:.0f}"
            cpu, user, system = (per_request(t) for t in (user_ticks + system_ticks, user_ticks, system_ticks))
        rss = f"{hwm_kib / 1024:.0f}"
    return (f"| {label} | {rps:,.0f} | {latency['p50']:.2f} | {latency['p99']:.2f} | {ratio} | {cpu} | {user} | {system} "
            f"| {rss} |")


def main():
    work, clk_tck, seconds, connections = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    print(f"\n{seconds} s per run (the unseen-origin runs: a count of requests, see the note), "
          f"{connections} connections, 1 KiB bodies unless noted; "
          "ratio = req/s over the matching direct run; CPU and peak RSS are the proxy's (agentgate's, or the "
          "floor proxy's: hyper's server and pooled client, no policy, no log; or hudsucker's, the peer: "
          "a mature MITM proxy from crates.io, no policy, no log), CPU split into "
          "user space (utime) and kernel (stime).\n")
    print("| scenario | req/s | p50 ms | p99 ms | ratio to direct | CPU µs/request | user µs | sys µs | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    notes = []
    for label, proxied, direct in SCENARIOS:
        if not os.path.exists(os.path.join(work, f"{direct}.json")):
            notes.append(f"{label}: not run (the origin could not bind port 443)")
            continue
        d = load(work, direct)
        print(row(f"{label}: direct", d, 0, None, clk_tck))
        runs = [(direct, d)]
        for who, name in (("floor proxy", FLOORS.get(proxied)), ("hudsucker", PEERS.get(proxied)),
                          ("agentgate", proxied)):
            if name is None:
                continue
            if who == "hudsucker" and not os.path.exists(os.path.join(work, f"{name}.json")):
                continue  # BENCH_PEER=0, or the peer did not build
            result = load(work, name)
            with open(os.path.join(work, f"{name}.proc")) as f:
                proc = tuple(int(x) for x in f.read().split())
            print(row(f"{label}: {who}", result, d["metrics"]["requests_per_sec"], proc, clk_tck))
            runs.append((name, result))
        for name, result in runs:
            bad = non_200(result)
            if bad:
                notes.append(f"{name}: {bad} responses not 200 or errors "
                             f"({result['statusCodeDistribution']}, {result['errorDistribution']})")
    labels = {proxied: label for label, proxied, _ in SCENARIOS}
    rps = lambda name: load(work, name)["metrics"]["requests_per_sec"]
    ratios = [f"agentgate / hudsucker req/s, {labels[ours]}: {rps(ours) / rps(peer):.2f}"
              for ours, peer in PEERS.items() if os.path.exists(os.path.join(work, f"{peer}.json"))]
    if ratios:
        print("\n" + "\n".join(ratios))
    for run in ("proxy-unseen", "proxy-unseen-https"):
        fetched = os.path.join(work, f"{run}.fetched")
        if os.path.exists(fetched):
            with open(fetched) as f:
                origins = int(f.read())
            total = completed(load(work, run))
            notes.append(f"{run}: {origins} of {total} requests went to an origin agentgate had not seen "
                         "(the rest picked an origin a second time)")
    for mode, label in (("keepalive", "idle keep-alive connections"), ("mitm", "idle MITM tunnels")):
        path = os.path.join(work, f"idle-{mode}.json")
        if os.path.exists(path):
            with open(path) as f:
                idle = json.load(f)
            print(f"\nMemory, {idle['count']} {label}: RSS {idle['rss_before_kib'] / 1024:.1f} → "
                  f"{idle['rss_after_kib'] / 1024:.1f} MiB, **{idle['per_connection_kib']} KiB per connection**")
    for note in notes:
        print(f"\nNote: {note}")


if __name__ == "__main__":
    main()
