#!/usr/bin/env python3
"""NetVMSnort on public rule sets (issue 15): `netvm ids` measured as a user runs it.

  scripts/bench-ids.sh [--rounds N] [--packets N] [--only compile,throughput] [--sets et,snort3] [--traces protomix,corpus]
  scripts/bench-ids.py --summary FILE [GIT]   # the summary of a run in FILE (the last, or that of revision GIT)

measures, in interleaved rounds (the order of the commands alternates from
round to round), each command's wall time from outside the process and its
peak RSS (GNU time's %M):

  compile     `netvm ids --rules SET -r tiny.pcap --alerts OUT --stats` on a
              10-packet capture, so that the run time is the compile time:
              wall time, peak RSS and the `netvm: N rules compiled, M skipped`
              line, for each rule set;
  throughput  `netvm ids --rules SET -r TRACE --alerts OUT --stats` on the
              protocol mix (`filterbench gen-protomix`, N packets) and on the
              tcpdump test captures of link type Ethernet merged into one
              file: Gbit/s over the whole command's wall time (compile
              included) and over the packet-processing time `--stats` reports
              (`wall_ns`), the alert count (so that regressions show), faults
              and any `uninspected` counters.

Rule sets: et = every /work/shared/corpus/rules/et-open-2017/*.rules
concatenated into one file; snort3 = the Snort 3 community rules. If the
`netvm ids` being measured does not define Snort's standard variables
itself ($HOME_NET, $HTTP_PORTS, ...: checked with `--check` on a probe
rule), they are passed with `--var` at the values of Snort's default
configuration.

The binary measured is a copy of target/release/netvm taken at the start
(others may rebuild the shared target directory meanwhile).

Writes benches/results/ids-DATE.jsonl (one record per measurement, a
`meta` record first; the runs of other revisions already in the file are
kept) and prints a Markdown summary (medians over rounds).
"""

import argparse
import datetime
import glob
import json
import os
import platform
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NETVM = os.path.join(ROOT, "target/release/netvm")
FILTERBENCH = os.path.join(ROOT, "target/release/filterbench")
CORPUS = os.environ.get("NETVM_CORPUS", os.path.join(os.path.dirname(ROOT), "shared/corpus"))

HTTP_PORTS = ("[80,81,311,383,591,593,901,1220,1414,1741,1830,2301,2381,2809,3037,3128,3702,4343,4848,5250,6988,7000,7001,"
              "7144,7145,7510,7777,7779,8000,8008,8014,8028,8080,8085,8088,8090,8118,8123,8180,8181,8243,8280,8300,8800,"
              "8888,8899,9000,9060,9080,9090,9091,9443,9999,11371,34443,34444,41080,50002,55555]")
# Snort 2.9's snort.conf defaults (the *_SERVERS are $HOME_NET there, i.e. any).
SNORT_VARS = {
    "HOME_NET": "any", "EXTERNAL_NET": "any",
    **{v: "any" for v in ("DNS_SERVERS", "SMTP_SERVERS", "HTTP_SERVERS", "SQL_SERVERS", "TELNET_SERVERS", "SSH_SERVERS",
                          "FTP_SERVERS", "SIP_SERVERS", "AIM_SERVERS", "DNP3_SERVER", "DNP3_CLIENT", "MODBUS_CLIENT",
                          "MODBUS_SERVER", "ENIP_CLIENT", "ENIP_SERVER")},
    "HTTP_PORTS": HTTP_PORTS, "SHELLCODE_PORTS": "!80", "ORACLE_PORTS": "1024:", "SSH_PORTS": "22",
    "FTP_PORTS": "[21,2100,3535]", "SIP_PORTS": "[5060,5061,5600]", "FILE_DATA_PORTS": HTTP_PORTS[:-1] + ",110,143]",
    "GTP_PORTS": "[2123,2152,3386]", "DNP3_PORTS": "20000", "MODBUS_PORTS": "502",
}
PROBE = ("alert tcp $EXTERNAL_NET any -> $HOME_NET $HTTP_PORTS (msg:\"probe\"; content:\"GET\"; sid:1;)\n"
         "alert tcp $HTTP_SERVERS $HTTP_PORTS -> $EXTERNAL_NET any (msg:\"probe\"; content:\"200\"; sid:2;)\n")
SUMMARY_RE = re.compile(r"netvm: (\d+) rules compiled, (\d+) skipped")


