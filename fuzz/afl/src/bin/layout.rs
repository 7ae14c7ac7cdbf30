//! afl target `layout`: see `lds_fuzz::layout`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::layout(data);
    });
}
