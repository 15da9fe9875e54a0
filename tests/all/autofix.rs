//! The automatic fixes (`spade_envtools::autofix`, `spade check --fix`, self-play's `auto_fix`):
//! hand-written broken sources (`tests/autofix/`) fail `spade check` as they are and pass after
//! the fixes, with the fixes expected by hand; every valid environment of the repository comes
//! back byte-identical; every name the import fix may add imports in the sandbox.

use serde_json::Value;
use spade_envtools::autofix::imports::{MODULES, NAMES};
use spade_envtools::check::{CheckOptions, check};
use spade_envtools::{FixKind, autofix};

use crate::common::{repo_root, runtime, spade, stdout};

fn broken(name: &str) -> (String, String) {
    let path = repo_root().join("tests").join("autofix").join(name);
    (
        path.display().to_string(),
        std::fs::read_to_string(&path).unwrap(),
    )
}

fn options() -> CheckOptions {
    CheckOptions {
        seeds: 2,
        ..CheckOptions::default()
    }
}

/// The fixes a file needs: `(kind, line)` each.
type Fixes = &'static [(FixKind, usize)];

/// `(file, its fixes, the check's code before the fixes)`, written by hand from each file's
/// planted mistakes.
const CASES: &[(&str, Fixes, &str)] = &[
    (
        "braces.py",
        &[(FixKind::FStringBrace, 14), (FixKind::FStringBrace, 14)],
        "load_failed",
    ),
    (
        "missing_import.py",
        &[(FixKind::MissingImport, 13)],
        "load_failed",
    ),
    (
        "both.py",
        &[(FixKind::FStringBrace, 15), (FixKind::MissingImport, 13)],
        "load_failed",
    ),
    (
        "format_call.py",
        &[(FixKind::FormatBrace, 14)],
        "load_failed",
    ),
];

#[tokio::test]
async fn broken_sources_fail_check_and_pass_after_the_fixes() {
    let runtime = runtime();
    for (name, want, code) in CASES {
        let (_, source) = broken(name);
        let before = check(&runtime, &source, &options()).await;
        assert!(!before.accepted, "{name} passes unfixed");
        assert_eq!(before.codes(), vec![*code], "{name}");
        let fixed = autofix(&source);
        let got: Vec<(FixKind, usize)> = fixed.fixes.iter().map(|f| (f.kind, f.line)).collect();
        assert_eq!(got, want.to_vec(), "{name}");
        let after = check(&runtime, &fixed.source, &options()).await;
        assert!(after.accepted, "{name}: {:#?}", after.findings);
        assert!(after.findings.is_empty(), "{name}: {:?}", after.codes());
        // Fixing again changes nothing.
        assert_eq!(autofix(&fixed.source).fixes, vec![], "{name}");
    }
}

#[test]
fn the_braces_and_the_import_are_fixed_where_they_were() {
    let (_, source) = broken("both.py");
    let fixed = autofix(&source).source;
    let want = source
        .replacen(
            "and add `import fractions`; the fixed env passes `spade check`.\"\"\"\n",
            "and add `import fractions`; the fixed env passes `spade check`.\"\"\"\nimport fractions\n",
            1,
        )
        .replacen("\\\\boxed{your answer}, a", "\\\\boxed{{your answer}}, a", 1);
    assert_ne!(want, source);
    assert_eq!(fixed, want);
}

/// Every environment source of the repository: the fixtures, the held-out `eval_envs/`, the
/// warm-start `library_envs/`, and the bundled starter environments.
fn repository_sources() -> Vec<(String, String)> {
    let root = repo_root();
    let mut sources = Vec::new();
    for folder in ["tests/envs", "eval_envs", "library_envs"] {
        let mut dirs: Vec<_> = std::fs::read_dir(root.join(folder))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.join("env.py").exists())
            .collect();
        dirs.sort();
        for dir in dirs {
            let source = std::fs::read_to_string(dir.join("env.py")).unwrap();
            let name = dir.strip_prefix(&root).unwrap().display().to_string();
            sources.push((name, source));
        }
    }
    for (name, source) in spade_selfplay::starter_envs::starter_envs() {
        sources.push((format!("starter {name}"), source));
    }
    sources
}

