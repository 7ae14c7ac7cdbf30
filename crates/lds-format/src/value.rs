//! Value chunks and value pointers (SPEC.md §8.6, feature `value_chunks`, format 1.4): large
//! values live in slots of their own, and the tree's entry for the key (kind 2, `pointer`)
//! names the extents that hold them.

use std::collections::BTreeMap;

use crate::codec::{crc32c, Reader, Writer};
use crate::digest::{DigestKind, DigestState, FOOTER_FLAG_XXH3};
use crate::error::FormatError;

/// The magic of a value chunk footer.
pub const VALUE_MAGIC: [u8; 8] = *b"LDSVALUE";
/// Bytes of a value chunk footer: a chunk footer's (`chunk::footer::FOOTER_LEN`, which checks
/// that they agree), so that a reader finds either at the slot end (SPEC.md §8.5).
pub const VALUE_FOOTER_LEN: usize = 160;
/// Footer bytes the digest covers.
pub const VALUE_FOOTER_DIGEST_COVERS: usize = 48;
/// Fixed bytes of a value pointer before its extents.
pub const POINTER_FIXED_LEN: usize = 12;
/// Bytes of one extent of a value pointer.
pub const EXTENT_LEN: usize = 24;
/// The largest value a pointer may name (SPEC.md §16).
pub const VALUE_LEN_MAX: u64 = 1 << 30;
/// Bytes of value chunk metadata in a version (SPEC.md §6.5).
pub const VALUE_CHUNK_META_LEN: usize = 56;

/// Extent `i` of a value: `len` bytes at `offset` of the body of value chunk `value_chunk_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    /// The value chunk.
    pub value_chunk_id: u64,
    /// Its slot when the pointer was written (the version's value section says where it is
    /// now; this is for value chunks the version does not list yet).
    pub slot: u64,
    /// Offset in its body.
    pub offset: u32,
    /// Bytes (at least 1).
    pub len: u32,
}

/// A value pointer (SPEC.md §8.6): the value of a kind-2 entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuePointer {
    /// Bytes of the value.
    pub len_value: u32,
    /// crc32c of the value.
    pub value_crc32c: u32,
    /// Where its bytes are, in order.
    pub extents: Vec<Extent>,
}

impl ValuePointer {
    /// Bytes the encoded pointer takes.
    pub fn encoded_len(&self) -> usize {
        POINTER_FIXED_LEN + EXTENT_LEN * self.extents.len()
    }

    /// Encodes the pointer.
    pub fn encode(&self) -> Vec<u8> {
        let mut writer = Writer::with_capacity(self.encoded_len());
        writer
            .u32(self.len_value)
            .u32(self.value_crc32c)
            .u16(u16::try_from(self.extents.len()).unwrap_or(u16::MAX))
            .u16(0);
        for extent in &self.extents {
            writer.u64(extent.value_chunk_id).u64(extent.slot).u32(extent.offset).u32(extent.len);
        }
        writer.into_bytes()
    }

    /// Decodes a pointer and checks it: its length is exactly its extents', the extents add up
    /// to the value, the value is within the limit.
    pub fn decode(bytes: &[u8], offset: u64) -> Result<Self, FormatError> {
        const S: &str = "value pointer";
        let mut reader = Reader::new(bytes, S, offset);
        let len_value = reader.u32()?;
        let value_crc32c = reader.u32()?;
        let num_extents = reader.u16()?;
        reader.reserved(2)?;
        let invalid = |field: &'static str, reason: String| FormatError::invalid(S, field, offset, reason);
        if bytes.len() != POINTER_FIXED_LEN + EXTENT_LEN * usize::from(num_extents) {
            return Err(invalid("num_extents", format!("{num_extents} extents in a pointer of {} bytes", bytes.len())));
        }
        if num_extents == 0 {
            return Err(invalid("num_extents", "a pointer with no extent".into()));
        }
        if len_value == 0 || u64::from(len_value) > VALUE_LEN_MAX {
            return Err(invalid("len_value", format!("{len_value} is not from 1 to 2^30")));
        }
        let mut extents = Vec::with_capacity(usize::from(num_extents));
        let mut total = 0u64;
        for _ in 0..num_extents {
            let extent = Extent {
                value_chunk_id: reader.u64()?,
                slot: reader.u64()?,
                offset: reader.u32()?,
                len: reader.u32()?,
            };
            if extent.len == 0 || extent.value_chunk_id == 0 {
                return Err(invalid("len", "an empty extent, or one in value chunk 0".into()));
            }
            total += u64::from(extent.len);
            extents.push(extent);
        }
        if total != u64::from(len_value) {
            return Err(invalid("len_value", format!("{len_value} but the extents hold {total} bytes")));
        }
        Ok(Self { len_value, value_crc32c, extents })
    }

