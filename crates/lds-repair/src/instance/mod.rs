//! Rebuilding one instance's tree from what is still readable (see the crate documentation).

mod backup;
mod free_slots;
mod left_out;
mod rebase;
mod rebuild;
mod source;
mod values;

pub(crate) use rebase::{rebase_plan, NotRebasable};
pub(crate) use source::Source;

use std::collections::{BTreeMap, BTreeSet};

use lds_check::Code;
use lds_format::entry::Entry;
use lds_format::geometry::LogKind;
use lds_format::label::Label;
use lds_format::log::{area_context, LogPosition, HEADER_LEN};
use lds_format::version::meta::ChunkMeta;
use lds_format::version::payload::BaseVersion;
use lds_volume::BlockDevice;

use crate::logchunks::Resolver;
use crate::{Fix, RepairError};

use backup::{backup_batches, logged_entries};
use free_slots::newer_data;
use rebuild::{Rebuild, Start};
use source::{header_maxima, switch_numbers};
use values::settle_value_chunks;

/// Entries to write into new chunks at a level.
#[derive(Debug, Clone)]
pub struct Run {
    /// The level.
    pub level: u8,
    /// Chunk flags (odd).
    pub flags: u8,
    /// Sorted, newest version of a key first, no two with the same key and sequence.
    pub entries: Vec<Entry>,
}

impl Run {
    fn new(level: u8, flags: u8, mut entries: Vec<Entry>) -> Self {
        sort_entries(&mut entries);
        Self { level, flags, entries }
    }

    fn key_range(&self) -> Option<(&[u8], &[u8])> {
        Some((self.entries.first()?.key.as_slice(), self.entries.last()?.key.as_slice()))
    }
}

fn sort_entries(entries: &mut Vec<Entry>) {
    entries.sort_by(Entry::cmp_internal);
    entries.dedup_by(|later, earlier| later.key == earlier.key && later.sequence == earlier.sequence);
}

/// What repair will do to one instance.
pub(crate) struct InstancePlan {
    pub(crate) instance: u32,
    pub(crate) fixes: Vec<Fix>,
    /// Chunks of the new version that stay where they are (and, after placement, the new ones).
    pub(crate) kept: Vec<ChunkMeta>,
    /// New data to write into chunks.
    pub(crate) runs: Vec<Run>,
    /// The new base version without its chunks.
    pub(crate) template: BaseVersion,
    /// Version log ranges the old state reads: the new base version goes elsewhere.
    pub(crate) protected: Vec<(u64, u64)>,
    /// Of them, the ranges the rebuild read its version from (when the version log is broken,
    /// the newest good base version and its chain): where the rest leaves no room, the new
    /// base version may go over the other ones, since a second repair after a crash starts
    /// from the newest good base version again (the new one, once it landed whole).
    pub(crate) needed: Vec<(u64, u64)>,
    pub(crate) next_lsn: u64,
    pub(crate) next_sn: u64,
    /// Free slots whose chunks the plan reads (not to be overwritten before the switch).
    pub(crate) source_slots: BTreeSet<u64>,
    /// Applied (false when `-p` refuses it).
    pub(crate) apply: bool,
    /// Value chunks to copy to another slot (a shrink or a device removal), each with its
    /// slot image: same id, same bytes (SPEC.md §14 step 1).
    pub(crate) value_moves: Vec<(lds_format::value::ValueChunkMeta, Vec<u8>)>,
}

impl InstancePlan {
    /// The new base version.
    pub(crate) fn base(&self) -> BaseVersion {
        let mut base = self.template.clone();
        base.chunks = self.kept.clone();
        base.chunks.sort_by_key(|chunk| chunk.chunk_id);
        base
    }

    /// Records that a value chunk now lives in `slot` (after its copy is placed).
    pub(crate) fn move_value_chunk(&mut self, value_chunk_id: u64, slot: u64) {
        if let Some(values) = self.template.values.as_mut() {
            for value_chunk in values.chunks.iter_mut().filter(|chunk| chunk.value_chunk_id == value_chunk_id) {
                value_chunk.slot = slot;
            }
        }
    }

    /// The slots of the value chunks the new base version keeps.
    pub(crate) fn value_slots(&self) -> impl Iterator<Item = u64> + '_ {
        self.template.values.iter().flat_map(|values| values.chunks.iter().map(|chunk| chunk.slot))
    }
}

fn sequence_range(entries: &[Entry]) -> String {
    let low = entries.iter().map(|entry| entry.sequence).min().unwrap_or(0);
    let high = entries.iter().map(|entry| entry.sequence).max().unwrap_or(0);
    format!("sequences {low} to {high}")
}

