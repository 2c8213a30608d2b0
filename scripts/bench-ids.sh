#!/usr/bin/env bash
# NetVMSnort on public rule sets (issue 15): `netvm ids` as a user runs it,
# on the Emerging Threats open set (every file of
# ../shared/corpus/rules/et-open-2017) and the Snort 3 community rules:
# compile time and peak RSS, Gbit/s on the protocol mix (HTTP, DNS, TLS,
# ...: `filterbench gen-protomix`) and on the tcpdump test captures, alert
# counts. See scripts/bench-ids.py; results go to
# benches/results/ids-DATE.jsonl and a Markdown summary on stdout.
#
#   scripts/bench-ids.sh [--rounds N] [--packets N] [--only compile,throughput] [--sets et,snort3] [--traces protomix,corpus]
#
# Installs GNU time (peak RSS of each command), builds netvm and
# filterbench; traces are made in /tmp/netvm-bench-ids once and kept.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! [ -x /usr/bin/time ]; then
    sudo_cmd=""; [ "$(id -u)" != 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get install -y -qq time >/dev/null
fi
cargo build --release -p netvm-cli -p netvm-bench
exec python3 scripts/bench-ids.py "$@"
