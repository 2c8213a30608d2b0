#!/usr/bin/env python3
"""Summarises a bench-copro.sh record file (JSON lines with a "round").

For every (bench, mode): the median over rounds of each engine's median
ns/op; then, for every netvm engine against every peer (engines not named
netvm-*) of the same bench, the median over rounds of the per-round time
ratio netvm/peer (below 1: netvm is faster). Modes pair up as measured:
single with single, bulk with bulk, all with all, first with first; an
application run (`app`, `netvm run`; `app-*`, `coprobench app`) is paired
with every mode of its peer.

Then, for every application measured at fixed sub-batch sizes (the sweep,
`prefetch-N` and `on-N`): the best fixed size per round, and the ratio of
the size chosen at run time (`prefetch-auto`, `on-auto`) to it; the issue-16
goal is a ratio within 1.05.

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
    sweep(ns)
    extra = [o for o in other if "gbit_s_median" in o or "seconds" in o or "unavailable" in o]
    if extra:
        print()
        for o in extra:
            print("- " + json.dumps(o, sort_keys=True))


def sweep(ns):
    """Per application and batching mode: auto against the best fixed sub-batch size, per round."""
    rows = []
    for (b, m, e), auto in sorted(ns.items()):
        for mode in ("prefetch", "on"):
            if m != f"app-{mode}-auto":
                continue
            fixed = {k[1]: v for k, v in ns.items() if k[0] == b and k[2] == e and k[1].startswith(f"app-{mode}-") and k[1][len(f"app-{mode}-"):].isdigit()}
            if not fixed:
                continue
            ratios, bests = [], []
            for r in sorted(auto):
                at = {mm: v[r] for mm, v in fixed.items() if r in v}
                if not at:
                    continue
                best = min(at, key=at.get)
                bests.append(f"{best[len(f'app-{mode}-'):]} ({at[best]:.1f})")
                ratios.append(auto[r] / at[best])
            if ratios:
                rows.append((b, mode, statistics.median(auto.values()), ", ".join(bests), statistics.median(ratios), ", ".join(f"{x:.3f}" for x in ratios)))
    if not rows:
        return
    print()
    print("| bench | batching | auto ns (median) | best fixed size per round (ns) | auto / best, median | per round |")
    print("|---|---|---|---|---|---|")
    for b, mode, a, best, ratio, per in rows:
        print(f"| {b} | {mode} | {a:.2f} | {best} | **{ratio:.3f}** | {per} |")


if __name__ == "__main__":
    main(sys.argv[1])
