//! Guards the engine's shape (issue 11): its modules import each other without a cycle,
//! nothing imports `db` (the public top), the engine never names the checker, and the
//! checker does not depend on the engine (so that it stays an independent oracle).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|error| panic!("{}: {error}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// The module a file is (`db/open.rs` is `db::open`, `read/mod.rs` is `read`).
fn module_of(source: &Path, root: &Path) -> String {
    let relative = source.strip_prefix(root).unwrap_or(source).with_extension("");
    let parts: Vec<String> = relative.iter().map(|part| part.to_string_lossy().into_owned()).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).filter(|part| *part != "mod").collect();
    parts.join("::")
}

/// The engine modules a file imports: each `crate::a::b` path, as the longest known module.
fn imports(text: &str, modules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (index, _) in text.match_indices("crate::") {
        let rest = &text[index + "crate::".len()..];
        let path: String = rest
            .chars()
            .take_while(|character| character.is_alphanumeric() || *character == '_' || *character == ':')
            .collect();
        let segments: Vec<&str> = path.split("::").filter(|segment| !segment.is_empty()).collect();
        // Expand `crate::a::{b, c}` only as far as the part before the brace: that module.
        for length in (1..=segments.len()).rev() {
            let candidate = segments[..length].join("::");
            if modules.contains(&candidate) {
                found.insert(candidate);
                break;
            }
        }
    }
    found
}

/// A cycle of the graph, if any (depth-first search for a back edge).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if done.contains(module) {
            return None;
        }
        if let Some(start) = path.iter().position(|seen| seen == module) {
            let mut cycle = path[start..].to_vec();
            cycle.push(module.to_string());
            return Some(cycle);
        }
        path.push(module.to_string());
        for target in graph.get(module).into_iter().flatten() {
            if let Some(cycle) = visit(target, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|module| visit(module, graph, &mut done, &mut Vec::new()))
}

#[test]
fn engine_modules_form_a_graph_without_cycles_and_nothing_imports_db() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = sources(&root);
    let modules: BTreeSet<String> =
        files.iter().map(|file| module_of(file, &root)).filter(|module| module != "lib").collect();
    assert!(modules.len() >= 15, "{modules:?}");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(file, &root);
        if module == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(file).unwrap_or_default();
        // A module's own children and the test code inside it do not count as its imports.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let edges: BTreeSet<String> = imports(code, &modules)
            .into_iter()
            .filter(|target| target != &module && !target.starts_with(&format!("{module}::")))
            .filter(|target| !module.starts_with(&format!("{target}::")))
            .collect();
        graph.insert(module, edges);
    }
    for (module, edges) in &graph {
        if !module.starts_with("db") {
            assert!(
                !edges.iter().any(|target| target == "db" || target.starts_with("db::")),
                "{module} imports db: {edges:?}"
            );
        }
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import cycle: {}", cycle.join(" -> "));
    }
    eprintln!("{} modules, {} imports, no cycle", graph.len(), graph.values().map(BTreeSet::len).sum::<usize>());
}

#[test]
fn the_engine_never_names_the_checker() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(!text.contains("fsck"), "{} names fsck", file.display());
        assert!(!text.contains("lds_check"), "{} uses the checker", file.display());
    }
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml")).unwrap_or_default();
    let dependencies =
        manifest.split("[dependencies]").nth(1).and_then(|rest| rest.split('[').next()).unwrap_or_default();
    assert!(!dependencies.contains("lds-check"), "the engine depends on the checker");
}

#[test]
fn the_checker_does_not_depend_on_the_engine() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lds-check/Cargo.toml");
    let text = std::fs::read_to_string(&manifest).unwrap_or_else(|error| panic!("{}: {error}", manifest.display()));
    assert!(!text.contains("lds-engine"), "lds-check depends on lds-engine");
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lds-check/src");
    for file in sources(&root) {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(!text.contains("lds_engine"), "{} uses the engine", file.display());
    }
}

#[test]
fn the_scanner_finds_imports_and_the_search_finds_a_cycle() {
    let names = |names: &[&str]| names.iter().map(|name| name.to_string()).collect::<BTreeSet<String>>();
    let modules = names(&["a", "b", "b::c"]);
    let found = imports("use crate::b::c::Thing;\nuse crate::a;\nfn f() { crate::b::other(); }", &modules);
    assert_eq!(found, names(&["a", "b", "b::c"]));
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), names(&["b"]));
    graph.insert("b".to_string(), names(&["c"]));
    graph.insert("c".to_string(), names(&[]));
    assert_eq!(find_cycle(&graph), None);
    graph.insert("c".to_string(), names(&["a"]));
    assert_eq!(find_cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
}
