//! Per-environment snapshots: the interpreter's memory after an environment is loaded, so that
//! every sandbox of a source starts from it instead of running the module and the constructor.
//!
//! What runs when (for each source, `max_turns` and set of limits, once per runtime, in the
//! first sandbox's creation):
//! 1. A probe sandbox runs the module *without* seeding `random` first, then constructs the
//!    environment class, still unseeded. Each stage is seed-independent when it neither used
//!    the module-global `random` (its generator is watched, `guest/src/rng_watch.rs`) nor read
//!    WASI entropy (`os.urandom`, an unseeded `random.Random()`).
//! 2. The plan follows ([`LoadPlan`]): a module that used randomness is loaded as it always
//!    was, seed first, in every sandbox ([`LoadPlan::Seeded`]). Otherwise `random` is seeded
//!    after the module ran, and, when the constructor is seed-independent too, after the
//!    constructor ([`LoadPlan::Deferred`]). Either way `random` is seeded before anything that
//!    draws from it runs, so the environment sees what it saw when seeded first.
//! 3. The probe hands its memory to the host after the last seed-independent stage that
//!    printed nothing and left no host resource open (a stdout stream, say); the host keeps the
//!    4 KiB pages that differ from a fresh interpreter's ([`Snapshot`]). Every sandbox, the
//!    first included, then instantiates a fresh interpreter, has the host write those pages
//!    into its memory (`restore`, see [`crate::cache::snapshot_restore`]) and runs the rest: seed,
//!    and construct if the snapshot was taken before the constructor. Its memory is byte for
//!    byte that of a sandbox that ran every stage itself.
//!
//! The fuel of the stages a snapshot holds is measured once, in the probe; a sandbox from the
//! snapshot reports it plus the fuel of the stages it runs, so fuel per call does not depend
//! on whether a snapshot was used. [`Config::snapshots`](crate::Config::snapshots) off runs
//! every stage in every sandbox, in the same order.

use std::sync::Arc;

use wasmtime::StoreContextMut;
use wasmtime::component::WasmList;

use crate::cache::snapshot_restore::SnapshotWrite;
use crate::memory::Location;
use crate::sandbox::{EnvInfo, SandboxState};

/// Bytes of one snapshot page.
pub(crate) const PAGE: usize = 4096;
/// The largest snapshot kept, in bytes of changed pages. A load that leaves more behind (a
/// constructor that built and dropped hundreds of megabytes) is cheaper to run than to copy,
/// and holding its pages for every source would cost the host that much memory per source.
pub(crate) const MAX_SNAPSHOT_BYTES: usize = 64 << 20;
/// One record of a snapshot: the page index (u32, little-endian), then the page.
pub(crate) const RECORD: usize = 4 + PAGE;

/// A loaded environment's memory, as the pages that differ from a fresh interpreter's.
#[derive(Debug)]
pub(crate) struct Snapshot {
    /// Size of the linear memory in wasm pages (64 KiB).
    pub wasm_pages: u32,
    /// The changed pages as records ([`RECORD`]), in ascending order of page.
    pub records: Records,
    /// Pages that differ from the fresh interpreter's.
    pub dirty_pages: usize,
    /// Pages outside the snapshot, in ascending order, that the stages every sandbox runs
    /// after the restore wrote in the probe (the constructor): a restore populates them along
    /// with the snapshot's own pages, so that loading faults fewer pages in one by one. Their
    /// contents are not touched.
    pub later_pages: Vec<u32>,
    /// What the constructor returned, when the snapshot was taken after it (`None`: taken
    /// after the module ran, before construction).
    pub constructed: Option<EnvInfo>,
    /// Fuel the stages the snapshot holds used in the probe.
    pub load_fuel: u64,
    /// The sandbox's virtual clock after the load (nanoseconds).
    pub clock_nanos: u64,
}

impl Snapshot {
    /// Bytes the snapshot holds.
    pub fn bytes(&self) -> usize {
        self.records.len()
    }
}

/// A snapshot's records, in this process's own memory: captured by a probe, or read from the
/// cache file (its bytes from `start`, after the header line).
///
/// Read, not mapped: the pages of a mapped file that is truncated under the process (by
/// anyone who can write the cache, or a full disk) raise `SIGBUS` on the next restore, which
/// would end every sandbox of the host. Copying them costs a read of the file once per
/// process and source (see docs/snapshots.md for the figures).
#[derive(Debug)]
pub(crate) struct Records {
    bytes: Vec<u8>,
    start: usize,
}

