//! afl target `write_batch`: see `lds_fuzz::write_batch`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::write_batch(data);
    });
}
