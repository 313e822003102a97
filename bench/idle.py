#!/usr/bin/env python3
"""Holds N idle client connections open through agentgate and prints its RSS per connection.

Used by bench/run.sh for the memory step, against a freshly started agentgate:
  keepalive  N plain-HTTP proxy connections, each after one request (GET absolute-form)
  mitm       N CONNECT tunnels, each TLS-intercepted by agentgate, after one request inside
Every connection completes a request first, so agentgate holds the state an idle agent
connection really costs (the connection, its parser, for MITM the TLS session), then all
sit idle while VmRSS is read from /proc. Prints one JSON object. Loopback only.
"""

import argparse
import json
import resource
import socket
import ssl
import sys


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def read_head(sock, bufsize):
    """Reads up to the end of a response head; returns (head, what came after it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(bufsize)
        if not chunk:
            raise RuntimeError(f"connection closed after {data!r}")
        data += chunk
    return data.split(b"\r\n\r\n", 1)


def read_response(sock):
    """Reads one HTTP/1.1 response with a Content-Length; returns its status code."""
    head, body = read_head(sock, 65536)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed mid-body")
        body += chunk
    return status


def open_keepalive(proxy, origin):
    sock = socket.create_connection(proxy)
    sock.sendall(f"GET http://{origin}/bench/1k HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
    status = read_response(sock)
    if status != 200:
        raise RuntimeError(f"GET http://{origin}/bench/1k through the proxy answered {status}")
    return sock


def open_mitm(proxy, origin, context):
    sock = socket.create_connection(proxy)
    sock.sendall(f"CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
    # Nothing follows the 200 until the client speaks TLS.
    head, _ = read_head(sock, 4096)
    if head.split()[1] != b"200":
        raise RuntimeError(f"CONNECT {origin} answered {head!r}")
    tls = context.wrap_socket(sock, server_hostname=origin.rsplit(":", 1)[0])
    tls.sendall(f"GET /bench/1k HTTP/1.1\r\nHost: {origin}\r\n\r\n".encode())
    status = read_response(tls)
    if status != 200:
        raise RuntimeError(f"GET https://{origin}/bench/1k through the tunnel answered {status}")
    return tls


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["keepalive", "mitm"])
    parser.add_argument("--proxy", required=True, help="agentgate's HOST:PORT")
    parser.add_argument("--origin", required=True, help="the origin's HOST:PORT (http for keepalive, https for mitm)")
    parser.add_argument("--pid", required=True, type=int, help="agentgate's process id")
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--cafile", help="agentgate's CA (mitm)")
    args = parser.parse_args()

    host, port = args.proxy.rsplit(":", 1)
    proxy = (host, int(port))
    if not host.startswith("127."):
        sys.exit(f"--proxy {args.proxy}: loopback (127.0.0.0/8) only")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.count + 64:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.count + 64), hard))

    context = None
    if args.mode == "mitm":
        context = ssl.create_default_context(cafile=args.cafile)

    def connect():
        if context is None:
            return open_keepalive(proxy, args.origin)
        return open_mitm(proxy, args.origin, context)

    # One connection first, so what is measured is the cost of each further connection,
    # not of the first one (policy cache entry, leaf certificate, upstream connection).
    held = [connect()]
    before = rss_kib(args.pid)
    held += [connect() for _ in range(args.count)]
    after = rss_kib(args.pid)
    print(json.dumps({
        "mode": args.mode,
        "count": args.count,
        "rss_before_kib": before,
        "rss_after_kib": after,
        "per_connection_kib": round((after - before) / args.count, 1),
    }))
    for sock in held:
        sock.close()


if __name__ == "__main__":
    main()
