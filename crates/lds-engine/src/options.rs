//! Options of an open store and of one write.

/// Options of an open store, with their defaults. Memory is bounded by
/// `2 * write_buffer_size` (memtable and frozen memtable) plus `block_cache_bytes` plus the
/// decoded tails of chunks in use (block index and filter: about 1/37 of the data with 2 KiB
/// blocks; outside pinned levels at most `tail_cache_bytes`) plus, during a compaction, one
/// slot per sorted run of its inputs (a level-0 chunk each, one for a deeper level) and two
/// output slots (outputs are written as they are packed).
#[derive(Debug, Clone)]
pub struct Options {
    /// Which instance of the volume to open (default 0).
    pub instance: u32,
    /// Memtable bytes before it is frozen and flushed (default 4 MiB, the paper's; capped at
    /// a third of the backup log so that the log never fills before a flush).
    pub write_buffer_size: usize,
    /// Target block size in chunks (default 2 KiB: a lookup copies and checks one block, so
    /// halving it made readrandom 1.2x and seekrandom 1.25x faster at 500,000 and 5,000,000
    /// keys; below that the block index outgrows the tail cache at 5,000,000 keys).
    pub block_size: usize,
    /// Bloom filter bits per key (default 10; 0 disables filters).
    pub bloom_bits_per_key: u32,
    /// Level-0 chunks that trigger a compaction into the base level (level 1, or with
    /// `dynamic_levels` the level the tree's size calls for; default 4, LevelDB's).
    pub level0_compaction_trigger: usize,
    /// Level-0 chunks at which writers wait for compaction (default 12, LevelDB's).
    pub level0_stop_writes_trigger: usize,
    /// Bytes level 1 may hold before it is compacted (default 0: ten slots); with
    /// `dynamic_levels`, the least any level below level 0 may hold.
    pub level1_max_bytes: u64,
    /// Each deeper level may hold this many times the bytes of the one above (default 10).
    pub level_size_multiplier: u64,
    /// Level sizes follow the last level (RocksDB's `level_compaction_dynamic_level_bytes`,
    /// its default; default true): level 0 merges into the base level, the highest level the
    /// last level's bytes call for, rather than level 1, and a level holds at least
    /// `level1_max_bytes`. The bulk of the data lies in the last level, and the levels level
    /// 0 merges into stay small, so a merge rewrites little besides its level-0 chunks.
    /// False: LevelDB's fixed sizes, level 1 first (technique `level-pinning` needs that: it
    /// pins levels 0 to 2).
    pub dynamic_levels: bool,
    /// Bytes of decoded blocks kept in memory for reads (default 8 MiB), evicted by the CLOCK
    /// policy (second chance).
    pub block_cache_bytes: usize,
    /// Bytes of chunk tails (block index and filter) of unpinned levels kept in memory
    /// (default 256 MiB, the tails of about 9 GB of chunks), evicted by the CLOCK policy: a
    /// read of a chunk whose tail is not in memory costs two device reads, tail then block,
    /// and the tail is about 1/37 of its chunk. The budget is a bound, not an allocation: a
    /// store holds the tails of its chunks, as LevelDB's and RocksDB's open tables hold their
    /// index and filter blocks. With 32 MiB, 10,000,000 keys (1.3 GB of chunks) in a 256 MiB
    /// memory cgroup read at 6,364 lookups/s, with 64 MiB at 11,015 (their tails fit).
    pub tail_cache_bytes: usize,
    /// Level pinning (LSM-KVD, technique `level-pinning`): the tails of every chunk of levels
    /// 0 to `pinned_levels - 1` stay in memory, loaded at open and kept current at every
    /// commit, so that a read in those levels costs one device read (default 0: none).
    pub pinned_levels: u8,
    /// The most bytes of tails pinned (default 64 MiB): upper levels first, a level's chunks
    /// past the budget are cached as the others are.
    pub pinned_bytes_max: usize,
    /// Key-value separation (WiscKey, LSM-KVD; technique `kv-separation`, SPEC.md §8.6):
    /// values of at least this many bytes leave the tree for value chunks at flush, and the
    /// tree keeps a pointer (about 40 bytes). `None` (the default) keeps every value in the
    /// tree. Needs a volume with feature `value_chunks` (`lds mkfs --value-chunks`). The
    /// technique's default, 1 KiB: from there on a merge moving the pointer instead of the
    /// value copies at least 25 times fewer bytes, while a read costs one more device read
    /// of about the size of a block (values that small fill half a 2 KiB block).
    pub value_separation_min: Option<usize>,
    /// With separation on, a value of at least this many bytes (default 2 MiB, half the
    /// default slot) is written to value chunks of its own before its batch, which carries
    /// only the pointer: it is written once instead of twice (log, then value chunk), and may
    /// be as large as 1 GiB. Values that would not fit a batch of the backup log always go
    /// this way. Smaller values would each leave most of a slot empty until a merge packs them.
    pub value_direct_min: usize,
    /// A merge copies the values of value chunks whose live bytes fell below this percent of
    /// a slot into new value chunks, so that those can be freed (default 50).
    pub value_gc_live_percent: u8,
    /// TRIAD-DISK (technique `triad-disk`, SPEC.md §8.7): a level-0 merge due by
    /// `level0_compaction_trigger` waits while the level-0 chunks' overlap ratio (`1 -
    /// distinct keys / keys`, estimated from their key sketches) is below this, so that a
    /// merge removes many duplicates at once (TRIAD's 0.4). `None` (the default): no wait.
    /// Needs a volume with feature `chunk_sketches` (`lds mkfs --chunk-sketches`).
    pub level0_overlap_min: Option<f64>,
    /// With `level0_overlap_min`, level 0 never waits past this many chunks (TRIAD's 6).
    pub level0_defer_max: usize,
    /// TRIAD-MEM (technique `triad-mem`): when a memtable is frozen, the newest versions of
    /// its hot keys (updated at least twice and more often than the average key) stay in
    /// memory instead of going to level 0, within this percent of `write_buffer_size`
    /// (TRIAD's PERC_HOT; at most 90). 0 (the default): none.
    pub hot_buffer_percent: u8,
    /// TRIAD-LOG (technique `triad-log`, SPEC.md §8.9): a flush writes *log chunks*, whose
    /// puts of at least 24 bytes are references to the backup log batches that hold them,
    /// instead of the values, while the backup log has room to retain them (module `logs`).
    /// Needs a volume with feature `log_tables` (`lds mkfs --log-tables`); a larger backup log
    /// (`lds mkfs --backup-log-size`) retains more. False (the default): ordinary flushes.
    pub log_tables: bool,
    /// With `log_tables`, a flush writes a log chunk only when it keeps at least this percent
    /// of the entries of its part of the log (TRIAD's condition: the rest are overwritten
    /// versions the ring would retain for nothing; default 80).
    pub log_tables_unique_percent: u8,
    /// Size-tiered compaction (LDS §4.2.5, technique `size-tiered`): when this many chunks of
    /// one size tier are in level 0 they are merged into one chunk of several slots (tiers
    /// by size in slots, each `threshold` times the one before; Cassandra's 4). 0 (the
    /// default): leveled compaction.
    pub size_tiered_threshold: usize,
    /// The split forest (SifrDB §4.1, technique `forest`): stages of this many trees, each
    /// tree a level of disjoint chunks; a full stage drains into the next one, moving the
    /// chunks that overlap nothing and merging the rest (`compaction::forest`). 0 (the
    /// default): leveled compaction.
    pub forest_fanout: usize,
    /// A forest drain moves a chunk that overlaps nothing only when it fills at least this
    /// percent of its slot (default 50); smaller ones are merged, so that they get packed.
    pub forest_move_min_percent: u8,
    /// Parallel search (SifrDB §4.3): a point lookup with several candidate chunks outside
    /// the memtables searches them on this many threads at once (the caller's among them),
    /// taking the newest version found. 0 or 1 (the default): one after the other.
    pub search_threads: usize,
    /// With `search_threads`, search in parallel whenever two candidates would read the
    /// device, however fast it is. False (the default): only while a device read takes
    /// longer on average than handing a search to another thread (both measured as they
    /// happen), since a hand-off then costs more than it overlaps.
    pub search_always_parallel: bool,
    /// Unsynced backup log appends gather in memory up to this many bytes before one write
    /// to the device (default 64 KiB), so that a put costs no system call; an idle store
    /// writes them out within 100 ms. A process crash loses at most these latest unsynced
    /// writes (still a prefix of the writes issued); a synced write first writes out
    /// everything before it. 0 writes every batch.
    pub log_buffer_bytes: usize,
    /// Flushes and compactions run in a background thread (default). When false they run
    /// in the writing thread, so that the same operations always issue the same device
    /// writes and flushes (the crash simulator, docs/reliability.md I8).
    pub background: bool,
    /// Merges whose inputs span at least `journal_min_input_slots` slots are journaled
    /// (SPEC.md §12): they clean their inputs early, so that they need little free space
    /// beyond their inputs, and a crash resumes them instead of losing their work (default
    /// true).
    pub compaction_journal: bool,
    /// The smallest merge, in input slots, that is journaled (default 16: 64 MiB with the
    /// default 4 MiB slots). Below it a merge costs a few seconds at most, redoing it after a
    /// crash costs as little, and it needs at most twice its inputs' slots; a journal record
    /// costs a flush and a version log append per step.
    pub journal_min_input_slots: u64,
    /// Outputs a journaled merge writes between two journal records (default 8): each step
    /// makes its outputs durable with one flush, then one record. Fewer means less free space
    /// needed and less work lost to a crash, more flushes and version log appends.
    pub journal_every_outputs: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            instance: 0,
            write_buffer_size: 4 << 20,
            block_size: 2048,
            bloom_bits_per_key: 10,
            level0_compaction_trigger: 4,
            level0_stop_writes_trigger: 12,
            level1_max_bytes: 0,
            level_size_multiplier: 10,
            dynamic_levels: true,
            block_cache_bytes: 8 << 20,
            tail_cache_bytes: 256 << 20,
            pinned_levels: 0,
            pinned_bytes_max: 64 << 20,
            value_separation_min: None,
            value_direct_min: 2 << 20,
            value_gc_live_percent: 50,
            level0_overlap_min: None,
            hot_buffer_percent: 0,
            log_tables: false,
            log_tables_unique_percent: 80,
            size_tiered_threshold: 0,
            forest_fanout: 0,
            forest_move_min_percent: 50,
            search_threads: 0,
            search_always_parallel: false,
            level0_defer_max: 6,
            log_buffer_bytes: 64 << 10,
            background: true,
            compaction_journal: true,
            journal_min_input_slots: 16,
            journal_every_outputs: 8,
        }
    }
}

