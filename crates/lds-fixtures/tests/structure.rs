//! Guards the shape of every crate of the workspace (issues 11 and 40): in each, the files
//! import each other without a circle (`crate::`, `super::` and `self::` paths from one file
//! to another); the engine's top-level modules form no cycle either and nothing imports its
//! `db` (the public top); the engine never names the checker, and the checker does not depend
//! on the engine (so that it stays an independent oracle). A failure names the files of the
//! circle and the paths that tie them: `cargo test -p lds-fixtures --test structure`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Crates whose files still import each other in a circle, each with why it is let pass. Empty
/// this list as the circles go: a crate listed here whose circle is gone fails the test too.
const KNOWN_CIRCLES: &[(&str, &str)] = &[];

/// A module's path inside its crate (`["db", "open"]`; the crate root is empty).
type Module = Vec<String>;

/// What a crate's files import of each other: for each file's module, the modules of the other
/// files it names, each with the paths that name it.
type Graph = BTreeMap<Module, BTreeMap<Module, BTreeSet<String>>>;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Every crate of the workspace: its package name and its `src` directory.
fn crates() -> Vec<(String, PathBuf)> {
    let root = workspace();
    let mut found = Vec::new();
    let mut directories: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap_or_else(|error| panic!("{}: {error}", root.join("crates").display()))
        .flatten()
        .map(|entry| entry.path())
        .collect();
    directories.push(root.join("fuzz"));
    directories.sort();
    for directory in directories {
        let Ok(manifest) = std::fs::read_to_string(directory.join("Cargo.toml")) else { continue };
        let name = manifest
            .lines()
            .find_map(|line| line.strip_prefix("name = \"").and_then(|rest| rest.strip_suffix('"')))
            .unwrap_or_else(|| panic!("{}: no package name", directory.display()));
        if directory.join("src").is_dir() {
            found.push((name.to_string(), directory.join("src")));
        }
    }
    found
}

/// Every `.rs` file under `root` (a crate's `src`) but the roots of binaries of their own
/// (`src/bin/`, a `main.rs` beside a `lib.rs`).
fn sources(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    // Bounded by the directory tree.
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                if path != root.join("bin") {
                    pending.push(path);
                }
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                found.push(path);
            }
        }
    }
    // A `main.rs` beside a `lib.rs` is a binary's root, a crate of its own.
    if root.join("lib.rs").is_file() {
        found.retain(|path| *path != root.join("main.rs"));
    }
    found.sort();
    found
}

/// The module a file is (`db/open.rs` is `db::open`, `read/mod.rs` is `read`, `lib.rs` and
/// `main.rs` the root).
fn module_of(source: &Path, root: &Path) -> Module {
    let relative = source.strip_prefix(root).unwrap_or(source).with_extension("");
    let mut parts: Module = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    if parts.last().is_some_and(|last| last == "mod") || parts == ["lib"] || parts == ["main"] {
        parts.pop();
    }
    parts
}

fn display(module: &[String]) -> String {
    if module.is_empty() {
        return "lib".into();
    }
    module.join("::")
}

