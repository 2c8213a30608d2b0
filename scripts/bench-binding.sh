#!/usr/bin/env bash
# Binding modules into a data path (issue 17, NetBind's Table 1 and
# Figures 10-12): the six-module IPv4 data path of benches/binding/router6
# bound by direct linking, a vector table and the runtime's dispatch loop,
# against the same logic in one NetPE (router1.toml), on the compiled batch
# function alone and through the runtime. `bindbench` prints a JSON line per
# (variant, workload) and a table on stderr (ns per packet, Mpps, the ratio
# to the one-NetPE data path, the binding's extra ns and cycles per packet
# and per port crossing).
#
#   scripts/bench-binding.sh [--rounds N] [--routes N] [--destinations N] [--target-ms T]
#
# Defaults: 11 rounds, 1,000 routes, 64 destinations (the table's lines in
# cache), 50 ms per timed repetition. Pinned to CPU $PIN_CPU (default 1)
# where there is one. Writes benches/results/binding-router-DATE.jsonl (a
# {"meta": …} line first).
#
# Environment: CARGO_TARGET_DIR (default ROOT/target), PIN_CPU.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench-meta.sh"
ARGS=()
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds|--routes|--destinations|--target-ms|--packets) ARGS+=("$1" "$2"); shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench-binding: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
say() { echo "bench-binding: $*" >&2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
REL=$CARGO_TARGET_DIR/release
RESULTS=$ROOT/benches/results
mkdir -p "$RESULTS"
say "building (release) in $CARGO_TARGET_DIR"
(cd "$ROOT" && cargo build --release -p netvm-bench --bin bindbench 2>&1 | tail -n 2) >&2
bench_pin "${PIN_CPU:-1}"

out=$RESULTS/binding-router-$(date -u +%Y-%m-%d).jsonl
cmd="bindbench ${ARGS[*]:-}"
meta=$(bench_meta "$ROOT" | sed 's/"/\\"/g; s/^\([^=]*\)=\(.*\)$/"\1": "\2"/' | paste -sd, -)
printf '{"meta": {%s, "command": "%s"}}\n' "$meta" "$cmd" >"$out"
"${PIN[@]}" "$REL/bindbench" "${ARGS[@]}" >>"$out"
say "wrote $out"
