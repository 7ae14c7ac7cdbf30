//! Named places on a volume image, and the damage the fsck cases do to them.
//!
//! Every corruption in [`crate::fsck_cases`] reads as "structure + field": a [`Place`] starts
//! from a structure of SPEC.md (a [`label`] copy, a [`log_object`], a [`chunk_footer`], a
//! [`block`]'s entry...) and narrows to a field by the names of SPEC.md's byte tables, copied
//! below as [`Layout`]s (§4, §4.1, §5, §7, §8.2, §8.3, §8.6, §8.7; the names are also those of
//! formats/*.ksy). Then [`flip`], [`zero`], [`write`] or [`swap`] change exactly those bytes:
//!
//! ```
//! # use lds_fixtures::damage::{flip, label, LabelCopy};
//! # let image = lds_fixtures::versions_image();
//! # let (geometry, mut bytes) = (image.label.geometry, image.bytes);
//! // Bit 6 of byte 92 of the primary label's reserved field (device byte 300).
//! flip(&mut bytes, &label(&geometry, LabelCopy::Primary).field("reserved").byte(92), 0x40);
//! ```
//!
//! The unit tests check the tables against the format crate's encoders, so a table that
//! drifted from the code (or from SPEC.md) fails here rather than in a fixture.

use std::ops::Range;

use lds_format::chunk::footer::FOOTER_LEN;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::LABEL_LEN;
use lds_format::log::{ObjectHeader, HEADER_LEN};
use lds_format::value::VALUE_FOOTER_LEN;

/// How long a field is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Len {
    /// Always this many bytes.
    Bytes(usize),
    /// The rest of the enclosing structure (a log object's payload, a filter's bits).
    Rest,
    /// As many bytes as the named little-endian length field of the same record says (an
    /// entry's key and value).
    Given(&'static str),
}

/// One field of an on-disk structure, as SPEC.md's byte tables name it.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    /// The name in SPEC.md.
    pub name: &'static str,
    /// Offset from the structure's start; `None`: right after the previous field.
    pub offset: Option<usize>,
    /// Its length.
    pub len: Len,
    /// The field's own layout when it is a structure (the label's geometry).
    pub layout: Option<&'static Layout>,
}

/// The byte table of one structure.
#[derive(Debug)]
pub struct Layout {
    /// What it is.
    pub name: &'static str,
    /// Where SPEC.md defines it.
    pub section: &'static str,
    /// Its fields, in order.
    pub fields: &'static [Field],
}

impl Layout {
    /// The field called `name`.
    pub fn field(&self, name: &str) -> &Field {
        self.fields
            .iter()
            .find(|field| field.name == name)
            .unwrap_or_else(|| panic!("{} (SPEC.md {}) has no field {name}", self.name, self.section))
    }
}

const fn at(name: &'static str, offset: usize, len: usize) -> Field {
    Field { name, offset: Some(offset), len: Len::Bytes(len), layout: None }
}

const fn rest(name: &'static str, offset: usize) -> Field {
    Field { name, offset: Some(offset), len: Len::Rest, layout: None }
}

const fn sized_by(name: &'static str, len_field: &'static str) -> Field {
    Field { name, offset: None, len: Len::Given(len_field), layout: None }
}

/// The volume label (SPEC.md §4), 512 bytes at the start of its sector.
pub const LABEL: Layout = Layout {
    name: "label",
    section: "§4",
    fields: &[
        at("magic", 0, 8),
        at("version_major", 8, 2),
        at("version_minor", 10, 2),
        at("len_label", 12, 4),
        at("features_compat", 16, 8),
        at("features_ro_compat", 24, 8),
        at("features_incompat", 32, 8),
        Field { name: "geometry", offset: Some(40), len: Len::Bytes(96), layout: Some(&GEOMETRY) },
        at("generation", 136, 8),
        at("volume_name", 144, 64),
        at("reserved", 208, 300),
        at("crc32c", 508, 4),
    ],
};

/// The geometry (SPEC.md §4.1), in the label and replicated in every base version.
pub const GEOMETRY: Layout = Layout {
    name: "geometry",
    section: "§4.1",
    fields: &[
        at("volume_uuid", 0, 16),
        at("sector_size", 16, 4),
        at("instance_count", 20, 4),
        at("volume_len", 24, 8),
        at("ofs_version_log", 32, 8),
        at("len_version_log", 40, 8),
        at("ofs_backup_log", 48, 8),
        at("len_backup_log", 56, 8),
        at("ofs_slot_area", 64, 8),
        at("slot_size", 72, 8),
        at("num_slots", 80, 8),
        at("reserved", 88, 8),
    ],
};

