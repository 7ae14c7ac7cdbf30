//! Decoding a volume's structures into their fields, by SPEC.md's byte tables: each field with
//! its place, what it holds, its extra variants and the seals covering it.
//!
//! The walkers read what the bytes say, without trusting them: every length and count is
//! checked against the bytes that remain, and a structure that does not decode just ends its
//! list of fields. Lists are walked whole (a later element's place depends on the earlier
//! ones) but give fields for their first element only, so that a case count stays near one
//! per field of SPEC.md's tables; digests that chunk metadata repeats are listed for every
//! element, since resealing a chunk rewrites each of them.

mod chunks;
mod labels;
mod logs;
mod payloads;

use lds_format::chunk::footer::FOOTER_LEN;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::{ObjectType, HEADER_LEN};

use chunks::{chunk_fields, entry_fields, value_chunk_fields};
use labels::both_labels;
use logs::{batch_has_pointer, logs, object_fields, pick, repeated_lists, Logs};

pub use super::walker::FOREIGN_UUID;
pub use logs::repeated_digests;

use super::{read_le, CaseError, FieldRef, Group, Space, Volume};

/// What the extras of the fields of one volume refer to.
pub(crate) struct Ctx<'s> {
    pub(crate) space: &'s Space,
    /// Slots in use by instance 0's chunks and value chunks, in order.
    pub(crate) live_slots: Vec<u64>,
    /// Value chunk ids of instance 0's version, in order.
    pub(crate) value_ids: Vec<u64>,
    /// Length of the first device.
    pub(crate) device_len: u64,
}

impl Ctx<'_> {
    fn geometry(&self) -> &Geometry {
        &self.space.geometry
    }

    /// A slot in use other than `not` (slot 0 when there is none).
    fn other_slot(&self, not: u64) -> u64 {
        self.live_slots.iter().copied().find(|&slot| slot != not).unwrap_or(0)
    }

    /// A value chunk id of the version other than `not`.
    fn other_value_id(&self, not: u64) -> u64 {
        self.value_ids.iter().copied().find(|&id| id != not).unwrap_or(not.wrapping_add(1))
    }
}

/// The context of a volume's fields.
fn context<'s>(volume: &Volume, space: &'s Space, logs: &Logs) -> Ctx<'s> {
    let version = &logs.version_state;
    let mut live_slots: Vec<u64> = version.slot_owner.keys().copied().collect();
    live_slots.sort_unstable();
    Ctx {
        space,
        live_slots,
        value_ids: version.value_chunks.keys().copied().collect(),
        device_len: volume.files[0].len() as u64,
    }
}

/// The live chunk a base's chunk cases are about: one of a single sub-chunk, preferring a log
/// chunk, then one with value references, then one with a key sketch, then one on a device
/// other than the first, then the deepest.
fn chosen_chunk(version: &lds_format::version::Version, space: &Space, volume: &Volume) -> Option<u64> {
    let candidates: Vec<&lds_format::version::meta::ChunkMeta> =
        version.chunks.values().filter(|meta| meta.sub_chunks.len() == 1).collect();
    let has_sketch = |meta: &&&lds_format::version::meta::ChunkMeta| {
        space.slot_at(meta.chunk_id).is_some_and(|(file, base)| {
            let footer = base + space.geometry.slot_size as usize - FOOTER_LEN;
            read_le(&volume.files[file], footer + 140, 4) > 0
        })
    };
    let on_other_device =
        |meta: &&&lds_format::version::meta::ChunkMeta| space.slot_at(meta.chunk_id).is_some_and(|(file, _)| file > 0);
    candidates
        .iter()
        .find(|meta| meta.is_log_chunk())
        .or_else(|| candidates.iter().find(|meta| !meta.value_refs.is_empty()))
        .or_else(|| candidates.iter().find(has_sketch))
        .or_else(|| candidates.iter().find(on_other_device))
        .or_else(|| candidates.iter().max_by_key(|meta| (meta.level, meta.chunk_id)))
        .map(|meta| meta.chunk_id)
}

