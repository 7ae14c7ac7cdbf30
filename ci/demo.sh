#!/usr/bin/env bash
# The main job: build lds, format a 1 GiB image file, and inspect it end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo is required (https://rustup.rs)"; exit 1; }
cargo build --release --quiet -p lds-cli
lds=target/release/lds
image=${LDS_DEMO_IMAGE:-/tmp/lds-demo.img}
rm -f "$image"
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
echo "== a golden image with chunks in three levels (fixtures/d_versions)"
zcat fixtures/d_versions/image.gz > /tmp/lds-demo-versions.img
"$lds" dump /tmp/lds-demo-versions.img tree
"$lds" dump /tmp/lds-demo-versions.img chunk 9 --entries
echo "demo done: $image"
