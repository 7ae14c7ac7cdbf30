//! afl target `chunk_meta`: see `lds_fuzz::chunk_meta`.

fn main() {
    afl::fuzz!(|data: &[u8]| {
        lds_fuzz::chunk_meta(data);
    });
}
