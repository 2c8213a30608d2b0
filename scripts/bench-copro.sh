#!/usr/bin/env bash
# The coprocessors' figures (issue 5), each against its peer in the same run:
#
#   lpm       Lpm4 (DIR-24-8) vs DPDK rte_lpm: 500k BGP-like IPv4 routes, 10M
#             addresses that hit; one at a time and in batches of 32 (netvm
#             lookup_bulk vs rte_lpm_lookup_bulk)
#   hashN     the table coprocessor's ExactTable vs DPDK rte_hash, N = 1M and
#             16M 8-byte keys, 10M lookups that hit; one at a time and bulk (32)
#   strmatch  1,500 literals over 100 MB of 64-1500 byte payloads: Hyperscan
#             called from C (hs_scan) vs netvm's strmatch (its Hyperscan and
#             aho-corasick backends, directly and from a NetIL program on the JIT)
#   router    examples/ipv4-router on 64-byte frames from memory (`netvm run
#             --repeat`), vs the same work written in C over rte_lpm
#   bridge    examples/l2-bridge on 64-byte frames from memory, vs a C learning
#             bridge over rte_hash
#   apps      computation batching (issue 16): examples/ipv4-router and
#             examples/l2-bridge (and its decision alone, `bridge-c`, engine
#             netvm-jit/bridge-c) through `coprobench app` (the compiled batch
#             function alone, on descriptors prepared once, `app-linked-*`,
#             written per burst as a port writes them from the C loops'
#             inputs, `app-burst-*`, and with every packet's lengths and
#             time as a capture's records carry them, `app-records-*`; and
#             through the runtime's batch function) with
#             --batching off, on and prefetch, and the sub-batch sweep (8 to
#             256, the paper's Fig. 4); the C loops of router and bridge
#   l2fwdN    examples/l2-fwd with an N-entry table (N = 2000, 16000,
#             1000000, 16000000), batching off, on, prefetch (and the sweep
#             for 1M), vs a C loop over rte_hash_lookup_bulk_data
#   sweep     the sub-batch sweep (issue 16): the size the tuner chooses
#             against every fixed size, for examples/ipv4-router with 1,000
#             and 500,000 routes and examples/l2-bridge with 2,000, 16,000,
#             1,000,000 and 16,000,000 entries (`coprobench app DIR
#             router-N|bridge-N`); the summary's last table
#   ipv6      Lpm6 vs DPDK rte_lpm6 on 200,000 routes of /29 to /64 (memory,
#             build, one at a time and bulk), and examples/ipv6-router on
#             64-byte frames (`coprobench app DIR router6`)
#   names     NameFib vs a C loop over rte_hash doing the same longest-first
#             search (one at a time and bulk) on 1,000,000 name prefixes and
#             100,000 Interests, and examples/ndn-router on them
#             (`coprobench app DIR ndn`), batching off, on, prefetch
#   crossing  the coprocessor interface's per-call cost from the JIT: the
#             apps of benches/apps/copro (ten copro.in, ten copro.out, five
#             invokes of a counters instance per packet, and none) on the
#             router's frames; no peer
#   ids       `netvm ids` with 1,500 rules (one content each) over 100,000
#             TCP segments of 64-1460 payload bytes, with the Hyperscan
#             prefilter and with aho-corasick (NETVM_HYPERSCAN=off); no peer
#             (neither Snort nor Suricata is packaged here): compare with
#             the strmatch figures, which scan payloads of the same sizes
#
#   scripts/bench-copro.sh [--rounds N] [--reps N] [--only BENCH[,BENCH...]]
#
# Defaults: --rounds 3, --reps 5. Rounds interleave netvm and the peer per
# benchmark; the summary is the median over rounds of the per-round ratios.
# Inputs: `coprobench gen` into $WORK (default /tmp/netvm-copro-bench), made
# once. Peers: scripts/install-peers.sh (libdpdk-dev, libhyperscan-dev,
# optional); benches/peers/copropeers.c. DPDK gets 2 MiB hugepages when the
# script runs as root (restored afterwards), else runs without.
# Writes benches/results/copro-DATE.jsonl (copro-BENCHES-DATE.jsonl for an
# --only run; -runN after it when that file exists: {"meta": …}, then every
# record with its round) and prints the summary on stdout.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$ROOT/scripts/bench-meta.sh"
ROUNDS=3 REPS=5 ONLY="lpm,hash1000000,hash16000000,strmatch,router,bridge,crossing,ids,apps,l2fwd2000,l2fwd16000,l2fwd1000000,l2fwd16000000,ipv6,names"
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --only) ONLY=$2; shift 2 ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
        *) echo "bench-copro: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done
