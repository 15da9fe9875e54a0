//! Environment sources, compiled once per process and shared by every sandbox that loads them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use sha2::Digest as _;
use tokio::sync::OnceCell;

use crate::cache::Cache;
use crate::cache::snapshot::LoadPlan;
use crate::config::Limits;

/// An environment source and its compiled bytecode.
///
/// Compiling Python is the dominant cost of loading an environment inside the interpreter, and
/// SPADE plays every environment many times. [`Runtime::prepare`](crate::Runtime::prepare)
/// compiles a source once (in a throwaway sandbox, or not at all when an earlier process
/// cached its bytecode on disk); every sandbox created from the result
/// loads the bytecode. Loading from bytecode is what every sandbox does, so the fuel a load
/// reports does not depend on whether the source was already compiled.
#[derive(Clone)]
pub struct EnvSource {
    inner: Arc<Inner>,
}

struct Inner {
    text: String,
    sha256: String,
    code: Vec<u8>,
    /// How sandboxes are loaded, decided once per `max_turns`, limits and snapshot setting;
    /// least recently used first, at most [`Caches::plans_per_source`](crate::Caches).
    plans: Mutex<Vec<PlanEntry>>,
    /// Set when the runtime let go of the source ([`Runtime::release`](crate::Runtime::release)):
    /// its snapshot files are removed when the last handle is dropped.
    released: OnceLock<Release>,
}

/// Where a released source's snapshot files are removed from.
pub(crate) struct Release {
    pub cache: Arc<Cache>,
    pub live: Arc<LiveFiles>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let Some(release) = self.released.take() else {
            return;
        };
        let plans = std::mem::take(
            self.plans
                .get_mut()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        let names: Vec<String> = plans
            .iter()
            .filter_map(|entry| entry.file.as_ref().map(|file| file.name.clone()))
            .collect();
        // The plans' own uses of their files end first.
        drop(plans);
        for name in names {
            if !release.live.contains(&name) {
                // A file that cannot be removed now is left to the disk cache's trim.
                let _ = release.cache.snapshots.remove(&name);
            }
        }
    }
}

/// One load plan of a source, with the use it makes of its snapshot file.
struct PlanEntry {
    key: PlanKey,
    cell: Arc<OnceCell<LoadPlan>>,
    /// The plan's snapshot file, marked as in use while the entry lives (`None` without a
    /// cache directory).
    file: Option<FileUse>,
}

/// What a load plan depends on besides the source.
///
/// `max_turns` belongs here: the guest hands it to the environment's constructor when the
/// module is loaded, and a snapshot (taken after the module ran, or after the constructor)
/// holds it in the interpreter's memory, so a snapshot of one `max_turns` cannot start a
/// sandbox of another. The number of plans per source is bounded instead
/// ([`Caches::plans_per_source`](crate::Caches)).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlanKey {
    pub max_turns: Option<u32>,
    pub limits: Limits,
    pub snapshots: bool,
}

/// The snapshot file names that load plans in memory use (by how many plans), so that the
/// disk cache's trim never removes the file of a live plan.
#[derive(Default)]
pub(crate) struct LiveFiles(Mutex<HashMap<String, usize>>);

impl LiveFiles {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        // The map stays consistent whatever panicked while it was held.
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Whether a plan in memory uses the file `name`.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.lock().contains_key(name)
    }

    /// Marks `name` as used until the returned guard is dropped.
    pub(crate) fn mark(self: &Arc<Self>, name: String) -> FileUse {
        *self.lock().entry(name.clone()).or_insert(0) += 1;
        FileUse {
            name,
            live: self.clone(),
        }
    }
}

/// One plan's use of its snapshot file (see [`LiveFiles`]).
pub(crate) struct FileUse {
    name: String,
    live: Arc<LiveFiles>,
}

impl Drop for FileUse {
    fn drop(&mut self) {
        let mut live = self.live.lock();
        if let Some(count) = live.get_mut(&self.name) {
            *count -= 1;
            if *count == 0 {
                live.remove(&self.name);
            }
        }
    }
}

impl EnvSource {
    pub(crate) fn new(text: &str, sha256: String, code: Vec<u8>) -> Self {
        EnvSource {
            inner: Arc::new(Inner {
                text: text.to_owned(),
                sha256,
                code,
                plans: Mutex::new(Vec::new()),
                released: OnceLock::new(),
            }),
        }
    }