impl Records {
    /// Records captured by a probe.
    pub fn captured(records: Vec<u8>) -> Records {
        Records {
            bytes: records,
            start: 0,
        }
    }

    /// The records that are `bytes` from `start` (a file read whole, header first).
    pub fn read(bytes: Vec<u8>, start: usize) -> Records {
        assert!(start <= bytes.len(), "the records start inside the file");
        Records { bytes, start }
    }
}

impl std::ops::Deref for Records {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes[self.start..]
    }
}

/// How the sandboxes of one source are loaded.
#[derive(Debug, Clone)]
pub(crate) enum LoadPlan {
    /// Seed `random`, then run the module and the constructor (the module uses randomness, or
    /// the probe could not run it).
    Seeded,
    /// Run the module unseeded; seed before the constructor (`seed_first_construct`, when the
    /// constructor draws randomness or failed unseeded in the probe) or after it. Start from
    /// `snapshot` when there is one.
    Deferred {
        seed_before_construct: bool,
        snapshot: Option<Arc<Snapshot>>,
    },
}

/// The records of `memory`'s 4 KiB pages that differ from `base`'s (the fresh interpreter's;
/// pages past its end compare against zeros), and how many there are. Both are linear
/// memories as the guest hands them over: from address 1 (address 0 is always zero in both).
///
/// Past [`MAX_SNAPSHOT_BYTES`] of changed pages the diff stops: it returns no records and the
/// count so far (over the limit), so a memory too changed to snapshot never costs the host
/// more than the limit.
pub(crate) fn diff(base: &[u8], memory: &[u8]) -> (Vec<u8>, usize) {
    diff_within(base, memory, MAX_SNAPSHOT_BYTES)
}

/// [`diff`] with a limit of `max_bytes` of changed pages instead of [`MAX_SNAPSHOT_BYTES`] (a
/// fork copies every changed page, however many: the memory limit bounds them).
pub(crate) fn diff_within(base: &[u8], memory: &[u8], max_bytes: usize) -> (Vec<u8>, usize) {
    diff_candidates(base, memory, max_bytes, None)
}

/// [`diff_within`], comparing only the pages `candidates` marks (all of them with `None`): a
/// page not marked is known to hold the base's bytes ([`super::pagemap`]).
pub(crate) fn diff_candidates(
    base: &[u8],
    memory: &[u8],
    max_bytes: usize,
    candidates: Option<&[bool]>,
) -> (Vec<u8>, usize) {
    let zeros = [0u8; PAGE];
    let size = memory.len() + 1;
    let mut records = Vec::new();
    let mut dirty = 0;
    for index in 0..size.div_ceil(PAGE) {
        if candidates.is_some_and(|written| !written.get(index).copied().unwrap_or(true)) {
            continue;
        }
        // Addresses `start..end` of the page are bytes `start - 1..end - 1` of the captures.
        let (start, end) = ((index * PAGE).max(1), ((index + 1) * PAGE).min(size));
        let page = &memory[start - 1..end - 1];
        let before = base.get(start - 1..end - 1).unwrap_or(&zeros[..page.len()]);
        if page == before {
            continue;
        }
        dirty += 1;
        if dirty * PAGE > max_bytes {
            return (Vec::new(), dirty);
        }
        records.extend_from_slice(&(index as u32).to_le_bytes());
        if index == 0 {
            records.push(0);
        }
        records.extend_from_slice(page);
        records.resize(RECORD * (records.len().div_ceil(RECORD)), 0);
    }
    (records, dirty)
}

/// The most pages a restore populates ahead of the stages after it: a constructor that writes
/// more than this (16 MiB) is left to fault its pages in as it goes.
pub(crate) const MAX_LATER_PAGES: usize = 4096;

/// The pages of the memory `after` (as the guest hands it over after the stages that follow the
/// snapshot) that differ from the memory the snapshot was taken in, of `before_len` bytes, are
/// not among the snapshot's pages (`snapshot_pages`, ascending) and lie inside that memory: the
/// pages a restore populates for the later stages. Empty when there are more than
/// [`MAX_LATER_PAGES`].
///
/// A page outside the snapshot was, when it was taken, the fresh interpreter's (`base`, zeros
/// past its end), so `after` is compared with `base`: the memory the snapshot was taken from
/// need not be kept.
pub(crate) fn later_pages(
    snapshot_pages: &[u32],
    base: &[u8],
    before_len: usize,
    after: &[u8],
) -> Vec<u32> {
    let zeros = [0u8; PAGE];
    // Both start at address 1: page `i` is bytes `i * PAGE - 1..` (page 0 is never
    // populated: it holds the stack's unused bottom).
    let size = before_len.min(after.len()) + 1;
    let mut pages = Vec::new();
    for index in 1..size / PAGE {
        if snapshot_pages.binary_search(&(index as u32)).is_ok() {
            continue;
        }
        let range = index * PAGE - 1..(index + 1) * PAGE - 1;
        let was = base.get(range.clone()).unwrap_or(&zeros);
        if was != &after[range] {
            pages.push(index as u32);
            if pages.len() > MAX_LATER_PAGES {
                return Vec::new();
            }
        }
    }
    pages
}

