//! What the sandbox keeps between processes and between sandboxes: the pre-initialised, compiled
//! guest ([`artifact`]), compiled environment bytecode ([`code`]), and load snapshots
//! ([`snapshot`]: how a sandbox is loaded, what a snapshot holds; [`snapshot_file`]: snapshots
//! on disk; [`snapshot_restore`]: writing one into a fresh sandbox's memory), and the verdicts
//! of checks that run over the sandbox ([`verdict`]).
//!
//! Every file is reached through the directory descriptors of [`dir`] (who may share a cache
//! and what is refused: docs/snapshots.md, "The cache's threat model"), written under an
//! exclusive temporary name and renamed, never changed in place, and read back into memory
//! only after its checksum and length check.

pub(crate) mod artifact;
pub(crate) mod code;
pub(crate) mod dir;
pub(crate) mod pagemap;
pub(crate) mod snapshot;
pub(crate) mod snapshot_file;
pub(crate) mod snapshot_restore;
pub(crate) mod verdict;

use std::path::Path;

use crate::error::RuntimeError;
use dir::CacheDir;

/// The open cache of one runtime (per process): the cache directory and the directories of
/// code and snapshot files in it, each opened and verified once, when the runtime is built.
#[derive(Debug)]
pub(crate) struct Cache {
    /// The cache directory: the compiled guest and its lock file.
    pub root: CacheDir,
    /// Compiled environment bytecode ([`code::SUBDIR`]).
    pub code: CacheDir,
    /// Load plans and snapshots ([`snapshot_file::SUBDIR`]).
    pub snapshots: CacheDir,
    /// Verdicts of checks over the sandbox ([`verdict::SUBDIR`]).
    pub verdicts: CacheDir,
}

impl Cache {
    /// Opens (creating what is missing) the cache at `path`; a directory that others could
    /// change is refused with an error that says why.
    pub fn open(path: &Path) -> Result<Cache, RuntimeError> {
        let refused = |message: String| RuntimeError::Cache {
            path: path.to_owned(),
            message,
        };
        let root = CacheDir::open(path).map_err(refused)?;
        let code = root.subdir(code::SUBDIR).map_err(refused)?;
        let snapshots = root.subdir(snapshot_file::SUBDIR).map_err(refused)?;
        let verdicts = root.subdir(verdict::SUBDIR).map_err(refused)?;
        Ok(Cache {
            root,
            code,
            snapshots,
            verdicts,
        })
    }
}
