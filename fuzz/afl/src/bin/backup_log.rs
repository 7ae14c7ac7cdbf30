//! afl target `backup_log`: see `lds_fuzz::backup_log`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::backup_log(data);
    });
}