/// A log object (SPEC.md §5): the 64-byte header, then the payload (the zero padding to 8
/// bytes after it is not part of the object's place).
pub const LOG_OBJECT: Layout = Layout {
    name: "log object",
    section: "§5",
    fields: &[
        at("magic", 0, 4),
        at("header_crc32c", 4, 4),
        at("object_type", 8, 1),
        at("log_kind", 9, 1),
        at("flags", 10, 2),
        at("instance", 12, 4),
        at("sn", 16, 8),
        at("lsn", 24, 8),
        at("log_offset", 32, 8),
        at("len_payload", 40, 4),
        at("payload_crc32c", 44, 4),
        at("volume_uuid", 48, 16),
        rest("payload", 64),
    ],
};

/// The payload of a write batch (SPEC.md §7); `entries` holds [`BATCH_ENTRY`] records.
pub const WRITE_BATCH: Layout = Layout {
    name: "write batch",
    section: "§7",
    fields: &[at("first_sequence", 0, 8), at("num_entries", 8, 4), at("synced_lsn_low", 12, 4), rest("entries", 16)],
};

/// One entry of a write batch (SPEC.md §7).
pub const BATCH_ENTRY: Layout = Layout {
    name: "write batch entry",
    section: "§7",
    fields: &[
        at("kind", 0, 1),
        at("len_key", 1, 2),
        at("len_value", 3, 4),
        sized_by("key", "len_key"),
        sized_by("value", "len_value"),
    ],
};

/// One fixed entry of a block (SPEC.md §8.2); a block is a run of them, then [`BLOCK_TRAILER`].
/// The fixture images are written without feature `compact_entries` (`Label::new`), so their
/// blocks hold fixed entries; a compact block's entries are varints this table cannot place.
pub const BLOCK_ENTRY: Layout = Layout {
    name: "block entry",
    section: "§8.2",
    fields: &[
        at("seq_kind", 0, 8),
        at("len_key", 8, 2),
        at("len_value", 10, 4),
        sized_by("key", "len_key"),
        sized_by("value", "len_value"),
    ],
};

/// The last 8 bytes of a block (SPEC.md §8.2).
pub const BLOCK_TRAILER: Layout =
    Layout { name: "block trailer", section: "§8.2", fields: &[at("num_entries", 0, 4), at("crc32c", 4, 4)] };

/// One entry of the block index (SPEC.md §8.2: `last_key` is a u16 length, `len_last_key` as
/// formats/lds_block_index.ksy calls it, then the key bytes).
pub const INDEX_ENTRY: Layout = Layout {
    name: "block index entry",
    section: "§8.2",
    fields: &[
        at("ofs_block", 0, 4),
        at("len_block", 4, 4),
        at("last_seq_kind", 8, 8),
        at("len_last_key", 16, 2),
        sized_by("last_key", "len_last_key"),
    ],
};

/// The Bloom filter (SPEC.md §8.3), `len_filter` bytes at `ofs_filter`.
pub const FILTER: Layout = Layout {
    name: "filter",
    section: "§8.3",
    fields: &[at("num_probes", 0, 1), at("reserved", 1, 3), at("num_bits", 4, 4), rest("bits", 8)],
};

/// The chunk footer (SPEC.md §8.3), the last 160 bytes of a slot.
pub const CHUNK_FOOTER: Layout = Layout {
    name: "chunk footer",
    section: "§8.3",
    fields: &[
        at("magic", 0, 8),
        at("version_major", 8, 2),
        at("level", 10, 1),
        at("flags", 11, 1),
        at("instance", 12, 4),
        at("chunk_id", 16, 8),
        at("sub_chunk_index", 24, 2),
        at("num_sub_chunks", 26, 2),
        at("num_blocks", 28, 4),
        at("num_entries", 32, 8),
        at("smallest_seq", 40, 8),
        at("largest_seq", 48, 8),
        at("len_body", 56, 4),
        at("ofs_index", 60, 4),
        at("len_index", 64, 4),
        at("index_crc32c", 68, 4),
        at("ofs_filter", 72, 4),
        at("len_filter", 76, 4),
        at("filter_crc32c", 80, 4),
        at("slot_size", 84, 4),
        at("volume_uuid", 88, 16),
        at("digest", 104, 32),
        at("ofs_sketch", 136, 4),
        at("len_sketch", 140, 4),
        at("sketch_crc32c", 144, 4),
        at("reserved", 148, 8),
        at("footer_crc32c", 156, 4),
    ],
};