/// The code of a file without its comments, string and character literals (a path in them
/// imports nothing).
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let starts =
        |at: usize, pattern: &str| pattern.chars().enumerate().all(|(offset, c)| chars.get(at + offset) == Some(&c));
    let find = |from: usize, pattern: &str| (from..chars.len()).find(|&at| starts(at, pattern));
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    // Each step consumes at least one character.
    while at < chars.len() {
        let word_before = at > 0 && (chars[at - 1].is_alphanumeric() || chars[at - 1] == '_');
        let raw_prefix = match (chars[at], chars.get(at + 1)) {
            ('r', _) if !word_before => Some(1),
            ('b', Some('r')) if !word_before => Some(2),
            _ => None,
        };
        let raw_hashes = raw_prefix.and_then(|prefix| {
            let hashes = chars[at + prefix..].iter().take_while(|&&c| c == '#').count();
            (chars.get(at + prefix + hashes) == Some(&'"')).then_some((prefix, hashes))
        });
        if starts(at, "//") {
            at = find(at, "\n").unwrap_or(chars.len());
        } else if starts(at, "/*") {
            // Block comments nest.
            let mut depth = 0usize;
            // Bounded by the text: each step moves on.
            while at < chars.len() {
                if starts(at, "/*") {
                    depth += 1;
                    at += 2;
                } else if starts(at, "*/") {
                    depth -= 1;
                    at += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    at += 1;
                }
            }
        } else if let Some((prefix, hashes)) = raw_hashes {
            let end = format!("\"{}", "#".repeat(hashes));
            let body = at + prefix + hashes + 1;
            at = find(body, &end).map_or(chars.len(), |index| index + end.chars().count());
            out.push_str("\"\"");
        } else if chars[at] == '"' {
            at += 1;
            // Bounded by the text.
            while at < chars.len() && chars[at] != '"' {
                at += if chars[at] == '\\' { 2 } else { 1 };
            }
            at += 1;
            out.push_str("\"\"");
        } else if chars[at] == '\'' {
            // A character literal ('x', '\n', '\u{1F600}'), or a lifetime, which stays.
            let len = match chars.get(at + 1) {
                Some('\\') => find(at + 3, "'").map(|end| end + 1 - at),
                Some(_) if chars.get(at + 2) == Some(&'\'') => Some(3),
                _ => None,
            };
            match len {
                Some(len) => {
                    at += len;
                    out.push_str("' '");
                }
                None => {
                    out.push('\'');
                    at += 1;
                }
            }
        } else {
            out.push(chars[at]);
            at += 1;
        }
    }
    out
}

/// `code` without its `#[cfg(test)]` items (a `mod tests { ... }` block, or `mod testing;`):
/// what only tests compile imports nothing of the crate's shape.
fn without_tests(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    // Each round removes one item or ends.
    while let Some(index) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..index]);
        let item = &rest[index + "#[cfg(test)]".len()..];
        let semicolon = item.find(';');
        let brace = item.find('{');
        let end = match (semicolon, brace) {
            (Some(semicolon), Some(brace)) if semicolon < brace => semicolon + 1,
            (Some(semicolon), None) => semicolon + 1,
            (_, Some(brace)) => {
                let mut depth = 0usize;
                let mut end = item.len();
                for (offset, character) in item[brace..].char_indices() {
                    match character {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = brace + offset + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, None) => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The paths that start at `crate`, `super` or `self` in `code`, each as its segments, a use
/// tree's braces expanded (`crate::a::{b, c::D}` gives `crate::a::b` and `crate::a::c::D`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for start in ["crate", "super", "self"] {
        for (index, _) in code.match_indices(start) {
            let before = code[..index].chars().next_back();
            if before.is_some_and(|character| character.is_alphanumeric() || "_:$".contains(character)) {
                continue;
            }
            let after = code[index + start.len()..].trim_start();
            if !after.starts_with("::") {
                continue;
            }
            let mut tokens = Tokens { text: after, at: 0 };
            tokens.next();
            tree(&mut tokens, vec![start.to_string()], &mut found);
        }
    }
    found
}

/// The tokens of a path: identifiers, `::`, `{`, `}`, `,` and `*`.
struct Tokens<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Tokens<'a> {
    fn peek(&self) -> Option<&'a str> {
        let rest = self.text[self.at..].trim_start();
        let offset = self.text.len() - rest.len();
        let len = if rest.starts_with("::") {
            2
        } else if rest.starts_with(['{', '}', ',', '*']) {
            1
        } else {
            rest.find(|character: char| !(character.is_alphanumeric() || character == '_')).unwrap_or(rest.len())
        };
        (len > 0).then(|| &self.text[offset..offset + len])
    }

    fn next(&mut self) -> Option<&'a str> {
        let token = self.peek()?;
        let rest = self.text[self.at..].trim_start();
        self.at = self.text.len() - rest.len() + token.len();
        Some(token)
    }
}

