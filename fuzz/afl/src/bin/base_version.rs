//! afl target `base_version`: see `lds_fuzz::base_version`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::base_version(data);
    });
}
