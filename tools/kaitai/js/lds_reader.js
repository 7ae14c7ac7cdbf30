#!/usr/bin/env node
// Reads an LDS volume with the JavaScript parsers generated from formats/*.ksy.
//
// usage: node tools/kaitai/js/lds_reader.js volume IMAGE[.gz]
//        node tools/kaitai/js/lds_reader.js chunks IMAGE[.gz]
//        node tools/kaitai/js/lds_reader.js state IMAGE[.gz]
//        (a volume of several devices: IMAGE[.gz] DEVICE[.gz]..., the first device first)
//
// The twin of tools/kaitai/lds_reader.py (see its docstring): `volume` prints the
// `lds dump IMAGE volume --json` document through tools/kaitai/view.json, `chunks` every live
// chunk as `lds dump IMAGE chunk ID --entries --json` prints it, `state` the
// key/value state of every instance as NDJSON, by the rules of SPEC.md §15.1 (the value of a
// pointer entry, format 1.4, read from its value chunks by SPEC.md §8.6; the value of a log
// reference, format 1.6, from the write batch it names in the backup log by SPEC.md §8.9).
//
// JavaScript specifics: a u8 field is a Number, exact up to 2^53 (the generated code
// has no BigInt); `sequence` is computed with a division, not a 32-bit shift. An image
// is not read whole (Node reads at most 2 GiB at once): the reader allocates one
// ArrayBuffer of the image's size, which stays virtual, and reads into it only the
// regions it parses (labels, log areas, slot footers, the slots of live chunks).
"use strict";

const fs = require("fs");
const path = require("path");
const zlib = require("zlib");

const HERE = __dirname;
const GENERATED = path.join(HERE, "..", "generated", "javascript");
const VIEW = JSON.parse(fs.readFileSync(path.join(HERE, "..", "view.json"), "utf8"));
const KaitaiStream = require(path.join(HERE, "..", "node_modules", "kaitai-struct", "KaitaiStream"));
const gen = (name) => require(path.join(GENERATED, name + ".js"))[name];
const LdsVolume = gen("LdsVolume");
const LdsLogObject = gen("LdsLogObject");
const LdsBlock = gen("LdsBlock");

// ---- the image, read by regions ----

/** One device: a raw file (read on demand) or a gzip-compressed one (held in memory). */
class DeviceFile {
  constructor(file) {
    if (file.endsWith(".gz")) {
      const data = zlib.gunzipSync(fs.readFileSync(file));
      this.data = new Uint8Array(data.buffer, data.byteOffset, data.length);
      this.size = this.data.length;
    } else {
      this.fd = fs.openSync(file, "r");
      this.size = fs.fstatSync(this.fd).size;
    }
  }
  /** Reads `len` bytes at `pos` into `dst` at `at`. */
  read(dst, at, len, pos) {
    if (this.data) dst.set(this.data.subarray(pos, pos + len), at);
    else fs.readSync(this.fd, dst, at, len, pos);
  }
  bytes(pos, len) {
    const out = new Uint8Array(Math.max(0, Math.min(len, this.size - pos)));
    this.read(out, 0, out.length, pos);
    return out;
  }
}

/** The label at `ofs` of a device when it passes every check but the crc32c, else null. */
function labelAt(device, ofs) {
  if (ofs < 0 || ofs + 512 > device.size) return null;
  const data = device.bytes(ofs, 512);
  if (String.fromCharCode(...data.subarray(0, 8)) !== "LDSLABEL") return null;
  try {
    const label = new (gen("LdsLabel"))(new KaitaiStream(data.buffer, data.byteOffset));
    return label.isValidExceptCrc ? label : null;
  } catch (e) {
    return null;
  }
}

/** The bytes of its device a label gives the volume (its backup label ends them). */
function thisLen(label) {
  if (!label.hasDevices) return label.geometry.volumeLen;
  const own = hex(label.devices.deviceUuid);
  const entry = label.devices.devices.find((d) => hex(d.deviceUuid) === own);
  return entry ? entry.lenDevice : label.geometry.volumeLen;
}

/** A device's label as SPEC.md §4.2 chooses it without the crc32c (see lds_reader.py). */
function deviceLabel(device) {
  const primary = labelAt(device, 0);
  let backup = null;
  if (primary) backup = labelAt(device, thisLen(primary) - primary.geometry.sectorSize);
  else {
    for (let s = 512; s <= 65536 && !backup; s *= 2) {
      const found = labelAt(device, device.size - s);
      if (found && found.geometry.sectorSize === s) backup = found;
    }
  }
  return !primary || (backup && backup.generation > primary.generation) ? backup : primary;
}

