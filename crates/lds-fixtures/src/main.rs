//! Writes fixtures/<name>/image.gz and fixtures/<name>/description for every fixture.

fn main() -> std::io::Result<()> {
    let root = std::env::args().nth(1).unwrap_or_else(|| "fixtures".to_string());
    for fixture in lds_fixtures::all() {
        let folder = std::path::Path::new(&root).join(fixture.name);
        std::fs::create_dir_all(&folder)?;
        std::fs::write(folder.join("image.gz"), lds_fixtures::compress(&fixture.image))?;
        std::fs::write(folder.join("description"), format!("{}\n", fixture.description))?;
        println!("{}: {} bytes", folder.display(), fixture.image.len());
    }
    Ok(())
}
