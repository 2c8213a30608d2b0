#!/usr/bin/env bash
# The whole test suite: what README's second quick-start command and CI run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The Fig. 2 vs tcpdump comparison must run, not skip, here.
export NETVM_REQUIRE_TCPDUMP=1
export NETVM_REQUIRE_LIBPCAP=1
# Where setup.sh could install the Hyperscan runtime, its backend must be tested.
if ldconfig -p 2>/dev/null | grep -q 'libhs\.so\.5'; then export NETVM_REQUIRE_HYPERSCAN=1; fi
# Bounded property tests (each target sets its own case count; this caps any default).
export PROPTEST_CASES="${PROPTEST_CASES:-256}"
# A clean checkout gains nothing from incremental state (gigabytes on disk).
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# House rules: rustfmt.toml's layout; no clippy or rustc warning (the
# workspace lints in Cargo.toml: documented public items, a SAFETY comment on
# every unsafe block).
cargo fmt --all --check
# clippy type-checks every target (benches included); `cargo test` below
# builds and links the libraries, binaries, tests and examples it runs.
cargo clippy --workspace --all-targets --locked -- -D warnings
# The fuzz targets are a workspace of their own (cargo-fuzz runs them on
# nightly); they must keep compiling against the libraries they exercise.
cargo check --manifest-path fuzz/Cargo.toml --bins --locked
cargo test --workspace --locked
# The baseline compiler's AArch64 templates, cross-compiled and run under
# qemu-aarch64 against the interpreter, the conformance suite on every
# engine there (the JIT's and the baseline compiler's AArch64 code, AOT
# objects linked for AArch64), and the JIT's generated differential tests;
# setup.sh installs the cross toolchain,
# qemu-user and Rust's aarch64 target; where it could not, say so.
if command -v aarch64-linux-gnu-gcc >/dev/null && command -v qemu-aarch64 >/dev/null \
    && rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
    cargo clippy --locked --target aarch64-unknown-linux-gnu -p netvm-baseline --all-targets -- -D warnings
    cargo test --locked --target aarch64-unknown-linux-gnu -p netvm-baseline
    # The conformance suite, and the JIT's AArch64 code against the
    # interpreter on generated programs and applications (the tables' and
    # routes' inline walks included). Each of these commands selects the
    # same two packages, so that their dependencies get the same features
    # and are built once (selecting one or the other rebuilt Cranelift).
    cargo test --locked --target aarch64-unknown-linux-gnu -p netvm-filetests -p netvm-jit --test suite --test generated_apps
    cargo test --locked --target aarch64-unknown-linux-gnu -p netvm-filetests -p netvm-jit --test differential generated
else
    echo "test.sh: no aarch64 cross toolchain or qemu-aarch64: the AArch64 baseline compiler is not tested" >&2
fi
# The JIT's RISC-V code (the tag compare of the inline probes is scalar
# there), run under qemu-riscv64: the generated differential tests and the
# conformance suite (the baseline compiler has no RISC-V templates and skips).
if command -v riscv64-linux-gnu-gcc >/dev/null && command -v qemu-riscv64 >/dev/null \
    && rustup target list --installed 2>/dev/null | grep -qx riscv64gc-unknown-linux-gnu; then
    export CARGO_TARGET_RISCV64GC_UNKNOWN_LINUX_GNU_LINKER=riscv64-linux-gnu-gcc
    export CARGO_TARGET_RISCV64GC_UNKNOWN_LINUX_GNU_RUNNER="qemu-riscv64 -L /usr/riscv64-linux-gnu"
    # The same two packages in each command, as for AArch64: one build.
    cargo test --locked --target riscv64gc-unknown-linux-gnu -p netvm-filetests -p netvm-jit --test suite --test generated_apps
    cargo test --locked --target riscv64gc-unknown-linux-gnu -p netvm-filetests -p netvm-jit --test differential generated
else
    echo "test.sh: no riscv64 cross toolchain or qemu-riscv64: the JIT's RISC-V code is not run" >&2
fi
# The string-matching coprocessor and the IDS again, with Hyperscan kept
# unloaded: the aho-corasick backend alone must give the same answers.
# (--workspace keeps the features, and so the builds, of the run above.)
NETVM_HYPERSCAN=off NETVM_REQUIRE_HYPERSCAN=0 cargo test --workspace --locked --lib strmatch
NETVM_HYPERSCAN=off NETVM_REQUIRE_HYPERSCAN=0 cargo test --workspace --locked --test ids
