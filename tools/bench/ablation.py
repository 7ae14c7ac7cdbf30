#!/usr/bin/env python3
"""The ablation table of the seed papers' compaction techniques (BENCHMARKS.md): each
technique on and off on the workloads its paper says it helps, LDS on a raw loop device,
every configuration run --repeat times (the median is reported: flush and merge timing makes
single runs of the background work vary), written to docs/bench/ablation.md and its runs to docs/bench/ablation/ (report.py
includes it).

- skewed writes (TRIAD-MEM): `fillhot` (99% of the puts to 1% of the keys) and YCSB-A
  (zipfian, half updates) after `ycsb-load`;
- uniform writes (TRIAD-DISK, TRIAD-LOG, size-tiered, forest): fillrandom, overwrite, then
  readrandom (more level-0 chunks, more tiers or more trees, or values read from the backup
  log, cost reads);
- sequential writes (forest's split storing): fillseq;
- reads from the device (forest's parallel search, SifrDB §4.3): fillrandom of 3x the keys,
  then readrandom, the benchmark in a memory cgroup of 160 MiB so that most reads miss the
  page cache (only off, forest and forest with serial search).

For each: ops/s, CPU seconds per million operations, write amplification (bytes the loop
device wrote over user bytes), space (slots in use) and peak memory, with the engine's own
counts (level-0 merges and the chunks they took, hot entries held), and the paper's claim
beside the measured ratio. Needs root (loop devices); every loop device it attaches is
detached on the way out, also on failure. Usage:

    sudo python3 tools/bench/ablation.py --lds target/release/lds [--repeat 3] [--num 500000]
        [--configs 'off;triad-log'] [--groups 'uniform;skewed']   # run these only; the table
                                    # takes the others' stored runs
"""

import argparse
import json
import signal
import statistics
import sys
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from provenance import commit, measured_on, recorded_in  # noqa: E402
from run import Loop, Throttle, parse_size, run_bench  # noqa: E402

CONFIGS = [
    "off",
    "triad-mem",
    "triad-disk",
    "triad-mem,triad-disk",
    "triad-log",
    "triad-mem,triad-disk,triad-log",
    "size-tiered",
    "forest",
    "forest-serial",
]
GROUPS = {
    "skewed": ["fillhot", "ycsb-load", "ycsb-a"],
    "uniform": ["fillrandom", "overwrite", "readrandom"],
    "sequential": ["fillseq"],
    "device-reads": ["readrandom"],
}
# The configurations each group runs (all when not named).
GROUP_CONFIGS = {"device-reads": ["off", "forest", "forest-serial"]}
# The memory cgroup (v1) the device-reads group runs in, and its limit.
CGROUP = Path("/sys/fs/cgroup/memory/lds-ablation")
CGROUP_LIMIT = 160 << 20


def configs(group):
    return GROUP_CONFIGS.get(group, CONFIGS)


def config_args(config):
    """The lds bench arguments of a configuration: `forest-serial` is the forest with
    parallel search off."""
    if config == "off":
        return []
    if config == "forest-serial":
        return ["--technique", "forest", "--lds-option", "search_threads=1"]
    return ["--technique", config]


def in_cgroup(command):
    """`command` run in the memory cgroup CGROUP (created with its limit)."""
    CGROUP.mkdir(exist_ok=True)
    (CGROUP / "memory.limit_in_bytes").write_text(str(CGROUP_LIMIT))
    return ["sh", "-c", f'echo $$ > {CGROUP}/cgroup.procs && exec "$@"', "sh", *command]
# The paper's claims, for each technique and workload family (TRIAD, ATC 2017, §5).
CLAIMS = {
    ("triad-mem", "skewed"): "TRIAD-MEM alone: 97% of TRIAD's throughput on a highly skewed workload (Fig. 10), "
    "TRIAD up to 2.5x RocksDB on skewed workloads (Fig. 9B); WA unchanged when the hot set fits in memory (Fig. 9C)",
    ("triad-disk", "uniform"): "TRIAD-DISK: WA down by up to 60% on a uniform workload (Fig. 11), "
    "85% of TRIAD's throughput there (Fig. 10); read amplification up (more level-0 files)",
    ("triad-mem", "uniform"): "TRIAD-MEM: close to no effect on a uniform workload (Fig. 11)",
    ("triad-log", "uniform"): "TRIAD-LOG: WA down by up to 40% on a uniform workload (Fig. 11), 97% of TRIAD's "
    "throughput there (Fig. 10); no effect on read amplification; most useful when the log holds few overwritten "
    "values (§4.3)",
    ("triad-mem,triad-disk,triad-log", "skewed"): "TRIAD (all three): +50% throughput over RocksDB on "
    "write-intensive skewed workloads whose hot set fits in memory (§5.2), up to 2.5x (Fig. 9B)",
    ("size-tiered", "uniform"): "LDS §4.2.5, Fig. 15: size-tiered compaction on LDS inserts faster than on every file "
    "system (its ratio to leveled compaction is not given); size-tiered compaction writes less and reads more runs "
    "than leveled",
    ("forest", "uniform"): "SifrDB §5.2, Fig. 9a: random writes with the write amplification of size-tiered "
    "compaction, substantially below leveled (MS-tree) stores; with LDS's aligned storing the highest random-write "
    "throughput (Fig. 9b)",
    ("forest", "sequential"): "SifrDB §5.2, Fig. 9a: no write amplification on sequential writes, like LevelDB, "
    "where size-tiered compaction writes 8x",
    ("forest", "device-reads"): "SifrDB §4.3, §5.3: parallel search 1.7x faster queries even with everything cached "
    "(Fig. 8), up to 4x size-tiered at a 400:1 dataset/memory ratio (Fig. 11a), at the cost of extra reads of "
    "low-priority trees (15% more I/O)",
}