/// A key sketch (SPEC.md §8.7), `len_sketch` bytes at `ofs_sketch` of its slot.
pub const KEY_SKETCH: Layout = Layout {
    name: "key sketch",
    section: "§8.7",
    fields: &[at("precision", 0, 1), at("reserved", 1, 3), rest("registers", 4)],
};

/// A value chunk footer (SPEC.md §8.6), the last 160 bytes of its slot (the two reserved runs
/// named as formats/lds_value_footer.ksy names them).
pub const VALUE_FOOTER: Layout = Layout {
    name: "value chunk footer",
    section: "§8.6",
    fields: &[
        at("magic", 0, 8),
        at("version_major", 8, 2),
        at("reserved1", 10, 1),
        at("flags", 11, 1),
        at("instance", 12, 4),
        at("value_chunk_id", 16, 8),
        at("len_body", 24, 4),
        at("slot_size", 28, 4),
        at("volume_uuid", 32, 16),
        at("digest", 48, 32),
        at("reserved2", 80, 76),
        at("footer_crc32c", 156, 4),
    ],
};

/// Every table, for the tests.
pub const LAYOUTS: &[&Layout] = &[
    &LABEL,
    &GEOMETRY,
    &LOG_OBJECT,
    &WRITE_BATCH,
    &BATCH_ENTRY,
    &BLOCK_ENTRY,
    &BLOCK_TRAILER,
    &INDEX_ENTRY,
    &FILTER,
    &CHUNK_FOOTER,
    &KEY_SKETCH,
    &VALUE_FOOTER,
];

/// A run of bytes of the image, named by the structure and fields it was reached through.
#[derive(Debug, Clone)]
pub struct Place {
    /// What it is: `primary label.geometry.len_backup_log[4]`.
    pub what: String,
    /// Device offset of its first byte.
    pub offset: usize,
    /// Bytes.
    pub len: usize,
    layout: Option<&'static Layout>,
    /// Values of the length fields of a record read from the image (for [`Len::Given`]).
    given: Vec<(&'static str, usize)>,
}

impl Place {
    /// Plain bytes with no field table.
    pub fn bytes(what: impl Into<String>, offset: u64, len: u64) -> Self {
        Self { what: what.into(), offset: offset as usize, len: len as usize, layout: None, given: Vec::new() }
    }

    /// A structure of `layout` at `offset`.
    pub fn structure(what: impl Into<String>, offset: u64, len: u64, layout: &'static Layout) -> Self {
        Self { layout: Some(layout), ..Self::bytes(what, offset, len) }
    }

    /// The same bytes read as a structure of `layout` (a log object's payload as a write
    /// batch).
    pub fn read_as(&self, layout: &'static Layout) -> Self {
        Self { layout: Some(layout), given: Vec::new(), ..self.clone() }
    }

    /// The device byte range.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }

    /// Each field of the layout with its offset and length inside this place, up to and
    /// including the one called `until` (all of them: `None`).
    fn resolve(&self, until: Option<&str>) -> Vec<(&'static Field, usize, usize)> {
        let layout = self.layout.unwrap_or_else(|| panic!("{} has no field table", self.what));
        let mut resolved = Vec::with_capacity(layout.fields.len());
        let mut cursor = 0;
        for field in layout.fields {
            let offset = field.offset.unwrap_or(cursor);
            let len = match field.len {
                Len::Bytes(len) => len,
                Len::Rest => self.len.checked_sub(offset).unwrap_or_else(|| panic!("{} is too short", self.what)),
                Len::Given(source) => {
                    self.given.iter().find(|(name, _)| *name == source).map(|(_, len)| *len).unwrap_or_else(|| {
                        panic!(
                            "{}.{}: its length {source} is in the image: reach it with entry()",
                            self.what, field.name
                        )
                    })
                }
            };
            resolved.push((field, offset, len));
            cursor = offset + len;
            if until == Some(field.name) {
                break;
            }
        }
        resolved
    }

    /// The field called `name`.
    pub fn field(&self, name: &str) -> Self {
        let (field, offset, len) = self
            .resolve(Some(name))
            .pop()
            .filter(|(field, _, _)| field.name == name)
            .unwrap_or_else(|| panic!("{} has no field {name}", self.what));
        assert!(offset + len <= self.len, "{}.{name} runs past the structure", self.what);
        Self {
            what: format!("{}.{name}", self.what),
            offset: self.offset + offset,
            len,
            layout: field.layout,
            given: Vec::new(),
        }
    }

    /// Byte `index` of this place.
    pub fn byte(&self, index: usize) -> Self {
        assert!(index < self.len, "{}[{index}]: it has {} bytes", self.what, self.len);
        Self::bytes(format!("{}[{index}]", self.what), (self.offset + index) as u64, 1)
    }

