#!/usr/bin/env python3
"""Before and after: the same netvm commands run by two builds, interleaved.

  scripts/bench-compare.sh REV [--rounds N] [--only NAME,...]

For a change that must not alter behaviour or speed (a refactoring, a new
test harness), runs each workload below with the `netvm` built from git
revision REV ("before") and with the working tree's ("after"), alternating
which goes first in each round. Wall time is taken from outside the whole
command, peak RSS by GNU time. Every pair of runs must agree: `netvm filter`
outputs byte for byte, `netvm run --stats json` on every counter REV
reports (times and memory figures excepted; counters added since REV are
not compared) -- a disagreement stops the script.

Writes benches/results/compare-DATE.jsonl and prints a Markdown table
(medians over rounds; the ratio is the median of per-round ratios).
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRACES = "/tmp/netvm-bench-engine"

# Keys of `--stats json` that are measurements, not behaviour.
TIMING_KEYS = {"ns_per_packet", "wall_ns", "io_wait_ns", "busy_ns", "wait_ns", "peak_rss_kb", "blocks_high_water", "batches"}


def workloads(trace):
    """(name, argv after `netvm`, kind): kind "filter" compares the output file,
    "run" the statistics."""
    ex = lambda *p: os.path.join(ROOT, *p)
    out = "/dev/shm/netvm-compare.pcap"
    return [
        ("filter-f1-1M", ["filter", "-r", trace, "-w", out, "ip"], "filter"),
        (
            "filter-f4-1M",
            ["filter", "-r", trace, "-w", out, "ip src 10.1.1.1 and ip dst 10.2.2.2 and tcp src port 20 and tcp dst port 30"],
            "filter",
        ),
        ("run-f4-repeat", ["run", "--program", ex("benches/filters/f4_ip_tcp_4field.nil"), "-r", trace, "--repeat", "10"], "run"),
        # A byte-summing loop: budget accounting on every backward jump.
        (
            "loop-direct",
            ["run", ex("tests/apps/budget.toml"), "-r", ex("examples/traces/mixed.pcap"), "--repeat", "20000", "--budget", "100000"],
            "run",
        ),
        (
            "loop-dispatch",
            ["run", ex("tests/apps/budget.toml"), "-r", ex("examples/traces/mixed.pcap"), "--repeat", "20000", "--budget", "100000", "--link", "dispatch"],
            "run",
        ),
        (
            "loop-interp",
            ["run", ex("tests/apps/budget.toml"), "-r", ex("examples/traces/mixed.pcap"), "--repeat", "2000", "--budget", "100000", "--engine", "interp"],
            "run",
        ),
        ("classifier", ["run", ex("examples/classifier/app.toml"), "-r", ex("examples/traces/mixed.pcap"), "--repeat", "20000"], "run"),
        (
            "ipv4-router",
            ["run", ex("examples/ipv4-router/app.toml"), "-r", ex("examples/ipv4-router/sample.pcap"), "--repeat", "20000"],
            "run",
        ),
    ]


def behaviour(stats):
    """The statistics without the measurements."""
    if isinstance(stats, dict):
        return {k: behaviour(v) for k, v in stats.items() if k not in TIMING_KEYS}
    if isinstance(stats, list):
        return [behaviour(v) for v in stats]
    return stats


def agreed(before, after):
    """`after` cut down to what `before` reports: statistics added since REV
    (new keys) are not a disagreement."""
    if isinstance(before, dict) and isinstance(after, dict):
        return {k: agreed(before[k], after[k]) for k in before if k in after}
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [agreed(b, a) for b, a in zip(before, after)]
    return after


def run_once(netvm, argv, kind):
    cmd = ["/usr/bin/time", "-f", "%M", netvm] + argv + (["--stats", "json"] if kind == "run" else [])
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True)
    wall = time.perf_counter() - t0
    err = p.stderr.decode(errors="replace").strip().splitlines()
    if p.returncode != 0:
        sys.exit(f"bench-compare: {' '.join(cmd)} failed ({p.returncode}): {' '.join(err[-5:])}")
    rss = int(err[-1]) if err and err[-1].isdigit() else 0
    if kind == "filter":
        with open(argv[argv.index("-w") + 1], "rb") as f:
            seen = hashlib.sha256(f.read()).hexdigest()
    else:
        seen = behaviour(json.loads(p.stdout))
    return wall, rss, seen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", required=True, help="the netvm binary built from REV")
    ap.add_argument("--after", required=True, help="the netvm binary of the working tree")
    ap.add_argument("--rev", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--trace", default=os.path.join(TRACES, "mixed-1000000.pcap"))
    args = ap.parse_args()
    if not os.path.exists(args.trace):
        sys.exit(f"bench-compare: no trace {args.trace} (scripts/bench-engine.sh --only e2e makes it)")
    only = set(filter(None, args.only.split(",")))
    chosen = [w for w in workloads(args.trace) if not only or w[0] in only]
    head = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    date = datetime.date.today().isoformat()
    results = os.path.join(ROOT, "benches/results", f"compare-{date}.jsonl")
    os.makedirs(os.path.dirname(results), exist_ok=True)
    rows = []
    with open(results, "a") as log:
        for name, argv, kind in chosen:
            # One unmeasured run each: page cache, and the agreement check.
            _, _, seen_before = run_once(args.before, argv, kind)
            _, _, seen_after = run_once(args.after, argv, kind)
            if agreed(seen_before, seen_after) != seen_before:
                sys.exit(f"bench-compare: {name}: before and after disagree:\n  {seen_before}\n  {seen_after}")
            walls = {"before": [], "after": []}
            rsss = {"before": [], "after": []}
            ratios = []
            for r in range(args.rounds):
                order = [("before", args.before), ("after", args.after)]
                if r % 2:
                    order.reverse()
                got = {}
                for which, netvm in order:
                    wall, rss, seen = run_once(netvm, argv, kind)
                    if seen != (seen_before if which == "before" else seen_after):
                        sys.exit(f"bench-compare: {name}: {which} gave a different result in round {r}")
                    walls[which].append(wall)
                    rsss[which].append(rss)
                    got[which] = wall
                ratios.append(got["after"] / got["before"])
                log.write(json.dumps({"date": date, "rev": args.rev, "head": head, "workload": name, "round": r, **got}) + "\n")
            rows.append((name, statistics.median(walls["before"]), statistics.median(walls["after"]), statistics.median(ratios),
                         statistics.median(rsss["before"]), statistics.median(rsss["after"])))
            print(f"# {name} done", file=sys.stderr)
    print(f"Machine: {platform.node()}, {os.cpu_count()} CPUs, {platform.platform()}; before = {args.rev}, after = {head} (+ working tree)")
    print(f"{args.rounds} interleaved rounds, medians; results agree on every run.\n")
    print("| workload | before (s) | after (s) | after / before | peak RSS before / after (KiB) |")
    print("|---|---|---|---|---|")
    for name, b, a, ratio, rb, ra in rows:
        print(f"| {name} | {b:.3f} | {a:.3f} | **{ratio:.2f}** | {rb:,} / {ra:,} |")


if __name__ == "__main__":
    main()