/// The page indices of `records` (ascending, as [`diff`] writes them).
pub(crate) fn record_pages(records: &[u8]) -> Vec<u32> {
    records
        .chunks_exact(RECORD)
        .map(|record| u32::from_le_bytes([record[0], record[1], record[2], record[3]]))
        .collect()
}

/// What the host makes of the guest's memory when the guest hands it over: the memory is read
/// where it lies in the guest (a `WasmList`), never copied whole into the host, so a capture
/// costs the host the snapshot's pages, not the sandbox's memory.
pub(crate) enum CaptureRequest {
    /// A copy of the whole memory (a fresh interpreter's: the base snapshots are diffed
    /// against, a fixed size whatever the environment).
    Whole,
    /// The pages that differ from `base` ([`diff`]).
    Diff(Arc<Vec<u8>>),
    /// Every page that differs from `base`, however many (a fork's state).
    Fork(Arc<Vec<u8>>),
    /// The pages a later stage wrote ([`later_pages`]).
    LaterPages {
        base: Arc<Vec<u8>>,
        snapshot_pages: Vec<u32>,
        before_len: usize,
    },
}

/// What a capture produced.
pub(crate) enum Captured {
    Whole(Vec<u8>),
    /// The records, their number of pages, and the memory's length (from address 1).
    Diff {
        records: Vec<u8>,
        dirty_pages: usize,
        len: usize,
    },
    LaterPages(Vec<u32>),
}

impl CaptureRequest {
    fn apply(&self, memory: &[u8]) -> Captured {
        match self {
            CaptureRequest::Whole => Captured::Whole(memory.to_vec()),
            CaptureRequest::Diff(base) => {
                let (records, dirty_pages) = diff(base, memory);
                Captured::Diff {
                    records,
                    dirty_pages,
                    len: memory.len(),
                }
            }
            CaptureRequest::Fork(base) => {
                let written = super::pagemap::written_pages(memory);
                let (records, dirty_pages) =
                    diff_candidates(base, memory, usize::MAX, written.as_deref());
                Captured::Diff {
                    records,
                    dirty_pages,
                    len: memory.len(),
                }
            }
            CaptureRequest::LaterPages {
                base,
                snapshot_pages,
                before_len,
            } => Captured::LaterPages(later_pages(snapshot_pages, base, *before_len, memory)),
        }
    }
}

/// The host side of `spade:env/snapshot-host` for one sandbox.
#[derive(Default)]
pub(crate) struct SnapshotIo {
    /// Set while the host asks the guest for its memory: what to make of it, and then what
    /// was made.
    pub capture: Option<(CaptureRequest, Option<Captured>)>,
    /// The snapshot a restore writes, and whether it was written.
    pub restore: Option<(Arc<Snapshot>, bool)>,
}

impl SnapshotIo {
    /// The write of the snapshot being restored, done when the result is lowered.
    fn write_snapshot(
        &mut self,
        skip: Vec<u32>,
        located: Option<Arc<Location>>,
    ) -> wasmtime::Result<SnapshotWrite> {
        if !skip.len().is_multiple_of(2) {
            wasmtime::bail!("write-snapshot's skip list is not pairs of addresses");
        }
        match &mut self.restore {
            Some((snapshot, written @ false)) => {
                *written = true;
                Ok(SnapshotWrite {
                    snapshot: snapshot.clone(),
                    skip: skip
                        .chunks_exact(2)
                        .map(|pair| pair[0] as usize..pair[1] as usize)
                        .collect(),
                    located,
                })
            }
            _ => wasmtime::bail!("write-snapshot called outside a restore"),
        }
    }
}

/// The interface name of `spade:env/snapshot-host` as the guest imports it.
const SNAPSHOT_HOST: &str = "spade:env/snapshot-host@0.1.0";

