//! `lds bench`: db_bench's workloads and YCSB A to F on LDS, or on a peer when this binary
//! is built with the peer's feature, from the same generator; plus the device's limits.

use std::io::Write;
use std::path::{Path, PathBuf};

use lds_bench::full_compaction::{FullCompaction, Rewrite, ROUNDS};
use lds_bench::limits;
use lds_bench::measure::BlockStat;
use lds_bench::run::{self, BenchResult, Benchmark, Workload};
use lds_bench::store::{EngineSettings, LdsStore, Store};
use lds_bench::volume::{holds_bench_volume, refuse_replacing, BenchVolume};
use lds_bench::BenchError;
use serde_json::json;

use crate::units::parse_size;

/// Options of `lds bench`; also its command-line arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchOptions {
    /// For lds: a block device or image file (formatted by the benchmark; an image file is
    /// created with --size). For a peer: a directory (emptied for each fill).
    pub path: PathBuf,
    /// The engine: lds, or a peer built into this binary (rocksdb, leveldb, fjall, sled, redb).
    #[arg(long, default_value = "lds")]
    pub engine: String,
    /// Comma-separated benchmarks, or `all`: fillseq, fillrandom, overwrite, fillsync, fillhot
    /// (not in `all`: 99% of the puts to 1% of the keys),
    /// readrandom, readseq, seekrandom, deleterandom, ycsb-load, ycsb-a .. ycsb-f.
    #[arg(long, default_value = "fillseq,fillrandom,overwrite,readrandom,seekrandom,readseq,deleterandom")]
    pub benchmarks: String,
    /// Entries written by fillseq, fillrandom and overwrite.
    #[arg(long, default_value_t = 1_000_000)]
    pub num: u64,
    /// Operations of readrandom, seekrandom and deleterandom (default: --num).
    #[arg(long)]
    pub reads: Option<u64>,
    /// Synced puts of fillsync.
    #[arg(long, default_value_t = 10_000)]
    pub sync_ops: u64,
    /// Records of ycsb-load (default: --num).
    #[arg(long)]
    pub records: Option<u64>,
    /// Operations of each YCSB workload (default: --num).
    #[arg(long)]
    pub ycsb_ops: Option<u64>,
    /// Smallest value (the paper: uniform from 1 to 200 bytes).
    #[arg(long, default_value_t = 1)]
    pub value_min: usize,
    /// Largest value, up to 64 MiB (LDS keeps values above a quarter slot only with
    /// `--technique kv-separation`).
    #[arg(long, default_value_t = 200)]
    pub value_max: usize,
    /// Entries read after each seek in seekrandom.
    #[arg(long, default_value_t = 0)]
    pub seek_nexts: usize,
    /// Write buffer (memtable) size, for every engine.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub write_buffer: u64,
    /// Slot size of the LDS volume, and the SST target size of the peers.
    #[arg(long, default_value = "4MiB", value_parser = parse_size)]
    pub slot_size: u64,
    /// Block cache budget, for every engine.
    #[arg(long, default_value = "8MiB", value_parser = parse_size)]
    pub cache: u64,
    /// Level 1 size (default: ten slots), deeper levels ten times the one above.
    #[arg(long, value_parser = parse_size)]
    pub level1: Option<u64>,
    /// Size of the LDS image file to create, when it does not exist.
    #[arg(long, default_value = "4GiB", value_parser = parse_size)]
    pub size: u64,
    /// Block device (as in /sys/block, e.g. loop3) whose counters measure bytes written and
    /// flushes; by default the device holding PATH, else the engine's own counts.
    #[arg(long)]
    pub stat_device: Option<String>,
    /// Generator seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Measure the device's limits on PATH instead (overwrites its first bytes).
    #[arg(long)]
    pub device_limits: bool,
    /// For lds: the format version mkfs writes (1.7, its default: compact block entries,
    /// xxh3-128 chunk digests and the sync watermark; 1.3 fixed-size entry headers; 1.1 blake3
    /// digests; 1.0 no watermark).
    #[arg(long, default_value = "1.7", value_parser = ["1.0", "1.1", "1.2", "1.3", "1.7"])]
    pub format_version: String,
    /// Measure recovery instead: write an image with a full 64 MiB version log to PATH
    /// (overwriting it) and time the open, page cache dropped first when root.
    #[arg(long)]
    pub recovery: bool,
    /// Format PATH even if it holds another signature.
    #[arg(short, long)]
    pub force: bool,
    /// LDS only: set an engine option, NAME=VALUE (repeatable): compaction_journal=on|off,
    /// journal_min_input_slots=N, journal_every_outputs=N, level0_compaction_trigger=N,
    /// pinned_levels=N, tail_cache_bytes=N, search_threads=N, search_always_parallel=0|1 (after
    /// --technique).
    #[arg(long = "lds-option", value_name = "NAME=VALUE")]
    pub lds_options: Vec<String>,
    /// LDS only: switch engine techniques on, NAME[,NAME]: level-pinning, kv-separation (the
    /// volume gets feature value_chunks), triad-disk (feature chunk_sketches), triad-mem,
    /// triad-log (feature log_tables, a 64 MiB backup log), size-tiered, forest; see
    /// lds_engine::TECHNIQUES.
    #[arg(long, value_name = "NAME[,NAME]")]
    pub technique: Option<String>,
    /// Measure journaled compactions instead (SPEC.md §12): fill a new image file PATH with
    /// --num random entries, compact it to the last level, then rewrite that level without
    /// and with the journal (peak slots in use, time), and crash a journaled rewrite halfway
    /// (resume time against redoing it).
    #[arg(long)]
    pub full_compaction: bool,
    /// Internal: the crashing child of --full-compaction (aborts after N journal records).
    #[arg(long, hide = true, value_name = "N")]
    pub compaction_crash_child: Option<u64>,
    /// Print the results as JSON (lds-bench/1).
    #[arg(long)]
    pub json: bool,
}

