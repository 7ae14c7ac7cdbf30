//! afl target `value_pointer`: see `lds_fuzz::value_pointer`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::value_pointer(data);
    });
}
