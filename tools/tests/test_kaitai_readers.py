"""Cross-checks the three Kaitai readers (Python, JavaScript, Java) against lds.

tools/kaitai/compile.sh compiles formats/*.ksy to the three languages; each reader
(tools/kaitai/lds_reader.py, js/lds_reader.js, java/LdsReader.java) uses only its generated
parsers and the rules of SPEC.md §15.1. For every fixture image (`fixtures/d_*`, `f_*` and the
frozen `fixtures/v*/`, whose volumes of several devices keep their other devices as
device-N.gz), for an engine-written volume with levels, wrapped logs and batches to replay, for
an engine-written volume of several devices with a gap of slots, for an engine-written volume
with key-value separation (format 1.4: value chunks, pointers, values written directly before
their batch), for an engine-written volume with log chunks (format 1.6, TRIAD-LOG: log
references into a backup log that wrapped), for a 3 GiB sparse volume past 2^24 sequence
numbers, and for damaged copies of the fixtures (DAMAGE below):
- `READER volume IMAGE` equals `lds dump IMAGE volume --json` field by field (keys named
  `status` and `device` are ignored);
- `READER state IMAGE` is the same in every language (sequence numbers included), its key/value
  lines equal `lds scan --hex` of every instance, and its per-instance line names the live
  chunks, last sequence and retention start (SPEC.md §8.9) that `lds dump tree --json` shows.
Where lds refuses a volume (REFUSED below), the fixture is listed with the reason.

The lds binary is env LDS_BIN (default target/release/lds; a relative path is taken from the
repository root). Run: pip install -r tools/requirements.txt && pytest tools/tests
"""

import gzip
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KAITAI = ROOT / "tools" / "kaitai"
GENERATED = KAITAI / "generated"
FIXTURES = sorted(ROOT.glob("fixtures/d_*/image.gz")) + sorted(ROOT.glob("fixtures/f_*/image.gz")) + sorted(
    ROOT.glob("fixtures/v*/*/image.gz")
)
IGNORED_KEYS = {"status", "device"}
READERS = {
    "python": [sys.executable, str(KAITAI / "lds_reader.py")],
    "javascript": ["node", str(KAITAI / "js" / "lds_reader.js")],
    "java": ["java", "-cp", f"{GENERATED / 'classes'}{os.pathsep}{GENERATED / 'lib' / '*'}", "LdsReader"],
}
# Fixtures lds itself refuses to dump (fsck's tests read them): the readers are not compared.
REFUSED = {
    "f_labels_conflict": "both labels valid, different, same generation (SPEC.md §4.2)",
    "f_no_valid_label": "no valid label",
    "f_volume_beyond_device": "the label's volume_len is past the device",
}


def lds_bin():
    path = Path(os.environ.get("LDS_BIN", "target/release/lds"))
    return path if path.is_absolute() else ROOT / path


@pytest.fixture(scope="session")
def kaitai_dump():
    """Compiles formats/*.ksy and the readers (tools/kaitai/compile.sh), then imports the
    Python reader (the damage cases use it to find what to damage)."""
    run = subprocess.run(["bash", str(KAITAI / "compile.sh")], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, f"tools/kaitai/compile.sh failed (exit {run.returncode}):\n{run.stdout}{run.stderr}"
    sys.path.insert(0, str(KAITAI))
    import lds_reader

    return lds_reader


def test_every_ksy_compiles(kaitai_dump):
    ksy = sorted(ROOT.glob("formats/*.ksy"))
    assert ksy, "no formats/*.ksy found"
    for lang, name in (("python", lambda k: k.stem + ".py"),
                       ("javascript", lambda k: "".join(w.title() for w in k.stem.split("_")) + ".js"),
                       ("java", lambda k: "".join(w.title() for w in k.stem.split("_")) + ".java")):
        missing = [k.name for k in ksy if not (GENERATED / lang / name(k)).is_file()]
        assert not missing, f"compile.sh produced no {lang} code for: {missing}"
    assert (GENERATED / "classes" / "LdsVolume.class").is_file(), "the generated Java did not compile"


def test_fixtures_exist():
    names = {p.parent.name for p in FIXTURES}
    assert any(n.startswith("d_") for n in names) and any(n.startswith("f_") for n in names), (
        f"expected gzip-compressed fixture images at {ROOT}/fixtures/*/image.gz; found {sorted(names)}"
    )
    assert any(p.parent.parent.name.startswith("v") for p in FIXTURES), "no frozen fixtures found"


def first_difference(expected, actual, path="$"):
    """The first difference between two JSON values, ignoring IGNORED_KEYS, or None.

    `expected` is lds's document, `actual` the reader's; the walk follows
    lds's key order. Returns a message naming the JSON path and both values.
    """
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in expected:
            if key in IGNORED_KEYS:
                continue
            if key not in actual:
                return f"{path}.{key}: lds dump = {json.dumps(expected[key])[:200]}, reader: key missing"
            diff = first_difference(expected[key], actual[key], f"{path}.{key}")
            if diff:
                return diff
        for key in actual:
            if key not in IGNORED_KEYS and key not in expected:
                return f"{path}.{key}: lds dump: key missing, reader = {json.dumps(actual[key])[:200]}"
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for i, (e, a) in enumerate(zip(expected, actual)):
            diff = first_difference(e, a, f"{path}[{i}]")
            if diff:
                return diff
        if len(expected) != len(actual):
            return f"{path}: lds dump has {len(expected)} items, reader has {len(actual)}"
        return None
    # bool is an int in Python: compare types too, so that true != 1
    if type(expected) is not type(actual) or expected != actual:
        return f"{path}: lds dump = {json.dumps(expected)}, reader = {json.dumps(actual)}"
    return None


def run_lds(*args):
    binary = lds_bin()
    assert binary.is_file(), f"lds binary not found at {binary} (build it, or set LDS_BIN)"
    return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True)


def run_reader(lang, what, image, devices=()):
    run = subprocess.run([*READERS[lang], what, str(image), *map(str, devices)], capture_output=True, text=True)
    assert run.returncode == 0, f"{lang} reader `{what} {image}` failed (exit {run.returncode}):\n{run.stderr[-2000:]}"
    return [json.loads(line) for line in run.stdout.splitlines()]


def compare(image, what, devices=()):
    """Every reader's `volume` document equals lds dump's; returns lds's document. `devices`
    are the other devices of a volume of several (lds finds them beside `image`)."""
    run = run_lds("dump", image, "volume", "--json")
    try:
        expected = json.loads(run.stdout)
    except json.JSONDecodeError as e:
        pytest.fail(f"`lds dump {image} volume --json` printed no JSON ({e}); exit {run.returncode}\n{run.stderr}")
    for lang in READERS:
        diff = first_difference(expected, run_reader(lang, "volume", image, devices)[0])
        assert diff is None, f"{what}: {lang} reader: first difference at {diff}"
    return expected


