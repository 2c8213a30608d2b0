#!/usr/bin/env python3
"""Worker scaling of `netvm run` (issues 13 and 16): Mpps of the packet
engine with 1 to N workers on the paper's forwarding applications, as a user
runs them (the whole command; Mpps = packets over the packet path's wall
time, `--stats json` `wall_ns`, so that loading a table is not counted).

  scripts/bench-scaling.py [--rounds N] [--workers 1,2,4,8,16] [--apps A,B]
                           [--bin DIR] [--work DIR] [--out FILE] [--git REV]
  scripts/bench-scaling.py --summary FILE      (the table of a run's records)

Applications (inputs made by `coprobench gen-*` into --work once):

  classifier  examples/classifier on examples/traces/mixed.pcap (no tables)
  router      examples/ipv4-router, 500,000 routes, 64-byte frames
  l2fwd       examples/l2-fwd, 1,000,000 entries, 64-byte frames
  l2fwd-sharded  the same with a table per worker (`workers = "sharded"`)
  router6     examples/ipv6-router, 200,000 routes of /29-/64
  ndn         examples/ndn-router, 1,000,000 name prefixes
  bridge      examples/l2-bridge, 16,000 hosts on 4 ports (the table loaded
              first, so that frames are forwarded, not flooded), the table
              sharded per worker (`workers = "sharded"`: each starts with the
              loaded entries), flow distribution (a conversation stays on
              one worker)

Each run replays its trace from memory (`--repeat`) for about BASE x W
packets with W workers, so that every run lasts about as long. Runs are
interleaved over rounds (every application and worker count once per round);
the summary is the median Mpps per point and the speed-up over one worker,
and the per-worker busy fraction (the rest is waiting for work: the I/O
stage or the reorder). Needs only Python's standard library and the two
release binaries (netvm, coprobench), so it runs on a bare machine.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# name: (packets per worker per run, inputs made by coprobench, arguments of `netvm run`)
APPS = {
    "classifier": (4_000_000, [], lambda w: [ex("classifier/app.toml"), "-r", ex("traces/mixed.pcap")]),
    "router": (
        4_000_000,
        [["gen-router", "500000"]],
        lambda w: [ex("ipv4-router/app.toml"), "--load", f"routes={w}/routes-500000.txt", "-r", f"{w}/router64-500000.pcap"],
    ),
    "l2fwd": (
        4_000_000,
        [["gen-l2fwd", "1000000"]],
        lambda w: [ex("l2-fwd/app.toml"), "--load", f"fib={w}/l2fwd-1000000.txt", "-r", f"{w}/l2fwd64-1000000.pcap"],
    ),
    "l2fwd-sharded": (
        4_000_000,
        [["gen-l2fwd", "1000000"]],
        lambda w: [f"{w}/l2fwd-sharded/app.toml", "--load", f"fib={w}/l2fwd-1000000.txt", "-r", f"{w}/l2fwd64-1000000.pcap"],
    ),
    "router6": (
        2_000_000,
        [["gen-ipv6"]],
        lambda w: [ex("ipv6-router/app.toml"), "--load", f"routes={w}/routes6.txt", "-r", f"{w}/router6-64.pcap"],
    ),
    "ndn": (1_000_000, [["gen-names"]], lambda w: [ex("ndn-router/app.toml"), "--load", f"fib={w}/names.txt", "-r", f"{w}/names64.pcap"]),
    "bridge": (
        2_000_000,
        [["gen-bridge", "16000"]],
        lambda w: [f"{w}/bridge-sharded/app.toml", "--load", f"fib={w}/bridge-16000.txt"]
        + [x for p in range(1, 5) for x in ("-r", f"{p}={w}/bridge64-16000-{p}.pcap")]
        + ["--distribution", "flow"],
    ),
}


def ex(path):
    return os.path.join(ROOT, "examples", path)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def prepare(app, work, coprobench):
    """Makes the application's inputs in `work` once."""
    _, gens, _ = APPS[app]
    for g in gens:
        stamp = os.path.join(work, ".made-" + "-".join(g))
        if not os.path.exists(stamp):
            subprocess.run([coprobench, g[0], work] + g[1:], check=True, stdout=subprocess.DEVNULL)
            open(stamp, "w").close()
    if app in ("bridge", "l2fwd-sharded"):
        # The example's manifest with its table sharded per worker, programs by absolute path.
        example, progs, entry = {
            "bridge": ("l2-bridge", ("bridge.nil", "egress.nil"), "aging = 300 }"),
            "l2fwd-sharded": ("l2-fwd", ("fwd.nil",), "capacity = 1048576 }"),
        }[app]
        d = os.path.join(work, "bridge-sharded" if app == "bridge" else app)
        os.makedirs(d, exist_ok=True)
        with open(ex(f"{example}/app.toml")) as f:
            text = f.read()
        for prog in progs:
            text = text.replace(f'program = "{prog}"', f'program = "{ex(example + "/" + prog)}"')
        text = text.replace(entry, entry[:-2] + ', workers = "sharded" }')
        if 'workers = "sharded"' not in text:
            sys.exit(f"bench-scaling: could not shard the table of examples/{example}/app.toml (changed?)")
        with open(os.path.join(d, "app.toml"), "w") as f:
            f.write(text)


