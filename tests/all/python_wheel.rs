//! The in-process Python package (`crates/python`, import name `spade`): built into the test
//! venv with `maturin develop` (incremental; the workspace's own dependency builds are reused),
//! then its pytest suite (`crates/python/tests`) runs against this build's `spade` binary.
//!
//! The suite checks, from Python: every fixture plays as `spade run --json` does; every sandbox
//! outcome raises its exception type; the escape corpus is contained; the GIL is released; a
//! recording replays with `spade replay`; `spade.compat.load_game_from_code` against CPython's
//! `exec` on every RLVE environment; TRL's GRPOTrainer through the in-process tool env; the
//! integrations with the stock packages (`execute_tool` of the reference's tool-use path,
//! Gymnasium's `check_env`, OpenEnv's server and client, skyrl-gym, and `vf-eval` of verifiers
//! 0.4 and `load_environment` of 0.3.1, each verifiers in a venv of its own).
//! Run it alone with `cargo test -p spade --test all python_wheel -- --nocapture`.

use std::process::Command;

use crate::common::repo_root;
use crate::serve::harness::python;

#[test]
fn the_wheel_builds_and_its_pytest_suite_passes() {
    let python = python();
    let venv = python.parent().unwrap().parent().unwrap().to_path_buf();
    let bin = venv.join("bin");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let built = Command::new(bin.join("maturin"))
        .args(["develop", "--quiet", "--manifest-path"])
        .arg(repo_root().join("crates").join("python").join("Cargo.toml"))
        .env("VIRTUAL_ENV", &venv)
        .env("PATH", &path)
        .current_dir(repo_root())
        .output()
        .expect("running maturin from the test venv (python/requirements-ci.txt installs it)");
    assert!(
        built.status.success(),
        "maturin develop failed:\n{}\n{}",
        String::from_utf8_lossy(&built.stdout),
        String::from_utf8_lossy(&built.stderr)
    );
    let tested = Command::new(&python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-rA",
            "--color=no",
            "-p",
            "no:cacheprovider",
        ])
        .arg(repo_root().join("crates").join("python").join("tests"))
        .env("SPADE_BIN", env!("CARGO_BIN_EXE_spade"))
        .env("SPADE_PYTHON", &python)
        .env("PATH", &path)
        .current_dir(repo_root())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&tested.stdout);
    println!("{stdout}");
    assert!(
        tested.status.success(),
        "the wheel's pytest suite failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&tested.stderr)
    );
}
