//! Tidy: the workspace's own text — docs, manifests, command lists — checked
//! against the code, so that it stays true as the code moves (in the spirit
//! of rust-analyzer's `tidy` test). Nothing here builds or runs anything: each
//! test reads files relative to the workspace root and reports every problem
//! it finds at once, each with what to change.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, Item, Table};

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the workspace")
        .to_path_buf()
}

/// The text of `rel` (a path from the workspace root).
fn read(rel: impl AsRef<Path>) -> String {
    let path = root().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Fails with every problem, one a line, if there are any.
fn report(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{what}: {} problem(s)\n  {}",
        problems.len(),
        problems.join("\n  ")
    );
}

/// One member of the workspace.
struct Crate {
    /// Its package name.
    name: String,
    /// Its directory, relative to the workspace root.
    dir: PathBuf,
    manifest: DocumentMut,
}

/// The members of the workspace, as the root manifest's `members` lists
/// them (`dir/*` is every directory in `dir` with a Cargo.toml).
fn workspace_crates() -> Vec<Crate> {
    let root_manifest: DocumentMut = read("Cargo.toml").parse().expect("root Cargo.toml");
    let members = root_manifest["workspace"]["members"]
        .as_array()
        .expect("workspace.members is an array");
    let mut dirs = Vec::new();
    for member in members.iter().filter_map(|m| m.as_str()) {
        match member.strip_suffix("/*") {
            Some(parent) => {
                let entries = fs::read_dir(root().join(parent)).expect(parent);
                for entry in entries {
                    let dir = Path::new(parent).join(entry.expect(parent).file_name());
                    if root().join(&dir).join("Cargo.toml").is_file() {
                        dirs.push(dir);
                    }
                }
            }
            None => dirs.push(PathBuf::from(member)),
        }
    }
    dirs.sort();
    dirs.into_iter()
        .map(|dir| {
            let manifest: DocumentMut = read(dir.join("Cargo.toml"))
                .parse()
                .unwrap_or_else(|e| panic!("{}/Cargo.toml: {e}", dir.display()));
            let name = manifest["package"]["name"]
                .as_str()
                .unwrap_or_else(|| panic!("{}/Cargo.toml has no package.name", dir.display()))
                .to_owned();
            Crate {
                name,
                dir,
                manifest,
            }
        })
        .collect()
}

/// Which table a dependency is declared in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Normal,
    Dev,
    Build,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Normal, Kind::Dev, Kind::Build];

    fn table(self) -> &'static str {
        match self {
            Kind::Normal => "dependencies",
            Kind::Dev => "dev-dependencies",
            Kind::Build => "build-dependencies",
        }
    }
}

/// One declared dependency.
struct Dep {
    /// The key it is declared under: the name the code uses (`-` as `_`).
    key: String,
    /// The package it names (`package = "…"`, else the key).
    package: String,
    kind: Kind,
    /// Whether the entry carries its own comment (on the lines just above
    /// it, or at the end of its line).
    commented: bool,
}

/// Every dependency `c` declares, target-specific tables included.
fn deps(c: &Crate) -> Vec<Dep> {
    let mut tables: Vec<(Kind, &Table)> = Vec::new();
    for kind in Kind::ALL {
        if let Some(t) = c.manifest.get(kind.table()).and_then(Item::as_table) {
            tables.push((kind, t));
        }
        let targets = c.manifest.get("target").and_then(Item::as_table);
        for (_, target) in targets.into_iter().flat_map(Table::iter) {
            if let Some(t) = target.get(kind.table()).and_then(Item::as_table) {
                tables.push((kind, t));
            }
        }
    }
    let mut out = Vec::new();
    for (kind, table) in tables {
        for (key, item) in table.iter() {
            let package = item
                .get("package")
                .and_then(Item::as_str)
                .unwrap_or(key)
                .to_owned();
            out.push(Dep {
                key: key.to_owned(),
                package,
                kind,
                commented: carries_comment(table, key),
            });
        }
    }
    out
}

