//! Guards the hostile-volume generator (`lds_fixtures::hostile`, docs/reliability.md F9):
//! its seals recompute exactly what the real writers computed, its cases are named once and
//! built the same every time, each changes its field to the variant's value, and the format
//! crate's own readers get past the recomputed checksums and digests to the hostile value.

use lds_fixtures::hostile::{self, seal, Space, Variant, Volume, BASES};

fn base_volume(name: &str) -> (&'static hostile::Base, Volume) {
    let base = hostile::base(name).unwrap_or_else(|| panic!("no base {name}"));
    (base, hostile::load_base(base).unwrap_or_else(|error| panic!("{name}: {error}")))
}

#[test]
fn resealing_an_unchanged_base_changes_no_byte() {
    for base in BASES {
        let healthy = hostile::load_base(base).unwrap_or_else(|error| panic!("{}: {error}", base.name));
        let space = Space::of(&healthy).unwrap_or_else(|error| panic!("{}: {error}", base.name));
        let fields = hostile::fields(base, &healthy).unwrap_or_else(|error| panic!("{}: {error}", base.name));
        assert!(fields.len() > 20, "{}: only {} fields", base.name, fields.len());
        let mut resealed = healthy.clone();
        seal::reseal_all(&mut resealed, &fields, &space).unwrap_or_else(|error| panic!("{}: {error}", base.name));
        for (index, (before, after)) in healthy.files.iter().zip(&resealed.files).enumerate() {
            let first = before.iter().zip(after).position(|(a, b)| a != b);
            assert!(first.is_none(), "{}: file {index} changed at byte {first:?} by resealing", base.name);
        }
    }
}

#[test]
fn every_group_of_fields_of_spec_md_is_reached() {
    let cases = hostile::cases().unwrap_or_else(|error| panic!("{error}"));
    let names: Vec<&str> = cases.iter().map(|case| case.name.as_str()).collect();
    for expected in [
        "levels:label.geometry.num_slots=max",
        "levels:label.primary.generation=max",
        "levels:vlog.bv.chunk[0].sub_chunk[0].slot=past_end",
        "levels:vlog.dv.deleted[0].chunk_id=overlap",
        "levels:vlog.dv.added[0].sub_chunks=cycle",
        "levels:vlog.bv.chunks=cycle",
        "levels:blog.wb.entry[0].len_value=past_end",
        "levels:chunk[live].footer.ofs_index=overlap",
        "levels:chunk[live].index[0].ofs_block=overlap",
        "levels:chunk[live].filter.num_bits=past_end",
        "levels:chunk[live].block[0].num_entries=unknown",
        "wrapped:vlog.wol.ofs_first_live=cycle",
        "wrapped:blog.wor.header.lsn=cycle",
        "wrapped:chunk[live].block[0].entry[0].seq_kind=cycle",
        "values:value_chunk[0].footer.len_body=past_end",
        "values:vlog.bv.value_chunk[0].slot=overlap",
        "values:chunk[live].block[0].entry[0].pointer.extent[0].slot=overlap",
        "sketches:chunk[live].sketch.precision=past_end",
        "log_chunks:chunk[live].block[0].entry[0].log_ref.ofs_object=past_end",
        "log_chunks:vlog.dv.added[0].lsn_log_start=cycle",
        "two_devices:label.devices.entry[1].first_slot=overlap",
        "two_devices:label.devices.entry[1].device_uuid=cycle",
        "two_devices:device1.label.devices.num_devices=past_end",
        "journal:vlog.cj.input[0]=cycle",
        "journal:vlog.cj.cleaned[0]=overlap",
        "undo:batch[0].record[0].offset=overlap",
        "undo:batch[last].number=cycle",
        "undo:state.len=past_end",
    ] {
        assert!(names.contains(&expected), "no case {expected}");
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len(), "a case name is listed twice");
    assert!(names.len() > 1500, "{} cases", names.len());
}

