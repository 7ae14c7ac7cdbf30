//! afl target `key_sketch`: see `lds_fuzz::key_sketch`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::key_sketch(data);
    });
}
