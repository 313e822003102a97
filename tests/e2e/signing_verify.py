"""An independent Web Bot Auth verifier (RFC 9421 HTTP Message Signatures, Ed25519), written
from the RFC and the draft, sharing no code with agentgate: it parses Signature-Input,
Signature and Signature-Agent as RFC 8941 structured fields, rebuilds the signature base
itself from what the origin received, finds the key by its RFC 7638 thumbprint in the JWK
set `agentgate keys` printed, and verifies with the `cryptography` package.

stdin: {"seen": {"authority", "method", "path", "headers": [[name, value], ...]},
        "jwks": {"keys": [...]}, "authority": optional override (a tampered @authority),
        "directory_cafile": a CA file; with it and no "jwks", the key set is fetched over https
        from the signature's Signature-Agent member: the directory's URL itself
        (draft-ietf-webbotauth-httpsig-protocol-01), or, for a bare origin as the earlier
        revisions wrote it, that origin's /.well-known/http-message-signatures-directory}
stdout: {"ok": bool, "error": str, "keyid", "created", "expires", "components", "tag",
         "directory": the URL the key set was fetched from, when it was}
"""
import base64
import hashlib
import json
import ssl
import sys
import urllib.parse
import urllib.request

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


class Parser:
    """The parts of RFC 8941 parsing a Web Bot Auth signature uses."""

    def __init__(self, text):
        self.s = text
        self.i = 0

    def peek(self):
        return self.s[self.i] if self.i < len(self.s) else ""

    def ws(self):
        while self.peek() in (" ", "\t") and self.peek():
            self.i += 1

    def key(self):
        start = self.i
        while self.peek() and (self.peek().isalnum() or self.peek() in "_-.*") and (self.peek().islower() or not self.peek().isalpha()):
            self.i += 1
        if start == self.i:
            raise ValueError("expected a key at %d in %r" % (self.i, self.s))
        return self.s[start:self.i]

    def bare_item(self):
        c = self.peek()
        if c == '"':
            self.i += 1
            out = []
            while True:
                c = self.peek()
                if not c:
                    raise ValueError("unterminated string")
                self.i += 1
                if c == "\\":
                    out.append(self.peek())
                    self.i += 1
                elif c == '"':
                    return "".join(out)
                else:
                    out.append(c)
        if c == ":":
            end = self.s.index(":", self.i + 1)
            raw = self.s[self.i + 1:end]
            self.i = end + 1
            return base64.b64decode(raw, validate=True)
        if c == "-" or c.isdigit():
            start = self.i
            self.i += 1
            while self.peek().isdigit():
                self.i += 1
            return int(self.s[start:self.i])
        if c == "?":
            self.i += 2
            return self.s[self.i - 1] == "1"
        start = self.i
        while self.peek() and self.peek() not in ";,() ":
            self.i += 1
        return ("token", self.s[start:self.i])

    def params(self):
        out = []
        while self.peek() == ";":
            self.i += 1
            self.ws()
            k = self.key()
            v = True
            if self.peek() == "=":
                self.i += 1
                v = self.bare_item()
            out.append((k, v))
        return out

    def item_or_inner_list(self):
        if self.peek() == "(":
            self.i += 1
            items = []
            while True:
                self.ws()
                if self.peek() == ")":
                    self.i += 1
                    break
                items.append((self.bare_item(), self.params()))
            return (items, self.params())
        return (self.bare_item(), self.params())

    def dictionary(self):
        out = {}
        while self.i < len(self.s):
            self.ws()
            k = self.key()
            if self.peek() == "=":
                self.i += 1
                out[k] = self.item_or_inner_list()
            else:
                out[k] = (True, self.params())
            self.ws()
            if self.peek() == ",":
                self.i += 1
            elif self.peek():
                raise ValueError("garbage at %d in %r" % (self.i, self.s))
        return out