/// The techniques `Options::with_techniques` switches on by name (`--technique` of `lds
/// bench` and `lds crashtest`).
pub const TECHNIQUES: &[(&str, &str)] = &[
    (
        "level-pinning",
        "the tails (index and filter) of levels 0 to 2 stay in memory (LSM-KVD): a read there costs one device read",
    ),
    (
        "kv-separation",
        "values of 1 KiB and more live in value chunks, the tree holds pointers (WiscKey, LSM-KVD); needs lds mkfs --value-chunks",
    ),
    (
        "triad-disk",
        "a level-0 merge waits until the level-0 chunks' keys overlap by 40% (estimated from their key sketches) or 6 chunks (TRIAD); needs lds mkfs --chunk-sketches",
    ),
    (
        "triad-mem",
        "at each freeze the newest versions of the hot keys (updated more often than the average key) stay in memory, within a quarter of the write buffer, written again to the backup log (TRIAD)",
    ),
    (
        "size-tiered",
        "size-tiered compaction (LDS 4.2.5): four chunks of a size tier merge into one chunk of several slots in the next tier; not with kv-separation or triad-disk",
    ),
    (
        "forest",
        "the split forest (SifrDB): stages of four trees of disjoint chunks, a full stage drains into the next moving what overlaps nothing; lookups search candidate chunks on two threads; not with size-tiered, kv-separation or triad-disk",
    ),
    (
        "triad-log",
        "flushes write level-0 chunks of references into the backup log instead of the values, while the log has room to keep them (TRIAD's CL-SSTables); needs lds mkfs --log-tables; not with size-tiered or forest",
    ),
];

