//! afl target `wrap`: see `lds_fuzz::wrap`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::wrap(data);
    });
}
