//! Recomputing the checksums and digests that cover a changed field, so that the tools get
//! past them and act on the hostile value (SPEC.md §4, §5, §8.2, §8.3, §8.6;
//! docs/undo-file.md).
//!
//! A seal never writes over the changed field itself (nor over the other places the same
//! value went to): a field that is also derived (an undo file's state block counts) keeps the
//! hostile value. A block is resealed over the range its index gave before the change, so
//! that a changed `ofs_block` never makes the seal write into another block; every other
//! checksum is recomputed over what the changed structure now names, when that lies inside
//! its slot or area (else it is left as it was).

use std::ops::Range;

use lds_format::chunk::footer::FOOTER_LEN;
use lds_format::codec::crc32c;
use lds_format::log::HEADER_LEN;

use super::{read_le, walk, CaseError, FieldRef, Kind, Seal, Space, Volume};

/// The bytes a seal must not write.
struct Guard {
    protect: Vec<(usize, Range<usize>)>,
}

impl Guard {
    fn of(field: &FieldRef) -> Self {
        let mut protect = vec![(field.file, field.at..field.at + field.width)];
        protect.extend(field.also.iter().map(|&(file, at)| (file, at..at + field.width)));
        Self { protect }
    }

    /// Writes `bytes` at `at` of file `file`, but not over a protected byte, nor past the file.
    fn put(&self, volume: &mut Volume, file: usize, at: usize, bytes: &[u8]) {
        let Some(target) = volume.files.get_mut(file) else { return };
        for (index, &byte) in bytes.iter().enumerate() {
            let offset = at + index;
            let protected = self.protect.iter().any(|(pfile, range)| *pfile == file && range.contains(&offset));
            if let (false, Some(place)) = (protected, target.get_mut(offset)) {
                *place = byte;
            }
        }
    }
}

/// The digest of SPEC.md §8.3 over `parts`: blake3, or with flag bit 1 xxh3-128 (16 bytes
/// little endian, then 16 zero bytes).
pub fn digest(flags: u8, parts: &[&[u8]]) -> [u8; 32] {
    if flags & lds_format::digest::FOOTER_FLAG_XXH3 != 0 {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for part in parts {
            hasher.update(part);
        }
        let mut digest = [0u8; 32];
        digest[..16].copy_from_slice(&hasher.digest128().to_le_bytes());
        digest
    } else {
        let mut hasher = blake3::Hasher::new();
        for part in parts {
            hasher.update(part);
        }
        *hasher.finalize().as_bytes()
    }
}

fn crc_le(bytes: &[u8]) -> [u8; 4] {
    crc32c(bytes).to_le_bytes()
}

/// Recomputes every seal of `field` after it changed, and what depends on them (the digests
/// that chunk metadata repeats). `space` is the layout of the healthy volume.
pub fn reseal(volume: &mut Volume, field: &FieldRef, space: &Space) -> Result<(), CaseError> {
    let guard = Guard::of(field);
    for seal in &field.seals {
        apply(volume, seal, space, &guard)?;
    }
    Ok(())
}

/// Applies every seal of `seals` to an unchanged volume: what a no-op case does (a test checks
/// that it changes no byte of any base).
pub fn reseal_all(volume: &mut Volume, fields: &[FieldRef], space: &Space) -> Result<(), CaseError> {
    let guard = Guard { protect: Vec::new() };
    for field in fields {
        for seal in &field.seals {
            apply(volume, seal, space, &guard)?;
        }
    }
    Ok(())
}

fn apply(volume: &mut Volume, seal: &Seal, space: &Space, guard: &Guard) -> Result<(), CaseError> {
    match *seal {
        Seal::Label { file, at } => {
            let Some(label) = volume.files[file].get(at..at + 508) else { return Ok(()) };
            let crc = crc_le(label);
            guard.put(volume, file, at + 508, &crc);
        }
        Seal::Object { file, area_at, area_len, at } => seal_object(volume, guard, file, area_at, area_len, at),
        Seal::Block { file, at, len } => {
            if len >= 8 {
                let Some(block) = volume.files[file].get(at..at + len - 4) else { return Ok(()) };
                let crc = crc_le(block);
                guard.put(volume, file, at + len - 4, &crc);
            }
        }
        Seal::Pointer { file, at, len } => seal_pointer(volume, guard, space, file, at, len),
        Seal::Chunk { slot } => {
            let old = footer_digest(volume, space, slot, 104);
            if let (Some(old), Some(new)) = (old, seal_chunk(volume, guard, space, slot)) {
                propagate(volume, guard, space, slot, false, &old, &new)?;
            }
        }
        Seal::ValueChunk { slot } => {
            let old = footer_digest(volume, space, slot, 48);
            if let (Some(old), Some(new)) = (old, seal_value_chunk(volume, guard, space, slot)) {
                propagate(volume, guard, space, slot, true, &old, &new)?;
            }
        }
        Seal::Undo { file } => {
            super::undo::reseal(volume, file, &|volume, file, at, bytes| guard.put(volume, file, at, bytes))
        }
    }
    Ok(())
}

fn seal_object(volume: &mut Volume, guard: &Guard, file: usize, area_at: usize, area_len: usize, at: usize) {
    let bytes = &volume.files[file];
    if at + HEADER_LEN > bytes.len() {
        return;
    }
    let len = read_le(bytes, at + 40, 4) as usize;
    let payload_end = at + HEADER_LEN + len;
    if payload_end <= area_at + area_len && payload_end <= bytes.len() {
        let crc = crc_le(&bytes[at + HEADER_LEN..payload_end]);
        guard.put(volume, file, at + 44, &crc);
    }
    let crc = crc_le(&volume.files[file][at + 8..at + HEADER_LEN]);
    guard.put(volume, file, at + 4, &crc);
}

