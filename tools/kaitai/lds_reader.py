#!/usr/bin/env python3
"""Read an LDS volume with the Python parsers generated from formats/*.ksy.

usage: python3 tools/kaitai/lds_reader.py volume IMAGE[.gz] [DEVICE[.gz]...]
       python3 tools/kaitai/lds_reader.py chunks IMAGE[.gz] [DEVICE[.gz]...]
       python3 tools/kaitai/lds_reader.py state IMAGE[.gz] [DEVICE[.gz]...]

`volume` prints the volume as `lds dump IMAGE volume --json` does (docs/dump-json.md, without
`status` keys), through the projection of tools/kaitai/view.json. `chunks` prints, one per
line, the `lds dump IMAGE chunk ID --instance I --entries --json` document of every live chunk
of every instance, with an `instance` key added. `state` reconstructs what
the engine serves (SPEC.md §15.1) and prints it as NDJSON: per instance, one line naming its
live version (with its retention start, SPEC.md §8.9), then one line per live key in key
order; the value of a pointer entry (format 1.4, SPEC.md §8.6) is read from its value chunks,
the value of a log reference (format 1.6, SPEC.md §8.9) from the write batch it names in the
backup log. A volume of several devices (SPEC.md
§4.3) is read with IMAGE its first device and every other device after it, in any order.

This reader and its JavaScript and Java twins (tools/kaitai/js, tools/kaitai/java) use only
the generated parsers and the few rules SPEC.md §15.1 lists; tools/tests checks that all three
agree with `lds dump` and `lds scan` on every fixture.
"""

import gzip
import io
import json
import math
import os
import sys
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
GENERATED = os.path.join(HERE, "generated", "python")
VIEW = json.load(open(os.path.join(HERE, "view.json")))


def _load_parser():
    if not os.path.isfile(os.path.join(GENERATED, "lds_volume.py")):
        sys.exit(f"{GENERATED}/lds_volume.py is missing: run tools/kaitai/compile.sh first")
    if GENERATED not in sys.path:
        sys.path.insert(0, GENERATED)
    import lds_volume  # noqa: E402  (generated)

    return lds_volume


def open_image(path):
    """A binary stream over a raw volume image, or over a gzip-compressed one (*.gz)."""
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            return io.BytesIO(f.read())
    return open(path, "rb")


# ---- a volume of several devices: its address space (SPEC.md §4.3, §15.1 rule 7) ----

def _label_at(stream, ofs):
    """The label at `ofs` when it passes every check but the crc32c, else None."""
    import lds_label
    from kaitaistruct import KaitaiStream

    stream.seek(0, io.SEEK_END)
    if ofs < 0 or ofs + 512 > stream.tell():
        return None
    stream.seek(ofs)
    data = stream.read(512)
    if data[:8] != b"LDSLABEL":
        return None
    try:
        label = lds_label.LdsLabel(KaitaiStream(io.BytesIO(data)))
        return label if label.is_valid_except_crc else None
    except Exception:  # noqa: BLE001 - a label that does not parse
        return None


def _this_len(label):
    """The bytes of its device the label gives the volume (its backup label ends them)."""
    g = label.geometry
    if not label.has_devices:
        return g.volume_len
    own = bytes(label.devices.device_uuid)
    entry = next((d for d in label.devices.devices if bytes(d.device_uuid) == own), None)
    return entry.len_device if entry else g.volume_len


def device_label(stream):
    """A device's label as SPEC.md §4.2 chooses it without the crc32c: the primary, or the
    backup in the last sector of the bytes the primary gives the device (found by probing the
    device's end without a primary), the higher generation winning."""
    primary = _label_at(stream, 0)
    stream.seek(0, io.SEEK_END)
    size = stream.tell()
    if primary is not None:
        backup = _label_at(stream, _this_len(primary) - primary.geometry.sector_size)
    else:
        backup = next((b for s in (512 << i for i in range(8))
                       for b in [_label_at(stream, size - s)] if b is not None and b.geometry.sector_size == s), None)
    if primary is None or (backup is not None and backup.generation > primary.generation):
        return backup
    return primary


