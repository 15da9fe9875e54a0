//! Recorded trajectories (`spade serve --record-dir DIR`): where each tenant's files live, who
//! may download them, how many bytes a tenant may record, and how many downloads run at once.
//!
//! **Ownership on disk.** A recording belongs to the tenant (bearer token) whose session
//! played it, and the directory it lies in says so, so that ownership survives a restart and
//! a reordered token file:
//!
//! - a server without tokens has one tenant, whose recordings are `DIR/<episode_id>.jsonl`;
//! - with `--token-file`, a token's recordings are `DIR/tenant-<key>/<episode_id>.jsonl`,
//!   `<key>` the first 16 bytes (hex) of sha256 of `"spade-serve tenant\0"` and the token (the
//!   token itself is not written anywhere).
//!
//! `GET /trajectories/{id}` looks only in the caller's directory: another token's episode is
//! "no trajectory" (404, the same answer as an id nobody used, so ids cannot be probed).
//! Episode ids are namespaced by tenant the same way: one token choosing id `X` does not stop
//! another from choosing `X` too; within one tenant an id already recorded is refused.
//!
//! **Record quota.** Each tenant may hold [`DEFAULT_MAX_RECORD_BYTES`] of recordings
//! (`--max-record-bytes`), counted from the files in its directory at start and every byte
//! written since. A reset, step or fork of a recorded session whose tenant is at or over it is
//! refused before it runs, with [`SessionError::RecordQuota`] naming the flag: the episode is
//! left as it was and its trajectory stays complete up to the last call that ran, so nothing
//! the client saw is missing from it and nothing runs unrecorded. One call may pass the quota
//! by what it writes (bounded by the message and observation limits); the next is refused.
//! Before refusing, the tenant's directory is measured again (at most once a second), so
//! recordings an operator removed count off within a second.
//!
//! **Downloads** are streamed from the file in [`DOWNLOAD_CHUNK`] pieces (a download holds one
//! chunk, not the file) and at most [`DEFAULT_MAX_DOWNLOADS`] run at once
//! (`--max-downloads`); one more is answered 503 at once.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::registry::Tenant;
use crate::session::SessionError;

/// Default bytes of recordings per tenant: 4 GiB. A trajectory of a typical episode is a few
/// KiB to a few MiB, so this holds thousands to millions of episodes, while a client that
/// records as fast as it can (about 140 MiB/s from one client was measured) fills it in
/// about 30 s instead of filling the disk; an operator reserves tokens x this on disk.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 4 << 30;

/// Default trajectory downloads at once: 16. Each holds one open file and one
/// [`DOWNLOAD_CHUNK`] buffer, so 16 bound file descriptors and disk reads while letting a
/// trainer fetch a group's trajectories in parallel.
pub const DEFAULT_MAX_DOWNLOADS: usize = 16;

/// Bytes a download reads from its file at a time: 64 KiB.
pub const DOWNLOAD_CHUNK: usize = 64 << 10;

/// How often a tenant over its quota has its directory measured again: at most once a
/// second, so that a client hammering a refused call does not make the server list a large
/// directory for each.
const REMEASURE_EVERY: Duration = Duration::from_secs(1);

/// One tenant's recordings.
struct TenantRecords {
    dir: PathBuf,
    /// Bytes of recordings in `dir`: measured at start, counted up as they are written.
    used: Arc<AtomicU64>,
    /// When `dir` was last measured.
    measured: Mutex<Instant>,
}

/// Every tenant's recordings under the record directory.
pub struct Recordings {
    tenants: Vec<TenantRecords>,
    max_bytes: u64,
    downloads: Arc<Semaphore>,
    max_downloads: usize,
}

impl Recordings {
    /// The recordings under `root` of a server with `tokens` (none: one tenant), creating
    /// each tenant's directory and measuring what it holds.
    pub fn open(
        root: &Path,
        tokens: &[String],
        max_bytes: u64,
        max_downloads: usize,
    ) -> io::Result<Recordings> {
        std::fs::create_dir_all(root)?;
        let dirs: Vec<PathBuf> = if tokens.is_empty() {
            vec![root.to_path_buf()]
        } else {
            tokens
                .iter()
                .map(|token| root.join(format!("tenant-{}", tenant_key(token))))
                .collect()
        };
        let mut tenants = Vec::with_capacity(dirs.len());
        for dir in dirs {
            std::fs::create_dir_all(&dir)?;
            let used = measure(&dir)?;
            tenants.push(TenantRecords {
                dir,
                used: Arc::new(AtomicU64::new(used)),
                measured: Mutex::new(Instant::now()),
            });
        }
        Ok(Recordings {
            tenants,
            max_bytes,
            downloads: Arc::new(Semaphore::new(max_downloads)),
            max_downloads,
        })
    }

