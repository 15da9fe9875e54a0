//! Writing a snapshot's pages straight into a fresh instance's linear memory.
//!
//! The guest's `restore` export grows its memory to the snapshot's size and calls the host's
//! `write-snapshot`, whose `u32` result ([`SnapshotWrite`]) is lowered by writing every page
//! of the snapshot into the guest's memory first: lowering is the one place where wasmtime
//! hands a host function the memory of the component instance calling it. The pages go from
//! the snapshot (shared by every sandbox of the source) to their place in one copy each, and
//! each run of consecutive pages is populated with one `madvise(MADV_POPULATE_WRITE)` before
//! it is written: the kernel then allocates the run's private pages in one call rather than
//! taking a page fault per page, and the guest copies nothing. On the development VM this
//! turns three quarters of a fresh sandbox's page faults into populated runs and saves about a
//! tenth of a tool_inventory sandbox; the per-page work (allocating, copying from the page
//! cache, mapping) is most of what a fault cost (docs/benchmarks.md, "Why a fresh sandbox costs what it costs").
//!
//! This uses wasmtime's `ComponentType` and `Lower` traits, whose items are doc-hidden and
//! outside wasmtime's stability guarantees; wasmtime is pinned to one version in the
//! workspace, and the typecheck below makes a mismatch with the WIT a link-time error.

use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::Arc;

use wasmtime::component::__internal::{
    CanonicalAbiInfo, InstanceType, InterfaceType, LowerContext,
};
use wasmtime::component::{ComponentType, Lower};

use crate::cache::snapshot::{PAGE, RECORD, Snapshot};
use crate::memory::Location;

/// The result of `write-snapshot` (a `u32`: the pages written), whose lowering writes the
/// snapshot into the calling guest's memory.
pub(crate) struct SnapshotWrite {
    /// The snapshot being restored.
    pub snapshot: Arc<Snapshot>,
    /// Address ranges no page may overlap (the guest's shadow stack).
    pub skip: Vec<Range<usize>>,
    /// Where to record the memory's place (its sandbox's [`Charge`](crate::memory::Charge)),
    /// when it is charged to a memory account.
    pub located: Option<Arc<Location>>,
}

impl SnapshotWrite {
    /// Writes the pages into the memory of `cx` and returns how many it wrote.
    fn write<T>(&self, cx: &mut LowerContext<'_, T>) -> wasmtime::Result<u32> {
        let memory = cx.as_slice_mut();
        if let Some(located) = &self.located {
            located.set(memory.as_ptr() as usize, memory.len());
        }
        write_pages(
            &self.snapshot.records,
            &self.snapshot.later_pages,
            memory,
            &self.skip,
            populate,
        )
    }
}

// SAFETY: every item delegates to `u32`'s implementation: the value is lowered as that `u32`.
#[allow(unsafe_code)]
unsafe impl ComponentType for SnapshotWrite {
    type Lower = <u32 as ComponentType>::Lower;
    const ABI: CanonicalAbiInfo = <u32 as ComponentType>::ABI;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <u32 as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: lowers exactly what `u32` lowers, after writing the pages.
#[allow(unsafe_code)]
unsafe impl Lower for SnapshotWrite {
    fn linear_lower_to_flat<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        dst: &mut MaybeUninit<Self::Lower>,
    ) -> wasmtime::Result<()> {
        self.write(cx)?.linear_lower_to_flat(cx, ty, dst)
    }

    fn linear_lower_to_memory<T>(
        &self,
        cx: &mut LowerContext<'_, T>,
        ty: InterfaceType,
        offset: usize,
    ) -> wasmtime::Result<()> {
        self.write(cx)?.linear_lower_to_memory(cx, ty, offset)
    }
}

