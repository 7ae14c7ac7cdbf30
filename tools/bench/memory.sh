#!/bin/sh
# Peak memory (maximum resident set) and wall time of every lds tool that walks the version
# log, on a volume whose version log is full of small valid objects (docs/tools.md, "Memory").
#
#   tools/bench/memory.sh [LDS [IMAGE]]
#
# LDS is the binary to measure (default target/release/lds). Without IMAGE the volume is
# generated: a 64 MiB version log with about 599,000 delta versions
# (cargo run --release -p lds-fixtures --example many_objects). Needs GNU time
# (/usr/bin/time, Debian package `time`) and awk. Prints one line per command: peak RSS in MiB, wall
# seconds, exit code, the command. Standard output of each command is discarded; the
# writing open (put) runs on a copy of the image.
set -eu

lds=${1:-target/release/lds}
image=${2:-}
work=$(mktemp -d "${TMPDIR:-/tmp}/lds-memory.XXXXXX")
trap 'rm -rf "$work"' EXIT

if [ -z "$image" ]; then
    image=$work/many.img
    cargo run --quiet --release -p lds-fixtures --example many_objects -- "$image" >&2
fi

run() {
    # GNU time writes its report to the file named by -o (after a note when a signal killed
    # the command: the last line is the report); the command's own output goes away.
    /usr/bin/time -f '%M %e %x' -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || true
    tail -n 1 "$work/time" | awk -v command="$*" '{ printf "%8.1f MiB %8.2f s  exit %-3s %s\n", $1 / 1024, $2, $3, command }'
}

run "$lds" dump "$image" label
run "$lds" dump "$image" volume
run "$lds" dump "$image" volume --json
run "$lds" dump "$image" version-log
run "$lds" dump "$image" version-log --json
run "$lds" dump "$image" tree
run "$lds" dump "$image" slots
run "$lds" fsck "$image"
run "$lds" fsck --deep "$image"
run "$lds" repair -n "$image"
run "$lds" salvage --export ndjson "$image"
rm -f "$work/metadump.img"
run "$lds" metadump "$image" "$work/metadump.img"
run "$lds" get "$image" key00001
run "$lds" scan "$image"
cp "$image" "$work/copy.img"
run "$lds" put "$work/copy.img" many-objects-key value