def run(netvm, args, repeat, workers):
    cmd = [netvm, "run"] + args + ["--repeat", str(repeat), "--workers", str(workers), "--stats", "json"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"bench-scaling: {' '.join(cmd)} failed ({p.returncode}):\n{p.stderr}")
    return json.loads(p.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--workers", default=None, help="worker counts (default 1, 2, 4, 8, ... up to the CPUs, and the CPUs)")
    ap.add_argument("--apps", default=",".join(APPS))
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release"))
    ap.add_argument("--work", default="/tmp/netvm-scaling")
    ap.add_argument("--out", default=None)
    ap.add_argument("--git", default=None, help="the source revision, where the tree has no .git")
    a = ap.parse_args()
    cpus = os.cpu_count() or 1
    if a.workers:
        counts = [int(x) for x in a.workers.split(",")]
    else:
        counts = sorted({w for w in (1, 2, 4, 8, 12, 16, 24, 32, 48, 64) if w <= cpus} | {cpus})
    apps = a.apps.split(",")
    for app in apps:
        if app not in APPS:
            sys.exit(f"bench-scaling: unknown application {app} (know: {', '.join(APPS)})")
    netvm, coprobench = os.path.join(a.bin, "netvm"), os.path.join(a.bin, "coprobench")
    os.makedirs(a.work, exist_ok=True)
    git = a.git
    if git is None:
        g = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
        git = g.stdout.strip() if g.returncode == 0 else "unknown"
    date = datetime.datetime.now(datetime.timezone.utc)
    out = a.out or os.path.join(ROOT, "benches/results", f"scaling-{date:%Y-%m-%d}.jsonl")
    meta = {"date": f"{date:%Y-%m-%dT%H:%M:%SZ}", "git": git, "cpu": cpu_model(), "cpus": cpus, "kernel": platform.release(), "workers": counts}
    records = [{"meta": meta}]
    print(f"bench-scaling: {meta}", file=sys.stderr)
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    # Written as the runs end, so that an interrupted run keeps what it measured.
    log = open(out, "w")
    log.write(json.dumps(records[0]) + "\n")

    trace_packets = {}
    for app in apps:
        prepare(app, a.work, coprobench)
        s = run(netvm, APPS[app][2](a.work), 1, 1)
        trace_packets[app] = s["packets"]
    for r in range(a.rounds):
        for app in apps:
            base, _, args = APPS[app]
            for w in counts:
                repeat = max(1, -(-base * w // trace_packets[app]))
                s = run(netvm, args(a.work), repeat, w)
                busy = [x["busy_ns"] / s["wall_ns"] for x in s["workers"]] if s.get("workers") else []
                rec = {
                    "kind": "scaling",
                    "round": r,
                    "app": app,
                    "workers": w,
                    "repeat": repeat,
                    "packets": s["packets"],
                    "wall_ns": s["wall_ns"],
                    "mpps": s["packets"] / s["wall_ns"] * 1e3,
                    "ns_per_packet": s["ns_per_packet"],
                    "busy": busy,
                    "io_wait_ms": s.get("io_wait_ns", 0) / 1e6,
                }
                records.append(rec)
                log.write(json.dumps(rec) + "\n")
                log.flush()
                print(f"bench-scaling: round {r} {app} {w} workers: {rec['mpps']:.2f} Mpps", file=sys.stderr)
    log.close()
    print(f"bench-scaling: {len(records) - 1} runs written to {out}", file=sys.stderr)
    summary(records)


def summary(records):
    meta = records[0]["meta"]
    rs = [x for x in records[1:] if x.get("kind") == "scaling"]
    print(f"{meta['cpus']} CPUs ({meta['cpu']}), git {meta['git']}, {meta['date']}; Mpps (median over rounds), speed-up over 1 worker, median busy fraction per worker")
    print()
    print("| application | workers | Mpps | speed-up | busy |")
    print("|---|---:|---:|---:|---:|")
    for app in dict.fromkeys(x["app"] for x in rs):
        one = [x["mpps"] for x in rs if x["app"] == app and x["workers"] == 1]
        base = statistics.median(one) if one else None
        for w in sorted({x["workers"] for x in rs if x["app"] == app}):
            pts = [x for x in rs if x["app"] == app and x["workers"] == w]
            m = statistics.median(x["mpps"] for x in pts)
            busy = [statistics.median(x["busy"]) for x in pts if x["busy"]]
            up = f"{m / base:.2f}" if base else "-"
            print(f"| {app} | {w} | {m:.2f} | {up} | {statistics.median(busy):.2f} |" if busy else f"| {app} | {w} | {m:.2f} | {up} | - |")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--summary":
        with open(sys.argv[2]) as f:
            summary([json.loads(line) for line in f])
    else:
        main()