say() { echo "bench-copro: $*" >&2; }
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WORK=${WORK:-${TMPDIR:-/tmp}/netvm-copro-bench}
PIN_CPU=${PIN_CPU:-1}
REL=$CARGO_TARGET_DIR/release
DATE=$(date -u +%Y-%m-%d)
# A partial run (--only) gets its own file, so that it never replaces a full one.
if [ "$ONLY" = "lpm,hash1000000,hash16000000,strmatch,router,bridge,crossing,ids,apps,l2fwd2000,l2fwd16000,l2fwd1000000,l2fwd16000000,ipv6,names" ]; then TAG=""; else TAG="-${ONLY//,/-}"; fi
OUT=$ROOT/benches/results/copro$TAG-$DATE.jsonl
# A second run the same day gets -run2, -run3, ...: never replace a record.
k=2
while [ -e "$OUT" ]; do OUT=$ROOT/benches/results/copro$TAG-$DATE-run$k.jsonl; k=$((k + 1)); done
mkdir -p "$WORK" "$ROOT/benches/results"

bash "$ROOT/scripts/install-peers.sh" >&2 || say "some peers could not be installed; they will be reported unavailable"
say "building (release) in $CARGO_TARGET_DIR"
(cd "$ROOT" && cargo build --release -p netvm-bench --bin coprobench -p netvm-cli --bin netvm 2>&1 | tail -n 2) >&2
make -s -C "$ROOT/benches/peers" OUT="$WORK/peers" "$WORK/peers/copropeers" >&2
[ -f "$WORK/router64.bin" ] || "$REL/coprobench" gen "$WORK" >&2
[ -f "$WORK/ids.pcap" ] || "$REL/coprobench" gen-ids "$WORK" >&2
if wants sweep && [ ! -f "$WORK/router64-1000.bin" ]; then "$REL/coprobench" gen-router "$WORK" 1000 >&2; fi
for n in 2000 16000 1000000 16000000; do
    if wants "l2fwd$n" && [ ! -f "$WORK/l2fwd64-$n.bin" ]; then "$REL/coprobench" gen-l2fwd "$WORK" "$n" >&2; fi
    if wants sweep && [ ! -f "$WORK/bridge64-$n.bin" ]; then "$REL/coprobench" gen-bridge "$WORK" "$n" >&2; fi
done
if wants ipv6 && [ ! -f "$WORK/router6-64.bin" ]; then "$REL/coprobench" gen-ipv6 "$WORK" >&2; fi
if wants names && [ ! -f "$WORK/names64.bin" ]; then "$REL/coprobench" gen-names "$WORK" >&2; fi
bench_pin "$PIN_CPU"

# Hugepages for DPDK (restored on exit).
HP=/proc/sys/vm/nr_hugepages
HP_OLD=""
if [ "$(id -u)" = 0 ] && [ -w "$HP" ]; then
    HP_OLD=$(cat "$HP")
    echo 3072 > "$HP" || true
    trap 'echo "$HP_OLD" > "$HP"' EXIT
    say "hugepages: $(cat "$HP") (were $HP_OLD)"
fi