def timed(cmd):
    """Runs cmd; returns (wall seconds, peak RSS KiB, exit code, stdout, stderr without GNU time's line)."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True)
    wall = time.perf_counter() - t0
    lines = p.stderr.decode(errors="replace").rstrip("\n").split("\n")
    rss = int(lines[-1]) if lines and lines[-1].isdigit() else 0
    return wall, rss, p.returncode, p.stdout.decode(errors="replace"), "\n".join(lines[:-1])


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def merge_ethernet_pcaps(files, out):
    """Merges the classic pcap files of link type Ethernet among `files` into
    `out` (little-endian, microseconds). Time runs forward: each file starts
    1 s after the previous one ended and keeps its packets' spacing, clamped
    to 1 µs - 1 s (crafted captures jump by years, or back). A file's records
    are read up to its first damaged one (a length beyond 256 KiB or the end
    of the file). Returns counts."""
    st = {"files": 0, "not_ethernet": 0, "not_pcap": 0, "packets": 0, "bytes_captured": 0, "bytes_wire": 0, "damaged_files": 0}
    now = 1_704_067_200 * 1_000_000  # µs
    with open(out, "wb") as w:
        w.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262_144, 1))
        for path in files:
            with open(path, "rb") as f:
                data = f.read()
            if len(data) < 24:
                st["not_pcap"] += 1
                continue
            magic = data[:4]
            if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
                e = "<"
            elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
                e = ">"
            else:
                st["not_pcap"] += 1
                continue
            nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
            if struct.unpack(e + "I", data[20:24])[0] & 0x0FFFFFFF != 1:
                st["not_ethernet"] += 1
                continue
            st["files"] += 1
            i, prev = 24, None
            while i + 16 <= len(data):
                sec, frac, caplen, wire = struct.unpack(e + "IIII", data[i:i + 16])
                if caplen > 262_144 or i + 16 + caplen > len(data):
                    st["damaged_files"] += 1
                    break
                t = sec * 1_000_000 + (frac // 1000 if nano else frac)
                now += 1_000_000 if prev is None else min(max(t - prev, 1), 1_000_000)
                prev = t
                w.write(struct.pack("<IIII", now // 1_000_000, now % 1_000_000, caplen, max(wire, caplen)))
                w.write(data[i + 16:i + 16 + caplen])
                st["packets"] += 1
                st["bytes_captured"] += caplen
                st["bytes_wire"] += max(wire, caplen)
                i += 16 + caplen
    return st


def needs_vars(tmp):
    """True when `netvm ids` skips rules over Snort's standard variables (it does not define them itself)."""
    probe = os.path.join(tmp, "probe.rules")
    with open(probe, "w") as f:
        f.write(PROBE)
    p = subprocess.run([NETVM, "ids", "--rules", probe, "--check"], capture_output=True, text=True)
    m = SUMMARY_RE.search(p.stdout + p.stderr) or re.search(r"(\d+) rules compiled, (\d+) skipped", p.stdout + p.stderr)
    return not (m and int(m.group(1)) == 2)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--packets", type=int, default=1_000_000, help="packets of the protocol-mix trace")
    ap.add_argument("--only", default="compile,throughput")
    ap.add_argument("--sets", default="et,snort3", help="rule sets for the throughput runs (compile runs use both)")
    ap.add_argument("--traces", default="protomix,corpus")
    ap.add_argument("--dir", default="/tmp/netvm-bench-ids", help="where traces and the merged rule file go")
    ap.add_argument("--outdir", default="/dev/shm/netvm-bench-ids", help="where alert files go (tmpfs)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    only = set(a.only.split(","))
    os.makedirs(a.dir, exist_ok=True)
    os.makedirs(a.outdir, exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out_path = a.out or os.path.join(ROOT, f"benches/results/ids-{stamp}.jsonl")

    # The binary measured: a copy, since others may rebuild target/release while the rounds run.
    global NETVM
    snap = os.path.join(a.dir, "netvm")
    subprocess.run(["cp", NETVM, snap], check=True)
    NETVM = snap

    # Rule sets.
    et_files = sorted(glob.glob(os.path.join(CORPUS, "rules/et-open-2017/*.rules")))
    et = os.path.join(a.dir, "et-open-2017-all.rules")
    with open(et, "w") as w:
        for f in et_files:
            with open(f, errors="replace") as r:
                w.write(r.read().rstrip("\n") + "\n")
    sets = {"et": et, "snort3": os.path.join(CORPUS, "rules/snort3-community.rules")}
    active = {}
    for k, f in sets.items():
        with open(f, errors="replace") as r:
            active[k] = sum(1 for l in r if re.match(r"\s*(alert|drop|pass|reject|sdrop|log)\s", l))

    # Traces.
    tiny = os.path.join(a.dir, "tiny.pcap")
    if not os.path.exists(tiny):
        subprocess.run([FILTERBENCH, "gen-protomix", "--out", tiny, "--packets", "10"], check=True, capture_output=True)
    traces = {}
    if "protomix" in a.traces.split(","):
        p = os.path.join(a.dir, f"protomix-{a.packets}.pcap")
        if not os.path.exists(p):
            subprocess.run([FILTERBENCH, "gen-protomix", "--out", p, "--packets", str(a.packets)], check=True)
        traces["protomix"] = p
    corpus_stats = None
    if "corpus" in a.traces.split(","):
        p = os.path.join(a.dir, "tcpdump-corpus-ethernet.pcap")
        corpus_stats = merge_ethernet_pcaps(sorted(glob.glob(os.path.join(CORPUS, "tcpdump-tests/*.pcap"))), p)
        traces["corpus"] = p

    with tempfile.TemporaryDirectory() as tmp:
        var_args = []
        if needs_vars(tmp):
            for k, v in SNORT_VARS.items():
                var_args += ["--var", f"{k}={v}"]

    git = lambda *args: subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True).stdout.strip()
    meta = {
        "kind": "meta",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "git": git("rev-parse", "--short", "HEAD"),
        "netvm_sha256": subprocess.run(["sha256sum", NETVM], capture_output=True, text=True).stdout.split()[0][:16],
        "dirty": git("status", "--porcelain", "--untracked-files=no", "--", "crates", "Cargo.lock") != "",
        "rustc": subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip(),
        "load": os.getloadavg(),
        "vars_passed": bool(var_args),
        "rule_sets": {k: {"file": v, "active_rules": active[k]} for k, v in sets.items()},
        "et_files": len(et_files),
        "traces": {k: {"file": v, "bytes": os.path.getsize(v)} for k, v in traces.items()},
        "corpus": corpus_stats,
    }
    try:
        meta["cpu_model"] = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
        meta["mem_kib"] = int(next(l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")))
    except (OSError, StopIteration):
        pass
    records = [meta]
    print(f"bench-ids: {json.dumps(meta)}", file=sys.stderr)

    def ids(rules, trace, tag):
        alerts = os.path.join(a.outdir, f"alerts-{tag}.jsonl")
        cmd = [NETVM, "ids", "--rules", rules, "-r", trace, "--alerts", alerts, "--stats"] + var_args
        wall, rss, rc, out, err = timed(cmd)
        m = SUMMARY_RE.search(err)
        try:
            stats = json.loads(out.strip().splitlines()[-1]) if out.strip() else {}
        except ValueError:
            stats = {}
        try:
            with open(alerts) as f:
                n_alerts = sum(1 for _ in f)
            os.unlink(alerts)
        except OSError:
            n_alerts = None
        tail = [l for l in err.splitlines() if not l.startswith("netvm: ") or SUMMARY_RE.search(l) or "uninspected" in l]
        r = {"wall_s": wall, "rss_kib": rss, "rc": rc, "compiled": int(m.group(1)) if m else None,
             "skipped": int(m.group(2)) if m else None, "alerts": n_alerts, "stats": stats}
        if rc != 0:
            r["stderr_tail"] = err[-2000:]
            print(f"bench-ids: {' '.join(cmd[:6])} ... exited {rc}: {err[-400:]}", file=sys.stderr)
        elif tail:
            r["stderr_other"] = tail[-20:]
        return r

    jobs = []
    if "compile" in only:
        jobs += [("compile", s, "tiny") for s in sets]
    if "throughput" in only:
        jobs += [("throughput", s, t) for s in a.sets.split(",") for t in traces]
    for rnd in range(a.rounds):
        print(f"bench-ids: round {rnd + 1} of {a.rounds}", file=sys.stderr)
        order = jobs if rnd % 2 == 0 else list(reversed(jobs))
        for kind, s, t in order:
            r = ids(sets[s], tiny if t == "tiny" else traces[t], f"{s}-{t}")
            r.update(kind=kind, round=rnd, set=s, trace=t)
            records.append(r)
            print(f"bench-ids:   {kind} {s} {t}: {r['wall_s']:.2f} s, {r['rss_kib']} KiB, alerts {r['alerts']}", file=sys.stderr)

    # Earlier runs of other revisions in the same file stay (each run is a
    # `meta` record and the measurements after it); a run of this revision
    # replaces them.
    kept = []
    if os.path.exists(out_path):
        run = []
        for line in open(out_path):
            x = json.loads(line)
            if x.get("kind") == "meta":
                kept += run if run and run[0].get("git") != records[0].get("git") else []
                run = []
            run.append(x)
        kept += run if run and run[0].get("kind") == "meta" and run[0].get("git") != records[0].get("git") else []
    with open(out_path, "w") as f:
        for x in kept + records:
            f.write(json.dumps(x) + "\n")
    print(f"bench-ids: wrote {out_path} ({len(kept)} records of earlier revisions kept)", file=sys.stderr)
    summary(records)


def summary(records):
    meta = next(r for r in records if r["kind"] == "meta")
    print(f"\nMachine: {meta.get('cpu_model', '?')}, {meta['cpus']} CPUs, {meta.get('mem_kib', 0) / 2**20:.0f} GiB, "
          f"Linux {meta['kernel']}, {meta['rustc']}; git {meta['git']}{' (dirty)' if meta['dirty'] else ''}; "
          f"variables passed with --var: {'yes' if meta['vars_passed'] else 'no'}")
    names = {"et": "ET open 2017 (all files)", "snort3": "Snort 3 community"}
    comp = [r for r in records if r["kind"] == "compile"]
    if comp:
        print("\n### Compile (10-packet capture: wall time = start-up + compile), medians\n")
        print("| rule set | active rules | compiled | skipped | wall (s) | peak RSS (MiB) |")
        print("|---|---|---|---|---|---|")
        for s in dict.fromkeys(r["set"] for r in comp):
            x = [r for r in comp if r["set"] == s]
            print(f"| {names.get(s, s)} | {meta['rule_sets'][s]['active_rules']:,} | {x[0]['compiled']} | {x[0]['skipped']} | "
                  f"{median([r['wall_s'] for r in x]):.2f} | {median([r['rss_kib'] for r in x]) / 1024:.0f} |")
    thr = [r for r in records if r["kind"] == "throughput"]
    if thr:
        print("\n### Throughput, medians (Gbit/s of the bytes `--stats` counts; processing = over its `wall_ns`)\n")
        print("| rule set | trace | packets | MB | wall (s) | Gbit/s whole command | Gbit/s processing | ns/packet | alerts | faults | peak RSS (MiB) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for s in dict.fromkeys(r["set"] for r in thr):
            for t in dict.fromkeys(r["trace"] for r in thr):
                x = [r for r in thr if r["set"] == s and r["trace"] == t and r["stats"]]
                if not x:
                    continue
                st = x[0]["stats"]
                b = st.get("bytes", 0)
                whole = median([r["stats"]["bytes"] * 8 / r["wall_s"] / 1e9 for r in x])
                proc = median([r["stats"]["bytes"] * 8 / r["stats"]["wall_ns"] for r in x if r["stats"].get("wall_ns")])
                alerts = sorted({r["alerts"] for r in x})
                print(f"| {names.get(s, s)} | {t} | {st.get('packets', 0):,} | {b / 1e6:.0f} | {median([r['wall_s'] for r in x]):.2f} | "
                      f"{whole:.3f} | {proc:.2f} | {median([r['stats'].get('ns_per_packet') for r in x]):.0f} | "
                      f"{'/'.join(str(v) for v in alerts)} | {st.get('faults', '?')} | {median([r['rss_kib'] for r in x]) / 1024:.0f} |")
        # What was not fully inspected, by reason, summed over every run.
        unins = {}
        for r in thr:
            for k, v in (r["stats"].get("uninspected") or {}).items():
                unins[k] = unins.get(k, 0) + v
        print("\nuninspected (every run, by reason): " + (", ".join(f"{k} {v}" for k, v in sorted(unins.items())) or "none"))
    c = meta.get("corpus")
    if c:
        print(f"\ntcpdump corpus merged: {c['files']} Ethernet pcap files ({c['not_ethernet']} of other link types and "
              f"{c['not_pcap']} not classic pcap left out; {c['damaged_files']} read up to a damaged record), "
              f"{c['packets']:,} packets, {c['bytes_captured']:,} bytes captured")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--summary":
        # The last run in the file (its `meta` record and what follows), or
        # the run of the revision named after the file.
        runs = []
        for x in (json.loads(l) for l in open(sys.argv[2])):
            if x.get("kind") == "meta":
                runs.append([])
            runs[-1].append(x)
        pick = [r for r in runs if len(sys.argv) > 3 and r[0].get("git") == sys.argv[3]] or runs[-1:]
        summary(pick[-1])
    else:
        main()
