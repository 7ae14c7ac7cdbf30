//! afl target `block`: see `lds_fuzz::block`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::block(data);
    });
}
