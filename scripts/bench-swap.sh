#!/usr/bin/env bash
# Changing a running application (issue 17, NetBind's Figures 10-12): the
# 10-NetPE benches/apps/tree10.toml over the mixed trace, one of its NetPEs
# (`ports`) replaced --swaps times while the packets flow, alternating with a
# variant (the same program with a no-op in front, so that every swap
# compiles what it puts in). Per round, `swapbench` prints the install
# latency (request to the first batch on the new version: median, p99,
# max), the quick version's build time, the time to compile the whole data
# path that replaces it, and the throughput with and without the storm,
# with the packets it counted (none may be lost).
#
#   scripts/bench-swap.sh [--rounds N] [--swaps N] [--workers 1,2] [--repeat R] [--packets N]
#
# Defaults: --rounds 3, --swaps 1000, --workers 1,2, --repeat 20 (the
# baseline streams the trace that many times; the storm, until it ends),
# --packets 200000. Writes benches/results/swap-DATE.jsonl (a {"meta": …}
# line, then one line per round) and prints the medians on stderr.
#
# Environment: CARGO_TARGET_DIR (default ROOT/target), WORK (traces;
# default ${TMPDIR:-/tmp}/netvm-bench-swap).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench-meta.sh"
ROUNDS=3 SWAPS=1000 WORKERS=1,2 REPEAT=20 PACKETS=200000
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --swaps) SWAPS=$2; shift 2 ;;
        --workers) WORKERS=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --packets) PACKETS=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench-swap: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
say() { echo "bench-swap: $*" >&2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=${WORK:-${TMPDIR:-/tmp}/netvm-bench-swap}
REL=$CARGO_TARGET_DIR/release
DATE=$(date -u +%Y-%m-%d)
RESULTS=$ROOT/benches/results
mkdir -p "$WORK" "$RESULTS"

say "building (release) in $CARGO_TARGET_DIR"
(cd "$ROOT" && cargo build --release -p netvm-bench --bin filterbench --bin swapbench 2>&1 | tail -n 2) >&2
"$REL/filterbench" gen --out "$WORK" --packets "$PACKETS" >&2
sed 's/^segment .push/segment .push\n    push 0\n    pop/' "$ROOT/examples/classifier/ports.nil" >"$WORK/ports-alt.nil"

out=$RESULTS/swap-$DATE.jsonl
cmd="swapbench benches/apps/tree10.toml ports ports-alt.nil mixed.pcap --swaps $SWAPS --repeat $REPEAT --workers W"
meta=$(bench_meta "$ROOT" | sed 's/"/\\"/g; s/^\([^=]*\)=\(.*\)$/"\1": "\2"/' | paste -sd, -)
printf '{"meta": {%s, "command": "%s"}}\n' "$meta" "$cmd" >"$out"
for round in $(seq 1 "$ROUNDS"); do
    for w in ${WORKERS//,/ }; do
        say "round $round, $w worker(s)"
        "$REL/swapbench" "$ROOT/benches/apps/tree10.toml" ports "$WORK/ports-alt.nil" "$WORK/mixed.pcap" \
            --swaps "$SWAPS" --repeat "$REPEAT" --workers "$w" | sed "s/^{/{\"round\":$round,/" >>"$out"
    done
done
python3 - "$out" >&2 <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"bench"' in l]
keys = ["swaps", "install_us_median", "install_us_p99", "install_us_max", "build_us_median", "compile_us_median",
        "mpps_baseline", "mpps_storm", "packets_lost"]
for w in sorted({r["workers"] for r in rows}):
    rs = [r for r in rows if r["workers"] == w]
    print(f"{w} worker(s), {len(rs)} rounds (medians):")
    for k in keys:
        print(f"  {k}: {statistics.median(r[k] for r in rs):.1f}")
EOF
say "wrote $out"
