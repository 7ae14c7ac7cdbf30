//! Guards oracles I6, I9 and I10 (docs/reliability.md, docs/safety.md) on hostile volumes: a
//! bounded set of the cases `lds_fixtures::hostile` crafts from SPEC.md's field tables (one or
//! two per kind of structure, checksums recomputed), each run through every command of the
//! `lds` binary as a user would, with a timeout and an address-space limit, a healthy volume
//! beside it. No command may panic, hang, die of the limit or write what it was not named;
//! a repair that says it corrected the volume must leave it clean and keep every key salvage
//! reads intact, and its undo file must put the crafted bytes back. The full set is
//! `lds-hostile run` (README.md, Repair).

use std::path::PathBuf;
use std::time::Duration;

use lds_fixtures::hostile::runner;

/// One or two cases per structure family and base, chosen among the cases with no finding:
/// a count past the bytes, slots and offsets past the end or onto another structure, a wrap
/// object pointing at itself, a device listed twice, an undo record for another sector.
const CASES: &[&str] = &[
    "levels:label.geometry.num_slots=past_end",
    "levels:label.devices.reserved=1",
    "levels:vlog.bv.num_chunks=max",
    "levels:vlog.dv.added[0].sub_chunk[0].slot=overlap",
    "levels:blog.wb.entry[0].len_key=past_end",
    "levels:chunk[live].footer.ofs_index=overlap",
    "levels:chunk[live].index[0].ofs_block=overlap",
    "wrapped:vlog.wol.ofs_first_live=cycle",
    "wrapped:blog.wol.ofs_first_live=past_end",
    "wrapped:blog.wb.num_entries=max",
    // Found by the full set: a WOL above the version log's SN ended the chain after the wrap.
    "wrapped:blog.wol.header.sn=max",
    "wrapped:chunk[live].block[0].entry[0].seq_kind=cycle",
    "values:value_chunk[0].footer.len_body=past_end",
    "values:vlog.bv.value_chunk[0].slot=overlap",
    "values:chunk[live].block[0].entry[0].pointer.extent[0].len=max",
    // Found by the full set: a delta version's last_sequence of 2^56 hid every batch.
    "values:vlog.dv.last_sequence=past_end",
    // Found by the full set: a backup start lsn above the batch there replayed nothing.
    "values:vlog.dv.lsn_backup_start=past_end",
    "sketches:chunk[live].sketch.precision=past_end",
    "log_chunks:chunk[live].block[0].entry[0].log_ref.ofs_object=past_end",
    "log_chunks:vlog.dv.added[0].lsn_log_start=cycle",
    // Found by the full set: a backup start moved to offset 0 replayed nothing.
    "log_chunks:vlog.dv.ofs_backup_start=0",
    // Found by the full set (issue 39): a log reference turned into a delete or a put of
    // sequence 0 (repair kept its 24 bytes as the value), and a batch whose first sequence
    // repeats the one before it (repair dropped key-14 without a range naming it).
    "log_chunks:chunk[live].block[0].entry[0].seq_kind=0",
    "log_chunks:chunk[live].block[0].entry[0].seq_kind=1",
    "wrapped:blog.wb.first_sequence=cycle",
    "two_devices:label.devices.entry[1].first_slot=overlap",
    "two_devices:label.devices.entry[1].device_uuid=cycle",
    "two_devices:device1.label.devices.num_devices=past_end",
    "journal:vlog.cj.input[0]=cycle",
    "journal:vlog.cj.cleaned[0]=overlap",
    "undo:batch[0].record[0].offset=overlap",
    "undo:batch[last].number=cycle",
    "undo:state.len=past_end",
];

