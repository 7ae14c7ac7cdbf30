//! Runs benchmarks over a `Store`: db_bench's workloads and YCSB A to F, with the same
//! generator for every engine, and measures each.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use crate::error::BenchError;
use crate::gen::{hashed_key, key, Rng, Values, Zipfian};
use crate::hist::Histogram;
use crate::measure::{cpu_seconds, peak_memory, AnonPeak, BlockCounters, BlockStat};
use crate::store::Store;

/// A benchmark by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Benchmark {
    /// Puts keys in order into a fresh store.
    FillSeq,
    /// Puts keys in random order into a fresh store.
    FillRandom,
    /// Puts random existing keys again.
    Overwrite,
    /// Synced puts in random order into a fresh store.
    FillSync,
    /// Puts into a fresh store, 99% of them to a hot set of 1% of the keys (TRIAD's skewed
    /// workloads): most puts overwrite a hot key still in the memtable or level 0.
    FillHot,
    /// Gets random keys.
    ReadRandom,
    /// Reads the whole store in key order.
    ReadSeq,
    /// Seeks to random keys and reads from there.
    SeekRandom,
    /// Deletes random keys.
    DeleteRandom,
    /// YCSB load: inserts the records into a fresh store.
    YcsbLoad,
    /// YCSB A to F.
    Ycsb(char),
}

impl Benchmark {
    /// Every benchmark name, in the order `all` runs them.
    pub const ALL: &'static str =
        "fillseq,fillrandom,overwrite,readrandom,seekrandom,readseq,deleterandom,fillsync,ycsb-load,ycsb-a,ycsb-b,ycsb-c,ycsb-f,ycsb-d,ycsb-e";

    /// Parses one name.
    pub fn parse(name: &str) -> Result<Self, BenchError> {
        Ok(match name {
            "fillseq" => Self::FillSeq,
            "fillrandom" => Self::FillRandom,
            "overwrite" => Self::Overwrite,
            "fillsync" => Self::FillSync,
            "fillhot" => Self::FillHot,
            "readrandom" => Self::ReadRandom,
            "readseq" => Self::ReadSeq,
            "seekrandom" => Self::SeekRandom,
            "deleterandom" => Self::DeleteRandom,
            "ycsb-load" => Self::YcsbLoad,
            "ycsb-a" | "ycsb-b" | "ycsb-c" | "ycsb-d" | "ycsb-e" | "ycsb-f" => {
                Self::Ycsb(name.chars().last().unwrap_or('a'))
            }
            other => return Err(BenchError::UnknownBenchmark { name: other.to_string(), known: Self::ALL }),
        })
    }

    /// Parses a comma-separated list (`all` for every one).
    pub fn parse_list(text: &str) -> Result<Vec<Self>, BenchError> {
        let text = if text == "all" { Self::ALL } else { text };
        text.split(',').map(str::trim).filter(|name| !name.is_empty()).map(Self::parse).collect()
    }

    /// The name.
    pub fn name(&self) -> String {
        match self {
            Self::FillSeq => "fillseq".into(),
            Self::FillRandom => "fillrandom".into(),
            Self::Overwrite => "overwrite".into(),
            Self::FillSync => "fillsync".into(),
            Self::FillHot => "fillhot".into(),
            Self::ReadRandom => "readrandom".into(),
            Self::ReadSeq => "readseq".into(),
            Self::SeekRandom => "seekrandom".into(),
            Self::DeleteRandom => "deleterandom".into(),
            Self::YcsbLoad => "ycsb-load".into(),
            Self::Ycsb(letter) => format!("ycsb-{letter}"),
        }
    }

    /// Whether it starts from an empty store (db_bench's fresh_db).
    pub fn wants_fresh(&self) -> bool {
        matches!(self, Self::FillSeq | Self::FillRandom | Self::FillSync | Self::FillHot | Self::YcsbLoad)
    }
}

/// Sizes of a run.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Workload {
    /// Entries written by the fills and overwrite (db_bench --num).
    pub num: u64,
    /// Operations of readrandom, seekrandom and deleterandom (db_bench --reads).
    pub reads: u64,
    /// Synced puts of fillsync.
    pub sync_ops: u64,
    /// Records of the YCSB load.
    pub records: u64,
    /// Operations of each YCSB workload.
    pub ycsb_ops: u64,
    /// Key bytes (fixed: 16).
    pub key_bytes: usize,
    /// Smallest value.
    pub value_min: usize,
    /// Largest value.
    pub value_max: usize,
    /// Entries read after each seek in seekrandom.
    pub seek_nexts: usize,
    /// Longest YCSB-E scan.
    pub scan_max: usize,
    /// Generator seed.
    pub seed: u64,
}

