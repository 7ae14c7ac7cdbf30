//! Pass 6: the compaction journal (SPEC.md §6.3, §12): each unfinished compaction, its
//! inputs in the version, its outputs in slots nothing else uses.

use std::collections::BTreeSet;

use lds_format::geometry::{Geometry, LogKind};
use lds_format::log::area_context;

use crate::problem::{Code, Report};
use crate::Tree;

pub(crate) fn check_journals(geometry: &Geometry, trees: &[Tree], report: &mut Report) {
    for tree in trees {
        let structure = format!("version log of instance {}", tree.instance);
        let ofs_area = area_context(geometry, LogKind::Version, tree.instance).ofs_area;
        let state = &tree.recovery.version_log;
        let journals: Vec<_> = state.unfinished_compactions.values().collect();
        for (index, first) in journals.iter().enumerate() {
            for second in &journals[index + 1..] {
                let levels = |journal: &lds_format::version::payload::CompactionJournal| {
                    journal.source_level..=journal.target_level
                };
                if levels(first).contains(&second.source_level) || levels(second).contains(&first.source_level) {
                    report.add(
                        Code::JournalLevelsShared,
                        structure.clone(),
                        ofs_area,
                        format!(
                            "compactions {} (levels {} to {}) and {} (levels {} to {}) are both unfinished",
                            first.compaction_id,
                            first.source_level,
                            first.target_level,
                            second.compaction_id,
                            second.source_level,
                            second.target_level
                        ),
                    );
                }
            }
        }
        for journal in state.unfinished_compactions.values() {
            report.add(
                Code::JournalUnfinished,
                structure.clone(),
                ofs_area,
                format!(
                    "compaction {} is unfinished: {} outputs persisted, {} inputs cleaned, resume after key {}",
                    journal.compaction_id,
                    journal.outputs.len(),
                    journal.cleaned.len(),
                    lds_format::error::hex(&journal.resume_key)
                ),
            );
            if let Some(missing) = journal.inputs.iter().find(|id| !state.version.chunks.contains_key(id)) {
                report.add(
                    Code::JournalInputsMissing,
                    structure.clone(),
                    ofs_area,
                    format!("compaction {}: input chunk {missing} is not in the version", journal.compaction_id),
                );
            }
            let inputs: BTreeSet<u64> = journal.inputs.iter().copied().collect();
            for &id in &journal.cleaned {
                let holds_more = state
                    .version
                    .chunks
                    .get(&id)
                    .is_some_and(|chunk| chunk.largest_key.as_slice() > journal.resume_key.as_slice());
                if !inputs.contains(&id) || holds_more {
                    report.add(
                        Code::JournalCleanedTooSoon,
                        structure.clone(),
                        ofs_area,
                        format!(
                            "compaction {}: chunk {id} is listed as cleaned but {}",
                            journal.compaction_id,
                            if holds_more { "holds keys above the resume key" } else { "is not an input" }
                        ),
                    );
                }
            }
            let mut outputs: Vec<_> = journal.outputs.iter().collect();
            outputs.sort_by(|a, b| a.smallest_key.cmp(&b.smallest_key));
            let overlapping = outputs.windows(2).find(|pair| pair[0].largest_key >= pair[1].smallest_key);
            let above = outputs.iter().find(|output| output.largest_key.as_slice() > journal.resume_key.as_slice());
            if let Some(pair) = overlapping {
                report.add(
                    Code::JournalOutputsDisorder,
                    structure.clone(),
                    geometry.slot_offset(pair[1].chunk_id),
                    format!(
                        "compaction {}: outputs {} and {} overlap",
                        journal.compaction_id, pair[0].chunk_id, pair[1].chunk_id
                    ),
                );
            } else if let Some(output) = above {
                report.add(
                    Code::JournalOutputsDisorder,
                    structure.clone(),
                    geometry.slot_offset(output.chunk_id),
                    format!(
                        "compaction {}: output {} holds keys above the resume key",
                        journal.compaction_id, output.chunk_id
                    ),
                );
            }
            let cleaned: BTreeSet<u64> = journal.cleaned.iter().copied().collect();
            for output in &journal.outputs {
                for slot in output.slots() {
                    if let Some(owner) = state.version.slot_owner.get(&slot).filter(|owner| !cleaned.contains(owner)) {
                        report.add(
                            Code::JournalOutputsConflict,
                            structure.clone(),
                            geometry.slot_offset(slot),
                            format!(
                                "compaction {}: output slot {slot} is used by chunk {owner}",
                                journal.compaction_id
                            ),
                        );
                    }
                }
            }
        }
    }
}
