#!/usr/bin/env python3
"""Runs the comparison of BENCHMARKS.md: LDS on a raw loop device and on an image file on
ext4, each peer on ext4, xfs and btrfs, every one on its own loop device over an image file
of the same size; plus the device limits. Writes one JSON file per run into --out.

Needs root (loop devices, mkfs, mount). Every loop device it attaches is detached and every
mount unmounted on the way out, also on failure.

`--throttle MBPS,IOPS` makes the run device-bound: the blkio controller (cgroup v1) of the
root group throttles reads and writes of the disk holding --workdir to MBPS MB/s and IOPS
operations per second each, for the whole run, and removes the limits on the way out. The
loop devices are attached with --direct-io=on, so that every engine's writes, buffered
writeback of the file systems included, reach that disk as I/O of the loop devices' workers,
which the root group's limits catch (a limit on the benchmark's own group does not catch
writeback; a limit on the loop device does not apply to its page cache)."""

import argparse
import json
import signal
import os
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import provenance

PEERS = ["rocksdb", "leveldb", "fjall", "sled", "redb"]
FILESYSTEMS = ["ext4", "xfs", "btrfs"]
MKFS = {
    "ext4": ["mkfs.ext4", "-F", "-q"],
    "xfs": ["mkfs.xfs", "-f", "-q"],
    "btrfs": ["mkfs.btrfs", "-f", "-q"],
}


def sh(*args, **kwargs):
    return subprocess.run(list(args), check=True, text=True, capture_output=True, **kwargs).stdout.strip()


class Loop:
    """A loop device over a fresh image file; detached (exactly this one) on exit."""

    def __init__(self, image: Path, size: int):
        self.image = image
        if image.exists():
            image.unlink()
        with open(image, "wb") as f:
            f.truncate(size)
        # Direct I/O on the backing file: the loop device passes writes and flushes to the
        # disk below instead of caching them a second time.
        # 4096-byte logical and physical blocks, as a 4Kn drive: lds mkfs takes the sector size
        # the device reports (SPEC.md §2), and the peers' file systems use 4 KiB blocks.
        self.device = sh("losetup", "--direct-io=on", "--sector-size", "4096", "--find", "--show", str(image))
        self.name = os.path.basename(self.device)

    def close(self):
        subprocess.run(["losetup", "--detach", self.device], check=False)
        self.image.unlink(missing_ok=True)


class Mount:
    def __init__(self, loop: Loop, fs: str, point: Path):
        sh(*MKFS[fs], loop.device)
        point.mkdir(parents=True, exist_ok=True)
        sh("mount", loop.device, str(point))
        self.point = point

    def close(self):
        subprocess.run(["umount", str(self.point)], check=False)


class Throttle:
    """Root blkio limits on the disk holding `path`, removed by close()."""

    FILES = ["read_bps_device", "write_bps_device", "read_iops_device", "write_iops_device"]

    def __init__(self, path: Path, mbps: int, iops: int):
        source = sh("findmnt", "-no", "SOURCE", "--target", str(path))
        parent = sh("lsblk", "-no", "PKNAME", source) or Path(source).name
        self.device = sh("lsblk", "-dno", "MAJ:MIN", f"/dev/{parent}").strip()
        self.root = Path("/sys/fs/cgroup/blkio")
        limits = [mbps * 1_000_000, mbps * 1_000_000, iops, iops]
        for name, value in zip(self.FILES, limits):
            (self.root / f"blkio.throttle.{name}").write_text(f"{self.device} {value}\n")
        print(f"== throttled {self.device} ({parent}): {mbps} MB/s and {iops} IOPS each way", flush=True)

    def close(self):
        for name in self.FILES:
            try:
                (self.root / f"blkio.throttle.{name}").write_text(f"{self.device} 0\n")
            except OSError as error:
                print(f"could not remove the {name} limit of {self.device}: {error}", file=sys.stderr)