    /// Adds the bytes this pointer holds in each value chunk to `refs` (SPEC.md §6.4).
    pub fn add_refs(&self, refs: &mut BTreeMap<u64, u64>) {
        for extent in &self.extents {
            *refs.entry(extent.value_chunk_id).or_insert(0) += u64::from(extent.len);
        }
    }

    /// Checks a value read through this pointer.
    pub fn check_value(&self, value: &[u8], offset: u64) -> Result<(), FormatError> {
        let actual = crc32c(value);
        if value.len() != self.len_value as usize || actual != self.value_crc32c {
            return Err(FormatError::ChecksumMismatch {
                structure: "value (through its pointer)",
                offset,
                expected: self.value_crc32c,
                actual,
            });
        }
        Ok(())
    }
}

/// True when `bytes` have the length of a pointer with the extent count it states (at least
/// one): the check a block decoder makes of every pointer entry (the rest of a pointer is
/// checked where it is read).
pub fn is_pointer_shaped(bytes: &[u8]) -> bool {
    bytes.len() >= POINTER_FIXED_LEN + EXTENT_LEN && {
        let num_extents = usize::from(u16::from_le_bytes([bytes[8], bytes[9]]));
        bytes.len() == POINTER_FIXED_LEN + EXTENT_LEN * num_extents
    }
}

/// The bytes of the value references of a pointer entry's value, for chunk metadata; none
/// when it does not decode (a writer never packs such an entry).
pub fn pointer_refs(value: &[u8], refs: &mut BTreeMap<u64, u64>) {
    if let Ok(pointer) = ValuePointer::decode(value, 0) {
        pointer.add_refs(refs);
    }
}

/// A value chunk footer (SPEC.md §8.6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueFooter {
    /// `FOOTER_FLAG_XXH3` or 0.
    pub flags: u8,
    /// Owning instance.
    pub instance: u32,
    /// The value chunk's id.
    pub value_chunk_id: u64,
    /// Bytes of values from the slot start.
    pub len_body: u32,
    /// The slot size it was written for.
    pub slot_size: u32,
    /// The volume.
    pub volume_uuid: [u8; 16],
    /// Digest of the body and footer bytes 0..48.
    pub digest: [u8; 32],
}

impl ValueFooter {
    /// The footer bytes the digest covers.
    pub fn encode_digest_covered(&self) -> [u8; VALUE_FOOTER_DIGEST_COVERS] {
        let mut writer = Writer::with_capacity(VALUE_FOOTER_DIGEST_COVERS);
        writer
            .bytes(&VALUE_MAGIC)
            .u16(1)
            .u8(0)
            .u8(self.flags)
            .u32(self.instance)
            .u64(self.value_chunk_id)
            .u32(self.len_body)
            .u32(self.slot_size)
            .bytes(&self.volume_uuid);
        let mut bytes = [0u8; VALUE_FOOTER_DIGEST_COVERS];
        bytes.copy_from_slice(writer.as_slice());
        bytes
    }

