//! House rules that the compiler and clippy do not check, run by `cargo test`.
//!
//! - No function outside test code is longer than [`MAX_FN_LINES`] lines, counted from the line
//!   of its `fn` keyword to the line of its closing brace. Test code is skipped: items under
//!   `#[cfg(test)]` (inline `mod tests { … }` blocks and out-of-line `mod tests;` files), `#[test]`
//!   functions, and every file under a `tests/` directory of `src/`.
//!
//! The sources are parsed with `syn` (spans carry lines through proc-macro2's `span-locations`),
//! so braces in strings, comments and raw strings cannot throw the count off.

// Test code: panicking on a broken expectation is the point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// The longest a non-test function may be, in lines.
const MAX_FN_LINES: usize = 100;

/// A function over the limit: where it starts, its name, its length.
#[derive(Debug, PartialEq)]
struct LongFn {
    file: PathBuf,
    line: usize,
    name: String,
    lines: usize,
}

impl std::fmt::Display for LongFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}:{} fn {} ({} lines)",
            self.file.display(),
            self.line,
            self.name,
            self.lines
        )
    }
}

/// Whether the attributes gate an item to test builds: `#[test]`, `#[cfg(test)]`, or a `cfg`
/// whose predicate names `test` outside a `not(…)` (`cfg(all(test, unix))`).
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        if a.path().is_ident("test") {
            return true;
        }
        if !a.path().is_ident("cfg") {
            return false;
        }
        let Ok(list) = a.meta.require_list() else {
            return false;
        };
        let predicate: String = list
            .tokens
            .to_string()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect();
        !predicate.contains("not(")
            && predicate
                .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                .any(|word| word == "test")
    })
}

/// Walks one parsed file: records every non-test function over the limit and the out-of-line
/// modules declared under `#[cfg(test)]` (whose files are test code too).
struct Walker<'a> {
    file: &'a Path,
    long: Vec<LongFn>,
    test_mods: Vec<String>,
}

impl Walker<'_> {
    fn check(&mut self, name: &syn::Ident, fn_token: &syn::token::Fn, body: &syn::Block) {
        let first = fn_token.span.start().line;
        let last = body.brace_token.span.close().end().line;
        let lines = last + 1 - first;
        if lines > MAX_FN_LINES {
            self.long.push(LongFn {
                file: self.file.to_path_buf(),
                line: first,
                name: name.to_string(),
                lines,
            });
        }
    }
}

impl<'ast> Visit<'ast> for Walker<'_> {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_test_only(&m.attrs) {
            if m.content.is_none() {
                self.test_mods.push(m.ident.to_string());
            }
            return;
        }
        syn::visit::visit_item_mod(self, m);
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        self.check(&f.sig.ident, &f.sig.fn_token, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if is_test_only(&i.attrs) {
            return;
        }
        syn::visit::visit_item_impl(self, i);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        self.check(&f.sig.ident, &f.sig.fn_token, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if is_test_only(&f.attrs) {
            return;
        }
        if let Some(body) = &f.default {
            self.check(&f.sig.ident, &f.sig.fn_token, body);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// The directory that holds the files of the modules `file` declares: its own directory for
/// `mod.rs`, `lib.rs` and `main.rs`, else the directory named after it (`a/b.rs` → `a/b/`).
fn child_dir(file: &Path) -> PathBuf {
    let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") | None => dir,
        Some(stem) => dir.join(stem),
    }
}

/// Every `.rs` file under `dir`, sorted, skipping `tests/` directories (test code).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "tests") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every non-test function over the limit in the `.rs` files under `root`.
fn long_fns(root: &Path) -> Vec<LongFn> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    // Files of `#[cfg(test)] mod x;` declarations: `x.rs` or `x/mod.rs` (and all under `x/`).
    let mut test_paths: Vec<PathBuf> = Vec::new();
    let mut long = Vec::new();
    for file in &files {
        if test_paths.iter().any(|t| file.starts_with(t)) {
            continue;
        }
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let parsed =
            syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: parse: {e}", file.display()));
        let shown = file
            .strip_prefix(root.parent().unwrap_or(root))
            .unwrap_or(file);
        let mut walker = Walker {
            file: shown,
            long: Vec::new(),
            test_mods: Vec::new(),
        };
        walker.visit_file(&parsed);
        let dir = child_dir(file);
        for m in walker.test_mods {
            test_paths.push(dir.join(format!("{m}.rs")));
            test_paths.push(dir.join(&m));
        }
        long.extend(walker.long);
    }
    // A test module's file may sort before the file that declares it: drop what it reported.
    long.retain(|l| {
        let full = root.parent().unwrap_or(root).join(&l.file);
        !test_paths.iter().any(|t| full.starts_with(t))
    });
    long
}

#[test]
fn no_non_test_function_over_100_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let long = long_fns(&src);
    let listed: Vec<String> = long.iter().map(ToString::to_string).collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (split them into helpers that own one part each):\n{}",
        listed.join("\n")
    );
}

/// The check itself: a 100-line function passes, a 101-line one is named with its length, and
/// test code (a `#[cfg(test)]` module inline or in its own file, a `tests/` directory, a
/// `#[test]` function) is not counted; braces in strings do not move the count.
#[test]
fn the_length_check_counts_from_fn_to_closing_brace() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("tests")).unwrap();
    std::fs::create_dir_all(src.join("a")).unwrap();
    // `fn` line + `body` lines + closing brace
    let func = |name: &str, body: usize| {
        let mut s = format!("fn {name}() {{\n");
        for _ in 0..body {
            s.push_str("    let _ = \"}}}\";\n");
        }
        s.push_str("}\n");
        s
    };
    let lib = format!(
        "mod a;\n#[cfg(test)]\nmod tests;\n{}\n/// doc\n#[inline]\n{}\nimpl S {{\n    {}}}\n\
         #[cfg(test)]\nmod inline {{\n{}}}\n#[test]\n{}",
        func("exactly_100", 98),
        func("over_by_one", 99),
        func("method_long", 120).replace('\n', "\n    "),
        func("in_test_mod", 200),
        func("a_test", 200),
    );
    std::fs::write(src.join("lib.rs"), lib).unwrap();
    std::fs::write(src.join("tests.rs"), func("test_file", 200)).unwrap();
    std::fs::write(src.join("tests/mod.rs"), func("test_dir", 200)).unwrap();
    std::fs::write(
        src.join("a.rs"),
        format!("#[cfg(test)]\nmod tests;\n{}", func("short", 3)),
    )
    .unwrap();
    std::fs::write(src.join("a/tests.rs"), func("nested_test_file", 200)).unwrap();

    let found: Vec<String> = long_fns(&src).iter().map(ToString::to_string).collect();
    assert_eq!(
        found,
        [
            "src/lib.rs:107 fn over_by_one (101 lines)",
            "src/lib.rs:210 fn method_long (122 lines)",
        ]
    );
}
