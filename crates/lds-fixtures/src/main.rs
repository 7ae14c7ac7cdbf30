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
    for case in lds_fixtures::fsck_cases::all() {
        let folder = std::path::Path::new(&root).join(case.fixture.name);
        std::fs::create_dir_all(&folder)?;
        std::fs::write(folder.join("image.gz"), lds_fixtures::compress(&case.fixture.image))?;
        std::fs::write(folder.join("description"), format!("{}\n", case.fixture.description))?;
        std::fs::write(folder.join("expect"), format!("code {}\nexit {}\n", case.code, case.exit_code))?;
        println!(
            "{}: {} bytes, expects code {} and exit {}",
            folder.display(),
            case.fixture.image.len(),
            case.code,
            case.exit_code
        );
    }
    Ok(())
}
