#!/usr/bin/env python3
"""Summarises a bench-copro.sh record file (JSON lines with a "round").

For every (bench, mode): the median over rounds of each engine's median
ns/op; then, for every netvm engine against every peer (engines not named
netvm-*) of the same bench, the median over rounds of the per-round time
ratio netvm/peer (below 1: netvm is faster). Modes pair up as measured:
single with single, bulk with bulk, all with all, first with first; an
application run (`app`, `netvm run`; `app-*`, `coprobench app`) is paired
with every mode of its peer.

usage: copro-summary.py RECORDS.jsonl
"""
import json
import statistics
import sys
from collections import defaultdict


def main(path):
    ns = defaultdict(dict)  # (bench, mode, engine) -> {round: ns}
    other = []
    with open(path) as f:
        for line in f:
            j = json.loads(line)
            if "meta" in j:
                meta = j["meta"]
                continue
            if "ns_median" in j:
                ns[(j["bench"], j["mode"], j["engine"])][j.get("round", 0)] = j["ns_median"]
            else:
                other.append(j)
    print(f"# coprocessor benchmarks, {meta.get('date', '?')}, {meta.get('cpu', '?')}, git {meta.get('git', '?')}, load {meta.get('load', '?')}")
    print()
    print("| bench | mode | engine | ns/op (median of rounds) | rounds |")
    print("|---|---|---|---|---|")
    for (b, m, e), r in sorted(ns.items()):
        print(f"| {b} | {m} | {e} | {statistics.median(r.values()):.2f} | {len(r)} |")
    print()
    print("| bench | netvm engine (mode) | peer (mode) | time ratio netvm/peer, median of rounds | per round |")
    print("|---|---|---|---|---|")
    keys = list(ns)
    for (b, m, e) in sorted(keys):
        if not e.startswith("netvm"):
            continue
        for (b2, m2, e2) in sorted(keys):
            if b2 != b or e2.startswith("netvm") or not (m2 == m or m.startswith("app")):
                continue
            mine, theirs = ns[(b, m, e)], ns[(b2, m2, e2)]
            rounds = sorted(set(mine) & set(theirs))
            if not rounds:
                continue
            ratios = [mine[r] / theirs[r] for r in rounds]
            per = ", ".join(f"{x:.2f}" for x in ratios)
            print(f"| {b} | {e} ({m}) | {e2} ({m2}) | **{statistics.median(ratios):.2f}** | {per} |")
    extra = [o for o in other if "gbit_s_median" in o or "seconds" in o or "unavailable" in o]
    if extra:
        print()
        for o in extra:
            print("- " + json.dumps(o, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