def compare_state(image, what, volume, devices=()):
    """Every reader's `state` is the same, equals lds scan and lds dump tree; returns it."""
    runs = {lang: subprocess.run([*READERS[lang], "state", str(image), *map(str, devices)], capture_output=True, text=True)
            for lang in READERS}
    failed = {lang: run.stderr.strip()[-300:] for lang, run in runs.items() if run.returncode != 0}
    g = (volume["labels"]["primary"] or volume["labels"]["backup"])["geometry"]
    if failed:
        # A chunk the parsers cannot read (damage): every reader and lds must refuse.
        assert len(failed) == len(READERS), f"{what}: only some readers fail: {failed}"
        refused = [run_lds("scan", image, "--instance", i, "--hex").returncode != 0 for i in range(g["instance_count"])]
        assert any(refused), f"{what}: the readers fail ({failed}) where lds scan reads every instance"
        return None
    states = {lang: [json.loads(line) for line in run.stdout.splitlines()] for lang, run in runs.items()}
    python = states["python"]
    for lang, state in states.items():
        if state != python:
            diff = next((f"line {i}: python {a} / {lang} {b}" for i, (a, b) in enumerate(zip(python, state)) if a != b),
                        f"python has {len(python)} lines, {lang} {len(state)}")
            pytest.fail(f"{what}: the readers disagree on the state: {diff}")
    for instance in range(g["instance_count"]):
        scan = run_lds("scan", image, "--instance", instance, "--hex")
        summary = next(line for line in python if line["instance"] == instance and "key" not in line)
        if scan.returncode != 0:
            continue  # lds refuses this instance (a damaged fixture): nothing to compare
        expected = [line.split("\t") for line in scan.stdout.splitlines()]
        got = [[line["key"], line["value"]] for line in python if line["instance"] == instance and "key" in line]
        assert got == expected, f"{what}: instance {instance}: the readers' state differs from lds scan " \
            f"({len(got)} keys against {len(expected)}; first difference " \
            f"{next((a, b) for a, b in zip(got + [None] * len(expected), expected + [None] * len(got)) if a != b)})"
        tree = json.loads(run_lds("dump", image, "tree", "--instance", instance, "--json").stdout)
        chunks = {c["chunk_id"] for level in tree["levels"] for c in level["chunks"]}
        unfinished = tree.get("unfinished_compaction")
        if unfinished:
            chunks = (chunks - set(unfinished["cleaned"])) | set(unfinished["outputs"])
        assert summary["chunks"] == sorted(chunks), f"{what}: instance {instance}: live chunks differ from lds dump tree"
        assert summary["last_sequence"] == tree["last_sequence"], f"{what}: instance {instance}: last_sequence differs"
        # The retention start (SPEC.md §8.9): lds dump tree shows it on volumes with feature
        # log_tables; elsewhere the version has no log chunk and it is the backup start.
        retention = (tree["ofs_retention_start"], tree["lsn_retention_start"], tree["retained_bytes"]) \
            if "retained_bytes" in tree else (tree["ofs_backup_start"], tree["lsn_backup_start"], 0)
        assert (summary["ofs_retention_start"], summary["lsn_retention_start"], summary["retained_bytes"]) == \
            retention, f"{what}: instance {instance}: the retention start differs from lds dump tree ({retention})"
    return python


def compare_chunks(image, what, devices=()):
    """Every reader's `chunks` documents are the same, and each equals `lds dump IMAGE chunk
    ID --instance I --entries --json`; returns them (None when every reader and lds refuse)."""
    runs = {lang: subprocess.run([*READERS[lang], "chunks", str(image), *map(str, devices)], capture_output=True, text=True)
            for lang in READERS}
    failed = {lang: run.stderr.strip()[-300:] for lang, run in runs.items() if run.returncode != 0}
    if failed:
        assert len(failed) == len(READERS), f"{what}: only some readers fail: {failed}"
        return None
    docs = {lang: [json.loads(line) for line in run.stdout.splitlines()] for lang, run in runs.items()}
    for lang, got in docs.items():
        assert got == docs["python"], f"{what}: the {lang} reader's chunks differ from the python reader's"
    for doc in docs["python"]:
        doc = dict(doc)
        instance = doc.pop("instance")
        run = run_lds("dump", image, "chunk", doc["chunk_id"], "--instance", instance, "--entries", "--json")
        if run.returncode != 0:
            # lds refuses a chunk whose checksums hold (a damaged fixture: unsorted keys, say);
            # the readers are not held to every check of lds, but lds must refuse the instance.
            scan = run_lds("scan", image, "--instance", instance, "--hex")
            assert scan.returncode != 0, f"{what}: lds dump chunk {doc['chunk_id']} failed, lds scan reads: {run.stderr}"
            continue
        diff = first_difference(json.loads(run.stdout), doc)
        assert diff is None, f"{what}: chunk {doc['chunk_id']} of instance {instance}: first difference at {diff}"
    return docs["python"]


def fixture_bytes(name):
    return gzip.decompress((ROOT / "fixtures" / name / "image.gz").read_bytes())


@pytest.mark.parametrize("image_gz", FIXTURES, ids=[str(p.parent.relative_to(ROOT / "fixtures")) for p in FIXTURES])
def test_readers_match_lds(image_gz, kaitai_dump, tmp_path):
    image = tmp_path / "image"
    image.write_bytes(gzip.decompress(image_gz.read_bytes()))
    # The other devices of a volume of several (SPEC.md §4.3), beside it as lds looks for them.
    devices = []
    for device_gz in sorted(image_gz.parent.glob("device-*.gz")):
        device = tmp_path / device_gz.name[:-3]
        device.write_bytes(gzip.decompress(device_gz.read_bytes()))
        devices.append(device)
    what = str(image_gz.relative_to(ROOT))
    name = image_gz.parent.name
    if name in REFUSED:
        run = run_lds("dump", image, "volume", "--json")
        assert run.returncode != 0, f"{what}: lds dump no longer refuses it ({REFUSED[name]}): compare it"
        return
    volume = compare(image, what, devices)
    state = compare_state(image, what, volume, devices)
    chunks = compare_chunks(image, what, devices)
    if state is None and chunks is not None:
        # The chunks read but the state does not: only a value the entries name but no reader
        # can read explains it, and fsck --deep says so: a log reference that does not resolve
        # (801, a damaged batch in the backup log, SPEC.md §8.9) or a value pointer whose value
        # cannot be read and checked (SPEC.md §8.6: 702 digest, 703 pointer, 705 crc32c, 706 a
        # directly written value chunk lost).
        fsck = json.loads(run_lds("fsck", image, "--deep", "--json").stdout)
        codes = {problem["code"] for problem in fsck["problems"]}
        unreadable = {801, 702, 703, 705, 706}
        assert codes & unreadable, \
            f"{what}: the readers read the chunks but not the state, and fsck finds none of {sorted(unreadable)}: {codes}"
    else:
        assert (state is None) == (chunks is None), f"{what}: the readers read the state but not the chunks, or back"
    frozen = image_gz.parent / "state.ndjson"
    if frozen.is_file():
        assert state is not None, f"{what}: the readers cannot read a frozen fixture"
        want = [json.loads(line) for line in frozen.read_text().splitlines()]
        got = [line for line in state if "key" in line]
        assert [(w["instance"], w["key_hex"], w["value_hex"]) for w in want] == [
            (g["instance"], g["key"], g["value"]) for g in got
        ], f"{what}: the readers' state differs from the frozen state.ndjson"


