#!/usr/bin/env bash
# The filter language's figures (issue 4):
#
#   size  NetIL instructions of the code `netvm filter -d` generates for the
#         NetVM paper's five filters (§6.3.1), next to libpcap's optimized
#         BPF (`tcpdump -d`, one line per instruction) and the hand-written
#         listings of benches/filters
#   speed the JIT's ns/packet on the generated filters against the
#         hand-written ones (`filterbench run --engines
#         netvm-jit,netvm-jit/linked`: the per-packet and the linked rows,
#         fullpath and mixed workloads), in
#         interleaved rounds: hand, generated, hand, generated, …; medians
#   compile compile latency of the five filters and two larger expressions:
#         expression to NetIL module (`netvm_pfl::compile`), and to native
#         code (+ verifier + JIT), against libpcap's `pcap_compile`
#         (crates/pfl/examples/compile_time.rs and
#         benches/peers/pcap_compile_time.c, --n compilations each, medians)
#
#   scripts/bench-pfl.sh [--rounds N] [--packets N] [--reps N] [--n N]
#
# Defaults: --rounds 5, --packets 1000000 (mixed trace), --reps 11, --n 500. Pinned to
# CPU $PIN_CPU (default 1). Writes benches/results/pfl-DATE.jsonl (a
# {"meta": …} line, then one line per figure) and prints the tables on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench-meta.sh"
ROUNDS=5 PACKETS=1000000 REPS=11 N=500
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --packets) PACKETS=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --n) N=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench-pfl: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
say() { echo "bench-pfl: $*" >&2; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=${WORK:-${TMPDIR:-/tmp}/netvm-bench-pfl}
PIN_CPU=${PIN_CPU:-1}
REL=$CARGO_TARGET_DIR/release
DATE=$(date -u +%Y-%m-%d)
OUT=$ROOT/benches/results/pfl-$DATE.jsonl
mkdir -p "$WORK/gen" "$ROOT/benches/results"
command -v tcpdump >/dev/null || { say "tcpdump is needed (scripts/setup.sh installs it)"; exit 1; }

say "building (release) in $CARGO_TARGET_DIR"
(cd "$ROOT" && cargo build --release -p netvm-bench --bin filterbench -p netvm-cli --bin netvm \
    -p netvm-pfl --example compile_time 2>&1 | tail -n 2) >&2
${CC:-gcc} -O2 -Wall -o "$WORK/pcap_compile_time" "$ROOT/benches/peers/pcap_compile_time.c" -lpcap
"$REL/filterbench" gen --out "$WORK/traces" --packets "$PACKETS" >&2
bench_pin "$PIN_CPU"

# The five filters: name and expression (crates/bench/src/filters.rs).
NAMES=(f1_ip f2_ip_src f3_ip_tcp f4_ip_tcp_4field f5_ip_src_or4)
EXPRS=("ip" "ip src 10.1.1.1" "ip and tcp"
       "ip src 10.1.1.1 and ip dst 10.2.2.2 and tcp src port 20 and tcp dst port 30"
       "ip src 10.4.4.4 or ip src 10.3.3.3 or ip src 10.2.2.2 or ip src 10.1.1.1")

# NetIL instructions of a listing: lines that are not blank, comments, labels,
# directives or segment markers.
count_netil() { grep -v -E '^\s*($|;|\.|segment|ends)|^[A-Za-z_][A-Za-z0-9_]*:\s*(;.*)?$' "$1" | wc -l; }

{
    { echo "command=scripts/bench-pfl.sh --rounds $ROUNDS --packets $PACKETS --reps $REPS --n $N"; bench_meta "$ROOT"; echo "pinned=${PIN[*]:-no}"; } \
        | python3 -c 'import json, sys; print(json.dumps({"meta": dict(l.rstrip("\n").split("=", 1) for l in sys.stdin if "=" in l)}))'
    for i in "${!NAMES[@]}"; do
        n=${NAMES[$i]} e=${EXPRS[$i]}
        "$REL/netvm" filter -d "$e" >"$WORK/gen/$n.nil"
        bpf=$(tcpdump -d -r "$WORK/traces/fullpath.pcap" "$e" 2>/dev/null | wc -l)
        gen=$(count_netil "$WORK/gen/$n.nil")
        hand=$(count_netil "$ROOT/benches/filters/$n.nil")
        echo "{\"size\": {\"filter\": \"$n\", \"expr\": \"$e\", \"bpf\": $bpf, \"netil_generated\": $gen, \"netil_hand\": $hand}}"
    done
    BIG=("tcp port 80" "host 10.1.1.1 and port 80 or 443")
    "${PIN[@]}" "$WORK/pcap_compile_time" "$N" "${EXPRS[@]}" "${BIG[@]}"
    "${PIN[@]}" "$REL/examples/compile_time" "$N" "${EXPRS[@]}" "${BIG[@]}"
    for r in $(seq 1 "$ROUNDS"); do
        say "round $r of $ROUNDS"
        for kind in hand gen; do
            dir=$ROOT/benches/filters
            [ "$kind" = gen ] && dir=$WORK/gen
            "${PIN[@]}" "$REL/filterbench" run --traces "$WORK/traces" --filters "$dir" --engines netvm-jit,netvm-jit/linked --reps "$REPS" 2>/dev/null \
                | python3 -c 'import json, sys
for l in sys.stdin:
    r = json.loads(l); r["kind"] = sys.argv[1]; r["round"] = int(sys.argv[2]); print(json.dumps(r))' "$kind" "$r"
        done
    done
} >"$OUT"
say "wrote $OUT"

python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
meta = rows[0]["meta"]
print(f"machine: {meta.get('cpu')} ({meta.get('cpus')} CPUs), {meta.get('date')}, git {meta.get('git')}, load {meta.get('load')}")
print()
print("| filter | libpcap BPF (`tcpdump -d`) | NetIL generated | NetIL hand-written |")
print("| --- | ---: | ---: | ---: |")
for r in rows:
    if "size" in r:
        s = r["size"]
        print(f"| {s['filter']} `{s['expr']}` | {s['bpf']} | {s['netil_generated']} | {s['netil_hand']} |")
comp = [r["compile"] for r in rows if "compile" in r]
if comp:
    print()
    print("| expression | libpcap `pcap_compile` µs | netvm-pfl µs (to NetIL) | + verify + JIT µs | BPF insns | NetIL insns |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for e in dict.fromkeys(c["expr"] for c in comp):
        by = {c["engine"]: c for c in comp if c["expr"] == e}
        lp, nf, nj = by.get("libpcap", {}), by.get("netvm-pfl", {}), by.get("netvm-pfl+verify+jit", {})
        print(f"| `{e}` | {lp.get('us_median', float('nan')):.1f} | {nf.get('us_median', float('nan')):.1f} | {nj.get('us_median', float('nan')):.1f} | {lp.get('insns', '')} | {nf.get('insns', '')} |")
runs = [r for r in rows if "engine" in r]
keys = sorted({(r["engine"], r["workload"], r["filter"]) for r in runs})
print()
print("| engine | workload | filter | hand ns/pkt | generated ns/pkt | generated / hand (median of per-round ratios) | per-round range |")
print("| --- | --- | --- | ---: | ---: | ---: | --- |")
for eng, wl, f in keys:
    sel = lambda kind: {r["round"]: r for r in runs if (r["engine"], r["workload"], r["filter"], r["kind"]) == (eng, wl, f, kind)}
    h, g = sel("hand"), sel("gen")
    rounds = sorted(set(h) & set(g))
    if not rounds:
        continue
    ratios = [g[r]["ns_median"] / h[r]["ns_median"] for r in rounds]
    hm = statistics.median(h[r]["ns_median"] for r in rounds)
    gm = statistics.median(g[r]["ns_median"] for r in rounds)
    same = all(abs(h[r]["accepted"] / max(h[r]["packets"], 1) - g[r]["accepted"] / max(g[r]["packets"], 1)) < 1e-12 for r in rounds)
    note = "" if same else " (accepted sets differ!)"
    print(f"| {eng} | {wl} | {f} | {hm:.2f} | {gm:.2f} | {statistics.median(ratios):.2f}{note} | {min(ratios):.2f}-{max(ratios):.2f} |")
PY
