//! afl target `sim`: see `lds_fuzz::sim`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::sim(data);
    });
}
