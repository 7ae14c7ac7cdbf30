//! afl target `log_ref`: see `lds_fuzz::log_ref`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::log_ref(data);
    });
}
