#!/usr/bin/env bash
# The JIT's figures besides the filter table (scripts/bench-filters.sh):
#
#   binding  what binding NetPEs costs: filter f4 as a 6-NetPE chain
#            (benches/binding/chain6.toml) linked `direct`, `table`, or
#            dispatched by the runtime, against the same logic in one NetPE
#            (`filterbench binding`, interleaved rounds, medians)
#   compile  compile latency: whole applications with `LinkedApp::compile`
#            (`filterbench compile`: the five filters, chain6, one6, the
#            10-NetPE benches/apps/tree10.toml, examples/classifier) and
#            single modules with `JitCode::compile` (the compile_latency
#            example, with its floors and option variants)
#   run      `netvm run --program F --stats json` ns_per_packet, `--engine jit`
#            (default link) against `--engine interp`, on the five filters
#            over the mixed trace; --repeat chosen so that each run processes
#            packets for at least --min-s seconds; --runs runs each, the
#            filters and engines interleaved; medians
#
#   scripts/bench-jit.sh [--only binding,compile,run] [--rounds N] [--n N] [--runs N] [--min-s S] [--packets N]
#
# Defaults: all three; --rounds 11 (binding), --n 300 (compilations per
# figure), --runs 5, --min-s 0.5, --packets 1000000 (mixed trace). Pinned to
# CPU $PIN_CPU (default 1; choose one that nothing else keeps busy). Writes
# benches/results/{binding,compile,netvm-run}-DATE.jsonl, each starting with
# a {"meta": …} line (machine, load, command), and prints summaries on stderr.
#
# Environment: CARGO_TARGET_DIR (default ROOT/target), WORK (traces; default
# ${TMPDIR:-/tmp}/netvm-bench-filters, shared with bench-filters.sh), PIN_CPU.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench-meta.sh"
ONLY=binding,compile,run ROUNDS=11 N=300 RUNS=5 MIN_S=0.5 PACKETS=1000000
while [ $# -gt 0 ]; do
    case "$1" in
        --only) ONLY=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --n) N=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --min-s) MIN_S=$2; shift 2 ;;
        --packets) PACKETS=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench-jit: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
want() { [[ ",$ONLY," == *",$1,"* ]]; }
say() { echo "bench-jit: $*" >&2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=${WORK:-${TMPDIR:-/tmp}/netvm-bench-filters}
PIN_CPU=${PIN_CPU:-1}
REL=$CARGO_TARGET_DIR/release
DATE=$(date -u +%Y-%m-%d)
RESULTS=$ROOT/benches/results
mkdir -p "$WORK" "$RESULTS"

say "building (release) in $CARGO_TARGET_DIR"
(cd "$ROOT" && cargo build --release -p netvm-bench --bin filterbench -p netvm-cli --bin netvm 2>&1 | tail -n 2 \
    && cargo build --release -p netvm-jit --example compile_latency 2>&1 | tail -n 1) >&2
"$REL/filterbench" gen --out "$WORK/traces" --packets "$PACKETS"
bench_pin "$PIN_CPU"

# meta COMMAND: the {"meta": …} line.
meta() {
    { echo "command=$1"; bench_meta "$ROOT"; echo "pinned=${PIN[*]:-no}"; } \
        | python3 -c 'import json, sys; print(json.dumps({"meta": dict(l.rstrip("\n").split("=", 1) for l in sys.stdin if "=" in l)}))'
}

cd "$ROOT"
if want binding; then
    out=$RESULTS/binding-$DATE.jsonl
    cmd="filterbench binding --traces TRACES --rounds $ROUNDS"
    say "$cmd"
    { meta "$cmd"; "${PIN[@]}" "$REL/filterbench" binding --traces "$WORK/traces" --rounds "$ROUNDS"; } >"$out"
    say "wrote $out"
fi

if want compile; then
    out=$RESULTS/compile-$DATE.jsonl
    apps=(benches/filters/*.nil benches/binding/chain6.toml benches/binding/one6.toml benches/apps/tree10.toml examples/classifier/app.toml)
    cmd="filterbench compile --n $N ${apps[*]}; compile_latency -n $N --breakdown benches/filters/*.nil"
    say "$cmd"
    # Tables on stderr, JSON lines into $out (not `tee /dev/stderr`: that
    # reopens, and truncates, a log file that stderr is redirected to).
    apps_out=$("${PIN[@]}" "$REL/filterbench" compile --n "$N" "${apps[@]}")
    mods_out=$("${PIN[@]}" "$REL/examples/compile_latency" -n "$N" --breakdown benches/filters/*.nil)
    printf '%s\n%s\n' "$(grep -v '^{' <<<"$apps_out")" "$mods_out" >&2
    {
        meta "$cmd"
        grep '^{' <<<"$apps_out"
        python3 -c '
import json, sys
for line in sys.stdin:
    f = line.split()
    if f and f[0] != "program" and len(f) >= 6:
        name = " ".join(f[:-5])
        print(json.dumps({"module": name, "insns": int(f[-5]), "us_median": float(f[-4]), "us_p10": float(f[-3]), "us_p90": float(f[-2]), "code_bytes": int(f[-1])}))' <<<"$mods_out"
    } >"$out"
    say "wrote $out"
fi

if want run; then
    out=$RESULTS/netvm-run-$DATE.jsonl
    trace=$WORK/traces/mixed.pcap
    # ns_per_packet of one run: run_ns FILTER ENGINE REPEAT
    run_ns() {
        "${PIN[@]}" "$REL/netvm" run --program "$1" -r "$trace" --engine "$2" --repeat "$3" --stats json \
            | python3 -c 'import json, sys; print(json.load(sys.stdin)["ns_per_packet"])'
    }
    declare -A REP NS
    for f in benches/filters/*.nil; do
        for e in jit interp; do
            ns=$(run_ns "$f" "$e" 1)
            REP[$f,$e]=$(python3 -c "import math; print(max(1, math.ceil($MIN_S * 1e9 / ($ns * $PACKETS))))")
        done
    done
    for r in $(seq 1 "$RUNS"); do
        for f in benches/filters/*.nil; do
            for e in jit interp; do
                NS[$f,$e]="${NS[$f,$e]:-} $(run_ns "$f" "$e" "${REP[$f,$e]}")"
            done
        done
        say "netvm run: round $r of $RUNS"
    done
    {
        meta "netvm run --program F -r mixed.pcap --engine jit|interp --repeat R --stats json ($RUNS runs, >= ${MIN_S} s each)"
        for f in benches/filters/*.nil; do
            for e in jit interp; do
                python3 -c '
import json, statistics, sys
f, e, rep, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), [float(x) for x in sys.argv[4].split()]
print(json.dumps({"program": f, "engine": e, "repeat": rep, "ns_per_packet": runs, "median": statistics.median(runs)}))' \
                    "$f" "$e" "${REP[$f,$e]}" "${NS[$f,$e]}"
            done
        done
    } | tee "$out" | python3 -c '
import json, sys
rows = {}
for line in sys.stdin:
    v = json.loads(line)
    if "program" in v:
        rows.setdefault(v["program"], {})[v["engine"]] = v["median"]
for p, r in rows.items():
    j, i = r["jit"], r["interp"]
    print(f"{p:<40} jit {j:8.2f}  interp {i:8.2f}  interp/jit {i / j:6.2f}", file=sys.stderr)'
    say "wrote $out"
fi
