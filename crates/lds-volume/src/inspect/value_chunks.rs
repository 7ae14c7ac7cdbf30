//! Checking the value chunks of a volume (SPEC.md §8.6) for dump tools: what the footer at the
//! end of a slot is, whether a value chunk's footer and digest check, and the slots the backup
//! logs' pointers name for value chunks no version lists yet.

use std::collections::BTreeSet;

use lds_format::chunk::footer::{Footer, FOOTER_LEN};
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::Label;
use lds_format::log::area_context;
use lds_format::value::{ValueChunkMeta, ValueFooter, VALUE_FOOTER_LEN};
use lds_format::FormatError;

use crate::DeviceError;
use crate::ReadAt;

/// The footer at the end of a slot, read whatever its checksum says (SPEC.md §15).
#[derive(Debug, Clone, Default)]
pub struct SlotFooters {
    /// A chunk footer (magic "LDSCHUNK") whose fields parse.
    pub chunk: Option<Footer>,
    /// The bytes of a value chunk footer (magic "LDSVALUE").
    pub value: Option<Vec<u8>>,
}

/// Reads the footer at the end of `slot`.
pub fn slot_footers(
    device: &(impl ReadAt + ?Sized),
    geometry: &Geometry,
    slot: u64,
) -> Result<SlotFooters, DeviceError> {
    let offset = geometry.slot_offset(slot) + geometry.slot_size - FOOTER_LEN as u64;
    let bytes = device.read_vec(offset, FOOTER_LEN as u64)?;
    if Footer::has_magic(&bytes) {
        return Ok(SlotFooters { chunk: Footer::parse_raw(&bytes, offset).ok(), value: None });
    }
    let value = (bytes.len() >= VALUE_FOOTER_LEN && ValueFooter::has_magic(&bytes)).then_some(bytes);
    Ok(SlotFooters { chunk: None, value })
}

/// What checking a value chunk's footer found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FooterCheck {
    /// It decodes and names the value chunk, the instance and the volume, and agrees with the
    /// version.
    #[error("ok")]
    Ok,
    /// No device holds the slot.
    #[error("slot {slot} is not on any device of the volume (num_slots {num_slots})")]
    Absent {
        /// The slot.
        slot: u64,
        /// Slots of the volume.
        num_slots: u64,
    },
    /// It does not decode (magic, checksum, version, reserved bytes, flags, sizes).
    #[error("{0}")]
    Invalid(FormatError),
    /// It decodes but names another value chunk, instance or volume, or disagrees with the
    /// version: each problem in words.
    #[error("value chunk footer at offset {ofs_footer}: {}", problems.join("; "))]
    Disagrees {
        /// Its device offset.
        ofs_footer: u64,
        /// What disagrees.
        problems: Vec<String>,
    },
}

/// What checking a value chunk's digest found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestCheck {
    /// The body matches the footer's digest.
    #[error("ok")]
    Ok,
    /// Not checked: no device holds the slot.
    #[error("not checked")]
    NotChecked,
    /// Not checked: the footer does not decode.
    #[error("not checked: the footer does not decode")]
    FooterInvalid,
    /// The body does not match.
    #[error("{0}")]
    Mismatch(FormatError),
}

/// A value chunk checked: its footer's bytes (none when no device holds its slot), and what
/// the footer and the digest checks found.
#[derive(Debug, Clone)]
pub struct ValueChunkCheck {
    /// The footer's bytes.
    pub footer: Option<Vec<u8>>,
    /// The footer check.
    pub footer_check: FooterCheck,
    /// The digest check.
    pub digest_check: DigestCheck,
}

/// Reads value chunk `id` of `instance` at `slot` and checks it (SPEC.md §8.6): the footer
/// decodes (magic, checksum, version, reserved bytes, flags, `slot_size`, `len_body`) and names
/// the id, the instance and the volume, and agrees with `meta` (`len_body`, `digest`) when the
/// version lists it; then the digest over the body.
pub fn check_value_chunk(
    device: &(impl ReadAt + ?Sized),
    label: &Label,
    instance: u32,
    id: u64,
    slot: u64,
    meta: Option<&ValueChunkMeta>,
) -> Result<ValueChunkCheck, DeviceError> {
    let geometry = label.geometry;
    if !label.slot_present(slot) {
        return Ok(ValueChunkCheck {
            footer: None,
            footer_check: FooterCheck::Absent { slot, num_slots: geometry.num_slots },
            digest_check: DigestCheck::NotChecked,
        });
    }
    let ofs_slot = geometry.slot_offset(slot);
    let ofs_footer = ofs_slot + geometry.slot_size - VALUE_FOOTER_LEN as u64;
    let bytes = device.read_vec(ofs_footer, VALUE_FOOTER_LEN as u64)?;
    let footer = match ValueFooter::decode(&bytes, ofs_footer, geometry.slot_size) {
        Ok(footer) => footer,
        Err(error) => {
            return Ok(ValueChunkCheck {
                footer: Some(bytes),
                footer_check: FooterCheck::Invalid(error),
                digest_check: DigestCheck::FooterInvalid,
            });
        }
    };
    let problems: Vec<String> =
        footer.mismatches(&geometry.volume_uuid, instance, id, meta).iter().map(ToString::to_string).collect();
    let footer_check = match problems.is_empty() {
        true => FooterCheck::Ok,
        false => FooterCheck::Disagrees { ofs_footer, problems },
    };
    let body = device.read_vec(ofs_slot, u64::from(footer.len_body))?;
    let digest_check = match footer.verify_digest(&body, ofs_slot) {
        Ok(()) => DigestCheck::Ok,
        Err(error) => DigestCheck::Mismatch(error),
    };
    Ok(ValueChunkCheck { footer: Some(bytes), footer_check, digest_check })
}

/// The slots the value pointers of each instance's replayed batches name for value chunks its
/// version does not list (SPEC.md §8.6, §9.4: in use, named only by a backup log).
pub fn pending_value_slots(device: &(impl ReadAt + ?Sized), geometry: &Geometry) -> Result<BTreeSet<u64>, DeviceError> {
    let mut slots = BTreeSet::new();
    for instance in 0..geometry.instance_count {
        let (areas, recovery) = super::recover(device, geometry, instance)?;
        if let Ok(recovery) = recovery {
            let context = area_context(geometry, LogKind::Backup, instance);
            // A batch whose pointer does not decode ends nothing here: fsck reports it.
            if let Ok(pending) = recovery.pending_value_chunks(&areas.backup, &context) {
                slots.extend(pending.into_values());
            }
        }
    }
    Ok(slots)
}
