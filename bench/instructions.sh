#!/usr/bin/env bash
# Instructions per request: agentgate's CPU cost measured so that a busy, shared machine
# cannot spoil it (issue 11). Wall time and req/s move with whatever else runs; the number
# of instructions agentgate executes for a request does not.
#
#   bench/instructions.sh                  2000 requests per scenario, 10 connections
#   BENCH_REQUESTS=500 bench/instructions.sh
#
# Builds agentgate and the origin (release, as bench/run.sh does), starts the origin
# (bench/origin, loopback only) and agentgate under `valgrind --tool=callgrind` with
# bench/run.sh's configuration (decision log on, to a file; default log level). For each
# scenario, HTTP keep-alive and MITM HTTPS keep-alive (and, when asked for, MITM HTTPS with
# a new connection per request: `mitm-newconn`), and the same two through the floor proxy
# (`floor-http`, `floor-mitm`: bench/origin/src/bin/floor.rs, hyper and rustls with no
# policy and no log; the last rows are agentgate's instructions above the floor), it sends one warm-up request (the
# origin's policies are fetched, the leaf certificate minted, the upstream connection
# pooled), zeroes callgrind's counters (`callgrind_control --zero`), sends BENCH_REQUESTS
# requests with oha (`-n`, BENCH_CONNECTIONS connections, keep-alive), dumps the counters
# (`callgrind_control --dump`) and prints instructions per request (the dump's total over
# the requests oha saw answered) and heap allocations per request (the calls to malloc,
# calloc and realloc callgrind counted, bench/allocations.py). Each scenario is its own process.
#
# Bounded: under callgrind agentgate runs ~50x slower, so 2000 requests take about half a
# minute per scenario; every oha run is also stopped after BENCH_TIMEOUT seconds (300). The
# callgrind files stay in the work directory it prints (`callgrind_annotate FILE` shows
# where the instructions go, `--inclusive=yes` for inclusive costs).
# First requests (scenarios `unseen-http` and `unseen-https`, asked for by name): curl sends
# one request to each of BENCH_UNSEEN_REQUESTS (200) origins agentgate has not seen
# (bench/origin's unseen origins, 127.1.x.y; for HTTPS a CONNECT each, and 443 must be
# bindable), one after another, and the row is instructions per first request: the policy
# fetches, their parsing, the decision, the request and the log (for HTTPS also the client's
# TLS handshake and the leaf minted for the host).
# Configurations (BENCH_CONFIG, "default"; e.g. "default everything", bench/lib.sh
# write_config): each scenario is measured under each, its name suffixed with the
# configuration's (`http-everything`, `floor-http-everything`: the floor proxy requests the
# same path, /bench/usage/1k there), and each configuration gets its own rows above the floor.
# Environment: BENCH_REQUESTS (2000), BENCH_CONNECTIONS (10), BENCH_TIMEOUT (300),
# BENCH_UNSEEN_REQUESTS (200), BENCH_NET (0: the origin's addresses, bench/lib.sh),
# BENCH_SCENARIOS ("http mitm floor-http floor-mitm"; also "mitm-newconn", "unseen-http", "unseen-https"), BENCH_AGENTGATE (a release binary to measure instead of
# building this checkout's, e.g. a copy kept from before a change). Needs valgrind and oha (~/.cargo/bin). Everything listens
# on and connects to 127.0.0.0/8 only.
set -euo pipefail

REQUESTS=${BENCH_REQUESTS:-2000}
CONNECTIONS=${BENCH_CONNECTIONS:-10}
TIMEOUT=${BENCH_TIMEOUT:-300}
SCENARIOS=${BENCH_SCENARIOS:-http mitm floor-http floor-mitm}
CONFIGS=${BENCH_CONFIG:-default}
UNSEEN_REQUESTS=${BENCH_UNSEEN_REQUESTS:-200}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'instructions: %s\n' "$*" >&2; exit 1; }
# valgrind starts slowly: wait up to 120 s for it.
WAIT_TRIES=1200
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
command -v valgrind >/dev/null || die "valgrind is missing (apt-get install valgrind)"
command -v callgrind_control >/dev/null || die "callgrind_control is missing (it comes with valgrind)"
command -v oha >/dev/null || die "oha is missing (cargo install oha --locked)"

build_binaries

open_work instructions "1"

unseen=0
[[ " $SCENARIOS " != *" unseen-"* ]] || unseen=$((2 * UNSEEN_REQUESTS))
start_origin "$unseen"
[ "$ORIGIN_443" = 1 ] || echo "instructions: origin could not bind port 443: the HTTP scenario runs without AGENTS.md" >&2