    /// The bytes after the first `skip` (the second half of a payload).
    pub fn after(&self, skip: usize) -> Self {
        assert!(skip <= self.len, "{}: {skip} is past its {} bytes", self.what, self.len);
        Self::bytes(format!("{}[{skip}..]", self.what), (self.offset + skip) as u64, (self.len - skip) as u64)
    }

    /// The last `len` bytes read as a structure of `layout` (a block's trailer).
    pub fn last(&self, len: usize, layout: &'static Layout) -> Self {
        assert!(len <= self.len, "{}: shorter than {len} bytes", self.what);
        Self::structure(
            format!("{}.{}", self.what, layout.name),
            (self.offset + self.len - len) as u64,
            len as u64,
            layout,
        )
    }

    /// Record `index` of a run of `layout` records packed from this place's start (block
    /// entries, batch entries, index entries), their lengths read from the image.
    pub fn entry(&self, bytes: &[u8], layout: &'static Layout, index: usize) -> Self {
        let mut start = self.offset;
        for number in 0..=index {
            let mut record = Self {
                what: format!("{}.{}[{number}]", self.what, layout.name),
                offset: start,
                len: self.offset + self.len - start,
                layout: Some(layout),
                given: Vec::new(),
            };
            for field in layout.fields {
                if let Len::Given(source) = field.len {
                    let length = record.field(source).read(bytes) as usize;
                    record.given.push((source, length));
                }
            }
            let (_, offset, len) =
                record.resolve(None).last().copied().unwrap_or_else(|| panic!("{} is empty", layout.name));
            record.len = offset + len;
            assert!(start + record.len <= self.offset + self.len, "{} runs past {}", record.what, self.what);
            if number == index {
                return record;
            }
            start += record.len;
        }
        unreachable!("the loop returns at its last turn")
    }

    /// The little-endian value of a field of at most 8 bytes.
    pub fn read(&self, bytes: &[u8]) -> u64 {
        assert!(self.len <= 8, "{} is not a number", self.what);
        bytes[self.range()].iter().rev().fold(0, |value, &byte| value << 8 | u64::from(byte))
    }
}

/// Which label copy (SPEC.md §4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelCopy {
    /// At offset 0.
    Primary,
    /// In the volume's last sector.
    Backup,
}

fn label_offset(geometry: &Geometry, copy: LabelCopy) -> u64 {
    match copy {
        LabelCopy::Primary => 0,
        LabelCopy::Backup => geometry.ofs_backup_label(),
    }
}

fn copy_name(copy: LabelCopy) -> &'static str {
    match copy {
        LabelCopy::Primary => "primary",
        LabelCopy::Backup => "backup",
    }
}

/// A label copy (SPEC.md §4).
pub fn label(geometry: &Geometry, copy: LabelCopy) -> Place {
    Place::structure(format!("{} label", copy_name(copy)), label_offset(geometry, copy), LABEL_LEN as u64, &LABEL)
}

/// The whole sector of a label copy (the label, then zeros).
pub fn label_sector(geometry: &Geometry, copy: LabelCopy) -> Place {
    Place::bytes(format!("{} label sector", copy_name(copy)), label_offset(geometry, copy), geometry.sector())
}

/// An instance's log area (SPEC.md §3).
pub fn log_area(geometry: &Geometry, kind: LogKind, instance: u32) -> Place {
    let (offset, len) = geometry.log_area(kind, instance);
    Place::bytes(format!("{} of instance {instance}", kind.name()), offset, len)
}

/// The log object at a device offset (SPEC.md §5), its length read from its header.
pub fn log_object(bytes: &[u8], device_offset: u64) -> Place {
    let at = device_offset as usize;
    let header =
        ObjectHeader::parse_raw(&bytes[at..at + HEADER_LEN], device_offset).unwrap_or_else(|error| panic!("{error}"));
    let name = header.object_type().map_or("unknown", |object_type| object_type.name());
    Place::structure(
        format!("{name} object @ {device_offset}"),
        device_offset,
        (HEADER_LEN as u64) + u64::from(header.len_payload),
        &LOG_OBJECT,
    )
}

/// A slot of the slot area (SPEC.md §8.1).
pub fn slot(geometry: &Geometry, slot: u64) -> Place {
    Place::bytes(format!("slot {slot}"), geometry.slot_offset(slot), geometry.slot_size)
}

/// The chunk footer of a slot (SPEC.md §8.3).
pub fn chunk_footer(geometry: &Geometry, slot: u64) -> Place {
    let at = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
    Place::structure(format!("chunk footer of slot {slot}"), at, FOOTER_LEN as u64, &CHUNK_FOOTER)
}

