//! Prints the problem table as docs/fsck-json.md holds it: `cargo run -p lds-check --example
//! problem_table`.

fn main() {
    print!("{}", lds_check::problem::markdown_table());
}
