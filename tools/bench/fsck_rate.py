#!/usr/bin/env python3
"""How fast `lds fsck --deep` verifies a volume, against reading the same bytes.

Reads, with cold caches, the slots of every chunk of every instance's tree (what fsck's
chunk pass reads) in slot order with O_DIRECT, 4 MiB at a time, one read in flight: the
sequential read speed of the device over those slots. Then runs `lds fsck --deep --json`
with cold caches and reports its `bytes_verified / seconds` beside it, and their ratio.
Needs root (drop_caches) and a volume nobody writes.

    python3 tools/bench/fsck_rate.py --lds target/release/lds /dev/loop0 [--json out.json]
"""
import argparse
import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path


def drop_caches():
    subprocess.run(["sync"], check=False)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def dump(lds: str, device: str, *what: str) -> dict:
    result = subprocess.run([lds, "dump", device, *what, "--json"], text=True, capture_output=True)
    if result.returncode != 0:
        sys.exit(f"lds dump {device} {' '.join(what)}: {result.stderr.strip()}")
    return json.loads(result.stdout)


def chunk_slots(lds: str, device: str) -> tuple[list[int], dict]:
    """The slots of every chunk of every instance's tree, in slot order, and the geometry."""
    geometry = dump(lds, device, "label")["primary"]["geometry"]
    slots = set()
    for instance in range(geometry["instance_count"]):
        tree = dump(lds, device, "tree", "--instance", str(instance))
        for level in tree["levels"]:
            for chunk in level["chunks"]:
                slots.update(sub["slot"] for sub in chunk["sub_chunks"])
    return sorted(slots), geometry


def read_slots(device: str, slots: list[int], geometry: dict) -> tuple[int, float]:
    """Reads the slots with O_DIRECT; returns the bytes read and the seconds it took."""
    size = geometry["slot_size"]
    piece = min(size, 4 << 20)
    buffer = mmap.mmap(-1, piece)  # page-aligned, as O_DIRECT wants
    fd = os.open(device, os.O_RDONLY | os.O_DIRECT)
    total = 0
    try:
        started = time.perf_counter()
        for slot in slots:
            offset = geometry["ofs_slot_area"] + slot * size
            for at in range(0, size, piece):
                total += os.preadv(fd, [buffer], offset + at)
        seconds = time.perf_counter() - started
    finally:
        os.close(fd)
    return total, seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lds", required=True)
    parser.add_argument("--json", help="write the measurement here")
    parser.add_argument("--runs", type=int, default=2, help="alternate the two reads this many times; medians")
    parser.add_argument("device")
    args = parser.parse_args()
    slots, geometry = chunk_slots(args.lds, args.device)
    if not slots:
        sys.exit(f"{args.device}: the volume holds no chunks")
    reads, checks = [], []
    for _ in range(args.runs):
        drop_caches()
        total, seconds = read_slots(args.device, slots, geometry)
        reads.append(total / seconds / 1e6)
        drop_caches()
        result = subprocess.run([args.lds, "fsck", "--deep", "--json", args.device], text=True, capture_output=True)
        report = json.loads(result.stdout)
        if report["counts"]["error"]:
            sys.exit(f"fsck --deep found errors on {args.device}: {result.stdout}")
        summary = report["summary"]
        checks.append(summary["bytes_verified"] / summary["seconds"] / 1e6)
    median = lambda values: sorted(values)[len(values) // 2]
    document = {
        "device": args.device,
        "slots": len(slots),
        "slot_bytes": len(slots) * geometry["slot_size"],
        "read_mb_per_sec": median(reads),
        "fsck_deep_mb_per_sec": median(checks),
        "ratio": median(checks) / median(reads),
        "runs": {"read_mb_per_sec": reads, "fsck_deep_mb_per_sec": checks},
    }
    print(f"{len(slots)} slots: O_DIRECT read {document['read_mb_per_sec']:.0f} MB/s, "
          f"fsck --deep {document['fsck_deep_mb_per_sec']:.0f} MB/s ({100 * document['ratio']:.0f}%)")
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