def test_engine_written_image_matches(kaitai_dump, tmp_path):
    """An image written by the engine itself (mkfs, then load, puts and deletes through
    the lds binary, with logs small enough to wrap) reads the same in every reader."""
    image = tmp_path / "engine.img"

    def lds(*args, **kwargs):
        return subprocess.run([str(lds_bin()), *args], check=True, capture_output=True, text=True, **kwargs)

    lds("mkfs", "--size", "32MiB", "--sector-size", "512", "--slot-size", "64KiB",
        "--version-log-size", "64KiB", "--backup-log-size", "16KiB", "--uuid", "0" * 31 + "1", str(image))
    lines = "".join(f"key{n:05}\tvalue-{n}-{'x' * (n % 90)}\n" for n in range(30000))
    lds("load", str(image), "--format", "tsv", input=lines)
    for n in range(0, 3000, 7):
        lds("delete", str(image), f"key{n:05}")
    lds("put", str(image), "last", "written", "--sync")
    volume = compare(image, "engine-written image")
    walked = volume["instances"][0]["version_log"]
    assert any(o["object_type"] == "delta_version" for o in walked["left"]), "the engine committed no delta version"
    assert walked["right"] or volume["instances"][0]["backup_log"]["right"], "no log wrapped"
    state = compare_state(image, "engine-written image", volume)
    assert len(compare_chunks(image, "engine-written image")) >= 10
    summary = state[0]
    assert summary["replayed_batches"] > 0, "no batch to replay"
    tree = json.loads(run_lds("dump", image, "tree", "--json").stdout)
    assert sum(1 for level in tree["levels"] if level["chunks"]) >= 2, "the tree has fewer than two levels"
    assert len(state) > 25000, "the state lost keys"


def test_engine_written_volume_of_several_devices_matches(kaitai_dump, tmp_path):
    """A volume the engine wrote over three devices (SPEC.md §4.3), then the middle one removed
    with its chunks (a gap of slots no device holds): every reader, given the devices, reads
    it as lds does."""

    def lds(*args, **kwargs):
        return subprocess.run([str(lds_bin()), *map(str, args)], check=True, capture_output=True, text=True, **kwargs)

    first, second, third = (tmp_path / f"{name}.img" for name in ("first", "second", "third"))
    lds("mkfs", "--size", "4MiB", "--sector-size", "512", "--slot-size", "64KiB",
        "--version-log-size", "64KiB", "--backup-log-size", "16KiB", first)
    lds("device", "add", first, second, "--size", "1MiB")
    lds("device", "add", first, third, "--size", "2MiB")

    def slots_in_use():
        listed = json.loads(lds("device", "list", first, "--json").stdout)
        return [device["slots_in_use"] for device in listed["devices"]]

    # Loads of different lengths (each opens the store, its cursor at slot 0) until the
    # second device holds chunks.
    for rounds in range(1, 30):
        lines = "".join(f"key{n:05}\tvalue-{rounds}-{n}-{'x' * (n % 90)}\n" for n in range(3000 * rounds))
        lds("load", first, "--format", "tsv", input=lines)
        if slots_in_use()[1] > 0:
            break
    assert slots_in_use()[1] > 0, "no chunk reached the second device"
    lds("device", "remove", first, second)
    lds("put", third, "last", "written", "--sync")
    assert len(slots_in_use()) == 2
    volume = compare(first, "volume of several devices", [third])
    primary = volume["labels"]["primary"]
    assert primary["devices"]["num_devices"] == 2 and primary["features_incompat"] & 2, primary
    assert any(slot["footer"] is None for slot in volume["slots"]), "no gap of slots"
    state = compare_state(first, "volume of several devices", volume, [third])
    assert len(state) > 3000, "the state lost keys"
    chunks = compare_chunks(first, "volume of several devices", [third])
    holder = primary["devices"]["devices"][1]
    on_third = [c for c in chunks for s in c["sub_chunks"]
                if holder["first_slot"] <= s["slot"] < holder["first_slot"] + holder["num_slots"]]
    assert on_third or slots_in_use()[1] == 0, "the third device's chunks were not read"


def test_engine_written_size_tiered_volume_matches(kaitai_dump, tmp_path):
    """A volume the engine wrote with size-tiered compaction (LDS §4.2.5): level 0 holds
    chunks of several sub-chunks spanning slots (SPEC.md §8.4), overlapping each other. Every
    reader dumps it, reads every chunk and serves the state lds scan serves."""
    image = tmp_path / "tiered.img"

    def lds(*args, **kwargs):
        return subprocess.run([str(lds_bin()), *map(str, args)], check=True, capture_output=True, text=True, **kwargs)

    tiered = ("--technique", "size-tiered")
    lds("mkfs", "--size", "64MiB", "--sector-size", "512", "--slot-size", "64KiB",
        "--version-log-size", "256KiB", "--backup-log-size", "192KiB", image)
    for round in range(4):
        lines = "".join(f"key{(n * 7919 + round) % 40000:05}\tvalue-{round}-{'y' * (n % 60)}\n" for n in range(12000))
        lds("load", image, *tiered, "--format", "tsv", input=lines)
    for n in range(0, 40000, 97):
        lds("delete", image, f"key{n:05}", *tiered) if n % 5 == 0 else None
    lds("put", image, "last", "written", *tiered, "--sync")
    volume = compare(image, "size-tiered image")
    state = compare_state(image, "size-tiered image", volume)
    chunks = compare_chunks(image, "size-tiered image")
    assert chunks and any(len(doc["sub_chunks"]) > 1 for doc in chunks), "no chunk of several sub-chunks"
    assert all(doc["meta"]["level"] == 0 for doc in chunks), "a size-tiered chunk outside level 0"
    assert len(state) > 20000, "the state lost keys"


