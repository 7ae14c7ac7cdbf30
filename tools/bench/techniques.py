#!/usr/bin/env python3
"""Runs the engine-technique comparisons of BENCHMARKS.md and writes their section to
docs/bench/techniques.md (report.py includes it):

- key-value separation: fillrandom, overwrite and readrandom with values of 1, 4 and 16 KiB,
  LDS with and without `--technique kv-separation` on a raw loop device, against RocksDB with
  and without BlobDB (`enable_blob_files`, min_blob_size 1 KiB, blob GC on) and fjall with and
  without its key-value separation (threshold 1 KiB), each on ext4 on a loop device of the
  same size: ops/s, write amplification, space amplification after the overwrite (bytes
  occupied over the bytes of live keys and values), peak memory;
- level pinning: readrandom with a block cache much smaller than the data, LDS with and
  without `--technique level-pinning`.

Needs root (loop devices, mkfs, mount); every loop device it attaches is detached and every
mount unmounted on the way out, also on failure. Usage:

    sudo python3 tools/bench/techniques.py --lds PATH/lds [--data 512MiB] [--out DIR]

`lds` must be built with `--features peers` (tools/bench/run.sh builds it)."""

import argparse
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import commit, measured_on  # noqa: E402
from run import Loop, Mount, parse_size, run_bench  # noqa: E402

VALUE_SIZES = [1024, 4096, 16384]
# Large values: only the separating engines (LDS keeps values above a quarter slot, 1 MiB,
# only in value chunks).
LARGE_SIZES = [256 << 10, 4 << 20]
KEY_BYTES = 16


def bench(lds, engine, path, stat, size, num, value, out, label, technique=None, extra=()):
    command = [
        lds, "bench", "--engine", engine, "--benchmarks", "fillrandom,overwrite,readrandom", "--num", str(num),
        "--value-min", str(value), "--value-max", str(value), "--size", size, "--stat-device", stat,
        "--json", "--force", *extra,
    ]
    if technique:
        command += ["--technique", technique]
    command.append(str(path))
    return run_bench(command, engine, out, label, {"label": label, "value_bytes": value, "num": num})


def pick(document, workload):
    return next((r for r in document.get("results", []) if r["benchmark"] == workload), None)


def size_name(value):
    return f"{value >> 20} MiB" if value >= 1 << 20 else f"{value >> 10} KiB"


def fmt(value, digits=0):
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lds", required=True)
    parser.add_argument("--workdir", default="/var/tmp/lds-bench")
    parser.add_argument("--out", default="docs/bench/techniques")
    parser.add_argument("--size", default="4GiB", help="size of every loop device")
    parser.add_argument("--data", default="512MiB", help="bytes of values each fill writes")
    parser.add_argument("--pinning-num", type=int, default=1_000_000)
    parser.add_argument("--markdown", default="docs/bench/techniques.md")
    args = parser.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size_bytes = parse_size(args.size)
    data = parse_size(args.data)
    runs = {}
    for value in VALUE_SIZES + LARGE_SIZES:
        num = data // value
        large = value in LARGE_SIZES
        with ExitStack() as stack:
            loop = Loop(work / "raw.img", size_bytes)
            stack.callback(loop.close)
            for technique in (["kv-separation"] if large else [None, "kv-separation"]):
                label = f"lds-{technique or 'inline'}-{value}"
                runs[label] = bench(args.lds, "lds", Path(loop.device), loop.name, args.size, num, value, out, label,
                                    technique)
        with ExitStack() as stack:
            loop = Loop(work / "ext4.img", size_bytes)
            stack.callback(loop.close)
            mount = Mount(loop, "ext4", work / "mnt-ext4")
            stack.callback(mount.close)
            for peer in (["rocksdb-blob", "fjall-blob"] if large else ["rocksdb", "rocksdb-blob", "fjall", "fjall-blob"]):
                label = f"{peer}-{value}"
                runs[label] = bench(args.lds, peer, mount.point / peer, loop.name, args.size, num, value, out, label)
                subprocess.run(["rm", "-rf", str(mount.point / peer)], check=False)
    # Level pinning: 100-byte values, a 1 MiB block cache and a 256 KiB tail cache, far
    # below the data (about 120 MB with 1,000,000 keys).
    pinning = {}
    with ExitStack() as stack:
        loop = Loop(work / "raw.img", size_bytes)
        stack.callback(loop.close)
        for technique in [None, "level-pinning"]:
            label = f"lds-{technique or 'unpinned'}-readrandom"
            command = [
                args.lds, "bench", "--engine", "lds", "--benchmarks", "fillrandom,readrandom",
                "--num", str(args.pinning_num), "--size", args.size, "--stat-device", loop.name,
                "--cache", "1MiB", "--lds-option", "tail_cache_bytes=262144", "--json", "--force",
            ]
            if technique:
                command += ["--technique", technique]
            command.append(loop.device)
            document = run_bench(command, "lds", out, label, {"label": label})
            pinning[technique or "off"] = document
    write_markdown(runs, pinning, Path(args.markdown), data, args.pinning_num)


