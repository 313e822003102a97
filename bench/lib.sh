# What bench/run.sh, bench/instructions.sh and bench/syscalls.sh share; sourced, never run.
# The sourcing script sets ROOT (the checkout), defines say and die, and sets WORK before it
# starts anything. Loopback only: the origin and agentgate listen on 127.0.0.0/8.

# Polls "$@" every 0.1 s until it succeeds, at most WAIT_TRIES times (600: 60 s).
WAIT_TRIES=${WAIT_TRIES:-600}
wait_for() {
    local tries=$WAIT_TRIES
    until "$@"; do
        tries=$((tries - 1))
        [ "$tries" -gt 0 ] || return 1
        sleep 0.1
    done
}

# Builds what is measured, in release: agentgate (unless BENCH_AGENTGATE names a binary kept
# from an earlier build, to compare two builds in one sitting) and the origin, which has its
# own manifest and lock file and shares agentgate's target directory (CARGO_TARGET_DIR, or
# target/) so common dependencies are built once. Sets AGENTGATE, ORIGIN_BIN and FLOOR_BIN
# (the floor proxy, same package). With BENCH_PEER=1 also the peer (bench/peer, its own
# package and lock file, same target directory): PEER_BIN, left empty if it does not build.
# BENCH_BUILD=0 builds nothing and runs what the target directory holds (e.g. while another
# build holds cargo's lock): agentgate (or BENCH_AGENTGATE), the origin, the floor and, with
# BENCH_PEER=1, the peer if it is there.
build_binaries() {
    local target=${CARGO_TARGET_DIR:-$ROOT/target}
    if [ "${BENCH_BUILD:-1}" = 0 ]; then
        AGENTGATE=${BENCH_AGENTGATE:-$target/release/agentgate}
        ORIGIN_BIN="$target/release/agentgate-bench-origin"
        FLOOR_BIN="$target/release/agentgate-bench-floor"
        PEER_BIN=""
        [ "${BENCH_PEER:-0}" != 1 ] || [ ! -x "$target/release/agentgate-bench-peer" ] || PEER_BIN="$target/release/agentgate-bench-peer"
        [ -x "$AGENTGATE" ] && [ -x "$ORIGIN_BIN" ] && [ -x "$FLOOR_BIN" ] || die "BENCH_BUILD=0: a binary is missing in $target/release"
        return
    fi
    if [ -n "${BENCH_AGENTGATE:-}" ]; then
        AGENTGATE=$BENCH_AGENTGATE
    else
        say "building agentgate (release)"
        CARGO_TARGET_DIR="$target" cargo build --release --quiet --bin agentgate
        AGENTGATE="$target/release/agentgate"
    fi
    say "building the origin (release)"
    CARGO_TARGET_DIR="$target" cargo build --release --quiet --manifest-path "$ROOT/bench/origin/Cargo.toml"
    ORIGIN_BIN="$target/release/agentgate-bench-origin"
    FLOOR_BIN="$target/release/agentgate-bench-floor"
    PEER_BIN=""
    if [ "${BENCH_PEER:-0}" = 1 ]; then
        say "building the peer, hudsucker (release)"
        if CARGO_TARGET_DIR="$target" cargo build --release --quiet --manifest-path "$ROOT/bench/peer/Cargo.toml"; then
            PEER_BIN="$target/release/agentgate-bench-peer"
        else
            echo "bench: the peer (bench/peer, hudsucker) did not build: going on without its rows" >&2
        fi
    fi
}

# start_origin UNSEEN: starts the origin in WORK with UNSEEN extra origins (on 127.0.K.2 and
# 127.(1+K).x.y with BENCH_NET=K, 0 unless set: two benchmarks at once each take their own), waits for its
# origin.env and reads it (ORIGIN_IP, ORIGIN_HTTP_PORT, ORIGIN_HTTPS_PORT, ORIGIN_443, ...).
# Sets ORIGIN_PID.
start_origin() {
    "$ORIGIN_BIN" --dir "$WORK" --unseen "$1" --net "${BENCH_NET:-0}" 2>"$WORK/origin.err" &
    ORIGIN_PID=$!
    wait_for test -f "$WORK/origin.env" || die "origin did not start: $(cat "$WORK/origin.err")"
    # shellcheck source=/dev/null
    . "$WORK/origin.env"
}

# write_config [CONFIG]: the benchmark configuration into WORK/agentgate.toml: CONFIG
# (BENCH_CONFIG, else `default`) is `default` (bench/agentgate.toml.in) or `everything`
# (bench/everything.toml.in merged over it: every per-request setting on, none refusing the
# bench's requests; its secret's value file is written here), then the TOML file
# BENCH_CONFIG_EXTRA merged over that when set (e.g. an [inspect] table, to measure what a
# setting costs requests it does not apply to). Merged by table (bench/config.py): a table
# the override has replaces the template's. Needs the origin started (ORIGIN_IP). Sets
# BENCH_PATH, the 1 KiB path the keep-alive scenarios request: /bench/1k, or under
# `everything` /bench/usage/1k, which carries the site's usage preferences.
write_config() {
    local config=${1:-${BENCH_CONFIG:-default}} overrides=()
    case $config in
        default) BENCH_PATH=/bench/1k ;;
        everything)
            BENCH_PATH=/bench/usage/1k
            printf 'bench-secret-value-never-sent-0123456789' >"$WORK/bench-secret"
            overrides+=("$ROOT/bench/everything.toml.in") ;;
        *) die "BENCH_CONFIG=$config: not a configuration (default, everything)" ;;
    esac
    [ -z "${BENCH_CONFIG_EXTRA:-}" ] || overrides+=("$BENCH_CONFIG_EXTRA")
    python3 "$ROOT/bench/config.py" "$WORK/agentgate.toml" "$WORK" "$ORIGIN_IP" \
        "$ROOT/bench/agentgate.toml.in" "${overrides[@]}" || die "the configuration could not be written"
}

