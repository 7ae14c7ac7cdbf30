//! afl target `footer`: see `lds_fuzz::footer`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::footer(data);
    });
}