class AddressSpace(io.RawIOBase):
    """The volume's address space over its devices (SPEC.md §4.3): `extents` are
    (volume offset, length, device stream, device offset); bytes of no device read as zeros."""

    def __init__(self, size, extents):
        super().__init__()
        self.size, self.extents, self.pos = size, sorted(extents, key=lambda e: e[0]), 0

    def readable(self):
        return True

    def seekable(self):
        return True

    def seek(self, offset, whence=io.SEEK_SET):
        self.pos = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence] + offset
        return self.pos

    def tell(self):
        return self.pos

    def readinto(self, buffer):
        n = max(0, min(len(buffer), self.size - self.pos))
        out = bytearray(n)
        for start, length, stream, ofs in self.extents:
            lo, hi = max(start, self.pos), min(start + length, self.pos + n)
            if lo < hi:
                stream.seek(ofs + lo - start)
                out[lo - self.pos:hi - self.pos] = stream.read(hi - lo)
        buffer[:n] = out
        self.pos += n
        return n


def open_volume(paths):
    """The volume of `paths` (the first device first, the others in any order): a stream over
    one device, or over the address space of several (SPEC.md §4.3, §15.1 rule 7), which
    carries `ofs_first_device_backup` for `parse_volume`."""
    first = open_image(paths[0])
    _load_parser()
    # The device table is the first device's copy that §4.2 chooses on that device.
    label = device_label(first)
    if label is None or not label.has_devices:
        return first
    g, table = label.geometry, label.devices
    by_uuid = {}
    for path in paths[1:]:
        stream = open_image(path)
        own = device_label(stream)
        # A device another volume's, or one the table does not list (removed, or joining when
        # a crash came), is left out.
        if own is not None and own.has_devices and bytes(own.geometry.volume_uuid) == bytes(g.volume_uuid):
            by_uuid[bytes(own.devices.device_uuid)] = stream
    entries = list(table.devices)
    extents = [(0, g.ofs_slot_area + entries[0].num_slots * g.slot_size, first, 0),
               (g.volume_len - g.sector_size, g.sector_size, first, entries[0].len_device - g.sector_size)]
    for index, entry in enumerate(entries[1:], 1):
        stream = by_uuid.get(bytes(entry.device_uuid))
        if stream is None:
            raise ValueError(f"device {index} of the volume ({uuid.UUID(bytes=bytes(entry.device_uuid))}) is not given")
        extents.append((g.ofs_slot_area + entry.first_slot * g.slot_size, entry.num_slots * g.slot_size,
                        stream, min(g.slot_size, 1 << 20)))
    volume = io.BufferedReader(AddressSpace(g.volume_len, extents), buffer_size=1 << 16)
    # The first device's backup copy, mapped to the last sector (lds_volume.ksy's parameter).
    volume.ofs_first_device_backup = g.volume_len - g.sector_size
    return volume


# ---- the projection of view.json ----

def _enum_name(v):
    return v.name if hasattr(v, "name") else f"unknown_{int(v)}"


def project(value, how):
    if how.startswith("["):
        return [project(item, how[1:-1]) for item in value]
    if how == "int":
        return int(value.value) if hasattr(value, "value") else int(value)
    if how == "enum":
        return _enum_name(value)
    if how == "enum_int":
        return int(value.value) if hasattr(value, "value") else int(value)
    if how == "hex":
        return bytes(value).hex()
    if how == "uuid":
        return str(uuid.UUID(bytes=bytes(value)))
    if how == "ascii":
        return bytes(value).decode("ascii", errors="replace")
    if how == "utf8":
        return bytes(value).decode("utf-8", errors="replace")
    return project_type(value, how)


def project_type(obj, type_name):
    doc = {}
    for spec in VIEW["types"][type_name]:
        key, how = spec[0], spec[1]
        path = spec[2].split(".") if len(spec) > 2 else [key]
        value = getattr(obj, path[0], None)
        if how.startswith("?"):
            if value is None:
                continue
            how = how[1:]
        if len(path) > 1:
            value = [getattr(item, path[1]) for item in value]
        doc[key] = project(value, how)
    return doc


