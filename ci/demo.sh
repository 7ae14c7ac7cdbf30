#!/usr/bin/env bash
# The main job: build lds, format a 1 GiB image file, use it as a key-value store, inspect it.
set -euo pipefail
# Long listings are cut with `sed -n 1,Np`, which reads all its input: `head` would end lds
# with SIGPIPE, which pipefail turns into a failure whenever the listing outgrows the cut.
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)"; exit 1; }
cargo build --release --quiet -p lds-cli
lds=target/release/lds
image=${LDS_DEMO_IMAGE:-/tmp/lds-demo.img}
rm -f "$image" "$image.lds-undo"
echo "== lds mkfs --dry-run --size 1GiB $image"
"$lds" mkfs --dry-run --size 1GiB "$image"
echo "== lds mkfs --size 1GiB $image"
"$lds" mkfs --size 1GiB --name demo "$image"
echo "== lds dump $image label --json"
"$lds" dump "$image" label --json
echo "== lds dump $image version-log"
"$lds" dump "$image" version-log
echo "== lds dump $image tree"
"$lds" dump "$image" tree
echo "== lds mkfs $image (again: refused, the image holds a volume)"
if "$lds" mkfs "$image"; then echo "mkfs should have refused"; exit 1; fi
echo "== use it: put (one synced), get, delete, scan, load, recover"
"$lds" put "$image" user:1 alice --sync
"$lds" put "$image" user:2 bob
"$lds" put "$image" user:3 carol
"$lds" delete "$image" user:2
"$lds" get "$image" user:1
"$lds" scan "$image" --prefix user: --json
seq 1 10000 | awk '{printf "key%06d\tvalue-%d\n", $1, $1}' | "$lds" load "$image" --format tsv
"$lds" get "$image" key004242 user:3
"$lds" recover "$image"
"$lds" dump "$image" tree | sed -n 1,4p
echo "== lds fsck --deep $image (0: clean)"
"$lds" fsck --deep "$image"
echo "== damage the primary label; fsck finds it, repair -n reports, repair -y fixes it (undo file first), lds undo puts the damage back"
dd if=/dev/zero of="$image" bs=4096 count=1 conv=notrunc status=none
if "$lds" fsck "$image"; then echo "fsck should have found the damage"; exit 1; fi
"$lds" repair -n "$image" || [ $? -eq 4 ]
rm -f "$image.lds-undo"
"$lds" repair -y "$image" || [ $? -eq 1 ]
"$lds" fsck "$image"
"$lds" undo "$image.lds-undo" "$image"
if "$lds" fsck "$image"; then echo "undo should have restored the damage"; exit 1; fi
echo "== lds salvage: copy every readable key to a new volume (for when repair cannot rebuild in place)"
rm -f /tmp/lds-demo-salvaged.img
"$lds" salvage "$image" --output /tmp/lds-demo-salvaged.img
"$lds" fsck /tmp/lds-demo-salvaged.img
[ "$("$lds" scan /tmp/lds-demo-salvaged.img | wc -l)" -eq 10002 ] || { echo "salvage lost keys"; exit 1; }
rm -f "$image.lds-undo" /tmp/lds-demo-salvaged.img
"$lds" repair -y --no-undo "$image" || [ $? -eq 1 ]
echo "== key-value separation (feature value_chunks, since format 1.4): large values in value chunks, pointers in the tree"
kv=/tmp/lds-demo-kv.img
rm -f "$kv"
"$lds" mkfs --value-chunks --size 256MiB --name demo-kv "$kv"
# Values of 1 to 17 KiB, then every other key overwritten (garbage for the collector).
values() { awk -v m="$1" -v b="$2" '{ n = b + ($1 * m) % 16000; s = $1 "-"; while (length(s) < n) s = s s; printf "big%06d\t%s\n", $1, substr(s, 1, n) }'; }
seq 1 3000 | values 37 1024 | "$lds" load "$kv" --format tsv --technique kv-separation
seq 1 2 3000 | values 53 2048 | "$lds" load "$kv" --format tsv --technique kv-separation
"$lds" fsck --deep "$kv"
"$lds" dump "$kv" value-chunks | sed -n 1,8p
[ "$("$lds" scan "$kv" | wc -l)" -eq 3000 ] || { echo "kv-separation lost keys"; exit 1; }
rm -f "$kv"
echo "== lds crashtest --workload basic (every crash state of a small workload, recovered and checked)"
"$lds" crashtest --workload basic
echo "== lds bench: 100,000 keys of db_bench's workloads on a fresh 1 GiB image"
rm -f /tmp/lds-demo-bench.img
"$lds" bench --size 1GiB --num 100000 --sync-ops 500 \
  --benchmarks fillseq,fillrandom,readrandom,seekrandom,readseq,fillsync /tmp/lds-demo-bench.img
rm -f /tmp/lds-demo-bench.img
echo "== a golden image with chunks in three levels (fixtures/d_versions)"
zcat fixtures/d_versions/image.gz > /tmp/lds-demo-versions.img
"$lds" dump /tmp/lds-demo-versions.img tree
"$lds" dump /tmp/lds-demo-versions.img chunk 9 --entries
echo "demo done: $image"
