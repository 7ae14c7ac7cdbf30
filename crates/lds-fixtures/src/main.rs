//! Writes every fixture of fixtures/: `image.gz` and `description` of each golden image
//! (`d_*`) and fsck case (`f_*`), and each case's `expect` (`code N`, `exit M`).
//!
//! `f_*/expect.1`, the whole expected output of `lds fsck --deep`, is not written here: after
//! a regeneration, bless it with `LDS_BLESS=1 cargo test -p lds-cli --test fsck_fixtures` and
//! review the diff. Run from the workspace root (`cargo run -p lds-fixtures`), or name the
//! fixtures folder as the first argument.

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
        std::fs::write(folder.join("expect"), case.expect_file())?;
        println!(
            "{}: {} bytes, expects {:?} (code {}) and exit {}",
            folder.display(),
            case.fixture.image.len(),
            case.code,
            case.code.number(),
            case.exit_code
        );
    }
    println!("now bless expect.1: LDS_BLESS=1 cargo test -p lds-cli --test fsck_fixtures");
    Ok(())
}
