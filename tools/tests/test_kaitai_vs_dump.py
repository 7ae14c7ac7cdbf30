"""Cross-checks `lds dump IMAGE volume --json` against the Kaitai definitions.

For every fixture image `fixtures/*/image.gz`, the JSON printed by the lds binary
(env LDS_BIN, default target/release/lds; a relative path is taken from the
repository root) must equal, field by field, the JSON that
tools/kaitai/lds_kaitai_dump.py builds with the parser generated from
formats/*.ksy. Keys named `status` (lds annotations) and `device` are ignored.
The same holds for a few damaged copies of the fixtures (DAMAGE below), each
exercising one rule that decides what a reader shows.

Run: pip install -r tools/requirements.txt && pytest tools/tests
"""

import gzip
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KAITAI = ROOT / "tools" / "kaitai"
# The golden images (f_ fixtures are corrupt on purpose: fsck's tests read them).
FIXTURES = sorted(ROOT.glob("fixtures/d_*/image.gz"))
IGNORED_KEYS = {"status", "device"}


def lds_bin():
    path = Path(os.environ.get("LDS_BIN", "target/release/lds"))
    return path if path.is_absolute() else ROOT / path


@pytest.fixture(scope="session")
def kaitai_dump():
    """Compiles formats/*.ksy (tools/kaitai/compile.sh), then imports the reader."""
    run = subprocess.run(
        ["bash", str(KAITAI / "compile.sh")], cwd=ROOT, capture_output=True, text=True
    )
    assert run.returncode == 0, (
        f"tools/kaitai/compile.sh failed (exit {run.returncode}):\n{run.stdout}{run.stderr}"
    )
    sys.path.insert(0, str(KAITAI))
    import lds_kaitai_dump

    return lds_kaitai_dump


def test_every_ksy_compiles(kaitai_dump):
    ksy = sorted(ROOT.glob("formats/*.ksy"))
    assert ksy, "no formats/*.ksy found"
    missing = [k.name for k in ksy if not (KAITAI / "generated" / (k.stem + ".py")).is_file()]
    assert not missing, f"compile.sh produced no Python module for: {missing}"


def test_fixtures_exist():
    assert FIXTURES, (
        f"no fixture images found: expected gzip-compressed volume images at "
        f"{ROOT}/fixtures/*/image.gz; the Kaitai cross-check compared nothing"
    )


def first_difference(expected, actual, path="$"):
    """The first difference between two JSON values, ignoring IGNORED_KEYS, or None.

    `expected` is lds's document, `actual` the Kaitai one; the walk follows
    lds's key order. Returns a message naming the JSON path and both values.
    """
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in expected:
            if key in IGNORED_KEYS:
                continue
            if key not in actual:
                return f"{path}.{key}: lds dump = {json.dumps(expected[key])[:200]}, kaitai: key missing"
            diff = first_difference(expected[key], actual[key], f"{path}.{key}")
            if diff:
                return diff
        for key in actual:
            if key not in IGNORED_KEYS and key not in expected:
                return f"{path}.{key}: lds dump: key missing, kaitai = {json.dumps(actual[key])[:200]}"
        return None
    if isinstance(expected, list) and isinstance(actual, list):
        for i, (e, a) in enumerate(zip(expected, actual)):
            diff = first_difference(e, a, f"{path}[{i}]")
            if diff:
                return diff
        if len(expected) != len(actual):
            return f"{path}: lds dump has {len(expected)} items, kaitai has {len(actual)}"
        return None
    # bool is an int in Python: compare types too, so that true != 1
    if type(expected) is not type(actual) or expected != actual:
        return f"{path}: lds dump = {json.dumps(expected)}, kaitai = {json.dumps(actual)}"
    return None


def compare(data, tmp_path, kaitai_dump, what):
    """Runs both readers on the image bytes `data`; returns lds's document and
    fails the test at their first difference."""
    binary = lds_bin()
    assert binary.is_file(), f"lds binary not found at {binary} (build it, or set LDS_BIN)"
    image = tmp_path / "image"
    image.write_bytes(data)
    run = subprocess.run(
        [str(binary), "dump", str(image), "volume", "--json"], capture_output=True, text=True
    )
    try:
        expected = json.loads(run.stdout)
    except json.JSONDecodeError as e:
        pytest.fail(
            f"`lds dump {image} volume --json` printed no JSON ({e}); exit {run.returncode}\n"
            f"stderr:\n{run.stderr}"
        )
    actual = kaitai_dump.volume_json(data)

    diff = first_difference(expected, actual)
    assert diff is None, f"{what}: first difference at {diff}"
    return expected


def fixture_bytes(name):
    return gzip.decompress((ROOT / "fixtures" / name / "image.gz").read_bytes())


@pytest.mark.parametrize("image_gz", FIXTURES, ids=[p.parent.name for p in FIXTURES])
def test_kaitai_matches_lds_dump(image_gz, kaitai_dump, tmp_path):
    data = gzip.decompress(image_gz.read_bytes())
    compare(data, tmp_path, kaitai_dump, str(image_gz.relative_to(ROOT)))


def test_engine_written_image_matches(kaitai_dump, tmp_path):
    """An image written by the engine itself (mkfs, then load, puts and deletes through
    the lds binary, with logs small enough to wrap) reads the same in both readers."""
    binary = str(lds_bin())
    image = tmp_path / "engine.img"
    run = lambda *args, **kwargs: subprocess.run([binary, *args], check=True, capture_output=True, text=True, **kwargs)
    run("mkfs", "--size", "8MiB", "--sector-size", "512", "--slot-size", "64KiB",
        "--version-log-size", "64KiB", "--backup-log-size", "16KiB", "--uuid", "0" * 31 + "1", str(image))
    lines = "".join(f"key{n:05}\tvalue-{n}-{'x' * (n % 90)}\n" for n in range(3000))
    run("load", str(image), "--format", "tsv", input=lines)
    for n in range(0, 3000, 7):
        run("delete", str(image), f"key{n:05}")
    run("put", str(image), "last", "written", "--sync")
    expected = compare(image.read_bytes(), tmp_path, kaitai_dump, "engine-written image")
    walked = expected["instances"][0]["version_log"]["left"]
    assert any(o["object_type"] == "delta_version" for o in walked), "the engine committed no delta version"
    assert any(s["footer"] is not None for s in expected["slots"]), "the engine wrote no chunk"


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
    lds = compare(bytes(data), tmp_path, kaitai_dump, f"{fixture} with {what}")
    check(lds, target)
