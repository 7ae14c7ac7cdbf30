//! afl target `slot`: see `lds_fuzz::slot`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::slot(data);
    });
}
