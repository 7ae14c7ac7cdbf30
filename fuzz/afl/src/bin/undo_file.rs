//! afl target `undo_file`: see `lds_fuzz::undo_file`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::undo_file(data);
    });
}
