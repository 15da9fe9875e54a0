//! Compiled bytecode of environment sources, cached on disk beside the snapshots, so that a
//! new process does not compile again a source an earlier one compiled (a throwaway sandbox
//! and RustPython's compiler: most of what a process start costs after the runtime is up).
//!
//! One file per guest artifact, source and set of limits (the compile runs under the load
//! limits, so a compile that succeeded under larger ones says nothing about smaller ones).
//! Only successful compiles are kept. Files are private and checked like every cached
//! artifact; a damaged file (wrong length or sha256) is ignored and written again.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::cache::dir::CacheDir;
use crate::config::Limits;

/// The first line of every code file; the bytecode follows it.
const FORMAT: &str = "spade-code-1";

/// The directory of the code files, inside the cache directory.
pub(crate) const SUBDIR: &str = "code";

/// The file name (in [`SUBDIR`]) of the bytecode of `source_sha256` compiled under `limits` by
/// the guest `artifact_key`.
pub(crate) fn name(artifact_key: &str, source_sha256: &str, limits: &Limits) -> String {
    let mut hash = Sha256::new();
    for part in [FORMAT, artifact_key, source_sha256, &format!("{limits:?}")] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let name = hex::encode(hash.finalize());
    format!("{}.code", &name[..32])
}

/// Where that bytecode is cached under the cache directory `dir`.
pub(crate) fn path(
    dir: &Path,
    artifact_key: &str,
    source_sha256: &str,
    limits: &Limits,
) -> PathBuf {
    dir.join(SUBDIR)
        .join(name(artifact_key, source_sha256, limits))
}

/// The cached bytecode `name` in `dir`, if it is there, private and intact (a read is a use:
/// it touches the file, so [`write`]'s trim removes it last).
pub(crate) fn read(dir: &CacheDir, name: &str) -> Option<Vec<u8>> {
    read_framed(dir, name, FORMAT)
}

/// Caches `code` as the file `name` in `dir` (atomically, private), then removes the least
/// recently used code files until the folder holds at most `budget` bytes.
pub(crate) fn write(dir: &CacheDir, name: &str, code: &[u8], budget: u64) -> std::io::Result<()> {
    write_framed(dir, name, FORMAT, code)?;
    dir.trim_lru(budget, |file| file.ends_with(".code"));
    Ok(())
}

/// The body of the file `name` whose first line is `"{format} {len} {sha256}"`, if it is there,
/// private and intact.
pub(crate) fn read_framed(dir: &CacheDir, name: &str, format: &str) -> Option<Vec<u8>> {
    let bytes = dir.read(name).ok()??;
    // A use: the least recently used files of the folder are the first removed.
    let _ = dir.touch(name);
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let header = std::str::from_utf8(&bytes[..newline]).ok()?;
    let mut fields = header.split(' ');
    let (found, len, sha256) = (fields.next()?, fields.next()?, fields.next()?);
    let body = &bytes[newline + 1..];
    let intact = found == format
        && fields.next().is_none()
        && len.parse::<usize>().ok()? == body.len()
        && hex::encode(Sha256::digest(body)) == sha256;
    intact.then(|| body.to_vec())
}

/// Writes `body` as the file `name` under a `"{format} {len} {sha256}"` line (atomically,
/// private).
pub(crate) fn write_framed(
    dir: &CacheDir,
    name: &str,
    format: &str,
    body: &[u8],
) -> std::io::Result<()> {
    let header = format!(
        "{format} {} {}\n",
        body.len(),
        hex::encode(Sha256::digest(body))
    );
    dir.write_atomic(name, &[header.as_bytes(), body])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytecode_round_trips_and_damage_is_ignored() {
        let root = std::env::temp_dir().join(format!("spade-code-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = CacheDir::open(&root).unwrap().subdir(SUBDIR).unwrap();
        let name = name("artifact", "source", &Limits::default());
        let file = path(&root, "artifact", "source", &Limits::default());
        assert_eq!(file, dir.path().join(&name));
        assert!(read(&dir, &name).is_none(), "nothing is cached yet");
        write(&dir, &name, b"\x00bytecode\nwith a newline", u64::MAX).unwrap();
        assert_eq!(read(&dir, &name).unwrap(), b"\x00bytecode\nwith a newline");
        let mut bytes = std::fs::read(&file).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        std::fs::write(&file, &bytes).unwrap();
        assert!(
            read(&dir, &name).is_none(),
            "a damaged file must not be used"
        );
        bytes.pop();
        std::fs::write(&file, &bytes).unwrap();
        assert!(
            read(&dir, &name).is_none(),
            "a truncated file must not be used"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_key_covers_guest_source_and_limits() {
        let dir = Path::new("/cache");
        let base = path(dir, "a", "s", &Limits::default());
        assert_ne!(base, path(dir, "b", "s", &Limits::default()));
        assert_ne!(base, path(dir, "a", "t", &Limits::default()));
        let smaller = Limits {
            load_fuel: 1,
            ..Limits::default()
        };
        assert_ne!(base, path(dir, "a", "s", &smaller));
        assert_eq!(base, path(dir, "a", "s", &Limits::default()));
    }
}