/// What one benchmark measured.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchResult {
    /// Benchmark name.
    pub benchmark: String,
    /// Operations done.
    pub ops: u64,
    /// Wall seconds.
    pub seconds: f64,
    /// Operations per second.
    pub ops_per_sec: f64,
    /// Key and value bytes moved per second, in MB (10^6).
    pub mb_per_sec: f64,
    /// Latency quantiles in microseconds.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// CPU seconds (every thread, user and system) per million operations.
    pub cpu_s_per_mop: f64,
    /// Key and value bytes written by the benchmark.
    pub user_bytes_written: u64,
    /// Bytes the block device saw written (or the engine's own count when no device
    /// statistics exist).
    pub device_bytes_written: Option<u64>,
    /// device_bytes_written over user_bytes_written.
    pub write_amp: Option<f64>,
    /// Flush requests the device saw (or the engine issued) per operation.
    pub flushes_per_op: Option<f64>,
    /// Where the device figures come from: "block-device NAME" or "engine".
    pub device_source: String,
    /// Reads that found their key.
    pub found: u64,
    /// Peak resident memory of the process during the benchmark (VmHWM: anonymous memory and
    /// the file pages it maps).
    pub peak_memory_bytes: Option<u64>,
    /// Peak of its anonymous part (RssAnon, sampled every 10 ms): without the page cache pages
    /// a store reads through a mapping (LDS's device, LevelDB's tables).
    pub peak_anon_bytes: Option<u64>,
    /// Bytes the store occupies after the benchmark (`Store::space_bytes`).
    pub space_bytes: Option<u64>,
    /// LDS only: throughput of slot-sized chunk writes (write plus flush), MB/s.
    pub chunk_write_mb_per_sec: Option<f64>,
    /// LDS only: its background work during the benchmark (`Db::stats`), by name.
    pub engine: std::collections::BTreeMap<String, u64>,
    /// Seconds waited after a benchmark that wrote until the device was quiet (`settle`):
    /// the engine's background work went on that long.
    pub settle_seconds: f64,
}

/// Opens a store: fresh (emptied, or formatted) or as it is.
pub type Opener<'a> = dyn FnMut(bool) -> Result<Box<dyn Store>, BenchError> + 'a;

struct Meter {
    histogram: Histogram,
    ops: u64,
    bytes: u64,
    written: u64,
    found: u64,
    bar: indicatif::ProgressBar,
}