class MemoryLimit:
    """A memory cgroup (cgroup v1) whose limit charges the page cache too: each benchmark
    process is started inside it, so that an engine whose data is larger than the limit reads
    from the device, as on a machine whose memory is a tenth of the data. Removed by close()."""

    ROOT = Path("/sys/fs/cgroup/memory")

    def __init__(self, limit_bytes: int, name: str):
        self.path = self.ROOT / name
        self.path.mkdir(exist_ok=True)
        (self.path / "memory.limit_in_bytes").write_text(f"{limit_bytes}\n")
        try:
            (self.path / "memory.swappiness").write_text("0\n")
        except OSError:
            pass
        self.limit = limit_bytes

    def enter(self):
        """For Popen's preexec_fn: moves the child into the group before it runs the engine."""
        (self.path / "cgroup.procs").write_text(f"{os.getpid()}\n")

    def reset_peak(self):
        (self.path / "memory.max_usage_in_bytes").write_text("0\n")

    def peak(self) -> int:
        return int((self.path / "memory.max_usage_in_bytes").read_text())

    def close(self):
        try:
            self.path.rmdir()
        except OSError as error:
            print(f"could not remove {self.path}: {error}", file=sys.stderr)


MEMORY: "MemoryLimit | None" = None


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    except OSError:
        pass


def bench(lds: str, engine: str, path: Path, stat: str, args, out: Path, label: str):
    command = [
        lds, "bench", "--engine", engine, "--benchmarks", args.benchmarks, "--num", str(args.num),
        "--sync-ops", str(args.sync_ops), "--ycsb-ops", str(args.ycsb_ops), "--size", args.size,
        "--stat-device", stat, "--json", "--force", str(path),
    ]
    run_bench(command, engine, out, label, {"setup": label})


def run_bench(command, engine: str, out: Path, label: str, fields: dict) -> dict:
    """Runs one `lds bench --json` command with cold caches; writes its document (with
    `fields` and the wall time, or the error) to OUT/LABEL.json and returns it."""
    print(f"== {label}: {' '.join(command)}", flush=True)
    drop_caches()
    started = time.time()
    if MEMORY is not None:
        MEMORY.reset_peak()
    result = subprocess.run(command, text=True, capture_output=True,
                            preexec_fn=MEMORY.enter if MEMORY is not None else None)
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
        document = {"schema": "lds-bench/1", "engine": engine, "error": result.stderr.strip(), "results": []}
    else:
        document = json.loads(result.stdout)
    document.update(fields)
    document["wall_seconds"] = round(time.time() - started, 1)
    if MEMORY is not None:
        document["memory_limit_bytes"] = MEMORY.limit
        document["memory_peak_bytes"] = MEMORY.peak()
    (out / f"{label}.json").write_text(json.dumps(document, indent=1))
    print(f"   {label}: {document['wall_seconds']} s", flush=True)
    return document


def limits(lds: str, path: Path, out: Path, label: str, size: str):
    result = subprocess.run([lds, "bench", "--device-limits", "--json", "--size", size, str(path)],
                            text=True, capture_output=True)
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
        return
    document = json.loads(result.stdout)
    document["setup"] = label
    (out / f"limits-{label}.json").write_text(json.dumps(document, indent=1))
    print(f"   limits {label}: {document['limits']['sequential_mb_per_sec']:.0f} MB/s, "
          f"append+flush p50 {document['limits']['append_flush_p50_us']:.0f} us", flush=True)


def fsck_rate(lds: str, path: Path, out: Path):
    """`lds fsck --deep` of the volume the benchmarks left, against reading its chunks' slots
    with O_DIRECT (tools/bench/fsck_rate.py)."""
    script = Path(__file__).with_name("fsck_rate.py")
    result = subprocess.run([sys.executable, str(script), "--lds", lds, "--runs", "3", "--json", str(out / "fsck.json"),
                             str(path)], text=True, capture_output=True)
    print(f"   fsck: {(result.stdout or result.stderr).strip()}", flush=True)