/// A value pointer's `value_crc32c`, over the bytes its extents name in the slots they give.
fn seal_pointer(volume: &mut Volume, guard: &Guard, space: &Space, file: usize, at: usize, len: usize) {
    const VALUE_MAX: usize = 64 << 20;
    let bytes = &volume.files[file];
    if len < 12 || at + len > bytes.len() {
        return;
    }
    let extents = read_le(bytes, at + 8, 2) as usize;
    if 12 + 24 * extents > len {
        return;
    }
    let slot_size = space.geometry.slot_size as usize;
    let mut value = Vec::new();
    for index in 0..extents {
        let extent = at + 12 + 24 * index;
        let slot = read_le(bytes, extent + 8, 8);
        let (offset, piece) = (read_le(bytes, extent + 16, 4) as usize, read_le(bytes, extent + 20, 4) as usize);
        let Some((slot_file, base)) = space.slot_at(slot) else { return };
        if offset + piece > slot_size || value.len() + piece > VALUE_MAX {
            return;
        }
        let Some(part) = volume.files[slot_file].get(base + offset..base + offset + piece) else { return };
        value.extend_from_slice(part);
    }
    let crc = crc_le(&value);
    guard.put(volume, file, at + 4, &crc);
}

/// The chunk in `slot`: index, filter and sketch checksums, digest, footer checksum. Returns
/// the digest when it was recomputed.
fn seal_chunk(volume: &mut Volume, guard: &Guard, space: &Space, slot: u64) -> Option<[u8; 32]> {
    let (file, base) = space.slot_at(slot)?;
    let slot_size = space.geometry.slot_size as usize;
    let footer = base + slot_size - FOOTER_LEN;
    let tail_end = slot_size - FOOTER_LEN;
    let field =
        |volume: &Volume, offset: usize, width: usize| read_le(&volume.files[file], footer + offset, width) as usize;
    let range_crc = |volume: &Volume, ofs: usize, len: usize| {
        (ofs.checked_add(len)? <= tail_end).then(|| crc_le(&volume.files[file][base + ofs..base + ofs + len]))
    };
    if let Some(crc) = range_crc(volume, field(volume, 60, 4), field(volume, 64, 4)) {
        guard.put(volume, file, footer + 68, &crc);
    }
    if let Some(crc) = range_crc(volume, field(volume, 72, 4), field(volume, 76, 4)) {
        guard.put(volume, file, footer + 80, &crc);
    }
    let len_sketch = field(volume, 140, 4);
    if len_sketch > 0 {
        if let Some(crc) = range_crc(volume, field(volume, 136, 4), len_sketch) {
            guard.put(volume, file, footer + 144, &crc);
        }
    }
    let (len_body, ofs_index) = (field(volume, 56, 4), field(volume, 60, 4));
    let mut digest_written = None;
    if len_body <= tail_end && ofs_index <= tail_end {
        let bytes = &volume.files[file];
        let flags = bytes[footer + 11];
        let new = digest(
            flags,
            &[&bytes[base..base + len_body], &bytes[base + ofs_index..base + tail_end], &bytes[footer..footer + 104]],
        );
        guard.put(volume, file, footer + 104, &new);
        digest_written = Some(new);
    }
    let crc = crc_le(&volume.files[file][footer..footer + 156]);
    guard.put(volume, file, footer + 156, &crc);
    digest_written
}

/// The value chunk in `slot`: digest and footer checksum. Returns the digest when it was
/// recomputed.
fn seal_value_chunk(volume: &mut Volume, guard: &Guard, space: &Space, slot: u64) -> Option<[u8; 32]> {
    let (file, base) = space.slot_at(slot)?;
    let slot_size = space.geometry.slot_size as usize;
    let footer = base + slot_size - FOOTER_LEN;
    let len_body = read_le(&volume.files[file], footer + 24, 4) as usize;
    let mut digest_written = None;
    if len_body <= slot_size - FOOTER_LEN {
        let bytes = &volume.files[file];
        let new = digest(bytes[footer + 11], &[&bytes[base..base + len_body], &bytes[footer..footer + 48]]);
        guard.put(volume, file, footer + 48, &new);
        digest_written = Some(new);
    }
    let crc = crc_le(&volume.files[file][footer..footer + 156]);
    guard.put(volume, file, footer + 156, &crc);
    digest_written
}

/// The digest the footer of the (value) chunk in `slot` holds at `at` of the footer.
fn footer_digest(volume: &Volume, space: &Space, slot: u64, at: usize) -> Option<[u8; 32]> {
    let (file, base) = space.slot_at(slot)?;
    let footer = base + space.geometry.slot_size as usize - FOOTER_LEN + at;
    volume.files[file].get(footer..footer + 32)?.try_into().ok()
}

/// Writes `digest` into every chunk (or value chunk) metadata of the version logs that names
/// `slot` with the digest `old` the footer held (stale objects naming an earlier chunk of the
/// slot keep theirs), and reseals those objects.
fn propagate(
    volume: &mut Volume,
    guard: &Guard,
    space: &Space,
    slot: u64,
    value_chunk: bool,
    old: &[u8; 32],
    digest: &[u8; 32],
) -> Result<(), CaseError> {
    if old == digest {
        return Ok(());
    }
    let repeated = walk::repeated_digests(volume, space);
    for field in repeated {
        if field.kind != (Kind::Digest { slot, value_chunk }) {
            continue;
        }
        if volume.files[field.file].get(field.at..field.at + 32) != Some(&old[..]) {
            continue;
        }
        guard.put(volume, field.file, field.at, digest);
        for seal in &field.seals {
            apply(volume, seal, space, guard)?;
        }
    }
    Ok(())
}
