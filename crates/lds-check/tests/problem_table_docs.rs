//! Guards the one problem table: docs/fsck-json.md shows exactly the checker's table (numbers,
//! severities, meanings and repairs), so that the documentation cannot drift from the code.

#[test]
fn the_documented_table_is_the_checkers() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/fsck-json.md");
    let docs = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let table = lds_check::problem::markdown_table();
    assert!(
        docs.contains(&table),
        "docs/fsck-json.md does not hold the problem table: run `cargo run -p lds-check --example problem_table` and paste it"
    );
}