/// Links `spade:env/snapshot-host`. Linked by hand rather than through the generated
/// `add_to_linker`, whose `write-snapshot` could only return a plain `u32`, with no access to
/// the guest's memory; the types are checked against the component when it is instantiated.
pub(crate) fn add_to_linker(
    linker: &mut wasmtime::component::Linker<SandboxState>,
) -> wasmtime::Result<()> {
    let mut host = linker.instance(SNAPSHOT_HOST)?;
    host.func_wrap(
        "capture-memory",
        |mut store: StoreContextMut<'_, SandboxState>, (memory,): (WasmList<u8>,)| {
            let captured = match &store.data().snapshot.capture {
                Some((request, None)) => request.apply(memory.as_le_slice(&store)),
                _ => wasmtime::bail!("capture-memory called outside a snapshot"),
            };
            if let Some((_, slot)) = &mut store.data_mut().snapshot.capture {
                *slot = Some(captured);
            }
            Ok(())
        },
    )?;
    host.func_wrap(
        "write-snapshot",
        |mut store: StoreContextMut<'_, SandboxState>, (skip,): (Vec<u32>,)| {
            let state = store.data_mut();
            let located = state.limiter.location();
            state
                .snapshot
                .write_snapshot(skip, located)
                .map(|write| (write,))
        },
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A memory of `pages` pages as the guest captures it (from address 1), with `set`
    /// (address, value) applied.
    fn captured(pages: usize, set: &[(usize, u8)]) -> Vec<u8> {
        let mut memory = vec![0u8; pages * PAGE - 1];
        for &(address, value) in set {
            memory[address - 1] = value;
        }
        memory
    }

    #[test]
    fn diff_keeps_exactly_the_changed_pages_including_growth() {
        let base = captured(3, &[(5, 3)]);
        // Page 0 changed at address 1, page 1 at address PAGE + 7; page 4 is past the base and
        // compared with zeros.
        let memory = captured(5, &[(1, 2), (5, 3), (PAGE + 7, 1), (4 * PAGE, 9)]);
        let (chunk, dirty) = diff(&base, &memory);
        assert_eq!(dirty, 3);
        assert_eq!(chunk.len(), 3 * RECORD);
        // Page 0's record holds address 0 (always zero) too.
        assert_eq!(&chunk[..4], &0u32.to_le_bytes());
        assert_eq!(&chunk[4..10], &[0, 2, 0, 0, 0, 3]);
        assert_eq!(&chunk[RECORD..RECORD + 4], &1u32.to_le_bytes());
        assert_eq!(chunk[RECORD + 4 + 7], 1);
        assert_eq!(&chunk[2 * RECORD..2 * RECORD + 4], &4u32.to_le_bytes());
        assert_eq!(chunk[2 * RECORD + 4], 9);
    }

    #[test]
    fn later_pages_are_the_changed_pages_outside_the_snapshot_and_its_memory() {
        let base = captured(4, &[(3 * PAGE + 100, 7)]);
        let (records, _) = diff(
            &base,
            &captured(4, &[(2 * PAGE + 1, 1), (3 * PAGE + 100, 7)]),
        );
        let snapshot_pages = record_pages(&records);
        assert_eq!(snapshot_pages, [2]);
        // Page 1 and 3 changed later (page 3 from the base's 7); page 2 is the snapshot's;
        // page 5 is past the memory the snapshot was taken in (4 pages); page 0 is never
        // populated.
        let after = captured(
            6,
            &[
                (5, 1),
                (PAGE, 1),
                (2 * PAGE + 9, 1),
                (3 * PAGE + 100, 8),
                (5 * PAGE, 1),
            ],
        );
        assert_eq!(
            later_pages(&snapshot_pages, &base, base.len(), &after),
            [1, 3]
        );
        // Unchanged from the base: nothing to populate.
        assert!(later_pages(&snapshot_pages, &base, base.len(), &base).is_empty());
        let everything = vec![1u8; (MAX_LATER_PAGES + 8) * PAGE - 1];
        let zeros = vec![0u8; everything.len()];
        assert!(later_pages(&[], &zeros, zeros.len(), &everything).is_empty());
    }

    #[test]
    fn a_diff_over_the_snapshot_limit_stops_and_keeps_nothing() {
        let pages = MAX_SNAPSHOT_BYTES / PAGE + 2;
        let memory = vec![1u8; pages * PAGE - 1];
        let (records, dirty) = diff(&[], &memory);
        assert!(records.is_empty());
        assert_eq!(dirty, MAX_SNAPSHOT_BYTES / PAGE + 1);
    }

    #[test]
    fn diff_of_identical_memories_is_empty() {
        let memory = vec![1u8; 600 * PAGE - 1];
        assert_eq!(diff(&memory, &memory), (Vec::new(), 0));
        assert_eq!(diff(&captured(600, &[]), &memory).1, 600);
    }
}
