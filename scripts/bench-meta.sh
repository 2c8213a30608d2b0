# Sourced by the benchmark scripts: `bench_meta ROOT` prints KEY=VALUE lines
# describing the machine, the toolchains and the source tree, and what else
# was running (load average, the busiest processes).
bench_meta() {
    local root=$1
    echo "date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "git=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$root" && git diff --quiet HEAD 2>/dev/null || echo '+changes')"
    echo "cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
    echo "cpus=$(nproc)"
    echo "memory=$(free -g 2>/dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
    echo "kernel=$(uname -r)"
    echo "os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")"
    echo "rustc=$(rustc --version 2>/dev/null)"
    echo "gcc=$(gcc --version 2>/dev/null | head -n 1)"
    echo "libpcap=$(dpkg-query -W -f='${Version}' libpcap-dev 2>/dev/null || echo unknown)"
    echo "dpdk=$(pkg-config --modversion libdpdk 2>/dev/null || echo unavailable)"
    echo "load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null)"
    echo "busy=$(ps -eo pcpu=,psr=,comm= --sort=-pcpu 2>/dev/null | awk '$1 >= 10 {printf "%s%s (%s%% on CPU %s)", sep, $3, $1, $2; sep="; "}')"
}

# `bench_pin CPU`: sets the array PIN to `taskset -c CPU` when taskset and
# that CPU exist (else empty), and says which.
bench_pin() {
    PIN=()
    if command -v taskset >/dev/null 2>&1 && [ "$(nproc)" -gt "$1" ]; then
        PIN=(taskset -c "$1")
        echo "pinned to CPU $1" >&2
    else
        echo "not pinned (no taskset or no CPU $1)" >&2
    fi
}
