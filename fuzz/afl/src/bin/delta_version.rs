//! afl target `delta_version`: see `lds_fuzz::delta_version`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::delta_version(data);
    });
}