def ser_bare(v):
    if isinstance(v, bool):
        return "?1" if v else "?0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, bytes):
        return ":" + base64.b64encode(v).decode() + ":"
    if isinstance(v, tuple):
        return v[1]
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def ser_params(params):
    return "".join(";" + k + ("" if v is True else "=" + ser_bare(v)) for k, v in params)


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def thumbprint(jwk):
    canonical = json.dumps({"crv": jwk["crv"], "kty": jwk["kty"], "x": jwk["x"]}, separators=(",", ":"), sort_keys=True)
    return b64url(hashlib.sha256(canonical.encode()).digest())


def fetch_directory(member, cafile):
    """The JWK set at the Signature-Agent member `member` (an sf-string URL), over https
    verified with `cafile`, never through a proxy."""
    if not isinstance(member, str):
        raise ValueError("the Signature-Agent member is not a string")
    url = urllib.parse.urlsplit(member)
    if url.scheme != "https":
        raise ValueError("the Signature-Agent member is not an https URL: " + member)
    if url.path in ("", "/"):
        member = member.rstrip("/") + "/.well-known/http-message-signatures-directory"
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=cafile)))
    with opener.open(member, timeout=10) as response:
        return member, json.load(response)


def main():
    given = json.load(sys.stdin)
    seen = given["seen"]
    headers = {}
    for name, value in seen["headers"]:
        headers.setdefault(name.lower(), []).append(value)
    field = lambda name: ", ".join(v.strip() for v in headers.get(name, []))
    result = {"ok": False}
    try:
        inputs = Parser(field("signature-input")).dictionary()
        signatures = Parser(field("signature")).dictionary()
        label, (components, params) = next(iter(inputs.items()))
        p = dict(params)
        result.update(keyid=p.get("keyid"), created=p.get("created"), expires=p.get("expires"), tag=p.get("tag"),
                      components=[c for c, _ in components])
        if p.get("tag") != "web-bot-auth":
            raise ValueError("tag is not web-bot-auth")
        if p.get("alg") not in (None, "ed25519"):
            raise ValueError("alg is not ed25519")
        lines = []
        for name, cparams in components:
            cp = dict(cparams)
            if name == "@authority":
                value = (given.get("authority") or seen["authority"]).lower()
                for default in (":443", ":80"):
                    if value.endswith(default):
                        value = value[: -len(default)]
            elif name == "@method":
                value = seen["method"]
            elif name == "@path":
                value = seen["path"] or "/"
            elif name.startswith("@"):
                raise ValueError("unsupported derived component " + name)
            elif "key" in cp:
                member = Parser(field(name)).dictionary()[cp["key"]]
                value = ser_bare(member[0]) + ser_params(member[1])
            else:
                value = field(name)
            lines.append(ser_bare(name) + ser_params(cparams) + ": " + value)
        signature_params = "(" + " ".join(ser_bare(c) + ser_params(cp) for c, cp in components) + ")" + ser_params(params)
        lines.append('"@signature-params": ' + signature_params)
        base = "\n".join(lines).encode()
        jwks = given.get("jwks")
        if jwks is None:
            member = Parser(field("signature-agent")).dictionary()[label][0]
            result["directory"], jwks = fetch_directory(member, given["directory_cafile"])
        jwk = next((k for k in jwks["keys"] if k.get("kid") == p.get("keyid")), None)
        if jwk is None:
            raise ValueError("no key in the directory has kid " + str(p.get("keyid")))
        if thumbprint(jwk) != p.get("keyid"):
            raise ValueError("the key's thumbprint is not its kid")
        x = base64.urlsafe_b64decode(jwk["x"] + "=" * (-len(jwk["x"]) % 4))
        signature = signatures[label][0]
        Ed25519PublicKey.from_public_bytes(x).verify(signature, base)
        result["ok"] = True
    except InvalidSignature:
        result["error"] = "signature does not verify"
    except Exception as e:  # a malformed header is a rejection, reported
        result["error"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(result))


main()
