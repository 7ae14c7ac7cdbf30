//! afl target `label`: see `lds_fuzz::label`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::label(data);
    });
}
