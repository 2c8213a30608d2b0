#!/usr/bin/env bash
# Before and after: the same netvm commands run by the build of git revision
# REV and by the working tree's, interleaved, results compared (see
# scripts/bench-compare.py). For changes that must not alter behaviour or
# speed.
#
#   scripts/bench-compare.sh REV [--rounds N] [--only filter-f1-1M,loop-direct,...]
#
# REV is checked out in a worktree under /tmp/netvm-compare and built there
# (its own target directory, kept between runs); the 1M-packet trace of
# scripts/bench-engine.sh is made if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
rev="${1:?usage: scripts/bench-compare.sh REV [--rounds N] [--only ...]}"
shift
if ! [ -x /usr/bin/time ]; then
    sudo_cmd=""; [ "$(id -u)" != 0 ] && sudo_cmd="sudo"
    $sudo_cmd apt-get install -y -qq time >/dev/null
fi
sha=$(git rev-parse --short "$rev")
tree=/tmp/netvm-compare/$sha
target_dir=/tmp/netvm-compare/target-$sha
if ! [ -d "$tree" ]; then
    mkdir -p /tmp/netvm-compare
    git worktree add --detach "$tree" "$sha" >/dev/null
fi
# Real paths, so that a tree or target linked here from elsewhere is reused.
CARGO_TARGET_DIR=$(realpath -m "$target_dir") cargo build --release --locked -q -p netvm-cli \
    --manifest-path "$(realpath "$tree")/Cargo.toml"
cargo build --release --locked -q -p netvm-cli -p netvm-bench
trace=/tmp/netvm-bench-engine/mixed-1000000.pcap
if ! [ -f "$trace" ]; then
    mkdir -p /tmp/netvm-bench-engine
    target/release/filterbench gen-stream --out "$trace" --packets 1000000
fi
exec python3 scripts/bench-compare.py --rev "$sha" --before "$target_dir/release/netvm" \
    --after target/release/netvm --trace "$trace" "$@"
