//! Pass 6: the compaction journal (SPEC.md §6.3, §12): each unfinished compaction, its
//! inputs in the version, its outputs in slots nothing else uses.

use std::collections::BTreeSet;

use lds_format::image::area_context;
use lds_format::label::{Geometry, LogKind};

use crate::problem::{Code, Report};
use crate::Tree;

pub(crate) fn check_journals(geometry: &Geometry, trees: &[Tree], report: &mut Report) {
    for tree in trees {
        let structure = format!("version log of instance {}", tree.instance);
        let ofs_area = area_context(geometry, LogKind::Version, tree.instance).ofs_area;
        let state = &tree.recovery.version_log;
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