/// The fields of one group of structures of `volume`.
pub fn group(group: Group, volume: &Volume, space: &Space) -> Result<Vec<FieldRef>, CaseError> {
    let logs = logs(volume, space)?;
    let ctx = context(volume, space, &logs);
    let mut fields = Vec::new();
    let version_object = |index: Option<usize>, p: &str| -> Vec<FieldRef> {
        index.map_or_else(Vec::new, |index| {
            let (place, object_type) = (&logs.version[index], logs.version_types[index]);
            let mut fields = object_fields(volume, place, object_type, p, LogKind::Version, &ctx, 0);
            fields.extend(repeated_lists(volume, place, object_type, p, &ctx));
            fields
        })
    };
    let backup_object = |index: Option<usize>, p: &str| -> Vec<FieldRef> {
        index.map_or_else(Vec::new, |index| {
            // The batch before it in lsn order: its first sequence repeated is a cycle.
            let previous_first = (0..logs.backup.len())
                .filter(|&other| logs.backup[other].lsn < logs.backup[index].lsn && logs.backup_first[other] > 0)
                .max_by_key(|&other| logs.backup[other].lsn)
                .map_or(0, |other| logs.backup_first[other]);
            object_fields(
                volume,
                &logs.backup[index],
                logs.backup_types[index],
                p,
                LogKind::Backup,
                &ctx,
                previous_first,
            )
        })
    };
    match group {
        Group::Label => fields.extend(both_labels(volume, 0, "label", &ctx)?),
        Group::DeviceTable => {
            // The first device's table was listed with its label; the second device's labels.
            if volume.devices > 1 {
                fields.extend(
                    both_labels(volume, 1, "device1.label", &ctx)?
                        .into_iter()
                        .filter(|field| field.path.contains(".devices.")),
                );
            }
        }
        Group::VersionLog => {
            let bv = pick(&logs.version, &logs.version_types, ObjectType::BaseVersion, true);
            fields.extend(version_object(bv, "vlog.bv"));
            // The last delta version that adds a chunk (else the last one).
            let dv = (0..logs.version.len())
                .filter(|&index| {
                    logs.version_types[index] == ObjectType::DeltaVersion
                        && read_le(&volume.files[0], logs.version[index].at() + HEADER_LEN + 36, 4) > 0
                })
                .max_by_key(|&index| logs.version[index].lsn);
            let dv = dv.or_else(|| pick(&logs.version, &logs.version_types, ObjectType::DeltaVersion, true));
            fields.extend(version_object(dv, "vlog.dv"));
        }
        Group::Journal => {
            fields.extend(version_object(
                pick(&logs.version, &logs.version_types, ObjectType::CompactionJournal, true),
                "vlog.cj",
            ));
        }
        Group::Wraps => {
            fields.extend(version_object(
                pick(&logs.version, &logs.version_types, ObjectType::WrapLeft, true),
                "vlog.wol",
            ));
            fields.extend(version_object(
                pick(&logs.version, &logs.version_types, ObjectType::WrapRight, true),
                "vlog.wor",
            ));
            fields
                .extend(backup_object(pick(&logs.backup, &logs.backup_types, ObjectType::WrapLeft, true), "blog.wol"));
            fields
                .extend(backup_object(pick(&logs.backup, &logs.backup_types, ObjectType::WrapRight, true), "blog.wor"));
        }
        Group::BackupLog => {
            fields
                .extend(backup_object(pick(&logs.backup, &logs.backup_types, ObjectType::WriteBatch, true), "blog.wb"));
            // A batch holding a value pointer, when the log has one.
            let with_pointer = (0..logs.backup.len())
                .filter(|&index| {
                    logs.backup_types[index] == ObjectType::WriteBatch
                        && batch_has_pointer(&volume.files[0], &logs.backup[index])
                })
                .max_by_key(|&index| logs.backup[index].lsn);
            fields.extend(
                backup_object(with_pointer, "blog.wb_pointer")
                    .into_iter()
                    .filter(|field| field.path.contains(".pointer.")),
            );
        }
        Group::Chunk | Group::Entries | Group::Sketch => {
            let sketch = group == Group::Sketch;
            let slot = chosen_chunk(&logs.version_state, space, volume)
                .ok_or_else(|| CaseError(format!("{group:?}: the base has no chunk to craft")))?;
            let p = "chunk[live]";
            if group == Group::Entries {
                fields.extend(entry_fields(volume, slot, p, &ctx)?);
            } else {
                fields.extend(chunk_fields(volume, slot, p, &ctx, sketch)?);
            }
        }
        Group::ValueChunk => {
            let meta = logs
                .version_state
                .value_chunks
                .values()
                .next()
                .ok_or_else(|| CaseError("the base has no value chunk".into()))?;
            fields.extend(value_chunk_fields(volume, meta.slot, "value_chunk[0].footer", &ctx)?);
        }
        Group::Undo => {
            let file = volume.undo_index().ok_or_else(|| CaseError("the base has no undo file".into()))?;
            fields.extend(super::undo::fields(&volume.files[file], file));
        }
    }
    Ok(fields)
}