/// Runs `lds bench`; returns the exit code (0 success, 1 failure, 16 usage error).
pub fn run(options: &BenchOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Some(records) = options.compaction_crash_child {
        lds_bench::full_compaction::crash_child(&options.path, records);
    }
    let result = if options.full_compaction {
        full_compaction(options, out)
    } else if options.device_limits {
        device_limits(options, out)
    } else if options.recovery {
        recovery(options, out)
    } else {
        bench(options, out)
    };
    match result {
        Ok(()) => 0,
        Err(error) => {
            let _ = writeln!(err, "lds bench: {error}");
            1
        }
    }
}

fn settings(options: &BenchOptions) -> EngineSettings {
    EngineSettings {
        write_buffer_bytes: options.write_buffer,
        cache_bytes: options.cache,
        file_bytes: options.slot_size,
        level1_bytes: options.level1.unwrap_or(10 * options.slot_size),
        bloom_bits: 10,
    }
}

/// The volume a fill formats.
fn volume(options: &BenchOptions) -> BenchVolume {
    BenchVolume {
        size: options.size,
        slot_size: options.slot_size,
        // "1.MINOR" (the parser admits only those).
        format_minor: options
            .format_version
            .strip_prefix("1.")
            .and_then(|minor| minor.parse().ok())
            .unwrap_or(lds_tools::mkfs::FORMAT_MINOR_DEFAULT),
        techniques: options.technique.clone(),
    }
}

