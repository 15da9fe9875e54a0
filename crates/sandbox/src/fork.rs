//! Forking a live sandbox: copies of its exact state, each in its own store.
//!
//! A sandbox's state between two calls is its linear memory (the interpreter, the environment
//! and every Python object; the one mutable wasm global, the shadow-stack pointer, is back at
//! its base between calls) plus the host state the guest can observe: the virtual clock, the
//! positions of the two WASI entropy streams, the count of entropy reads, the seed
//! `wasi:random/insecure-seed` returns, and the host resources the guest holds. Fuel, output
//! and the deadline are per call and carry nothing over.
//!
//! A fork runs in phases:
//! 1. **refuse** a state that cannot be copied: a dead sandbox (its store is gone), or a guest
//!    holding a host resource ([`ForkError::HostResource`]): a handle in the copied memory
//!    would name an entry the copy's instance does not have;
//! 2. **capture** the parent's memory once: the guest hands it to the host in place, and the
//!    host keeps the 4 KiB pages that differ from a fresh interpreter's (the same diff a load
//!    snapshot is, without its size cap: the memory limit bounds it);
//! 3. **restore** it into each copy: a fresh instance of the pre-initialised guest (a
//!    copy-on-write mapping of its image), into which the host writes those pages (the load
//!    snapshot's restore path, `cache::snapshot_restore`); the copy's clock, entropy streams
//!    and read count are set to the parent's;
//! 4. **reseed**, when asked: the copy's entropy streams start from the new seed and the
//!    module-global `random` is seeded with it (the prelude's `reseed`, as at load), so forks
//!    draw different numbers from then on; without it every copy draws the parent's.
//!
//! What a fork costs does not grow with the episode's length, only with the pages its state
//! changed: the capture compares with the fresh interpreter's only the pages the kernel saw
//! written (`cache::pagemap`), and the restore writes the pages that differ. Each copy holds
//! its own private copy of those pages.

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::{DynInputStream, DynOutputStream, DynPollable};

use crate::cache::snapshot::{CaptureRequest, Captured, Snapshot};
use crate::config::Limits;
use crate::error::ForkError;
use crate::runtime::Runtime;
use crate::sandbox::EnvInfo;
use crate::sandbox::{Call, Sandbox};
use crate::wasi::EntropyStreams;

impl Runtime {
    /// A copy of `parent` in exactly its state: the same calls from here give byte-identical
    /// results and fuel in both, and neither sees what the other does afterwards. With
    /// `reseed`, the copy's WASI entropy and Python's module-global `random` are seeded anew
    /// (its `insecure-seed` too), so that it draws other numbers than the parent.
    ///
    /// The copy runs under the parent's limits. `parent` must come from a runtime with this
    /// one's guest (every runtime of a process has it).
    pub async fn fork(
        &self,
        parent: &mut Sandbox,
        reseed: Option<u64>,
    ) -> Result<Sandbox, ForkError> {
        let mut copies = self.fork_n(parent, &[reseed]).await?;
        Ok(copies.pop().expect("one copy per reseed"))
    }

    /// One copy of `parent` per entry of `reseeds` (see [`Runtime::fork`]), from one capture of
    /// its memory.
    pub async fn fork_n(
        &self,
        parent: &mut Sandbox,
        reseeds: &[Option<u64>],
    ) -> Result<Vec<Sandbox>, ForkError> {
        refuse(parent)?;
        let base = self.base_memory().await?;
        let state = Arc::new(capture(parent, base).await?);
        let host = HostState::of(parent)?;
        let mut copies = Vec::with_capacity(reseeds.len());
        for &reseed in reseeds {
            copies.push(restore(self, &host, &state, reseed).await?);
        }
        Ok(copies)
    }
}

/// Phase 1: a dead sandbox, or one whose guest holds a host resource, cannot be copied.
fn refuse(parent: &mut Sandbox) -> Result<(), ForkError> {
    if let Some(kind) = parent.dead() {
        return Err(ForkError::Dead(kind));
    }
    let Some(state) = parent.state_mut() else {
        return Err(ForkError::Dead(crate::ErrorKind::Cancelled));
    };
    match held_resource(&mut state.table) {
        Some(name) => Err(ForkError::HostResource(name.to_owned())),
        None => Ok(()),
    }
}

/// What the first host resource in `table` is, if there is one.
fn held_resource(table: &mut ResourceTable) -> Option<&'static str> {
    let entry = table.iter_mut().next()?;
    Some(if entry.is::<DynOutputStream>() {
        "an open output stream (stdout or stderr)"
    } else if entry.is::<DynInputStream>() {
        "an open input stream (stdin)"
    } else if entry.is::<DynPollable>() {
        "a pollable (a pending wait)"
    } else {
        "a WASI resource"
    })
}

/// Phase 2: the parent's memory as the pages that differ from a fresh interpreter's, with its
/// clock. The parent's account of its last call (fuel, output) is kept as it was.
async fn capture(parent: &mut Sandbox, base: Arc<Vec<u8>>) -> Result<Snapshot, ForkError> {
    let clock_nanos = parent.state().map_or(0, |state| state.clock.peek());
    let last = parent.take_last();
    let captured = parent.capture(CaptureRequest::Fork(base)).await;
    parent.put_last(last);
    let Captured::Diff {
        records,
        dirty_pages,
        len,
    } = captured?
    else {
        unreachable!("a fork request captures a diff");
    };
    Ok(Snapshot {
        // The capture starts at address 1.
        wasm_pages: ((len + 1) / 65536) as u32,
        records: crate::cache::snapshot::Records::captured(records),
        dirty_pages,
        later_pages: Vec::new(),
        constructed: None,
        load_fuel: 0,
        clock_nanos,
    })
}

/// The parent's host state a copy takes over (owned, so that no borrow of the parent is
/// held while the copies are made).
struct HostState {
    seed: u64,
    entropy_reads: u64,
    streams: EntropyStreams,
    info: EnvInfo,
    limits: Arc<Limits>,
}

impl HostState {
    fn of(parent: &Sandbox) -> Result<HostState, ForkError> {
        let state = parent
            .state()
            .ok_or(ForkError::Dead(crate::ErrorKind::Cancelled))?;
        Ok(HostState {
            seed: state.seed,
            entropy_reads: state.entropy.get(),
            streams: state.streams.snapshot(),
            info: parent.info().clone(),
            limits: parent.limits_arc(),
        })
    }
}

/// Phases 3 and 4: a fresh instance made into the captured state, reseeded when asked.
async fn restore(
    runtime: &Runtime,
    host: &HostState,
    state: &Arc<Snapshot>,
    reseed: Option<u64>,
) -> Result<Sandbox, ForkError> {
    let seed = reseed.unwrap_or(host.seed);
    let mut copy = Sandbox::fresh(host.limits.clone(), runtime.guest(), seed);
    copy.run(Call::Restore(state)).await?;
    let mine = copy.state().expect("a restored sandbox is alive");
    mine.entropy.set(host.entropy_reads);
    match reseed {
        // The copy's streams already start from the new seed.
        None => mine.streams.copy_from(&host.streams),
        Some(seed) => {
            copy.run(Call::Reseed(seed)).await?;
        }
    }
    copy.set_forked(host.info.clone());
    Ok(copy)
}