def test_engine_written_forest_volume_matches(kaitai_dump, tmp_path):
    """A volume the engine wrote with the split forest (SifrDB §4.1): its base versions name
    all 16 levels, trees of disjoint chunks sit in the stages' levels past the mkfs default of
    7. Every reader dumps it, reads every chunk and serves the state lds scan serves."""
    image = tmp_path / "forest.img"

    def lds(*args, **kwargs):
        return subprocess.run([str(lds_bin()), *map(str, args)], check=True, capture_output=True, text=True, **kwargs)

    forest = ("--technique", "forest")
    lds("mkfs", "--size", "64MiB", "--sector-size", "512", "--slot-size", "64KiB",
        "--version-log-size", "256KiB", "--backup-log-size", "192KiB", image)
    for round in range(6):
        keys = (round * 10000 + n if round % 2 == 0 else (n * 7919 + round) % 60000 for n in range(10000))
        lines = "".join(f"key{key:05}\tvalue-{round}-{'y' * (key % 60)}\n" for key in keys)
        lds("load", image, *forest, "--format", "tsv", input=lines)
    for n in range(0, 60000, 97):
        lds("delete", image, f"key{n:05}", *forest) if n % 5 == 0 else None
    lds("put", image, "last", "written", *forest, "--sync")
    volume = compare(image, "forest image")
    state = compare_state(image, "forest image", volume)
    chunks = compare_chunks(image, "forest image")
    assert chunks and max(doc["meta"]["level"] for doc in chunks) >= 7, "no tree past level 6"
    assert len(state) > 30000, "the state lost keys"


