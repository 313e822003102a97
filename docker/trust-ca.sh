#!/bin/sh
# Trust agentgate's CA inside a Debian- or Alpine-based container, then print the exports
# that make clients use it.
#
#   eval "$(sh trust-ca.sh)"               # fetch http://agentgate.local/ca.pem through the proxy
#   eval "$(sh trust-ca.sh /ca/agentgate-ca.pem)"   # or install a file you already have
#
# The certificate goes to $ROOT/usr/local/share/ca-certificates/agentgate-ca.crt and
# update-ca-certificates adds it to the system bundle. Only `export` lines go to stdout;
# everything else goes to stderr, so `eval "$(...)"` is safe.
#
# Environment:
#   AGENTGATE_CA_URL  where to fetch the CA (default http://agentgate.local/ca.pem, answered by
#                     agentgate itself when asked through it: http_proxy must point at it)
#   ROOT              a prefix for every path written (default empty: the container's own
#                     root); the tests use a temporary directory
#
# Needs: root (to write the trust store); curl, wget or python3 to fetch; the ca-certificates
# package for update-ca-certificates (Alpine: apk add ca-certificates).
set -eu

ROOT=${ROOT:-}
CA_URL=${AGENTGATE_CA_URL:-http://agentgate.local/ca.pem}
LOCAL_DIR="$ROOT/usr/local/share/ca-certificates"
TARGET="$LOCAL_DIR/agentgate-ca.crt"
BUNDLE="$ROOT/etc/ssl/certs/ca-certificates.crt"

say() { printf 'trust-ca: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

# curl needs the lowercase variable for http:// URLs; most tools read either.
: "${http_proxy:=${HTTP_PROXY:-}}"
export http_proxy

fetch() {
    if command -v curl >/dev/null 2>&1; then
        curl -fsS --retry 5 --retry-connrefused --retry-delay 1 -o "$2" "$1"
    elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$2" "$1"
    elif command -v python3 >/dev/null 2>&1; then
        python3 -c 'import sys, urllib.request; open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1], timeout=30).read())' "$1" "$2"
    else
        die "no curl, wget or python3 to fetch $1: install one, or pass the CA file as an argument"
    fi
}

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
if [ $# -ge 1 ]; then
    [ -r "$1" ] || die "cannot read $1: pass the path of agentgate's CA certificate (agentgate ca export > ca.pem)"
    cp "$1" "$tmp"
    source_name=$1
else
    [ -n "$http_proxy" ] || say "http_proxy is not set: $CA_URL is answered only through agentgate"
    fetch "$CA_URL" "$tmp" || die "cannot fetch $CA_URL: set http_proxy=http://agentgate:8080 (the proxy), or pass the CA file as an argument"
    source_name=$CA_URL
fi
grep -q -- '-----BEGIN CERTIFICATE-----' "$tmp" \
    || die "$source_name is not a PEM certificate: expected agentgate's CA (-----BEGIN CERTIFICATE-----)"

mkdir -p "$LOCAL_DIR" 2>/dev/null || die "cannot create $LOCAL_DIR: run as root (the trust store belongs to root)"
cp "$tmp" "$TARGET" 2>/dev/null || die "cannot write $TARGET: run as root (the trust store belongs to root)"
chmod 0644 "$TARGET"
say "installed $source_name as $TARGET"

if [ -f "$ROOT/etc/alpine-release" ]; then
    distro=alpine
elif [ -f "$ROOT/etc/debian_version" ]; then
    distro=debian
else
    distro=unknown
    say "neither $ROOT/etc/debian_version nor $ROOT/etc/alpine-release: assuming the Debian layout"
fi

if command -v update-ca-certificates >/dev/null 2>&1; then
    if [ -n "$ROOT" ] && [ "$distro" != alpine ]; then
        # Debian's update-ca-certificates takes every directory it uses as an option.
        update-ca-certificates \
            --certsconf "$ROOT/etc/ca-certificates.conf" \
            --certsdir "$ROOT/usr/share/ca-certificates" \
            --localcertsdir "$LOCAL_DIR" \
            --etccertsdir "$ROOT/etc/ssl/certs" \
            --hooksdir "$ROOT/etc/ca-certificates/update.d" >&2
    else
        update-ca-certificates >&2
    fi
    grep -qF -- "$(sed -n 2p "$TARGET")" "$BUNDLE" 2>/dev/null \
        || die "update-ca-certificates ran but $BUNDLE does not hold the CA: check $TARGET ends in .crt and the tool's output above"
else
    say "no update-ca-certificates (install ca-certificates: apt-get install ca-certificates, or apk add ca-certificates);"
    say "the exports below point at the CA alone, so only agentgate's certificates verify"
    BUNDLE=$TARGET
fi

# Bundle-reading clients get the system bundle (which now holds the CA); Node.js adds the
# CA to its own roots. Paths are as seen inside the container (without $ROOT).
bundle=${BUNDLE#"$ROOT"}
ca=${TARGET#"$ROOT"}
cat <<EOF
export SSL_CERT_FILE=$bundle
export REQUESTS_CA_BUNDLE=$bundle
export CURL_CA_BUNDLE=$bundle
export GIT_SSL_CAINFO=$bundle
export NODE_EXTRA_CA_CERTS=$ca
EOF
