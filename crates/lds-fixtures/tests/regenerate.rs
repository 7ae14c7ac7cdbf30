//! Guards I8 for the fixtures: regenerating them gives exactly the committed images, `expect`
//! files and folders, and each fsck case gives the problem code and exit code it is about.

#[test]
fn committed_fixtures_match_the_generator() {
    for fixture in lds_fixtures::all() {
        assert!(
            lds_fixtures::load(fixture.name) == fixture.image,
            "fixtures/{}/image.gz differs from the generator: run `cargo run -p lds-fixtures`",
            fixture.name
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
    let cases = lds_fixtures::fsck_cases::all();
    assert!(cases.len() >= 20, "issue 4 asks for at least 20 fsck cases");
    for case in cases {
        let name = case.fixture.name;
        assert!(
            lds_fixtures::load(name) == case.fixture.image,
            "fixtures/{name}/image.gz differs from the generator: run `cargo run -p lds-fixtures`"
        );
        let path = lds_fixtures::fixtures_root().join(name).join("expect");
        let expect = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        assert_eq!(expect, case.expect_file(), "{}: run `cargo run -p lds-fixtures`", path.display());
    }
}

#[test]
fn every_fixture_folder_comes_from_the_generator() {
    let mut generated: Vec<String> = lds_fixtures::all().into_iter().map(|fixture| fixture.name.to_string()).collect();
    generated.sort();
    assert_eq!(lds_fixtures::dump_fixture_names(), generated, "d_* folders");
    let mut cases: Vec<String> =
        lds_fixtures::fsck_cases::all().into_iter().map(|case| case.fixture.name.to_string()).collect();
    cases.sort();
    assert_eq!(lds_fixtures::fsck_case_names(), cases, "f_* folders");
}

#[test]
fn every_fsck_case_gives_its_code_and_exit_code() {
    for case in lds_fixtures::fsck_cases::all() {
        let name = case.fixture.name;
        let image = lds_volume::MemoryImage(&case.fixture.image);
        let report =
            lds_check::check(&image, lds_check::CheckOptions { deep: true, ..Default::default() }, &mut |_, _| {})
                .unwrap_or_else(|error| panic!("{name}: {error}"));
        let lines: Vec<String> = report.problems.iter().map(|problem| problem.line()).collect();
        assert!(
            report.problems.iter().any(|problem| problem.code == case.code),
            "{name}: no {:?} ({})\n{}",
            case.code,
            case.code.number(),
            lines.join("\n")
        );
        assert_eq!(report.exit_code(), case.exit_code, "{name}\n{}", lines.join("\n"));
    }
}
