//! Guards I8 for the fixtures: regenerating them gives exactly the committed images.

#[test]
fn committed_fixtures_match_the_generator() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    for fixture in lds_fixtures::all() {
        let path = root.join(fixture.name).join("image.gz");
        let committed = std::fs::read(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let decoded =
            lds_fixtures::decompress(&committed).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert!(
            decoded == fixture.image,
            "{} differs from the generator: run `cargo run -p lds-fixtures`",
            path.display()
        );
    }
}

#[test]
fn generation_is_deterministic() {
    let first: Vec<Vec<u8>> = lds_fixtures::all().into_iter().map(|fixture| fixture.image).collect();
    let second: Vec<Vec<u8>> = lds_fixtures::all().into_iter().map(|fixture| fixture.image).collect();
    assert!(first == second);
}

#[test]
fn committed_fsck_fixtures_match_the_generator() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures");
    let cases = lds_fixtures::fsck_cases::all();
    assert!(cases.len() >= 20, "issue 4 asks for at least 20 fsck cases");
    for case in cases {
        let folder = root.join(case.fixture.name);
        let committed =
            std::fs::read(folder.join("image.gz")).unwrap_or_else(|error| panic!("{}: {error}", folder.display()));
        let decoded =
            lds_fixtures::decompress(&committed).unwrap_or_else(|error| panic!("{}: {error}", folder.display()));
        assert!(
            decoded == case.fixture.image,
            "{} differs from the generator: run `cargo run -p lds-fixtures`",
            folder.display()
        );
        let expect = std::fs::read_to_string(folder.join("expect")).unwrap_or_default();
        assert_eq!(expect, format!("code {}\nexit {}\n", case.code, case.exit_code), "{}", folder.display());
    }
}
