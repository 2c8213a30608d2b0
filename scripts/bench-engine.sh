#!/usr/bin/env bash
# The packet engine's benchmarks (issue 13): netvm filter against tcpdump end
# to end, netvm run --repeat against the native-C loop, worker scaling, and
# peak memory against input size; peers measured in the same run. See
# scripts/bench-engine.py for what each measures; results go to
# benches/results/engine-DATE.jsonl and a Markdown summary on stdout.
#
#   scripts/bench-engine.sh [--rounds N] [--packets N] [--only e2e,repeat,scaling,memory] [--cpu C]
#
# Installs the peers (tcpdump, libpcap, gcc; scripts/install-peers.sh) and
# GNU time (peak RSS of each command), builds netvm, filterbench and the C
# peers. Traces (N and 10 N packets; 10 N = 1.1 GB by default) are made in
# /tmp/netvm-bench-engine once and kept.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-peers.sh >/dev/null || true
if ! [ -x /usr/bin/time ]; then
    sudo_cmd=""; [ "$(id -u)" != 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get install -y -qq time >/dev/null
fi
cargo build --release -p netvm-cli -p netvm-bench
make -s -C benches/peers >/dev/null
exec python3 scripts/bench-engine.py "$@"
