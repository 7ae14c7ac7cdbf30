#!/usr/bin/env python3
"""Writes BENCHMARKS.md and one chart per workload from the JSON files run.py wrote."""

import argparse
import json
from pathlib import Path

from provenance import measured_on

WORKLOADS = ["fillseq", "fillrandom", "overwrite", "fillsync", "readrandom", "readseq", "seekrandom",
             "deleterandom", "ycsb-load", "ycsb-a", "ycsb-b", "ycsb-c", "ycsb-d", "ycsb-e", "ycsb-f"]
PEERS = ["rocksdb", "leveldb", "fjall", "sled", "redb"]
FILESYSTEMS = ["ext4", "xfs", "btrfs"]


def load(directory: Path):
    runs, limits = {}, {}
    for path in sorted(directory.glob("*.json")):
        document = json.loads(path.read_text())
        if path.name in ("machine.json", "recovery.json", "fsck.json"):
            continue
        if path.name.startswith("limits-"):
            limits[document["setup"]] = document["limits"]
        else:
            runs[document["setup"]] = document
    machine = json.loads((directory / "machine.json").read_text())
    return runs, limits, machine


def args_num(directory) -> str:
    """The --num of the run whose results are in `directory`, formatted."""
    try:
        return f"{json.loads((Path(directory) / 'machine.json').read_text())['args']['num']:,}"
    except (OSError, KeyError, ValueError):
        return "?"


def result(runs, setup, workload):
    for entry in runs.get(setup, {}).get("results", []):
        if entry["benchmark"] == workload:
            return entry
    return None


def fmt(value, digits=0):
    if value is None:
        return "–"
    if isinstance(value, float) and digits == 0 and value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def ratio(a, b):
    if not a or not b:
        return "–"
    return f"{a / b:.2f}x"