    fn tenant(&self, tenant: Tenant) -> Result<&TenantRecords, SessionError> {
        self.tenants
            .get(tenant.0)
            .ok_or_else(|| SessionError::Internal(format!("no record directory for {tenant:?}")))
    }

    /// The file of `tenant`'s episode `episode_id` (a checked id), or `None` for a tenant
    /// the server does not know.
    pub fn path(&self, tenant: Tenant, episode_id: &str) -> Option<PathBuf> {
        let records = self.tenants.get(tenant.0)?;
        Some(records.dir.join(format!("{episode_id}.jsonl")))
    }

    /// Refuses a recorded call of `tenant` when its recordings are at or over the quota
    /// (measuring its directory again first, at most once every [`REMEASURE_EVERY`]).
    pub fn check_quota(&self, tenant: Tenant) -> Result<(), SessionError> {
        let records = self.tenant(tenant)?;
        let mut used = records.used.load(Ordering::Relaxed);
        if used < self.max_bytes {
            return Ok(());
        }
        let remeasure = {
            let mut measured = records
                .measured
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let due = measured.elapsed() >= REMEASURE_EVERY;
            if due {
                *measured = Instant::now();
            }
            due
        };
        if remeasure {
            used = measure(&records.dir).map_err(|err| {
                SessionError::Internal(format!(
                    "cannot measure the record directory '{}': {err}",
                    records.dir.display()
                ))
            })?;
            records.used.store(used, Ordering::Relaxed);
            if used < self.max_bytes {
                return Ok(());
            }
        }
        Err(SessionError::RecordQuota(format!(
            "this token's recordings hold {used} bytes, at or over its quota of {} bytes (--max-record-bytes): the call was not run and the episode is as it was; ask the operator to raise --max-record-bytes or remove recordings",
            self.max_bytes
        )))
    }

    /// Creates `tenant`'s trajectory file for `episode_id` (within the quota), refusing an
    /// episode id the tenant already used; its bytes count against the tenant's quota.
    pub fn create(&self, tenant: Tenant, episode_id: &str) -> Result<Counted, SessionError> {
        self.check_quota(tenant)?;
        let records = self.tenant(tenant)?;
        let path = records.dir.join(format!("{episode_id}.jsonl"));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|err| match err.kind() {
                io::ErrorKind::AlreadyExists => SessionError::Invalid(format!(
                    "episode id '{episode_id}' is already used by a recorded trajectory"
                )),
                _ => SessionError::Internal(format!(
                    "cannot create the trajectory file '{}': {err}",
                    path.display()
                )),
            })?;
        Ok(Counted {
            file,
            used: records.used.clone(),
        })
    }

    /// A download slot, or `None` when `--max-downloads` downloads are running.
    pub fn download_slot(&self) -> Option<OwnedSemaphorePermit> {
        self.downloads.clone().try_acquire_owned().ok()
    }

    /// Most downloads at once.
    pub fn max_downloads(&self) -> usize {
        self.max_downloads
    }
}

/// A trajectory file whose written bytes count against its tenant's quota.
pub struct Counted {
    file: File,
    used: Arc<AtomicU64>,
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.used.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// The name of a token's directory: not the token, not its plain sha256.
fn tenant_key(token: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(b"spade-serve tenant\0");
    hasher.update(token.as_bytes());
    hex::encode(&hasher.finalize()[..16])
}

/// Bytes of the trajectory files (`*.jsonl`) directly in `dir`.
fn measure(dir: &Path) -> io::Result<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let is_trajectory = entry.path().extension().is_some_and(|e| e == "jsonl");
        let meta = match entry.metadata() {
            Ok(meta) => meta,
            // Removed while the directory was read: removing recordings is how an operator
            // frees a tenant's quota, so it must not fail the measurement.
            Err(err) if err.kind() == io::ErrorKind::NotFound => continue,
            Err(err) => return Err(err),
        };
        if is_trajectory && meta.is_file() {
            total = total.saturating_add(meta.len());
        }
    }
    Ok(total)
}

/// A fresh server-chosen id: 128 bits from the operating system's random source, in hex (not
/// a counter, so one id says nothing of another's).
pub fn random_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_differ() {
        let a = random_id().unwrap();
        let b = random_id().unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }

    #[test]
    fn tenant_keys_hide_the_token() {
        let key = tenant_key("alpha");
        assert_eq!(key.len(), 32);
        assert!(!key.contains("alpha"));
        assert_ne!(key, tenant_key("beta"));
    }
}
