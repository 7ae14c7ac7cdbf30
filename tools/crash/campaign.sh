#!/usr/bin/env bash
# A long crash campaign (not part of CI): random, wrap-heavy and journal-heavy workloads,
# buffered and unbuffered, two at a time, then the totals. Reproducers of failures go to crashtest-failures/.
#   bash tools/crash/campaign.sh [FIRST_SEED] [RUNS_PER_KIND] [OPS]
# The defaults (250 runs of each of the six kinds, 200 operations): 1,500 workloads; the four
# random and random-wrap kinds take about 6 minutes on 2 cores, the two random-journal kinds
# (larger values, journaled merges) about 35 minutes.
set -euo pipefail
cd "$(dirname "$0")/../.."
seed=${1:-2000001}
runs=${2:-250}
ops=${3:-200}
cargo build --quiet --release -p lds-cli
out=$(mktemp -d)
kinds=("random --unbuffered" "random" "random-wrap --unbuffered" "random-wrap" "random-journal --unbuffered" "random-journal")
started=$(date +%s)
run_kind() {
  local index=$1; set -- ${kinds[$index]}
  local workload=$1; shift
  target/release/lds crashtest --workload "$workload" --seed "$seed" --runs "$runs" --ops "$ops" "$@" \
    --minimize-seconds 120 --json > "$out/$index.json" 2> "$out/$index.err" || true
}
run_kind 0 & run_kind 1 & wait
run_kind 2 & run_kind 3 & wait
run_kind 4 & run_kind 5 & wait
cat "$out"/*.err >&2 || true
python3 - "$out" "$seed" "$runs" "$ops" "$(( $(date +%s) - started ))" <<'PY'
import json, sys, glob
out, seed, runs, ops, seconds = sys.argv[1:]
kinds = ["random, unbuffered", "random, buffered", "random-wrap, unbuffered", "random-wrap, buffered",
         "random-journal, unbuffered", "random-journal, buffered"]
total = {"workloads": 0, "crash_points": 0, "images": 0, "distinct_images": 0, "failures": 0}
for index, kind in enumerate(kinds):
    with open(f"{out}/{index}.json") as file:
        counts = json.loads(file.read())
    print(f"{kind:26} {counts['workloads']:5} workloads {counts['crash_points']:9} crash points "
          f"{counts['distinct_images']:9} distinct images {counts['failures']:4} failures {counts['seconds']:7.0f} s")
    for key in total:
        total[key] += counts[key]
print(f"total: {total['workloads']} workloads (seeds {seed} to {int(seed) + int(runs) - 1}, {ops} operations), "
      f"{total['crash_points']} crash points, {total['images']} crash images ({total['distinct_images']} distinct), "
      f"{total['failures']} failures, {seconds} s")
sys.exit(1 if total["failures"] else 0)
PY
