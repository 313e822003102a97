#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 60), one libFuzzer job per target, all
# targets at the same time, and prints per target the executions, the corpus size and
# whether it found anything. Exit status 1 when any target found a crash, leak or timeout.
#
#   fuzz/run.sh 300            # from the repository root
#
# Logs go to fuzz/logs/<target>.log, crashes to fuzz/artifacts/<target>/ (both git-ignored).
# Each target is seeded once from the conformance corpora when ../shared/conformance exists.
set -euo pipefail

seconds="${1:-60}"
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
targets=$(cargo fuzz list)
conformance=../shared/conformance
mkdir -p fuzz/logs

seed() {
    local target=$1 dir=fuzz/corpus/$1
    mkdir -p "$dir"
    [ -d "$conformance" ] || return 0
    case $target in
        robots) find "$conformance/robots" -type f -exec cp -n {} "$dir/" \; 2>/dev/null || true ;;
        agents_txt) find "$conformance/agents-txt" -type f -exec cp -n {} "$dir/" \; 2>/dev/null || true ;;
        agents_md) find "$conformance/agents-md" -type f -exec cp -n {} "$dir/" \; 2>/dev/null || true ;;
        autoctl) find "$conformance/autoctl" -type f -name '*.txt' -exec cp -n {} "$dir/" \; 2>/dev/null || true ;;
        request_head)
            printf 'GET http://127.0.0.1:9/x HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n' > "$dir/seed-absolute"
            printf 'CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: 127.0.0.1:443\r\n\r\n' > "$dir/seed-connect"
            printf 'POST http://a.test/ HTTP/1.1\r\nHost: a.test\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n' > "$dir/seed-chunked" ;;
        explain) printf 'User-agent: *\nDisallow: /private\n\0\0/a ALLOW\n\0\0\0\0\0\0scope: /\nallowed-methods: GET\n\0\0private/x' > "$dir/seed" ;;
    esac
}

# Build first, so the timed runs measure fuzzing and not compiling.
cargo fuzz build -O
pids=()
for target in $targets; do
    seed "$target"
    dict=()
    [ -f "fuzz/dicts/$target.dict" ] && dict=(-dict="fuzz/dicts/$target.dict")
    cargo fuzz run -O "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=30 "${dict[@]}" \
        > "fuzz/logs/$target.log" 2>&1 &
    pids+=("$!")
done
failed=0
i=0
for target in $targets; do
    status=0
    wait "${pids[$i]}" || status=$?
    i=$((i + 1))
    stats=$(grep -E '^#[0-9]+.*(DONE|pulse|NEW|REDUCE)' "fuzz/logs/$target.log" | tail -1 || true)
    execs=$(grep -oE 'Done [0-9]+ runs' "fuzz/logs/$target.log" | grep -oE '[0-9]+' || echo "?")
    if [ "$status" -eq 0 ]; then
        echo "$target: ok, $execs executions in ${seconds} s (${stats:-no stats})"
    else
        failed=1
        echo "$target: FOUND SOMETHING (exit $status), see fuzz/logs/$target.log and fuzz/artifacts/$target/"
    fi
done
exit "$failed"
