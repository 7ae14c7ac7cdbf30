#!/usr/bin/env python3
"""Print an LDS volume as `lds dump IMAGE volume --json` does, read with Kaitai.

usage: python3 tools/kaitai/lds_kaitai_dump.py IMAGE[.gz] [--compact]

The volume is parsed by the Python code generated from formats/*.ksy
(tools/kaitai/compile.sh writes it to tools/kaitai/generated/), and printed in
the `what: "volume"` schema of docs/dump-json.md, without `status` keys: this
reader computes no checksum and judges no liveness. It is an independent
reader of SPEC.md, used to cross-check `lds dump` (tools/tests/).

As in docs/dump-json.md: a label or chunk footer is shown whenever its magic
is there (else null); an OBJECT's `log_offset` is the position where the
physical walk (SPEC.md §15) found it; a payload that does not parse under the
rules formats/*.ksy check (reserved bytes, ranges, counts and lengths inside
the payload, no trailing bytes) is null, as is that of an unknown type.

Without checksums, the label copy whose geometry is used is chosen by every
rule of SPEC.md §4.2 but the crc32c: on a volume where one copy has a bad
crc32c but otherwise consistent fields, this reader may use it where lds
would not.
"""

import argparse
import enum
import gzip
import io
import json
import os
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join(HERE, "generated")


def _load_parser():
    if not os.path.isfile(os.path.join(GENERATED, "lds_volume.py")):
        sys.exit(f"{GENERATED}/lds_volume.py is missing: run tools/kaitai/compile.sh first")
    if GENERATED not in sys.path:
        sys.path.insert(0, GENERATED)
    import lds_volume  # noqa: E402  (generated)
    return lds_volume


def open_image(path):
    """A binary stream over a raw volume image, or over a gzip-compressed one
    (*.gz, decompressed into memory)."""
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return io.BytesIO(f.read())
    return open(path, "rb")


def _hex(b):
    return bytes(b).hex()


def _uuid(b):
    return str(uuid.UUID(bytes=bytes(b)))


def _ascii(b):
    return bytes(b).decode("ascii", errors="replace")


def _enum_name(v):
    return v.name if isinstance(v, enum.Enum) else f"unknown_{int(v)}"


def _int(v):
    return int(v.value) if isinstance(v, enum.Enum) else int(v)


def geometry_json(g):
    return {
        "volume_uuid": _uuid(g.volume_uuid),
        "sector_size": g.sector_size,
        "instance_count": g.instance_count,
        "volume_len": g.volume_len,
        "ofs_version_log": g.ofs_version_log,
        "len_version_log": g.len_version_log,
        "ofs_backup_log": g.ofs_backup_log,
        "len_backup_log": g.len_backup_log,
        "ofs_slot_area": g.ofs_slot_area,
        "slot_size": g.slot_size,
        "num_slots": g.num_slots,
    }


def label_json(lb):
    if lb is None:
        return None
    return {
        "magic": _ascii(lb.magic),
        "version_major": lb.version_major,
        "version_minor": lb.version_minor,
        "len_label": lb.len_label,
        "features_compat": lb.features_compat,
        "features_ro_compat": lb.features_ro_compat,
        "features_incompat": lb.features_incompat,
        "geometry": geometry_json(lb.geometry),
        "generation": lb.generation,
        "volume_name": bytes(lb.volume_name).decode("utf-8", errors="replace"),
        "crc32c": lb.crc32c,
    }


def chunk_meta_json(m):
    return {
        "chunk_id": m.chunk_id,
        "level": m.level,
        "flags": m.flags,
        "num_sub_chunks": m.num_sub_chunks,
        "num_entries": m.num_entries,
        "smallest_seq": m.smallest_seq,
        "largest_seq": m.largest_seq,
        "len_data": m.len_data,
        "smallest_key": _hex(m.smallest_key),
        "largest_key": _hex(m.largest_key),
        "sub_chunks": [{"slot": s.slot, "digest": _hex(s.digest)} for s in m.sub_chunks],
    }


def _compact_pointers(ps):
    return [{"level": p.level, "key": _hex(p.key)} for p in ps]


