//! Rebuilding the tree: where it starts (the recovered version or the newest good one), the
//! unfinished compactions, the damaged chunks and the level rules.

use std::collections::{BTreeMap, BTreeSet};

use lds_check::{chunk_problems, CheckOptions, Code, Repair};
use lds_format::algorithms::instance::{ChainEndVerdict, InstanceRecovery};
use lds_format::algorithms::recovery::VersionLogError;
use lds_format::algorithms::salvage::GoodVersion;
use lds_format::codec::display_key;
use lds_format::entry::Entry;
use lds_format::geometry::{Geometry, LogKind};
use lds_format::label::Label;
use lds_format::log::{area_context, LogPosition};
use lds_format::version::meta::{ChunkMeta, CHUNK_FLAG_ODD};
use lds_format::version::payload::{CompactionJournal, DeltaVersion};
use lds_format::version::Version;
use lds_volume::{BlockDevice, DeviceError};

use crate::dropped::{Dropped, Lost};
use crate::logchunks::{self, Resolver};
use crate::{Fix, FixClass, RepairError};

use super::left_out::locate_left_out;
use super::source::{chunk_images, old_chain_ranges, read_entries, version_log_broken, ChunkRead, Source};
use super::Run;

pub(super) fn version_code(recovery: &Result<InstanceRecovery, VersionLogError>) -> Code {
    match recovery {
        Ok(_) => Code::VersionLogChainBroken,
        Err(VersionLogError::NoStart { .. }) => Code::VersionLogNoStart,
        Err(VersionLogError::BadStart { .. }) => Code::VersionLogBadStart,
        Err(VersionLogError::BadWrapLeft { .. }) => Code::VersionLogBadWrapLeft,
        Err(VersionLogError::SnMismatch { .. }) => Code::VersionLogSnMismatch,
        Err(VersionLogError::Replay { error, .. }) => match error {
            lds_format::version::ReplayError::SlotInUse { .. } => Code::SlotReferencedTwice,
            lds_format::version::ReplayError::SlotOutOfRange { .. } => Code::SlotOutOfRange,
            lds_format::version::ReplayError::LevelOutOfRange { .. } => Code::LevelOutOfRange,
            _ => Code::VersionLogReplay,
        },
        Err(_) => Code::VersionLogReplay,
    }
}

/// Why a journaled compaction cannot be finished from its journal, if it cannot.
fn journal_fault(
    journal: &CompactionJournal,
    tree: &BTreeMap<u64, ChunkMeta>,
    geometry: &Geometry,
) -> Option<(Code, String)> {
    if let Some(missing) = journal.inputs.iter().find(|id| !tree.contains_key(id)) {
        return Some((Code::JournalInputsMissing, format!("input chunk {missing} is not in the version")));
    }
    let inputs: BTreeSet<u64> = journal.inputs.iter().copied().collect();
    for id in &journal.cleaned {
        let holds_more = tree.get(id).is_some_and(|chunk| chunk.largest_key.as_slice() > journal.resume_key.as_slice());
        if !inputs.contains(id) || holds_more {
            return Some((Code::JournalCleanedTooSoon, format!("chunk {id} is listed as cleaned too soon")));
        }
    }
    let mut outputs: Vec<&ChunkMeta> = journal.outputs.iter().collect();
    outputs.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key));
    if outputs.windows(2).any(|pair| pair[0].largest_key >= pair[1].smallest_key)
        || outputs.iter().any(|output| output.largest_key.as_slice() > journal.resume_key.as_slice())
    {
        return Some((Code::JournalOutputsDisorder, "its outputs overlap or pass the resume key".into()));
    }
    let cleaned: BTreeSet<u64> = journal.cleaned.iter().copied().collect();
    let owners: BTreeMap<u64, u64> =
        tree.values().flat_map(|chunk| chunk.slots().map(move |slot| (slot, chunk.chunk_id))).collect();
    for output in &journal.outputs {
        for slot in output.slots() {
            if slot >= geometry.num_slots {
                return Some((Code::SlotOutOfRange, format!("output slot {slot} is beyond the slot area")));
            }
            if owners.get(&slot).is_some_and(|owner| !cleaned.contains(owner)) {
                return Some((Code::JournalOutputsConflict, format!("output slot {slot} is used by the version")));
            }
        }
    }
    None
}