impl Meter {
    fn new(name: String, total: u64, progress: bool) -> Self {
        let bar = if progress { indicatif::ProgressBar::new(total) } else { indicatif::ProgressBar::hidden() };
        bar.set_style(
            indicatif::ProgressStyle::with_template("{prefix:<12} [{bar:20}] {percent:>3}% {per_sec:>14}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_prefix(name);
        Self { histogram: Histogram::default(), ops: 0, bytes: 0, written: 0, found: 0, bar }
    }

    fn done(&mut self, started: Instant) {
        self.histogram.record(started.elapsed().as_nanos() as u64);
        self.ops += 1;
        // Every 4096 operations: the bar costs nothing measurable between its updates.
        if self.ops % 4096 == 0 {
            self.bar.set_position(self.ops);
        }
    }
}

/// Runs `benchmarks` in order. `stat` names the block device whose counters measure writes
/// and flushes; without it the engine's own counts are used where it keeps them.
pub fn run(
    benchmarks: &[Benchmark],
    workload: &Workload,
    open: &mut Opener<'_>,
    stat: Option<&BlockStat>,
) -> Result<Vec<BenchResult>, BenchError> {
    let progress = std::io::stderr().is_terminal();
    let mut results = Vec::new();
    let mut store: Option<Box<dyn Store>> = None;
    let mut written = false;
    let anon = AnonPeak::start();
    // YCSB keeps its insert count across workloads.
    let mut inserted = 0u64;
    for (index, benchmark) in benchmarks.iter().enumerate() {
        if benchmark.wants_fresh() && (written || store.is_none()) {
            if let Some(old) = store.take() {
                old.close()?;
            }
            store = Some(open(true)?);
            written = false;
        }
        let current = match store.as_mut() {
            Some(current) => current,
            None => store.insert(open(false)?),
        };
        reset_peak_memory();
        if let Some(anon) = &anon {
            anon.reset();
        }
        let seed = workload.seed.wrapping_add(index as u64 * 0x1000);
        let device_before = stat.map(BlockStat::read).transpose()?;
        let own_before = current.own_counters();
        let chunk_before = current.chunk_writes();
        let stats_before = current.engine_stats();
        let cpu_before = cpu_seconds();
        let started = Instant::now();
        let meter = execute(*benchmark, workload, current.as_mut(), seed, &mut inserted, progress)?;
        let seconds = started.elapsed().as_secs_f64();
        meter.bar.finish_and_clear();
        written |= meter.written > 0;
        // Outside the timed part: the compaction the writes left owed is their cost too.
        let settle_seconds = match stat {
            Some(stat) if meter.written > 0 => settle(stat)?,
            _ => 0.0,
        };
        let cpu = cpu_seconds() - cpu_before;
        let (device_bytes, flushes, device_source) = match (stat, device_before) {
            (Some(stat), Some(before)) => {
                // What the engine left in the page cache is its writing too: write it back
                // (outside the timed part) so that the device counters see it.
                sync_all();
                let after: BlockCounters = stat.read()?;
                (
                    Some(after.bytes_written - before.bytes_written),
                    Some(after.flushes - before.flushes),
                    format!("block-device {}", stat.name),
                )
            }
            _ => match (own_before, current.own_counters()) {
                (Some(before), Some(after)) => (Some(after.0 - before.0), Some(after.1 - before.1), "engine".into()),
                _ => (None, None, "none".into()),
            },
        };
        let chunk_write_mb_per_sec = match (chunk_before, current.chunk_writes()) {
            (before, Some((bytes, secs))) => {
                let (b0, s0) = before.unwrap_or((0, 0.0));
                (bytes > b0 && secs > s0).then(|| (bytes - b0) as f64 / (secs - s0) / 1e6)
            }
            _ => None,
        };
        let engine = match (stats_before, current.engine_stats()) {
            (Some(before), Some(after)) => before
                .iter()
                .zip(&after)
                .map(|((name, first), (_, last))| ((*name).to_string(), last.saturating_sub(*first)))
                .collect(),
            _ => std::collections::BTreeMap::new(),
        };
        let ops = meter.ops.max(1);
        results.push(BenchResult {
            benchmark: benchmark.name(),
            ops: meter.ops,
            seconds,
            ops_per_sec: meter.ops as f64 / seconds,
            mb_per_sec: meter.bytes as f64 / seconds / 1e6,
            p50_us: meter.histogram.quantile(0.5) as f64 / 1e3,
            p99_us: meter.histogram.quantile(0.99) as f64 / 1e3,
            p999_us: meter.histogram.quantile(0.999) as f64 / 1e3,
            cpu_s_per_mop: cpu / ops as f64 * 1e6,
            user_bytes_written: meter.written,
            device_bytes_written: device_bytes,
            write_amp: device_bytes.filter(|_| meter.written > 0).map(|bytes| bytes as f64 / meter.written as f64),
            flushes_per_op: flushes.map(|count| count as f64 / ops as f64),
            device_source,
            found: meter.found,
            peak_memory_bytes: peak_memory(),
            peak_anon_bytes: anon.as_ref().map(AnonPeak::peak),
            space_bytes: current.space_bytes(),
            chunk_write_mb_per_sec,
            engine,
            settle_seconds,
        });
    }
    if let Some(store) = store {
        store.close()?;
    }
    Ok(results)
}

/// Bytes a quiet device may see written in one `SETTLE_WINDOW` (an engine's periodic
/// housekeeping, a journal flush); a compaction writes far more.
const SETTLE_QUIET_BYTES: u64 = 1 << 20;
const SETTLE_WINDOW: std::time::Duration = std::time::Duration::from_millis(500);
/// The longest wait: an engine still writing after it is reported as it stands.
const SETTLE_MAX: std::time::Duration = std::time::Duration::from_secs(120);

/// Waits until the device under the store is quiet: less than `SETTLE_QUIET_BYTES` written
/// (page cache written back) in a `SETTLE_WINDOW`, at most `SETTLE_MAX`. Every engine goes
/// on compacting after its last write returns (LevelDB, RocksDB and fjall in background
/// threads, LDS in its worker); what it writes then is the cost of the writes before, and
/// counted with them, with the CPU it takes. Returns the seconds waited.
fn settle(stat: &BlockStat) -> Result<f64, BenchError> {
    let started = Instant::now();
    sync_all();
    let mut last = stat.read()?.bytes_written;
    while started.elapsed() < SETTLE_MAX {
        std::thread::sleep(SETTLE_WINDOW);
        sync_all();
        let now = stat.read()?.bytes_written;
        if now - last < SETTLE_QUIET_BYTES {
            break;
        }
        last = now;
    }
    Ok(started.elapsed().as_secs_f64())
}

fn sync_all() {
    #[expect(unsafe_code, reason = "sync(2) takes no arguments and cannot fail")]
    // SAFETY: no memory is shared with the call.
    unsafe {
        libc::sync();
    }
}

/// Resets the peak-memory mark so that each benchmark reports its own (Linux 4.0+).
fn reset_peak_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn execute(
    benchmark: Benchmark,
    workload: &Workload,
    store: &mut dyn Store,
    seed: u64,
    inserted: &mut u64,
    progress: bool,
) -> Result<Meter, BenchError> {
    let mut rng = Rng::new(seed);
    let mut values = Values::new(seed, workload.value_min, workload.value_max);
    let mut buffer = [0u8; 16];
    let num = workload.num.max(1);
    let total = match benchmark {
        Benchmark::FillSeq | Benchmark::FillRandom | Benchmark::Overwrite | Benchmark::FillHot | Benchmark::ReadSeq => {
            num
        }
        Benchmark::FillSync => workload.sync_ops,
        Benchmark::ReadRandom | Benchmark::SeekRandom | Benchmark::DeleteRandom => workload.reads,
        Benchmark::YcsbLoad => workload.records,
        Benchmark::Ycsb(_) => workload.ycsb_ops,
    };
    let mut meter = Meter::new(benchmark.name(), total, progress);
    match benchmark {
        Benchmark::FillSeq
        | Benchmark::FillRandom
        | Benchmark::Overwrite
        | Benchmark::FillSync
        | Benchmark::FillHot => {
            let sync = benchmark == Benchmark::FillSync;
            let hot_keys = (num / 100).max(1);
            for index in 0..total {
                let id = match benchmark {
                    Benchmark::FillSeq => index,
                    Benchmark::FillHot if rng.below(100) < 99 => rng.below(hot_keys),
                    _ => rng.below(num),
                };
                key(id, &mut buffer);
                let value = values.next_value();
                let started = Instant::now();
                store.put(&buffer, value, sync)?;
                meter.done(started);
                meter.bytes += (buffer.len() + value.len()) as u64;
                meter.written += (buffer.len() + value.len()) as u64;
            }
        }
        Benchmark::ReadRandom => {
            for _ in 0..total {
                key(rng.below(num), &mut buffer);
                let started = Instant::now();
                let got = store.get(&buffer)?;
                meter.done(started);
                if let Some(len) = got {
                    meter.found += 1;
                    meter.bytes += (buffer.len() + len) as u64;
                }
            }
        }
        Benchmark::SeekRandom => {
            for _ in 0..total {
                key(rng.below(num), &mut buffer);
                let started = Instant::now();
                let read = store.scan(&buffer, 1 + workload.seek_nexts)?;
                meter.done(started);
                meter.found += u64::from(read > 0);
            }
        }
        Benchmark::ReadSeq => {
            let started = Instant::now();
            let read = store.scan_all()?;
            let elapsed = started.elapsed().as_nanos() as u64 / (read.max(1) as u64);
            for _ in 0..read {
                meter.histogram.record(elapsed);
            }
            meter.ops = read as u64;
            meter.found = read as u64;
        }
        Benchmark::DeleteRandom => {
            for _ in 0..total {
                key(rng.below(num), &mut buffer);
                let started = Instant::now();
                store.delete(&buffer, false)?;
                meter.done(started);
                meter.written += buffer.len() as u64;
            }
        }
        Benchmark::YcsbLoad => {
            for index in 0..total {
                hashed_key(index, &mut buffer);
                let value = values.next_value();
                let started = Instant::now();
                store.put(&buffer, value, false)?;
                meter.done(started);
                meter.bytes += (buffer.len() + value.len()) as u64;
                meter.written += (buffer.len() + value.len()) as u64;
            }
            *inserted = total;
        }
        Benchmark::Ycsb(letter) => ycsb(letter, workload, store, &mut rng, &mut values, inserted, &mut meter)?,
    }
    Ok(meter)
}

fn ycsb(
    letter: char,
    workload: &Workload,
    store: &mut dyn Store,
    rng: &mut Rng,
    values: &mut Values,
    inserted: &mut u64,
    meter: &mut Meter,
) -> Result<(), BenchError> {
    if *inserted < 2 {
        return Err(BenchError::NeedsLoad(letter));
    }
    // (read, update, insert, scan, read-modify-write) shares in percent: the YCSB core workloads.
    let mix: [u64; 5] = match letter {
        'a' => [50, 50, 0, 0, 0],
        'b' => [95, 5, 0, 0, 0],
        'c' => [100, 0, 0, 0, 0],
        'd' => [95, 0, 5, 0, 0],
        'e' => [0, 0, 5, 95, 0],
        'f' => [50, 0, 0, 0, 50],
        other => return Err(BenchError::UnknownYcsb(other)),
    };
    let zipf = Zipfian::new(*inserted);
    let mut buffer = [0u8; 16];
    for _ in 0..workload.ycsb_ops {
        let mut pick = rng.below(100);
        let op = mix.iter().position(|&share| {
            let hit = pick < share;
            pick = pick.saturating_sub(share);
            hit
        });
        // D reads the latest records; the others read zipfian-popular ones.
        let record = if letter == 'd' {
            inserted.saturating_sub(1 + zipf.next_rank(rng).min(*inserted - 1))
        } else {
            zipf.next_scrambled(rng) % *inserted
        };
        hashed_key(record, &mut buffer);
        let started = Instant::now();
        match op {
            Some(0) => {
                if let Some(len) = store.get(&buffer)? {
                    meter.found += 1;
                    meter.bytes += (buffer.len() + len) as u64;
                }
            }
            Some(1) | Some(4) => {
                if op == Some(4) && store.get(&buffer)?.is_some() {
                    meter.found += 1;
                }
                let value = values.next_value();
                store.put(&buffer, value, false)?;
                meter.written += (buffer.len() + value.len()) as u64;
                meter.bytes += (buffer.len() + value.len()) as u64;
            }
            Some(2) => {
                hashed_key(*inserted, &mut buffer);
                *inserted += 1;
                let value = values.next_value();
                store.put(&buffer, value, false)?;
                meter.written += (buffer.len() + value.len()) as u64;
                meter.bytes += (buffer.len() + value.len()) as u64;
            }
            _ => {
                let length = 1 + rng.below(workload.scan_max.max(1) as u64) as usize;
                let read = store.scan(&buffer, length)?;
                meter.found += u64::from(read > 0);
            }
        }
        meter.done(started);
    }
    Ok(())
}

/// The results as a text table.
pub fn table(results: &[BenchResult], out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "{:<13} {:>10} {:>12} {:>8} {:>9} {:>9} {:>9} {:>10} {:>7} {:>10} {:>9} {:>9}",
        "benchmark",
        "ops",
        "ops/s",
        "MB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "CPU s/Mop",
        "WA",
        "flush/op",
        "peak MiB",
        "anon MiB"
    )?;
    let option = |value: Option<f64>, precision: usize| match value {
        Some(value) => format!("{value:.precision$}"),
        None => "-".to_owned(),
    };
    for result in results {
        writeln!(
            out,
            "{:<13} {:>10} {:>12.0} {:>8.1} {:>9.2} {:>9.2} {:>9.2} {:>10.2} {:>7} {:>10} {:>9} {:>9}",
            result.benchmark,
            result.ops,
            result.ops_per_sec,
            result.mb_per_sec,
            result.p50_us,
            result.p99_us,
            result.p999_us,
            result.cpu_s_per_mop,
            option(result.write_amp, 2),
            option(result.flushes_per_op, 3),
            option(result.peak_memory_bytes.map(|bytes| bytes as f64 / f64::from(1 << 20)), 0),
            option(result.peak_anon_bytes.map(|bytes| bytes as f64 / f64::from(1 << 20)), 0),
        )?;
    }
    Ok(())
}