# start_agentgate NAME [WRAPPER...]: runs agentgate on WORK's config (under WRAPPER, e.g.
# valgrind, if given), its output in WORK/NAME.out and NAME.err, and waits for its start-up
# line. Sets AG_PID and PROXY (host:port of the proxy port).
start_agentgate() {
    local name=$1
    shift
    : >"$WORK/$name.out"
    "$@" "$AGENTGATE" run --config "$WORK/agentgate.toml" >"$WORK/$name.out" 2>>"$WORK/$name.err" &
    AG_PID=$!
    wait_for grep -qs "listening on http://" "$WORK/$name.out" || die "agentgate did not start: $(tail -5 "$WORK/$name.err")"
    PROXY=$(sed -n 's|.*listening on http://\([0-9.:]*\) .*|\1|p' "$WORK/$name.out")
}

# Stops the agentgate start_agentgate started, if any.
stop_agentgate() {
    if [ -n "${AG_PID:-}" ]; then
        kill "$AG_PID" 2>/dev/null && wait "$AG_PID" 2>/dev/null || true
    fi
    AG_PID=""
}

# start_bench_proxy NAME BIN VAR [WRAPPER...]: runs a bench proxy (BIN --dir WORK: it trusts
# WORK/origin-ca.pem upstream, writes its own CA to WORK/NAME-ca.pem and prints `listening on
# HOST:PORT`; under WRAPPER, e.g. valgrind, if given), its output in WORK/NAME.out and
# NAME.err, and waits for its start-up line. Sets VAR_PID at once (so close_work stops it
# even if it never comes up) and VAR (host:port).
start_bench_proxy() {
    local name=$1 bin=$2 var=$3
    shift 3
    : >"$WORK/$name.out"
    "$@" "$bin" --dir "$WORK" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    printf -v "${var}_PID" '%s' "$!"
    wait_for grep -qs "listening on " "$WORK/$name.out" || die "$name proxy did not start: $(cat "$WORK/$name.err")"
    printf -v "$var" '%s' "$(sed -n 's|^listening on \([0-9.:]*\)$|\1|p' "$WORK/$name.out")"
}

# stop_bench_proxy VAR: stops the bench proxy whose pid is in VAR_PID, if any.
stop_bench_proxy() {
    local pid_var=${1}_PID
    if [ -n "${!pid_var:-}" ]; then
        kill "${!pid_var}" 2>/dev/null && wait "${!pid_var}" 2>/dev/null || true
    fi
    printf -v "$pid_var" '%s' ""
}

# start_floor [WRAPPER...]: the floor proxy (bench/origin/src/bin/floor.rs: hyper's server
# and pooled client, plain HTTP and MITM, no policy, no log), its CA in WORK/floor-ca.pem.
# Sets FLOOR_PID and FLOOR (host:port). stop_floor stops it.
start_floor() { start_bench_proxy floor "$FLOOR_BIN" FLOOR "$@"; }
stop_floor() { stop_bench_proxy FLOOR; }

# start_peer: the peer (bench/peer: hudsucker from crates.io forwarding everything unchanged,
# no policy, no log), its CA in WORK/peer-ca.pem. Sets PEER_PID and PEER (host:port).
# stop_peer stops it.
start_peer() { start_bench_proxy peer "$PEER_BIN" PEER "$@"; }
stop_peer() { stop_bench_proxy PEER; }

# open_work NAME KEEP: makes WORK (a fresh agentgate-NAME.XXXXXX under the temp directory)
# and arranges that on exit, whatever the cause, agentgate, the origin, the floor proxy
# (start_floor) and the peer (start_peer) are stopped and
# WORK is kept (its path printed) when KEEP is 1, removed otherwise.
open_work() {
    WORK=$(mktemp -d -t "agentgate-$1.XXXXXX")
    WORK_NAME=$1
    WORK_KEEP=$2
    ORIGIN_PID=""
    AG_PID=""
    FLOOR_PID=""
    PEER_PID=""
    trap close_work EXIT
    trap 'exit 130' INT TERM
}
close_work() {
    local status=$?
    stop_agentgate
    stop_floor
    stop_peer
    if [ -n "$ORIGIN_PID" ]; then
        kill "$ORIGIN_PID" 2>/dev/null && wait "$ORIGIN_PID" 2>/dev/null || true
    fi
    if [ "$WORK_KEEP" = 1 ]; then echo "$WORK_NAME: work directory kept: $WORK" >&2; else rm -rf "$WORK"; fi
    exit "$status"
}
