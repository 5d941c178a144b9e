//! One direction of dependency: `.ci/import_loops.py` finds no import loop in the
//! tree, and does find one where there is one (a checker that sees nothing would
//! pass the first test forever). The script is what `.ci/run` runs; here it also runs
//! with `cargo test`. It needs `python3` (as the bench and OTLP tests do).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn check(root: &Path, extra: &[&str]) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/import_loops.py");
    Command::new("python3")
        .arg(script)
        .arg("--root")
        .arg(root)
        .args(extra)
        .output()
        .expect("python3 runs .ci/import_loops.py")
}

fn text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

#[test]
fn no_import_loop_in_the_tree() {
    let out = check(Path::new(env!("CARGO_MANIFEST_DIR")), &[]);
    assert!(out.status.success(), "an import loop (fix it, don't allow it):\n{}", text(&out));
}

/// A crate and a script folder written to a temp dir: `files` as (path, text).
fn tree(tag: &str, files: &[(&str, &str)]) -> PathBuf {
    let root = std::env::temp_dir().join(format!("raylog-import-loops-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    for (rel, body) in files {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, body).unwrap();
    }
    root
}

#[test]
fn finds_and_prints_a_loop() {
    let root = tree(
        "loop",
        &[
            // `crate::c` in a doc comment and in a string is not code.
            (
                "src/lib.rs",
                "//! [`crate::b`]\npub mod a;\npub mod b;\npub mod c {\n    pub fn f() { super::a::g() }\n}\n",
            ),
            ("src/a.rs", "use crate::b::Thing;\npub fn g() { let _ = \"crate::c::f()\"; }\n"),
            ("src/b.rs", "pub struct Thing;\npub fn h() { crate::c::f() }\n"),
            ("bench/x.py", "import y\n"),
            ("bench/y.py", "def f():\n    import x\n"),
        ],
    );
    let out = check(&root, &["--edges"]);
    let t = text(&out);
    assert_eq!(out.status.code(), Some(1), "{t}");
    assert!(t.contains("  raylog::a -> raylog::b -> raylog::c -> raylog::a\n"), "{t}");
    assert!(t.contains("raylog::c -> raylog::a    (src/lib.rs:5)"), "{t}");
    assert!(t.contains("  bench/x.py -> bench/y.py -> bench/x.py\n"), "{t}");
    assert!(t.contains("5 edges, 2 import loop(s)"), "{t}");
    let _ = std::fs::remove_dir_all(root);
}

#[test]
fn a_parent_and_its_parts_are_one_room() {
    let files = [
        ("src/lib.rs", "pub mod p;\n"),
        // The re-export is a facade: not an edge from p.
        ("src/p/mod.rs", "mod kid;\nmod other;\npub use kid::Api;\npub struct Shared;\npub fn run() { kid::go() }\n"),
        ("src/p/kid.rs", "use super::Shared;\npub struct Api;\npub fn go() {}\n"),
        ("src/p/other.rs", "use super::Api;\npub fn f() {}\n"),
    ];
    let root = tree("room", &files);
    let out = check(&root, &["--edges"]);
    let t = text(&out);
    assert!(out.status.success(), "{t}");
    assert!(t.contains("raylog::p::other -> raylog::p::kid"), "a re-export resolves to its origin: {t}");
    assert!(!t.contains("raylog::p -> raylog::p::kid    (src/p/mod.rs:3)"), "{t}");
    let strict = check(&root, &["--strict"]);
    assert_eq!(strict.status.code(), Some(1), "{}", text(&strict));
    assert!(text(&strict).contains("  raylog::p -> raylog::p::kid -> raylog::p\n"), "{}", text(&strict));
    // Siblings using each other are two rooms tied together, whatever their parent.
    let root = tree(
        "siblings",
        &[files[0], files[1], ("src/p/kid.rs", "pub struct Api;\npub fn go() { super::other::f() }\n"), files[3]],
    );
    let t = text(&check(&root, &[]));
    assert!(t.contains("  raylog::p::kid -> raylog::p::other -> raylog::p::kid\n"), "{t}");
    let _ = std::fs::remove_dir_all(root);
}