/**
 * The volume: one device, or the address space of several (SPEC.md §4.3), the first device
 * first. `extents` are [volume offset, length, device, device offset]; bytes of no device
 * read as zeros.
 */
class Image {
  constructor(files) {
    const first = new DeviceFile(files[0]);
    let size = first.size;
    this.extents = [[0, first.size, first, 0]];
    // 0: one device, the backup label located by SPEC.md §4.2 (lds_volume.ksy's parameter).
    this.ofsFirstDeviceBackup = 0;
    // The device table is the first device's copy that §4.2 chooses on that device; the
    // others are matched by uuid, in any order (SPEC.md §15.1 rule 7).
    const label = deviceLabel(first);
    if (label && label.hasDevices) {
      const g = label.geometry;
      const byUuid = new Map();
      for (const file of files.slice(1)) {
        const device = new DeviceFile(file);
        const own = deviceLabel(device);
        if (own && own.hasDevices && hex(own.geometry.volumeUuid) === hex(g.volumeUuid)) {
          byUuid.set(hex(own.devices.deviceUuid), device);
        }
      }
      const entries = label.devices.devices;
      size = g.volumeLen;
      // The first device's backup copy, mapped to the address space's last sector.
      this.ofsFirstDeviceBackup = g.volumeLen - g.sectorSize;
      this.extents = [
        [0, g.ofsSlotArea + entries[0].numSlots * g.slotSize, first, 0],
        [g.volumeLen - g.sectorSize, g.sectorSize, first, entries[0].lenDevice - g.sectorSize],
      ];
      entries.slice(1).forEach((entry, i) => {
        const device = byUuid.get(hex(entry.deviceUuid));
        if (!device) throw new Error(`device ${i + 1} of the volume is not given`);
        this.extents.push([g.ofsSlotArea + entry.firstSlot * g.slotSize, entry.numSlots * g.slotSize, device, Math.min(g.slotSize, 1 << 20)]);
      });
    }
    this.bytes = new Uint8Array(new ArrayBuffer(size));
    this.loaded = new Set(); // 64 KiB pages read so far
  }
  /** Makes bytes [ofs, ofs + len) of the volume readable in `bytes`. */
  ensure(ofs, len) {
    const PAGE = 65536;
    const end = Math.min(ofs + len, this.bytes.length);
    for (let page = Math.floor(Math.max(ofs, 0) / PAGE); page * PAGE < end; page++) {
      if (this.loaded.has(page)) continue;
      const at = page * PAGE;
      const stop = Math.min(at + PAGE, this.bytes.length);
      for (const [start, length, device, dofs] of this.extents) {
        const lo = Math.max(start, at), hi = Math.min(start + length, stop);
        if (lo < hi) device.read(this.bytes, lo, hi - lo, dofs + lo - start);
      }
      this.loaded.add(page);
    }
  }
  stream() {
    return new KaitaiStream(this.bytes.buffer, this.bytes.byteOffset);
  }
  slice(ofs, len) {
    this.ensure(ofs, len);
    return this.bytes.subarray(ofs, ofs + len);
  }
}

/** Parses the volume, reading the label regions first. */
function parseVolume(image) {
  const size = image.bytes.length;
  image.ensure(0, 65536);
  image.ensure(size - 65536, 65536);
  const vol = new LdsVolume(image.stream(), null, null, image.ofsFirstDeviceBackup);
  if (vol.label) {
    const g = vol.label.geometry;
    image.ensure(g.ofsVersionLog, g.lenVersionLog * g.instanceCount);
    image.ensure(g.ofsBackupLog, g.lenBackupLog * g.instanceCount);
    for (let s = 0; s < g.numSlots; s++) {
      image.ensure(g.ofsSlotArea + (s + 1) * g.slotSize - 160, 160);
    }
  }
  return vol;
}

// ---- the projection of view.json ----

const camel = (id) => id.replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
const hex = (b) => Buffer.from(b).toString("hex");
const ENUMS = { object_type: LdsLogObject.ObjectType, kind: LdsBlock.Kind, last_kind: LdsBlock.Kind };

function enumName(key, v) {
  const name = ENUMS[key][v];
  return typeof name === "string" ? name.toLowerCase() : `unknown_${v}`;
}

