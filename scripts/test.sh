#!/usr/bin/env bash
# The whole test suite: what README's second quick-start command and CI run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The Fig. 2 vs tcpdump comparison must run, not skip, here.
export NETVM_REQUIRE_TCPDUMP=1
export NETVM_REQUIRE_LIBPCAP=1
# Bounded property tests (each target sets its own case count; this caps any default).
export PROPTEST_CASES="${PROPTEST_CASES:-256}"
cargo build --workspace --all-targets --locked
cargo test --workspace --locked
