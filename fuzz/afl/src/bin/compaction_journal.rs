//! afl target `compaction_journal`: see `lds_fuzz::compaction_journal`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::compaction_journal(data);
    });
}