/// The block index of a slot's chunk (SPEC.md §8.2), found through its footer: a run of
/// [`INDEX_ENTRY`] records.
pub fn block_index(bytes: &[u8], geometry: &Geometry, slot: u64) -> Place {
    let footer = chunk_footer(geometry, slot);
    Place::bytes(
        format!("block index of slot {slot}"),
        geometry.slot_offset(slot) + footer.field("ofs_index").read(bytes),
        footer.field("len_index").read(bytes),
    )
}

/// The filter of a slot's chunk (SPEC.md §8.3), found through its footer.
pub fn filter(bytes: &[u8], geometry: &Geometry, slot: u64) -> Place {
    let footer = chunk_footer(geometry, slot);
    Place::structure(
        format!("filter of slot {slot}"),
        geometry.slot_offset(slot) + footer.field("ofs_filter").read(bytes),
        footer.field("len_filter").read(bytes),
        &FILTER,
    )
}

/// The key sketch of a slot's chunk (SPEC.md §8.7), found through its footer.
pub fn key_sketch(bytes: &[u8], geometry: &Geometry, slot: u64) -> Place {
    let footer = chunk_footer(geometry, slot);
    let len = footer.field("len_sketch").read(bytes);
    assert!(len > 0, "the chunk in slot {slot} has no key sketch");
    Place::structure(
        format!("key sketch of slot {slot}"),
        geometry.slot_offset(slot) + footer.field("ofs_sketch").read(bytes),
        len,
        &KEY_SKETCH,
    )
}

/// The footer of the value chunk in a slot (SPEC.md §8.6).
pub fn value_footer(geometry: &Geometry, slot: u64) -> Place {
    let at = geometry.slot_offset(slot) + geometry.slot_size - VALUE_FOOTER_LEN as u64;
    Place::structure(format!("value chunk footer of slot {slot}"), at, VALUE_FOOTER_LEN as u64, &VALUE_FOOTER)
}

/// The values of the value chunk in a slot (SPEC.md §8.6: its body, `len_body` bytes from the
/// slot start), found through its footer.
pub fn value_body(bytes: &[u8], geometry: &Geometry, slot: u64) -> Place {
    let len = value_footer(geometry, slot).field("len_body").read(bytes);
    Place::bytes(format!("values of the value chunk in slot {slot}"), geometry.slot_offset(slot), len)
}

/// Block `number` of a slot's chunk (SPEC.md §8.2), found through its index entry: a run of
/// [`BLOCK_ENTRY`] records, then the [`BLOCK_TRAILER`].
pub fn block(bytes: &[u8], geometry: &Geometry, slot: u64, number: usize) -> Place {
    let entry = block_index(bytes, geometry, slot).entry(bytes, &INDEX_ENTRY, number);
    Place::bytes(
        format!("block {number} of slot {slot}"),
        geometry.slot_offset(slot) + entry.field("ofs_block").read(bytes),
        entry.field("len_block").read(bytes),
    )
}

/// Flips the bits of `mask` in a one-byte place.
pub fn flip(bytes: &mut [u8], place: &Place, mask: u8) {
    assert!(place.len == 1, "flip one byte, not {} ({} bytes)", place.what, place.len);
    bytes[place.offset] ^= mask;
}

/// Zeroes a place.
pub fn zero(bytes: &mut [u8], place: &Place) {
    bytes[place.range()].fill(0);
}

/// Overwrites a place with `data`, exactly its length.
pub fn write(bytes: &mut [u8], place: &Place, data: &[u8]) {
    assert!(data.len() == place.len, "{}: {} bytes for a place of {}", place.what, data.len(), place.len);
    bytes[place.range()].copy_from_slice(data);
}

/// Exchanges two places of equal length that do not overlap.
pub fn swap(bytes: &mut [u8], first: &Place, second: &Place) {
    assert!(first.len == second.len, "{} and {} differ in length", first.what, second.what);
    assert!(first.range().end <= second.offset || second.range().end <= first.offset, "they overlap");
    let saved = bytes[first.range()].to_vec();
    bytes.copy_within(second.range(), first.offset);
    bytes[second.range()].copy_from_slice(&saved);
}

#[cfg(test)]
mod tests {
    use super::*;
    use lds_format::batch::{BatchEntry, WriteBatchRecord};
    use lds_format::chunk::footer::Footer;
    use lds_format::chunk::view::SubChunkView;
    use lds_format::codec::crc32c;
    use lds_format::entry::{pack_seq_kind, EntryKind};
    use lds_format::log::{encode_object, NewObject, ObjectType};

