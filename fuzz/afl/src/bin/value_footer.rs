//! afl target `value_footer`: see `lds_fuzz::value_footer`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::value_footer(data);
    });
}