/// Whether the entry `key` of `table` has a comment of its own: in the
/// decor before its key (the lines just above it) or after its value (the
/// end of its line), dotted keys (`name.workspace = true`) included.
fn carries_comment(table: &Table, key: &str) -> bool {
    fn commented(s: Option<&toml_edit::RawString>) -> bool {
        s.and_then(|s| s.as_str()).is_some_and(|s| s.contains('#'))
    }
    fn item_commented(item: &Item) -> bool {
        match item {
            Item::Value(v) => commented(v.decor().prefix()) || commented(v.decor().suffix()),
            Item::Table(t) => t.iter().any(|(k, i)| {
                let key = t.key(k).expect("iterated key");
                commented(key.leaf_decor().prefix())
                    || commented(key.dotted_decor().prefix())
                    || item_commented(i)
            }),
            _ => false,
        }
    }
    let Some(k) = table.key(key) else {
        return false;
    };
    commented(k.leaf_decor().prefix())
        || commented(k.dotted_decor().prefix())
        || table.get(key).is_some_and(item_commented)
}

/// The `.rs` files under `dir` (a file or a directory), recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    if dir.is_file() {
        if dir.extension().is_some_and(|e| e == "rs") {
            out.push(dir.to_path_buf());
        }
        return;
    }
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<PathBuf> = entries.map(|e| e.expect("dir entry").path()).collect();
    paths.sort();
    for p in paths {
        rust_files(&p, out);
    }
}

/// The sources a dependency of `kind` may be used from: `src/` (or, for a
/// crate without `src/` such as `tests/`, every `.rs` file but `build.rs`),
/// plus `tests/`, `benches/` and `examples/` for dev-dependencies, and only
/// `build.rs` for build-dependencies.
fn sources(c: &Crate, kind: Kind) -> Vec<PathBuf> {
    let dir = root().join(&c.dir);
    let mut out = Vec::new();
    if kind == Kind::Build {
        rust_files(&dir.join("build.rs"), &mut out);
        return out;
    }
    if !dir.join("src").is_dir() {
        rust_files(&dir, &mut out);
        out.retain(|p| p != &dir.join("build.rs"));
        return out;
    }
    rust_files(&dir.join("src"), &mut out);
    if kind == Kind::Dev {
        for sub in ["tests", "benches", "examples"] {
            rust_files(&dir.join(sub), &mut out);
        }
    }
    out
}

/// Whether `text` uses the crate whose library is `lib`: as a path
/// (`lib::…`), in `use lib` or in `extern crate lib`. Comments count too (a
/// doc test is a use), so this is a cheap guard, not a proof.
fn uses(text: &str, lib: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(lib).any(|(i, _)| {
        let before = &text[..i];
        let after = &text[i + lib.len()..];
        if before.chars().next_back().is_some_and(ident) {
            return false;
        }
        if after.starts_with("::") {
            return true;
        }
        if after.chars().next().is_some_and(ident) {
            return false;
        }
        let before = before.trim_end();
        ["use", "extern crate"].iter().any(|word| {
            before
                .strip_suffix(word)
                .is_some_and(|b| !b.chars().next_back().is_some_and(ident))
        })
    })
}

/// The crate names a code-map cell lists: parenthesised notes dropped,
/// comma-separated, `—` for none; `a-b/c/d` is `a-b`, `a-c`, `a-d`.
fn listed_crates(cell: &str) -> Result<BTreeSet<String>, String> {
    let mut text = String::new();
    let mut depth = 0usize;
    for ch in cell.chars() {
        match ch {
            '(' => depth += 1,
            ')' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or(format!("unbalanced `)` in `{cell}`"))?
            }
            _ if depth == 0 => text.push(ch),
            _ => {}
        }
    }
    if depth != 0 {
        return Err(format!("unbalanced `(` in `{cell}`"));
    }
    let mut names = BTreeSet::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item == "—" {
            continue;
        }
        let crate_name = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
        };
        let mut parts = item.split('/');
        let first = parts.next().unwrap_or_default();
        let rest: Vec<&str> = parts.collect();
        if !crate_name(first) || !rest.iter().all(|r| crate_name(r)) {
            return Err(format!(
                "`{item}` is not a crate name (notes go in parentheses)"
            ));
        }
        names.insert(first.to_owned());
        if !rest.is_empty() {
            let Some(dash) = first.rfind('-') else {
                return Err(format!(
                    "`{item}`: an abbreviation needs a `prefix-` to share"
                ));
            };
            for r in rest {
                names.insert(format!("{}{r}", &first[..=dash]));
            }
        }
    }
    Ok(names)
}