def pick(document, workload):
    return next((r for r in document.get("results", []) if r["benchmark"] == workload), None)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value, digits=0):
    return "-" if value is None else f"{value:,.{digits}f}"


def summarize(documents, workload):
    results = [pick(d, workload) for d in documents]
    results = [r for r in results if r]
    if not results:
        return None
    engine = lambda key: median([r.get("engine", {}).get(key) for r in results])  # noqa: E731
    return {
        "ops": median([r["ops_per_sec"] for r in results]),
        "cpu": median([r.get("cpu_s_per_mop") for r in results]),
        "wa": median([r.get("write_amp") for r in results]),
        "space": median([r.get("space_bytes") for r in results]),
        "peak": median([r.get("peak_memory_bytes") for r in results]),
        "level0_merges": engine("level0_merges"),
        "level0_chunks": engine("level0_chunks_merged"),
        "held": engine("hot_entries_held"),
        "moves": median([(r.get("engine", {}).get("trivial_moves") or 0)
                         + (r.get("engine", {}).get("forest_moved_chunks") or 0) for r in results]),
        "parallel": engine("parallel_searches"),
        "log_flushes": engine("log_chunk_flushes"),
        "runs": len(results),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lds", required=True)
    parser.add_argument("--workdir", default="/var/tmp/lds-bench")
    parser.add_argument("--out", default="docs/bench/ablation")
    parser.add_argument("--size", default="4GiB")
    parser.add_argument("--num", type=int, default=500_000, help="keys of the uniform fills and of ycsb-load")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--markdown", default="docs/bench/ablation.md")
    parser.add_argument("--configs", default=";".join(CONFIGS),
                        help="configurations to run, separated by ';' (the table takes the others' stored runs)")
    parser.add_argument("--groups", default=";".join(GROUPS),
                        help="workload groups to run, separated by ';' (the others keep their stored runs)")
    parser.add_argument("--throttle", metavar="MBPS,IOPS",
                        help="device-bound: throttle the disk under --workdir (as run.sh --throttle); use another "
                             "--out and --markdown")
    parser.add_argument("--from-runs", action="store_true",
                        help="write the markdown from the runs already in --out instead of running them")
    args = parser.parse_args()
    # A SIGTERM (a killed run) unwinds like an error, so that loop devices are detached,
    # mounts unmounted and throttles lifted on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    if args.from_runs:
        write_markdown(stored_summaries(Path(args.out)), Path(args.markdown), args)
        return
    chosen = [config for config in args.configs.split(";") if config]
    unknown = [config for config in chosen if config not in CONFIGS]
    if unknown:
        sys.exit(f"unknown configurations {unknown}: known are {CONFIGS}")
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    size_bytes = parse_size(args.size)
    summaries = {}
    with ExitStack() as stack:
        if args.throttle:
            mbps, iops = (int(part) for part in args.throttle.split(","))
            limit = Throttle(work, mbps, iops)
            stack.callback(limit.close)
        loop = Loop(work / "ablation.img", size_bytes)
        stack.callback(loop.close)
        groups = [group for group in args.groups.split(";") if group]
        for group, workloads in [(group, workloads) for group, workloads in GROUPS.items() if group in groups]:
            for config in [config for config in configs(group) if config in chosen]:
                documents = []
                for run in range(args.repeat):
                    label = f"{group}-{config.replace(',', '+')}-{run}"
                    benchmarks = ["fillrandom", *workloads] if group == "device-reads" else workloads
                    num = {"skewed": args.num * 2, "device-reads": args.num * 3}.get(group, args.num)
                    command = [
                        args.lds, "bench", "--engine", "lds", "--benchmarks", ",".join(benchmarks),
                        "--num", str(num), "--records", str(args.num), "--ycsb-ops", str(args.num * 2),
                        "--size", args.size, "--stat-device", loop.name, "--json", "--force", "--seed", str(run + 1),
                    ]
                    if group == "device-reads":
                        command += ["--reads", str(args.num // 2)]
                    command += config_args(config)
                    command.append(loop.device)
                    if group == "device-reads":
                        command = in_cgroup(command)
                    documents.append(run_bench(command, "lds", out, label, {"label": label, "config": config}))
                for workload in workloads:
                    summaries[(group, config, workload)] = summarize(documents, workload)
    # The configurations not run now keep their stored runs.
    stored = stored_summaries(out)
    stored.update(summaries)
    write_markdown(stored, Path(args.markdown), args)


def stored_summaries(out: Path):
    """The summary of every configuration's runs stored in `out`."""
    summaries = {}
    for group, workloads in GROUPS.items():
        for config in configs(group):
            # `-[0-9]*`: the runs of `forest` only, not those of `forest-serial` too.
            documents = [json.loads(path.read_text())
                         for path in sorted(out.glob(f"{group}-{config.replace(',', '+')}-[0-9]*.json"))]
            if not documents:
                # Never run (a subset of the configurations): no row, where a run that lacks a
                # workload shows as failed.
                continue
            for workload in workloads:
                summaries[(group, config, workload)] = summarize(documents, workload)
    return summaries


def write_markdown(summaries, path: Path, args):
    lines = []
    w = lines.append
    throttled = f", device-bound: the disk under it throttled to {args.throttle.replace(',', ' MB/s and ')} IOPS" \
        if args.throttle else ""
    w(f"## Compaction techniques of the seed papers: ablation{' (device-bound)' if args.throttle else ''}\n")
    # Written again from stored runs, the table keeps the commit they were measured on.
    w(measured_on(recorded_in(path) if args.from_runs else commit(), "tools/bench/ablation.py"))
    w(f"LDS on a raw loop device ({args.size}{throttled}); each configuration run {args.repeat} times with seeds 1 to "
      f"{args.repeat}, medians shown. Uniform: fillrandom and overwrite of {args.num:,} keys (values 1 to 200 "
      f"bytes), then readrandom. Skewed: fillhot ({args.num * 2:,} puts, 99% of them to 1% of the keys), then "
      f"ycsb-load of {args.num:,} records and YCSB-A ({args.num * 2:,} operations, zipfian). CPU: seconds per "
      "million operations; WA: bytes the device wrote over user bytes; space: slots in use after the benchmark; "
      "level-0 merges: merges of level 0 started and the level-0 chunks they took on average; held: hot entries "
      "written again to the backup log at freezes (TRIAD-MEM); log flushes: flushes that wrote log chunks "
      "(TRIAD-LOG, whose volumes get a 64 MiB backup log instead of 16 MiB).\n")
    w("| workload | techniques | ops/s | CPU s/Mop | WA | space MiB | peak MiB | level-0 merges (chunks each) | held "
      "| moved chunks | parallel lookups | log flushes |")
    w("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for group, workloads in GROUPS.items():
        for workload in workloads:
            for config in configs(group):
                if (group, config, workload) not in summaries:
                    continue
                s = summaries.get((group, config, workload))
                name = f"{workload} ({group})" if group == "device-reads" else workload
                if not s:
                    w(f"| {name} | {config} | failed | | | | | | | | | |")
                    continue
                merges = "-"
                if s["level0_merges"]:
                    merges = f"{s['level0_merges']:.0f} ({s['level0_chunks'] / s['level0_merges']:.1f})"
                w(f"| {name} | {config} | {fmt(s['ops'])} | {fmt(s['cpu'], 2)} | {fmt(s['wa'], 2)} "
                  f"| {fmt(s['space'] and s['space'] / 2**20)} | {fmt(s['peak'] and s['peak'] / 2**20)} "
                  f"| {merges} | {fmt(s['held'])} | {fmt(s['moves'])} | {fmt(s['parallel'])} "
                  f"| {fmt(s['log_flushes'])} |")
    w("")
    w("Each technique over the engine without it (ops/s ratio; write amplification off -> on):\n")
    columns = [(group, workload) for group, workloads in GROUPS.items() for workload in workloads
               if (group, "off", workload) in summaries]
    w("| technique | " + " | ".join(f"{workload} ({group})" if group == "device-reads" else workload
                                   for group, workload in columns) + " |")
    w("|---|" + "---|" * len(columns))
    for config in [config for config in CONFIGS[1:] if any(key[1] == config for key in summaries)]:
        cells = []
        for group, workload in columns:
            base, mine = summaries.get((group, "off", workload)), summaries.get((group, config, workload))
            if not (base and mine and base["ops"]):
                cells.append("-")
                continue
            wa = f"; {fmt(base['wa'], 2)} -> {fmt(mine['wa'], 2)}" if base["wa"] else ""
            cells.append(f"{mine['ops'] / base['ops']:.2f}x{wa}")
        w(f"| {config} | " + " | ".join(cells) + " |")
    w("")
    w("The papers' claims, beside the ratios above:\n")
    for (config, group), claim in CLAIMS.items():
        w(f"- {config}, {group} workloads: {claim}.")
    w("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