    #[test]
    fn fixed_fields_are_contiguous_and_fill_their_structures() {
        for layout in LAYOUTS {
            // The offset of the next field while every length so far is fixed.
            let mut cursor = Some(0);
            for (number, field) in layout.fields.iter().enumerate() {
                if let (Some(offset), Some(expected)) = (field.offset, cursor) {
                    assert_eq!(offset, expected, "{}.{} does not follow the field before it", layout.name, field.name);
                }
                assert!(field.offset.is_some() || number > 0, "{}: the first field needs an offset", layout.name);
                cursor = match field.len {
                    Len::Bytes(len) => field.offset.or(cursor).map(|offset| offset + len),
                    Len::Rest => {
                        assert_eq!(
                            number + 1,
                            layout.fields.len(),
                            "{}.{}: only the last field runs on",
                            layout.name,
                            field.name
                        );
                        None
                    }
                    Len::Given(source) => {
                        assert!(matches!(layout.field(source).len, Len::Bytes(1..=8)), "{}: {source}", layout.name);
                        None
                    }
                };
                if let (Some(inner), Len::Bytes(len)) = (field.layout, field.len) {
                    let inner_len: usize =
                        inner.fields.iter().map(|field| if let Len::Bytes(len) = field.len { len } else { 0 }).sum();
                    assert_eq!(inner_len, len, "{}.{}", layout.name, field.name);
                }
            }
        }
        let total = |layout: &Layout| -> usize {
            layout.fields.iter().map(|field| if let Len::Bytes(len) = field.len { len } else { 0 }).sum()
        };
        assert_eq!(total(&LABEL), LABEL_LEN);
        assert_eq!(total(&LOG_OBJECT), HEADER_LEN);
        assert_eq!(total(&CHUNK_FOOTER), FOOTER_LEN);
        assert_eq!(total(&WRITE_BATCH), lds_format::batch::BATCH_HEADER_LEN);
        assert_eq!(total(&BATCH_ENTRY), lds_format::batch::BATCH_ENTRY_FIXED_LEN);
        assert_eq!(total(&BLOCK_ENTRY), lds_format::chunk::block::ENTRY_FIXED_LEN);
        assert_eq!(total(&BLOCK_TRAILER), lds_format::chunk::block::BLOCK_TRAILER_LEN);
        assert_eq!(total(&INDEX_ENTRY), lds_format::chunk::index::INDEX_ENTRY_FIXED_LEN);
        assert_eq!(total(&FILTER), lds_format::chunk::filter::FILTER_HEADER_LEN);
        assert_eq!(total(&KEY_SKETCH), lds_format::sketch::SKETCH_HEADER_LEN);
        assert_eq!(total(&VALUE_FOOTER), VALUE_FOOTER_LEN);
    }

    #[test]
    fn the_value_chunk_tables_match_the_value_encoders() {
        let volume = crate::values_image();
        let geometry = volume.image.label.geometry;
        let bytes = &volume.image.bytes;
        let slot = crate::VALUE_CHUNK_SLOT;
        let footer = value_footer(&geometry, slot);
        let decoded = lds_format::value::ValueFooter::decode(&bytes[footer.range()], 0, geometry.slot_size)
            .unwrap_or_else(|error| panic!("{error}"));
        assert_eq!(&bytes[footer.range()], &decoded.encode()[..]);
        assert_eq!(&bytes[footer.field("magic").range()], b"LDSVALUE");
        assert_eq!(footer.field("value_chunk_id").read(bytes), volume.value_chunk.value_chunk_id);
        assert_eq!(footer.field("len_body").read(bytes), u64::from(volume.value_chunk.len_body));
        assert_eq!(footer.field("slot_size").read(bytes), geometry.slot_size);
        assert_eq!(&bytes[footer.field("volume_uuid").range()], &geometry.volume_uuid);
        assert_eq!(&bytes[footer.field("digest").range()], &volume.value_chunk.digest);
        let crc = u64::from(crc32c(&bytes[footer.offset..footer.field("footer_crc32c").offset]));
        assert_eq!(footer.field("footer_crc32c").read(bytes), crc);
        // Each pointer's extents are bytes of the values.
        let body = value_body(bytes, &geometry, slot);
        assert_eq!(body.len, volume.value_chunk.len_body as usize);
        for (_, pointer) in &volume.pointers {
            let extent = pointer.extents[0];
            let start = body.offset + extent.offset as usize;
            let value = &bytes[start..start + extent.len as usize];
            assert_eq!(crc32c(value), pointer.value_crc32c);
        }
    }