    /// Encodes the footer with its checksum.
    pub fn encode(&self) -> [u8; VALUE_FOOTER_LEN] {
        let mut bytes = [0u8; VALUE_FOOTER_LEN];
        bytes[..VALUE_FOOTER_DIGEST_COVERS].copy_from_slice(&self.encode_digest_covered());
        bytes[VALUE_FOOTER_DIGEST_COVERS..VALUE_FOOTER_DIGEST_COVERS + 32].copy_from_slice(&self.digest);
        let crc = crc32c(&bytes[..VALUE_FOOTER_LEN - 4]);
        bytes[VALUE_FOOTER_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// True when the bytes start with the value chunk magic.
    pub fn has_magic(bytes: &[u8]) -> bool {
        bytes.len() >= 8 && bytes[..8] == VALUE_MAGIC
    }

    /// Decodes and checks a footer read at `offset`: magic, checksum, version, reserved bytes,
    /// flags, and `len_body` within a slot of `slot_size`.
    pub fn decode(bytes: &[u8], offset: u64, slot_size: u64) -> Result<Self, FormatError> {
        const S: &str = "value chunk footer";
        let mut reader = Reader::new(bytes, S, offset);
        let magic: [u8; 8] = reader.array()?;
        if magic != VALUE_MAGIC {
            return Err(FormatError::BadMagic { structure: S, offset, found: magic.to_vec() });
        }
        if bytes.len() < VALUE_FOOTER_LEN {
            return Err(FormatError::Truncated {
                structure: S,
                offset,
                needed: VALUE_FOOTER_LEN as u64,
                available: bytes.len() as u64,
            });
        }
        let stored = u32::from_le_bytes([bytes[156], bytes[157], bytes[158], bytes[159]]);
        let actual = crc32c(&bytes[..VALUE_FOOTER_LEN - 4]);
        if actual != stored {
            return Err(FormatError::ChecksumMismatch { structure: S, offset, expected: stored, actual });
        }
        let version_major = reader.u16()?;
        if version_major != 1 {
            return Err(FormatError::UnsupportedVersion { structure: S, offset, major: version_major, minor: 0 });
        }
        reader.reserved(1)?;
        let flags = reader.u8()?;
        let footer = Self {
            flags,
            instance: reader.u32()?,
            value_chunk_id: reader.u64()?,
            len_body: reader.u32()?,
            slot_size: reader.u32()?,
            volume_uuid: reader.array()?,
            digest: reader.array()?,
        };
        reader.reserved(76)?;
        let invalid = |field: &'static str, reason: String| Err(FormatError::invalid(S, field, offset, reason));
        if flags & !FOOTER_FLAG_XXH3 != 0 {
            return invalid("flags", "reserved bits set".into());
        }
        if flags & FOOTER_FLAG_XXH3 != 0 && footer.digest[16..] != [0; 16] {
            return invalid("digest", "an xxh3-128 digest with its last 16 bytes not zero".into());
        }
        if u64::from(footer.slot_size) != slot_size {
            return invalid("slot_size", format!("{} but the volume's slots are {slot_size} bytes", footer.slot_size));
        }
        if u64::from(footer.len_body) > slot_size.saturating_sub(VALUE_FOOTER_LEN as u64) {
            return invalid("len_body", format!("{} does not fit before the footer", footer.len_body));
        }
        if footer.value_chunk_id == 0 {
            return invalid("value_chunk_id", "0".into());
        }
        Ok(footer)
    }

    /// The digest of `body` under this footer.
    pub fn digest_of(&self, body: &[u8]) -> [u8; 32] {
        let mut state = DigestState::new(DigestKind::of_flags(self.flags));
        state.update(body);
        state.update(&self.encode_digest_covered());
        state.finish()
    }

    /// What of this footer disagrees with value chunk `id` of `instance` on the volume
    /// `volume_uuid` (SPEC.md §8.6: a footer names its volume, instance and id), and, where a
    /// version lists the value chunk, with its metadata `meta` (length and digest). Empty when
    /// everything agrees; otherwise in this order: volume, instance, id, length, digest.
    pub fn mismatches(
        &self,
        volume_uuid: &[u8; 16],
        instance: u32,
        id: u64,
        meta: Option<&ValueChunkMeta>,
    ) -> Vec<ValueFooterMismatch> {
        let mut found = Vec::new();
        if self.volume_uuid != *volume_uuid {
            found.push(ValueFooterMismatch::Volume { found: self.volume_uuid });
        }
        if self.instance != instance {
            found.push(ValueFooterMismatch::Instance { found: self.instance, expected: instance });
        }
        if self.value_chunk_id != id {
            found.push(ValueFooterMismatch::Id { found: self.value_chunk_id, expected: id });
        }
        if let Some(meta) = meta {
            if self.len_body != meta.len_body {
                found.push(ValueFooterMismatch::LenBody { found: self.len_body, expected: meta.len_body });
            }
            if self.digest != meta.digest {
                found.push(ValueFooterMismatch::Digest);
            }
        }
        found
    }

    /// Checks the digest over `body` (the slot's first `len_body` bytes), read at `offset`.
    pub fn verify_digest(&self, body: &[u8], offset: u64) -> Result<(), FormatError> {
        if body.len() != self.len_body as usize || self.digest_of(body) != self.digest {
            return Err(FormatError::DigestMismatch { structure: "value chunk", offset });
        }
        Ok(())
    }
}

/// A way a value chunk footer disagrees with what names it ([`ValueFooter::mismatches`]); its
/// text is what fsck reports after "the footer in slot N says".
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ValueFooterMismatch {
    /// The footer names another volume.
    #[error("it belongs to another volume")]
    Volume {
        /// The volume it names.
        found: [u8; 16],
    },
    /// The footer names another instance.
    #[error("instance {found}, not {expected}")]
    Instance {
        /// The instance it names.
        found: u32,
        /// The instance whose value chunk it should be.
        expected: u32,
    },
    /// The footer names another value chunk.
    #[error("value chunk id {found}, not {expected}")]
    Id {
        /// The id it names.
        found: u64,
        /// The id that named the slot.
        expected: u64,
    },
    /// The footer's `len_body` is not the version's.
    #[error("{found} bytes of values, the version says {expected}")]
    LenBody {
        /// The footer's.
        found: u32,
        /// The version's.
        expected: u32,
    },
    /// The footer's digest is not the version's.
    #[error("another digest than the version's")]
    Digest,
}

/// A value chunk of a version (SPEC.md §6.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueChunkMeta {
    /// Its id.
    pub value_chunk_id: u64,
    /// The slot holding it.
    pub slot: u64,
    /// Bytes of values.
    pub len_body: u32,
    /// Its footer's digest.
    pub digest: [u8; 32],
}

impl ValueChunkMeta {
    /// Encodes the record.
    pub fn encode(&self, writer: &mut Writer) {
        writer.u64(self.value_chunk_id).u64(self.slot).u32(self.len_body).u32(0).bytes(&self.digest);
    }

