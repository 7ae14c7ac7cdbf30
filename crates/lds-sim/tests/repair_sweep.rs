//! The repair sweep (issue: offline repair): random damage in the metadata and data of an
//! engine-written volume; after `lds repair -y` fsck is clean, every key whose chunk and
//! batch were undamaged reads its value, and repair keeps what salvage of the damaged volume
//! reads or names it dropped (docs/reliability.md I10, both forms).

use lds_sim::media::build_volume;
use lds_sim::repair::sweep;

#[test]
fn after_repair_fsck_is_clean_and_undamaged_keys_read_their_values() {
    let volume = build_volume();
    assert!(volume.is_ok(), "{:?}", volume.as_ref().err());
    let Ok(volume) = volume else { return };
    let cases = std::env::var("LDS_REPAIR_SWEEP_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(200);
    let counts = sweep(&volume, 11, cases);
    assert!(counts.is_ok(), "{:?}", counts.as_ref().err());
    let Ok(counts) = counts else { return };
    eprintln!(
        "{} cases, {} faults in metadata, {} in chunk blocks: {} with nothing to fix, {} repaired, {} refused with nothing written; {} keys checked (undamaged chunk and batch), {} exposed of which {} still read their value",
        counts.cases,
        counts.faults.0,
        counts.faults.1,
        counts.nothing_to_fix,
        counts.repaired,
        counts.refused.len(),
        counts.keys_checked,
        counts.keys_exposed,
        counts.exposed_kept
    );
    eprintln!(
        "I10: {} salvaged entries held to; {} cases not compared (another layout)",
        counts.salvage_entries_held,
        counts.salvage_not_compared.len()
    );
    for not_compared in counts.salvage_not_compared.iter().take(3) {
        eprintln!("not compared: {not_compared}");
    }
    for failure in counts.failures.iter().take(40) {
        eprintln!("failure: {failure}");
    }
    for refused in counts.refused.iter().take(3) {
        eprintln!("refused: {refused}");
    }
    assert!(counts.failures.is_empty(), "{} failures, first: {:?}", counts.failures.len(), counts.failures.first());
    assert!(counts.repaired > cases / 2, "{counts:?}");
    assert!(counts.refused.len() as u64 <= cases / 100, "{counts:?}");
    assert!(counts.keys_checked > counts.keys_exposed, "{counts:?}");
    assert!(counts.salvage_entries_held > counts.keys_checked, "{counts:?}");
}