# measure NAME URL [OHA-ARGS...]: one process under callgrind, one scenario: agentgate, or
# for a NAME starting with floor- the floor proxy (bench/origin/src/bin/floor.rs). For a NAME
# starting with unseen-, URL is a file of unseen origins' URLs: curl requests the first
# UNSEEN_REQUESTS of them in turn (the warm-up goes to the main origin).
measure() {
    local name=$1 url=$2
    shift 2
    local out="$WORK/callgrind.$name" pid ca proxy
    if [[ $name == floor-* ]]; then
        start_floor valgrind --tool=callgrind --callgrind-out-file="$out.%p"
        pid=$FLOOR_PID proxy=$FLOOR ca="$WORK/floor-ca.pem"
    else
        start_agentgate "agentgate-$name" valgrind --tool=callgrind --callgrind-out-file="$out.%p"
        pid=$AG_PID proxy=$PROXY ca="$WORK/ca/agentgate-ca.pem"
    fi
    local warm=$url
    [[ $name != unseen-* ]] || warm="http://$ORIGIN_IP:$ORIGIN_HTTP_PORT$BENCH_PATH"
    curl -sSf -o /dev/null --max-time 60 -x "http://$proxy" --cacert "$ca" "$warm" \
        || die "$name: warm-up request failed"
    callgrind_control --zero "$pid" >/dev/null 2>&1
    local answered oks dump instructions allocations
    if [[ $name == unseen-* ]]; then
        head -n "$UNSEEN_REQUESTS" "$url" | sed 's/.*/url = "&"\noutput = "\/dev\/null"/' >"$WORK/$name.curl"
        timeout "$TIMEOUT" curl -sS --max-time 60 -x "http://$proxy" --cacert "$ca" -w '%{http_code}\n' \
            -K "$WORK/$name.curl" >"$WORK/$name.codes" || true
        answered=$(grep -c . "$WORK/$name.codes" || true)
        oks=$(grep -c '^200$' "$WORK/$name.codes" || true)
    else
        timeout "$TIMEOUT" oha --no-tui --output-format json -n "$REQUESTS" -c "$CONNECTIONS" \
            -x "http://$proxy" --cacert "$ca" "$@" "$url" >"$WORK/$name.json"
        answered=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(sum(d["statusCodeDistribution"].values()))' "$WORK/$name.json")
        oks=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["statusCodeDistribution"].get("200", 0))' "$WORK/$name.json")
    fi
    callgrind_control --dump="$name" "$pid" >/dev/null 2>&1
    stop_agentgate
    stop_floor
    [ "$answered" -gt 0 ] || die "$name: no answers"
    [ "$answered" = "$oks" ] || die "$name: $((answered - oks)) of $answered answers were not 200"
    # The dump taken after the requests: the first of this process's files whose
    # trigger names the scenario.
    dump=$(grep -l "^desc: Trigger: .*$name" "$out".* | head -1)
    instructions=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$dump")
    [ -n "$instructions" ] || die "$name: no callgrind summary in $dump"
    allocations=$(python3 "$ROOT/bench/allocations.py" "$dump")
    PER_REQUEST[$name]=$((instructions / answered))
    ALLOCATIONS[$name]=$(python3 -c "print(f'{$allocations / $answered:.1f}')")
    printf '| %s | %s | %s | %s | %s |\n' "$name" "$answered" "$instructions" "$((instructions / answered))" "${ALLOCATIONS[$name]}"
    echo "instructions: $name: callgrind_annotate $dump" >&2
}

declare -A PER_REQUEST ALLOCATIONS
printf '| scenario | requests | instructions | instructions/request | allocations/request |\n|---|---:|---:|---:|---:|\n'
for config in $CONFIGS; do
    write_config "$config"
    suffix=""
    [ "$config" = default ] || suffix="-$config"
    for scenario in $SCENARIOS; do
        case $scenario in
            http | floor-http) measure "$scenario$suffix" "http://$ORIGIN_IP:$ORIGIN_HTTP_PORT$BENCH_PATH" ;;
            mitm | floor-mitm) measure "$scenario$suffix" "https://$ORIGIN_IP:$ORIGIN_HTTPS_PORT$BENCH_PATH" ;;
            mitm-newconn) measure "mitm-newconn$suffix" "https://$ORIGIN_IP:$ORIGIN_HTTPS_PORT$BENCH_PATH" --disable-keepalive ;;
            unseen-http) measure "unseen-http$suffix" "$WORK/unseen-urls.txt" ;;
            unseen-https)
                [ -s "$WORK/unseen-https-urls.txt" ] || die "unseen-https needs the origin on port 443 (run as root)"
                measure "unseen-https$suffix" "$WORK/unseen-https-urls.txt" ;;
            *) die "unknown scenario $scenario (http, mitm, mitm-newconn, floor-http, floor-mitm, unseen-http, unseen-https)" ;;
        esac
    done
done
# agentgate's instructions above the floor's, where both were measured, per configuration.
for config in $CONFIGS; do
    suffix=""
    [ "$config" = default ] || suffix="-$config"
    for scenario in http mitm; do
        s=$scenario$suffix
        if [ -n "${PER_REQUEST[$s]:-}" ] && [ -n "${PER_REQUEST[floor-$s]:-}" ]; then
            printf '| %s above the floor | | | %s | %s |\n' "$s" "$((PER_REQUEST[$s] - PER_REQUEST[floor-$s]))" \
                "$(python3 -c "print(f'{${ALLOCATIONS[$s]} - ${ALLOCATIONS[floor-$s]}:.1f}')")"
        fi
    done
done