/// Reads one use tree after `prefix::` into `found`.
fn tree(tokens: &mut Tokens<'_>, prefix: Vec<String>, found: &mut Vec<Vec<String>>) {
    let mut segments = prefix;
    // Each round consumes a token; a path ends at anything that is not `::` after a segment.
    loop {
        match tokens.next() {
            Some("{") => {
                // Bounded by the tokens: each branch consumes at least its closing `}` or `,`.
                loop {
                    if tokens.peek() == Some("}") {
                        tokens.next();
                        return;
                    }
                    tree(tokens, segments.clone(), found);
                    match tokens.next() {
                        Some(",") => continue,
                        _ => return,
                    }
                }
            }
            Some("*") | None => {
                found.push(segments);
                return;
            }
            Some(segment) if segment.chars().all(|character| character.is_alphanumeric() || character == '_') => {
                segments.push(segment.to_string());
                if tokens.peek() != Some("::") {
                    found.push(segments);
                    return;
                }
                tokens.next();
            }
            Some(_) => {
                found.push(segments);
                return;
            }
        }
    }
}

/// The graph of the files under `root` (a crate's `src`).
fn graph(root: &Path) -> Graph {
    let files: BTreeMap<Module, PathBuf> =
        sources(root).into_iter().map(|file| (module_of(&file, root), file)).collect();
    let mut graph = Graph::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|error| panic!("{}: {error}", file.display()));
        let code = without_tests(&code_only(&text));
        let edges = graph.entry(module.clone()).or_default();
        for path in paths(&code) {
            let (mut absolute, rest) = match path[0].as_str() {
                "crate" => (Vec::new(), &path[1..]),
                _ => (module.clone(), &path[..]),
            };
            let mut rest = rest;
            // `self` and `super` lead a path only (`super::super::x`).
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "self" => {}
                    "super" => {
                        absolute.pop();
                    }
                    _ => break,
                }
                rest = &rest[1..];
            }
            absolute.extend(rest.iter().cloned());
            let target = (0..=absolute.len())
                .rev()
                .map(|len| absolute[..len].to_vec())
                .find(|candidate| files.contains_key(candidate))
                .unwrap_or_default();
            if target != *module {
                edges.entry(target).or_default().insert(path.join("::"));
            }
        }
    }
    graph
}

/// The graph of the top-level modules: a file's imports are its top-level module's.
fn top_level(graph: &Graph) -> Graph {
    let mut top = Graph::new();
    for (module, edges) in graph {
        let Some(from) = module.first() else { continue };
        let entry = top.entry(vec![from.clone()]).or_default();
        for (target, names) in edges {
            let Some(to) = target.first().filter(|to| *to != from) else { continue };
            let tied = entry.entry(vec![to.clone()]).or_default();
            tied.extend(names.iter().map(|name| format!("{} ({name})", display(module))));
        }
    }
    top
}