def chart(runs, workload, path: Path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = ["lds"] + PEERS
    fig, ax = plt.subplots(figsize=(8, 3.6), dpi=110)
    width = 0.26
    colors = {"ext4": "#4c72b0", "xfs": "#55a868", "btrfs": "#c44e52", "raw": "#222222"}
    for g, engine in enumerate(groups):
        if engine == "lds":
            bars = [("raw", result(runs, "lds-raw", workload)), ("ext4", result(runs, "lds-ext4", workload))]
        else:
            bars = [(fs, result(runs, f"{engine}-{fs}", workload)) for fs in FILESYSTEMS]
        for b, (fs, entry) in enumerate(bars):
            if entry:
                ax.bar(g + (b - 1) * width, entry["ops_per_sec"], width, color=colors[fs],
                       label=fs if g in (0, 1) else None)
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(["LDS (raw | ext4 file)"] + PEERS)
    ax.set_ylabel("ops/s")
    ax.set_title(f"{workload}: operations per second (higher is better)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    ax.legend(unique.values(), unique.keys(), fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def best_peer(runs, peer, workload, key="ops_per_sec"):
    entries = [(fs, result(runs, f"{peer}-{fs}", workload)) for fs in FILESYSTEMS]
    entries = [(fs, e) for fs, e in entries if e]
    if not entries:
        return None, None
    fs, entry = max(entries, key=lambda item: item[1][key])
    return fs, entry


SCALE_ENGINES = [("LDS raw", "lds-raw"), ("RocksDB ext4", "rocksdb-ext4"), ("LevelDB ext4", "leveldb-ext4"),
                 ("RocksDB xfs", "rocksdb-xfs"), ("LevelDB xfs", "leveldb-xfs")]


def scale(runs, directory: Path, charts: Path, w):
    """The scale section: the same workloads at the larger --num of a second run, beside the
    main run, for LDS and the peers both ran: ops/s, write amplification and peak memory, a
    table and a chart."""
    big, _, machine = load(directory)
    a = machine["args"]
    engines = [(name, setup) for name, setup in SCALE_ENGINES if setup in big and setup in runs]
    workloads = [wl for wl in WORKLOADS if any(result(big, setup, wl) for _, setup in engines)]
    if not engines or not workloads:
        return
    w(f"## Scale: {a['num']:,} keys\n")
    w(measured_on(machine.get("commit"), f"the scale run, {directory}"))
    w(f"The same workloads with --num {a['num']:,} on {a['size']} devices (`python3 tools/bench/run.py --num "
      f"{a['num']} --size {a['size']} --peers {a['peers']} --filesystems {a['filesystems']}`, results in "
      f"{directory}), beside the main run. One run per cell.\n")
    w("| workload | engine | ops/s main | ops/s scale | scale / main | WA main -> scale | peak MiB main -> scale |")
    w("|---|---|---|---|---|---|---|")
    for workload in workloads:
        for name, setup in engines:
            small, large = result(runs, setup, workload), result(big, setup, workload)
            if not small or not large:
                continue
            wa = f"{fmt(small.get('write_amp'), 2)} -> {fmt(large.get('write_amp'), 2)}" if large.get("write_amp") else "–"
            peak = lambda e: e.get("peak_memory_bytes") and e["peak_memory_bytes"] / 2**20  # noqa: E731
            w(f"| {workload} | {name} | {fmt(small['ops_per_sec'])} | {fmt(large['ops_per_sec'])} "
              f"| {ratio(large['ops_per_sec'], small['ops_per_sec'])} | {wa} | {fmt(peak(small))} -> {fmt(peak(large))} |")
    w("")
    w("LDS over the best peer at this scale:\n")
    w("| workload | LDS raw ops/s | best peer ops/s | LDS over it |")
    w("|---|---|---|---|")
    for workload in workloads:
        lds = result(big, "lds-raw", workload)
        peers = [(name, result(big, setup, workload)) for name, setup in engines if setup != "lds-raw"]
        peers = [(name, e) for name, e in peers if e]
        if lds and peers:
            name, best = max(peers, key=lambda item: item[1]["ops_per_sec"])
            w(f"| {workload} | {fmt(lds['ops_per_sec'])} | {name} {fmt(best['ops_per_sec'])} "
              f"| {ratio(lds['ops_per_sec'], best['ops_per_sec'])} |")
    w("")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(3, 1, figsize=(10, 9), dpi=100)
    metrics = [("ops_per_sec", "ops/s"), ("write_amp", "write amplification"), ("peak_memory_bytes", "peak MiB")]
    width = 0.8 / (2 * len(engines))
    colors = ["#222222", "#4c72b0", "#55a868", "#8172b2", "#c44e52"]
    for ax, (key, label) in zip(axes, metrics):
        for e, (name, setup) in enumerate(engines):
            for size, (source, hatch) in enumerate([(runs, None), (big, "//")]):
                values = []
                for workload in workloads:
                    entry = result(source, setup, workload)
                    value = entry.get(key) if entry else None
                    if value and key == "peak_memory_bytes":
                        value /= 2**20
                    values.append(value or 0)
                x = [i + (2 * e + size) * width - 0.4 for i in range(len(workloads))]
                ax.bar(x, values, width, color=colors[e % len(colors)], hatch=hatch,
                       label=f"{name} ({'main' if size == 0 else a['num']})")
        ax.set_ylabel(label + (" (log scale)" if key != "peak_memory_bytes" else ""))
        if key != "peak_memory_bytes":
            ax.set_yscale("log")
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels(workloads, rotation=30, fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize=6, ncol=2)
    axes[0].set_title("main run (solid) and scale run (hatched)")
    fig.tight_layout()
    fig.savefig(charts / "scale.png")
    plt.close(fig)
    w("![ops/s, write amplification and peak memory at both sizes](docs/bench/scale.png)\n")


def device_bound(directory: Path, w):
    """The table of a device-bound run: LDS on the raw device against the best peer on its
    best file system, each workload, with both write amplifications."""
    runs, limits, machine = load(directory)
    limit = machine.get("throttle", {})
    a = machine["args"]
    w("## Device-bound run\n")
    w(measured_on(machine.get("commit"), f"the device-bound run, {directory}"))
    w(f"The same comparison with the disk under the loop devices throttled by the root blkio cgroup to "
      f"{limit.get('mb_per_sec', '?')} MB/s and {limit.get('iops', '?')} IOPS each way "
      f"(`sudo bash tools/bench/run.sh --throttle {limit.get('mb_per_sec', '?')},{limit.get('iops', '?')} "
      f"--peers {a['peers']} --filesystems {a['filesystems']}`, results in {directory}): every engine's writes, "
      "file-system writeback included, pass the limit as I/O of the loop devices. One run per cell.\n")
    peers = [p for p in a["peers"].split(",") if p]
    w("| workload | LDS raw ops/s | best peer (fs) ops/s | LDS over it | LDS WA | its WA |")
    w("|---|---|---|---|---|---|")
    for workload in WORKLOADS:
        lds = result(runs, "lds-raw", workload)
        best = None
        for peer in peers:
            fs, entry = best_peer(runs, peer, workload)
            if entry and (best is None or entry["ops_per_sec"] > best[2]["ops_per_sec"]):
                best = (peer, fs, entry)
        if not lds or not best:
            continue
        peer, fs, entry = best
        w(f"| {workload} | {fmt(lds['ops_per_sec'])} | {peer} ({fs}) {fmt(entry['ops_per_sec'])} "
          f"| {ratio(lds['ops_per_sec'], entry['ops_per_sec'])} | {fmt(lds.get('write_amp'), 2)} "
          f"| {fmt(entry.get('write_amp'), 2)} |")
    w("")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--results", required=True)
    parser.add_argument("--output", default="BENCHMARKS.md")
    parser.add_argument("--charts", default="docs/bench")
    parser.add_argument("--command", default="sudo bash tools/bench/run.sh")
    parser.add_argument("--throttled-results", default="docs/bench/results-throttled",
                        help="the results of a device-bound run (run.py --throttle), if any")
    parser.add_argument("--scale-results", default="docs/bench/results-scale",
                        help="the results of a run at a larger --num, if any")
    args = parser.parse_args()
    runs, limits, machine = load(Path(args.results))
    charts = Path(args.charts)
    charts.mkdir(parents=True, exist_ok=True)
    a = machine["args"]
    lines = []
    w = lines.append
    w("# Benchmarks\n")
    w("Generated by `" + args.command + "` (tools/bench/run.py, then tools/bench/report.py); do not edit by hand. "
      "run.sh measures the main run again, every section from Method to Targets (docs/bench/results), or with "
      "`--throttle` the device-bound run (docs/bench/results-throttled); report.py then rewrites the whole file from "
      "the results stored in docs/bench. The other sections come from their own commands and keep their numbers "
      "until those run again: the scale run (`tools/bench/run.py --out docs/bench/results-scale`), the technique "
      "tables (`tools/bench/techniques.py`, docs/bench/techniques.md) and the ablations (`tools/bench/ablation.py`, "
      "docs/bench/ablation.md and ablation-device-bound.md). Each section names the commit it was measured on; "
      "numbers measured on different commits are not comparable cell by cell.\n")
    main_run = measured_on(machine.get("commit"), f"the main run, {args.results}")
    w("## Method\n")
    w(main_run)
    w(f"- Machine: {machine['cpus']} cores ({machine['cpu_model']}), {machine['memory_gib']} GiB, Linux {machine['kernel']}; "
      f"image files on {machine['backing_fs']}.")
    w(f"- Every store sits on its own loop device (`losetup --direct-io=on`) over an image file of {a['size']}: "
      "LDS on the raw loop device, and LDS on a pre-allocated image file on ext4; each peer on ext4, xfs and btrfs.")
    w(f"- One generator drives every engine (`lds bench --engine NAME`): 16-byte keys, values uniform 1 to 200 bytes, "
      f"--num {a['num']:,} for the fills, overwrite and reads, {a['sync_ops']:,} synced puts for fillsync, "
      f"{a['num']:,} YCSB records and {a['ycsb_ops']:,} operations per YCSB workload (zipfian 0.99, D latest). "
      "Each fill starts from an empty store; the other workloads run on what the previous fill left, in the order of the tables.")
    w("- Same settings for all: 4 MiB write buffer, 8 MiB block cache, 4 MiB SST target (the LDS slot), level 1 of 40 MiB "
      "and x10 per level, 10 bloom bits per key, no compression, level-0 merges from 4 files or chunks. LevelDB's C API "
      "sets neither the SST target nor the level sizes: it keeps its own 2 MiB files and 10 MiB level 1. LDS and RocksDB "
      "size their levels from the last level up (dynamic level sizes, the default of both): level 0 merges into the "
      "highest level the data calls for, and 40 MiB is the least a level may hold. Data blocks are each engine's default: 2 KiB for LDS "
      "(every block LDS reads is copied and checksummed whole), 4 KiB for RocksDB and LevelDB (db_bench's), fjall's own. "
      "Durable writes: LDS `sync: true`, RocksDB and LevelDB "
      "`sync=true`, fjall `persist(SyncAll)`, sled `flush()`, redb a commit with `Durability::Immediate` "
      "(other redb commits use `Durability::None`).")
    w("- Bytes written and flushes are the loop device's own counters (/sys/block/loopN/stat), so file-system "
      "journaling counts. After a workload that wrote, the bench waits (untimed) until the device is quiet, under "
      "1 MiB written in 0.5 s with the page cache written back (at most 120 s): the compaction each engine still owes "
      "for the writes counts with them, in bytes and in CPU. CPU is user plus system time of the whole process per "
      "million operations; peak memory is the process's VmHWM, reset before each workload.")
    w("- Page cache dropped before each run. One run per cell: differences under about 10% are noise on this machine.\n")

    w("## Device limits\n")
    w(main_run)
    w("| where | O_DIRECT sequential write (4 MiB writes) | 4 KiB direct write + flush, in place p50 / p99 | appending p50 / p99 |")
    w("|---|---|---|---|")
    for setup, lim in sorted(limits.items()):
        w(f"| {setup} | {lim['sequential_mb_per_sec']:.0f} MB/s | {lim['overwrite_flush_p50_us']:.0f} / {lim['overwrite_flush_p99_us']:.0f} us "
          f"| {lim['append_flush_p50_us']:.0f} / {lim['append_flush_p99_us']:.0f} us |")
    w("")

    w("## Throughput: LDS over each peer\n")
    w(main_run)
    w("Ratio of LDS on the raw device to the peer on each file system (ops/s; above 1.00x LDS is faster). "
      "Charts: `docs/bench/WORKLOAD.png`.\n")
    w("| workload | LDS raw ops/s | LDS ext4-file ops/s | " + " | ".join(f"{p} (ext4 / xfs / btrfs)" for p in PEERS) + " |")
    w("|---|---|---|" + "---|" * len(PEERS))
    for workload in WORKLOADS:
        lds = result(runs, "lds-raw", workload)
        if not lds:
            continue
        lds_file = result(runs, "lds-ext4", workload)
        cells = []
        for peer in PEERS:
            cells.append(" / ".join(ratio(lds["ops_per_sec"], (result(runs, f"{peer}-{fs}", workload) or {}).get("ops_per_sec"))
                                    for fs in FILESYSTEMS))
        w(f"| {workload} | {fmt(lds['ops_per_sec'])} | {fmt(lds_file['ops_per_sec']) if lds_file else '–'} | " + " | ".join(cells) + " |")
        chart(runs, workload, charts / f"{workload}.png")
    w("")

    w("## Absolute throughput (ops/s)\n")
    w(main_run)
    setups = ["lds-raw", "lds-ext4"] + [f"{p}-{fs}" for p in PEERS for fs in FILESYSTEMS]
    setups = [s for s in setups if s in runs]
    w("| workload | " + " | ".join(setups) + " |")
    w("|---|" + "---|" * len(setups))
    for workload in WORKLOADS:
        w(f"| {workload} | " + " | ".join(fmt((result(runs, s, workload) or {}).get("ops_per_sec")) for s in setups) + " |")
    w("")

    for title, key, digits in [("CPU seconds per million operations (lower is better)", "cpu_s_per_mop", 2),
                               ("Write amplification: device bytes over user bytes (lower is better)", "write_amp", 2),
                               ("Latency p50 / p99 / p99.9 in microseconds", None, 1),
                               ("Device flushes per operation", "flushes_per_op", 3),
                               ("Peak memory, MiB", "peak_memory_bytes", 0),
                               ("Peak anonymous memory, MiB", "peak_anon_bytes", 0)]:
        if key == "peak_anon_bytes":
            if not any((result(runs, s, wl) or {}).get(key) for s in setups for wl in WORKLOADS):
                continue
            w(f"## {title}\n")
            w(main_run)
            w("The anonymous part of the resident set (RssAnon, sampled every 10 ms): heap and stacks, "
              "without the page-cache pages a store reads through a mapping (LDS maps its device, LevelDB "
              "its table files). An engine that reads with pread (RocksDB, fjall) uses the page cache as "
              "much, but its pages are not in its resident set.\n")
        else:
            w(f"## {title}\n")
            w(main_run)
        w("| workload | " + " | ".join(setups) + " |")
        w("|---|" + "---|" * len(setups))
        for workload in WORKLOADS:
            cells = []
            for s in setups:
                entry = result(runs, s, workload)
                if not entry:
                    cells.append("–")
                elif key is None:
                    cells.append(f"{entry['p50_us']:.1f} / {entry['p99_us']:.0f} / {entry['p999_us']:.0f}")
                elif key in ("peak_memory_bytes", "peak_anon_bytes"):
                    cells.append(fmt((entry.get(key) or 0) / 2**20))
                else:
                    cells.append(fmt(entry.get(key), digits))
            w(f"| {workload} | " + " | ".join(cells) + " |")
        w("")

    w("## Targets\n")
    w(main_run)
    raw_limits = limits.get("raw-loop")
    sync = result(runs, "lds-raw", "fillsync")
    w("| target | measured | met |")
    w("|---|---|---|")
    if sync and raw_limits:
        r = sync["p50_us"] / raw_limits["append_flush_p50_us"]
        w(f"| fillsync: synced put within 1.1x of one sector write plus flush (same device) | p50 {sync['p50_us']:.0f} us vs "
          f"{raw_limits['append_flush_p50_us']:.0f} us appending: {r:.2f}x | {'yes' if r <= 1.1 else 'no'} |")
    for peer in ["rocksdb", "leveldb"]:
        fs, entry = best_peer(runs, peer, "fillsync")
        if sync and entry:
            r = sync["ops_per_sec"] / entry["ops_per_sec"]
            w(f"| fillsync: at least 1.5x the ops/s of {peer} (its best fs, {fs}) | {r:.2f}x | {'yes' if r >= 1.5 else 'no'} |")
    for workload in ["fillseq", "fillrandom"]:
        lds = result(runs, "lds-raw", workload)
        best = max(((peer, *best_peer(runs, peer, workload)) for peer in PEERS), key=lambda x: x[2]["ops_per_sec"] if x[2] else 0)
        if lds and best[2]:
            r = lds["ops_per_sec"] / best[2]["ops_per_sec"]
            c = lds["cpu_s_per_mop"] / best[2]["cpu_s_per_mop"]
            w(f"| {workload}: at least the fastest peer ({best[0]} on {best[1]}), with lower CPU per op | {r:.2f}x ops/s, "
              f"{c:.2f}x CPU/op | {'yes' if r >= 1.0 and c < 1.0 else 'no'} |")
    for workload in ["fillrandom", "overwrite"]:
        lds = result(runs, "lds-raw", workload)
        wa = [(f, result(runs, f"rocksdb-{f}", workload)) for f in FILESYSTEMS]
        wa = [(f, e["write_amp"]) for f, e in wa if e and e.get("write_amp")]
        if lds and lds.get("write_amp") and wa:
            # Three decimals: the two can differ by less than one percent.
            f, low = min(wa, key=lambda x: x[1])
            w(f"| {workload} write amplification no higher than RocksDB's | {lds['write_amp']:.3f} vs {low:.3f} ({f}) | "
              f"{'yes' if lds['write_amp'] <= low else 'no'} |")
    lds = result(runs, "lds-raw", "readrandom")
    fs, rocks = best_peer(runs, "rocksdb", "readrandom")
    if lds and rocks:
        r = lds["ops_per_sec"] / rocks["ops_per_sec"]
        w(f"| readrandom no slower than RocksDB (its best fs, {fs}) | {r:.2f}x | {'yes' if r >= 1.0 else 'no'} |")
    fill = result(runs, "lds-raw", "fillseq")
    if fill and fill.get("chunk_write_mb_per_sec") and raw_limits:
        r = fill["chunk_write_mb_per_sec"] / raw_limits["sequential_mb_per_sec"]
        w(f"| one slot-sized chunk written at 80% or more of O_DIRECT sequential bandwidth | {fill['chunk_write_mb_per_sec']:.0f} "
          f"vs {raw_limits['sequential_mb_per_sec']:.0f} MB/s: {100 * r:.0f}% | {'yes' if r >= 0.8 else 'no'} |")
    recovery = sorted(Path(args.results).glob("recovery*.json"))
    for path in recovery:
        doc = json.loads(path.read_text())
        w(f"| recovery of a full 64 MiB version log under 0.1 s | {doc['open_seconds']:.3f} s for {doc['version_log_bytes'] / 2**20:.1f} MiB "
          f"({doc['objects']:,} objects, {doc['where']}) | {'yes' if doc['open_seconds'] < 0.1 else 'no'} |")
    for directory, keys in [(Path(args.results), f"{args_num(args.results)} keys"), (Path(args.scale_results), f"{args_num(args.scale_results)} keys")]:
        path = directory / "fsck.json"
        if path.exists():
            doc = json.loads(path.read_text())
            w(f"| fsck --deep reads at 70% or more of the device's sequential read speed ({keys}) | "
              f"{doc['fsck_bytes_read'] / 1e6:.0f} MB at {doc['fsck_read_mb_per_sec']:.0f} MB/s vs {doc['read_mb_per_sec']:.0f} MB/s "
              f"reading its {doc['slots']} chunk slots with O_DIRECT: {100 * doc['ratio']:.0f}% (chunks verified at "
              f"{doc['fsck_verify_mb_per_sec']:.0f} MB/s; medians of {len(doc['runs']['read_mb_per_sec'])}) | "
              f"{'yes' if doc['ratio'] >= 0.7 else 'no'} |")
    w("")
    # The scale run (run.py --num 5000000 --out docs/bench/results-scale), when it was run.
    scaled = Path(args.scale_results)
    if (scaled / "machine.json").exists():
        scale(runs, scaled, charts, w)
    # The device-bound run (run.py --throttle), when it was run.
    throttled = Path(args.throttled_results)
    if (throttled / "machine.json").exists():
        device_bound(throttled, w)
    # The technique comparisons (tools/bench/techniques.py), when they were run.
    techniques = Path("docs/bench/techniques.md")
    if techniques.exists():
        w(techniques.read_text())
    # The ablation of the seed papers' compaction techniques (tools/bench/ablation.py).
    ablation = Path("docs/bench/ablation.md")
    if ablation.exists():
        w(ablation.read_text())
    # The same, device-bound (ablation.py --throttle), when it was run.
    ablation_bound = Path("docs/bench/ablation-device-bound.md")
    if ablation_bound.exists():
        w(ablation_bound.read_text())
    w("## Notes\n")
    for setup in setups:
        entry = result(runs, setup, "fillsync")
        if entry and entry.get("flushes_per_op") is not None and entry["flushes_per_op"] < 0.5:
            w(f"- {setup}: its durable-write call issued {entry['flushes_per_op']:.3f} device flushes per synced put, "
              "so its fillsync figure is not one durable write per put on this device.")
    w("- The chunk-write figure is LDS's own count: bytes of slot-sized chunk writes over the time from the first "
      "write to the flush that makes them durable, which includes building the chunks written in between; the "
      "device is not the limit it measures.")
    w("")
    errors = [(s, d["error"]) for s, d in runs.items() if d.get("error")]
    if errors:
        w("## Runs that failed\n")
        for setup, error in errors:
            w(f"- {setup}: `{error[:300]}`")
        w("")
    Path(args.output).write_text("\n".join(lines))
    print(f"wrote {args.output} and {len(list(charts.glob('*.png')))} charts in {charts}")


if __name__ == "__main__":
    main()