function project(value, how, key) {
  if (how.startsWith("[")) return value.map((item) => project(item, how.slice(1, -1), key));
  switch (how) {
    case "int":
    case "enum_int":
      return value;
    case "enum":
      return enumName(key, value);
    case "hex":
      return hex(value);
    case "uuid": {
      const h = hex(value);
      return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
    }
    case "ascii":
      return Array.from(value, (b) => (b < 128 ? String.fromCharCode(b) : "\ufffd")).join("");
    case "utf8":
      return new TextDecoder("utf-8").decode(value);
    default:
      return projectType(value, how);
  }
}

function projectType(obj, typeName) {
  const doc = {};
  for (const [key, spec, field] of VIEW.types[typeName]) {
    const p = (field || key).split(".");
    let value = obj[camel(p[0])];
    let how = spec;
    if (how.startsWith("?")) {
      if (value === undefined || value === null) continue;
      how = how.slice(1);
    }
    if (p.length > 1) value = value.map((item) => item[camel(p[1])]);
    doc[key] = project(value, how, key);
  }
  return doc;
}

function objectJson(o, position) {
  const doc = projectType(o, "log_object_header");
  doc.log_offset = position;
  const payloadType = VIEW.payloads[doc.object_type];
  try {
    doc.payload = payloadType ? projectType(o.payload, payloadType) : null;
  } catch (e) {
    doc.payload = null; // a payload that does not decode
  }
  return Object.fromEntries(VIEW.object_key_order.map((k) => [k, doc[k]]));
}

const walk = (steps) => (steps || []).filter((s) => s.isObject).map((s) => objectJson(s.logObject, s.ofsObject));
const logAreaJson = (area) => (area ? { left: walk(area.left), right: walk(area.right) } : { left: [], right: [] });

/** A label copy, or null when it is not valid by SPEC.md §4.2 (SPEC.md §15.1). */
function labelJson(image, label, ofs) {
  if (!label || !label.isValidExceptCrc || crc32c(image.slice(ofs, 508)) !== label.crc32c) return null;
  return projectType(label, "label");
}

function volumeJson(image, device) {
  const vol = parseVolume(image);
  return {
    schema: "lds-dump/1",
    what: "volume",
    device,
    labels: {
      primary: labelJson(image, vol.primary, 0),
      backup: labelJson(image, vol.backup, vol.backup ? vol.ofsBackupLabel : 0),
    },
    instances: (vol.instanceAreas || []).map((area, i) => ({
      instance: i,
      version_log: logAreaJson(area.versionLog),
      backup_log: logAreaJson(area.backupLog),
    })),
    slots: (vol.slots || []).map(slotJson),
  };
}

/** A slot of `what: "volume"`: its chunk footer, and a value chunk footer when it has one. */
function slotJson(s) {
  const doc = { slot: s.slot, footer: s.footer ? projectType(s.footer, "chunk_footer") : null };
  if (s.valueFooter) doc.value_footer = projectType(s.valueFooter, "value_footer");
  return doc;
}

// ---- the rules of SPEC.md §15.1 ----

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