#[tokio::test]
async fn every_valid_environment_comes_back_byte_identical() {
    let runtime = runtime();
    let lenient = CheckOptions {
        seeds: 1,
        require_winning_solution: false,
        ..CheckOptions::default()
    };
    let mut accepted = 0;
    for (name, source) in repository_sources() {
        if check(&runtime, &source, &lenient).await.accepted {
            accepted += 1;
        }
        // Valid or not, no environment of the repository has a mistake the fixes repair.
        let fixed = autofix(&source);
        assert_eq!(fixed.fixes, vec![], "{name}");
        assert_eq!(fixed.source, source, "{name}");
    }
    // 14 fixtures (brace_crash among them at one seed), 4 held-out, 103 library and 6 starter
    // environments.
    assert_eq!(accepted, 127);
}

#[tokio::test]
async fn every_name_the_import_fix_adds_imports_in_the_sandbox() {
    let mut lines: Vec<String> = MODULES.iter().map(|m| format!("import {m}")).collect();
    lines.extend(NAMES.iter().map(|(n, m)| format!("from {m} import {n}")));
    let source = format!(
        "{}\n\nclass ImportsEnv:\n    def __init__(self, max_turns=1):\n        pass\n\n    \
         def reset(self, seed=None):\n        return 'ok', {{}}\n\n    def step(self, action):\n        \
         return 'done', 0.0, True, False, {{}}\n\n    def solution(self):\n        return '1'\n",
        lines.join("\n")
    );
    let mut sandbox = runtime()
        .sandbox(&source, spade_sandbox::SandboxOptions::seeded(0))
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    let reset = sandbox.reset(Some(0)).await.unwrap();
    assert_eq!(reset.observation, "ok");
}

#[test]
fn check_fix_checks_the_fixed_source_and_writes_it() {
    let (path, source) = broken("both.py");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fixed.py");
    let output = spade(&[
        "check",
        &path,
        "--seeds",
        "2",
        "--out",
        dir.path().join("findings").to_str().unwrap(),
        "--fix",
        "--fix-out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = stdout(&output);
    assert!(
        text.starts_with(
            "2 automatic fixes applied:\n  fixed: line 15: doubled the braces of `{your answer}` \
             in an f-string (words are not an expression; they were meant literally)\n  fixed: \
             line 13: added `import fractions` at the top (`fractions` is used there but never \
             imported)\nACCEPT "
        ),
        "{text}"
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        autofix(&source).source
    );
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains(&format!("the fixed source is in {}", out.display())),
        "{err}"
    );

    // Without --fix the same file is rejected; --json lists the fixes.
    let output = spade(&[
        "check",
        &path,
        "--seeds",
        "1",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let output = spade(&[
        "check",
        &path,
        "--seeds",
        "1",
        "--json",
        "--fix",
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    let json: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(json["accepted"], true);
    assert_eq!(json["fixes"][0]["kind"], "f_string_brace");
    assert_eq!(json["fixes"][1]["kind"], "missing_import");
    assert_eq!(json["fixes"][1]["line"], 13);

    // --fix-out needs --fix.
    let output = spade(&["check", &path, "--fix-out", out.to_str().unwrap()]);
    assert!(!output.status.success());
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("--fix"), "{err}");
}

/// Every `.py` file under `dir`, recursively, sorted.
fn python_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut paths: Vec<_> = entries.map(|e| e.unwrap().path()).collect();
    paths.sort();
    for path in paths {
        if path.is_dir() {
            python_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "py") {
            out.push(path);
        }
    }
}

/// The repository's other Python (the escape corpus, the serve and RLVE fixtures, the guest's
/// prelude, the Python package) parses and runs under CPython or the sandbox: the fixes leave
/// every file of it byte-identical, however unusual its syntax.
#[test]
fn every_python_file_of_the_repository_is_left_alone() {
    let root = repo_root();
    let mut files = Vec::new();
    for dir in [
        "tests",
        "guest/python",
        "crates/python/python",
        "crates/python/tests",
    ] {
        python_files(&root.join(dir), &mut files);
    }
    let broken = root.join("tests").join("autofix");
    files.retain(|p| !p.starts_with(&broken));
    assert!(files.len() > 50, "{}", files.len());
    for path in files {
        let Ok(source) = std::fs::read_to_string(&path) else {
            continue;
        };
        let fixed = autofix(&source);
        assert_eq!(fixed.fixes, vec![], "{}", path.display());
        assert_eq!(fixed.source, source, "{}", path.display());
    }
}