/// Writes each record of `records` (a little-endian `u32` page index, then the 4 KiB page)
/// into `memory` at its page, except pages overlapping a `skip` range, calling `prepare` once
/// on each run of consecutive pages before writing it; the pages in `later` (ascending) are
/// part of the runs `prepare` sees but are not written. Returns the pages written; a page past
/// the end of `memory` is an error (the guest grows its memory to the snapshot's size first).
pub(crate) fn write_pages(
    records: &[u8],
    later: &[u32],
    memory: &mut [u8],
    skip: &[Range<usize>],
    mut prepare: impl FnMut(&mut [u8]),
) -> wasmtime::Result<u32> {
    if !records.len().is_multiple_of(RECORD) {
        wasmtime::bail!("a snapshot's records are not whole pages");
    }
    let snapshot: Vec<(usize, Option<&[u8]>)> = records
        .chunks_exact(RECORD)
        .map(|record| {
            let index = u32::from_le_bytes([record[0], record[1], record[2], record[3]]);
            (index as usize * PAGE, Some(&record[4..]))
        })
        .collect();
    let later: Vec<(usize, Option<&[u8]>)> = later
        .iter()
        .map(|&index| (index as usize * PAGE, None))
        .collect();
    for pages in [&snapshot, &later] {
        if pages.windows(2).any(|pair| pair[0].0 >= pair[1].0) {
            wasmtime::bail!("snapshot pages are not in ascending order");
        }
        if let Some(&(last, _)) = pages.last()
            && last + PAGE > memory.len()
        {
            wasmtime::bail!(
                "snapshot page at {last:#x} is past the guest's memory ({} bytes)",
                memory.len()
            );
        }
    }
    // Both lists in one ascending order; a page in both is the snapshot's.
    let mut pages: Vec<(usize, Option<&[u8]>)> = snapshot.into_iter().chain(later).collect();
    pages.sort_by_key(|&(start, _)| start);
    pages.dedup_by_key(|&mut (start, _)| start);
    pages.retain(|&(start, _)| {
        !skip
            .iter()
            .any(|range| start < range.end && start + PAGE > range.start)
    });
    let mut written = 0;
    for run in pages.chunk_by(|a, b| a.0 + PAGE == b.0) {
        let (start, end) = (run[0].0, run[run.len() - 1].0 + PAGE);
        let target = &mut memory[start..end];
        prepare(target);
        for (page, &(_, bytes)) in target.chunks_exact_mut(PAGE).zip(run) {
            if let Some(bytes) = bytes {
                page.copy_from_slice(bytes);
                written += 1;
            }
        }
    }
    Ok(written)
}

