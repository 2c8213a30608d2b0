#!/usr/bin/env bash
# Installs the peers the filter benchmark (scripts/bench-filters.sh) and the
# coprocessor benchmark (benches/peers/copropeers.c) compare netvm with, from
# Debian 12 (bookworm) packages. Idempotent: packages already
# present are not reinstalled, and `apt-get update` runs at most once per call.
#
#   required: gcc make pkg-config libpcap-dev tcpdump
#   optional: libdpdk-dev (DPDK's rte_bpf, for the DPDK BPF JIT peer; rte_lpm and
#             rte_hash, for the coprocessor peers)
#             libhyperscan-dev (Hyperscan, for the string-matching peer; amd64 only)
#
# The normal build and tests of netvm need none of these (tcpdump is used by the
# filter tests when present). A missing optional package does not fail the
# script: the peer that needs it is reported as unavailable by the benchmark.
# The kernel BPF peer needs no package (it uses the bpf() syscall directly), but
# it needs root and a kernel with bpf_jit_enable.
#
# Usage: scripts/install-peers.sh           (as root, or with sudo available)
# Exit status: 0 when the required packages are present afterwards, 1 otherwise.
set -u

REQUIRED=(gcc make pkg-config libpcap-dev tcpdump)
OPTIONAL=(libdpdk-dev libhyperscan-dev)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
        echo "install-peers: not root and no sudo: checking only" >&2
    fi
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

UPDATED=0
apt_install() {
    # apt_install PKG...: installs those not yet installed; returns apt's status.
    local missing=()
    for p in "$@"; do installed "$p" || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then return 1; fi
    if [ "$UPDATED" -eq 0 ]; then
        $SUDO apt-get update -qq >/dev/null 2>&1 || true
        UPDATED=1
    fi
    echo "install-peers: installing ${missing[*]}" >&2
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

status=0
if ! apt_install "${REQUIRED[@]}"; then
    echo "install-peers: could not install the required packages ${REQUIRED[*]}" >&2
    status=1
fi
for p in "${OPTIONAL[@]}"; do
    if ! apt_install "$p"; then
        echo "install-peers: optional package $p is not available: its peer will be reported as unavailable" >&2
    fi
done

# What is there now.
for p in "${REQUIRED[@]}" "${OPTIONAL[@]}"; do
    if installed "$p"; then
        printf 'install-peers: %-16s %s\n' "$p" "$(dpkg-query -W -f='${Version}' "$p")" >&2
    else
        printf 'install-peers: %-16s missing\n' "$p" >&2
    fi
done
exit $status