/// Plans the rebuild of `source`'s tree.
pub(crate) fn plan<'a>(
    device: &'a dyn BlockDevice,
    label: &'a Label,
    source: &'a Source,
    old_slots: &BTreeSet<u64>,
) -> Result<InstancePlan, RepairError> {
    let geometry = &label.geometry;
    let instance = source.instance;
    let version_context = area_context(geometry, LogKind::Version, instance);
    let backup_context = area_context(geometry, LogKind::Backup, instance);
    let mut rebuild = Rebuild {
        device,
        geometry,
        instance,
        log: (format!("version log of instance {instance}"), version_context.ofs_area),
        tree: BTreeMap::new(),
        runs: Vec::new(),
        fixes: Vec::new(),
        resolver: Resolver::new(&source.backup_area, backup_context),
        retain_until: None,
    };
    let Start { version, journals, replica, protected, needed, lost, relocated } =
        rebuild.start(label, source, old_slots)?;
    rebuild.tree = version.chunks.clone();
    // The chunks kept where they were found are the version's now: no free slot.
    let old_slots: BTreeSet<u64> = old_slots.union(&relocated).copied().collect();
    let old_slots = &old_slots;
    let (extra, source_slots, lost) = newer_data(&mut rebuild, source, &version, lost, old_slots)?;
    // What the version and the free slots hold: the backup log adds what is newer.
    let known = extra.iter().map(|entry| entry.sequence).max().unwrap_or(0).max(version.last_sequence);
    let (batches, backup_head, mut backup_fixes) = backup_batches(source, &version, lost, known, &backup_context);
    // SPEC.md §9.6 (`E_BLOG_SN_ABOVE`): recovery followed the backup log past an object whose
    // sn is above the version log's, counting it as the sn before it; the batches it replays
    // go to level 0 below and the backup log restarts, which leaves the object behind.
    let sn_above = source.recovery.as_ref().ok().filter(|_| !lost).and_then(|recovery| recovery.backup_state());
    if let Some(above) = sn_above.and_then(|state| state.sn_above) {
        backup_fixes.insert(
            0,
            Fix::new(
                vec![Code::BackupLogSnAbove],
                format!("backup log of instance {instance}"),
                backup_context.ofs_area + above.offset,
                format!(
                    "replayed the backup log past the {} with sn {} (above the version log's {}) as recovery follows it: its {} batches go to level 0 and the backup log restarts",
                    above.object_type.name(),
                    above.sn,
                    above.ceiling,
                    batches.len()
                ),
            ),
        );
    }
    // The new base version: the backup log restarts at its head (or offset 0) with an lsn
    // above any it holds, so that nothing there is replayed again. The objects from the log
    // starts of the log chunks that stay to that head are retained (SPEC.md §8.9): where the
    // head is not known, no log chunk stays.
    let (backup_lsn_max, _) = header_maxima(&source.backup_area, &backup_context);
    let head = backup_head.filter(|&offset| offset % 8 == 0 && offset + HEADER_LEN as u64 <= backup_context.len_area);
    let lsn_backup_start = backup_lsn_max.max(version.lsn_backup_start) + 1;
    rebuild.retain_until = head.map(|offset| LogPosition { offset, lsn: lsn_backup_start });
    rebuild.journals(&journals)?;
    rebuild.damaged_chunks()?;
    let logged = logged_entries(source, &backup_context, &batches, &version, lost, known, &extra);
    rebuild.level_rules(version.num_levels)?;
    // The last sequence covers every chunk.
    let chunk_largest = rebuild.tree.values().map(|chunk| chunk.largest_seq);
    let run_largest = rebuild.runs.iter().flat_map(|run| run.entries.iter().map(|entry| entry.sequence));
    let data_largest = chunk_largest.chain(run_largest).max().unwrap_or(0);
    if rebuild.tree.values().any(|chunk| chunk.largest_seq > version.last_sequence) {
        let action = format!("raised the version's last sequence from {} to {data_largest}", version.last_sequence);
        rebuild.fix(vec![Code::SequenceImplausible], action);
    }
    // The backup log's batches (with what the free slots added) go to level 0, so that the
    // backup log restarts.
    let mut new_data = extra;
    new_data.extend(logged);
    let last_sequence =
        version.last_sequence.max(data_largest).max(new_data.iter().map(|entry| entry.sequence).max().unwrap_or(0));
    if !new_data.is_empty() {
        let run = Run::new(0, 0, new_data);
        if backup_fixes.is_empty() && !batches.is_empty() {
            backup_fixes.push(Fix::new(
                Vec::new(),
                format!("backup log of instance {instance}"),
                backup_context.ofs_area,
                format!(
                    "wrote the {} entries the backup log replays ({}) to level 0; the backup log restarts",
                    run.entries.len(),
                    sequence_range(&run.entries)
                ),
            ));
        }
        rebuild.runs.push(run);
    }
    rebuild.fixes.extend(backup_fixes);
    if replica.is_some_and(|replica| replica != *geometry) {
        rebuild.fix(vec![Code::GeometryReplicaDiffers], "the new base version replicates the label's geometry".into());
    }
    if rebuild.fixes.is_empty() {
        rebuild.fix(Vec::new(), "appended a base version of the recovered tree".into());
    }
    let (next_lsn, next_sn) = switch_numbers(source, &version_context);
    let mut template = BaseVersion {
        last_sequence,
        label_generation: label.generation,
        ofs_backup_start: head.unwrap_or(0),
        lsn_backup_start,
        chunks: Vec::new(),
        ..version.to_base(*geometry, instance)
    };
    let mut source_slots = source_slots;
    // A chunk kept where it was found is not in the old state: its slot must not take the
    // repair's writes before the switch, even where its entries are rewritten (a damaged one).
    source_slots.extend(relocated.iter().copied());
    if label.has_value_chunks() {
        settle_value_chunks(&mut rebuild, &version, &mut template, &mut source_slots)?;
    }
    rebuild.resolve_runs();
    // The log chunks that stay were checked against this backup start (their objects lie
    // before it): the new base version records exactly it.
    let backup_start = LogPosition { offset: template.ofs_backup_start, lsn: template.lsn_backup_start };
    if rebuild.tree.values().any(ChunkMeta::is_log_chunk) && rebuild.retain_until != Some(backup_start) {
        return Err(RepairError::Inconsistent {
            device: device.name().display().to_string(),
            instance,
            reason: "a log chunk stays that was not checked against the new backup start".into(),
        });
    }
    Ok(InstancePlan {
        instance,
        fixes: rebuild.fixes,
        kept: rebuild.tree.into_values().collect(),
        runs: rebuild.runs,
        template,
        protected,
        needed,
        next_lsn,
        next_sn,
        source_slots,
        apply: true,
        value_moves: Vec::new(),
    })
}