#[test]
fn every_command_survives_a_bounded_set_of_hostile_volumes() {
    let mut options = runner::Options::new(PathBuf::from(env!("CARGO_BIN_EXE_lds")));
    // A debug build of lds is several times slower than the release build the full set uses.
    options.timeout = Duration::from_secs(60);
    let names: Vec<String> = CASES.iter().map(|name| (*name).to_string()).collect();
    let summary = runner::run_all(&names, &options, 1, &|_, _| {}).unwrap_or_else(|error| panic!("{error}"));
    assert!(summary.errors.is_empty(), "cases not built: {:#?}", summary.errors);
    let findings: Vec<String> = summary.findings.iter().map(ToString::to_string).collect();
    assert!(findings.is_empty(), "{} findings:\n{}", findings.len(), findings.join("\n"));
    assert_eq!(summary.cases, CASES.len());
    // Every read command, repair -y with its checks and undo ran on each volume case.
    assert!(summary.runs >= 600, "only {} runs", summary.runs);
    assert!(summary.commands.len() >= 30, "only {} commands: {:?}", summary.commands.len(), summary.commands);
    assert!(summary.repairs_checked >= 15, "only {} repairs checked against salvage", summary.repairs_checked);
}

#[test]
fn the_runner_reports_a_command_that_writes_a_read_only_volume() {
    // The oracle itself (docs/reliability.md L6): a "lds" that writes to the volume it was
    // given is caught, named with the case and the command.
    let dir = std::env::temp_dir().join(format!("lds-hostile-oracle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{error}"));
    let fake = dir.join("lds-writes");
    std::fs::write(&fake, "#!/bin/sh\nprintf x >> vol.img\nexit 0\n").unwrap_or_else(|error| panic!("{error}"));
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&fake, mode).unwrap_or_else(|error| panic!("{error}"));
    let mut options = runner::Options::new(fake);
    options.work = dir.clone();
    options.only_commands = vec!["fsck --deep".into(), "device list".into()];
    let name = "journal:vlog.cj.input[0]=cycle".to_string();
    let summary =
        runner::run_all(std::slice::from_ref(&name), &options, 1, &|_, _| {}).unwrap_or_else(|error| panic!("{error}"));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(summary.errors.is_empty(), "{:?}", summary.errors);
    assert_eq!(summary.runs, 2, "{:?}", summary.commands);
    assert_eq!(summary.findings.len(), 2, "{:#?}", summary.findings);
    for finding in &summary.findings {
        assert_eq!(finding.case, name);
        assert!(finding.what.contains("a read command wrote: changed vol.img"), "{finding}");
    }
}

#[test]
fn the_runner_reports_a_panic_and_a_hang() {
    let dir = std::env::temp_dir().join(format!("lds-hostile-crash-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{error}"));
    let fake = dir.join("lds-crashes");
    let script = "#!/bin/sh\ncase \"$1\" in\n  fsck) echo \"thread 'main' panicked at src/x.rs:1:1\" >&2; exit 101;;\n  device) sleep 30;;\nesac\nexit 0\n";
    std::fs::write(&fake, script).unwrap_or_else(|error| panic!("{error}"));
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(&fake, mode).unwrap_or_else(|error| panic!("{error}"));
    let mut options = runner::Options::new(fake);
    options.work = dir.clone();
    options.timeout = Duration::from_secs(1);
    options.only_commands = vec!["fsck --deep".into(), "device list".into()];
    let name = "journal:vlog.cj.input[0]=cycle".to_string();
    let summary =
        runner::run_all(std::slice::from_ref(&name), &options, 1, &|_, _| {}).unwrap_or_else(|error| panic!("{error}"));
    let _ = std::fs::remove_dir_all(&dir);
    let whats: Vec<&str> = summary.findings.iter().map(|finding| finding.what.as_str()).collect();
    assert_eq!(whats.len(), 2, "{whats:#?}");
    assert!(whats.iter().any(|what| what.starts_with("panic: thread 'main' panicked")), "{whats:#?}");
    assert!(whats.iter().any(|what| what.starts_with("hang: killed after 1 s")), "{whats:#?}");
}