def test_engine_written_kv_separated_volume_matches(kaitai_dump, tmp_path):
    """A volume the engine wrote with key-value separation (format 1.4, SPEC.md §8.6): values of
    1 to 20 KiB moved to value chunks at flush, overwrites (some inline again) and deletes that
    leave garbage, values of 2 MiB and more spanning value chunks, reopens, and values too large
    for a batch of its (small) backup log written directly to value chunks that only the backup
    log names when the readers run. Every reader dumps it as lds does, and follows every pointer
    to the state lds scan serves; `lds dump value-chunks` checks every value chunk. Then one
    byte of a value a live pointer reaches is damaged: every reader and lds scan refuse it, and
    `lds dump value-chunks` names the value chunk whose digest fails."""
    import random

    image = tmp_path / "kv.img"

    def lds(*args, **kwargs):
        return subprocess.run([str(lds_bin()), *map(str, args)], check=True, capture_output=True, text=True, **kwargs)

    kv = ("--technique", "kv-separation")
    # A 256 KiB backup log: a value above about 61 KiB does not fit a batch of it, so it is
    # written to value chunks before its batch (SPEC.md §8.6, direct writes).
    lds("mkfs", "--value-chunks", "--size", "128MiB", "--backup-log-size", "256KiB", image)
    rng = random.Random(14)

    def value(n, low, high):
        return "".join(rng.choice("abcdefghijklmnop") for _ in range(16)) * (rng.randint(low, high) // 16) + f"-{n}"

    lds("load", image, *kv, "--format", "tsv",
        input="".join(f"key{n:05}\t{value(n, 1024, 20 << 10)}\n" for n in range(2500)))
    # Overwrites: most separated again, some small enough to stay inline (kind put).
    lds("load", image, *kv, "--format", "tsv",
        input="".join(f"key{n:05}\t{value(n, 16 if n % 4 == 0 else 1024, 12 << 10)}\n" for n in range(0, 2500, 3)))
    # Values of 2 MiB and more: several value chunks each (the slots are 2 MiB).
    lds("load", image, *kv, "--format", "tsv",
        input=f"big1\t{'Q' * ((2 << 20) + 300_000)}\nkey00007\t{value(7, 3 << 20, 3 << 20)}\n")
    lds("recover", image)
    for n in range(0, 2500, 61):
        lds("delete", image, f"key{n:05}", *kv)
    # The last writes stay in the backup log: two direct writes (one overwrites a key), one
    # inline value.
    lds("put", image, "direct", "D" * 100_000, *kv)
    lds("put", image, "key00010", value(10, 80_000, 80_000), *kv)
    lds("put", image, "last", "written", *kv, "--sync")

    volume = compare(image, "kv-separated volume")
    label = volume["labels"]["primary"]
    assert label["features_incompat"] & (8 | 64) == 8 | 64 and label["version_minor"] == 7, label
    assert any("value_footer" in slot for slot in volume["slots"]), "no slot holds a value chunk"
    objects = [o for log in ("version_log", "backup_log") for side in ("left", "right")
               for o in volume["instances"][0][log][side] if o["payload"] is not None]
    assert any(o["object_type"] == "delta_version" and o["payload"].get("values", {}).get("value_added")
               for o in objects), "no delta version adds a value chunk"
    assert any("value_refs" in c for o in objects for c in o["payload"].get("added", o["payload"].get("chunks", []))), \
        "no chunk metadata with value references"
    # The pointers of the batches recovery replays (live, above the version's last sequence).
    tree = json.loads(lds("dump", image, "tree", "--json").stdout)
    batch_pointers = [e["pointer"] for o in objects if o["object_type"] == "write_batch" and o["status"]["live"]
                      for i, e in enumerate(o["payload"]["entries"])
                      if e["kind"] == "pointer" and o["payload"]["first_sequence"] + i > tree["last_sequence"]]
    assert batch_pointers, "no pointer in a replayed write batch (no direct write)"

    state = compare_state(image, "kv-separated volume", volume)
    assert state is not None, "the readers cannot read the kv-separated volume"
    values = {bytes.fromhex(line["key"]): bytes.fromhex(line["value"]) for line in state if "key" in line}
    assert values[b"big1"] == b"Q" * ((2 << 20) + 300_000) and len(values[b"key00007"]) >= 3 << 20
    assert values[b"direct"] == b"D" * 100_000 and values[b"last"] == b"written"
    assert b"key00061" not in values and len(values) > 2400, f"{len(values)} keys"
    chunks = compare_chunks(image, "kv-separated volume")
    pointers = [e["pointer"] for c in chunks for s in c["sub_chunks"] for e in s["entries"] if e["kind"] == "pointer"]
    assert len(pointers) > 1000 and any(p["num_extents"] > 1 for p in pointers), "no pointer spans value chunks"

    # lds dump value-chunks: every value chunk of the version checks, with the live bytes the
    # chunks' value references give; the direct writes are pending (named by the backup log).
    listed = json.loads(lds("dump", image, "value-chunks", "--json").stdout)["instances"][0]
    live = {}
    for level in tree["levels"]:
        for c in level["chunks"]:
            for ref in c.get("value_refs", []):
                live[ref["value_chunk_id"]] = live.get(ref["value_chunk_id"], 0) + ref["bytes"]
    assert {c["value_chunk_id"]: c["live_bytes"] for c in listed["value_chunks"]} == live
    assert [c["value_chunk_id"] for c in tree["values"]["value_chunks"]] == sorted(live)
    assert all(c["status"] == {"footer": "ok", "digest": "ok"} for c in listed["value_chunks"] + listed["pending"])
    assert any(c["garbage_bytes"] > 0 for c in listed["value_chunks"]), "overwrites left no garbage"
    pending = {c["value_chunk_id"] for c in listed["pending"]}
    assert pending and pending == {x["value_chunk_id"] for p in batch_pointers for x in p["extents"]} - set(live)

    # Damage one byte of a value the version lists: its crc32c no longer holds.
    g = label["geometry"]
    by_id = {c["value_chunk_id"]: c for c in listed["value_chunks"]}
    newest = {}
    for e in (e for c in chunks for s in c["sub_chunks"] for e in s["entries"]):
        if e["key"] not in newest or newest[e["key"]]["seq"] < e["seq"]:
            newest[e["key"]] = e
    served = {line["key"]: line["sequence"] for line in state if "key" in line}
    entry = next(e for k, e in sorted(newest.items()) if e["kind"] == "pointer" and served.get(k) == e["seq"]
                 and e["pointer"]["extents"][0]["value_chunk_id"] in by_id)
    extent = entry["pointer"]["extents"][0]
    victim = by_id[extent["value_chunk_id"]]
    data = bytearray(image.read_bytes())
    data[g["ofs_slot_area"] + victim["slot"] * g["slot_size"] + extent["offset"]] ^= 0xFF
    damaged = tmp_path / "kv-damaged.img"
    damaged.write_bytes(bytes(data))
    assert compare_state(damaged, "kv-separated volume with a damaged value", volume) is None, \
        "a reader served a value whose crc32c does not hold"
    listed = json.loads(lds("dump", damaged, "value-chunks", "--json").stdout)["instances"][0]
    failed = [c["value_chunk_id"] for c in listed["value_chunks"] if c["status"]["digest"] != "ok"]
    assert failed == [victim["value_chunk_id"]], failed


def test_engine_written_triad_log_volume_matches(kaitai_dump, tmp_path):
    """A volume the engine wrote with TRIAD-LOG (format 1.6, SPEC.md §8.9): flushes wrote log
    chunks whose puts are log references into the backup log, level-0 merges turned the older
    ones into ordinary chunks, the backup log wrapped with the region the log chunks retain
    across the wrap, and the last writes wait in the backup log. `lds dump` shows the log
    chunks, their references and the retention start; every reader dumps the volume as lds
    does, reads every chunk, and follows every reference to the state lds scan serves. Then one
    byte of a batch that a served reference names is damaged: every reader and lds scan refuse
    the volume, and `lds dump chunk --resolve` names the references that no longer resolve."""
    image = tmp_path / "triad-log.img"

    def lds(*args, **kwargs):
        return subprocess.run([str(lds_bin()), *map(str, args)], check=True, capture_output=True, text=True, **kwargs)

    triad = ("--technique", "triad-log")
    # 4 MiB slots: a flush of a 4 MiB memtable is one chunk. A 32 MiB backup log retains up to
    # 16 MiB for log chunks (the rest is room for the next memtables) and wraps before the end.
    lds("mkfs", "--log-tables", "--size", "256MiB", "--sector-size", "512", "--slot-size", "4MiB",
        "--version-log-size", "1MiB", "--backup-log-size", "32MiB", image)
    lds("load", image, *triad, "--format", "tsv",
        input="".join(f"key{n * 7919 % 200000:06}\tvalue-{n}-{'x' * (20 + n * 37 % 90)}\n" for n in range(230000)))
    lds("load", image, *triad, "--format", "tsv",
        input="".join(f"key{(n * 104729 + 13) % 150000:06}\tround2-{n}-{'y' * (20 + n * 53 % 90)}\n" for n in range(30000)))
    for n in (5, 77, 1234):
        lds("delete", image, f"key{n:06}", *triad)
    lds("load", image, *triad, "--format", "tsv",
        input="".join(f"key{(n * 7 + 3) % 200000:06}\tround3-{n}-{'z' * (20 + n * 29 % 90)}\n" for n in range(100000)))
    lds("put", image, "last", "written", *triad, "--sync")

    # lds dump: the version holds log chunks (level 0, flag log_refs) whose entries are log
    # references, the retained region spans the backup log's wrap, and batches wait to replay.
    tree = json.loads(lds("dump", image, "tree", "--json").stdout)
    metas = [c for level in tree["levels"] for c in level["chunks"]]
    log_chunks = [c for c in metas if c["flags"] & 4]
    assert len(log_chunks) >= 2, f"the volume holds {len(log_chunks)} log chunks"
    assert all(c["level"] == 0 and "lsn_log_start" in c for c in log_chunks), log_chunks
    assert any(not c["flags"] & 4 for c in metas), "no ordinary chunk: no level-0 merge resolved references"
    assert tree["num_log_chunks"] == len(log_chunks)
    assert tree["lsn_retention_start"] == min(c["lsn_log_start"] for c in log_chunks) < tree["lsn_backup_start"]
    assert tree["ofs_retention_start"] > tree["ofs_backup_start"], "the retained region does not span the wrap"
    assert tree["retained_bytes"] == (32 << 20) - tree["ofs_retention_start"] + tree["ofs_backup_start"]
    backup = json.loads(lds("dump", image, "backup-log", "--json").stdout)
    assert backup["replayed_batches"] >= 1 and backup["retained_bytes"] == tree["retained_bytes"], backup
    retained = [o for o in backup["objects"] if o["status"]["retained"]]
    assert any(o["object_type"] == "wrap_left" for o in retained), "the WOL is not in the retained region"
    assert all(tree["lsn_retention_start"] <= o["lsn"] < tree["lsn_backup_start"] for o in retained)

    volume = compare(image, "triad-log volume")
    label = volume["labels"]["primary"]
    assert label["features_incompat"] & (32 | 64) == 32 | 64 and label["version_minor"] == 7, label
    assert volume["instances"][0]["status"]["retained_bytes"] == tree["retained_bytes"]
    state = compare_state(image, "triad-log volume", volume)
    assert state is not None, "the readers cannot read the triad-log volume"
    served = {line["key"]: line for line in state if "key" in line}
    assert len(served) > 130000 and bytes.fromhex(served["last".encode().hex()]["value"]) == b"written"
    assert "key000005".encode().hex() not in served, "a deleted key is served"
    chunks = compare_chunks(image, "triad-log volume")
    references = [(e, c["chunk_id"]) for c in chunks for s in c["sub_chunks"] for e in s["entries"]
                  if e["kind"] == "log_ref"]
    assert len(references) > 30000, f"{len(references)} log references"
    assert {chunk_id for _, chunk_id in references} == {c["chunk_id"] for c in log_chunks}
    # The newest versions of most keys are references: the readers followed them.
    newest = [e for e, _ in references if served.get(e["key"], {}).get("sequence") == e["seq"]]
    assert len(newest) > 20000, f"{len(newest)} served values come through log references"

    # lds dump chunk --resolve: every reference of a log chunk resolves to the value served.
    chunk_id = log_chunks[-1]["chunk_id"]
    resolved = json.loads(lds("dump", image, "chunk", chunk_id, "--resolve", "--json").stdout)
    entries = [e for s in resolved["sub_chunks"] for e in s["entries"] if e["kind"] == "log_ref"]
    assert entries and all(e["status"]["log_ref"] == "ok" for e in entries)
    for e in entries:
        assert len(e["resolved"]) == 2 * e["log_ref"]["len_value"], e
        if served.get(e["key"], {}).get("sequence") == e["seq"]:
            assert served[e["key"]]["value"] == e["resolved"], e

    # Damage one payload byte of a batch that a served reference names: its checksum fails,
    # so no reader may serve the values it holds, and lds refuses too.
    victim = newest[0]["log_ref"]
    g = label["geometry"]
    data = bytearray(image.read_bytes())
    data[g["ofs_backup_log"] + victim["ofs_object"] + 64 + 20] ^= 0x55
    damaged = tmp_path / "triad-log-damaged.img"
    damaged.write_bytes(bytes(data))
    assert compare_state(damaged, "triad-log volume with a damaged batch", volume) is None, \
        "a reader served a value from a batch whose checksum does not hold"
    owner = next(chunk_id for e, chunk_id in references if e["log_ref"]["ofs_object"] == victim["ofs_object"])
    resolved = json.loads(lds("dump", damaged, "chunk", owner, "--resolve", "--json").stdout)
    statuses = {e["log_ref"]["ofs_object"] == victim["ofs_object"]: e["status"]["log_ref"]
                for s in resolved["sub_chunks"] for e in s["entries"] if e["kind"] == "log_ref"}
    at = str(g["ofs_backup_log"] + victim["ofs_object"])
    assert "checksum" in statuses[True] and at in statuses[True], statuses
    assert statuses.get(False, "ok") == "ok", statuses


def test_first_device_label_copies_with_different_tables(kaitai_dump, tmp_path):
    """SPEC.md §4.3 and §15.1 rule 7 on the two states a crash during `lds device add` of a
    third device leaves. (a) The first device's backup label copy holds the new table (the
    third device in it, generation + 1), its primary the old one: the table is the copy with
    the higher generation, both copies read where they lie on the first device, and the
    backup copy is the address space's last sector, not where the primary's geometry puts it.
    (b) The third device is labeled, the first device's copies are old: the third device is
    not part of the volume and a reader given it leaves it out. Each time the other devices
    are given out of table order (the third before the second); every reader reads the volume
    as lds does (lds finds the devices beside the first)."""

    def lds(*args, **kwargs):
        return subprocess.run([str(lds_bin()), *map(str, args)], check=True, capture_output=True, text=True, **kwargs)

    built = tmp_path / "built"
    built.mkdir()
    first, second, third = (built / f"{name}.img" for name in ("first", "second", "third"))
    lds("mkfs", "--size", "2MiB", "--sector-size", "512", "--slot-size", "64KiB",
        "--version-log-size", "64KiB", "--backup-log-size", "16KiB", first)
    lds("device", "add", first, second, "--size", "1MiB")
    for rounds in range(1, 30):
        lines = "".join(f"key{n:05}\tvalue-{rounds}-{n}-{'x' * (n % 90)}\n" for n in range(2000 * rounds))
        lds("load", first, "--format", "tsv", input=lines)
        listed = json.loads(lds("device", "list", first, "--json").stdout)
        if listed["devices"][1]["slots_in_use"] > 0:
            break
    assert listed["devices"][1]["slots_in_use"] > 0, "no chunk reached the second device"
    before = {path.name: path.read_bytes() for path in (first, second)}
    lds("device", "add", first, third, "--size", "1MiB")
    after = {path.name: path.read_bytes() for path in (first, third)}
    sector = 512  # mkfs --sector-size above: the first device's backup copy is its last sector
    len_first = len(before["first.img"])

    def state(name, first_bytes):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "first.img").write_bytes(first_bytes)
        (folder / "second.img").write_bytes(before["second.img"])
        (folder / "third.img").write_bytes(after["third.img"])
        return folder / "first.img", [folder / "third.img", folder / "second.img"]

    # (a) Step 2 of the join interrupted after the backup copy: the rest is as before.
    spliced = bytearray(before["first.img"])
    spliced[len_first - sector:] = after["first.img"][len_first - sector:]
    image, devices = state("backup-copy-new", bytes(spliced))
    volume = compare(image, "first device's backup copy newer", devices)
    primary, backup = volume["labels"]["primary"], volume["labels"]["backup"]
    assert backup["generation"] == primary["generation"] + 1, (primary["generation"], backup["generation"])
    assert primary["devices"]["num_devices"] == 2 and backup["devices"]["num_devices"] == 3
    assert len(volume["slots"]) == backup["geometry"]["num_slots"] > primary["geometry"]["num_slots"]
    assert len(compare_state(image, "first device's backup copy newer", volume, devices)) > 2000
    compare_chunks(image, "first device's backup copy newer", devices)

    # (b) Step 1 done: the third device labeled, the first device's copies old.
    image, devices = state("third-labeled", before["first.img"])
    volume = compare(image, "a labeled device the table does not list", devices)
    assert volume["labels"]["primary"]["devices"]["num_devices"] == 2
    assert len(volume["slots"]) == volume["labels"]["primary"]["geometry"]["num_slots"]
    assert len(compare_state(image, "a labeled device the table does not list", volume, devices)) > 2000
    compare_chunks(image, "a labeled device the table does not list", devices)


