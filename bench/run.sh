#!/usr/bin/env bash
# The load benchmark: agentgate against a direct connection, on loopback only.
#
#   bench/run.sh                     10 s per run, 50 connections
#   BENCH_SECONDS=30 BENCH_CONNECTIONS=100 bench/run.sh
#
# Builds agentgate (release) and the in-repo origin (bench/origin), starts both with a
# benchmark config (decision log on, to a file), drives each scenario with oha (installed
# with `cargo install oha --locked` if missing) and prints one table: req/s, p50, p99, the
# ratio to the matching direct run (and, for HTTP and MITM keep-alive, the same for a floor
# proxy: hyper's server and client, and for MITM a minted leaf and rustls, with nothing else), agentgate's CPU time per request (utime + stime from
# /proc/PID/stat, and each of the two: user space and kernel) and its peak RSS (VmHWM, reset before each run). Then the memory step:
# agentgate's RSS per idle keep-alive connection and per idle MITM tunnel (bench/idle.py).
#
# Environment: BENCH_CONFIG (`default`, or `everything`: agentgate's configuration, bench/lib.sh
# write_config; the keep-alive and new-connection runs request its BENCH_PATH through agentgate,
# the floor proxy, the peer and directly alike), BENCH_CONFIG_EXTRA (a TOML file merged over it,
# a table there replacing the template's), BENCH_SECONDS (10; the unseen-origin scenario runs BENCH_UNSEEN / 4 requests
# instead, each bounded by it), BENCH_CONNECTIONS (50), BENCH_UNSEEN (unseen origins
# the origin listens as, 10000 or what the open-file limit allows), BENCH_IDLE (idle connections, 1000), BENCH_KEEP=1 keeps
# the work directory (configs, oha JSON, decision log, agentgate's stderr). BENCH_AGENTGATE=PATH
# runs a kept release binary instead of building this checkout (before/after). BENCH_NET=K
# moves the origin's addresses (bench/lib.sh) so two benchmarks can run at once. BENCH_PEER
# (1) builds hudsucker as a peer proxy (bench/peer, from crates.io) and runs the HTTP and MITM
# keep-alive scenarios through it too; 0 skips it (as does a failed build, with a warning). BENCH_PERF=1
# records each run through agentgate with `perf record` (installs linux-perf with apt if
# missing) and leaves the self cost per function in WORK/NAME.perf.txt (implies BENCH_KEEP).
# Everything listens on and connects to 127.0.0.0/8 only.
set -euo pipefail

SECONDS_PER_RUN=${BENCH_SECONDS:-10}
CONNECTIONS=${BENCH_CONNECTIONS:-50}
UNSEEN=${BENCH_UNSEEN:-10000}
IDLE=${BENCH_IDLE:-1000}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

say() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'bench: %s\n' "$*" >&2; exit 1; }
# shellcheck source=bench/lib.sh
. "$ROOT/bench/lib.sh"