fn bench(options: &BenchOptions, out: &mut dyn Write) -> Result<(), BenchError> {
    let benchmarks = Benchmark::parse_list(&options.benchmarks)?;
    if benchmarks.is_empty() {
        return Err(BenchError::NoBenchmarks);
    }
    // Values up to 64 MiB (LDS keeps those above a quarter slot only with kv-separation).
    if options.value_min > options.value_max || options.value_max > 64 << 20 {
        return Err(BenchError::ValueSizes { min: options.value_min, max: options.value_max });
    }
    let workload = Workload {
        num: options.num,
        reads: options.reads.unwrap_or(options.num),
        sync_ops: options.sync_ops,
        records: options.records.unwrap_or(options.num),
        ycsb_ops: options.ycsb_ops.unwrap_or(options.num),
        key_bytes: 16,
        value_min: options.value_min,
        value_max: options.value_max,
        seek_nexts: options.seek_nexts,
        scan_max: 100,
        seed: options.seed,
    };
    let settings = settings(options);
    let lds = options.engine == "lds";
    if !lds && options.path.exists() && !options.path.is_dir() {
        return Err(BenchError::PeerNeedsDirectory { path: options.path.clone() });
    }
    let mut engine_name = options.engine.clone();
    if lds {
        refuse_replacing(&options.path, options.force)?;
    }
    let force = options.force || !options.path.exists() || holds_bench_volume(&options.path);
    let mut open = |fresh: bool| -> Result<Box<dyn Store>, BenchError> {
        let store: Box<dyn Store> = if lds {
            if fresh {
                lds_bench::volume::format(&options.path, &volume(options), force)?;
            }
            let mut tuning: Vec<(String, String)> = options
                .lds_options
                .iter()
                .map(|option| {
                    option
                        .split_once('=')
                        .map(|(name, value)| (name.to_string(), value.to_string()))
                        .ok_or_else(|| BenchError::OptionSyntax { option: option.clone() })
                })
                .collect::<Result<_, _>>()?;
            if let Some(techniques) = &options.technique {
                tuning.insert(0, ("technique".to_string(), techniques.clone()));
            }
            Box::new(LdsStore::open(&options.path, &settings, options.slot_size, &tuning)?)
        } else {
            lds_bench::peers::open(&options.engine, &options.path, &settings, fresh, options.force)?
        };
        engine_name = store.name();
        Ok(store)
    };
    let stat = match &options.stat_device {
        Some(name) => Some(BlockStat::named(name)?),
        None => None,
    };
    let stat = stat.or_else(|| {
        let probe = if options.path.exists() { options.path.clone() } else { parent_of(&options.path) };
        BlockStat::for_path(&probe)
    });
    let results = run::run(&benchmarks, &workload, &mut open, stat.as_ref())?;
    Ok(report(out, options, &engine_name, &workload, &settings, &results)?)
}

fn parent_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

fn report(
    out: &mut dyn Write,
    options: &BenchOptions,
    engine: &str,
    workload: &Workload,
    settings: &EngineSettings,
    results: &[BenchResult],
) -> std::io::Result<()> {
    if options.json {
        let document = serde_json::json!({
            "schema": "lds-bench/1",
            "engine": options.engine,
            "engine_version": engine,
            "path": options.path.display().to_string(),
            "workload": workload,
            "settings": settings,
            "techniques": options.technique.clone().unwrap_or_default(),
            "results": results,
        });
        return writeln!(out, "{}", serde_json::to_string_pretty(&document).unwrap_or_default());
    }
    writeln!(
        out,
        "{engine}: keys 16 bytes, values {} to {} bytes, write buffer {} B, cache {} B, level 1 {} B",
        workload.value_min,
        workload.value_max,
        settings.write_buffer_bytes,
        settings.cache_bytes,
        settings.level1_bytes
    )?;
    if let Some(techniques) = &options.technique {
        writeln!(out, "techniques: {techniques}")?;
    }
    run::table(results, out)?;
    if let Some(result) = results.iter().find(|result| result.chunk_write_mb_per_sec.is_some()) {
        writeln!(
            out,
            "chunk writes (write plus flush of slot-sized chunks) during {}: {:.0} MB/s",
            result.benchmark,
            result.chunk_write_mb_per_sec.unwrap_or_default()
        )?;
    }
    Ok(())
}

fn device_limits(options: &BenchOptions, out: &mut dyn Write) -> Result<(), BenchError> {
    let sequential = (256u64 << 20).min(options.size / 2).max(options.slot_size);
    // The measurement writes over the first bytes of PATH.
    refuse_replacing(&options.path, options.force)?;
    if !options.path.exists() {
        let file = std::fs::File::create(&options.path).map_err(BenchError::file(&options.path, "cannot create"))?;
        file.set_len(sequential + options.slot_size).map_err(BenchError::file(&options.path, "cannot size"))?;
    }
    let limits = limits::measure(&options.path, 0, sequential, options.slot_size, 4096, 1000)?;
    if options.json {
        let document = serde_json::json!({ "schema": "lds-bench-limits/1", "limits": limits });
        return Ok(writeln!(out, "{}", serde_json::to_string_pretty(&document).unwrap_or_default())?);
    }
    Ok(writeln!(
        out,
        "{}: sequential O_DIRECT writes of {} bytes: {:.0} MB/s\n\
         one {}-byte direct write plus flush: overwrite p50 {:.0} us, p99 {:.0} us; append p50 {:.0} us, p99 {:.0} us",
        limits.path,
        limits.write_bytes,
        limits.sequential_mb_per_sec,
        limits.sector_bytes,
        limits.overwrite_flush_p50_us,
        limits.overwrite_flush_p99_us,
        limits.append_flush_p50_us,
        limits.append_flush_p99_us
    )?)
}

