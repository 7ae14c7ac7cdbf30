#!/usr/bin/env python3
"""How fast `lds fsck --deep` reads a volume, against the device's sequential read speed.

Reads, with cold caches, the slots of every chunk of every instance's tree (what fsck's
chunk pass reads) in slot order with O_DIRECT, 4 MiB at a time, one read in flight: the
sequential read speed of the device over those slots. Then runs `lds fsck --deep --json`
with cold caches and reports the rate it read at (the bytes the device read during it, from
/sys/class/block/NAME/stat, over its `seconds`: labels, both logs, the chunks' slots, the
free slots' footers) and the rate it verified chunks at (`bytes_verified / seconds`), and
the ratio of its read rate to the sequential one. Needs root (drop_caches), a block device
and a volume nobody writes.

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


def sectors_read(device: str) -> int:
    """Sectors (512 bytes) the block device has read, from its stat file."""
    name = Path(os.path.realpath(device)).name
    return int(Path(f"/sys/class/block/{name}/stat").read_text().split()[2])


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
    reads, fsck_reads, checks, fsck_bytes = [], [], [], []
    for _ in range(args.runs):
        drop_caches()
        total, seconds = read_slots(args.device, slots, geometry)
        reads.append(total / seconds / 1e6)
        drop_caches()
        before = sectors_read(args.device)
        result = subprocess.run([args.lds, "fsck", "--deep", "--json", args.device], text=True, capture_output=True)
        read = (sectors_read(args.device) - before) * 512
        report = json.loads(result.stdout)
        if report["counts"]["error"]:
            sys.exit(f"fsck --deep found errors on {args.device}: {result.stdout}")
        summary = report["summary"]
        fsck_bytes.append(read)
        fsck_reads.append(read / summary["seconds"] / 1e6)
        checks.append(summary["bytes_verified"] / summary["seconds"] / 1e6)
    median = lambda values: sorted(values)[len(values) // 2]
    document = {
        "device": args.device,
        "slots": len(slots),
        "slot_bytes": len(slots) * geometry["slot_size"],
        "read_mb_per_sec": median(reads),
        "fsck_bytes_read": median(fsck_bytes),
        "fsck_read_mb_per_sec": median(fsck_reads),
        "fsck_verify_mb_per_sec": median(checks),
        "ratio": median(fsck_reads) / median(reads),
        "runs": {"read_mb_per_sec": reads, "fsck_read_mb_per_sec": fsck_reads, "fsck_verify_mb_per_sec": checks},
    }
    print(f"{len(slots)} slots: O_DIRECT read {document['read_mb_per_sec']:.0f} MB/s; fsck --deep read "
          f"{document['fsck_bytes_read'] / 1e6:.0f} MB at {document['fsck_read_mb_per_sec']:.0f} MB/s "
          f"({100 * document['ratio']:.0f}%), verified chunks at {document['fsck_verify_mb_per_sec']:.0f} MB/s")
    if args.json:
        Path(args.json).write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