/// A cycle of the graph, if any (depth-first search for a back edge), first module repeated
/// at its end.
fn find_cycle(graph: &Graph) -> Option<Vec<Module>> {
    fn visit(
        module: &Module,
        graph: &Graph,
        done: &mut BTreeSet<Module>,
        path: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        if done.contains(module) {
            return None;
        }
        if let Some(start) = path.iter().position(|seen| seen == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.clone());
            return Some(cycle);
        }
        path.push(module.clone());
        for target in graph.get(module).into_iter().flat_map(BTreeMap::keys) {
            if let Some(cycle) = visit(target, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|module| visit(module, graph, &mut done, &mut Vec::new()))
}

/// A cycle with the paths that tie each step, for a failure message.
fn describe(cycle: &[Module], graph: &Graph) -> String {
    let mut text = cycle.iter().map(|module| display(module)).collect::<Vec<_>>().join(" -> ");
    for pair in cycle.windows(2) {
        let names = graph.get(&pair[0]).and_then(|edges| edges.get(&pair[1])).cloned().unwrap_or_default();
        let names: Vec<String> = names.into_iter().collect();
        text.push_str(&format!("\n  {} -> {}: {}", display(&pair[0]), display(&pair[1]), names.join(", ")));
    }
    text
}

#[test]
fn no_crate_has_a_circle_of_files() {
    let crates = crates();
    assert!(crates.len() >= 9, "{crates:?}");
    let mut circles = Vec::new();
    let mut cleared = Vec::new();
    for (name, root) in &crates {
        let graph = graph(root);
        let known = KNOWN_CIRCLES.iter().any(|(crate_name, _)| crate_name == name);
        match (find_cycle(&graph), known) {
            (Some(cycle), false) => circles.push(format!("{name}: {}", describe(&cycle, &graph))),
            (None, true) => cleared.push(name.clone()),
            _ => {}
        }
        eprintln!(
            "{name}: {} files, {} imports between them{}",
            graph.len(),
            graph.values().map(BTreeMap::len).sum::<usize>(),
            if known { " (a known circle)" } else { "" }
        );
    }
    assert!(circles.is_empty(), "files that import each other in a circle:\n{}", circles.join("\n"));
    assert!(cleared.is_empty(), "no circle left in {cleared:?}: take them off KNOWN_CIRCLES");
}

#[test]
fn the_engines_top_level_modules_form_no_cycle_and_nothing_imports_db() {
    let root = workspace().join("crates/lds-engine/src");
    let graph = graph(&root);
    assert!(graph.len() >= 15, "{:?}", graph.keys().collect::<Vec<_>>());
    for (module, edges) in &graph {
        if module.first().is_some_and(|first| first != "db") {
            let db: Vec<String> = edges
                .keys()
                .filter(|target| target.first().is_some_and(|first| first == "db"))
                .map(|target| display(target))
                .collect();
            assert!(db.is_empty(), "{} imports {db:?}", display(module));
        }
    }
    let top = top_level(&graph);
    if let Some(cycle) = find_cycle(&top) {
        panic!("the engine's top-level modules form a cycle: {}", describe(&cycle, &top));
    }
}

#[test]
fn the_engine_never_names_the_checker() {
    let engine = workspace().join("crates/lds-engine");
    for file in sources(&engine.join("src")) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(!text.contains("fsck"), "{} names fsck", file.display());
        assert!(!text.contains("lds_check"), "{} uses the checker", file.display());
    }
    let manifest = std::fs::read_to_string(engine.join("Cargo.toml")).unwrap_or_default();
    let dependencies =
        manifest.split("[dependencies]").nth(1).and_then(|rest| rest.split('[').next()).unwrap_or_default();
    assert!(!dependencies.contains("lds-check"), "the engine depends on the checker");
}

#[test]
fn the_checker_does_not_depend_on_the_engine() {
    let checker = workspace().join("crates/lds-check");
    let text = std::fs::read_to_string(checker.join("Cargo.toml"))
        .unwrap_or_else(|error| panic!("{}: {error}", checker.display()));
    assert!(!text.contains("lds-engine"), "lds-check depends on lds-engine");
    for file in sources(&checker.join("src")) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(!text.contains("lds_engine"), "{} uses the engine", file.display());
    }
}

fn modules(names: &[&str]) -> Vec<Module> {
    names.iter().map(|name| name.split("::").filter(|part| !part.is_empty()).map(String::from).collect()).collect()
}

#[test]
fn the_scanner_reads_use_trees_and_skips_comments_strings_and_tests() {
    let code = code_only(
        "use crate::a::{b, c::{D, e}, self};\n\
         // crate::commented::Out\n\
         /* crate::block /* nested */ crate::comment */\n\
         fn f() { let _ = \"§ crate::in_string\"; let _ = r#\"crate::raw\"#; let _ = ('{', '\\''); super::g(); }\n\
         fn h<'a>(x: &'a u8) { self::k::call(x); $crate::macro_path(); }\n\
         #[cfg(test)]\nmod tests { use crate::only_tests; }\n\
         #[cfg(test)]\nmod testing;\n",
    );
    let found: BTreeSet<String> = paths(&without_tests(&code)).into_iter().map(|path| path.join("::")).collect();
    let expected: BTreeSet<String> =
        ["crate::a::b", "crate::a::c::D", "crate::a::c::e", "crate::a::self", "super::g", "self::k::call"]
            .into_iter()
            .map(String::from)
            .collect();
    assert_eq!(found, expected);
}