    /// Decodes the record.
    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, FormatError> {
        let offset = reader.offset();
        let value_chunk_id = reader.u64()?;
        let slot = reader.u64()?;
        let len_body = reader.u32()?;
        reader.reserved(4)?;
        let digest = reader.array()?;
        if value_chunk_id == 0 {
            return Err(FormatError::invalid("value chunk metadata", "value_chunk_id", offset, "0"));
        }
        Ok(Self { value_chunk_id, slot, len_body, digest })
    }

    /// The metadata of the value chunk `footer` describes, in `slot`.
    pub fn of_footer(footer: &ValueFooter, slot: u64) -> Self {
        Self { value_chunk_id: footer.value_chunk_id, slot, len_body: footer.len_body, digest: footer.digest }
    }
}

/// What every value chunk a writer builds shares.
#[derive(Debug, Clone, Copy)]
pub struct ValueFormat {
    /// The slot size.
    pub slot_size: u64,
    /// Owning instance.
    pub instance: u32,
    /// The volume.
    pub volume_uuid: [u8; 16],
    /// The digest kind (the volume's, SPEC.md §8.3).
    pub digest: DigestKind,
}

impl ValueFormat {
    /// Bytes of values one value chunk holds.
    pub fn capacity(&self) -> usize {
        self.slot_size as usize - VALUE_FOOTER_LEN
    }
}

/// A finished value chunk: its body and footer, for `slot`.
#[derive(Debug, Clone)]
pub struct BuiltValueChunk {
    /// The slot it was built for.
    pub slot: u64,
    /// The values.
    pub body: Vec<u8>,
    /// The footer, sealed.
    pub footer: ValueFooter,
}

impl BuiltValueChunk {
    /// Its metadata for a version.
    pub fn meta(&self) -> ValueChunkMeta {
        ValueChunkMeta::of_footer(&self.footer, self.slot)
    }

    /// The whole slot image, padding zeroed (for tests, fixtures and simple writers).
    pub fn slot_image(&self) -> Vec<u8> {
        let mut image = vec![0u8; self.footer.slot_size as usize];
        image[..self.body.len()].copy_from_slice(&self.body);
        let end = image.len();
        image[end - VALUE_FOOTER_LEN..].copy_from_slice(&self.footer.encode());
        image
    }
}

/// An extent shorter than this does not start a value at the end of a value chunk: the value
/// starts in the next one instead (fewer extents, at the cost of a little padding).
const EXTENT_MIN: usize = 4096;

/// Packs values into value chunks, one after the other: a value that does not fit the rest
/// of the current chunk continues in the next one (a value larger than a slot spans several),
/// unless the rest is under 4 KiB. The caller's allocator gives each value chunk its id and
/// slot as it starts.
pub struct ValuePacker {
    format: ValueFormat,
    current: Option<(u64, u64, Vec<u8>)>,
    finished: Vec<BuiltValueChunk>,
}

impl ValuePacker {
    /// An empty packer.
    pub fn new(format: ValueFormat) -> Self {
        Self { format, current: None, finished: Vec::new() }
    }