function crc32c(bytes) {
  let c = 0xffffffff;
  for (const b of bytes) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

const VERSION_LOG = 1, BACKUP_LOG = 2;
const BV = 1, DV = 2, CJ = 3, WB = 4, WOL = 5, WOR = 6;
const PUT = 1, POINTER = 2, LOG_REF = 3;
const ALLOWED = { [VERSION_LOG]: [BV, DV, CJ, WOL, WOR], [BACKUP_LOG]: [WB, WOL, WOR] };
const u32 = (d, at) => d[at] | (d[at + 1] << 8) | (d[at + 2] << 16) | ((d[at + 3] << 24) >>> 0);
const alignUp = (x, a) => Math.ceil(x / a) * a;

class Area {
  constructor(image, label, instance, kind) {
    const g = label.geometry;
    const [start, size] = kind === VERSION_LOG
      ? [g.ofsVersionLog + instance * g.lenVersionLog, g.lenVersionLog]
      : [g.ofsBackupLog + instance * g.lenBackupLog, g.lenBackupLog];
    this.data = image.slice(start, size);
    Object.assign(this, { start, size, kind, instance, sector: g.sectorSize, uuid: hex(g.volumeUuid) });
    this.checked = new Map(); // offset -> what validAt found there (log references reread batches)
  }

  /** The object valid at `ofs` (SPEC.md §5) as {ofs, type, o}, or null. */
  validAt(ofs) {
    if (!this.checked.has(ofs)) this.checked.set(ofs, this.check(ofs));
    return this.checked.get(ofs);
  }

  check(ofs) {
    const d = this.data;
    if (ofs + 64 > this.size || hex(d.subarray(ofs, ofs + 4)) !== "4c44534f") return null;
    const len = u32(d, ofs + 40) >>> 0;
    const end = ofs + 64 + len;
    if (end > this.size || crc32c(d.subarray(ofs + 8, ofs + 64)) !== u32(d, ofs + 4) >>> 0) return null;
    const bytes = d.slice(ofs, end);
    const o = new LdsLogObject(new KaitaiStream(bytes.buffer, 0));
    const type = o.objectType;
    const wrap = type === WOL || type === WOR;
    if (o.logKind !== this.kind || o.instance !== this.instance || o.logOffset !== ofs
      || hex(o.volumeUuid) !== this.uuid || o.flags !== 0 || !ALLOWED[this.kind].includes(type)
      || len > this.size - 3 * this.sector - 64
      || (wrap && (len !== this.sector - 64 || ofs % this.sector !== 0))
      || crc32c(d.subarray(ofs + 64, end)) !== o.payloadCrc32c) return null;
    try {
      projectType(o.payload, VIEW.payloads[enumName("object_type", type)]);
    } catch (e) {
      return null; // the payload does not decode
    }
    return { ofs, type, o };
  }

  /** chain(area, ofs, expected_lsn) of SPEC.md §9.1. */
  chain(ofs, expectedLsn) {
    let first = this.validAt(ofs);
    if (!first || (expectedLsn !== undefined && first.o.lsn !== expectedLsn)) {
      first = null;
      if (expectedLsn !== undefined && ofs % this.sector !== 0) {
        const wor = this.validAt(alignUp(ofs, this.sector));
        if (wor && wor.type === WOR && wor.o.lsn === expectedLsn) first = wor;
      }
      if (!first) return [];
    }
    const chain = [first];
    while (chain[chain.length - 1].type !== WOR) {
      const prev = chain[chain.length - 1];
      const next = Math.ceil((prev.ofs + 64 + prev.o.lenPayload) / 8) * 8;
      const follows = (c) => c && c.o.lsn === prev.o.lsn + 1 && c.o.sn >= prev.o.sn;
      let cand = this.validAt(next);
      if (!follows(cand)) {
        cand = null;
        if (next % this.sector !== 0) {
          const wor = this.validAt(alignUp(next, this.sector));
          if (follows(wor) && wor.type === WOR) cand = wor;
        }
      }
      if (!cand) break;
      chain.push(cand);
    }
    return chain;
  }
}

/** The live BV and the live DVs and CJs after it (SPEC.md §9.2), or null. */
function liveVersion(vlog) {
  const left = vlog.chain(0);
  if (left.length === 0 || ![BV, WOL].includes(left[0].type)) return null;
  let seq = left;
  if (left[0].type === WOL && !left.some((c) => c.type === BV)) {
    const wol = left[0].o.payload;
    const right = vlog.chain(wol.ofsFirstLive, wol.lsnFirstLive);
    const last = right[right.length - 1];
    if (!last || last.type !== WOR || last.o.lsn + 1 !== left[0].o.lsn || !right.some((c) => c.type === BV)) return null;
    seq = right.concat(left);
  }
  let lastBv = -1;
  seq.forEach((c, i) => { if (c.type === BV) lastBv = i; });
  const live = seq.slice(lastBv + 1).filter((c) => c.type === DV || c.type === CJ);
  if (live.some((c) => c.o.sn !== seq[lastBv].o.sn)) return null; // E_VLOG_SN
  return { bv: seq[lastBv].o.payload, changes: live.map((c) => ({ type: c.type, p: c.o.payload })) };
}

const cmp = (a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b));

/**
 * Slot `slotNo` of a live chunk, once the checksums of its footer, index, filter and blocks
 * hold (SPEC.md §8.2, §8.3); throws naming what does not.
 */
const hex8 = (n) => "0x" + (n >>> 0).toString(16).padStart(8, "0");

