#!/usr/bin/env bash
# Where agentgate's CPU goes outside user-space instructions (issue 11, third round):
# per request, its user and system CPU time (utime, stime of /proc/PID/stat), context
# switches and CPU migrations (`perf stat`), and its system calls by kind (`strace -f -c`).
#
#   bench/syscalls.sh                       20000 requests per scenario, 10 connections
#   BENCH_AGENTGATE=/tmp/agentgate-before bench/syscalls.sh
#
# Starts the origin (bench/origin, loopback only) and agentgate with bench/run.sh's
# configuration. For each scenario (HTTP keep-alive, MITM HTTPS keep-alive) it warms up
# (one request, then 1000 with oha: policies fetched, leaf certificate minted, upstream
# connections pooled), then one oha run of BENCH_REQUESTS under `perf stat` for the CPU
# split and the switches, then a separate run of BENCH_STRACE_REQUESTS under `strace -f -c`
# (strace slows every system call, so its run gives counts, never times). Prints, per
# scenario, the figures per request.
# Environment: BENCH_REQUESTS (20000), BENCH_STRACE_REQUESTS (5000), BENCH_CONNECTIONS (10),
# BENCH_TIMEOUT (300 s per oha run), BENCH_AGENTGATE (a release binary to measure instead of
# building this checkout's). Needs strace, perf and oha. Everything listens on and connects
# to 127.0.0.0/8 only.
set -euo pipefail

REQUESTS=${BENCH_REQUESTS:-20000}
STRACE_REQUESTS=${BENCH_STRACE_REQUESTS:-5000}
CONNECTIONS=${BENCH_CONNECTIONS:-10}
TIMEOUT=${BENCH_TIMEOUT:-300}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'syscalls: %s\n' "$*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"
for tool in strace perf oha; do command -v "$tool" >/dev/null || die "$tool is missing"; done

build_binaries

open_work syscalls "1"

start_origin 0
write_config
start_agentgate agentgate
# Measurement output goes to its own directory: the config's directory is watched for
# changes, and a file written there would wake agentgate's watcher.
mkdir -p "$WORK/out"
CLK_TCK=$(getconf CLK_TCK)

load() {  # load N URL JSON: one bounded oha run through agentgate
    timeout "$TIMEOUT" oha --no-tui --output-format json -n "$1" -c "$CONNECTIONS" \
        -x "http://$PROXY" --cacert "$WORK/ca/agentgate-ca.pem" "$2" >"$3"
}
answered() { python3 -c 'import json,sys; print(sum(json.load(open(sys.argv[1]))["statusCodeDistribution"].values()))' "$1"; }

measure() {
    local name=$1 url=$2 out="$WORK/out/$1"
    say "$name: warm-up, then $REQUESTS requests under perf stat, $STRACE_REQUESTS under strace"
    curl -sSf -o /dev/null --max-time 60 -x "http://$PROXY" --cacert "$WORK/ca/agentgate-ca.pem" "$url" \
        || die "$name: warm-up request through agentgate failed"
    load 1000 "$url" "$out.warm.json"
    local user0 sys0 user1 sys1 perf_pid strace_pid n
    read -r user0 sys0 < <(awk '{ print $14, $15 }' "/proc/$AG_PID/stat")
    perf stat -e task-clock,context-switches,cpu-migrations -p "$AG_PID" -o "$out.perf" &
    perf_pid=$!
    load "$REQUESTS" "$url" "$out.json"
    kill -INT "$perf_pid" && wait "$perf_pid" || true
    read -r user1 sys1 < <(awk '{ print $14, $15 }' "/proc/$AG_PID/stat")
    n=$(answered "$out.json")
    printf '%s: %s requests; per request: user %s µs, sys %s µs' "$name" "$n" \
        "$(( (user1 - user0) * 1000000 / CLK_TCK / n ))" "$(( (sys1 - sys0) * 1000000 / CLK_TCK / n ))"
    awk -v n="$n" '/context-switches|cpu-migrations/ { gsub(",", "", $1); printf ", %s %.2f", $2, $1 / n }' "$out.perf"
    echo
    strace -f -c -p "$AG_PID" -o "$out.strace" 2>/dev/null &
    strace_pid=$!
    sleep 1   # strace attaches to every thread
    load "$STRACE_REQUESTS" "$url" "$out.strace.json"
    kill -INT "$strace_pid" && wait "$strace_pid" || true
    n=$(answered "$out.strace.json")
    printf '%s: system calls per request (%s requests under strace):' "$name" "$n"
    # `% time seconds usecs/call calls [errors] syscall`: calls is the 4th field.
    awk -v n="$n" '$1 ~ /^[0-9.]+$/ && NF >= 5 { printf " %s %.2f;", $NF, $4 / n }' "$out.strace"
    echo
}

measure http "http://$ORIGIN_IP:$ORIGIN_HTTP_PORT$BENCH_PATH"
measure mitm "https://$ORIGIN_IP:$ORIGIN_HTTPS_PORT$BENCH_PATH"