    /// Adds a value; `allocate` gives the `(id, slot)` of each value chunk the value starts.
    /// Returns its pointer.
    pub fn add<E>(
        &mut self,
        value: &[u8],
        mut allocate: impl FnMut() -> Result<(u64, u64), E>,
    ) -> Result<ValuePointer, E> {
        let capacity = self.format.capacity();
        let mut extents = Vec::new();
        let mut rest = value;
        // Bounded by the value: each round places at least one byte (or seals a chunk).
        while !rest.is_empty() {
            let room = self.current.as_ref().map_or(0, |(_, _, body)| capacity - body.len());
            let fits_whole = rest.len() <= room;
            if room == 0 || (!fits_whole && room < EXTENT_MIN.min(rest.len())) {
                self.seal();
                let (id, slot) = allocate()?;
                self.current = Some((id, slot, Vec::with_capacity(capacity.min(rest.len().max(EXTENT_MIN)))));
                continue;
            }
            let Some((id, slot, body)) = self.current.as_mut() else { continue };
            let take = rest.len().min(room);
            extents.push(Extent { value_chunk_id: *id, slot: *slot, offset: body.len() as u32, len: take as u32 });
            body.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
        }
        Ok(ValuePointer { len_value: value.len() as u32, value_crc32c: crc32c(value), extents })
    }

    fn seal(&mut self) {
        let Some((id, slot, body)) = self.current.take() else { return };
        let mut footer = ValueFooter {
            flags: self.format.digest.flag(),
            instance: self.format.instance,
            value_chunk_id: id,
            len_body: body.len() as u32,
            slot_size: self.format.slot_size as u32,
            volume_uuid: self.format.volume_uuid,
            digest: [0; 32],
        };
        footer.digest = footer.digest_of(&body);
        self.finished.push(BuiltValueChunk { slot, body, footer });
    }

    /// Value chunks finished so far (the current one stays open).
    pub fn take_finished(&mut self) -> Vec<BuiltValueChunk> {
        std::mem::take(&mut self.finished)
    }

    /// The ids and slots of every value chunk started, finished or not.
    pub fn allocated(&self) -> Vec<(u64, u64)> {
        let finished = self.finished.iter().map(|chunk| (chunk.footer.value_chunk_id, chunk.slot));
        finished.chain(self.current.as_ref().map(|(id, slot, _)| (*id, *slot))).collect()
    }

