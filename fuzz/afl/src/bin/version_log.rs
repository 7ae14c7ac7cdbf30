//! afl target `version_log`: see `lds_fuzz::version_log`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::version_log(data);
    });
}