# --- what the script needs, installed if missing (Debian/Ubuntu apt, rustup) ---------
need_apt=()
command -v curl >/dev/null || need_apt+=(curl ca-certificates)
command -v python3 >/dev/null || need_apt+=(python3)
command -v cc >/dev/null || need_apt+=(build-essential)
if ((${#need_apt[@]})); then
    command -v apt-get >/dev/null || die "missing ${need_apt[*]} and no apt-get to install them"
    say "installing ${need_apt[*]}"
    sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    $sudo apt-get update -q && $sudo apt-get install -y -q "${need_apt[@]}"
fi
if ! command -v cargo >/dev/null; then
    [ -x "$HOME/.cargo/bin/cargo" ] || { say "installing the Rust toolchain (rustup)";
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal; }
    export PATH="$HOME/.cargo/bin:$PATH"
fi
export PATH="$HOME/.cargo/bin:$PATH"
command -v oha >/dev/null || { say "installing oha"; cargo install oha --locked; }
if [ "${BENCH_PERF:-0}" = 1 ]; then
    BENCH_KEEP=1
    command -v perf >/dev/null || { sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo;
        $sudo apt-get update -q && $sudo apt-get install -y -q linux-perf; }
fi

# Many sockets: the unseen origins listen on 2 x BENCH_UNSEEN addresses and hold up to one
# connection per address for 2 s (so a third for room), the memory step holds BENCH_IDLE
# connections (agentgate raises its own limit at start-up).
hard=$(ulimit -Hn)
if [ -z "${BENCH_UNSEEN:-}" ] && [ "$hard" != unlimited ] && [ "$hard" -lt $((3 * UNSEEN + IDLE + 1024)) ]; then
    UNSEEN=$(( (hard - IDLE - 1024) / 3 ))   # as many unseen origins as the limit allows
fi
if [ "$hard" != unlimited ] && [ "$hard" -lt $((3 * UNSEEN + IDLE + 1024)) ]; then
    die "open-file hard limit $hard is too low for BENCH_UNSEEN=$UNSEEN and BENCH_IDLE=$IDLE"
fi
ulimit -n "$hard" 2>/dev/null || ulimit -n 1048576

export BENCH_PEER=${BENCH_PEER:-1}
build_binaries

# --- processes, all cleaned up on exit -------------------------------------------------
open_work bench "${BENCH_KEEP:-0}"

say "starting the origin ($UNSEEN unseen origins)"
start_origin "$UNSEEN"
[ "$ORIGIN_443" = 1 ] || echo "bench: origin could not bind port 443: AGENTS.md of http origins is not served" >&2
HTTP_ORIGIN="$ORIGIN_IP:$ORIGIN_HTTP_PORT"
HTTPS_ORIGIN="$ORIGIN_IP:$ORIGIN_HTTPS_PORT"

write_config
start_agentgate agentgate
AG_CA="$WORK/ca/agentgate-ca.pem"

# --- smoke check: both paths answer 200 and are logged as allowed ----------------------
say "checking the paths (agentgate $PROXY, origin $ORIGIN_IP)"
curl -sSf -o /dev/null -x "http://$PROXY" "http://$HTTP_ORIGIN$BENCH_PATH" || die "HTTP through agentgate failed"
curl -sSf -o /dev/null -x "http://$PROXY" --cacert "$AG_CA" "https://$HTTPS_ORIGIN$BENCH_PATH" || die "MITM HTTPS through agentgate failed"
logged_allows() { [ "$(grep -c '"event.action":"allow"' "$WORK/log/decisions.jsonl" 2>/dev/null || true)" -ge 2 ] 2>/dev/null; }
wait_for logged_allows || die "decision log has no allow records: $(tail -2 "$WORK/log/decisions.jsonl")"

# --- the runs ----------------------------------------------------------------------
CLK_TCK=$(getconf CLK_TCK)
# utime and stime (fields 14 and 15) of process $1, in clock ticks.
cpu_ticks() { awk '{ print $14, $15 }' "/proc/$1/stat"; }
vm_hwm() { awk '/^VmHWM:/ { print $2 }' "/proc/$1/status"; }

# How a run ends, for oha (which takes a duration or a count, never both): BENCH_SECONDS,
# except for the unseen origins (below).
bound=(-z "${SECONDS_PER_RUN}s")

# run NAME through(proxy|floor|peer|direct) OHA-ARGS... : one oha run, its JSON in $WORK/NAME.json
# and for runs through a proxy (agentgate, the floor proxy or the peer) that proxy's user and system
# CPU ticks and peak RSS in $WORK/NAME.proc.
run() {
    local name=$1 through=$2; shift 2
    local proxy_args=() pid=""
    case $through in
        proxy) proxy_args=(-x "http://$PROXY" --cacert "$AG_CA"); pid=$AG_PID ;;
        floor) proxy_args=(-x "http://$FLOOR" --cacert "$WORK/floor-ca.pem"); pid=$FLOOR_PID ;;
        peer) proxy_args=(-x "http://$PEER" --cacert "$WORK/peer-ca.pem"); pid=$PEER_PID ;;
        *) proxy_args=(--cacert "$WORK/origin-ca.pem") ;;
    esac
    [ -z "$pid" ] || echo 5 >"/proc/$pid/clear_refs"   # resets VmHWM to the current RSS
    say "$name ($through, ${bound[*]}, $CONNECTIONS connections)"
    local user0 sys0 user1 sys1 perf_pid=""
    if [ "${BENCH_PERF:-0}" = 1 ] && [ "$through" = proxy ]; then
        # The software clock: hardware counters are often missing in VMs and containers.
        perf record -q -e cpu-clock -F 999 -g -p "$AG_PID" -o "$WORK/$name.perf.data" 2>>"$WORK/perf.err" &
        perf_pid=$!
    fi
    [ -z "$pid" ] || read -r user0 sys0 < <(cpu_ticks "$pid")
    oha --no-tui --output-format json "${bound[@]}" -c "$CONNECTIONS" "${proxy_args[@]}" "$@" >"$WORK/$name.json"
    if [ -n "$pid" ]; then
        read -r user1 sys1 < <(cpu_ticks "$pid")
        echo "$((user1 - user0)) $((sys1 - sys0)) $(vm_hwm "$pid")" >"$WORK/$name.proc"
    fi
    if [ -n "$perf_pid" ]; then
        kill -INT "$perf_pid" && wait "$perf_pid" || true
        perf report -i "$WORK/$name.perf.data" --no-children --sort symbol -g none --stdio 2>/dev/null \
            | grep -v '^$' | grep -v '^#' | grep '%' | sed 's/ *- *- *$//; s/ *$//' | head -40 >"$WORK/$name.perf.txt" || true
        echo "bench: self cost by function: $WORK/$name.perf.txt" >&2
    fi
}