def _state_by_key(image):
    """Every reader's `state` of a one-instance fixture, checked equal: (summary, {key: line})."""
    states = [run_reader(lang, "state", image) for lang in READERS]
    assert all(state == states[0] for state in states), "the readers disagree on the state"
    summary = states[0][0]
    return summary, {bytes.fromhex(line["key"]).decode(): line for line in states[0][1:]}


def test_spec_cases_read_as_spec_md_says(kaitai_dump, tmp_path):
    """The fixtures of crates/lds-fixtures/src/spec_cases.rs read as SPEC.md says, in every
    reader (the cross-check above holds them to lds scan too): an output that reuses a cleaned
    input's chunk id is read (§12, §15.1 step 4); the read cap is the last replayed sequence
    number (§15.1 step 6); sequence numbers past 2^30 in compact entries are exact (§15.1
    "Widths", the Java reader once cut them at 32 bits)."""
    fixtures = {}
    for name in ("d_journal_reused_slot", "f_sequence_read_cap", "d_large_sequences"):
        fixtures[name] = tmp_path / name
        fixtures[name].write_bytes(fixture_bytes(name))

    summary, state = _state_by_key(fixtures["d_journal_reused_slot"])
    # Chunk 3 is the output in slot 3 (the cleaned input 3 is not read), 10 the first output,
    # 5 and 6 the inputs read above the resume key; cleaned input 4's slot is zeroed.
    assert summary["chunks"] == [3, 5, 6, 10], summary
    keys = [f"key{n:05}" for n in range(60) if n % 7 != 6]
    assert [k for k in state if k.startswith("key")] == keys
    assert all(state[k]["value"] == f"new-{int(k[3:])}".encode().hex() for k in keys)

    summary, state = _state_by_key(fixtures["f_sequence_read_cap"])
    last = summary["last_sequence"]
    assert state["below-cap"]["sequence"] == last + 2 and state["zzz-at-cap"]["sequence"] == last + 4
    assert "above-cap" not in state
    assert state["older-version"]["sequence"] == 2
    assert state["replayed-1"] == dict(state["replayed-1"], sequence=last + 1, value=b"v-replayed-1".hex())

    summary, state = _state_by_key(fixtures["d_large_sequences"])
    assert {k: line["sequence"] for k, line in state.items()} == {
        "at-2^30": 1 << 30,
        "below-2^30": (1 << 30) - 1,
        "past-2^32": (1 << 32) + 5,
        "past-2^40": (1 << 40) + 7,
        "twice": (1 << 40) + 9,
    }
    assert summary["last_sequence"] == (1 << 40) + 8 and bytes.fromhex(state["twice"]["value"]) == b"replayed"