// Why the key sketch `raw` at device offset `ofs` is not valid (SPEC.md §8.7), in lds's words
// and order (see lds_reader.py), or null.
function sketchError(raw, ofs, stored) {
  const computed = crc32c(raw);
  if (computed !== stored) {
    return `key sketch at offset ${ofs}: checksum mismatch, stored ${hex8(stored)}, computed ${hex8(computed)}`;
  }
  if (raw.length < 4) return `key sketch at offset ${ofs}: truncated, needs 4 bytes, ${raw.length} remain`;
  const p = raw[0];
  if (raw[1] || raw[2] || raw[3]) return `key sketch at offset ${ofs + 1}: reserved bytes are not zero`;
  if (p < 4 || p > 16) return `key sketch at offset ${ofs}: precision: ${p}, not 4 to 16`;
  if (raw.length !== 4 + 2 ** p) {
    return `key sketch at offset ${ofs}: len_sketch: ${raw.length} bytes where precision ${p} makes ${4 + 2 ** p}`;
  }
  for (let i = 0; i < raw.length - 4; i++) {
    if (raw[4 + i] > 65 - p) {
      return `key sketch at offset ${ofs + 4 + i}: registers: register ${i} holds ${raw[4 + i]} above the largest rank ${65 - p}`;
    }
  }
  return null;
}

// The key sketch of a slot's sub-chunk as `lds dump chunk --json` shows it (SPEC.md §8.7): null
// without one, its error when it is not valid, else its precision and the HyperLogLog estimate
// of its distinct keys.
function sketchDoc(image, slot) {
  if (slot.footer.lenSketch === 0) return null;
  const ofs = slot.ofsSlot + slot.footer.ofsSketch;
  const error = sketchError(image.slice(ofs, slot.footer.lenSketch), ofs, slot.footer.sketchCrc32c);
  if (error !== null) return { error };
  const registers = slot.sketch.registers;
  const m = registers.length;
  const alpha = 0.7213 / (1.0 + 1.079 / m);
  let total = 0.0;
  let zeros = 0;
  for (const rank of registers) {
    total += Math.pow(2, -rank);
    if (rank === 0) zeros++;
  }
  let estimate = (alpha * m * m) / total;
  if (estimate <= 2.5 * m && zeros > 0) estimate = m * Math.log(m / zeros);
  return { precision: slot.sketch.precision, distinct_keys: Math.floor(estimate + 0.5) };
}

function checkedSlot(image, vol, slotNo) {
  const g = vol.label.geometry;
  if (slotNo >= g.numSlots || !vol.slots[slotNo].footer) throw new Error(`slot ${slotNo}: no chunk footer`);
  const slot = vol.slots[slotNo];
  const f = slot.footer;
  image.ensure(slot.ofsSlot, g.slotSize);
  const check = (what, ofs, len, stored) => {
    if (crc32c(image.slice(slot.ofsSlot + ofs, len)) !== stored) {
      throw new Error(`slot ${slotNo}: ${what} at offset ${slot.ofsSlot + ofs}: checksum mismatch`);
    }
  };
  check("chunk footer", g.slotSize - 160, 156, f.footerCrc32c);
  check("block index", f.ofsIndex, f.lenIndex, f.indexCrc32c);
  check("filter", f.ofsFilter, f.lenFilter, f.filterCrc32c);
  slot.index.entries.forEach((e, i) => check("block", e.ofsBlock, e.lenBlock - 4, slot.blocks[i].block.crc32c));
  return slot;
}

/** The value chunk ids a chunk's value references name (format 1.4, SPEC.md §6.4). */
const refs = (c) => (c.hasValueRefs ? c.valueRefs.map((r) => r.valueChunkId) : []);

/**
 * The live version of an instance with its DVs applied (SPEC.md §6.2): chunks by id, last
 * sequence, backup start, the last CJ of every unfinished compaction, and the value chunk
 * metadata by id; or null.
 */