run direct-http direct "http://$HTTP_ORIGIN$BENCH_PATH"
run proxy-http proxy "http://$HTTP_ORIGIN$BENCH_PATH"
# The floor: the same run through the least a proxy on agentgate's stack costs (hyper's
# server and pooled client, no policy, no log), so the table shows what is the stack's.
start_floor
curl -sSf -o /dev/null -x "http://$FLOOR" "http://$HTTP_ORIGIN$BENCH_PATH" || die "HTTP through the floor proxy failed"
run floor-http floor "http://$HTTP_ORIGIN$BENCH_PATH"
stop_floor
# The peer: the same run through hudsucker (bench/peer), a mature MITM proxy with no policy
# and no log, when it built.
if [ -n "$PEER_BIN" ]; then
    start_peer
    curl -sSf -o /dev/null -x "http://$PEER" "http://$HTTP_ORIGIN$BENCH_PATH" || die "HTTP through the peer failed"
    run peer-http peer "http://$HTTP_ORIGIN$BENCH_PATH"
    stop_peer
fi
run direct-https direct "https://$HTTPS_ORIGIN$BENCH_PATH"
run mitm-keepalive proxy "https://$HTTPS_ORIGIN$BENCH_PATH"
# The MITM floor: the same run through the floor proxy's CONNECT path (a minted, cached leaf,
# TLS both ways, the pooled HTTPS client; no policy, no log).
start_floor
curl -sSf -o /dev/null -x "http://$FLOOR" --cacert "$WORK/floor-ca.pem" "https://$HTTPS_ORIGIN$BENCH_PATH" \
    || die "MITM HTTPS through the floor proxy failed"
