//! afl target `repair`: see `lds_fuzz::repair`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::repair(data);
    });
}