fn class_of(codes: &[Code], dropped: &[Dropped]) -> FixClass {
    if dropped.is_empty() && codes.iter().all(|code| matches!(code.kind().repair, Repair::Preen(_) | Repair::Nothing)) {
        FixClass::Preen
    } else {
        FixClass::Fix
    }
}

/// The tree being rebuilt, and what was done to it.
pub(super) struct Rebuild<'a> {
    pub(super) device: &'a dyn BlockDevice,
    pub(super) geometry: &'a Geometry,
    pub(super) instance: u32,
    /// `version log of instance N`, and the area's device offset.
    pub(super) log: (String, u64),
    /// The chunks that stay.
    pub(super) tree: BTreeMap<u64, ChunkMeta>,
    /// New data to write.
    pub(super) runs: Vec<Run>,
    pub(super) fixes: Vec<Fix>,
    /// Follows log references in the instance's backup log area (SPEC.md §8.9).
    pub(super) resolver: Resolver<'a>,
    /// The new base version's backup start: the log chunks that stay name objects before it.
    /// `None` when the backup log's head is not known, and no log chunk stays.
    pub(super) retain_until: Option<LogPosition>,
}

/// Where the rebuild starts: the version, its unfinished compactions, the geometry its base
/// version replicates, and the old state's version log ranges.
pub(super) struct Start {
    pub(super) version: Version,
    pub(super) journals: BTreeMap<u64, CompactionJournal>,
    pub(super) replica: Option<Geometry>,
    pub(super) protected: Vec<(u64, u64)>,
    pub(super) needed: Vec<(u64, u64)>,
    /// The version log lost versions: the recovered version is not the newest.
    pub(super) lost: bool,
    /// The slots of the chunks the version names with metadata that contradicts it, found
    /// intact elsewhere and kept there (`locate_left_out`).
    pub(super) relocated: BTreeSet<u64>,
}