function liveTree(image, vol, instance) {
  const found = liveVersion(new Area(image, vol.label, instance, VERSION_LOG));
  if (!found) return null;
  const { bv, changes } = found;
  const chunks = new Map(bv.chunks.map((c) => [c.chunkId, c]));
  // Log chunks stay in level 0 (SPEC.md §6.2, §8.9).
  if (bv.chunks.some((c) => c.hasLogRefs && c.level !== 0)) return null;
  const listed = bv.values ? bv.values.valueChunks : [];
  const values = new Map(listed.map((m) => [m.valueChunkId, m]));
  // Every value reference names a value chunk of the version (SPEC.md §6.2).
  const dangling = () => [...chunks.values()].some((c) => refs(c).some((id) => !values.has(id)));
  if (values.size !== listed.length || dangling()) return null;
  let [lastSequence, ofsStart, lsnStart] = [bv.lastSequence, bv.ofsBackupStart, bv.lsnBackupStart];
  const journals = new Map(); // compaction id -> its last CJ, while unfinished
  for (const { type, p } of changes) {
    if (type === CJ) {
      journals.set(p.compactionId, p);
      continue;
    }
    // A DV that contradicts the version is E_VLOG_REPLAY (SPEC.md §6.2).
    for (const d of p.deleted) {
      if (!chunks.has(d.chunkId) || chunks.get(d.chunkId).level !== d.level) return null;
      chunks.delete(d.chunkId);
    }
    if (p.values) {
      // Value chunks are deleted before they are added (SPEC.md §6.2).
      for (const id of p.values.valueDeleted) {
        if (!values.has(id)) return null;
        values.delete(id);
      }
      for (const m of p.values.valueAdded) {
        if (values.has(m.valueChunkId)) return null;
        values.set(m.valueChunkId, m);
      }
    }
    for (const c of p.added) {
      const used = new Set([...chunks.values()].flatMap((o) => o.subChunks.map((sub) => sub.slot)));
      for (const m of values.values()) used.add(m.slot);
      if (chunks.has(c.chunkId) || c.level >= bv.numLevels || c.subChunks.some((sub) => used.has(sub.slot))) return null;
      if (c.hasLogRefs && c.level !== 0) return null; // log chunks stay in level 0
      chunks.set(c.chunkId, c);
    }
    if (p.values && (p.values.valueDeleted.length > 0 || p.added.some((c) => refs(c).length > 0)) && dangling()) {
      return null; // a dangling value reference
    }
    journals.delete(p.compactionId);
    [lastSequence, ofsStart, lsnStart] = [p.lastSequence, p.ofsBackupStart, p.lsnBackupStart];
  }
  return { chunks, lastSequence, ofsStart, lsnStart, journals, values };
}

/**
 * The value a pointer names (SPEC.md §8.6; see read_pointer of lds_reader.py): each extent
 * from the value chunk the version lists with its id, or for an id it does not list from the
 * extent's slot, whose footer must check and name the id and the instance; the value's
 * crc32c must equal `value_crc32c`. Throws naming the key, the slot and the offset.
 */
function readPointer(image, vol, instance, values, pointer, key) {
  const g = vol.label.geometry;
  const parts = [];
  let len = 0;
  for (const x of pointer.extents) {
    const meta = values.get(x.valueChunkId);
    const slotNo = meta ? meta.slot : x.slot;
    const where = `key ${hex(key)}: value chunk ${x.valueChunkId} at slot ${slotNo}`;
    if (slotNo >= g.numSlots) throw new Error(`${where}: past the ${g.numSlots} slots`);
    const slot = vol.slots[slotNo];
    if (!meta) {
      const f = slot.valueFooter;
      if (!f) throw new Error(`${where}: no value chunk footer at offset ${slot.ofsFooter}`);
      if (crc32c(image.slice(slot.ofsFooter, 156)) !== f.footerCrc32c) {
        throw new Error(`${where}: value chunk footer at offset ${slot.ofsFooter}: checksum mismatch`);
      }
      if (f.valueChunkId !== x.valueChunkId || f.instance !== instance) {
        throw new Error(`${where}: the footer at offset ${slot.ofsFooter} names value chunk ${f.valueChunkId} of instance ${f.instance}`);
      }
    }
    if (x.offset + x.len > g.slotSize - 160) throw new Error(`${where}: extent ${x.offset}+${x.len} runs into the footer`);
    parts.push(image.slice(slot.ofsSlot + x.offset, x.len));
    len += x.len;
  }
  const value = new Uint8Array(len);
  let at = 0;
  for (const part of parts) {
    value.set(part, at);
    at += part.length;
  }
  if (len !== pointer.lenValue || crc32c(value) !== pointer.valueCrc32c) {
    const first = pointer.extents[0];
    throw new Error(`key ${hex(key)}: the value read through its pointer (value chunk ${first.valueChunkId} offset ${first.offset}) does not match its value_crc32c`);
  }
  return value;
}

/**
 * The value a log reference names (SPEC.md §8.9; see read_log_ref of lds_reader.py): the
 * object at `ofsObject` of the instance's backup log area, valid with the reference's lsn, a
 * write batch whose entry `entryIndex` is a put of `key` at `sequence` with `lenValue` bytes.
 * Throws naming the key, the instance and the object's offset.
 */