{
    printf '{"meta": {'
    bench_meta "$ROOT" | awk -F= '{ gsub(/"/, "\\\""); printf "%s\"%s\": \"%s\"", (NR > 1 ? ", " : ""), $1, substr($0, length($1) + 2) }'
    printf ', "rounds": %s, "reps": %s}}\n' "$ROUNDS" "$REPS"
} > "$OUT"

# record ROUND: tags every JSON line of stdin with the round.
record() { sed "s/^{/{\"round\":$1,/" | tee -a "$OUT" >&2; }

# netvm_app NAME ARGS...: `netvm run --repeat` REPS times; one JSON line with the median ns/packet.
netvm_app() {
    local name=$1; shift
    local ns=()
    for _ in $(seq "$REPS"); do
        ns+=("$("${PIN[@]}" "$REL/netvm" run "$@" --stats json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ns_per_packet"])')")
    done
    printf '%s\n' "${ns[@]}" | python3 -c "
import sys, statistics, json
v = [float(x) for x in sys.stdin if x.strip()]
print(json.dumps({'engine': 'netvm-jit', 'bench': '$name', 'mode': 'app', 'ns_median': round(statistics.median(v), 3), 'ns_min': round(min(v), 3), 'reps': len(v)}))"
}

# netvm_ids ENGINE: `netvm ids --engine jit --stats` REPS times; one JSON line
# with the median ns/packet and Gbit/s (the time inside the data path, as
# `netvm run`; the JIT's code, which the default `tiered` reaches only on
# long runs).
netvm_ids() {
    local engine=$1
    for _ in $(seq "$REPS"); do
        "${PIN[@]}" "$REL/netvm" ids --engine jit --rules "$WORK/ids.rules" -r "$WORK/ids.pcap" --alerts /dev/null --stats 2>/dev/null
    done | python3 -c "
import sys, statistics, json
v = [json.loads(l) for l in sys.stdin if l.strip()]
ns = [x['ns_per_packet'] for x in v]
print(json.dumps({'engine': '$engine', 'bench': 'ids', 'mode': 'app', 'ns_median': round(statistics.median(ns), 3), 'ns_min': round(min(ns), 3), 'gbit_s_median': round(statistics.median(x['gbit_per_s'] for x in v), 3), 'avg_bytes': round(v[0]['bytes'] / v[0]['packets'], 1), 'rules': v[0]['rules'], 'skipped': v[0]['skipped'], 'alerts': v[0]['alerts'], 'reps': len(v)}))"
}

