//! afl target `geometry`: see `lds_fuzz::geometry`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::geometry(data);
    });
}
