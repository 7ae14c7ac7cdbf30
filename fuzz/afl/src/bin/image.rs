//! afl target `image`: see `lds_fuzz::image`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::image(data);
    });
}
