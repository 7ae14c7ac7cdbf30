//! afl target `log_object`: see `lds_fuzz::log_object`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::log_object(data);
    });
}