/// The cells of a Markdown table row (`\|` is a pipe inside a cell).
fn cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = vec![String::new()];
    let mut chars = inner.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '\\' if chars.peek() == Some(&'|') => {
                out.last_mut().unwrap().push('|');
                chars.next();
            }
            '|' => out.push(String::new()),
            _ => out.last_mut().unwrap().push(ch),
        }
    }
    out.iter().map(|c| c.trim().to_owned()).collect()
}

#[test]
fn the_code_map_names_every_crate_and_its_weft_dependencies() {
    let doc = read("docs/ARCHITECTURE.md");
    let start = doc
        .find("\n## Code map")
        .expect("docs/ARCHITECTURE.md has a `## Code map` section");
    let section = &doc[start + 1..];
    let section = &section[..section[1..].find("\n## ").map_or(section.len(), |e| e + 1)];
    let mut problems = Vec::new();
    let mut rows: Vec<(String, String)> = Vec::new();
    for line in section.lines().filter(|l| l.trim_start().starts_with('|')) {
        let cells = cells(line);
        if cells[0] == "crate" || cells[0].starts_with("---") {
            continue;
        }
        let [name, _job, depends] = &cells[..] else {
            problems.push(format!(
                "row `{line}`: want | `crate` | one job | depends on |"
            ));
            continue;
        };
        match name.strip_prefix('`').and_then(|n| n.strip_suffix('`')) {
            Some(n) if !n.contains('`') => rows.push((n.to_owned(), depends.clone())),
            _ => problems.push(format!(
                "row `{name}`: the first cell is the package name in backticks"
            )),
        }
    }
    let crates = workspace_crates();
    let members: BTreeSet<&str> = crates.iter().map(|c| c.name.as_str()).collect();
    let mut seen = BTreeSet::new();
    for (name, _) in &rows {
        if !seen.insert(name.as_str()) {
            problems.push(format!("`{name}` has two rows"));
        }
        if !members.contains(name.as_str()) {
            problems.push(format!("`{name}` has a row but is not a workspace crate"));
        }
    }
    for c in &crates {
        let Some((_, depends)) = rows.iter().find(|(n, _)| *n == c.name) else {
            problems.push(format!("`{}` ({}) has no row", c.name, c.dir.display()));
            continue;
        };
        let listed = match listed_crates(depends) {
            Ok(l) => l,
            Err(e) => {
                problems.push(format!("`{}`: {e}", c.name));
                continue;
            }
        };
        let normal: BTreeSet<String> = deps(c)
            .into_iter()
            .filter(|d| d.kind == Kind::Normal)
            .map(|d| d.package)
            .collect();
        let weft = |s: &BTreeSet<String>| -> BTreeSet<String> {
            s.iter()
                .filter(|n| n.starts_with("weft-"))
                .cloned()
                .collect()
        };
        let (listed_weft, normal_weft) = (weft(&listed), weft(&normal));
        for missing in normal_weft.difference(&listed_weft) {
            problems.push(format!(
                "`{}` depends on `{missing}`: add it to its row",
                c.name
            ));
        }
        for extra in listed.difference(&normal) {
            problems.push(format!(
                "`{}`'s row names `{extra}`, not in its [dependencies]: drop it (or put a note in parentheses)",
                c.name
            ));
        }
    }
    report("docs/ARCHITECTURE.md's code map", &problems);
}

#[test]
fn no_declared_dependency_is_unused() {
    let crates = workspace_crates();
    let mut problems = Vec::new();
    let mut declared_from_workspace = BTreeSet::new();
    for c in &crates {
        for dep in deps(c) {
            declared_from_workspace.insert(dep.key.clone());
            if dep.commented {
                continue; // Its comment says why it is there.
            }
            let lib = dep.key.replace('-', "_");
            let files = sources(c, dep.kind);
            let used = files
                .iter()
                .any(|f| uses(&fs::read_to_string(f).unwrap_or_default(), &lib));
            if !used {
                let where_ = match dep.kind {
                    Kind::Normal => "src/",
                    Kind::Dev => "src/, tests/, benches/ or examples/",
                    Kind::Build => "build.rs",
                };
                problems.push(format!(
                    "{}/Cargo.toml: [{}] `{}` is not used by {where_}: remove it, or say why it is needed in a comment on its entry",
                    c.dir.display(),
                    dep.kind.table(),
                    dep.key
                ));
            }
        }
    }
    let root_manifest: DocumentMut = read("Cargo.toml").parse().expect("root Cargo.toml");
    let pinned = root_manifest["workspace"]["dependencies"]
        .as_table()
        .expect("[workspace.dependencies]");
    for (key, _) in pinned.iter() {
        if !declared_from_workspace.contains(key) {
            problems.push(format!(
                "Cargo.toml: [workspace.dependencies] `{key}` is used by no member: remove it"
            ));
        }
    }
    report("unused dependencies", &problems);
}

