#!/usr/bin/env python3
"""The packet engine's benchmarks (issue 13), peers measured in the same run.

  scripts/bench-engine.sh [--rounds N] [--packets N] [--only e2e,repeat,scaling,memory]

measures, in interleaved rounds:

  e2e      `netvm filter -r T -w OUT EXPR` against `tcpdump -r T -w OUT EXPR`
           on the NetVM paper's five filters and `tcp dst port 80`, over
           generated traces of N and 10 N packets (page cache warm); wall
           time and peak RSS of each whole command, outputs compared byte for
           byte;
  repeat   `netvm run --program f4.nil -r fullpath.pcap --repeat R`: the
           whole-process time per packet (difference of two repeat counts)
           and `ns_per_packet`, against the native-C loop of benches/peers
           (filterpeers, native-c, f4 on the full-path frame);
  scaling  Mpps (packets over the driver's wall time) of the classifier and
           the IPv4 router with 1 and 2 workers (and more where the machine
           has the cores), both distributions;
  memory   peak RSS of `netvm filter` and `netvm run` against input size.

Writes benches/results/engine-DATE.jsonl (one record per measurement) and
prints a Markdown summary (medians over rounds; ratios are medians of
per-round ratios).
"""

import argparse
import datetime
import hashlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETVM = os.path.join(ROOT, "target/release/netvm")
FILTERBENCH = os.path.join(ROOT, "target/release/filterbench")
PEERS = os.path.join(ROOT, "benches/peers/build/filterpeers")

FILTERS = [
    ("f1_ip", "ip"),
    ("f2_ip_src", "ip src 10.1.1.1"),
    ("f3_ip_tcp", "ip and tcp"),
    ("f4_ip_tcp_4field", "ip src 10.1.1.1 and ip dst 10.2.2.2 and tcp src port 20 and tcp dst port 30"),
    ("f5_ip_src_or4", "ip src 10.4.4.4 or ip src 10.3.3.3 or ip src 10.2.2.2 or ip src 10.1.1.1"),
    ("tcp_dport_80", "tcp dst port 80"),
]


