#!/usr/bin/env bash
# The filter benchmark of the NetVM paper (§6.3.1): the five filters on every
# netvm engine and on its peers (native C, libpcap, DPDK's BPF JIT, the Linux
# kernel's BPF JIT), in one run, so that the ratios come from the same
# conditions. See benches/README.md for what each figure includes.
#
#   scripts/bench-filters.sh [--rounds N] [--reps N] [--packets N] [--target-ms MS] [--no-install]
#
# Steps: installs the peers (scripts/install-peers.sh; DPDK is optional),
# builds `filterbench` (release) and the C harness (benches/peers, make),
# generates the workloads (the 64-byte full-path frame and a mixed trace of
# --packets frames, default 1,000,000), then runs N rounds (default 5): each
# round runs filterbench (all netvm engines) and filterpeers (all peers) once,
# alternating which goes first, pinned to one CPU with `taskset -c $PIN_CPU`
# (default 1) when taskset and that CPU exist. Finally it merges the rounds:
# a Markdown table of medians (and ratios to native C) on stdout, and
# benches/results/filters-DATE.json (+ .md) with every figure and the machine.
#
# Environment: CARGO_TARGET_DIR (default ROOT/target), WORK (scratch
# directory for the traces, the C build and the rounds; default
# ${TMPDIR:-/tmp}/netvm-bench-filters), PIN_CPU (default 1; choose a CPU
# that nothing else keeps busy).
#
# The JIT's other figures (binding cost, compile latency, `netvm run`) are
# taken by scripts/bench-jit.sh.
#
# Needs root for the kernel peer (bpf() with BPF_PROG_TEST_RUN); without it
# that peer is reported as unavailable. DPDK runs without hugepages
# (--no-huge: rte_bpf needs none), so nr_hugepages is left untouched.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench-meta.sh"
ROUNDS=5 REPS=5 PACKETS=1000000 TARGET_MS=100 INSTALL=1
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --packets) PACKETS=$2; shift 2 ;;
        --target-ms) TARGET_MS=$2; shift 2 ;;
        --no-install) INSTALL=0; shift ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench-filters: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
COMMAND="scripts/bench-filters.sh --rounds $ROUNDS --reps $REPS --packets $PACKETS --target-ms $TARGET_MS"

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=${WORK:-${TMPDIR:-/tmp}/netvm-bench-filters}
PIN_CPU=${PIN_CPU:-1}
mkdir -p "$WORK"
say() { echo "bench-filters: $*" >&2; }

# 1. Peers.
if [ "$INSTALL" -eq 1 ]; then
    bash "$ROOT/scripts/install-peers.sh" || say "some required peers are missing: their figures will be absent"
fi

# 2. Builds.
say "building filterbench (release) in $CARGO_TARGET_DIR"
(cd "$ROOT" && cargo build --release -p netvm-bench --bin filterbench -j "$(nproc)" 2>&1 | tail -n 3) >&2
FILTERBENCH=$CARGO_TARGET_DIR/release/filterbench
say "building the C peers in $WORK/peers"
make -s -C "$ROOT/benches/peers" OUT="$WORK/peers" >&2
PEERS=$WORK/peers/filterpeers

# 3. Workloads: both sides read these files.
"$FILTERBENCH" gen --out "$WORK/traces" --packets "$PACKETS"

# 4. Rounds.
bench_pin "$PIN_CPU"
START=$(bench_meta "$ROOT" | grep -E '^(date|load|busy)=' | sed 's/^/start_/')
rm -rf "$WORK/rounds"
mkdir -p "$WORK/rounds"
run_netvm() {
    "${PIN[@]}" "$FILTERBENCH" run --traces "$WORK/traces" --reps "$REPS" --target-ms "$TARGET_MS" \
        >"$WORK/rounds/round-$1-netvm.jsonl" 2>"$WORK/rounds/round-$1-netvm.log" \
        || { say "round $1: filterbench failed:"; tail -n 5 "$WORK/rounds/round-$1-netvm.log" >&2; }
}
run_peers() {
    # The kernel translation is checked against bpf_filter in the first round only.
    local check=0
    [ "$1" -eq 1 ] && check=20000
    "${PIN[@]}" "$PEERS" --traces "$WORK/traces" --reps "$REPS" --target-ms "$TARGET_MS" --kernel-check "$check" \
        >"$WORK/rounds/round-$1-peers.jsonl" 2>"$WORK/rounds/round-$1-peers.log" \
        || { say "round $1: filterpeers failed:"; tail -n 5 "$WORK/rounds/round-$1-peers.log" >&2; }
}
for r in $(seq 1 "$ROUNDS"); do
    say "round $r of $ROUNDS"
    if [ $((r % 2)) -eq 1 ]; then run_netvm "$r"; run_peers "$r"; else run_peers "$r"; run_netvm "$r"; fi
done
grep -h "agrees with\|WARNING" "$WORK"/rounds/*.log >&2 || true

# 5. Report.
DATE=$(date -u +%Y-%m-%d)
mkdir -p "$ROOT/benches/results"
OUTJSON=$ROOT/benches/results/filters-$DATE.json
{
    echo "command=$COMMAND"
    echo "$START"
    bench_meta "$ROOT"
    echo "pinned=${PIN[*]:-no}"
    echo "rounds=$ROUNDS"
    echo "reps=$REPS"
    echo "packets=$PACKETS"
} >"$WORK/meta.txt"
"$FILTERBENCH" report --dir "$WORK/rounds" --meta "$WORK/meta.txt" --json "$OUTJSON" | tee "${OUTJSON%.json}.md"
say "wrote $OUTJSON and ${OUTJSON%.json}.md"