    /// Seals the current value chunk; returns every chunk not taken yet.
    pub fn finish(mut self) -> Vec<BuiltValueChunk> {
        self.seal();
        self.finished
    }
}

/// Reads a value through `pointer`: `read` returns `len` bytes at `offset` of the body of an
/// extent's value chunk. The value's crc32c is checked.
pub fn read_value<E>(
    pointer: &ValuePointer,
    mut read: impl FnMut(&Extent) -> Result<Vec<u8>, E>,
    corrupt: impl FnOnce(FormatError) -> E,
) -> Result<Vec<u8>, E> {
    let mut value = Vec::with_capacity(pointer.len_value as usize);
    for extent in &pointer.extents {
        let bytes = read(extent)?;
        value.extend_from_slice(&bytes);
    }
    match pointer.check_value(&value, pointer.extents.first().map_or(0, |extent| extent.slot)) {
        Ok(()) => Ok(value),
        Err(error) => Err(corrupt(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_footer_names_its_volume_instance_and_id_and_agrees_with_the_version() {
        let footer = ValueFooter {
            flags: 0,
            instance: 2,
            value_chunk_id: 9,
            len_body: 100,
            slot_size: 64 << 10,
            volume_uuid: [7; 16],
            digest: [1; 32],
        };
        let meta = ValueChunkMeta::of_footer(&footer, 40);
        assert_eq!(footer.mismatches(&[7; 16], 2, 9, Some(&meta)), Vec::new());
        assert_eq!(footer.mismatches(&[7; 16], 2, 9, None), Vec::new());
        let other = ValueChunkMeta { len_body: 50, digest: [2; 32], ..meta };
        let found = footer.mismatches(&[8; 16], 3, 10, Some(&other));
        assert_eq!(
            found,
            vec![
                ValueFooterMismatch::Volume { found: [7; 16] },
                ValueFooterMismatch::Instance { found: 2, expected: 3 },
                ValueFooterMismatch::Id { found: 9, expected: 10 },
                ValueFooterMismatch::LenBody { found: 100, expected: 50 },
                ValueFooterMismatch::Digest,
            ]
        );
        let text: Vec<String> = found.iter().map(ToString::to_string).collect();
        assert_eq!(
            text.join("; "),
            "it belongs to another volume; instance 2, not 3; value chunk id 9, not 10; \
             100 bytes of values, the version says 50; another digest than the version's"
        );
        // Without the version's metadata, only the identity is checked.
        assert_eq!(footer.mismatches(&[7; 16], 2, 10, None), vec![ValueFooterMismatch::Id { found: 9, expected: 10 }]);
    }

    fn format() -> ValueFormat {
        ValueFormat { slot_size: 64 << 10, instance: 2, volume_uuid: [7; 16], digest: DigestKind::Xxh3 }
    }

    #[test]
    fn pointers_round_trip_and_reject_what_does_not_add_up() {
        let pointer = ValuePointer {
            len_value: 30,
            value_crc32c: 9,
            extents: vec![
                Extent { value_chunk_id: 4, slot: 10, offset: 100, len: 10 },
                Extent { value_chunk_id: 5, slot: 11, offset: 0, len: 20 },
            ],
        };
        let bytes = pointer.encode();
        assert_eq!(bytes.len(), pointer.encoded_len());
        assert_eq!(ValuePointer::decode(&bytes, 0), Ok(pointer.clone()));
        let mut refs = BTreeMap::new();
        pointer.add_refs(&mut refs);
        assert_eq!(refs, BTreeMap::from([(4, 10), (5, 20)]));
        let mut short = bytes.clone();
        short[0] = 31;
        assert!(ValuePointer::decode(&short, 0).is_err(), "extents hold 30 bytes, not 31");
        assert!(ValuePointer::decode(&bytes[..bytes.len() - 1], 0).is_err());
        let mut none = bytes;
        none[8] = 0;
        assert!(ValuePointer::decode(&none[..12], 0).is_err());
    }

    #[test]
    fn the_packer_fills_chunks_and_spans_slots_with_large_values() {
        let mut slots = 100u64..;
        let mut ids = 7u64..;
        let mut packer = ValuePacker::new(format());
        let small: Vec<u8> = (0..5000u32).map(|byte| byte as u8).collect();
        let large: Vec<u8> = (0..150_000u32).map(|byte| (byte * 7) as u8).collect();
        let first = packer
            .add(&small, || Ok::<_, ()>((ids.next().unwrap_or(0), slots.next().unwrap_or(0))))
            .unwrap_or_else(|()| panic!());
        let second = packer
            .add(&large, || Ok::<_, ()>((ids.next().unwrap_or(0), slots.next().unwrap_or(0))))
            .unwrap_or_else(|()| panic!());
        let chunks = packer.finish();
        assert_eq!(first.extents, vec![Extent { value_chunk_id: 7, slot: 100, offset: 0, len: 5000 }]);
        // 150,000 bytes over slots of 65,376 bytes of values: the rest of the first, two more.
        assert_eq!(second.extents.len(), 3);
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks.iter().map(|chunk| chunk.body.len()).sum::<usize>(), 155_000);
        let read = |pointer: &ValuePointer| {
            read_value(
                pointer,
                |extent| {
                    let chunk = chunks.iter().find(|chunk| chunk.footer.value_chunk_id == extent.value_chunk_id);
                    let body = &chunk.map(|chunk| chunk.body.clone()).unwrap_or_default();
                    Ok::<_, FormatError>(body[extent.offset as usize..(extent.offset + extent.len) as usize].to_vec())
                },
                |error| error,
            )
        };
        assert_eq!(read(&first), Ok(small));
        assert_eq!(read(&second), Ok(large));
        for chunk in &chunks {
            let image = chunk.slot_image();
            let footer = ValueFooter::decode(&image[image.len() - VALUE_FOOTER_LEN..], 0, 64 << 10)
                .unwrap_or_else(|error| panic!("{error}"));
            assert_eq!(footer, chunk.footer);
            assert_eq!(footer.verify_digest(&image[..footer.len_body as usize], 0), Ok(()));
            let mut stale = image[..footer.len_body as usize].to_vec();
            stale[0] ^= 1;
            assert!(footer.verify_digest(&stale, 0).is_err());
        }
    }

    #[test]
    fn value_chunk_metadata_round_trips() {
        let meta = ValueChunkMeta { value_chunk_id: 3, slot: 44, len_body: 1000, digest: [9; 32] };
        let mut writer = Writer::new();
        meta.encode(&mut writer);
        assert_eq!(writer.len(), VALUE_CHUNK_META_LEN);
        let bytes = writer.into_bytes();
        assert_eq!(ValueChunkMeta::decode(&mut Reader::new(&bytes, "test", 0)), Ok(meta));
    }
}
