//! afl target `filter`: see `lds_fuzz::filter`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::filter(data);
    });
}