    #[test]
    fn the_key_sketch_table_matches_the_sketch_encoder() {
        let image = crate::sketches_image();
        let geometry = image.label.geometry;
        let bytes = &image.bytes;
        for slot in [3, 4] {
            let place = key_sketch(bytes, &geometry, slot);
            let footer = chunk_footer(&geometry, slot);
            let crc = footer.field("sketch_crc32c").read(bytes) as u32;
            let sketch = lds_format::sketch::Sketch::decode(&bytes[place.range()], 0, crc)
                .unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(&bytes[place.range()], &sketch.encode()[..]);
            assert_eq!(place.field("precision").read(bytes), u64::from(sketch.precision()));
            assert_eq!(place.field("registers").len, 1 << sketch.precision());
            assert_eq!(
                place.range().end as u64,
                geometry.slot_offset(slot) + footer.field("ofs_index").read(bytes),
                "the sketch lies just before the index"
            );
        }
    }

    #[test]
    fn the_label_table_matches_label_encode() {
        let image = crate::versions_image();
        let geometry = image.label.geometry;
        let bytes = &image.bytes;
        for copy in [LabelCopy::Primary, LabelCopy::Backup] {
            let label = label(&geometry, copy);
            assert_eq!(&bytes[label.range()], &image.label.encode()[..]);
            assert_eq!(&bytes[label.field("magic").range()], b"LDSLABEL");
            assert_eq!(label.field("generation").read(bytes), image.label.generation);
            assert!(bytes[label.field("volume_name").range()].starts_with(b"versions"));
            let crc = label.field("crc32c").read(bytes);
            assert_eq!(crc, u64::from(crc32c(&bytes[label.offset..label.field("crc32c").offset])));
            let replica = label.field("geometry");
            assert_eq!(&bytes[replica.field("volume_uuid").range()], &geometry.volume_uuid);
            assert_eq!(replica.field("sector_size").read(bytes), u64::from(geometry.sector_size));
            assert_eq!(replica.field("len_backup_log").read(bytes), geometry.len_backup_log);
            assert_eq!(replica.field("num_slots").read(bytes), geometry.num_slots);
        }
    }

    #[test]
    fn the_log_object_and_write_batch_tables_match_the_encoders() {
        let batch = WriteBatchRecord {
            first_sequence: 77,
            entries: vec![
                BatchEntry { kind: EntryKind::Put, key: b"alpha".to_vec(), value: b"one".to_vec() },
                BatchEntry { kind: EntryKind::Delete, key: b"be".to_vec(), value: Vec::new() },
            ],
            synced_lsn_low: 0,
        };
        let payload = batch.encode();
        let new = NewObject {
            object_type: ObjectType::WriteBatch,
            kind: LogKind::Backup,
            instance: 3,
            sn: 11,
            lsn: 12,
            log_offset: 4096,
            volume_uuid: [0xab; 16],
        };
        let mut bytes = vec![0u8; 64];
        bytes.extend(encode_object(&new, &payload));
        let object = log_object(&bytes, 64);
        assert_eq!(object.len, HEADER_LEN + payload.len());
        assert_eq!(&bytes[object.field("magic").range()], b"LDSO");
        let header_crc = u64::from(crc32c(&bytes[object.offset + 8..object.offset + HEADER_LEN]));
        assert_eq!(object.field("header_crc32c").read(&bytes), header_crc);
        assert_eq!(object.field("object_type").read(&bytes), u64::from(ObjectType::WriteBatch.code()));
        assert_eq!(object.field("log_kind").read(&bytes), u64::from(LogKind::Backup.code()));
        assert_eq!(object.field("instance").read(&bytes), 3);
        assert_eq!(object.field("sn").read(&bytes), 11);
        assert_eq!(object.field("lsn").read(&bytes), 12);
        assert_eq!(object.field("log_offset").read(&bytes), 4096);
        assert_eq!(object.field("len_payload").read(&bytes), payload.len() as u64);
        assert_eq!(object.field("payload_crc32c").read(&bytes), u64::from(crc32c(&payload)));
        assert_eq!(&bytes[object.field("volume_uuid").range()], &[0xab; 16]);
        let wb = object.field("payload").read_as(&WRITE_BATCH);
        assert_eq!(&bytes[wb.range()], &payload[..]);
        assert_eq!(wb.field("first_sequence").read(&bytes), 77);
        assert_eq!(wb.field("num_entries").read(&bytes), 2);
        let entries = wb.field("entries");
        let first = entries.entry(&bytes, &BATCH_ENTRY, 0);
        assert_eq!(first.field("kind").read(&bytes), u64::from(EntryKind::Put.code()));
        assert_eq!(&bytes[first.field("key").range()], b"alpha");
        assert_eq!(&bytes[first.field("value").range()], b"one");
        let second = entries.entry(&bytes, &BATCH_ENTRY, 1);
        assert_eq!(second.field("len_key").read(&bytes), 2);
        assert_eq!(&bytes[second.field("key").range()], b"be");
        assert_eq!(second.range().end, object.range().end);
    }