def timed(cmd, **kw):
    """Runs cmd; returns (wall seconds, peak RSS KiB, completed process).
    Peak RSS comes from GNU time's %M (the child's own, measured by the kernel)."""
    full = ["/usr/bin/time", "-f", "%M"] + cmd
    t0 = time.perf_counter()
    p = subprocess.run(full, capture_output=True, **kw)
    wall = time.perf_counter() - t0
    lines = p.stderr.decode(errors="replace").strip().splitlines()
    rss = int(lines[-1]) if lines and lines[-1].isdigit() else 0
    if p.returncode != 0:
        sys.exit(f"bench-engine: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode(errors='replace')[-400:]}")
    return wall, rss, p


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--packets", type=int, default=1_000_000, help="the small trace; the large one has 10x")
    ap.add_argument("--dir", default="/tmp/netvm-bench-engine", help="where traces go")
    ap.add_argument("--outdir", default="/dev/shm/netvm-bench-engine",
                    help="where outputs go (tmpfs by default: no writeback of earlier outputs to disk disturbs a measurement)")
    ap.add_argument("--only", default="e2e,repeat,scaling,memory")
    ap.add_argument("--cpu", default=os.environ.get("PIN_CPU"), help="pin single-threaded commands to this CPU")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    only = set(a.only.split(","))
    os.makedirs(a.dir, exist_ok=True)
    os.makedirs(a.outdir, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out_path = a.out or os.path.join(ROOT, f"benches/results/engine-{stamp}.jsonl")
    records = []
    pin = ["taskset", "-c", a.cpu] if a.cpu is not None else []

    def rec(**r):
        r.setdefault("round", None)
        records.append(r)

    meta = {
        "kind": "meta",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "git": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "tcpdump": subprocess.run(["tcpdump", "--version"], capture_output=True, text=True).stdout.splitlines()[0],
        "load": os.getloadavg(),
        "pin": a.cpu,
    }
    try:
        meta["cpu_model"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    records.append(meta)

    # Traces: the mixed trace of filterbench (microsecond pcap), N and 10 N packets.
    traces = {}
    for n in (a.packets, 10 * a.packets):
        p = os.path.join(a.dir, f"mixed-{n}.pcap")
        if not os.path.exists(p):
            subprocess.run([FILTERBENCH, "gen-stream", "--out", p, "--packets", str(n)], check=True)
        traces[n] = p
    fullpath_dir = os.path.join(a.dir, "fp")
    if not os.path.exists(os.path.join(fullpath_dir, "fullpath.pcap")):
        subprocess.run([FILTERBENCH, "gen", "--out", fullpath_dir, "--packets", "1000"], check=True, capture_output=True)

    # Touch the memory the outputs will take once before measuring: on a
    # virtual machine the first touch of a guest page costs the hypervisor's
    # allocation, which otherwise lands on whichever command writes first
    # (seen here: 0.5 s to 2.7 s for the same 800 MB output).
    warm_bytes = 3 * 100 * 10 * a.packets
    with open(os.path.join(a.outdir, "warm"), "wb") as f:
        chunk = b"\0" * (1 << 24)
        for _ in range(max(1, warm_bytes // len(chunk))):
            f.write(chunk)
    os.unlink(os.path.join(a.outdir, "warm"))

    for r in range(a.rounds):
        print(f"bench-engine: round {r + 1} of {a.rounds}", file=sys.stderr)
        if "e2e" in only:
            for n, t in traces.items():
                warm(t)
                for name, expr in FILTERS:
                    digests = {}
                    order = ["tcpdump", "netvm"] if (r % 2 == 0) else ["netvm", "tcpdump"]
                    for tool in order:
                        # One output at a time in memory: each command writes
                        # into memory the other's output has just given back.
                        o = os.path.join(a.outdir, f"out-{tool}.pcap")
                        cmd = (["tcpdump", "-r", t, "-w", o, expr] if tool == "tcpdump" else [NETVM, "filter", "-r", t, "-w", o, expr])
                        wall, rss, _ = timed(pin + cmd)
                        with open(o, "rb") as f:
                            digests[tool] = hashlib.sha256(f.read()).hexdigest()
                        os.unlink(o)
                        rec(kind="e2e", round=r, packets=n, filter=name, tool=tool, wall_s=wall, rss_kib=rss)
                    same = digests["tcpdump"] == digests["netvm"]
                    rec(kind="e2e-same", round=r, packets=n, filter=name, identical=same)
                    if not same:
                        print(f"bench-engine: WARNING: outputs differ: {name} on {n} packets", file=sys.stderr)
        if "repeat" in only:
            f4 = os.path.join(ROOT, "benches/filters/f4_ip_tcp_4field.nil")
            fp = os.path.join(fullpath_dir, "fullpath.pcap")
            walls, nsp = {}, {}
            for reps in (10_000_000, 100_000_000):
                wall, rss, p = timed(pin + [NETVM, "run", "--program", f4, "-r", fp, "--repeat", str(reps), "--stats", "json"])
                s = json.loads(p.stdout)
                walls[reps], nsp[reps] = wall, s["ns_per_packet"]
                rec(kind="repeat", round=r, repeat=reps, wall_s=wall, ns_per_packet=s["ns_per_packet"], rss_kib=rss)
            if os.path.exists(PEERS):
                p = subprocess.run(pin + [PEERS, "--traces", fullpath_dir, "--peers", "native", "--reps", "5"], capture_output=True, text=True)
                for line in p.stdout.splitlines():
                    try:
                        j = json.loads(line)
                    except ValueError:
                        continue
                    if j.get("engine") == "native-c" and j.get("filter") == "f4_ip_tcp_4field" and j.get("workload") == "fullpath":
                        rec(kind="repeat-native", round=r, ns=j["ns_median"])
        if "scaling" in only:
            router_dir = os.path.join(ROOT, "examples/ipv4-router")
            apps = {
                "classifier": [os.path.join(ROOT, "examples/classifier/app.toml"), "-r", os.path.join(ROOT, "examples/traces/mixed.pcap")],
                "ipv4-router": [
                    os.path.join(router_dir, "app.toml"),
                    "--load",
                    "routes=" + os.path.join(router_dir, "routes.txt"),
                    "-r",
                    os.path.join(router_dir, "sample.pcap"),
                ],
            }
            counts = [1, 2] + [w for w in (4, 8, 16) if w < (os.cpu_count() or 1)]
            for app, args in apps.items():
                for w in counts:
                    for d in ("round-robin", "flow"):
                        if w == 1 and d == "flow":
                            continue
                        p = subprocess.run([NETVM, "run"] + args + ["--repeat", "40000", "--workers", str(w), "--distribution", d, "--stats", "json"],
                                           capture_output=True, text=True, check=True)
                        s = json.loads(p.stdout)
                        rec(kind="scaling", round=r, app=app, workers=w, distribution=d, packets=s["packets"], wall_ns=s["wall_ns"],
                            mpps=s["packets"] / s["wall_ns"] * 1e3, ns_per_packet=s["ns_per_packet"],
                            wait_ms=[x["wait_ns"] / 1e6 for x in s["workers"]], io_wait_ms=s["io_wait_ns"] / 1e6)
        if "memory" in only:
            fig2 = os.path.join(ROOT, "examples/fig2-filter/filter.nil")
            for n, t in traces.items():
                for tool, cmd in (("filter", [NETVM, "filter", "-r", t, "-w", "/dev/null", "tcp or udp"]),
                                  ("run", [NETVM, "run", "--program", fig2, "-r", t, "-w", "/dev/null"]),
                                  ("tcpdump", ["tcpdump", "-r", t, "-w", "/dev/null", "tcp or udp"])):
                    wall, rss, _ = timed(cmd)
                    rec(kind="memory", round=r, packets=n, tool=tool, rss_kib=rss, wall_s=wall)

    with open(out_path, "w") as f:
        for x in records:
            f.write(json.dumps(x) + "\n")
    print(f"bench-engine: wrote {out_path}", file=sys.stderr)
    summary(records)


def summary(records):
    rounds = sorted({r["round"] for r in records if r.get("round") is not None})
    e2e = [r for r in records if r["kind"] == "e2e"]
    if e2e:
        print("\n### End to end: netvm filter against tcpdump (wall s, median; ratio = median of per-round netvm/tcpdump)\n")
        print("| packets | filter | tcpdump | netvm | ratio | peak RSS tcpdump / netvm (KiB) | outputs identical |")
        print("|---|---|---|---|---|---|---|")
        for n in sorted({r["packets"] for r in e2e}):
            for name, _ in FILTERS:
                t = [r for r in e2e if r["packets"] == n and r["filter"] == name]
                td = {r["round"]: r for r in t if r["tool"] == "tcpdump"}
                nv = {r["round"]: r for r in t if r["tool"] == "netvm"}
                ratios = [nv[k]["wall_s"] / td[k]["wall_s"] for k in td if k in nv]
                same = all(r["identical"] for r in records if r["kind"] == "e2e-same" and r["packets"] == n and r["filter"] == name)
                print(f"| {n:,} | {name} | {median([r['wall_s'] for r in td.values()]):.3f} | {median([r['wall_s'] for r in nv.values()]):.3f} | "
                      f"{median(ratios):.2f} | {median([r['rss_kib'] for r in td.values()]):.0f} / {median([r['rss_kib'] for r in nv.values()]):.0f} | {'yes' if same else 'NO'} |")
    rep = [r for r in records if r["kind"] == "repeat"]
    if rep:
        print("\n### netvm run --repeat, f4 on the full-path frame (ns per packet)\n")
        per_round = []
        for k in rounds:
            x = {r["repeat"]: r for r in rep if r["round"] == k}
            if len(x) == 2:
                (a, ra), (b, rb) = sorted(x.items())
                whole = (rb["wall_s"] - ra["wall_s"]) / (b - a) * 1e9
                nat = [r["ns"] for r in records if r["kind"] == "repeat-native" and r["round"] == k]
                per_round.append((whole, rb["ns_per_packet"], nat[0] if nat else float("nan")))
        w, n, c = (median([p[i] for p in per_round]) for i in range(3))
        print("| whole process (difference of 10M and 100M repeats) | ns_per_packet | native C (filterpeers) | whole / C | ns_per_packet / C |")
        print("|---|---|---|---|---|")
        print(f"| {w:.2f} | {n:.2f} | {c:.2f} | {median([p[0] / p[2] for p in per_round]):.2f} | {median([p[1] / p[2] for p in per_round]):.2f} |")
    sc = [r for r in records if r["kind"] == "scaling"]
    if sc:
        print("\n### Scaling (Mpps over the driver's wall time, median; speed-up against 1 worker)\n")
        print("| application | distribution | workers | Mpps | speed-up | ns/packet per worker |")
        print("|---|---|---|---|---|---|")
        for app in sorted({r["app"] for r in sc}):
            base = median([r["mpps"] for r in sc if r["app"] == app and r["workers"] == 1])
            for d in ("round-robin", "flow"):
                for w in sorted({r["workers"] for r in sc}):
                    x = [r for r in sc if r["app"] == app and r["workers"] == w and r["distribution"] == (d if w > 1 else "round-robin")]
                    if not x or (w == 1 and d == "flow"):
                        continue
                    m = median([r["mpps"] for r in x])
                    print(f"| {app} | {d if w > 1 else '-'} | {w} | {m:.2f} | {m / base:.2f} | {median([r['ns_per_packet'] for r in x]):.1f} |")
    mem = [r for r in records if r["kind"] == "memory"]
    if mem:
        print("\n### Peak RSS against input size (KiB, median)\n")
        sizes = sorted({r["packets"] for r in mem})
        print("| command | " + " | ".join(f"{n:,} packets" for n in sizes) + " |")
        print("|---|" + "---|" * len(sizes))
        for tool in ("filter", "run", "tcpdump"):
            cells = [f"{median([r['rss_kib'] for r in mem if r['tool'] == tool and r['packets'] == n]):.0f}" for n in sizes]
            print(f"| {tool} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--summary":
        summary([json.loads(l) for l in open(sys.argv[2])])
    else:
        main()
