//! afl target `index`: see `lds_fuzz::index`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::index(data);
    });
}