impl Options {
    /// These options with the techniques named in `names` (comma-separated, see
    /// [`TECHNIQUES`]) switched on; an unknown name is an error naming the known ones.
    pub fn with_techniques(mut self, names: &str) -> Result<Self, String> {
        for name in names.split(',').map(str::trim).filter(|name| !name.is_empty()) {
            match name {
                "level-pinning" => {
                    self.pinned_levels = 3;
                    self.dynamic_levels = false;
                }
                "kv-separation" => self.value_separation_min = Some(1 << 10),
                "triad-disk" => self.level0_overlap_min = Some(0.4),
                "triad-mem" => self.hot_buffer_percent = 25,
                "triad-log" => self.log_tables = true,
                "size-tiered" => self.size_tiered_threshold = 4,
                "forest" => {
                    self.forest_fanout = 4;
                    self.search_threads = 2;
                }
                other => {
                    let known: Vec<&str> = TECHNIQUES.iter().map(|(name, _)| *name).collect();
                    return Err(format!("unknown technique '{other}': known are {}", known.join(", ")));
                }
            }
        }
        Ok(self)
    }
}

/// Options of one write.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Durable before returning: the backup log area is flushed to the device (SPEC.md §2.5).
    /// Concurrent synced writers share flushes (group commit).
    pub sync: bool,
}