function readLogRef(blog, ref, key, sequence) {
  const where = `key ${hex(key)}: log reference to the backup log object at offset ${blog.start + ref.ofsObject} (instance ${blog.instance})`;
  const found = blog.validAt(ref.ofsObject);
  if (!found) throw new Error(`${where}: no valid log object there`);
  if (found.type !== WB) throw new Error(`${where}: object type ${found.type}, not a write batch`);
  if (found.o.lsn !== ref.lsn) throw new Error(`${where}: the object has lsn ${found.o.lsn}, the reference names ${ref.lsn}`);
  const batch = found.o.payload;
  if (ref.entryIndex >= batch.entries.length) {
    throw new Error(`${where}: entry ${ref.entryIndex} of a batch of ${batch.entries.length}`);
  }
  const entry = batch.entries[ref.entryIndex];
  if (entry.kind !== PUT || cmp(entry.key, key) !== 0 || batch.firstSequence + ref.entryIndex !== sequence) {
    throw new Error(`${where}: entry ${ref.entryIndex} is not the put of this key at sequence ${sequence}`);
  }
  if (entry.value.length !== ref.lenValue) {
    throw new Error(`${where}: the put has ${entry.value.length} bytes of value, the reference ${ref.lenValue}`);
  }
  return entry.value;
}

/**
 * The retention start of a version (SPEC.md §8.9): the smallest by lsn of its backup start and
 * its log chunks' log starts, and the bytes of the ring from it to the backup start.
 */
function retention(chunks, ofsStart, lsnStart, lenArea) {
  let [lsn, ofs] = [lsnStart, ofsStart];
  for (const c of chunks.values()) {
    if (c.hasLogRefs && (c.lsnLogStart < lsn || (c.lsnLogStart === lsn && c.ofsLogStart < ofs))) {
      [lsn, ofs] = [c.lsnLogStart, c.ofsLogStart];
    }
  }
  const retained = lsnStart <= lsn ? 0 : ofsStart > ofs ? ofsStart - ofs : lenArea - ofs + ofsStart;
  return { ofs, lsn, retained };
}

/**
 * [kind, value] of an entry: 0 delete, 1 put (its bytes), 2 pointer (the decoded pointer), 3 log
 * reference (the decoded reference, in blocks only).
 */
const entryValue = (e) => [e.kind, e.kind === POINTER ? e.pointer : e.kind === LOG_REF ? e.logRef : e.value];

function instanceState(image, vol, instance) {
  const label = vol.label;
  const tree = liveTree(image, vol, instance);
  if (!tree) return null;
  const { chunks, lastSequence, ofsStart, lsnStart, journals, values } = tree;
  // Reads of an unfinished compaction (SPEC.md §12).
  let sources = [...chunks.values()].map((c) => ({ c, skip: null }));
  for (const cj of journals.values()) {
    const cleaned = new Set(cj.cleaned.map((c) => c.chunkId));
    const inputs = new Set(cj.inputs);
    sources = sources.filter((s) => !cleaned.has(s.c.chunkId))
      .map((s) => ({ c: s.c, skip: inputs.has(s.c.chunkId) ? cj.resumeKey : s.skip }));
    sources.push(...cj.outputs.map((c) => ({ c, skip: null })));
  }
  // The backup log after the version's last sequence (SPEC.md §9.3).
  const blog = new Area(image, label, instance, BACKUP_LOG);
  let batches = 0;
  const replayed = [];
  let chain = blog.chain(ofsStart, lsnStart);
  for (let lap = 0; lap < 3; lap++) {
    for (const { type, o } of chain) {
      if (type !== WB) continue;
      const p = o.payload;
      batches++;
      p.entries.forEach((e, i) => {
        if (p.firstSequence + i > lastSequence) replayed.push([e.key, p.firstSequence + i, ...entryValue(e)]);
      });
    }
    const last = chain[chain.length - 1];
    if (!last || last.type !== WOR) break;
    chain = blog.chain(0, last.o.lsn + 1);
    if (chain.length === 0 || chain[0].type !== WOL || chain[0].o.sn < last.o.sn) break;
  }
  const newest = new Map(); // hex key -> {seq, kind, key, value}: a pointer is followed only for the newest
  // Reads see sequence numbers up to the last one written: the version's, or the last
  // replayed (a chunk entry above it is not visible, fsck warning 410).
  const visible = replayed.reduce((max, r) => Math.max(max, r[1]), lastSequence);
  const apply = (key, seq, kind, value) => {
    const k = hex(key);
    const had = newest.get(k);
    if (seq <= visible && (!had || had.seq < seq)) newest.set(k, { seq, kind, key, value: kind === PUT ? hex(value) : value });
  };
  const g = label.geometry;
  for (const { c, skip } of sources) {
    for (const sub of c.subChunks) {
      for (const b of checkedSlot(image, vol, sub.slot).blocks) {
        for (const e of b.block.entries) {
          if (skip === null || cmp(e.key, skip) > 0) apply(e.key, e.sequence, ...entryValue(e));
        }
      }
    }
  }
  for (const r of replayed) apply(...r);
  const kept = retention(chunks, ofsStart, lsnStart, g.lenBackupLog);
  const lines = [{
    instance,
    last_sequence: lastSequence,
    chunks: sources.map((s) => s.c.chunkId).sort((a, b) => a - b),
    replayed_batches: batches,
    ofs_retention_start: kept.ofs,
    lsn_retention_start: kept.lsn,
    retained_bytes: kept.retained,
  }];
  for (const k of [...newest.keys()].sort()) {
    const v = newest.get(k);
    if (v.kind === PUT) lines.push({ instance, key: k, value: v.value, sequence: v.seq });
    if (v.kind === POINTER) {
      lines.push({ instance, key: k, value: hex(readPointer(image, vol, instance, values, v.value, v.key)), sequence: v.seq });
    }
    if (v.kind === LOG_REF) {
      lines.push({ instance, key: k, value: hex(readLogRef(blog, v.value, v.key, v.seq)), sequence: v.seq });
    }
  }
  return lines;
}