    fn plans(&self) -> MutexGuard<'_, Vec<PlanEntry>> {
        // A plan list is consistent whatever panicked while it was held.
        self.inner
            .plans
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The cell holding the load plan for `key` (empty until the first sandbox decides it),
    /// made the most recently used. A new one is added with the file use `file` makes, and the
    /// least recently used plans past `capacity` are dropped (a sandbox deciding one of them
    /// goes on with its own cell; only the next one decides again).
    pub(crate) fn plan_cell(
        &self,
        key: PlanKey,
        capacity: usize,
        file: impl FnOnce() -> Option<FileUse>,
    ) -> Arc<OnceCell<LoadPlan>> {
        let mut plans = self.plans();
        if let Some(index) = plans.iter().position(|entry| entry.key == key) {
            let entry = plans.remove(index);
            let cell = entry.cell.clone();
            plans.push(entry);
            return cell;
        }
        let cell = Arc::new(OnceCell::new());
        plans.push(PlanEntry {
            key,
            cell: cell.clone(),
            file: file(),
        });
        let excess = plans.len().saturating_sub(capacity.max(1));
        let dropped: Vec<PlanEntry> = plans.drain(..excess).collect();
        drop(plans);
        drop(dropped);
        cell
    }

    /// The decided plan for `key`, if one is kept (without making it the most recently used).
    pub(crate) fn plan(&self, key: &PlanKey) -> Option<LoadPlan> {
        self.plans()
            .iter()
            .find(|entry| entry.key == *key)
            .and_then(|entry| entry.cell.get().cloned())
    }

    /// Load plans kept for this source.
    pub(crate) fn plan_count(&self) -> usize {
        self.plans().len()
    }

    /// Bytes of the snapshots this source's plans hold.
    pub(crate) fn snapshot_bytes(&self) -> usize {
        self.plans()
            .iter()
            .map(|entry| match entry.cell.get() {
                Some(LoadPlan::Deferred {
                    snapshot: Some(snapshot),
                    ..
                }) => snapshot.bytes(),
                _ => 0,
            })
            .sum()
    }

    /// Bytes this source holds in memory: its text, bytecode and snapshots.
    pub(crate) fn held_bytes(&self) -> usize {
        self.inner.text.len() + self.inner.code.len() + self.snapshot_bytes()
    }

    /// Removes this source's snapshot files when its last handle is dropped.
    pub(crate) fn mark_released(&self, release: Release) {
        let _ = self.inner.released.set(release);
    }

    /// The Python source.
    pub fn text(&self) -> &str {
        &self.inner.text
    }

    /// sha256 of the source text (hex).
    pub fn sha256(&self) -> &str {
        &self.inner.sha256
    }

    /// The marshalled code object the guest compiled from the source.
    pub fn code(&self) -> &[u8] {
        &self.inner.code
    }
}

impl std::fmt::Debug for EnvSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvSource")
            .field("sha256", &self.inner.sha256)
            .field("code_bytes", &self.inner.code.len())
            .finish()
    }
}

/// Compiled sources by sha256, least recently used first out, bounded by count and by the
/// bytes they hold ([`EnvSource::held_bytes`]).
pub(crate) struct SourceCache {
    capacity: usize,
    max_bytes: usize,
    /// Least recently used first.
    entries: Mutex<Vec<EnvSource>>,
}

