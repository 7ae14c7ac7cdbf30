//! Runs one input through one target, outside afl: `cargo run -p lds-fuzz --bin replay-one --
//! TARGET FILE...`. A failed oracle panics with its message.

fn main() {
    let mut arguments = std::env::args().skip(1);
    let Some(name) = arguments.next() else {
        eprintln!("usage: replay-one TARGET FILE...");
        std::process::exit(2);
    };
    let Some(target) = lds_fuzz::target(&name) else {
        eprintln!("replay-one: no target {name}");
        std::process::exit(2);
    };
    for path in arguments {
        let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
        target(&bytes);
        println!("{path}: passes {name}");
    }
}