/// Faults in `region`'s pages for writing in one call where the kernel can
/// (`MADV_POPULATE_WRITE`, Linux 5.14+); elsewhere, or if it refuses, the copy that follows
/// faults them in one by one. The contents do not change either way.
fn populate(region: &mut [u8]) {
    #[cfg(target_os = "linux")]
    // SAFETY: `region` is memory this call has exclusive access to; populating only faults
    // its pages in (breaking copy-on-write sharing with the same bytes), it changes no byte.
    // The address is page-aligned (linear memory is, and runs start at 4 KiB pages); where the
    // host's pages are larger the call fails with `EINVAL`, which is harmless.
    #[allow(unsafe_code)]
    unsafe {
        libc::madvise(
            region.as_mut_ptr().cast(),
            region.len(),
            libc::MADV_POPULATE_WRITE,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = region;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records for `pages` (index, fill byte).
    fn records(pages: &[(u32, u8)]) -> Vec<u8> {
        let mut out = Vec::new();
        for &(index, fill) in pages {
            out.extend_from_slice(&index.to_le_bytes());
            out.extend(std::iter::repeat_n(fill, PAGE));
        }
        out
    }

    #[test]
    fn pages_land_at_their_index_in_runs_and_skipped_pages_stay() {
        let mut memory = vec![0u8; 8 * PAGE];
        let mut runs = Vec::new();
        let written = write_pages(
            &records(&[(0, 9), (1, 1), (2, 2), (3, 3), (5, 5), (6, 6)]),
            &[],
            &mut memory,
            // The second range overlaps page 6 by one byte only: the page is still skipped.
            &[0..1, 6 * PAGE + PAGE - 1..7 * PAGE],
            |region| runs.push((region.as_ptr() as usize, region.len())),
        )
        .unwrap();
        assert_eq!(written, 4);
        let base = memory.as_ptr() as usize;
        assert_eq!(runs, [(base + PAGE, 3 * PAGE), (base + 5 * PAGE, PAGE)]);
        let fills: Vec<u8> = memory.chunks(PAGE).map(|page| page[0]).collect();
        assert_eq!(fills, [0, 1, 2, 3, 0, 5, 0, 0]);
        assert!(
            memory[PAGE..4 * PAGE]
                .chunks(PAGE)
                .enumerate()
                .all(|(i, page)| page.iter().all(|&b| b == i as u8 + 1))
        );
    }

    #[test]
    fn later_pages_join_the_populated_runs_but_keep_their_bytes() {
        let mut memory = vec![7u8; 8 * PAGE];
        let mut runs = Vec::new();
        let written = write_pages(
            &records(&[(1, 1), (4, 4)]),
            // Page 4 is the snapshot's as well; page 6 is skipped.
            &[2, 3, 4, 6],
            &mut memory,
            std::slice::from_ref(&(6 * PAGE..7 * PAGE)),
            |region| runs.push((region.as_ptr() as usize, region.len())),
        )
        .unwrap();
        assert_eq!(written, 2);
        let base = memory.as_ptr() as usize;
        assert_eq!(runs, [(base + PAGE, 4 * PAGE)]);
        let fills: Vec<u8> = memory.chunks(PAGE).map(|page| page[0]).collect();
        assert_eq!(fills, [7, 1, 7, 7, 4, 7, 7, 7]);
        let past = write_pages(&records(&[]), &[8], &mut memory, &[], |_| {}).unwrap_err();
        assert!(
            past.to_string().contains("past the guest's memory"),
            "{past}"
        );
        let unordered = write_pages(&[], &[3, 2], &mut memory, &[], |_| {}).unwrap_err();
        assert!(unordered.to_string().contains("ascending"), "{unordered}");
    }

    #[test]
    fn a_page_past_the_memory_or_out_of_order_is_an_error() {
        let mut memory = vec![0u8; 2 * PAGE];
        let past = write_pages(&records(&[(2, 1)]), &[], &mut memory, &[], |_| {}).unwrap_err();
        assert!(
            past.to_string().contains("past the guest's memory"),
            "{past}"
        );
        let unordered =
            write_pages(&records(&[(1, 1), (0, 1)]), &[], &mut memory, &[], |_| {}).unwrap_err();
        assert!(unordered.to_string().contains("ascending"), "{unordered}");
        let torn = write_pages(&[0; 5], &[], &mut memory, &[], |_| {}).unwrap_err();
        assert!(torn.to_string().contains("whole pages"), "{torn}");
    }

    #[test]
    fn populating_changes_no_byte() {
        // A page-aligned region with known contents.
        let layout = std::alloc::Layout::from_size_align(4 * PAGE, PAGE).unwrap();
        // SAFETY: a non-zero-sized layout; freed below with the same layout.
        #[allow(unsafe_code)]
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        assert!(!ptr.is_null());
        // SAFETY: `ptr` holds `4 * PAGE` initialised bytes owned by this test.
        #[allow(unsafe_code)]
        let region = unsafe { std::slice::from_raw_parts_mut(ptr, 4 * PAGE) };
        region
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        populate(region);
        assert!(region.iter().enumerate().all(|(i, &b)| b == i as u8));
        // SAFETY: allocated above with `layout`.
        #[allow(unsafe_code)]
        unsafe {
            std::alloc::dealloc(ptr, layout)
        };
    }
}