#[test]
fn the_graph_finds_a_circle_of_files_and_a_cycle_of_top_level_modules() {
    let directory = std::env::temp_dir().join(format!("lds-structure-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&directory);
    let write = |path: &str, text: &str| {
        let path = directory.join(path);
        std::fs::create_dir_all(path.parent().unwrap_or(&directory)).unwrap_or_else(|error| panic!("{error}"));
        std::fs::write(path, text).unwrap_or_else(|error| panic!("{error}"));
    };
    write("lib.rs", "mod a; mod b; mod c; mod state;");
    write("a.rs", "use crate::b::B;");
    write("b.rs", "pub struct B; use crate::c;");
    write("c.rs", "use super::state::Shared;");
    write("state.rs", "pub struct Shared;");
    write("state/inner.rs", "use crate::state::Shared;");
    let files = graph(&directory);
    assert_eq!(find_cycle(&files), None, "{files:?}");
    assert_eq!(find_cycle(&top_level(&files)), None);
    // `c` imports `state`, whose child now imports `c`: no file circle, a top-level cycle.
    write("state/inner.rs", "use crate::state::Shared; use crate::c::*;");
    let files = graph(&directory);
    assert_eq!(find_cycle(&files), None, "{files:?}");
    let cycle = find_cycle(&top_level(&files));
    assert_eq!(cycle, Some(modules(&["c", "state", "c"])));
    // `state` itself imports `a`, which reaches `state` through `b` and `c`: a circle of files.
    write("state.rs", "pub struct Shared; use self::inner::*; use crate::a;");
    let files = graph(&directory);
    let cycle = find_cycle(&files).unwrap_or_default();
    assert_eq!(cycle, modules(&["a", "b", "c", "state", "a"]), "{files:?}");
    assert!(describe(&cycle, &files).contains("c -> state: super::state::Shared"), "{}", describe(&cycle, &files));
    let _ = std::fs::remove_dir_all(&directory);
}

/// The crates a crate's Cargo.toml depends on among the workspace's, without the `lds-` prefix.
fn workspace_dependencies(manifest: &str) -> BTreeSet<String> {
    let mut in_dependencies = false;
    let mut found = BTreeSet::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_dependencies = line == "[dependencies]";
        } else if in_dependencies {
            if let Some(name) = line.split(['=', ' ', '.']).next().and_then(|name| name.strip_prefix("lds-")) {
                found.insert(name.to_string());
            }
        }
    }
    found
}

#[test]
fn architecture_md_names_each_crates_dependencies() {
    // ARCHITECTURE.md's table of crates and what each depends on is what a newcomer reads
    // first: it must say what the manifests say.
    let root = workspace();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap_or_else(|error| panic!("{error}"));
    let mut documented: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("lds-") else { continue };
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
        let listed = rest.split_once("<-").map(|(_, list)| list.split('(').next().unwrap_or(list)).unwrap_or("");
        let listed: BTreeSet<String> =
            listed.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_string).collect();
        documented.insert(name, listed);
    }
    let mut differences = Vec::new();
    let crates = std::fs::read_dir(root.join("crates")).unwrap_or_else(|error| panic!("{error}"));
    for entry in crates.flatten() {
        let Some(name) = entry.file_name().to_str().and_then(|name| name.strip_prefix("lds-")).map(str::to_string)
        else {
            continue;
        };
        let manifest =
            std::fs::read_to_string(entry.path().join("Cargo.toml")).unwrap_or_else(|error| panic!("{error}"));
        let actual = workspace_dependencies(&manifest);
        match documented.get(&name) {
            None => differences.push(format!("lds-{name} is not in ARCHITECTURE.md's list")),
            Some(listed) if listed.iter().any(|name| name == "all of the above") => {}
            Some(listed) if *listed != actual => {
                differences.push(format!("lds-{name}: ARCHITECTURE.md says {listed:?}, Cargo.toml {actual:?}"))
            }
            Some(_) => {}
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(documented.len() >= 10, "the list was not found in ARCHITECTURE.md: {documented:?}");
}