fn recovery(options: &BenchOptions, out: &mut dyn Write) -> Result<(), BenchError> {
    refuse_replacing(&options.path, options.force)?;
    let result = lds_bench::recovery::measure(&options.path)?;
    if options.json {
        let document = serde_json::json!({ "schema": "lds-bench-recovery/1", "recovery": result });
        return Ok(writeln!(out, "{}", serde_json::to_string_pretty(&document).unwrap_or_default())?);
    }
    Ok(writeln!(
        out,
        "{}: recovered a version log of {} bytes ({} live, {} delta versions, {} chunks) in {:.3} s ({})",
        result.path,
        result.version_log_bytes,
        result.live_bytes,
        result.objects,
        result.chunks,
        result.open_seconds,
        if result.cold { "page cache dropped" } else { "page cache warm" }
    )?)
}

/// `lds bench --full-compaction` (`lds_bench::full_compaction`) on a new image file, reported
/// as text or JSON (lds-bench-compaction/1).
fn full_compaction(options: &BenchOptions, out: &mut dyn Write) -> Result<(), BenchError> {
    let format = |path: &Path| lds_bench::volume::format(path, &volume(options), false);
    // The crashing child is this binary again, as `lds bench --compaction-crash-child`.
    let crash_child = |scratch: &Path, records: u64| {
        std::process::Command::new(std::env::current_exe()?)
            .arg("bench")
            .arg("--compaction-crash-child")
            .arg(records.to_string())
            .arg(scratch)
            .status()
    };
    let (num, value_len) = (options.num, options.value_max);
    let measured = lds_bench::full_compaction::run(&options.path, num, value_len, &format, &crash_child)?;
    report_full_compaction(options, &measured, out);
    Ok(())
}

fn report_full_compaction(options: &BenchOptions, measured: &FullCompaction, out: &mut dyn Write) {
    let FullCompaction { plain, journaled, crash_at, crashed, persisted, .. } = *measured;
    let (num, value_len) = (options.num, options.value_max);
    let slot_mib = options.slot_size as f64 / f64::from(1 << 20);
    if options.json {
        let rewrite_json = |rewrite: &Rewrite| {
            json!({
                "seconds": rewrite.seconds,
                "live_slots": rewrite.live_slots,
                "peak_slots": rewrite.peak_slots,
                "extra_slots": rewrite.peak_slots - rewrite.live_slots,
                "journal_records": rewrite.journal_records,
                "outputs": rewrite.outputs,
            })
        };
        let document = json!({
            "schema": "lds-bench-compaction/1",
            "path": options.path.display().to_string(),
            "size": options.size,
            "slot_size": options.slot_size,
            "entries": num,
            "live_entries": measured.live_entries,
            "value_bytes": value_len,
            "slots_after_fill": measured.slots_after_fill,
            "without_journal": rewrite_json(&plain),
            "with_journal": rewrite_json(&journaled),
            "crash": {
                "after_records": crash_at,
                "process_aborted": crashed,
                "outputs_persisted": persisted,
                "resumed_compaction_id": measured.resumed,
                "resume_seconds": measured.resume_seconds,
                "redo_seconds": plain.seconds,
                "content_verified": true,
            },
        });
        let _ = writeln!(out, "{}", serde_json::to_string_pretty(&document).unwrap_or_default());
        return;
    }
    let _ = writeln!(
        out,
        "rewrite of the last level: {} live slots of {slot_mib} MiB ({} entries of {value_len} bytes; median of {ROUNDS} rounds)",
        plain.live_slots, num
    );
    for (name, rewrite) in [("without journal", plain), ("with journal", journaled)] {
        let _ = writeln!(
            out,
            "  {name:16} {:6.2} s, peak {} slots in use ({} beyond the live ones), {} outputs, {} journal records",
            rewrite.seconds,
            rewrite.peak_slots,
            rewrite.peak_slots - rewrite.live_slots,
            rewrite.outputs,
            rewrite.journal_records
        );
    }
    let _ = writeln!(
        out,
        "  crash after {crash_at} records ({}): {persisted} outputs persisted; open and resume {:.2} s against redoing the merge {:.2} s; all {} entries read back",
        if crashed { "process aborted" } else { "the merge ended first" },
        measured.resume_seconds,
        plain.seconds,
        measured.live_entries
    );
}
