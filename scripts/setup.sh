#!/usr/bin/env bash
# Installs what netvm's build and tests need on a fresh Debian machine.
# Idempotent: installs only what is missing. Run as root or with sudo.
#   - a Rust toolchain >= 1.95 (rustup, if cargo is absent)
#   - tcpdump (the reference the Fig. 2 test compares against)
set -euo pipefail

sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi

apt_need=()
command -v tcpdump >/dev/null 2>&1 || apt_need+=(tcpdump)
command -v python3 >/dev/null 2>&1 || apt_need+=(python3)
command -v cc >/dev/null 2>&1 || apt_need+=(build-essential)
if [ ${#apt_need[@]} -gt 0 ]; then
    echo "setup: installing ${apt_need[*]}" >&2
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${apt_need[@]}" >/dev/null
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