def object_json(o, position):
    """An OBJECT of docs/dump-json.md: the object `o` found at `position` of its area."""
    doc = project_type(o, "log_object_header")
    doc["log_offset"] = position
    kind = doc["object_type"]
    try:
        payload_type = VIEW["payloads"].get(kind)
        doc["payload"] = project_type(o.payload, payload_type) if payload_type else None
    except Exception:  # noqa: BLE001 - a payload that does not decode is null
        doc["payload"] = None
    return {key: doc[key] for key in VIEW["object_key_order"]}


def _walk(steps):
    return [object_json(s.log_object, s.ofs_object) for s in (steps or []) if s.is_object]


def _log_area_json(area):
    if area is None:  # the area does not lie inside the device
        return {"left": [], "right": []}
    return {"left": _walk(area.left), "right": _walk(area.right)}


def parse_volume(image):
    lds_volume = _load_parser()
    from kaitaistruct import KaitaiStream

    if isinstance(image, (bytes, bytearray)):
        image = io.BytesIO(image)
    return lds_volume.LdsVolume(getattr(image, "ofs_first_device_backup", 0), KaitaiStream(image))


def label_json(image, label, ofs):
    """A label copy, or None when it is not valid by SPEC.md §4.2 (SPEC.md §15.1)."""
    if label is None or not label.is_valid_except_crc:
        return None
    image.seek(ofs)
    if crc32c(image.read(508)) != label.crc32c:
        return None
    return project_type(label, "label")


def volume_json(image, device=None):
    """The `what: "volume"` document of `image` (bytes, or a binary stream)."""
    if isinstance(image, (bytes, bytearray)):
        image = io.BytesIO(image)
    vol = parse_volume(image)
    doc = {"schema": "lds-dump/1", "what": "volume"}
    if device is not None:
        doc["device"] = device
    doc["labels"] = {
        "primary": label_json(image, vol.primary, 0),
        "backup": label_json(image, vol.backup, vol.ofs_backup_label if vol.backup else 0),
    }
    doc["instances"] = [
        {
            "instance": i,
            "version_log": _log_area_json(area.version_log),
            "backup_log": _log_area_json(area.backup_log),
        }
        for i, area in enumerate(vol.instance_areas or [])
    ]
    doc["slots"] = [slot_json(s) for s in (vol.slots or [])]
    return doc


def slot_json(s):
    """A slot of `what: "volume"`: its chunk footer, and a value chunk footer when it has one."""
    doc = {"slot": s.slot, "footer": project_type(s.footer, "chunk_footer") if s.footer else None}
    if s.value_footer is not None:
        doc["value_footer"] = project_type(s.value_footer, "value_footer")
    return doc


# ---- the rules of SPEC.md §15.1 ----

def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


CRC_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC_TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


VERSION_LOG, BACKUP_LOG = 1, 2
ALLOWED = {VERSION_LOG: {1, 2, 3, 5, 6}, BACKUP_LOG: {4, 5, 6}}
BV, DV, CJ, WB, WOL, WOR = 1, 2, 3, 4, 5, 6
DELETE, PUT, POINTER, LOG_REF = 0, 1, 2, 3