/// The strings of `const COMMANDS: &[&str]` in xtask/src/main.rs.
fn xtask_commands() -> Vec<String> {
    let main = read("xtask/src/main.rs");
    let decl = "const COMMANDS: &[&str] = &[";
    let start = main
        .find(decl)
        .expect("xtask/src/main.rs declares `const COMMANDS`")
        + decl.len();
    let list = &main[start..start + main[start..].find("];").expect("COMMANDS ends with `];`")];
    list.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

#[test]
fn readme_lists_every_xtask_command() {
    let readme = read("README.md");
    let commands = xtask_commands();
    assert!(commands.len() > 5, "too few commands read: {commands:?}");
    let mut problems = Vec::new();
    for command in &commands {
        let quoted = format!("cargo xtask {command}");
        let listed = readme.match_indices(&quoted).any(|(i, _)| {
            let next = readme[i + quoted.len()..].chars().next();
            !next.is_some_and(|c| c.is_alphanumeric() || c == '-' || c == '_')
        });
        if !listed {
            problems.push(format!("README.md does not list `{quoted}`"));
        }
    }
    report("README.md's contributor commands", &problems);
}

#[test]
fn xtask_parses_its_arguments_with_clap() {
    let main = read("xtask/src/main.rs");
    assert!(
        main.contains("#[derive(Parser") && main.contains("Cli::parse()"),
        "xtask/src/main.rs parses its command line with clap's derive (`Cli::parse()`)"
    );
    // `std::env::args` only where xtask re-runs itself with the same arguments.
    let rerun = main
        .find("fn rerun_in_release")
        .expect("xtask/src/main.rs has `fn rerun_in_release`");
    let open = rerun + main[rerun..].find('{').expect("a body");
    let mut depth = 0;
    let mut close = open;
    for (i, ch) in main[open..].char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            _ => {}
        }
        if depth == 0 {
            close = open + i;
            break;
        }
    }
    let mut problems = Vec::new();
    for (i, _) in main.match_indices("env::args") {
        if !(open..close).contains(&i) {
            let line = main[..i].lines().count();
            problems.push(format!(
                "xtask/src/main.rs:{line} reads `env::args` outside `rerun_in_release`"
            ));
        }
    }
    let mut files = Vec::new();
    rust_files(&root().join("xtask/src"), &mut files);
    for f in files.iter().filter(|f| !f.ends_with("main.rs")) {
        if fs::read_to_string(f)
            .unwrap_or_default()
            .contains("env::args")
        {
            problems.push(format!(
                "{} reads `env::args`: take arguments from main's `Cli`",
                f.display()
            ));
        }
    }
    report("xtask's argument parsing", &problems);
}

#[test]
fn the_tidy_readers_read_what_they_should() {
    assert!(uses("use half::f16;", "half"));
    assert!(uses("let x = ::half::f16::ZERO;", "half"));
    assert!(uses("extern crate libc;", "libc"));
    assert!(uses("pub use weft_kernel;", "weft_kernel"));
    assert!(!uses("let half = 2; half.max(1)", "half"));
    assert!(!uses("weft_kernels::x", "weft_kernel"));
    assert!(!uses("reuse half", "half"));
    assert_eq!(
        listed_crates("cranelift-codegen/frontend/native, iced-x86 (bytes), weft-a64 (exp, arms)")
            .unwrap(),
        [
            "cranelift-codegen",
            "cranelift-frontend",
            "cranelift-native",
            "iced-x86",
            "weft-a64"
        ]
        .map(String::from)
        .into()
    );
    assert!(listed_crates("— (weft-x only for tests)")
        .unwrap()
        .is_empty());
    assert!(listed_crates("everything but the kitchen sink").is_err());
    assert_eq!(
        cells("| `xtask` | `a\\|b` | c, d |"),
        ["`xtask`", "`a|b`", "c, d"]
    );
}