#[test]
fn a_case_writes_its_value_and_is_built_the_same_every_time() {
    let cases = hostile::cases().unwrap_or_else(|error| panic!("{error}"));
    for case in cases.iter().step_by(37) {
        let first = hostile::craft(&case.name).unwrap_or_else(|error| panic!("{error}"));
        let second = hostile::craft(&case.name).unwrap_or_else(|error| panic!("{error}"));
        assert!(first.volume == second.volume, "{}: two builds differ", case.name);
        let field = &first.field;
        assert_eq!(
            &first.volume.files[field.file][field.at..field.at + field.width],
            &first.value[..],
            "{}",
            case.name
        );
        let (_, healthy) = base_volume(case.base);
        assert_ne!(&healthy.files[field.file][field.at..field.at + field.width], &first.value[..], "{}", case.name);
        if case.variant == Variant::Zero {
            assert!(first.value.iter().all(|&byte| byte == 0), "{}", case.name);
        }
    }
}

#[test]
fn the_format_crate_reads_past_the_recomputed_checksums() {
    // A label copy: both copies decode with the hostile generation.
    let crafted = hostile::craft("levels:label.generation=max").unwrap_or_else(|error| panic!("{error}"));
    let bytes = &crafted.volume.files[0];
    let label = lds_format::label::Label::decode(&bytes[..512], 0).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(label.generation, u64::MAX);
    let backup = label.geometry.ofs_backup_label() as usize;
    let copy = lds_format::label::Label::decode(&bytes[backup..backup + 512], backup as u64)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(copy.generation, u64::MAX);

    // A delta version: header and payload checksums hold, and it decodes with the new id.
    let crafted = hostile::craft("levels:vlog.dv.compaction_id=1").unwrap_or_else(|error| panic!("{error}"));
    let space = Space::of(&crafted.volume).unwrap_or_else(|error| panic!("{error}"));
    let context = lds_format::log::area_context(&space.geometry, lds_format::geometry::LogKind::Version, 0);
    let area = &crafted.volume.files[0][context.ofs_area as usize..(context.ofs_area + context.len_area) as usize];
    let Some(hostile::Seal::Object { at, .. }) = crafted.field.seals.first().cloned() else { panic!("no object seal") };
    let offset = at as u64 - context.ofs_area;
    let raw = lds_format::log::read_object(area, offset, &context).unwrap_or_else(|error| panic!("{error}"));
    let delta = lds_format::version::payload::DeltaVersion::decode(raw.payload, at as u64 + 64)
        .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(delta.compaction_id, 1);

    // A chunk footer: the sub-chunk opens and its digest holds, and the version's chunk
    // metadata repeats the new digest.
    for name in [
        "levels:chunk[live].footer.level=",
        "two_devices:chunk[live].footer.level=",
        "values:chunk[live].block[0].entry[0].pointer.extent[0].offset=",
    ] {
        // 1, or 0 where the field holds 1.
        let crafted = hostile::craft(&format!("{name}1"))
            .or_else(|_| hostile::craft(&format!("{name}0")))
            .unwrap_or_else(|error| panic!("{error}"));
        let space = Space::of(&crafted.volume).unwrap_or_else(|error| panic!("{error}"));
        let Some(hostile::Seal::Chunk { slot }) = crafted.field.seals.last().cloned() else {
            panic!("{name}: no chunk seal")
        };
        let (file, base) = space.slot_at(slot).unwrap_or_else(|| panic!("{name}: slot {slot}"));
        let slot_bytes = &crafted.volume.files[file][base..base + space.geometry.slot_size as usize];
        let view = lds_format::chunk::view::SubChunkView::open(slot_bytes, base as u64)
            .unwrap_or_else(|error| panic!("{name}: {error}"));
        view.verify_digest(base as u64).unwrap_or_else(|error| panic!("{name}: {error}"));
        view.entries(base as u64).unwrap_or_else(|error| panic!("{name}: {error}"));
        let g = &space.geometry;
        let area = |kind| {
            let (ofs, len) = g.log_area(kind, 0);
            &crafted.volume.files[0][ofs as usize..(ofs + len) as usize]
        };
        let recovered = lds_format::algorithms::instance::recover_instance(
            g,
            0,
            area(lds_format::geometry::LogKind::Version),
            area(lds_format::geometry::LogKind::Backup),
        )
        .unwrap_or_else(|error| panic!("{name}: {error}"));
        let meta = recovered
            .version_log
            .version
            .chunks
            .get(&slot)
            .unwrap_or_else(|| panic!("{name}: chunk {slot} is not live"));
        assert_eq!(
            meta.sub_chunks[0].digest, view.footer.digest,
            "{name}: the version's metadata keeps the old digest"
        );
    }

    // A value chunk's footer: its digest holds over its body.
    let crafted = hostile::craft("values:value_chunk[0].footer.instance=1").unwrap_or_else(|error| panic!("{error}"));
    let space = Space::of(&crafted.volume).unwrap_or_else(|error| panic!("{error}"));
    let Some(hostile::Seal::ValueChunk { slot }) = crafted.field.seals.first().cloned() else {
        panic!("no value chunk seal")
    };
    let (file, base) = space.slot_at(slot).unwrap_or_else(|| panic!("slot {slot}"));
    let slot_size = space.geometry.slot_size;
    let footer_at = base + slot_size as usize - 160;
    let footer = lds_format::value::ValueFooter::decode(
        &crafted.volume.files[file][footer_at..footer_at + 160],
        footer_at as u64,
        slot_size,
    )
    .unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(footer.instance, 1);
    let body = &crafted.volume.files[file][base..base + footer.len_body as usize];
    footer.verify_digest(body, base as u64).unwrap_or_else(|error| panic!("{error}"));

    // An undo file: it verifies whole with the new creation time.
    let crafted = hostile::craft("undo:header.created=0").unwrap_or_else(|error| panic!("{error}"));
    let index = crafted.volume.undo_index().unwrap_or_else(|| panic!("no undo file"));
    lds_volume::undo::UndoFile::parse(&crafted.volume.files[index], std::path::Path::new("crafted"))
        .unwrap_or_else(|error| panic!("{error}"));
    let (_, healthy) = base_volume("undo");
    let index = healthy.undo_index().unwrap_or_else(|| panic!("no undo file"));
    lds_volume::undo::UndoFile::parse(&healthy.files[index], std::path::Path::new("healthy"))
        .unwrap_or_else(|error| panic!("{error}"));
}

