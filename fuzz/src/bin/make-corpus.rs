//! Writes the seed corpora: `cargo run -p lds-fuzz --bin make-corpus [fuzz/corpus]`.

fn main() -> std::io::Result<()> {
    let root = std::env::args().nth(1).unwrap_or_else(|| "fuzz/corpus".to_string());
    let seeds = lds_fuzz::seeds::all();
    lds_fuzz::seeds::write(std::path::Path::new(&root), &seeds)?;
    for (target, _) in lds_fuzz::TARGETS {
        let files: Vec<_> = seeds.iter().filter(|seed| seed.target == *target).collect();
        let bytes: usize = files.iter().map(|seed| seed.file_bytes().len()).sum();
        println!("{root}/{target}: {} files, {bytes} bytes", files.len());
    }
    Ok(())
}
