// Reads an LDS volume with the Java parsers generated from formats/*.ksy.
//
// usage: java -cp tools/kaitai/generated/classes:tools/kaitai/generated/lib/* LdsReader volume IMAGE[.gz] [DEVICE[.gz]...]
//        java -cp ... LdsReader chunks IMAGE[.gz]
//        java -cp ... LdsReader state IMAGE[.gz]
//
// The twin of tools/kaitai/lds_reader.py (see its docstring): `volume` prints the
// `lds dump IMAGE volume --json` document through tools/kaitai/view.json, `chunks` every live
// chunk as `lds dump IMAGE chunk ID --entries --json` prints it, `state` the
// key/value state of every instance as NDJSON, by the rules of SPEC.md §15.1 (the value of a
// pointer entry, format 1.4, read from its value chunks by SPEC.md §8.6; the value of a log
// reference, format 1.6, from the write batch it names in the backup log by SPEC.md §8.9).
//
// Java specifics: a raw image is read through RandomAccessFileKaitaiStream (a memory-mapped
// stream stops at 2 GiB), left at offset 0 between reads (see readAt); u8 fields are signed longs, printed unsigned; an enum value the .ksy
// does not name is null in the generated code, so the raw byte is read back for it.

import io.kaitai.struct.ByteBufferKaitaiStream;
import io.kaitai.struct.KaitaiStream;
import io.kaitai.struct.KaitaiStruct;
import io.kaitai.struct.RandomAccessFileKaitaiStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.io.RandomAccessFile;
import java.lang.reflect.InvocationTargetException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.zip.CRC32C;
import java.util.zip.GZIPInputStream;

public class LdsReader {
    static Map<String, Object> view;

    // ---- the projection of view.json ----

    static String camel(String id) {
        StringBuilder b = new StringBuilder();
        boolean up = false;
        for (char c : id.toCharArray()) {
            if (c == '_') {
                up = true;
            } else {
                b.append(up ? Character.toUpperCase(c) : c);
                up = false;
            }
        }
        return b.toString();
    }

    static Object get(Object obj, String id) {
        try {
            return obj.getClass().getMethod(camel(id)).invoke(obj);
        } catch (InvocationTargetException e) {
            throw new RuntimeException(e.getCause());
        } catch (ReflectiveOperationException e) {
            throw new IllegalStateException("no field " + id + " in " + obj.getClass(), e);
        }
    }

    static final char[] HEX_DIGITS = "0123456789abcdef".toCharArray();

    static String hex(byte[] b) {
        char[] out = new char[b.length * 2];
        for (int i = 0; i < b.length; i++) {
            out[2 * i] = HEX_DIGITS[(b[i] >> 4) & 0xf];
            out[2 * i + 1] = HEX_DIGITS[b[i] & 0xf];
        }
        return new String(out);
    }

    static long num(Object v) {
        return ((Number) v).longValue();
    }