/**
 * The `lds dump IMAGE chunk ID --instance I --entries --json` document of every chunk of every
 * instance's live version but the cleaned inputs of an unfinished compaction, with `instance`.
 */
function chunkDocs(image, device) {
  const vol = parseVolume(image);
  const docs = [];
  const g = vol.label ? vol.label.geometry : null;
  for (let instance = 0; g && instance < g.instanceCount; instance++) {
    const tree = liveTree(image, vol, instance);
    if (!tree) continue;
    const cleaned = new Set([...tree.journals.values()].flatMap((cj) => cj.cleaned.map((c) => c.chunkId)));
    const ids = [...tree.chunks.keys()].filter((id) => !cleaned.has(id)).sort((a, b) => a - b);
    for (const id of ids) {
      const meta = tree.chunks.get(id);
      const subChunks = meta.subChunks.map((sub) => {
        const slot = checkedSlot(image, vol, sub.slot);
        return {
          slot: sub.slot,
          footer: projectType(slot.footer, "chunk_footer"),
          index: project(slot.index.entries, "[index_entry]"),
          filter: projectType(slot.filter, "filter"),
          sketch: sketchDoc(image, slot),
          entries: slot.blocks.flatMap((b) => b.block.entries.map((e) => projectType(e, "block_entry"))),
        };
      });
      docs.push({ schema: "lds-dump/1", what: "chunk", device, chunk_id: id, meta: projectType(meta, "chunk_meta"), sub_chunks: subChunks, instance });
    }
  }
  return docs;
}

function stateLines(image) {
  const vol = parseVolume(image);
  const lines = [];
  if (!vol.label) return lines;
  for (let i = 0; i < vol.label.geometry.instanceCount; i++) {
    // One at a time: spreading a state of a million keys into push() overflows the stack.
    for (const line of instanceState(image, vol, i) || [{ instance: i, live_version: null }]) lines.push(line);
  }
  return lines;
}

function main() {
  const [what, ...files] = process.argv.slice(2);
  const file = files[0];
  if (!["volume", "chunks", "state"].includes(what) || !file) {
    console.error("usage: lds_reader.js volume|chunks|state IMAGE[.gz] [DEVICE[.gz]...]");
    process.exit(2);
  }
  let lines;
  try {
    const image = new Image(files);
    lines = what === "volume" ? [volumeJson(image, file)] : what === "chunks" ? chunkDocs(image, file) : stateLines(image);
  } catch (e) {
    console.error(`lds_reader.js: ${file}: cannot read the volume: ${e.name}: ${e.message}`);
    process.exit(1);
  }
  process.stdout.write(lines.map((l) => JSON.stringify(l) + "\n").join(""));
}

main();