def test_large_volume_past_2_to_24_sequences(kaitai_dump, tmp_path):
    """A 3 GiB sparse volume (offsets past 2^31 and 2^32 bits of u4) whose chunks hold the
    newest version of keys at sequences on both sides of 2^24 (where 32-bit shifts of
    seq_kind wrap): every reader agrees with lds, sequence numbers included."""
    image = tmp_path / "large.img"
    with open(image, "wb") as f:
        f.truncate(3 << 30)
    run = lambda *args, **kw: subprocess.run([str(lds_bin()), *args], check=True, capture_output=True, **kw)  # noqa: E731
    run("mkfs", str(image))
    first = 16_777_000  # just below 2^24 = 16,777,216
    awk = "BEGIN{for(i=0;i<%d;i++) printf \"k%%05d\\tv%%d\\n\", i%%20000, i}" % first
    gen = subprocess.Popen(["awk", awk], stdout=subprocess.PIPE)
    run("load", str(image), "--format", "tsv", stdin=gen.stdout)
    assert gen.wait() == 0
    run("recover", str(image))
    run("load", str(image), "--format", "tsv", input="".join(f"k{n:05}\tw{n}\n" for n in range(1000)).encode())
    run("recover", str(image))
    run("put", str(image), "after", "the-flush", "--sync")
    volume = compare(image, "3 GiB volume")
    assert volume["labels"]["backup"]["geometry"]["volume_len"] == 3 << 30
    state = compare_state(image, "3 GiB volume", volume)
    chunks = compare_chunks(image, "3 GiB volume")
    assert any(e["seq"] > 1 << 24 for c in chunks for s in c["sub_chunks"] for e in s["entries"])
    above = [line for line in state if "key" in line and line["sequence"] > 1 << 24]
    below = [line for line in state if "key" in line and line["sequence"] < 1 << 24]
    assert len(above) > 700 and len(below) > 10000, f"{len(above)} keys above 2^24, {len(below)} below"


# Damaged images: each case changes a few bytes of a fixture so that one rule
# of SPEC.md §5 to §8 or §15 decides what a reader shows; the two readers must
# still agree, and lds dump must show what the rule says. Each case is
# (fixture, damage, check): `damage(data, doc)` edits `data` (a bytearray of
# the image) using `doc`, the Kaitai document of the undamaged image, and
# returns (description, target); `check(lds_doc, target)` asserts the rule's
# outcome. A target (log, index) names an object of instance 0's left walk.


def _area(doc, instance, log):
    g = doc["labels"]["primary"]["geometry"]
    if log == "version_log":
        return g["ofs_version_log"] + instance * g["len_version_log"], g["len_version_log"]
    return g["ofs_backup_log"] + instance * g["len_backup_log"], g["len_backup_log"]


def _find(doc, log, pred):
    """Device offset, OBJECT and index of the first object of instance 0's
    left walk of `log` that matches `pred`."""
    start, _ = _area(doc, 0, log)
    for index, obj in enumerate(doc["instances"][0][log]["left"]):
        if pred(obj):
            return start + obj["log_offset"], obj, index
    pytest.fail(f"the fixture has no {log} object to damage (the fixtures changed?)")


def _put(data, ofs, fmt, value):
    struct.pack_into("<" + fmt, data, ofs, value)


def _is_dv(obj):
    return obj["object_type"] == "delta_version"


def _target(lds, target):
    log, index = target
    return lds["instances"][0][log]["left"][index]


def chk_payload_null(lds, target):
    assert _target(lds, target)["payload"] is None


def dmg_unknown_type(data, doc):
    ofs, _, index = _find(doc, "version_log", _is_dv)
    data[ofs + 8] = 9
    return "object_type 9: listed as unknown_9 with a null payload", ("version_log", index)


def chk_unknown_type(lds, target):
    obj = _target(lds, target)
    assert obj["object_type"] == "unknown_9" and obj["payload"] is None


def dmg_misdirected(data, doc):
    ofs, obj, index = _find(doc, "version_log", _is_dv)
    _put(data, ofs + 32, "Q", obj["log_offset"] + 8)
    return "header log_offset 8 past where the object is", ("version_log", index)


def chk_misdirected(lds, target):
    obj = _target(lds, target)
    # log_offset is the position (the cross-check compares it with the walk's)
    assert _is_dv(obj) and obj["status"]["valid"] is False


def dmg_dv_reserved(data, doc):
    ofs, _, index = _find(doc, "version_log", _is_dv)
    data[ofs + 64 + 44] = 1
    return "delta version reserved bytes 44..48 not zero: payload null", ("version_log", index)


def dmg_trailing_byte(data, doc):
    ofs, obj, index = _find(doc, "version_log", lambda o: _is_dv(o) and (64 + o["len_payload"]) % 8 != 0)
    _put(data, ofs + 40, "I", obj["len_payload"] + 1)
    data[ofs + 64 + obj["len_payload"]] = 0
    return "delta version with one trailing zero byte: payload null", ("version_log", index)


def dmg_chunk_level(data, doc):
    ofs, _, index = _find(
        doc,
        "version_log",
        lambda o: _is_dv(o)
        and o["payload"]["num_deleted"] == 0
        and o["payload"]["num_compact_pointers"] == 0
        and o["payload"]["num_added"] >= 1,
    )
    data[ofs + 64 + 48 + 8] = 16
    return "added chunk metadata at level 16 (SPEC.md §16): payload null", ("version_log", index)


def dmg_cleaned_not_input(data, doc):
    ofs, obj, index = _find(
        doc, "version_log", lambda o: o["object_type"] == "compaction_journal" and o["payload"]["num_cleaned"] >= 1
    )
    p = obj["payload"]
    at = ofs + 64 + 26 + len(p["resume_key"]) // 2 + 8 * p["num_inputs"]
    assert struct.unpack_from("<Q", data, at)[0] == p["cleaned"][0]
    _put(data, at, "Q", 0xFFFF_FFFF)
    return "compaction journal cleaning a chunk that is not an input (SPEC.md §6.3)", ("version_log", index)