def payload_json(kind, p):
    """`kind` is the object_type name; `p` the decoded payload."""
    if kind == "base_version":
        return {
            "geometry": geometry_json(p.geometry),
            "instance": p.instance,
            "num_levels": p.num_levels,
            "last_sequence": p.last_sequence,
            "label_generation": p.label_generation,
            "ofs_backup_start": p.ofs_backup_start,
            "lsn_backup_start": p.lsn_backup_start,
            "num_chunks": p.num_chunks,
            "num_compact_pointers": p.num_compact_pointers,
            "compact_pointers": _compact_pointers(p.compact_pointers),
            "chunks": [chunk_meta_json(c) for c in p.chunks],
        }
    if kind == "delta_version":
        return {
            "last_sequence": p.last_sequence,
            "ofs_backup_start": p.ofs_backup_start,
            "lsn_backup_start": p.lsn_backup_start,
            "compaction_id": p.compaction_id,
            "num_deleted": p.num_deleted,
            "num_added": p.num_added,
            "num_compact_pointers": p.num_compact_pointers,
            "deleted": [{"chunk_id": d.chunk_id, "level": d.level} for d in p.deleted],
            "compact_pointers": _compact_pointers(p.compact_pointers),
            "added": [chunk_meta_json(c) for c in p.added],
        }
    if kind == "compaction_journal":
        return {
            "compaction_id": p.compaction_id,
            "source_level": p.source_level,
            "target_level": p.target_level,
            "num_inputs": p.num_inputs,
            "num_outputs": p.num_outputs,
            "num_cleaned": p.num_cleaned,
            "resume_key": _hex(p.resume_key),
            "inputs": list(p.inputs),
            "cleaned": [c.chunk_id for c in p.cleaned],
            "outputs": [chunk_meta_json(c) for c in p.outputs],
        }
    if kind == "write_batch":
        return {
            "first_sequence": p.first_sequence,
            "num_entries": p.num_entries,
            "entries": [
                {"kind": _enum_name(e.kind), "key": _hex(e.key), "value": _hex(e.value)}
                for e in p.entries
            ],
        }
    if kind == "wrap_left":
        return {"ofs_first_live": p.ofs_first_live, "lsn_first_live": p.lsn_first_live}
    if kind == "wrap_right":
        return {}
    return None  # unknown object type


def object_json(o, position):
    """The OBJECT of docs/dump-json.md for the object `o` the walk found at
    `position` of its area. `log_offset` is that position, as lds dump prints
    it; it equals the header field for every valid object (SPEC.md §5)."""
    kind = _enum_name(o.object_type)
    try:
        payload = payload_json(kind, o.payload)
    except Exception:  # noqa: BLE001 - a payload that does not decode is null
        payload = None
    return {
        "log_offset": position,
        "magic": _ascii(o.magic),
        "header_crc32c": o.header_crc32c,
        "object_type": kind,
        "log_kind": _int(o.log_kind),
        "flags": o.flags,
        "instance": o.instance,
        "sn": o.sn,
        "lsn": o.lsn,
        "len_payload": o.len_payload,
        "payload_crc32c": o.payload_crc32c,
        "volume_uuid": _uuid(o.volume_uuid),
        "payload": payload,
    }


def _walk(steps):
    return [object_json(s.log_object, s.ofs_object) for s in (steps or []) if s.is_object]


def log_area_json(area):
    if area is None:  # the area does not lie inside the device
        return {"left": [], "right": []}
    return {"left": _walk(area.left), "right": _walk(area.right)}


def footer_json(f):
    if f is None:
        return None
    return {
        "magic": _ascii(f.magic),
        "version_major": f.version_major,
        "level": f.level,
        "flags": f.flags,
        "instance": f.instance,
        "chunk_id": f.chunk_id,
        "sub_chunk_index": f.sub_chunk_index,
        "num_sub_chunks": f.num_sub_chunks,
        "num_blocks": f.num_blocks,
        "num_entries": f.num_entries,
        "smallest_seq": f.smallest_seq,
        "largest_seq": f.largest_seq,
        "len_body": f.len_body,
        "ofs_index": f.ofs_index,
        "len_index": f.len_index,
        "index_crc32c": f.index_crc32c,
        "ofs_filter": f.ofs_filter,
        "len_filter": f.len_filter,
        "filter_crc32c": f.filter_crc32c,
        "slot_size": f.slot_size,
        "volume_uuid": _uuid(f.volume_uuid),
        "digest": _hex(f.digest),
        "footer_crc32c": f.footer_crc32c,
    }


def volume_json(image, device=None):
    """The `what: "volume"` document (docs/dump-json.md) of `image`: the bytes
    of a volume, or a binary stream over them."""
    lds_volume = _load_parser()
    from kaitaistruct import KaitaiStream

    if isinstance(image, (bytes, bytearray)):
        image = io.BytesIO(image)
    vol = lds_volume.LdsVolume(KaitaiStream(image))
    doc = {"schema": "lds-dump/1", "what": "volume"}
    if device is not None:
        doc["device"] = device
    doc["labels"] = {"primary": label_json(vol.primary), "backup": label_json(vol.backup)}
    instances = []
    for i, area in enumerate(vol.instance_areas or []):
        instances.append({
            "instance": i,
            "version_log": log_area_json(area.version_log),
            "backup_log": log_area_json(area.backup_log),
        })
    doc["instances"] = instances
    doc["slots"] = [
        {"slot": s.slot, "footer": footer_json(s.footer)} for s in (vol.slots or [])
    ]
    return doc


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("image", help="raw volume image, or a gzip-compressed one (*.gz)")
    ap.add_argument("--compact", action="store_true", help="print on one line")
    args = ap.parse_args(argv)
    with open_image(args.image) as f:
        doc = volume_json(f, device=args.image)
    json.dump(doc, sys.stdout, indent=None if args.compact else 2)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
