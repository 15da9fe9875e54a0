//! Builds the RustPython guest for wasm32-wasip2 with a nested cargo invocation (the guest is its
//! own workspace with its own lockfile and pins) and hands its path and sha256 to the crate.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

const TARGET: &str = "wasm32-wasip2";

fn main() {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest_dir
        .ancestors()
        .nth(2)
        .expect("the sandbox crate lives in crates/sandbox of the workspace");
    let guest = root.join("guest");
    // Cargo treats a watched path that does not exist as changed on every build, so only paths
    // that exist are watched (a missing `.cargo/config.toml` would rebuild the host every time).
    for path in ["src", "python", "Cargo.toml", "Cargo.lock", ".cargo"] {
        let path = guest.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    println!("cargo:rerun-if-changed={}", root.join("wit").display());
    // The guest's allocator is a crate of the main workspace (tested natively there).
    for path in ["src", "Cargo.toml"] {
        println!(
            "cargo:rerun-if-changed={}",
            root.join("crates").join("guest-alloc").join(path).display()
        );
    }
    println!("cargo:rerun-if-env-changed=SPADE_GUEST_WASM_OVERRIDE");

    let wasm = match std::env::var_os("SPADE_GUEST_WASM_OVERRIDE") {
        Some(path) => PathBuf::from(path),
        None => build_guest(&guest),
    };
    let bytes = std::fs::read(&wasm).unwrap_or_else(|e| panic!("reading {}: {e}", wasm.display()));
    let digest = hex::encode(Sha256::digest(&bytes));
    println!("cargo:rustc-env=SPADE_GUEST_WASM={}", wasm.display());
    println!("cargo:rustc-env=SPADE_GUEST_SHA256={digest}");
}

/// Cargo captures a build script's output and shows only `Building ... spade-sandbox(build)`
/// while the nested guest build runs (about 10 minutes the first time). When the build runs on
/// a terminal, say what is happening there and let the nested cargo print its progress to it;
/// without one (CI, an IDE) the output stays captured and is shown if the build fails.
fn show_progress_on_terminal(cmd: &mut Command, target_dir: &Path) {
    let Ok(mut tty) = std::fs::OpenOptions::new().write(true).open("/dev/tty") else {
        return;
    };
    let Ok(for_cargo) = tty.try_clone() else {
        return;
    };
    let _ = writeln!(
        tty,
        "\nspade-sandbox build script: building the RustPython guest for {TARGET} with a nested \
         cargo (the first time about 10 minutes on 2 cores; cached in {}, shared by every \
         profile)",
        target_dir.display()
    );
    cmd.stderr(for_cargo)
        .env("CARGO_TERM_PROGRESS_WHEN", "never")
        .env("CARGO_TERM_COLOR", "never");
}

/// `<target-dir>/guest`, shared by every profile of the host build.
fn guest_target_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(dir).join("guest");
    }
    // OUT_DIR is <target-dir>[/<triple>]/<profile>/build/<pkg>/out.
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let profile_dir = out.ancestors().nth(3).expect("OUT_DIR has the usual shape");
    let mut dir = profile_dir
        .parent()
        .expect("profile dir has a parent")
        .to_path_buf();
    if dir.file_name().and_then(|n| n.to_str()) == std::env::var("TARGET").ok().as_deref() {
        dir.pop();
    }
    dir.join("guest")
}

fn build_guest(guest: &Path) -> PathBuf {
    let target_dir = guest_target_dir();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(guest)
        .args([
            "build",
            "--release",
            "--locked",
            "--ignore-rust-version",
            "--target",
            TARGET,
        ])
        .arg("--target-dir")
        .arg(&target_dir);
    // The outer build's flags and target settings are for the host, not for the guest.
    show_progress_on_terminal(&mut cmd, &target_dir);
    for var in [
        "CARGO_ENCODED_RUSTFLAGS",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO_PRIMARY_PACKAGE",
        "RUSTC_WORKSPACE_WRAPPER",
        "CARGO_MANIFEST_DIR",
        "CARGO_PKG_NAME",
    ] {
        cmd.env_remove(var);
    }
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("could not run cargo to build the guest: {e}"));
    if !status.success() {
        panic!(
            "building the spade guest for {TARGET} failed (see the output above). \
             If the target is missing, install it with `rustup target add {TARGET}`; \
             a toolchain without it (nightly, for cargo-fuzz) can use a guest built by another: \
             set SPADE_GUEST_WASM_OVERRIDE to its spade_guest.wasm."
        );
    }
    target_dir
        .join(TARGET)
        .join("release")
        .join("spade_guest.wasm")
}