    static Object project(Object value, String how) {
        if (how.startsWith("[")) {
            List<Object> out = new ArrayList<>();
            for (Object item : (List<?>) value) {
                out.add(project(item, how.substring(1, how.length() - 1)));
            }
            return out;
        }
        switch (how) {
            case "int":
                return value instanceof Long ? new Unsigned((Long) value) : value;
            case "enum":
                return ((Enum<?>) value).name().toLowerCase();
            case "enum_int":
                return num(get(value, "id"));
            case "hex":
                return hex((byte[]) value);
            case "uuid": {
                String h = hex((byte[]) value);
                return h.substring(0, 8) + "-" + h.substring(8, 12) + "-" + h.substring(12, 16) + "-"
                        + h.substring(16, 20) + "-" + h.substring(20);
            }
            case "ascii": {
                StringBuilder s = new StringBuilder();
                for (byte b : (byte[]) value) {
                    s.append(b >= 0 ? (char) b : '\ufffd');
                }
                return s.toString();
            }
            case "utf8":
                return new String((byte[]) value, StandardCharsets.UTF_8);
            default:
                return projectType(value, how);
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> projectType(Object obj, String typeName) {
        Map<String, Object> doc = new LinkedHashMap<>();
        for (List<String> spec : (List<List<String>>) ((Map<String, Object>) view.get("types")).get(typeName)) {
            String key = spec.get(0);
            String how = spec.get(1);
            String[] path = (spec.size() > 2 ? spec.get(2) : key).split("\\.");
            Object value = get(obj, path[0]);
            if (how.startsWith("?")) {
                if (value == null) {
                    continue;
                }
                how = how.substring(1);
            }
            if (path.length > 1) {
                List<Object> items = new ArrayList<>();
                for (Object item : (List<?>) value) {
                    items.add(get(item, path[1]));
                }
                value = items;
            }
            doc.put(key, project(value, how));
        }
        return doc;
    }

    /**
     * `len` bytes at `ofs` of the volume. The runtime's `pos()` is an int, and the generated
     * code saves and restores the position with it around every positioned read: the stream is
     * left at offset 0, so that a saved position never passes 2 GiB.
     */
    static byte[] readAt(KaitaiStream io, long ofs, long len) {
        io.seek(ofs);
        byte[] bytes = io.readBytes(len);
        io.seek(0);
        return bytes;
    }

    /** The raw byte at `ofs` of a structure's stream (for an enum value the .ksy does not name). */
    static int rawByte(KaitaiStruct s, long ofs) {
        KaitaiStream io = s._io();
        long saved = io.pos();
        io.seek(ofs);
        int b = io.readU1();
        io.seek(saved);
        return b;
    }

    static int objectType(LdsLogObject o) {
        return o.objectType() != null ? (int) o.objectType().id() : rawByte(o, 8);
    }

    static int logKind(LdsLogObject o) {
        return o.logKind() != null ? (int) o.logKind().id() : rawByte(o, 9);
    }

    static String typeName(int type) {
        LdsLogObject.ObjectType t = LdsLogObject.ObjectType.byId(type);
        return t != null ? t.name().toLowerCase() : "unknown_" + type;
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> objectJson(LdsLogObject o, long position) {
        Map<String, Object> doc = new LinkedHashMap<>();
        for (List<String> spec : (List<List<String>>) ((Map<String, Object>) view.get("types")).get("log_object_header")) {
            String key = spec.get(0);
            if (key.equals("object_type")) {
                doc.put(key, typeName(objectType(o)));
            } else if (key.equals("log_kind")) {
                doc.put(key, (long) logKind(o));
            } else {
                doc.put(key, project(get(o, key), spec.get(1)));
            }
        }
        doc.put("log_offset", new Unsigned(position));
        String payloadType = (String) ((Map<String, Object>) view.get("payloads")).get(doc.get("object_type"));
        try {
            doc.put("payload", payloadType == null ? null : projectType(o.payload(), payloadType));
        } catch (RuntimeException e) {
            doc.put("payload", null); // a payload that does not decode
        }
        Map<String, Object> ordered = new LinkedHashMap<>();
        for (Object k : (List<?>) view.get("object_key_order")) {
            ordered.put((String) k, doc.get(k));
        }
        return ordered;
    }

    static List<Object> walk(List<LdsVolume.WalkStep> steps) {
        List<Object> out = new ArrayList<>();
        if (steps != null) {
            for (LdsVolume.WalkStep s : steps) {
                if (s.isObject()) {
                    out.add(objectJson(s.logObject(), s.ofsObject()));
                }
            }
        }
        return out;
    }

    static Map<String, Object> logAreaJson(LdsVolume.LogArea area) {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("left", area == null ? new ArrayList<>() : walk(area.left()));
        doc.put("right", area == null ? new ArrayList<>() : walk(area.right()));
        return doc;
    }

    /** A label copy, or null when it is not valid by SPEC.md §4.2 (SPEC.md §15.1). */
    static Map<String, Object> labelJson(LdsVolume vol, LdsLabel label, long ofs) {
        if (label == null || !label.isValidExceptCrc()) {
            return null;
        }
        byte[] bytes = readAt(vol._io(), ofs, 508);
        return crc32c(bytes, 0, 508) == label.crc32c() ? projectType(label, "label") : null;
    }

    static Map<String, Object> volumeJson(LdsVolume vol, String device) {
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("schema", "lds-dump/1");
        doc.put("what", "volume");
        doc.put("device", device);
        Map<String, Object> labels = new LinkedHashMap<>();
        labels.put("primary", labelJson(vol, vol.primary(), 0));
        labels.put("backup", labelJson(vol, vol.backup(), vol.backup() == null ? 0 : vol.ofsBackupLabel()));
        doc.put("labels", labels);
        List<Object> instances = new ArrayList<>();
        if (vol.instanceAreas() != null) {
            for (int i = 0; i < vol.instanceAreas().size(); i++) {
                LdsVolume.InstanceArea area = vol.instanceAreas().get(i);
                Map<String, Object> inst = new LinkedHashMap<>();
                inst.put("instance", (long) i);
                inst.put("version_log", logAreaJson(area.versionLog()));
                inst.put("backup_log", logAreaJson(area.backupLog()));
                instances.add(inst);
            }
        }
        doc.put("instances", instances);
        List<Object> slots = new ArrayList<>();
        if (vol.slots() != null) {
            for (LdsVolume.Slot s : vol.slots()) {
                Map<String, Object> slot = new LinkedHashMap<>();
                slot.put("slot", new Unsigned(s.slot()));
                slot.put("footer", s.footer() == null ? null : projectType(s.footer(), "chunk_footer"));
                if (s.valueFooter() != null) {
                    // A value chunk (format 1.4, SPEC.md §8.6).
                    slot.put("value_footer", projectType(s.valueFooter(), "value_footer"));
                }
                slots.add(slot);
            }
        }
        doc.put("slots", slots);
        return doc;
    }

    // ---- the rules of SPEC.md §15.1 ----

    static final int VERSION_LOG = 1, BACKUP_LOG = 2;
    static final int BV = 1, DV = 2, CJ = 3, WB = 4, WOL = 5, WOR = 6;

    static long crc32c(byte[] b, int from, int to) {
        CRC32C c = new CRC32C();
        c.update(b, from, to - from);
        return c.getValue();
    }

    static long u32(byte[] d, int at) {
        return (d[at] & 0xffL) | (d[at + 1] & 0xffL) << 8 | (d[at + 2] & 0xffL) << 16 | (d[at + 3] & 0xffL) << 24;
    }

    record Obj(int ofs, int type, LdsLogObject o) {}

    static class Area {
        final byte[] data;
        final int size, kind;
        final long start, instance, sector;
        final String uuid;
        /** What validAt found at each offset asked (log references reread batches). */
        final Map<Long, Obj> checked = new HashMap<>();

        Area(KaitaiStream image, LdsLabel label, long instance, int kind) {
            LdsLabel.Geometry g = label.geometry();
            this.start = kind == VERSION_LOG ? g.ofsVersionLog() + instance * g.lenVersionLog()
                    : g.ofsBackupLog() + instance * g.lenBackupLog();
            this.size = (int) (kind == VERSION_LOG ? g.lenVersionLog() : g.lenBackupLog());
            this.data = readAt(image, start, size);
            this.kind = kind;
            this.instance = instance;
            this.sector = g.sectorSize();
            this.uuid = hex(g.volumeUuid());
        }

        /** The object valid at `ofs` (SPEC.md §5), or null. */
        Obj validAt(long at) {
            if (!checked.containsKey(at)) {
                checked.put(at, check(at));
            }
            return checked.get(at);
        }

        Obj check(long at) {
            // A u8 offset past 2^63 reads as a negative long.
            if (at < 0 || at + 64 > size) {
                return null;
            }
            int ofs = (int) at;
            if (!hex(Arrays.copyOfRange(data, ofs, ofs + 4)).equals("4c44534f")) {
                return null;
            }
            long len = u32(data, ofs + 40);
            long end = ofs + 64 + len;
            if (end > size || crc32c(data, ofs + 8, ofs + 64) != u32(data, ofs + 4)) {
                return null;
            }
            LdsLogObject o = new LdsLogObject(new ByteBufferKaitaiStream(Arrays.copyOfRange(data, ofs, (int) end)));
            int type = objectType(o);
            boolean wrap = type == WOL || type == WOR;
            boolean allowed = kind == VERSION_LOG ? (type == BV || type == DV || type == CJ || wrap) : (type == WB || wrap);
            if (logKind(o) != kind || o.instance() != instance || o.logOffset() != ofs || !hex(o.volumeUuid()).equals(uuid)
                    || o.flags() != 0 || !allowed || len > size - 3 * sector - 64
                    || (wrap && (len != sector - 64 || ofs % sector != 0))
                    || crc32c(data, ofs + 64, (int) end) != o.payloadCrc32c()) {
                return null;
            }
            try {
                @SuppressWarnings("unchecked")
                String payloadType = (String) ((Map<String, Object>) view.get("payloads")).get(typeName(type));
                projectType(o.payload(), payloadType);
            } catch (RuntimeException e) {
                return null; // the payload does not decode
            }
            return new Obj(ofs, type, o);
        }

        /** chain(area, ofs, expected_lsn) of SPEC.md §9.1; expected is null for none. */
        List<Obj> chain(long ofs, Long expected) {
            List<Obj> chain = new ArrayList<>();
            Obj first = validAt(ofs);
            if (first == null || (expected != null && first.o.lsn() != expected)) {
                first = null;
                if (expected != null && ofs % sector != 0) {
                    Obj wor = validAt((ofs + sector - 1) / sector * sector);
                    if (wor != null && wor.type == WOR && wor.o.lsn() == expected) {
                        first = wor;
                    }
                }
                if (first == null) {
                    return chain;
                }
            }
            chain.add(first);
            while (chain.get(chain.size() - 1).type != WOR) {
                Obj prev = chain.get(chain.size() - 1);
                long next = (prev.ofs + 64 + prev.o.lenPayload() + 7) / 8 * 8;
                Obj cand = validAt(next);
                if (!follows(prev, cand)) {
                    cand = null;
                    if (next % sector != 0) {
                        Obj wor = validAt((next + sector - 1) / sector * sector);
                        cand = follows(prev, wor) && wor.type == WOR ? wor : null;
                    }
                }
                if (cand == null) {
                    break;
                }
                chain.add(cand);
            }
            return chain;
        }

        static boolean follows(Obj prev, Obj c) {
            return c != null && c.o.lsn() == prev.o.lsn() + 1 && Long.compareUnsigned(c.o.sn(), prev.o.sn()) >= 0;
        }
    }

    static boolean hasBv(List<Obj> chain) {
        return chain.stream().anyMatch(c -> c.type == BV);
    }

    /** The live BV followed by the live DVs and CJs (SPEC.md §9.2), or null. */
    static List<Obj> liveVersion(Area vlog) {
        List<Obj> left = vlog.chain(0, null);
        if (left.isEmpty() || (left.get(0).type != BV && left.get(0).type != WOL)) {
            return null;
        }
        List<Obj> seq = left;
        if (left.get(0).type == WOL && !hasBv(left)) {
            LdsWrap.WrapLeft wol = (LdsWrap.WrapLeft) left.get(0).o.payload();
            List<Obj> right = vlog.chain(wol.ofsFirstLive(), wol.lsnFirstLive());
            if (right.isEmpty() || right.get(right.size() - 1).type != WOR
                    || right.get(right.size() - 1).o.lsn() + 1 != left.get(0).o.lsn() || !hasBv(right)) {
                return null;
            }
            seq = new ArrayList<>(right);
            seq.addAll(left);
        }
        int lastBv = 0;
        for (int i = 0; i < seq.size(); i++) {
            if (seq.get(i).type == BV) {
                lastBv = i;
            }
        }
        List<Obj> live = new ArrayList<>();
        for (Obj c : seq.subList(lastBv, seq.size())) {
            if (c.type == BV || c.type == DV || c.type == CJ) {
                if (c.o.sn() != seq.get(lastBv).o.sn()) {
                    return null; // E_VLOG_SN
                }
                live.add(c);
            }
        }
        return live;
    }

    /** The newest entry of a key: its kind, and its value's hex (a put) or its decoded value
     *  (the LdsValuePointer of a pointer, the LdsLogRef of a log reference). */
    record Newest(long seq, int kind, String value, Object decoded) {}

    static final int DELETE = 0, PUT = 1, POINTER = 2, LOG_REF = 3;

    /** The kind code of an entry's kind (null: a kind the .ksy does not name, read as a delete). */
    static int kindCode(LdsBlock.Kind kind) {
        return kind == null ? DELETE : (int) kind.id();
    }

    record Source(LdsChunkMeta chunk, byte[] skipAtOrBelow) {}

    /** Keeps the entry when it is the newest of its key so far; a pointer or a log reference
     *  is followed only for the newest. */
    static void apply(Map<String, Newest> newest, long visible, byte[] key, long seq, int kind, byte[] value,
            Object decoded) {
        String k = hex(key);
        Newest had = newest.get(k);
        if (Long.compareUnsigned(seq, visible) <= 0 && (had == null || Long.compareUnsigned(had.seq, seq) < 0)) {
            newest.put(k, new Newest(seq, kind, kind == PUT ? hex(value) : null, kind == PUT ? null : decoded));
        }
    }

    /** The decoded value of a block entry: its pointer (kind 2), its log reference (kind 3), or null. */
    static Object decoded(LdsBlock.Entry e, int kind) {
        return kind == POINTER ? e.pointer() : kind == LOG_REF ? e.logRef() : null;
    }

    /**
     * The value a log reference names (SPEC.md §8.9; see read_log_ref of lds_reader.py): the
     * object at `ofsObject` of the instance's backup log area, valid with the reference's lsn,
     * a write batch whose entry `entryIndex` is a put of the key (hex `key`) at `sequence` with
     * `lenValue` bytes. Throws naming the key, the instance and the object's offset.
     */
    static byte[] readLogRef(Area blog, LdsLogRef ref, String key, long sequence) {
        String where = "key " + key + ": log reference to the backup log object at offset "
                + Long.toUnsignedString(blog.start + ref.ofsObject()) + " (instance " + blog.instance + ")";
        Obj found = blog.validAt(ref.ofsObject());
        if (found == null) {
            throw new IllegalStateException(where + ": no valid log object there");
        }
        if (found.type != WB) {
            throw new IllegalStateException(where + ": object type " + found.type + ", not a write batch");
        }
        if (found.o.lsn() != ref.lsn()) {
            throw new IllegalStateException(where + ": the object has lsn " + Long.toUnsignedString(found.o.lsn())
                    + ", the reference names " + Long.toUnsignedString(ref.lsn()));
        }
        LdsWriteBatch batch = (LdsWriteBatch) found.o.payload();
        if (ref.entryIndex() >= batch.entries().size()) {
            throw new IllegalStateException(where + ": entry " + ref.entryIndex() + " of a batch of " + batch.entries().size());
        }
        LdsWriteBatch.Entry entry = batch.entries().get((int) ref.entryIndex());
        if (kindCode(entry.kind()) != PUT || !hex(entry.key()).equals(key) || batch.firstSequence() + ref.entryIndex() != sequence) {
            throw new IllegalStateException(where + ": entry " + ref.entryIndex() + " is not the put of this key at sequence "
                    + Long.toUnsignedString(sequence));
        }
        if (entry.value().length != ref.lenValue()) {
            throw new IllegalStateException(where + ": the put has " + entry.value().length + " bytes of value, the reference "
                    + ref.lenValue());
        }
        return entry.value();
    }

    /**
     * {ofs, lsn, bytes} of the retention start of a version (SPEC.md §8.9): the smallest by lsn
     * of its backup start and its log chunks' log starts, and the bytes of the ring from it to
     * the backup start.
     */
    static long[] retention(Map<Long, LdsChunkMeta> chunks, long ofsStart, long lsnStart, long lenArea) {
        long lsn = lsnStart, ofs = ofsStart;
        for (LdsChunkMeta c : chunks.values()) {
            if (c.hasLogRefs() && (Long.compareUnsigned(c.lsnLogStart(), lsn) < 0
                    || (c.lsnLogStart() == lsn && Long.compareUnsigned(c.ofsLogStart(), ofs) < 0))) {
                lsn = c.lsnLogStart();
                ofs = c.ofsLogStart();
            }
        }
        long retained = Long.compareUnsigned(lsnStart, lsn) <= 0 ? 0
                : Long.compareUnsigned(ofsStart, ofs) > 0 ? ofsStart - ofs : lenArea - ofs + ofsStart;
        return new long[] {ofs, lsn, retained};
    }

    /** The value chunk ids a chunk's value references name (format 1.4, SPEC.md §6.4). */
    static List<Long> refs(LdsChunkMeta c) {
        List<Long> ids = new ArrayList<>();
        if (c.hasValueRefs()) {
            c.valueRefs().forEach(r -> ids.add(r.valueChunkId()));
        }
        return ids;
    }

    static boolean dangling(Map<Long, LdsChunkMeta> chunks, Map<Long, LdsBaseVersion.ValueChunkMeta> values) {
        return chunks.values().stream().anyMatch(c -> refs(c).stream().anyMatch(id -> !values.containsKey(id)));
    }

    /**
     * The value a pointer names (SPEC.md §8.6; see read_pointer of lds_reader.py): each extent
     * from the value chunk the version lists with its id, or for an id it does not list from
     * the extent's slot, whose footer must check and name the id and the instance; the value's
     * crc32c must equal `value_crc32c`. Throws naming the key, the slot and the offset.
     */
    static byte[] readPointer(KaitaiStream image, LdsVolume vol, long instance,
            Map<Long, LdsBaseVersion.ValueChunkMeta> values, LdsValuePointer pointer, String key) {
        LdsLabel.Geometry g = vol.label().geometry();
        ByteArrayOutputStream value = new ByteArrayOutputStream();
        for (LdsValuePointer.Extent x : pointer.extents()) {
            LdsBaseVersion.ValueChunkMeta meta = values.get(x.valueChunkId());
            long slotNo = meta != null ? meta.slot() : x.slot();
            String where = "key " + key + ": value chunk " + Long.toUnsignedString(x.valueChunkId()) + " at slot "
                    + Long.toUnsignedString(slotNo);
            if (Long.compareUnsigned(slotNo, g.numSlots()) >= 0) {
                throw new IllegalStateException(where + ": past the " + g.numSlots() + " slots");
            }
            LdsVolume.Slot slot = vol.slots().get((int) slotNo);
            if (meta == null) {
                LdsValueFooter f = slot.valueFooter();
                if (f == null) {
                    throw new IllegalStateException(where + ": no value chunk footer at offset " + slot.ofsFooter());
                }
                byte[] footer = readAt(image, slot.ofsFooter(), 156);
                if (crc32c(footer, 0, 156) != f.footerCrc32c()) {
                    throw new IllegalStateException(where + ": value chunk footer at offset " + slot.ofsFooter()
                            + ": checksum mismatch");
                }
                if (f.valueChunkId() != x.valueChunkId() || f.instance() != instance) {
                    throw new IllegalStateException(where + ": the footer at offset " + slot.ofsFooter()
                            + " names value chunk " + Long.toUnsignedString(f.valueChunkId()) + " of instance " + f.instance());
                }
            }
            if (x.offset() + x.len() > g.slotSize() - 160) {
                throw new IllegalStateException(where + ": extent " + x.offset() + "+" + x.len() + " runs into the footer");
            }
            value.writeBytes(readAt(image, slot.ofsSlot() + x.offset(), x.len()));
        }
        byte[] bytes = value.toByteArray();
        if (bytes.length != pointer.lenValue() || crc32c(bytes, 0, bytes.length) != pointer.valueCrc32c()) {
            LdsValuePointer.Extent first = pointer.extents().get(0);
            throw new IllegalStateException("key " + key + ": the value read through its pointer (value chunk "
                    + Long.toUnsignedString(first.valueChunkId()) + " offset " + first.offset() + ") does not match its value_crc32c");
        }
        return bytes;
    }

    /**
     * Slot `slotNo` of a live chunk, once the checksums of its footer, index, filter and blocks
     * hold (SPEC.md §8.2, §8.3); throws naming what does not.
     */
    /** Why the key sketch {@code raw} at device offset {@code ofs} is not valid (SPEC.md §8.7),
     *  in lds's words and order (see lds_reader.py), or null. */
    static String sketchError(byte[] raw, long ofs, long stored) {
        long computed = crc32c(raw, 0, raw.length);
        if (computed != stored) {
            return String.format("key sketch at offset %d: checksum mismatch, stored 0x%08x, computed 0x%08x",
                    ofs, stored, computed);
        }
        if (raw.length < 4) {
            return "key sketch at offset " + ofs + ": truncated, needs 4 bytes, " + raw.length + " remain";
        }
        int p = raw[0] & 0xff;
        if (raw[1] != 0 || raw[2] != 0 || raw[3] != 0) {
            return "key sketch at offset " + (ofs + 1) + ": reserved bytes are not zero";
        }
        if (p < 4 || p > 16) {
            return "key sketch at offset " + ofs + ": precision: " + p + ", not 4 to 16";
        }
        if (raw.length != 4 + (1 << p)) {
            return "key sketch at offset " + ofs + ": len_sketch: " + raw.length + " bytes where precision " + p
                    + " makes " + (4 + (1 << p));
        }
        for (int i = 0; i < raw.length - 4; i++) {
            int rank = raw[4 + i] & 0xff;
            if (rank > 65 - p) {
                return "key sketch at offset " + (ofs + 4 + i) + ": registers: register " + i + " holds " + rank
                        + " above the largest rank " + (65 - p);
            }
        }
        return null;
    }

    /** The key sketch of a slot's sub-chunk as `lds dump chunk --json` shows it (SPEC.md §8.7):
     *  null without one, its error when it is not valid, else its precision and the HyperLogLog
     *  estimate of its distinct keys. */
    static Object sketchDoc(KaitaiStream image, LdsVolume.Slot slot) {
        if (slot.footer().lenSketch() == 0) {
            return null;
        }
        long ofs = slot.ofsSlot() + slot.footer().ofsSketch();
        String error = sketchError(readAt(image, ofs, slot.footer().lenSketch()), ofs, slot.footer().sketchCrc32c());
        if (error != null) {
            Map<String, Object> doc = new LinkedHashMap<>();
            doc.put("error", error);
            return doc;
        }
        List<Integer> registers = slot.sketch().registers();
        double m = registers.size();
        double alpha = 0.7213 / (1.0 + 1.079 / m);
        double total = 0.0;
        int zeros = 0;
        for (int rank : registers) {
            total += Math.scalb(1.0, -rank);
            if (rank == 0) {
                zeros++;
            }
        }
        double estimate = alpha * m * m / total;
        if (estimate <= 2.5 * m && zeros > 0) {
            estimate = m * Math.log(m / zeros);
        }
        Map<String, Object> doc = new LinkedHashMap<>();
        doc.put("precision", slot.sketch().precision());
        doc.put("distinct_keys", (long) Math.floor(estimate + 0.5));
        return doc;
    }

    static LdsVolume.Slot checkedSlot(KaitaiStream image, LdsVolume vol, long slotNo) {
        LdsLabel.Geometry g = vol.label().geometry();
        if (slotNo >= g.numSlots() || vol.slots().get((int) slotNo).footer() == null) {
            throw new IllegalStateException("slot " + slotNo + ": no chunk footer");
        }
        LdsVolume.Slot slot = vol.slots().get((int) slotNo);
        LdsChunkFooter f = slot.footer();
        check(image, slotNo, slot.ofsSlot(), "chunk footer", g.slotSize() - 160, 156, f.footerCrc32c());
        check(image, slotNo, slot.ofsSlot(), "block index", f.ofsIndex(), f.lenIndex(), f.indexCrc32c());
        check(image, slotNo, slot.ofsSlot(), "filter", f.ofsFilter(), f.lenFilter(), f.filterCrc32c());
        for (int i = 0; i < slot.index().entries().size(); i++) {
            LdsBlockIndex.IndexEntry e = slot.index().entries().get(i);
            check(image, slotNo, slot.ofsSlot(), "block", e.ofsBlock(), e.lenBlock() - 4, slot.blocks().get(i).block().crc32c());
        }
        return slot;
    }

    static void check(KaitaiStream image, long slotNo, long ofsSlot, String what, long ofs, long len, long stored) {
        byte[] bytes = readAt(image, ofsSlot + ofs, len);
        if (crc32c(bytes, 0, bytes.length) != stored) {
            throw new IllegalStateException("slot " + slotNo + ": " + what + " at offset " + (ofsSlot + ofs) + ": checksum mismatch");
        }
    }

    /** The live version of an instance with its DVs applied (SPEC.md §6.2). */
    record Tree(Map<Long, LdsChunkMeta> chunks, long lastSequence, long ofsStart, long lsnStart,
            Map<Long, LdsCompactionJournal> journals, Map<Long, LdsBaseVersion.ValueChunkMeta> values) {}

    static Tree liveTree(KaitaiStream image, LdsVolume vol, long instance) {
        List<Obj> live = liveVersion(new Area(image, vol.label(), instance, VERSION_LOG));
        if (live == null) {
            return null;
        }
        LdsBaseVersion bv = (LdsBaseVersion) live.get(0).o.payload();
        Map<Long, LdsChunkMeta> chunks = new LinkedHashMap<>();
        bv.chunks().forEach(c -> chunks.put(c.chunkId(), c));
        if (bv.chunks().stream().anyMatch(c -> c.hasLogRefs() && c.level() != 0)) {
            return null; // log chunks stay in level 0 (SPEC.md §6.2, §8.9)
        }
        // The value chunks (format 1.4); every value reference names one (SPEC.md §6.2).
        Map<Long, LdsBaseVersion.ValueChunkMeta> values = new LinkedHashMap<>();
        List<LdsBaseVersion.ValueChunkMeta> listed = bv.values() != null ? bv.values().valueChunks() : List.of();
        listed.forEach(m -> values.put(m.valueChunkId(), m));
        if (values.size() != listed.size() || dangling(chunks, values)) {
            return null;
        }
        long lastSequence = bv.lastSequence(), ofsStart = bv.ofsBackupStart(), lsnStart = bv.lsnBackupStart();
        Map<Long, LdsCompactionJournal> journals = new LinkedHashMap<>();
        for (Obj c : live.subList(1, live.size())) {
            if (c.type == CJ) {
                LdsCompactionJournal cj = (LdsCompactionJournal) c.o.payload();
                journals.put(cj.compactionId(), cj);
                continue;
            }
            LdsDeltaVersion dv = (LdsDeltaVersion) c.o.payload();
            // A DV that contradicts the version is E_VLOG_REPLAY (SPEC.md §6.2).
            for (LdsDeltaVersion.DeletedChunk d : dv.deleted()) {
                if (!chunks.containsKey(d.chunkId()) || chunks.get(d.chunkId()).level() != d.level()) {
                    return null;
                }
                chunks.remove(d.chunkId());
            }
            LdsDeltaVersion.ValueDelta dvValues = dv.values();
            if (dvValues != null) {
                // Value chunks are deleted before they are added (SPEC.md §6.2).
                for (long id : dvValues.valueDeleted()) {
                    if (values.remove(id) == null) {
                        return null;
                    }
                }
                for (LdsBaseVersion.ValueChunkMeta m : dvValues.valueAdded()) {
                    if (values.put(m.valueChunkId(), m) != null) {
                        return null;
                    }
                }
            }
            for (LdsChunkMeta a : dv.added()) {
                Set<Long> used = new HashSet<>();
                chunks.values().forEach(o -> o.subChunks().forEach(sub -> used.add(sub.slot())));
                values.values().forEach(m -> used.add(m.slot()));
                if (chunks.containsKey(a.chunkId()) || a.level() >= bv.numLevels()
                        || a.subChunks().stream().anyMatch(sub -> used.contains(sub.slot()))) {
                    return null;
                }
                if (a.hasLogRefs() && a.level() != 0) {
                    return null; // log chunks stay in level 0 (SPEC.md §6.2, §8.9)
                }
                chunks.put(a.chunkId(), a);
            }
            if (dvValues != null && (!dvValues.valueDeleted().isEmpty() || dv.added().stream().anyMatch(a -> !refs(a).isEmpty()))
                    && dangling(chunks, values)) {
                return null; // a dangling value reference
            }
            journals.remove(dv.compactionId());
            lastSequence = dv.lastSequence();
            ofsStart = dv.ofsBackupStart();
            lsnStart = dv.lsnBackupStart();
        }
        return new Tree(chunks, lastSequence, ofsStart, lsnStart, journals, values);
    }

    static List<Map<String, Object>> instanceState(KaitaiStream image, LdsVolume vol, long instance) {
        LdsLabel label = vol.label();
        Tree tree = liveTree(image, vol, instance);
        List<Map<String, Object>> lines = new ArrayList<>();
        if (tree == null) {
            Map<String, Object> none = new LinkedHashMap<>();
            none.put("instance", instance);
            none.put("live_version", null);
            lines.add(none);
            return lines;
        }
        Map<Long, LdsChunkMeta> chunks = tree.chunks;
        long lastSequence = tree.lastSequence, ofsStart = tree.ofsStart, lsnStart = tree.lsnStart;
        Map<Long, LdsCompactionJournal> journals = tree.journals;
        // Reads of an unfinished compaction (SPEC.md §12).
        List<Source> sources = new ArrayList<>();
        chunks.values().forEach(c -> sources.add(new Source(c, null)));
        for (LdsCompactionJournal cj : journals.values()) {
            Set<Long> cleaned = new HashSet<>();
            cj.cleaned().forEach(c -> cleaned.add(c.chunkId()));
            Set<Long> inputs = new HashSet<>(cj.inputs());
            List<Source> kept = new ArrayList<>();
            for (Source s : sources) {
                if (!cleaned.contains(s.chunk.chunkId())) {
                    kept.add(new Source(s.chunk, inputs.contains(s.chunk.chunkId()) ? cj.resumeKey() : s.skipAtOrBelow));
                }
            }
            cj.outputs().forEach(c -> kept.add(new Source(c, null)));
            sources.clear();
            sources.addAll(kept);
        }
        // The backup log after the version's last sequence (SPEC.md §9.3).
        Area blog = new Area(image, label, instance, BACKUP_LOG);
        long batches = 0;
        List<Object[]> replayed = new ArrayList<>();
        List<Obj> chain = blog.chain(ofsStart, lsnStart);
        for (int lap = 0; lap < 3; lap++) {
            for (Obj c : chain) {
                if (c.type != WB) {
                    continue;
                }
                LdsWriteBatch wb = (LdsWriteBatch) c.o.payload();
                batches++;
                for (int i = 0; i < wb.entries().size(); i++) {
                    LdsWriteBatch.Entry e = wb.entries().get(i);
                    if (Long.compareUnsigned(wb.firstSequence() + i, lastSequence) > 0) {
                        int kind = kindCode(e.kind());
                        replayed.add(new Object[] {e.key(), wb.firstSequence() + i, kind, e.value(), kind == POINTER ? e.pointer() : null});
                    }
                }
            }
            if (chain.isEmpty() || chain.get(chain.size() - 1).type != WOR) {
                break;
            }
            LdsLogObject wor = chain.get(chain.size() - 1).o;
            chain = blog.chain(0, wor.lsn() + 1);
            if (chain.isEmpty() || chain.get(0).type != WOL || Long.compareUnsigned(chain.get(0).o.sn(), wor.sn()) < 0) {
                break;
            }
        }
        // Reads see sequence numbers up to the last one written: the version's, or the last
        // replayed (a chunk entry above it is not visible, fsck warning 410).
        long visible = lastSequence;
        for (Object[] r : replayed) {
            visible = Long.compareUnsigned((Long) r[1], visible) > 0 ? (Long) r[1] : visible;
        }
        Map<String, Newest> newest = new TreeMap<>();
        for (Source s : sources) {
            for (LdsChunkMeta.SubChunk sub : s.chunk.subChunks()) {
                for (LdsVolume.SlotBlock b : checkedSlot(image, vol, sub.slot()).blocks()) {
                    for (LdsBlock.Entry e : b.block().entries()) {
                        if (s.skipAtOrBelow == null || Arrays.compareUnsigned(e.key(), s.skipAtOrBelow) > 0) {
                            int kind = kindCode(e.kind());
                            apply(newest, visible, e.key(), e.sequence(), kind, e.value(), decoded(e, kind));
                        }
                    }
                }
            }
        }
        for (Object[] r : replayed) {
            apply(newest, visible, (byte[]) r[0], (Long) r[1], (Integer) r[2], (byte[]) r[3], r[4]);
        }
        Map<String, Object> summary = new LinkedHashMap<>();
        summary.put("instance", instance);
        summary.put("last_sequence", new Unsigned(lastSequence));
        List<Unsigned> ids = new ArrayList<>();
        sources.stream().map(s -> s.chunk.chunkId()).sorted(Long::compareUnsigned).forEach(id -> ids.add(new Unsigned(id)));
        summary.put("chunks", ids);
        summary.put("replayed_batches", batches);
        long[] kept = retention(chunks, ofsStart, lsnStart, label.geometry().lenBackupLog());
        summary.put("ofs_retention_start", new Unsigned(kept[0]));
        summary.put("lsn_retention_start", new Unsigned(kept[1]));
        summary.put("retained_bytes", new Unsigned(kept[2]));
        lines.add(summary);
        Map<Long, LdsBaseVersion.ValueChunkMeta> values = tree.values;
        newest.forEach((k, v) -> {
            if (v.kind == PUT || v.kind == POINTER || v.kind == LOG_REF) {
                Map<String, Object> line = new LinkedHashMap<>();
                line.put("instance", instance);
                line.put("key", k);
                line.put("value", v.kind == PUT ? v.value
                        : v.kind == POINTER ? hex(readPointer(image, vol, instance, values, (LdsValuePointer) v.decoded, k))
                        : hex(readLogRef(blog, (LdsLogRef) v.decoded, k, v.seq)));
                line.put("sequence", new Unsigned(v.seq));
                lines.add(line);
            }
        });
        return lines;
    }

    /**
     * The `lds dump IMAGE chunk ID --instance I --entries --json` document of every chunk of
     * every instance's live version but the cleaned inputs of an unfinished compaction, with
     * `instance`.
     */
    static List<Map<String, Object>> chunkDocs(KaitaiStream image, LdsVolume vol, String device) {
        List<Map<String, Object>> docs = new ArrayList<>();
        for (long instance = 0; vol.label() != null && instance < vol.label().geometry().instanceCount(); instance++) {
            Tree tree = liveTree(image, vol, instance);
            if (tree == null) {
                continue;
            }
            Set<Long> cleaned = new HashSet<>();
            tree.journals.values().forEach(cj -> cj.cleaned().forEach(c -> cleaned.add(c.chunkId())));
            List<Long> ids = new ArrayList<>(tree.chunks.keySet());
            ids.removeAll(cleaned);
            ids.sort(Long::compareUnsigned);
            for (long id : ids) {
                LdsChunkMeta meta = tree.chunks.get(id);
                List<Object> subs = new ArrayList<>();
                for (LdsChunkMeta.SubChunk sub : meta.subChunks()) {
                    LdsVolume.Slot slot = checkedSlot(image, vol, sub.slot());
                    Map<String, Object> doc = new LinkedHashMap<>();
                    doc.put("slot", new Unsigned(sub.slot()));
                    doc.put("footer", projectType(slot.footer(), "chunk_footer"));
                    doc.put("index", project(slot.index().entries(), "[index_entry]"));
                    doc.put("filter", projectType(slot.filter(), "filter"));
                    doc.put("sketch", sketchDoc(image, slot));
                    List<Object> entries = new ArrayList<>();
                    for (LdsVolume.SlotBlock b : slot.blocks()) {
                        for (LdsBlock.Entry e : b.block().entries()) {
                            entries.add(projectType(e, "block_entry"));
                        }
                    }
                    doc.put("entries", entries);
                    subs.add(doc);
                }
                Map<String, Object> doc = new LinkedHashMap<>();
                doc.put("schema", "lds-dump/1");
                doc.put("what", "chunk");
                doc.put("device", device);
                doc.put("chunk_id", new Unsigned(id));
                doc.put("meta", projectType(meta, "chunk_meta"));
                doc.put("sub_chunks", subs);
                doc.put("instance", instance);
                docs.add(doc);
            }
        }
        return docs;
    }

    // ---- JSON output ----

    /** A u64 field, printed unsigned. */
    record Unsigned(long v) {}

    static void json(StringBuilder out, Object v) {
        if (v == null) {
            out.append("null");
        } else if (v instanceof Unsigned u) {
            out.append(Long.toUnsignedString(u.v));
        } else if (v instanceof Number || v instanceof Boolean) {
            out.append(v);
        } else if (v instanceof String s) {
            out.append('"');
            for (char c : s.toCharArray()) {
                if (c == '"' || c == '\\') {
                    out.append('\\').append(c);
                } else if (c < 0x20 || c > 0x7e) {
                    out.append(String.format("\\u%04x", (int) c));
                } else {
                    out.append(c);
                }
            }
            out.append('"');
        } else if (v instanceof Map<?, ?> m) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                out.append(first ? "" : ",");
                first = false;
                json(out, e.getKey());
                out.append(':');
                json(out, e.getValue());
            }
            out.append('}');
        } else if (v instanceof List<?> l) {
            out.append('[');
            for (int i = 0; i < l.size(); i++) {
                out.append(i == 0 ? "" : ",");
                json(out, l.get(i));
            }
            out.append(']');
        } else {
            throw new IllegalStateException("no JSON for " + v.getClass());
        }
    }

    /** A minimal JSON reader for view.json (objects, arrays, strings). */
    static Object parse(String s, int[] at) {
        while (Character.isWhitespace(s.charAt(at[0]))) {
            at[0]++;
        }
        char c = s.charAt(at[0]++);
        if (c == '"') {
            int end = s.indexOf('"', at[0]);
            String str = s.substring(at[0], end);
            at[0] = end + 1;
            return str;
        }
        boolean isMap = c == '{';
        Map<String, Object> map = new LinkedHashMap<>();
        List<Object> list = new ArrayList<>();
        while (true) {
            while (Character.isWhitespace(s.charAt(at[0])) || s.charAt(at[0]) == ',') {
                at[0]++;
            }
            if (s.charAt(at[0]) == (isMap ? '}' : ']')) {
                at[0]++;
                return isMap ? map : list;
            }
            if (isMap) {
                String key = (String) parse(s, at);
                while (s.charAt(at[0]) != ':') {
                    at[0]++;
                }
                at[0]++;
                map.put(key, parse(s, at));
            } else {
                list.add(parse(s, at));
            }
        }
    }

    // ---- a volume of several devices: its address space (SPEC.md §4.3, §15.1 rule 7) ----

    /** One device: a raw file read on demand, or a gzip-compressed one held in memory. */
    static class DeviceFile {
        final RandomAccessFile raf;
        final byte[] data;
        final long size;

        DeviceFile(String file) throws IOException {
            if (file.endsWith(".gz")) {
                try (InputStream in = new GZIPInputStream(Files.newInputStream(Paths.get(file)))) {
                    data = in.readAllBytes();
                }
                raf = null;
                size = data.length;
            } else {
                raf = new RandomAccessFile(file, "r");
                data = null;
                size = raf.length();
            }
        }

        void read(long pos, byte[] dst, int at, int len) throws IOException {
            if (data != null) {
                System.arraycopy(data, (int) pos, dst, at, len);
            } else {
                raf.seek(pos);
                raf.readFully(dst, at, len);
            }
        }
    }

    /** The label at `ofs` of a device when it passes every check but the crc32c, else null. */
    static LdsLabel labelAt(DeviceFile device, long ofs) {
        if (ofs < 0 || ofs + 512 > device.size) {
            return null;
        }
        try {
            byte[] bytes = new byte[512];
            device.read(ofs, bytes, 0, 512);
            if (!new String(bytes, 0, 8, StandardCharsets.ISO_8859_1).equals("LDSLABEL")) {
                return null;
            }
            LdsLabel label = new LdsLabel(new ByteBufferKaitaiStream(bytes));
            return label.isValidExceptCrc() ? label : null;
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    /** The bytes of its device a label gives the volume (its backup label ends them). */
    static long thisLen(LdsLabel label) {
        if (!label.hasDevices()) {
            return label.geometry().volumeLen();
        }
        for (LdsLabel.DeviceEntry entry : label.devices().devices()) {
            if (Arrays.equals(entry.deviceUuid(), label.devices().deviceUuid())) {
                return entry.lenDevice();
            }
        }
        return label.geometry().volumeLen();
    }

    /** A device's label as SPEC.md §4.2 chooses it without the crc32c (see lds_reader.py). */
    static LdsLabel deviceLabel(DeviceFile device) {
        LdsLabel primary = labelAt(device, 0);
        LdsLabel backup = null;
        if (primary != null) {
            backup = labelAt(device, thisLen(primary) - primary.geometry().sectorSize());
        } else {
            for (long s = 512; s <= 65536 && backup == null; s *= 2) {
                LdsLabel found = labelAt(device, device.size - s);
                if (found != null && found.geometry().sectorSize() == s) {
                    backup = found;
                }
            }
        }
        return primary == null || (backup != null && backup.generation() > primary.generation()) ? backup : primary;
    }

    /**
     * The volume's address space over its devices, as the file RandomAccessFileKaitaiStream
     * reads: each extent is {volume offset, length, device index, device offset}; bytes of no
     * device read as zeros.
     */
    static class AddressSpaceFile extends RandomAccessFile {
        final List<long[]> extents;
        final List<DeviceFile> devices;
        final long size;
        long pos;

        AddressSpaceFile(long size, List<long[]> extents, List<DeviceFile> devices) throws IOException {
            super("/dev/null", "r");
            this.size = size;
            this.extents = extents;
            this.devices = devices;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            int n = (int) Math.max(0, Math.min(len, size - pos));
            if (n == 0 && len > 0) {
                return -1;
            }
            Arrays.fill(b, off, off + n, (byte) 0);
            for (long[] e : extents) {
                long lo = Math.max(e[0], pos);
                long hi = Math.min(e[0] + e[1], pos + n);
                if (lo < hi) {
                    devices.get((int) e[2]).read(e[3] + lo - e[0], b, off + (int) (lo - pos), (int) (hi - lo));
                }
            }
            pos += n;
            return n;
        }

        @Override
        public int read(byte[] b) throws IOException {
            return read(b, 0, b.length);
        }

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            return read(one, 0, 1) == 1 ? one[0] & 0xff : -1;
        }

        @Override
        public void seek(long to) {
            pos = to;
        }

        @Override
        public long getFilePointer() {
            return pos;
        }

        @Override
        public long length() {
            return size;
        }
    }

    /**
     * Where the address space maps the first device's backup label copy (its last sector),
     * lds_volume.ksy's parameter; 0 for a volume of one device (SPEC.md §15.1 rule 7).
     */
    static long ofsFirstDeviceBackup = 0;

    /**
     * The volume of `files` (the first device first, the others in any order): null for a
     * volume of one device (SPEC.md §4.3, §15.1 rule 7).
     */
    static KaitaiStream addressSpace(List<String> files) throws IOException {
        List<DeviceFile> devices = new ArrayList<>();
        devices.add(new DeviceFile(files.get(0)));
        // The device table is the first device's copy that §4.2 chooses on that device.
        LdsLabel label = deviceLabel(devices.get(0));
        if (label == null || !label.hasDevices()) {
            return null;
        }
        LdsLabel.Geometry g = label.geometry();
        Map<String, Integer> byUuid = new LinkedHashMap<>();
        for (String file : files.subList(1, files.size())) {
            DeviceFile device = new DeviceFile(file);
            LdsLabel own = deviceLabel(device);
            if (own != null && own.hasDevices() && Arrays.equals(own.geometry().volumeUuid(), g.volumeUuid())) {
                byUuid.put(hex(own.devices().deviceUuid()), devices.size());
                devices.add(device);
            }
        }
        List<LdsLabel.DeviceEntry> entries = label.devices().devices();
        List<long[]> extents = new ArrayList<>();
        extents.add(new long[] {0, g.ofsSlotArea() + entries.get(0).numSlots() * g.slotSize(), 0, 0});
        extents.add(new long[] {g.volumeLen() - g.sectorSize(), g.sectorSize(), 0, entries.get(0).lenDevice() - g.sectorSize()});
        for (int i = 1; i < entries.size(); i++) {
            LdsLabel.DeviceEntry entry = entries.get(i);
            Integer device = byUuid.get(hex(entry.deviceUuid()));
            if (device == null) {
                throw new IOException("device " + i + " of the volume is not given");
            }
            extents.add(new long[] {g.ofsSlotArea() + entry.firstSlot() * g.slotSize(), entry.numSlots() * g.slotSize(),
                device, Math.min(g.slotSize(), 1L << 20)});
        }
        ofsFirstDeviceBackup = g.volumeLen() - g.sectorSize();
        return new RandomAccessFileKaitaiStream(new AddressSpaceFile(g.volumeLen(), extents, devices));
    }

    @SuppressWarnings("unchecked")
    public static void main(String[] args) throws IOException {
        if (args.length < 2 || !List.of("volume", "chunks", "state").contains(args[0])) {
            System.err.println("usage: LdsReader volume|chunks|state IMAGE[.gz] [DEVICE[.gz]...]");
            System.exit(2);
        }
        Path here = Paths.get(LdsReader.class.getProtectionDomain().getCodeSource().getLocation().getPath());
        Path viewFile = here.resolve("../../view.json").normalize();
        view = (Map<String, Object>) parse(Files.readString(viewFile), new int[] {0});
        KaitaiStream image = addressSpace(Arrays.asList(args).subList(1, args.length));
        if (image != null) {
            // A volume of several devices (SPEC.md §4.3).
        } else if (args[1].endsWith(".gz")) {
            try (InputStream in = new GZIPInputStream(Files.newInputStream(Paths.get(args[1])))) {
                ByteArrayOutputStream buf = new ByteArrayOutputStream();
                in.transferTo(buf);
                image = new ByteBufferKaitaiStream(buf.toByteArray());
            }
        } else {
            image = new RandomAccessFileKaitaiStream(args[1]);
        }
        StringBuilder out = new StringBuilder();
        try {
            LdsVolume vol = new LdsVolume(image, ofsFirstDeviceBackup);
            if (args[0].equals("volume")) {
                json(out, volumeJson(vol, args[1]));
                out.append('\n');
            } else if (args[0].equals("chunks")) {
                for (Map<String, Object> doc : chunkDocs(image, vol, args[1])) {
                    json(out, doc);
                    out.append('\n');
                }
            } else if (vol.label() != null) {
                for (long i = 0; i < vol.label().geometry().instanceCount(); i++) {
                    for (Map<String, Object> line : instanceState(image, vol, i)) {
                        json(out, line);
                        out.append('\n');
                    }
                }
            }
        } catch (RuntimeException e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.err.println("LdsReader: " + args[1] + ": cannot read the volume: " + cause);
            if (System.getenv("LDS_READER_TRACE") != null) {
                e.printStackTrace();
            }
            System.exit(1);
        }
        PrintStream stdout = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        stdout.print(out);
        stdout.flush();
    }
}