impl SourceCache {
    pub(crate) fn new(capacity: usize, max_bytes: usize) -> Self {
        SourceCache {
            capacity: capacity.max(1),
            max_bytes,
            entries: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<EnvSource>> {
        // The list is consistent whatever panicked while it was held.
        self.entries
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The sha256 of `text`, and its compiled source if it is kept (made the most recently
    /// used).
    pub(crate) fn get(&self, text: &str) -> (String, Option<EnvSource>) {
        let sha256 = hex::encode(sha2::Sha256::digest(text.as_bytes()));
        let mut entries = self.lock();
        let hit = entries
            .iter()
            .position(|source| source.sha256() == sha256)
            .map(|index| {
                let source = entries.remove(index);
                entries.push(source.clone());
                source
            });
        (sha256, hit)
    }

    /// Keeps `source` (as the most recently used) and returns what no longer fits.
    pub(crate) fn insert(&self, source: EnvSource) -> Vec<EnvSource> {
        let mut entries = self.lock();
        entries.retain(|kept| kept.sha256() != source.sha256());
        entries.push(source);
        Self::trim(&mut entries, self.capacity, self.max_bytes)
    }

    /// Marks `source` as just used and, with `grown` (its plans changed since it was
    /// inserted), returns what no longer fits. A source that is not kept (evicted while a
    /// caller, a registration, still held it) is put back: it is in use, and its plans must
    /// count against the bounds again, or an evicted source could grow plans unaccounted.
    pub(crate) fn touch(&self, source: &EnvSource, grown: bool) -> Vec<EnvSource> {
        let mut entries = self.lock();
        let kept = entries
            .iter()
            .position(|kept| kept.sha256() == source.sha256());
        match kept {
            Some(index) => {
                let source = entries.remove(index);
                entries.push(source);
                if !grown {
                    return Vec::new();
                }
            }
            None => entries.push(source.clone()),
        }
        Self::trim(&mut entries, self.capacity, self.max_bytes)
    }

    /// Drops the least recently used sources past `capacity` or `max_bytes`, never the most
    /// recently used one; returns them, so that the caller drops them outside the lock.
    fn trim(entries: &mut Vec<EnvSource>, capacity: usize, max_bytes: usize) -> Vec<EnvSource> {
        let mut bytes: usize = entries.iter().map(EnvSource::held_bytes).sum();
        let mut evicted = Vec::new();
        while entries.len() > 1 && (entries.len() > capacity || bytes > max_bytes) {
            let old = entries.remove(0);
            bytes = bytes.saturating_sub(old.held_bytes());
            evicted.push(old);
        }
        evicted
    }

    /// Removes the source of `sha256`, and returns it.
    pub(crate) fn remove(&self, sha256: &str) -> Option<EnvSource> {
        let mut entries = self.lock();
        let index = entries.iter().position(|kept| kept.sha256() == sha256)?;
        Some(entries.remove(index))
    }

    /// The sources kept, their plans, and the bytes they hold (snapshots, and in all).
    pub(crate) fn stats(&self) -> (usize, usize, usize, usize) {
        let entries = self.lock();
        entries
            .iter()
            .fold((0, 0, 0, 0), |(n, plans, snaps, all), s| {
                (
                    n + 1,
                    plans + s.plan_count(),
                    snaps + s.snapshot_bytes(),
                    all + s.held_bytes(),
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source whose text and bytecode hold 100 bytes, under the name `sha256`.
    fn source(sha256: &str) -> EnvSource {
        EnvSource::new(&"x".repeat(50), sha256.to_owned(), vec![0; 50])
    }

    #[test]
    fn the_source_cache_is_bounded_by_count_and_bytes_least_recently_used_first_out() {
        // Room for 250 bytes: two sources of 100.
        let cache = SourceCache::new(8, 250);
        let a = source("a");
        assert!(cache.insert(a.clone()).is_empty());
        assert!(cache.insert(source("b")).is_empty());
        // "a" used: "b" is now the least recently used, and goes.
        assert!(cache.touch(&a, false).is_empty());
        let evicted = cache.insert(source("c"));
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].sha256(), "b");
        assert_eq!(cache.stats(), (2, 0, 0, 200));
        // The most recently used source stays even alone over the budget.
        let tight = SourceCache::new(8, 10);
        assert!(tight.insert(source("a")).is_empty());
        assert_eq!(tight.insert(source("b"))[0].sha256(), "a");
        assert_eq!(tight.stats().0, 1);
        // By count.
        let two = SourceCache::new(2, usize::MAX);
        for name in ["a", "b", "c"] {
            drop(two.insert(source(name)));
        }
        assert_eq!(two.stats().0, 2);
        assert!(two.remove("a").is_none(), "a was evicted");
        assert!(two.remove("c").is_some());
    }

    #[test]
    fn an_evicted_source_in_use_is_counted_again() {
        // Review finding: a source evicted while a registration still held it grew plans that
        // no bound counted. Using it puts it back, and the bounds apply to it again.
        let cache = SourceCache::new(1, usize::MAX);
        let a = source("a");
        drop(cache.insert(a.clone()));
        assert_eq!(cache.insert(source("b"))[0].sha256(), "a");
        let evicted = cache.touch(&a, false);
        assert_eq!(evicted.len(), 1);
        assert_eq!(evicted[0].sha256(), "b");
        assert_eq!(cache.stats().0, 1);
        assert!(cache.remove("a").is_some(), "a is kept again");
    }
}