#[test]
fn a_case_name_that_names_nothing_is_refused_with_the_reason() {
    for (name, says) in [
        ("nobase:label.magic=0", "no base nobase"),
        ("levels:label.magic=sideways", "no variant sideways"),
        ("levels:label.no_such_field=0", "has no field label.no_such_field"),
        ("levels:label.magic", "BASE:FIELD=VARIANT"),
        ("levels:label.magic=max", "has no variant max"),
    ] {
        let error = hostile::craft(name).map(|_| ()).expect_err(name);
        assert!(error.0.contains(says), "{name}: {error}");
    }
}

#[test]
fn the_spawner_reports_exit_codes_signals_timeouts_and_memory() {
    // hostile::runner::serve_spawns, as lds-hostile's spawner process runs it: one request a
    // line, one answer a line.
    let dir = std::env::temp_dir().join(format!("lds-hostile-spawner-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|error| panic!("{error}"));
    let request = |script: &str, timeout_ms: u64| {
        serde_json::json!({
            "program": "/bin/sh", "dir": dir, "stdout": dir.join("out"), "stderr": dir.join("err"),
            "args": ["-c", script], "timeout_ms": timeout_ms, "memory_limit": 1u64 << 30,
        })
        .to_string()
    };
    let input = [
        request("echo hello; exit 3", 10_000),
        request("kill -SEGV $$", 10_000),
        request("sleep 20", 300),
        "not json".to_string(),
    ]
    .join("\n");
    let mut output = Vec::new();
    hostile::runner::serve_spawns(std::io::Cursor::new(input), &mut output).unwrap_or_else(|error| panic!("{error}"));
    let answers: Vec<serde_json::Value> = String::from_utf8_lossy(&output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{line}: {error}")))
        .collect();
    let stdout = std::fs::read_to_string(dir.join("out")).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(answers.len(), 4, "{answers:?}");
    assert_eq!(answers[0]["code"], 3, "{}", answers[0]);
    assert!(answers[0]["max_rss_kib"].as_u64().is_some_and(|kib| kib > 0), "{}", answers[0]);
    assert_eq!(answers[1]["signal"], 11, "{}", answers[1]);
    assert_eq!(answers[2]["timed_out"], true, "{}", answers[2]);
    assert!(answers[2]["elapsed_us"].as_u64().is_some_and(|us| us < 10_000_000), "{}", answers[2]);
    assert!(answers[3]["error"].is_string(), "{}", answers[3]);
    // The last request that ran wrote nothing, the first one's output was replaced.
    assert_eq!(stdout, "");
}