run floor-mitm-keepalive floor "https://$HTTPS_ORIGIN$BENCH_PATH"
stop_floor
if [ -n "$PEER_BIN" ]; then
    start_peer
    curl -sSf -o /dev/null -x "http://$PEER" --cacert "$WORK/peer-ca.pem" "https://$HTTPS_ORIGIN$BENCH_PATH" \
        || die "MITM HTTPS through the peer failed"
    run peer-mitm-keepalive peer "https://$HTTPS_ORIGIN$BENCH_PATH"
    stop_peer
fi
run direct-https-newconn direct --disable-keepalive "https://$HTTPS_ORIGIN$BENCH_PATH"
run mitm-newconn proxy --disable-keepalive "https://$HTTPS_ORIGIN$BENCH_PATH"
run direct-https-1m direct "https://$HTTPS_ORIGIN/bench/1m"
run mitm-1m proxy "https://$HTTPS_ORIGIN/bench/1m"
# Unseen origins: every URL is its own origin (127.1.x.y; half of them for HTTP, half for
# HTTPS, bench/origin); oha picks URLs at random, so some are picked twice: the origin
# counts the robots.txt it served, i.e. the origins agentgate really fetched for the first
# time. A count, not a duration: a quarter as many requests as origins keeps ~88 % of them
# first requests however fast the machine (a 10 s run on a fast one went through all the
# origins and measured repeats), and each request is bounded in time (-t) so the run is too.
# unseen RUN-SUFFIX URL-FILE [OHA-ARGS...]: the direct run and agentgate's over the origins
# in URL-FILE.
unseen() {
    local suffix=$1 urls=$2 count
    shift 2
    count=$(wc -l <"$urls")
    bound=(-n "$(( count / 4 > 0 ? count / 4 : 1 ))" -t "${SECONDS_PER_RUN}s")
    run "direct-unseen$suffix" direct "$@" --urls-from-file "$urls"
    local before after
    before=$(curl -sSf "http://$HTTP_ORIGIN/stats" | sed 's/[^0-9]//g')
    run "proxy-unseen$suffix" proxy "$@" --urls-from-file "$urls"
    after=$(curl -sSf "http://$HTTP_ORIGIN/stats" | sed 's/[^0-9]//g')
    echo $((after - before)) >"$WORK/proxy-unseen$suffix.fetched"
}
unseen "" "$WORK/unseen-urls.txt"
# HTTPS: a CONNECT to each, a leaf minted for it, and its four policy files over TLS. A new
# connection per request: oha keeps a tunnel open and sends the next URL's request into it
# whatever its host, so with keep-alive 50 tunnels were 50 origins (the rest repeats sent to
# the tunnel's host; 49 of 749 first requests on 2026-11-27).
# The MITM floor beside it: its own leaf cache and pool, so every origin is new to it too.
if [ -s "$WORK/unseen-https-urls.txt" ]; then
    unseen -https "$WORK/unseen-https-urls.txt" --disable-keepalive
    start_floor
    run floor-unseen-https floor --disable-keepalive --urls-from-file "$WORK/unseen-https-urls.txt"
    stop_floor
fi

# --- memory: a fresh agentgate per measurement ----------------------------------------
for mode in keepalive mitm; do
    stop_agentgate
    start_agentgate agentgate
    say "memory: $IDLE idle $mode connections"
    origin=$HTTP_ORIGIN; [ "$mode" = mitm ] && origin=$HTTPS_ORIGIN
    python3 "$ROOT/bench/idle.py" "$mode" --proxy "$PROXY" --origin "$origin" --pid "$AG_PID" \
        --count "$IDLE" --cafile "$AG_CA" >"$WORK/idle-$mode.json"
done

# --- the table -------------------------------------------------------------------------
echo "configuration: ${BENCH_CONFIG:-default}${BENCH_CONFIG_EXTRA:+ + $BENCH_CONFIG_EXTRA} ($BENCH_PATH)"
python3 "$ROOT/bench/table.py" "$WORK" "$CLK_TCK" "$SECONDS_PER_RUN" "$CONNECTIONS"
