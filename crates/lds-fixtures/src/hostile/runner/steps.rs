//! The commands of the set, and a case's directory laid out for them.

use std::path::Path;

use super::super::{Crafted, Seal, Space, Volume};
use super::oracles::hex;
use super::{NEIGHBOUR, UNDO_FILE, VOLUME};

/// One command of the set.
pub(super) struct Step {
    /// A label without the case's paths (`dump chunk`, `repair -n`).
    pub(super) label: String,
    pub(super) args: Vec<String>,
    /// Files the command may create (its named output), removed after it.
    pub(super) output: Option<&'static str>,
}

pub(super) fn step(label: &str, args: &[&str]) -> Step {
    Step { label: label.to_string(), args: args.iter().map(|arg| (*arg).to_string()).collect(), output: None }
}

/// The read commands run on a crafted volume (never an undo case's).
pub(super) fn read_steps(crafted: &Crafted, space: &Space, keys: &[Vec<u8>]) -> Vec<Step> {
    let mut steps = vec![
        step("fsck", &["fsck", VOLUME]),
        step("fsck --deep", &["fsck", "--deep", VOLUME]),
        step("fsck --json", &["fsck", "--json", VOLUME]),
    ];
    for view in ["label", "volume", "version-log", "backup-log", "slots", "tree", "value-chunks"] {
        steps.push(step(&format!("dump {view}"), &["dump", VOLUME, view]));
    }
    steps.push(step("dump volume --json", &["dump", VOLUME, "volume", "--json"]));
    let mut chunk_ids = vec![0u64, space.geometry.num_slots.saturating_sub(1), u64::MAX];
    for seal in &crafted.field.seals {
        if let Seal::Chunk { slot } | Seal::ValueChunk { slot } = seal {
            chunk_ids.insert(0, *slot);
        }
    }
    chunk_ids.dedup();
    for (index, id) in chunk_ids.iter().enumerate() {
        let id = id.to_string();
        steps.push(step("dump chunk", &["dump", VOLUME, "chunk", &id, "--entries"]));
        if index == 0 {
            steps.push(step("dump chunk --resolve", &["dump", VOLUME, "chunk", &id, "--resolve"]));
        }
    }
    let mut get = vec!["get".to_string(), VOLUME.to_string(), "--hex".to_string()];
    get.extend(keys.iter().map(|key| hex(key)));
    get.push(hex(b"no-such-key"));
    steps.push(Step { label: "get".into(), args: get, output: None });
    steps.push(step("scan", &["scan", VOLUME]));
    steps.push(step("scan --json", &["scan", VOLUME, "--json", "--hex"]));
    steps.push(step("repair -n", &["repair", "-n", VOLUME]));
    steps.push(step("repair -n --json", &["repair", "-n", "--json", VOLUME]));
    steps.push(step("salvage --export", &["salvage", VOLUME, "--export", "ndjson"]));
    steps.push(Step {
        output: Some("salvaged.img"),
        ..step("salvage --output", &["salvage", VOLUME, "--output", "salvaged.img"])
    });
    steps.push(Step { output: Some("meta.img"), ..step("metadump", &["metadump", VOLUME, "meta.img"]) });
    let grown = (space.geometry.volume_len + 2 * space.geometry.slot_size).to_string();
    steps.push(step("resize --dry-run", &["resize", "--dry-run", "--size", &grown, VOLUME]));
    steps.push(step("resize --min", &["resize", "--min", VOLUME]));
    steps.push(step("device list", &["device", "list", VOLUME]));
    steps.push(step("compaction show", &["compaction", "show", VOLUME]));
    steps
}

/// The names of a case's device files.
pub(super) fn device_names(volume: &Volume) -> Vec<String> {
    (0..volume.devices).map(|index| if index == 0 { VOLUME.to_string() } else { format!("vol-{index}.img") }).collect()
}

/// Writes a case's files into `dir` (made empty first): its devices, its undo file, and the
/// healthy neighbour.
pub(super) fn lay_out(dir: &Path, volume: &Volume, neighbour: &[u8]) -> std::io::Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    for (name, bytes) in device_names(volume).iter().zip(&volume.files) {
        std::fs::write(dir.join(name), bytes)?;
    }
    if let Some(index) = volume.undo_index() {
        std::fs::write(dir.join(UNDO_FILE), &volume.files[index])?;
    }
    std::fs::write(dir.join(NEIGHBOUR), neighbour)
}
