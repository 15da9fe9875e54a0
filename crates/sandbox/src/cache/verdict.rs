//! Verdicts of checks that run on top of the sandbox (`spade check` as `spade serve` runs it on
//! every registered source), cached by a key the caller computes, so that a restarted server
//! does not check again a source it checked before under the same guest, limits and options.
//!
//! One file per guest artifact and key, framed and checked like the bytecode files: a damaged
//! file is ignored (and written again by the next check).

use sha2::{Digest, Sha256};

use crate::cache::code::{read_framed, write_framed};
use crate::cache::dir::CacheDir;

/// The first line of every verdict file.
const FORMAT: &str = "spade-verdict-1";

/// The directory of the verdict files, inside the cache directory.
pub(crate) const SUBDIR: &str = "verdicts";

/// The file name of the verdict cached under `key` by the guest `artifact_key`.
pub(crate) fn name(artifact_key: &str, key: &str) -> String {
    let mut hash = Sha256::new();
    for part in [FORMAT, artifact_key, key] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    format!("{}.verdict", &hex::encode(hash.finalize())[..32])
}

/// The cached verdict `name`, if it is there, private and intact.
pub(crate) fn read(dir: &CacheDir, name: &str) -> Option<Vec<u8>> {
    read_framed(dir, name, FORMAT)
}

/// Caches `verdict` as `name` (atomically, private), then removes the least recently used
/// verdict files (a read touches its file) until the folder holds at most `budget` bytes.
pub(crate) fn write(
    dir: &CacheDir,
    name: &str,
    verdict: &[u8],
    budget: u64,
) -> std::io::Result<()> {
    write_framed(dir, name, FORMAT, verdict)?;
    dir.trim_lru(budget, |file| file.ends_with(".verdict"));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_round_trip_and_damage_is_ignored() {
        let root = std::env::temp_dir().join(format!("spade-verdicts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = CacheDir::open(&root).unwrap().subdir(SUBDIR).unwrap();
        let name = name("artifact", "key");
        assert_ne!(name, super::name("artifact", "other key"));
        assert_ne!(name, super::name("other artifact", "key"));
        assert_eq!(read(&dir, &name), None);
        write(&dir, &name, b"{\"accepted\": true}", u64::MAX).unwrap();
        assert_eq!(
            read(&dir, &name).as_deref(),
            Some(&b"{\"accepted\": true}"[..])
        );
        let path = root.join(SUBDIR).join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(read(&dir, &name), None, "a damaged verdict is ignored");
        let _ = std::fs::remove_dir_all(&root);
    }
}