def dmg_delete_with_value(data, doc):
    ofs, _, index = _find(
        doc, "backup_log", lambda o: o["object_type"] == "write_batch" and o["payload"]["entries"][0]["value"]
    )
    data[ofs + 64 + 16] = 0
    return "write batch entry turned into a delete that keeps its value (SPEC.md §7)", ("backup_log", index)


def dmg_gap_before_wor(data, doc):
    """Removes the magic of the object before the WOR of the backup log, at a
    position that is not sector-aligned: the walk moves once to the next
    sector boundary and finds the WOR (SPEC.md §15)."""
    sector = doc["labels"]["primary"]["geometry"]["sector_size"]
    ofs, wor, index = _find(doc, "backup_log", lambda o: o["object_type"] == "wrap_right")
    before = doc["instances"][0]["backup_log"]["left"][index - 1]
    assert before["log_offset"] % sector != 0, "the object before the WOR is sector-aligned"
    assert -(-before["log_offset"] // sector) * sector == wor["log_offset"], (
        "the WOR is not at the first sector boundary after the object before it"
    )
    data[ofs - wor["log_offset"] + before["log_offset"]] = 0
    what = f"magic of the object at {before['log_offset']} before the WOR at {wor['log_offset']} removed"
    return what, ("backup_log", index - 1)


def chk_gap_before_wor(lds, target):
    obj = _target(lds, target)
    assert obj["object_type"] == "wrap_right"


def dmg_len_past_area(data, doc):
    ofs, _, index = _find(doc, "version_log", _is_dv)
    _, len_area = _area(doc, 0, "version_log")
    _put(data, ofs + 40, "I", len_area)
    return "len_payload larger than the area: the walk stops before it", ("version_log", index)


def chk_len_past_area(lds, target):
    log, index = target
    assert len(lds["instances"][0][log]["left"]) == index


def dmg_wol_beyond_area(data, doc):
    ofs, _, index = _find(doc, "version_log", lambda o: o["object_type"] == "wrap_left")
    _, len_area = _area(doc, 0, "version_log")
    _put(data, ofs + 64, "Q", len_area + 4096)
    return "WOL ofs_first_live past the area: no right portion", ("version_log", index)


def chk_wol_beyond_area(lds, target):
    assert _target(lds, target)["payload"]["ofs_first_live"] > 0
    assert lds["instances"][0]["version_log"]["right"] == []


def dmg_footer_version(data, doc):
    g = doc["labels"]["primary"]["geometry"]
    slot = next(s["slot"] for s in doc["slots"] if s["footer"])
    _put(data, g["ofs_slot_area"] + (slot + 1) * g["slot_size"] - 160 + 8, "H", 2)
    return f"slot {slot}: footer version_major 2 (still shown: the magic is there)", slot


def chk_footer_version(lds, slot):
    assert lds["slots"][slot]["footer"]["version_major"] == 2


DAMAGE = {
    "unknown_object_type": ("d_versions", dmg_unknown_type, chk_unknown_type),
    "misdirected_log_offset": ("d_versions", dmg_misdirected, chk_misdirected),
    "delta_version_reserved": ("d_versions", dmg_dv_reserved, chk_payload_null),
    "trailing_payload_byte": ("d_versions", dmg_trailing_byte, chk_payload_null),
    "chunk_meta_level_16": ("d_versions", dmg_chunk_level, chk_payload_null),
    "cleaned_not_an_input": ("d_journal", dmg_cleaned_not_input, chk_payload_null),
    "delete_with_value": ("d_versions", dmg_delete_with_value, chk_payload_null),
    "gap_before_wor": ("d_wrapped", dmg_gap_before_wor, chk_gap_before_wor),
    "len_payload_past_area": ("d_versions", dmg_len_past_area, chk_len_past_area),
    "wol_first_live_past_area": ("d_wrapped", dmg_wol_beyond_area, chk_wol_beyond_area),
    "footer_other_version": ("d_versions", dmg_footer_version, chk_footer_version),
}


@pytest.mark.parametrize("case", sorted(DAMAGE))
def test_kaitai_matches_lds_dump_on_damaged_image(case, kaitai_dump, tmp_path):
    fixture, damage, check = DAMAGE[case]
    if not (ROOT / "fixtures" / fixture / "image.gz").is_file():
        pytest.fail(f"fixture {fixture} is missing")
    pristine = fixture_bytes(fixture)
    data = bytearray(pristine)
    what, target = damage(data, kaitai_dump.volume_json(pristine))
    assert bytes(data) != pristine, f"{case}: the damage changed nothing"
    image = tmp_path / "damaged.img"
    image.write_bytes(bytes(data))
    lds = compare(image, f"{fixture} with {what}")
    check(lds, target)


def test_no_filter_encoding(kaitai_dump, tmp_path):
    """A chunk whose filter is the "no filter" encoding of SPEC.md §8.3 (num_probes 0,
    num_bits 0): lds reads it, and so must every reader. The engine writes it with
    bloom_bits_per_key 0; here a fixture's chunk is rewritten to it, index moved and
    checksums recomputed."""
    data = bytearray(fixture_bytes("d_versions"))
    volume = kaitai_dump.volume_json(bytes(data))
    g = volume["labels"]["primary"]["geometry"]
    live = {s["slot"] for _, c in kaitai_dump.chunk_docs(io.BytesIO(bytes(data))) for s in c["sub_chunks"]}
    slot = next(s for s in volume["slots"] if s["slot"] in live)
    base = g["ofs_slot_area"] + slot["slot"] * g["slot_size"]
    footer = base + g["slot_size"] - 160
    f = slot["footer"]
    index = bytes(data[base + f["ofs_index"]:base + f["ofs_index"] + f["len_index"]])
    ofs_filter = g["slot_size"] - 160 - 8
    ofs_index = ofs_filter - len(index)
    data[base + ofs_index:base + ofs_filter] = index
    data[base + ofs_filter:base + ofs_filter + 8] = bytes(8)
    _put(data, footer + 60, "I", ofs_index)
    _put(data, footer + 72, "I", ofs_filter)
    _put(data, footer + 76, "I", 8)
    _put(data, footer + 80, "I", kaitai_dump.crc32c(bytes(8)))
    _put(data, footer + 156, "I", kaitai_dump.crc32c(bytes(data[footer:footer + 156])))
    image = tmp_path / "no_filter.img"
    image.write_bytes(bytes(data))
    dumped = json.loads(run_lds("dump", image, "chunk", slot["slot"], "--entries", "--json").stdout)
    assert dumped["sub_chunks"][0]["filter"] == {"num_probes": 0, "num_bits": 0}, "the rewrite did not take"
    volume = compare(image, "chunk with no filter")
    assert compare_state(image, "chunk with no filter", volume) is not None
    chunks = compare_chunks(image, "chunk with no filter")
    assert chunks is not None, "the readers cannot read a chunk with no filter"
    assert any(s["filter"]["num_bits"] == 0 for c in chunks for s in c["sub_chunks"])