impl Rebuild<'_> {
    pub(super) fn fix(&mut self, codes: Vec<Code>, action: String) -> &mut Fix {
        self.fixes.push(Fix::new(codes, self.log.0.clone(), self.log.1, action));
        let last = self.fixes.len() - 1;
        &mut self.fixes[last]
    }

    pub(super) fn read_entries(&self, meta: &ChunkMeta) -> Result<ChunkRead, DeviceError> {
        read_entries(self.device, self.geometry, self.instance, meta)
    }

    /// The version to rebuild from: the recovered one, or the newest good one (with the chunks
    /// it names with contradicting metadata where they lie intact in slots outside `taken`).
    pub(super) fn start(
        &mut self,
        label: &Label,
        source: &Source,
        taken: &BTreeSet<u64>,
    ) -> Result<Start, RepairError> {
        let version_context = area_context(self.geometry, LogKind::Version, self.instance);
        let mut protected = source
            .recovery
            .as_ref()
            .map(|recovery| old_chain_ranges(recovery, &source.version_area, &version_context))
            .unwrap_or_default();
        let lost = version_log_broken(&source.recovery);
        if let (Ok(recovery), false) = (&source.recovery, lost) {
            let state = &recovery.version_log;
            return Ok(Start {
                version: state.version.clone(),
                journals: state.unfinished_compactions.clone(),
                replica: Some(state.base.geometry),
                needed: protected.clone(),
                protected,
                lost,
                relocated: BTreeSet::new(),
            });
        }
        let code = version_code(&source.recovery);
        let mut dropped = Vec::new();
        if let Ok(InstanceRecovery { version_end: ChainEndVerdict::Broken { later, .. }, .. }) = &source.recovery {
            // The data of the versions past the damage is read back from the free slots
            // (`newer_in_free_slots`), each loss there reported with its chunk.
            dropped.push(Dropped::new(
                format!("version log objects lsn {} to {} past the damage", later.first_lsn, later.last_lsn),
                Vec::new(),
            ));
        }
        let Some(good) = &source.good else {
            let fix =
                self.fix(vec![code], "no base version is left: rebuilt the tree from the chunks in the slots".into());
            fix.dropped = vec![Dropped::new(
                "every version the log held (the data in free slots is kept at level 0)",
                Vec::new(),
            )];
            fix.class = FixClass::Fix;
            let base = lds_format::algorithms::image::empty_base_version_of(label, self.instance);
            let version = Version::from_base(&base).map_err(|error| RepairError::Inconsistent {
                device: self.device.name().display().to_string(),
                instance: self.instance,
                reason: error.to_string(),
            })?;
            return Ok(Start {
                version,
                journals: BTreeMap::new(),
                replica: None,
                protected,
                needed: Vec::new(),
                lost,
                relocated: BTreeSet::new(),
            });
        };
        protected.extend(good.objects.iter().copied());
        self.start_from_good(good, code, dropped, protected, taken)
    }

    /// The newest good version of a broken version log to rebuild from, with the chunks it
    /// names with contradicting metadata kept where they lie intact outside `taken`; the fix
    /// says what it drops (`dropped` and the versions after it).
    fn start_from_good(
        &mut self,
        good: &GoodVersion,
        code: Code,
        mut dropped: Vec<Dropped>,
        protected: Vec<(u64, u64)>,
        taken: &BTreeSet<u64>,
    ) -> Result<Start, RepairError> {
        let needed = good.objects.clone();
        dropped.extend(
            good.stopped.iter().map(|why| Dropped::new(format!("the versions after that point: {why}"), Vec::new())),
        );
        let instance = self.instance;
        // A chunk left out for its metadata (a slot beyond the slot area or of another chunk,
        // an id another chunk has) may lie intact in a free slot: it stays, there.
        let mut version = good.version.clone();
        let left_out: Vec<&ChunkMeta> = good.left_out.iter().filter_map(|left_out| left_out.chunk.as_ref()).collect();
        let found = locate_left_out(self.device, self.geometry, instance, &left_out, taken)?;
        let mut relocated = BTreeSet::new();
        let mut kept = Vec::new();
        for (meta, found) in left_out.iter().zip(found) {
            let Some(found) = found else { continue };
            let delta = DeltaVersion {
                added: vec![found.clone()],
                last_sequence: version.last_sequence,
                ofs_backup_start: version.ofs_backup_start,
                lsn_backup_start: version.lsn_backup_start,
                ..DeltaVersion::default()
            };
            if version.apply(&delta).is_ok() {
                relocated.extend(found.slots());
                kept.push((meta.chunk_id, meta.slots().collect::<Vec<_>>(), found));
            }
        }
        // The chunks kept where they were found are not dropped (their own fixes say so).
        let stays = |chunk: &ChunkMeta| {
            kept.iter().any(|(id, slots, _)| *id == chunk.chunk_id && chunk.slots().eq(slots.iter().copied()))
        };
        dropped.extend(good.left_out.iter().filter(|left_out| !left_out.chunk.as_ref().is_some_and(stays)).map(
            |left_out| {
                let lost = left_out.chunk.iter().map(|chunk| Lost::chunk(instance, chunk)).collect();
                Dropped::new(format!("left out {}", left_out.what), lost)
            },
        ));
        let fix = Fix::new(
            vec![code],
            self.log.0.clone(),
            self.log.1 + good.base_offset,
            format!(
                "rebuilt the version from the base version at offset {} (lsn {}) and the {} objects chained after it, with a new base version",
                good.base_offset,
                good.base_lsn,
                good.objects.len() - 1
            ),
        );
        self.fixes.push(fix.dropping(dropped).class(FixClass::Fix));
        for (id, slots, found) in kept {
            let listed: Vec<String> = slots.iter().map(u64::to_string).collect();
            let found_in: Vec<String> = found.slots().map(|slot| slot.to_string()).collect();
            let action = format!(
                "kept the chunk the version names as chunk {id} in slots {} (which contradicts the version) as chunk {} in slots {}, where it lies intact: its footers name this volume, instance and level, and carry the digests the version records",
                listed.join(", "),
                found.chunk_id,
                found_in.join(", ")
            );
            let structure = format!("chunk {} of instance {instance}", found.chunk_id);
            let offset = self.geometry.slot_offset(found.chunk_id);
            self.fixes.push(Fix::new(vec![code], structure, offset, action));
        }
        Ok(Start {
            version,
            journals: good.unfinished_compactions.clone(),
            replica: Some(good.base.geometry),
            protected,
            needed,
            // The version log is broken: the versions after the good one are lost.
            lost: true,
            relocated,
        })
    }

    /// The newest unfinished compaction its journal describes consistently is finished (or
    /// rolled back when it cleaned nothing yet); the others are rolled back.
    pub(super) fn journals(&mut self, journals: &BTreeMap<u64, CompactionJournal>) -> Result<(), RepairError> {
        let mut finished: Option<&CompactionJournal> = None;
        for journal in journals.values().rev() {
            let levels = |journal: &CompactionJournal| journal.source_level..=journal.target_level;
            let shares_levels = finished.is_some_and(|kept| {
                levels(journal).contains(&kept.source_level) || levels(kept).contains(&journal.source_level)
            });
            let fault = if shares_levels {
                Some((Code::JournalLevelsShared, "a newer unfinished compaction shares its levels".to_string()))
            } else {
                journal_fault(journal, &self.tree, self.geometry)
            };
            match fault {
                Some((code, why)) => {
                    let dropped = if journal.cleaned.is_empty() {
                        Vec::new()
                    } else {
                        // The inputs stay: where their slots were reused, the check finds
                        // them damaged and each one's fix names what it drops.
                        vec![Dropped::new(
                            format!(
                                "the keys up to the resume key of the inputs it cleaned (chunks {:?}) where their slots were reused (reported with those chunks)",
                                journal.cleaned
                            ),
                            Vec::new(),
                        )]
                    };
                    let action = format!(
                        "rolled back compaction {} ({why}): its outputs are free slots, its inputs stay",
                        journal.compaction_id
                    );
                    let fix = self.fix(vec![code], action);
                    fix.dropped = dropped;
                    fix.class = FixClass::Fix;
                }
                None if finished.is_none() => finished = Some(journal),
                None => {}
            }
        }
        match finished {
            Some(journal) if journal.cleaned.is_empty() => {
                let action = format!(
                    "rolled back the unfinished compaction {} (it had cleaned no input): its {} outputs are free slots, its inputs stay",
                    journal.compaction_id,
                    journal.outputs.len()
                );
                self.fix(vec![Code::JournalUnfinished], action);
            }
            Some(journal) => self.finish_compaction(journal)?,
            None => {}
        }
        Ok(())
    }

    /// Finishes a compaction from its journal: its outputs replace its inputs, and the keys
    /// above the resume key of the inputs it had not cleaned are rewritten at their levels.
    fn finish_compaction(&mut self, journal: &CompactionJournal) -> Result<(), RepairError> {
        let mut rewritten = Vec::new();
        let mut dropped = Vec::new();
        for id in &journal.inputs {
            let Some(input) = self.tree.remove(id) else { continue };
            if journal.cleaned.contains(id) {
                continue;
            }
            let read = self.read_entries(&input)?;
            dropped.extend(read.dropped.into_iter().map(|what| what.prefixed(&format!("chunk {id}: "))));
            let above: Vec<Entry> =
                read.entries.into_iter().filter(|entry| entry.key.as_slice() > journal.resume_key.as_slice()).collect();
            if !above.is_empty() {
                rewritten.push(id.to_string());
                self.runs.push(Run::new(input.level, 0, above));
            }
        }
        for output in &journal.outputs {
            self.tree.insert(output.chunk_id, output.clone());
        }
        let action = format!(
            "finished the unfinished compaction {} from its journal: its {} outputs replace its {} inputs; the keys above the resume key {} of the inputs it had not cleaned ({}) were rewritten",
            journal.compaction_id,
            journal.outputs.len(),
            journal.inputs.len(),
            display_key(&journal.resume_key),
            if rewritten.is_empty() { "none".to_string() } else { format!("chunks {}", rewritten.join(", ")) }
        );
        let fix = self.fix(vec![Code::JournalUnfinished], action);
        if !dropped.is_empty() {
            fix.dropped = dropped;
            fix.class = FixClass::Fix;
        }
        Ok(())
    }

    /// Every chunk, as the checker checks it: a chunk with a problem is rewritten from its
    /// readable blocks (a problem of its sequence numbers alone is the version's to fix).
    pub(super) fn damaged_chunks(&mut self) -> Result<(), RepairError> {
        let (geometry, instance) = (self.geometry, self.instance);
        let ids: Vec<u64> = self.tree.keys().copied().collect();
        for id in ids {
            let Some(meta) = self.tree.get(&id).cloned() else { continue };
            let images = chunk_images(self.device, geometry, &meta)?;
            let problems = chunk_problems(
                &images,
                geometry,
                instance,
                &meta,
                u64::MAX,
                CheckOptions { deep: true, ..Default::default() },
            );
            let mut codes: Vec<Code> = problems.iter().map(|problem| problem.code).collect();
            codes.sort();
            codes.dedup();
            // Log references (SPEC.md §8.9): a chunk whose references do not all resolve, or
            // that the rebuilt version cannot retain, is rewritten with them read into puts.
            let log = logchunks::check_chunk(&mut self.resolver, &images, geometry, &meta, self.retain_until);
            if codes.is_empty() && log.keeps() {
                continue;
            }
            self.tree.remove(&id);
            let mut read = self.read_entries(&meta)?;
            // A log chunk's reference whose kind or sequence damage changed is read as the
            // put it names, never kept as a value of 24 reference bytes (logchunks.rs).
            let (mistyped, mistyped_dropped, first_mistyped) = if meta.is_log_chunk() {
                self.resolver.recover_mistyped(&mut read.entries)
            } else {
                (0, Vec::new(), None)
            };
            read.dropped.extend(mistyped_dropped);
            let (resolved, unresolved) = self.resolver.resolve_entries(&mut read.entries);
            let count = read.entries.len();
            let mut action = if count == 0 {
                format!("dropped chunk {id}: none of its entries is readable")
            } else {
                format!("rewrote the {count} readable entries of chunk {id} into new chunks at level {}", meta.level)
            };
            if resolved > 0 || !unresolved.is_empty() || !log.keeps() {
                action.push_str(&format!(
                    "; its {resolved} log references that resolve became puts of the values they name (SPEC.md §8.9)"
                ));
                if !log.keeps() {
                    action.push_str(&format!(": {}", log.summary()));
                }
            }
            if let Some(first) = first_mistyped {
                let (count, verb) = if mistyped == 1 {
                    (
                        "1 entry whose kind or sequence number is damaged and whose value is a log reference".into(),
                        "became the put it names",
                    )
                } else {
                    (format!("{mistyped} entries whose kind or sequence number is damaged and whose value is a log reference"), "became the puts they name")
                };
                action.push_str(&format!("; {count} {verb} ({first})"));
            }
            read.dropped.extend(unresolved);
            // Reading references into puts loses nothing: only the entries dropped decide.
            let class = if codes.is_empty() {
                if read.dropped.is_empty() {
                    FixClass::Preen
                } else {
                    FixClass::Fix
                }
            } else {
                class_of(&codes, &read.dropped)
            };
            codes.extend(logchunks::codes_of(&log.faults));
            codes.sort();
            codes.dedup();
            let offset = meta
                .sub_chunks
                .first()
                .map_or(0, |sub_chunk| geometry.slot_offset(sub_chunk.slot.min(geometry.num_slots)));
            let structure = format!("chunk {id} of instance {instance}");
            self.fixes.push(Fix::new(codes, structure, offset, action).dropping(read.dropped).class(class));
            if count > 0 {
                self.runs.push(Run::new(meta.level, meta.flags, read.entries));
            }
        }
        Ok(())
    }

    /// Reads the log references left in the runs (entries of a journaled compaction's inputs,
    /// of chunks in free slots, of chunks pointing into a damaged value chunk) into puts, so
    /// that repair writes ordinary chunks only (SPEC.md §8.9); the entries whose reference
    /// does not resolve are dropped, each reported.
    pub(super) fn resolve_runs(&mut self) {
        let (mut resolved, mut dropped) = (0, Vec::new());
        for run in &mut self.runs {
            let (count, lost) = self.resolver.resolve_entries(&mut run.entries);
            resolved += count;
            dropped.extend(lost);
        }
        self.runs.retain(|run| !run.entries.is_empty());
        if resolved == 0 && dropped.is_empty() {
            return;
        }
        let action = format!(
            "read {resolved} log references of the entries rewritten into puts of the values they name{}",
            if dropped.is_empty() {
                String::new()
            } else {
                format!("; {} of them do not resolve (fsck 801)", dropped.len())
            }
        );
        let structure = format!("backup log of instance {}", self.instance);
        let offset = self.resolver.context().ofs_area;
        let fix = Fix::new(Vec::new(), structure, offset, action).dropping(dropped);
        self.fixes.push(fix);
    }

    /// The level rules over the kept chunks and the new runs: overlapping chunks of a level are
    /// merged into disjoint ones, and one odd chunk per level keeps its flag.
    pub(super) fn level_rules(&mut self, num_levels: u32) -> Result<(), RepairError> {
        for level in 1..num_levels.min(u32::from(u8::MAX)) as u8 {
            self.merge_overlaps(level)?;
            self.one_odd_chunk(level);
        }
        self.runs.retain(|run| !run.entries.is_empty());
        Ok(())
    }

    fn merge_overlaps(&mut self, level: u8) -> Result<(), RepairError> {
        /// A chunk that stays (its id) or a run (its index).
        type Node = Result<u64, usize>;
        let mut nodes: Vec<(Vec<u8>, Vec<u8>, Node)> = self
            .tree
            .values()
            .filter(|chunk| chunk.level == level)
            .map(|chunk| (chunk.smallest_key.clone(), chunk.largest_key.clone(), Ok(chunk.chunk_id)))
            .collect();
        nodes.extend(self.runs.iter().enumerate().filter(|(_, run)| run.level == level).filter_map(|(index, run)| {
            let (first, last) = run.key_range()?;
            Some((first.to_vec(), last.to_vec(), Err(index)))
        }));
        nodes.sort();
        let mut components: Vec<Vec<Node>> = Vec::new();
        let mut reach: Option<Vec<u8>> = None;
        for (smallest, largest, node) in nodes {
            match (&mut reach, components.last_mut()) {
                (Some(end), Some(component)) if smallest <= *end => {
                    component.push(node);
                    if largest > *end {
                        *end = largest;
                    }
                }
                _ => {
                    components.push(vec![node]);
                    reach = Some(largest);
                }
            }
        }
        let mut consumed = Vec::new();
        for component in components.into_iter().filter(|component| component.len() > 1) {
            let mut entries = Vec::new();
            let mut names: Vec<String> = Vec::new();
            let mut rewritten = false;
            let mut dropped = Vec::new();
            for node in component {
                match node {
                    Ok(id) => {
                        let Some(meta) = self.tree.remove(&id) else { continue };
                        let read = self.read_entries(&meta)?;
                        dropped.extend(read.dropped.into_iter().map(|what| what.prefixed(&format!("chunk {id}: "))));
                        entries.extend(read.entries);
                        names.push(id.to_string());
                    }
                    Err(index) => {
                        entries.append(&mut self.runs[index].entries);
                        consumed.push(index);
                        rewritten = true;
                    }
                }
            }
            let action = format!(
                "merged the overlapping chunks {}{} into new disjoint chunks",
                names.join(", "),
                if rewritten { " and rewritten entries" } else { "" }
            );
            let structure = format!("level {level} of instance {}", self.instance);
            self.fixes
                .push(Fix::new(vec![Code::LevelOverlap], structure, 0, action).dropping(dropped).class(FixClass::Fix));
            self.runs.push(Run::new(level, 0, entries));
        }
        for index in consumed {
            self.runs[index].entries.clear();
        }
        Ok(())
    }

    fn one_odd_chunk(&mut self, level: u8) {
        let mut odd_seen = false;
        let mut cleared = Vec::new();
        for chunk in self.tree.values_mut().filter(|chunk| chunk.level == level && chunk.is_odd()) {
            if odd_seen {
                chunk.flags &= !CHUNK_FLAG_ODD;
                cleared.push(chunk.chunk_id.to_string());
            }
            odd_seen = true;
        }
        for run in self.runs.iter_mut().filter(|run| run.level == level && run.flags & CHUNK_FLAG_ODD != 0) {
            if odd_seen {
                run.flags &= !CHUNK_FLAG_ODD;
                cleared.push("a rewritten chunk".into());
            }
            odd_seen = true;
        }
        if !cleared.is_empty() {
            let action = format!(
                "cleared the odd flag of {} (one odd chunk per level; a later compaction merges them)",
                cleared.join(", ")
            );
            let structure = format!("level {level} of instance {}", self.instance);
            self.fixes.push(Fix::new(vec![Code::OddChunksInLevel], structure, 0, action));
        }
    }
}