    #[test]
    fn the_chunk_tables_match_the_chunk_encoder() {
        let image = crate::versions_image();
        let geometry = image.label.geometry;
        let bytes = &image.bytes;
        let slot_number = 8;
        let slot_place = slot(&geometry, slot_number);
        let view =
            SubChunkView::open(&bytes[slot_place.range()], slot_place.offset as u64).unwrap_or_else(|e| panic!("{e}"));
        let footer = chunk_footer(&geometry, slot_number);
        // Footer::encode puts each field where the table says.
        let encoded: [u8; FOOTER_LEN] = Footer::encode(&view.footer);
        assert_eq!(&bytes[footer.range()], &encoded[..]);
        assert_eq!(&bytes[footer.field("digest").range()], &view.footer.digest);
        assert_eq!(&bytes[footer.field("magic").range()], b"LDSCHUNK");
        assert_eq!(footer.field("chunk_id").read(bytes), view.footer.chunk_id);
        assert_eq!(footer.field("num_entries").read(bytes), view.footer.num_entries);
        assert_eq!(footer.field("ofs_index").read(bytes), u64::from(view.footer.ofs_index));
        assert_eq!(footer.field("ofs_filter").read(bytes), u64::from(view.footer.ofs_filter));
        assert_eq!(footer.field("filter_crc32c").read(bytes), u64::from(view.footer.filter_crc32c));
        assert_eq!(footer.field("slot_size").read(bytes), geometry.slot_size);
        assert_eq!(&bytes[footer.field("volume_uuid").range()], &geometry.volume_uuid);
        let crc = u64::from(crc32c(&bytes[footer.offset..footer.field("footer_crc32c").offset]));
        assert_eq!(footer.field("footer_crc32c").read(bytes), crc);
        // The index and its entries.
        let index = block_index(bytes, &geometry, slot_number);
        let first = index.entry(bytes, &INDEX_ENTRY, 0);
        assert_eq!(first.field("ofs_block").read(bytes), u64::from(view.index[0].ofs_block));
        assert_eq!(first.field("len_block").read(bytes), u64::from(view.index[0].len_block));
        assert_eq!(first.field("last_seq_kind").read(bytes), view.index[0].last_seq_kind);
        assert_eq!(&bytes[first.field("last_key").range()], &view.index[0].last_key[..]);
        // The filter.
        let bloom = filter(bytes, &geometry, slot_number);
        assert_eq!(bloom.field("num_probes").read(bytes), u64::from(view.filter.num_probes));
        assert_eq!(bloom.field("num_bits").read(bytes), u64::from(view.filter.num_bits()));
        assert_eq!(&bytes[bloom.field("bits").range()], &view.filter.bits[..]);
        // Block 0's entries and trailer.
        let block_place = block(bytes, &geometry, slot_number, 0);
        assert_eq!(&bytes[block_place.range()], view.block(0));
        let entries = view.entries(slot_place.offset as u64).unwrap_or_else(|error| panic!("{error}"));
        for (number, expected) in entries.iter().take(3).enumerate() {
            let entry = block_place.entry(bytes, &BLOCK_ENTRY, number);
            assert_eq!(entry.field("seq_kind").read(bytes), pack_seq_kind(expected.sequence, expected.kind));
            assert_eq!(&bytes[entry.field("key").range()], expected.key);
            assert_eq!(&bytes[entry.field("value").range()], expected.value);
        }
        let trailer = block_place.last(lds_format::chunk::block::BLOCK_TRAILER_LEN, &BLOCK_TRAILER);
        let crc = u64::from(crc32c(&bytes[block_place.offset..trailer.field("crc32c").offset]));
        assert_eq!(trailer.field("crc32c").read(bytes), crc);
        assert_eq!(trailer.field("num_entries").read(bytes), entries.len() as u64);
    }

    #[test]
    fn places_name_what_they_reach() {
        let image = crate::versions_image();
        let place = label(&image.label.geometry, LabelCopy::Primary).field("geometry").field("len_backup_log").byte(4);
        assert_eq!(place.what, "primary label.geometry.len_backup_log[4]");
        assert_eq!(place.offset, 100);
    }
}