def write_markdown(runs, pinning, path: Path, data, pinning_num):
    lines = []
    w = lines.append
    measured = measured_on(commit(), "tools/bench/techniques.py")
    w("## Key-value separation (technique kv-separation)\n")
    w(measured)
    w(f"Each fill writes {data >> 20} MiB of values (16-byte keys), then overwrites every key once in random "
      "order, then reads random keys. LDS on a raw loop device; RocksDB (BlobDB: `enable_blob_files`, "
      "`min_blob_size` 1 KiB, blob GC on) and fjall (kv separation at 1 KiB) on ext4 on a loop device of the same "
      "size. Write amplification: device bytes over user bytes of that benchmark. Space amplification: bytes the "
      "store occupies after the overwrite (LDS: slots in use; peers: allocated file blocks) over the bytes of "
      "live keys and values.\n")
    w("| value | engine | fillrandom ops/s | fill WA | overwrite ops/s | overwrite WA | space amp after overwrite "
      "| readrandom ops/s | peak MiB |")
    w("|---|---|---|---|---|---|---|---|---|")
    for value in VALUE_SIZES + LARGE_SIZES:
        for name in ["lds-inline", "lds-kv-separation", "rocksdb", "rocksdb-blob", "fjall", "fjall-blob"]:
            document = runs.get(f"{name}-{value}")
            if not document:
                continue
            if document.get("error"):
                w(f"| {size_name(value)} | {name} | failed: {document['error'][:80]} | | | | | | |")
                continue
            fill, over, read = (pick(document, b) for b in ["fillrandom", "overwrite", "readrandom"])
            live = document["num"] * (KEY_BYTES + value)
            space = over.get("space_bytes") if over else None
            peak = max((r.get("peak_memory_bytes") or 0) for r in document["results"]) / 2**20
            w(f"| {size_name(value)} | {name} | {fmt(fill and fill['ops_per_sec'])} "
              f"| {fmt(fill and fill.get('write_amp'), 2)} | {fmt(over and over['ops_per_sec'])} "
              f"| {fmt(over and over.get('write_amp'), 2)} | {fmt(space / live if space else None, 2)} "
              f"| {fmt(read and read['ops_per_sec'])} | {peak:,.0f} |")
    w("")
    w("Ratios, LDS with kv-separation over each:\n")
    w("| value | benchmark | over LDS inline | over RocksDB BlobDB | over fjall kv-sep | WA: LDS kv-sep vs BlobDB |")
    w("|---|---|---|---|---|---|")
    for value in VALUE_SIZES + LARGE_SIZES:
        ours = runs.get(f"lds-kv-separation-{value}")
        if not ours or ours.get("error"):
            continue
        for bench_name in ["fillrandom", "overwrite", "readrandom"]:
            mine = pick(ours, bench_name)

            def over(other):
                theirs = pick(runs.get(f"{other}-{value}", {}), bench_name)
                if not (mine and theirs and theirs["ops_per_sec"]):
                    return "-"
                return f"{mine['ops_per_sec'] / theirs['ops_per_sec']:.2f}x"
            blob = pick(runs.get(f"rocksdb-blob-{value}", {}), bench_name)
            wa = "-"
            if mine and blob and mine.get("write_amp") and blob.get("write_amp"):
                wa = f"{mine['write_amp']:.2f} vs {blob['write_amp']:.2f}"
            w(f"| {size_name(value)} | {bench_name} | {over('lds-inline')} | {over('rocksdb-blob')} "
              f"| {over('fjall-blob')} | {wa} |")
    w("")
    w("## Level pinning (technique level-pinning)\n")
    w(measured)
    w(f"{pinning_num:,} keys with values of 1 to 200 bytes, then random reads, LDS on a raw loop device with a 1 MiB block cache "
      "and a 256 KiB chunk-tail cache, far below the data; level pinning keeps the index and filter of every chunk "
      "of the upper levels in memory (within `pinned_bytes_max`), loaded at open and kept at each commit.\n")
    w("| level pinning | readrandom ops/s | p50 us | p99 us | peak MiB |")
    w("|---|---|---|---|---|")
    for key in ["off", "level-pinning"]:
        document = pinning.get(key, {})
        read = pick(document, "readrandom")
        if not read:
            w(f"| {key} | failed: {document.get('error', '')[:80]} | | | |")
            continue
        peak = (read.get("peak_memory_bytes") or 0) / 2**20
        w(f"| {'on' if key != 'off' else 'off'} | {fmt(read['ops_per_sec'])} | {fmt(read['p50_us'], 1)} "
          f"| {fmt(read['p99_us'], 1)} | {peak:,.0f} |")
    off, on = (pick(pinning.get(k, {}), "readrandom") for k in ["off", "level-pinning"])
    if off and on and off["ops_per_sec"]:
        w(f"\nLevel pinning: {on['ops_per_sec'] / off['ops_per_sec']:.1f}x the readrandom ops/s.")
    w("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