class Area:
    """One log area: its bytes, and the object valid at an offset (SPEC.md §5), or None."""

    def __init__(self, image, label, instance, kind):
        g = label.geometry
        if kind == VERSION_LOG:
            start, self.size = g.ofs_version_log + instance * g.len_version_log, g.len_version_log
        else:
            start, self.size = g.ofs_backup_log + instance * g.len_backup_log, g.len_backup_log
        image.seek(start)
        self.data = image.read(self.size)
        self.start, self.kind, self.instance, self.sector = start, kind, instance, g.sector_size
        self.uuid = bytes(g.volume_uuid)
        self.checked = {}  # offset -> what valid_at found there (log references reread batches)

    def valid_at(self, ofs):
        if ofs not in self.checked:
            self.checked[ofs] = self._check(ofs)
        return self.checked[ofs]

    def _check(self, ofs):
        from kaitaistruct import KaitaiStream
        import lds_log_object

        d = self.data
        if ofs + 64 > self.size or d[ofs:ofs + 4] != b"LDSO":
            return None
        length = int.from_bytes(d[ofs + 40:ofs + 44], "little")
        end = ofs + 64 + length
        if end > self.size or crc32c(d[ofs + 8:ofs + 64]) != int.from_bytes(d[ofs + 4:ofs + 8], "little"):
            return None
        o = lds_log_object.LdsLogObject(KaitaiStream(io.BytesIO(d[ofs:end])))
        kind = int(getattr(o.object_type, "value", o.object_type))
        wrap = kind in (WOL, WOR)
        if (int(getattr(o.log_kind, "value", o.log_kind)) != self.kind or o.instance != self.instance
                or o.log_offset != ofs or bytes(o.volume_uuid) != self.uuid or o.flags != 0
                or kind not in ALLOWED[self.kind]
                or length > self.size - 3 * self.sector - 64
                or (wrap and (length != self.sector - 64 or ofs % self.sector))
                or crc32c(d[ofs + 64:end]) != o.payload_crc32c):
            return None
        try:
            project_type(o.payload, VIEW["payloads"][_enum_name(o.object_type)])
        except Exception:  # noqa: BLE001 - the payload does not decode
            return None
        return (ofs, kind, o)

    def chain(self, ofs, expected_lsn=None):
        """chain(area, ofs, expected_lsn) of SPEC.md §9.1: a list of (offset, type, object)."""
        first = self.valid_at(ofs)
        if first is None or (expected_lsn is not None and first[2].lsn != expected_lsn):
            first = None
            if expected_lsn is not None and ofs % self.sector:
                wor = self.valid_at(-(-ofs // self.sector) * self.sector)
                if wor and wor[1] == WOR and wor[2].lsn == expected_lsn:
                    first = wor
            if first is None:
                return []
        chain = [first]
        while chain[-1][1] != WOR:
            at, _, prev = chain[-1]
            nxt = (at + 64 + prev.len_payload + 7) // 8 * 8
            follows = lambda c: c and c[2].lsn == prev.lsn + 1 and c[2].sn >= prev.sn  # noqa: E731
            cand = self.valid_at(nxt)
            if not follows(cand):
                cand = None
                if nxt % self.sector:
                    wor = self.valid_at(-(-nxt // self.sector) * self.sector)
                    cand = wor if follows(wor) and wor[1] == WOR else None
            if cand is None:
                break
            chain.append(cand)
        return chain


def live_version(vlog):
    """The live BV and the live DVs and CJs after it (SPEC.md §9.2), or None."""
    left = vlog.chain(0)
    if not left or left[0][1] not in (BV, WOL):
        return None
    seq = left
    if left[0][1] == WOL and not any(t == BV for _, t, _ in left):
        wol = left[0][2].payload
        right = vlog.chain(wol.ofs_first_live, wol.lsn_first_live)
        if (not right or right[-1][1] != WOR or right[-1][2].lsn + 1 != left[0][2].lsn
                or not any(t == BV for _, t, _ in right)):
            return None
        seq = right + left
    last_bv = max(i for i, (_, t, _) in enumerate(seq) if t == BV)
    live = [(t, o) for _, t, o in seq[last_bv + 1:] if t in (DV, CJ)]
    if any(o.sn != seq[last_bv][2].sn for _, o in live):
        return None  # E_VLOG_SN
    return seq[last_bv][2].payload, [(t, o.payload) for t, o in live]


def sketch_error(raw, ofs, stored):
    """Why the key sketch `raw` at device offset `ofs` is not valid (SPEC.md §8.7), in lds's
    words and order (its crc32c `stored`, its reserved bytes, precision, length, registers),
    or None."""
    computed = crc32c(raw)
    if computed != stored:
        return f"key sketch at offset {ofs}: checksum mismatch, stored 0x{stored:08x}, computed 0x{computed:08x}"
    if len(raw) < 4:
        return f"key sketch at offset {ofs}: truncated, needs 4 bytes, {len(raw)} remain"
    p = raw[0]
    if any(raw[1:4]):
        return f"key sketch at offset {ofs + 1}: reserved bytes are not zero"
    if not 4 <= p <= 16:
        return f"key sketch at offset {ofs}: precision: {p}, not 4 to 16"
    if len(raw) != 4 + (1 << p):
        return f"key sketch at offset {ofs}: len_sketch: {len(raw)} bytes where precision {p} makes {4 + (1 << p)}"
    for i, rank in enumerate(raw[4:]):
        if rank > 65 - p:
            return f"key sketch at offset {ofs + 4 + i}: registers: register {i} holds {rank} above the largest rank {65 - p}"
    return None


def sketch_doc(image, slot):
    """The key sketch of a slot's sub-chunk as `lds dump chunk --json` shows it (SPEC.md §8.7):
    None without one, its error when it is not valid, else its precision and the HyperLogLog
    estimate of its distinct keys."""
    if slot.footer.len_sketch == 0:
        return None
    ofs = slot.ofs_slot + slot.footer.ofs_sketch
    image.seek(ofs)
    error = sketch_error(image.read(slot.footer.len_sketch), ofs, slot.footer.sketch_crc32c)
    if error is not None:
        return {"error": error}
    registers = slot.sketch.registers
    m = float(len(registers))
    alpha = 0.7213 / (1.0 + 1.079 / m)
    total = 0.0
    for rank in registers:
        total += 2.0 ** -rank
    estimate = alpha * m * m / total
    zeros = sum(1 for rank in registers if rank == 0)
    if estimate <= 2.5 * m and zeros > 0:
        estimate = m * math.log(m / zeros)
    return {"precision": slot.sketch.precision, "distinct_keys": int(math.floor(estimate + 0.5))}


def checked_slot(image, vol, slot_no):
    """Slot `slot_no` of a live chunk, once the checksums of its footer, index, filter and
    blocks hold (SPEC.md §8.2, §8.3); raises naming what does not."""
    g = vol.label.geometry
    if slot_no >= g.num_slots or vol.slots[slot_no].footer is None:
        raise ValueError(f"slot {slot_no}: no chunk footer")
    slot = vol.slots[slot_no]
    f = slot.footer

    def check(what, ofs, length, stored):
        image.seek(slot.ofs_slot + ofs)
        if crc32c(image.read(length)) != stored:
            raise ValueError(f"slot {slot_no}: {what} at offset {slot.ofs_slot + ofs}: checksum mismatch")

    check("chunk footer", g.slot_size - 160, 156, f.footer_crc32c)
    check("block index", f.ofs_index, f.len_index, f.index_crc32c)
    check("filter", f.ofs_filter, f.len_filter, f.filter_crc32c)
    for b, e in zip(slot.blocks, slot.index.entries):
        check("block", e.ofs_block, e.len_block - 4, b.block.crc32c)
    return slot


def _refs(chunk):
    """The value chunk ids a chunk's value references name (format 1.4, SPEC.md §6.4)."""
    return [r.value_chunk_id for r in (chunk.value_refs or [])] if chunk.has_value_refs else []


def live_tree(image, vol, instance):
    """The live version of an instance with its DVs applied (SPEC.md §6.2): (chunks by id,
    last_sequence, ofs_backup_start, lsn_backup_start, the last CJ of every unfinished
    compaction by id, value chunk metadata by id), or None when it has no live version."""
    found = live_version(Area(image, vol.label, instance, VERSION_LOG))
    if found is None:
        return None
    bv, changes = found
    chunks = {c.chunk_id: c for c in bv.chunks}
    if any(c.has_log_refs and c.level != 0 for c in chunks.values()):
        return None  # log chunks stay in level 0 (SPEC.md §6.2, §8.9)
    # The value section (format 1.4), absent from the parsed object when the payload has none.
    listed = bv.values.value_chunks if getattr(bv, "values", None) is not None else []
    values = {m.value_chunk_id: m for m in listed}
    # Every value reference names a value chunk of the version (SPEC.md §6.2).
    if len(values) != len(listed) or any(i not in values for c in chunks.values() for i in _refs(c)):
        return None
    last_sequence, ofs_start, lsn_start = bv.last_sequence, bv.ofs_backup_start, bv.lsn_backup_start
    journals = {}  # compaction id -> its last CJ, while unfinished
    for kind, p in changes:
        if kind == CJ:
            journals[p.compaction_id] = p
            continue
        # A DV that contradicts the version is E_VLOG_REPLAY (SPEC.md §6.2).
        for d in p.deleted:
            if d.chunk_id not in chunks or chunks[d.chunk_id].level != d.level:
                return None
            del chunks[d.chunk_id]
        delta = getattr(p, "values", None)
        if delta is not None:
            # Value chunks are deleted before they are added (SPEC.md §6.2).
            for i in delta.value_deleted:
                if i not in values:
                    return None
                del values[i]
            for m in delta.value_added:
                if m.value_chunk_id in values:
                    return None
                values[m.value_chunk_id] = m
        for c in p.added:
            used = {sub.slot for other in chunks.values() for sub in other.sub_chunks}
            used |= {m.slot for m in values.values()}
            if c.chunk_id in chunks or c.level >= bv.num_levels or any(sub.slot in used for sub in c.sub_chunks):
                return None
            if c.has_log_refs and c.level != 0:
                return None  # log chunks stay in level 0 (SPEC.md §6.2, §8.9)
            chunks[c.chunk_id] = c
        if delta is not None and (delta.value_deleted or any(_refs(c) for c in p.added)):
            if any(i not in values for c in chunks.values() for i in _refs(c)):
                return None  # a dangling value reference
        journals.pop(p.compaction_id, None)
        last_sequence, ofs_start, lsn_start = p.last_sequence, p.ofs_backup_start, p.lsn_backup_start
    return chunks, last_sequence, ofs_start, lsn_start, journals, values


def read_pointer(image, vol, instance, values, pointer, key):
    """The value a pointer names (SPEC.md §8.6): each extent read from the value chunk the
    version lists with its id, at that value chunk's slot, or, for an id the version does not
    list, at the extent's slot, whose value chunk footer must then check (crc32c) and name the
    id and the instance; the value's crc32c must equal `value_crc32c`. Raises naming the key,
    the slot and the offset of what does not hold."""
    g = vol.label.geometry
    value = bytearray()
    for x in pointer.extents:
        meta = values.get(x.value_chunk_id)
        slot_no = meta.slot if meta is not None else x.slot
        where = f"key {key.hex()}: value chunk {x.value_chunk_id} at slot {slot_no}"
        if slot_no >= g.num_slots:
            raise ValueError(f"{where}: past the {g.num_slots} slots")
        slot = vol.slots[slot_no]
        if meta is None:
            f = slot.value_footer
            if f is None:
                raise ValueError(f"{where}: no value chunk footer at offset {slot.ofs_footer}")
            image.seek(slot.ofs_footer)
            if crc32c(image.read(156)) != f.footer_crc32c:
                raise ValueError(f"{where}: value chunk footer at offset {slot.ofs_footer}: checksum mismatch")
            if f.value_chunk_id != x.value_chunk_id or f.instance != instance:
                raise ValueError(f"{where}: the footer at offset {slot.ofs_footer} names value chunk "
                                 f"{f.value_chunk_id} of instance {f.instance}")
        if x.offset + x.len > g.slot_size - 160:
            raise ValueError(f"{where}: extent {x.offset}+{x.len} runs into the footer")
        image.seek(slot.ofs_slot + x.offset)
        value += image.read(x.len)
    if len(value) != pointer.len_value or crc32c(value) != pointer.value_crc32c:
        first = pointer.extents[0]
        raise ValueError(f"key {key.hex()}: the value read through its pointer (value chunk {first.value_chunk_id}"
                         f" offset {first.offset}) does not match its value_crc32c")
    return bytes(value)


def read_log_ref(blog, reference, key, sequence):
    """The value a log reference names (SPEC.md §8.9): the object at `ofs_object` of the
    instance's backup log area `blog`, valid (SPEC.md §5) with the reference's lsn, is a write
    batch whose entry `entry_index` is a put of `key` with sequence number `sequence` and
    `len_value` bytes of value. Raises naming the key, the instance and the object's offset."""
    where = (f"key {key.hex()}: log reference to the backup log object at offset "
             f"{blog.start + reference.ofs_object} (instance {blog.instance})")
    found = blog.valid_at(reference.ofs_object)
    if found is None:
        raise ValueError(f"{where}: no valid log object there")
    _, kind, o = found
    if kind != WB:
        raise ValueError(f"{where}: object type {kind}, not a write batch")
    if o.lsn != reference.lsn:
        raise ValueError(f"{where}: the object has lsn {o.lsn}, the reference names {reference.lsn}")
    batch = o.payload
    if reference.entry_index >= len(batch.entries):
        raise ValueError(f"{where}: entry {reference.entry_index} of a batch of {len(batch.entries)}")
    entry = batch.entries[reference.entry_index]
    entry_kind, value = _value(entry)
    if (entry_kind != PUT or bytes(entry.key) != key
            or batch.first_sequence + reference.entry_index != sequence):
        raise ValueError(f"{where}: entry {reference.entry_index} is not the put of this key at sequence {sequence}")
    if len(value) != reference.len_value:
        raise ValueError(f"{where}: the put has {len(value)} bytes of value, the reference {reference.len_value}")
    return value


def retention(chunks, ofs_start, lsn_start, len_area):
    """(ofs, lsn, bytes) of the retention start of a version (SPEC.md §8.9): the smallest by
    lsn of its backup start and its log chunks' log starts, and the bytes of the ring from it
    to the backup start."""
    starts = [(c.lsn_log_start, c.ofs_log_start) for c in chunks.values() if c.has_log_refs]
    lsn, ofs = min(starts + [(lsn_start, ofs_start)])
    if lsn_start <= lsn:
        retained = 0
    elif ofs_start > ofs:
        retained = ofs_start - ofs
    else:
        retained = len_area - ofs + ofs_start
    return ofs, lsn, retained


def instance_state(image, vol, instance):
    """(summary, {key: (sequence, value)}) of one instance, or None when it has no live version."""
    label = vol.label
    tree = live_tree(image, vol, instance)
    if tree is None:
        return None
    chunks, last_sequence, ofs_start, lsn_start, journals, values = tree
    # Reads of an unfinished compaction (SPEC.md §12): keys at or below the resume key come
    # from its outputs, the others from its inputs; a cleaned input is never read.
    sources = [(c, None) for c in chunks.values()]
    for cj in journals.values():
        cleaned = {c.chunk_id for c in cj.cleaned}
        inputs = set(cj.inputs)
        sources = [(c, bytes(cj.resume_key) if c.chunk_id in inputs else skip)
                   for c, skip in sources if c.chunk_id not in cleaned]
        sources += [(c, None) for c in cj.outputs]
    # The backup log after the version's last sequence (SPEC.md §9.3).
    blog = Area(image, label, instance, BACKUP_LOG)
    batches, replayed = 0, []
    chain = blog.chain(ofs_start, lsn_start)
    for _lap in range(3):
        for _, kind, o in chain:
            if kind != WB:
                continue
            p = o.payload
            batches += 1
            for i, e in enumerate(p.entries):
                if p.first_sequence + i > last_sequence:
                    replayed.append((bytes(e.key), p.first_sequence + i, *_value(e)))
        if not chain or chain[-1][1] != WOR:
            break
        wor = chain[-1][2]
        chain = blog.chain(0, wor.lsn + 1)
        if not chain or chain[0][1] != WOL or chain[0][2].sn < wor.sn:
            break
    newest = {}

    # Reads see sequence numbers up to the last one written: the version's, or the last
    # replayed (a chunk entry above it is not visible, fsck warning 410).
    visible = max([last_sequence] + [seq for _, seq, _, _ in replayed])

    # A pointer is followed only for the newest entry of its key.
    def apply(key, seq, kind, value):
        if seq <= visible and (key not in newest or newest[key][0] < seq):
            newest[key] = (seq, kind, value)

    for meta, at_or_below in sources:
        for sub in meta.sub_chunks:
            for block in checked_slot(image, vol, sub.slot).blocks:
                for e in block.block.entries:
                    key = bytes(e.key)
                    if at_or_below is None or key > at_or_below:
                        apply(key, e.sequence, *_value(e))
    for entry in replayed:
        apply(*entry)
    ofs_retention, lsn_retention, retained = retention(chunks, ofs_start, lsn_start, label.geometry.len_backup_log)
    summary = {
        "instance": instance,
        "last_sequence": last_sequence,
        "chunks": sorted(c.chunk_id for c, _ in sources),
        "replayed_batches": batches,
        "ofs_retention_start": ofs_retention,
        "lsn_retention_start": lsn_retention,
        "retained_bytes": retained,
    }
    state = {}
    for key, (seq, kind, value) in newest.items():
        if kind == PUT:
            state[key] = (seq, value)
        elif kind == POINTER:
            state[key] = (seq, read_pointer(image, vol, instance, values, value, key))
        elif kind == LOG_REF:
            state[key] = (seq, read_log_ref(blog, value, key, seq))
    return summary, state


def _value(entry):
    """(kind, value) of an entry: kind 0 delete, 1 put (the value's bytes), 2 pointer (its
    decoded lds_value_pointer), 3 log reference (its decoded lds_log_ref, in blocks only)
    (SPEC.md §7, §8.2)."""
    kind = int(getattr(entry.kind, "value", entry.kind))
    if kind == POINTER:
        return kind, entry.pointer
    if kind == LOG_REF:
        return kind, entry.log_ref
    return kind, bytes(entry.value)


def chunk_docs(image, device=None):
    """The `what: "chunk"` document (`lds dump IMAGE chunk ID --instance I --entries --json`)
    of every chunk of every instance's live version but the cleaned inputs of an unfinished
    compaction, as (instance, document)."""
    vol = parse_volume(image)
    docs = []
    for instance in range(vol.label.geometry.instance_count if vol.label else 0):
        tree = live_tree(image, vol, instance)
        if tree is None:
            continue
        chunks, _, _, _, journals, _ = tree
        cleaned = {c.chunk_id for cj in journals.values() for c in cj.cleaned}
        for chunk_id in sorted(set(chunks) - cleaned):
            meta = chunks[chunk_id]
            subs = []
            for sub in meta.sub_chunks:
                slot = checked_slot(image, vol, sub.slot)
                subs.append({
                    "slot": sub.slot,
                    "footer": project_type(slot.footer, "chunk_footer"),
                    "index": project(slot.index.entries, "[index_entry]"),
                    "filter": project_type(slot.filter, "filter"),
                    "sketch": sketch_doc(image, slot),
                    "entries": [project_type(e, "block_entry") for b in slot.blocks for e in b.block.entries],
                })
            doc = {"schema": "lds-dump/1", "what": "chunk", "device": device, "chunk_id": chunk_id,
                   "meta": project_type(meta, "chunk_meta"), "sub_chunks": subs}
            docs.append((instance, doc))
    return docs


def state_lines(image):
    """The NDJSON lines of `state` for `image` (a binary stream)."""
    vol = parse_volume(image)
    lines = []
    if vol.label is None:
        return lines
    for instance in range(vol.label.geometry.instance_count):
        found = instance_state(image, vol, instance)
        if found is None:
            lines.append({"instance": instance, "live_version": None})
            continue
        summary, kv = found
        lines.append(summary)
        lines.extend({"instance": instance, "key": k.hex(), "value": kv[k][1].hex(), "sequence": kv[k][0]}
                     for k in sorted(kv))
    return lines


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or argv[0] not in ("volume", "state", "chunks"):
        sys.exit(__doc__.split("\n\n")[1])
    try:
        volume = open_volume(argv[1:])
    except (OSError, ValueError) as e:
        sys.exit(f"lds_reader.py: {argv[1]}: {e}")
    with volume as f:
        try:
            if argv[0] == "volume":
                out = [volume_json(f, device=argv[1])]
            elif argv[0] == "chunks":
                out = [dict(doc, instance=i) for i, doc in chunk_docs(f, device=argv[1])]
            else:
                out = state_lines(f)
        except Exception as e:  # noqa: BLE001 - a structure the parsers cannot read
            sys.exit(f"lds_reader.py: {argv[1]}: cannot read the volume: {type(e).__name__}: {e}")
    for line in out:
        sys.stdout.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
