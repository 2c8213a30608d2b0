#!/usr/bin/env bash
# Installs what netvm's build and tests need on a fresh Debian machine.
# Idempotent: installs only what is missing. Run as root or with sudo.
#   - a Rust toolchain >= 1.95 (rustup, if cargo is absent)
#   - tcpdump (the reference the Fig. 2 test compares against)
#   - libpcap-dev (pcap.h and -lpcap: the libpcap oracle of the filter
#     differential test, crates/pfl/tests/libpcap.rs)
#   - for the AOT cross-target test (crates/cli/tests/aot.rs): gcc for
#     aarch64, qemu-user, and Rust's aarch64-unknown-linux-gnu standard
#     library. Failing to install these is not fatal: that test then says
#     what is missing and skips, and scripts/test.sh reports it.
#   - likewise for riscv64 (gcc, Rust's riscv64gc-unknown-linux-gnu
#     standard library; qemu-user runs it): scripts/test.sh runs the JIT's
#     differential tests and the conformance suite cross-compiled there.
#   - the Hyperscan (x86-64) or Vectorscan (arm64) runtime, libhs.so.5: the
#     string-matching coprocessor's fast backend, loaded at run time when
#     present. Optional: without it the aho-corasick backend runs, and the
#     tests of the Hyperscan backend skip.
set -euo pipefail

sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi

apt_need=()
command -v tcpdump >/dev/null 2>&1 || apt_need+=(tcpdump)
dpkg -s libpcap-dev >/dev/null 2>&1 || [ -f /usr/include/pcap/pcap.h ] || apt_need+=(libpcap-dev)
command -v python3 >/dev/null 2>&1 || apt_need+=(python3)
command -v cc >/dev/null 2>&1 || apt_need+=(build-essential)
if [ ${#apt_need[@]} -gt 0 ]; then
    echo "setup: installing ${apt_need[*]}" >&2
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${apt_need[@]}" >/dev/null
fi

# Cross-target AOT test: optional (see above).
cross_need=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || cross_need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
{ command -v qemu-aarch64 && command -v qemu-riscv64; } >/dev/null 2>&1 || cross_need+=(qemu-user)
if [ ${#cross_need[@]} -gt 0 ]; then
    echo "setup: installing ${cross_need[*]} (AOT cross-target test)" >&2
    if ! { $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${cross_need[@]}" >/dev/null; }; then
        echo "setup: could not install ${cross_need[*]}: the aarch64 AOT test will be skipped" >&2
    fi
fi
# riscv64 (the JIT's tests under qemu-riscv64): optional, installed apart.
if ! command -v riscv64-linux-gnu-gcc >/dev/null 2>&1; then
    echo "setup: installing gcc-riscv64-linux-gnu libc6-dev-riscv64-cross (the JIT's tests under qemu-riscv64)" >&2
    if ! { $sudo_cmd apt-get update -qq \
        && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq gcc-riscv64-linux-gnu libc6-dev-riscv64-cross >/dev/null; }; then
        echo "setup: could not install the riscv64 cross compiler: the riscv64 tests will be skipped" >&2
    fi
fi

# Hyperscan runtime: optional (see above).
if ! ldconfig -p 2>/dev/null | grep -q 'libhs\.so\.5'; then
    case "$(uname -m)" in
        x86_64) hs_pkg=libhyperscan5 ;;
        aarch64) hs_pkg=libvectorscan5 ;;
        *) hs_pkg="" ;;
    esac
    if [ -n "$hs_pkg" ]; then
        echo "setup: installing $hs_pkg (string-matching coprocessor)" >&2
        if ! { $sudo_cmd apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "$hs_pkg" >/dev/null; }; then
            echo "setup: could not install $hs_pkg: strmatch uses aho-corasick only" >&2
        fi
    fi
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "setup: cargo not found; install Rust 1.95 or newer (https://rustup.rs)" >&2
        exit 1
    fi
fi
rustc_minor=$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
if [ "$rustc_minor" -lt 95 ]; then
    echo "setup: rustc $(rustc --version) is older than 1.95" >&2
    exit 1
fi

if command -v rustup >/dev/null 2>&1; then
    # scripts/test.sh checks formatting and lints before it builds.
    for component in rustfmt clippy; do
        if ! rustup component list --installed 2>/dev/null | grep -q "^$component"; then
            echo "setup: adding Rust component $component" >&2
            rustup component add "$component" >/dev/null 2>&1 \
                || { echo "setup: could not add $component (scripts/test.sh needs it)" >&2; exit 1; }
        fi
    done
    if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
        echo "setup: adding Rust target aarch64-unknown-linux-gnu (AOT cross-target test)" >&2
        rustup target add aarch64-unknown-linux-gnu >/dev/null 2>&1 \
            || echo "setup: could not add aarch64-unknown-linux-gnu: the aarch64 AOT test will be skipped" >&2
    fi
    if ! rustup target list --installed 2>/dev/null | grep -qx riscv64gc-unknown-linux-gnu; then
        echo "setup: adding Rust target riscv64gc-unknown-linux-gnu (the JIT's tests under qemu-riscv64)" >&2
        rustup target add riscv64gc-unknown-linux-gnu >/dev/null 2>&1 \
            || echo "setup: could not add riscv64gc-unknown-linux-gnu: the riscv64 tests will be skipped" >&2
    fi
fi
