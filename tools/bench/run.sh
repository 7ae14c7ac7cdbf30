#!/usr/bin/env bash
# Regenerates BENCHMARKS.md and docs/bench/*.png: builds `lds` with every peer (RocksDB's
# bundled build takes about 15 minutes the first time; the build directory is cached in
# ~/.cache/lds-bench), runs tools/bench/run.py (root: loop devices, mkfs, mount), then
# tools/bench/report.py. Extra arguments go to run.py (--num, --peers, --filesystems, ...).
set -euo pipefail
cd "$(dirname "$0")/../.."

missing=""
command -v mkfs.xfs >/dev/null || missing+=" xfsprogs"
command -v mkfs.btrfs >/dev/null || missing+=" btrfs-progs"
command -v clang >/dev/null || missing+=" clang"
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1 || missing+=" libclang-dev"
if [ -n "$missing" ]; then
  echo "== installing:$missing"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing
fi
python3 -m pip install --quiet --disable-pip-version-check -r tools/bench/requirements.txt

# LevelDB 1.22 does not build with gcc 12 here (-Wthread-safety) nor with clang without
# <ctime> in one benchmark file; one compiler setting for every C/C++ dependency keeps the
# cached RocksDB build valid.
export CC=clang CXX=clang++ CXXFLAGS="-include ctime"
export CARGO_TARGET_DIR="${LDS_BENCH_TARGET:-$HOME/.cache/lds-bench/target}"
echo "== cargo build --release -p lds-cli --features peers (into $CARGO_TARGET_DIR)"
cargo build --release -p lds-cli --features peers
# A device-bound run (--throttle MBPS,IOPS) keeps its own results; the report shows both.
main="${LDS_BENCH_RESULTS:-docs/bench/results}"
throttled="docs/bench/results-throttled"
results="$main"
case " $* " in *" --throttle "*) results="$throttled" ;; esac
rm -rf "$results"
python3 tools/bench/run.py --lds "$CARGO_TARGET_DIR/release/lds" --out "$results" "$@"
python3 tools/bench/report.py --results "$main" --throttled-results "$throttled" --output BENCHMARKS.md --charts docs/bench
