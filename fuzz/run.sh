#!/usr/bin/env bash
# Runs the afl targets of fuzz/afl (docs/reliability.md L1, L3).
#
#   fuzz/run.sh TARGET [SECONDS]   fuzz one target (default 600 s)
#   fuzz/run.sh all SECONDS        fuzz every target, SECONDS divided among them
#
# Installs cargo-afl and builds AFL++ if missing, builds fuzz/afl instrumented, seeds afl with
# fuzz/corpus/TARGET (gunzipped) and fuzz/regressions/TARGET, runs afl-fuzz into
# fuzz/out/TARGET/afl, then prints executions, executions per second, the queue size, crashes
# and hangs, and copies crashing inputs to fuzz/out/TARGET/crashes. Environment:
# CARGO_TARGET_DIR (default fuzz/afl/target), FUZZ_TIMEOUT_MS (afl's -t; default: afl's own
# for the decoders, 5000 for image, repair and sim).
set -euo pipefail

cd "$(dirname "$0")/.."
root=$PWD
usage() {
    echo "usage: fuzz/run.sh TARGET [SECONDS] | fuzz/run.sh all SECONDS" >&2
    echo "targets: $(cd fuzz/afl/src/bin && ls -- *.rs | sed 's/\.rs$//' | tr '\n' ' ')" >&2
    exit 2
}
[ $# -ge 1 ] || usage
which_target=$1
seconds=${2:-600}
[[ $seconds =~ ^[0-9]+$ ]] || usage
mapfile -t targets < <(cd fuzz/afl/src/bin && ls -- *.rs | sed 's/\.rs$//')
if [ "$which_target" = all ]; then
    [ $# -eq 2 ] || usage
    chosen=("${targets[@]}")
    per_target=$((seconds / ${#chosen[@]}))
    [ "$per_target" -ge 10 ] || per_target=10
else
    [ -f "fuzz/afl/src/bin/$which_target.rs" ] || usage
    chosen=("$which_target")
    per_target=$seconds
fi

export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$root/fuzz/afl/target}
if ! command -v cargo-afl >/dev/null 2>&1; then
    cargo install cargo-afl --locked
fi
# AFL++ is built once per rustc; a second `config --build` says so and fails.
config_log=$(mktemp)
if ! cargo afl config --build >"$config_log" 2>&1; then
    if ! grep -q "already built" "$config_log"; then
        cat "$config_log" >&2
        exit 1
    fi
fi
rm -f "$config_log"
(cd fuzz/afl && cargo afl build --release)
binaries=$CARGO_TARGET_DIR/release

export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_NO_AFFINITY=1

stat_of() { # stat_of FILE KEY
    sed -n "s/^$2 *: *//p" "$1"
}

summary=()
for target in "${chosen[@]}"; do
    out=fuzz/out/$target
    rm -rf "$out/seeds" "$out/afl"
    mkdir -p "$out/seeds" "$out/crashes"
    for file in "fuzz/corpus/$target"/* "fuzz/regressions/$target"/*; do
        [ -f "$file" ] || continue
        name=$(basename "$file")
        case $name in
            *.gz) gunzip -c "$file" >"$out/seeds/${name%.gz}" ;;
            *) cp "$file" "$out/seeds/$name" ;;
        esac
    done
    timeout_args=()
    case $target in
        image | repair | sim) timeout_args=(-t "${FUZZ_TIMEOUT_MS:-5000}") ;;
        *) [ -z "${FUZZ_TIMEOUT_MS:-}" ] || timeout_args=(-t "$FUZZ_TIMEOUT_MS") ;;
    esac
    echo "fuzz/run.sh: $target for $per_target s (log: $out/afl.log)"
    cargo afl fuzz -i "$out/seeds" -o "$out/afl" -V "$per_target" "${timeout_args[@]}" \
        -- "$binaries/$target" >"$out/afl.log" 2>&1 || {
        echo "fuzz/run.sh: afl-fuzz failed for $target; the end of $out/afl.log:" >&2
        tail -n 20 "$out/afl.log" >&2
        exit 1
    }
    stats=$out/afl/default/fuzzer_stats
    executions=$(stat_of "$stats" execs_done)
    run_time=$(stat_of "$stats" run_time)
    per_second=$(awk -v e="$executions" -v t="$run_time" 'BEGIN { printf "%.0f", (t > 0 ? e / t : 0) }')
    corpus=$(stat_of "$stats" corpus_count)
    crashes=$(stat_of "$stats" saved_crashes)
    hangs=$(stat_of "$stats" saved_hangs)
    for crash in "$out/afl/default/crashes"/id*; do
        [ -f "$crash" ] && cp "$crash" "$out/crashes/"
    done
    line=$(printf "%-20s %12s execs %8s/s %6s in queue %4s crashes %4s hangs" \
        "$target" "$executions" "$per_second" "$corpus" "$crashes" "$hangs")
    echo "$line"
    summary+=("$line")
done
echo
printf "%s\n" "${summary[@]}"
