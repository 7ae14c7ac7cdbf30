#!/bin/sh
# Peak memory (maximum resident set) and time of every lds tool that walks the version log, on
# a volume whose version log is full of small valid objects (docs/tools.md, "Memory").
#
#   tools/bench/memory.sh [LDS [IMAGE | LOG_MIB]]
#
# LDS is the binary to measure (default target/release/lds). Without IMAGE the volume is
# generated (cargo run --release -p lds-fixtures --example many_objects): a version log of
# LOG_MIB MiB (default 64: 599,071 delta versions; 32 gives half as many). Needs GNU time
# (/usr/bin/time, Debian package `time`) and awk. Prints one line per command: peak RSS in MiB,
# wall seconds, CPU seconds (user and system: on a shared machine the steadier figure for
# comparing sizes), exit code, the command. Standard output of each command is discarded; the
# writing open (put) runs on a copy of the image.
set -eu

lds=${1:-target/release/lds}
image=${2:-64}
work=$(mktemp -d "${TMPDIR:-/tmp}/lds-memory.XXXXXX")
trap 'rm -rf "$work"' EXIT

case $image in
*[!0-9]*) ;;
*)
    log_mib=$image
    image=$work/many.img
    cargo run --quiet --release -p lds-fixtures --example many_objects -- "$image" "$log_mib" >&2
    ;;
esac

run() {
    # GNU time writes its report to the file named by -o (after a note when a signal killed
    # the command: the last line is the report); the command's own output goes away.
    /usr/bin/time -f '%M %e %U %S %x' -o "$work/time" "$@" >/dev/null 2>"$work/stderr" || true
    tail -n 1 "$work/time" | awk -v command="$*" \
        '{ printf "%8.1f MiB %7.2f s wall %7.2f s cpu  exit %-3s %s\n", $1 / 1024, $2, $3 + $4, $5, command }'
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