BR=(-r "1=$WORK/bridge64-1.pcap" -r "2=$WORK/bridge64-2.pcap" -r "3=$WORK/bridge64-3.pcap" -r "4=$WORK/bridge64-4.pcap")
for round in $(seq "$ROUNDS"); do
    say "round $round of $ROUNDS"
    if wants lpm; then
        "${PIN[@]}" "$REL/coprobench" lpm "$WORK" --reps "$REPS" | record "$round"
        "${PIN[@]}" "$WORK/peers/copropeers" lpm "$WORK" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
    fi
    for n in 1000000 16000000; do
        if wants "hash$n"; then
            "${PIN[@]}" "$REL/coprobench" hash "$WORK" "$n" --reps "$REPS" | record "$round"
            "${PIN[@]}" "$WORK/peers/copropeers" hash "$WORK" "$n" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
        fi
    done
    if wants strmatch; then
        "${PIN[@]}" "$REL/coprobench" strmatch "$WORK" --reps "$REPS" | record "$round"
        "${PIN[@]}" "$WORK/peers/copropeers" hs "$WORK" --reps "$REPS" | record "$round"
    fi
    if wants router; then
        netvm_app router64 "$ROOT/examples/ipv4-router/app.toml" --load "routes=$WORK/routes.txt" -r "$WORK/router64.pcap" --repeat 50 | record "$round"
        "${PIN[@]}" "$WORK/peers/copropeers" router "$WORK" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
    fi
    if wants bridge; then
        netvm_app bridge64 "$ROOT/examples/l2-bridge/app.toml" "${BR[@]}" --repeat 50 | record "$round"
        "${PIN[@]}" "$WORK/peers/copropeers" bridge "$WORK" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
    fi
    if wants apps; then
        for app in router bridge; do
            "${PIN[@]}" "$REL/coprobench" app "$WORK" "$app" --reps "$REPS" | record "$round"
        done
        # The bridge's decision alone (benches/apps/bridge-c.toml): the C loop's work.
        "${PIN[@]}" "$REL/coprobench" app "$WORK" bridge-c --reps "$REPS" --only linked-off,linked-prefetch-auto,burst-off,burst-prefetch-auto,records-prefetch-auto,off,prefetch-auto | record "$round"
        wants router || "${PIN[@]}" "$WORK/peers/copropeers" router "$WORK" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
        wants bridge || "${PIN[@]}" "$WORK/peers/copropeers" bridge "$WORK" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
    fi
    for n in 2000 16000 1000000 16000000; do
        if wants "l2fwd$n"; then
            # The sweep for 1M entries; the modes alone for the others (16M
            # entries take seconds to load per setting).
            only=linked-off,linked-on-auto,linked-prefetch-auto,off,on-auto,prefetch-auto
            [ "$n" = 1000000 ] && only=""
            "${PIN[@]}" "$REL/coprobench" app "$WORK" "l2fwd-$n" --reps "$REPS" ${only:+--only "$only"} | record "$round"
            "${PIN[@]}" "$WORK/peers/copropeers" l2fwd "$WORK" "$n" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
        fi
    done
    if wants sweep; then
        # The sub-batch sweep (issue 16): the size chosen at run time against
        # every fixed size, on the router with 1,000 and 500,000 routes and
        # on the bridge with 2,000 to 16,000,000 entries.
        for app in router-1000 router bridge-2000 bridge-16000 bridge-1000000 bridge-16000000; do
            "${PIN[@]}" "$REL/coprobench" app "$WORK" "$app" --reps "$REPS" --rotate "$((round * 5))" \
                --only off,on-auto,prefetch-auto,$(for s in 8 16 32 64 128 256; do printf 'prefetch-%s,on-%s,' $s $s; done) | record "$round"
        done
    fi
    if wants ipv6; then
        "${PIN[@]}" "$REL/coprobench" lpm6 "$WORK" --reps "$REPS" | record "$round"
        "${PIN[@]}" "$WORK/peers/copropeers" lpm6 "$WORK" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
        "${PIN[@]}" "$REL/coprobench" app "$WORK" router6 --reps "$REPS" --only linked-off,linked-on-auto,linked-prefetch-auto,off,prefetch-auto | record "$round"
    fi
    if wants names; then
        "${PIN[@]}" "$REL/coprobench" names "$WORK" --reps "$REPS" | record "$round"
        "${PIN[@]}" "$WORK/peers/copropeers" names "$WORK" --reps "$REPS" --cpu "$PIN_CPU" | record "$round"
        "${PIN[@]}" "$REL/coprobench" app "$WORK" ndn --reps "$REPS" --only linked-off,linked-on-auto,linked-prefetch-auto,off,prefetch-auto | record "$round"
    fi
    if wants crossing; then
        for app in base in10 out10 invoke5; do
            netvm_app "copro-$app" "$ROOT/benches/apps/copro/$app.toml" -r "$WORK/router64.pcap" --repeat 50 | record "$round"
        done
    fi
    if wants ids; then
        netvm_ids netvm-jit/hyperscan | record "$round"
        NETVM_HYPERSCAN=off netvm_ids netvm-jit/aho-corasick | record "$round"
    fi
done

python3 "$ROOT/scripts/copro-summary.py" "$OUT"
say "records in $OUT"