def recovery(lds: str, path: Path, out: Path):
    result = subprocess.run([lds, "bench", "--recovery", "--json", "--force", str(path)], text=True, capture_output=True)
    if result.returncode != 0:
        print(result.stderr, file=sys.stderr)
        return
    measured = json.loads(result.stdout)["recovery"]
    document = {
        "where": f"raw loop device, {'cold' if measured['cold'] else 'warm'} page cache",
        "open_seconds": measured["open_seconds"],
        "version_log_bytes": measured["version_log_bytes"],
        "objects": measured["objects"],
        "raw": measured,
    }
    (out / "recovery.json").write_text(json.dumps(document, indent=1))
    print(f"   recovery: {measured['open_seconds']:.3f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lds", required=True, help="the lds binary, built with --features peers")
    parser.add_argument("--workdir", default="/var/tmp/lds-bench", help="where the image files go (a real disk)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--size", default="4GiB", help="size of every image file")
    parser.add_argument("--num", type=int, default=500_000)
    parser.add_argument("--sync-ops", type=int, default=5_000)
    parser.add_argument("--ycsb-ops", type=int, default=200_000)
    parser.add_argument("--benchmarks", default="all")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--filesystems", default=",".join(FILESYSTEMS))
    parser.add_argument("--throttle", metavar="MBPS,IOPS",
                        help="device-bound run: limit the disk under --workdir (see the module doc)")
    parser.add_argument("--memory-limit", metavar="SIZE",
                        help="run every benchmark process in a memory cgroup of this size, page cache "
                             "charged (a run bigger than memory: see MemoryLimit)")
    args = parser.parse_args()
    # A SIGTERM (a killed run) unwinds like an error, so that loop devices are detached,
    # mounts unmounted and throttles lifted on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    if os.geteuid() != 0:
        sys.exit("run.py needs root: it attaches loop devices and mounts file systems")
    size_bytes = parse_size(args.size)
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = {
        "cpus": os.cpu_count(),
        "kernel": sh("uname", "-r"),
        "cpu_model": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?"),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "backing_fs": sh("stat", "-f", "-c", "%T", str(work)),
        "args": vars(args),
        # The build measured, which BENCHMARKS.md names for each section (provenance.py).
        "commit": provenance.commit(),
    }
    (out / "machine.json").write_text(json.dumps(machine, indent=1))
    with ExitStack() as throttle:
        if args.memory_limit:
            global MEMORY
            MEMORY = MemoryLimit(parse_size(args.memory_limit), f"lds-bench-{os.getpid()}")
            throttle.callback(MEMORY.close)
            machine["memory_limit_bytes"] = MEMORY.limit
            (out / "machine.json").write_text(json.dumps(machine, indent=1))
        if args.throttle:
            mbps, iops = (int(part) for part in args.throttle.split(","))
            limit = Throttle(work, mbps, iops)
            throttle.callback(limit.close)
            machine["throttle"] = {"device": limit.device, "mb_per_sec": mbps, "iops": iops}
            (out / "machine.json").write_text(json.dumps(machine, indent=1))
        run_all(args, work, out, size_bytes)


def run_all(args, work: Path, out: Path, size_bytes: int):
    # LDS on a raw block device: the device limits first, on the same device.
    with ExitStack() as stack:
        loop = Loop(work / "raw.img", size_bytes)
        stack.callback(loop.close)
        limits(args.lds, Path(loop.device), out, "raw-loop", args.size)
        bench(args.lds, "lds", Path(loop.device), loop.name, args, out, "lds-raw")
        fsck_rate(args.lds, Path(loop.device), out)
        recovery(args.lds, Path(loop.device), out)

    for fs in [f for f in args.filesystems.split(",") if f]:
        with ExitStack() as stack:
            loop = Loop(work / f"{fs}.img", size_bytes)
            stack.callback(loop.close)
            mount = Mount(loop, fs, work / f"mnt-{fs}")
            stack.callback(mount.close)
            if fs == "ext4":
                limits(args.lds, mount.point / "limits.img", out, "ext4-file", args.size)
                (mount.point / "limits.img").unlink(missing_ok=True)
                # LDS on a pre-allocated image file on ext4 (paper §3.6.2), most of the fs.
                image_size = f"{int(size_bytes * 0.8) // (1 << 20)}MiB"
                saved = args.size
                args.size = image_size
                bench(args.lds, "lds", mount.point / "lds.img", loop.name, args, out, "lds-ext4")
                args.size = saved
                (mount.point / "lds.img").unlink(missing_ok=True)
            for peer in [p for p in args.peers.split(",") if p]:
                bench(args.lds, peer, mount.point / peer, loop.name, args, out, f"{peer}-{fs}")
                subprocess.run(["rm", "-rf", str(mount.point / peer)], check=False)


def parse_size(text: str) -> int:
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)


if __name__ == "__main__":
    main()
