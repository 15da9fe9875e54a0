//! Fixture helpers shared by the two integration-test binaries: the `spade` package's
//! (`tests/all`) and the sandbox's own (`crates/sandbox/tests/all`). Both include this file with
//! `#[path]`, because the fixtures (`tests/envs/`, `tests/escape/`) belong to the repository,
//! not to one package.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use spade_sandbox::{Config, Limits, Runtime};

/// The repository root: the first ancestor of the package's directory that holds `wit/`.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .find(|dir| dir.join("wit").join("spade-env.wit").is_file())
        .expect("the package lives inside the spade repository")
        .to_path_buf()
}

/// `tests/envs/<name>`.
pub fn env_dir(name: &str) -> PathBuf {
    repo_root().join("tests").join("envs").join(name)
}

/// The source of fixture `name`.
pub fn env_source(name: &str) -> String {
    std::fs::read_to_string(env_dir(name).join("env.py")).unwrap()
}

/// The fixture's action lines.
pub fn env_actions(name: &str) -> Vec<String> {
    std::fs::read_to_string(env_dir(name).join("actions.txt"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Fixture names with the given prefix (or all good ones when `faults` is false).
pub fn fixtures(faults: bool) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("tests").join("envs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("fault_") == faults)
        .collect();
    names.sort();
    names
}

/// The escape and abuse corpus's programs (`tests/escape/*.py`), `(name, path)`, by name.
pub fn escape_programs() -> Vec<(String, PathBuf)> {
    let dir = repo_root().join("tests").join("escape");
    let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    names.sort();
    names
}

/// Limits small enough that fault tests finish quickly.
pub fn test_limits() -> Limits {
    Limits {
        fuel_per_call: 1_000_000_000,
        load_fuel: 4_000_000_000,
        memory_limit: 128 << 20,
        call_deadline: Duration::from_secs(60),
        output_limit: 64 << 10,
        ..Limits::default()
    }
}

/// One runtime per test process (building it maps the cached artifact).
pub fn runtime() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| Runtime::new(Config::default()).expect("runtime"))
        .with_limits(test_limits())
}
