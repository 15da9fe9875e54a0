//! Which pages of a linear memory the process has written, from the kernel's page table
//! (`/proc/self/pagemap`): a fork's capture compares only those with the fresh interpreter's.
//!
//! A linear memory starts as a copy-on-write mapping of the pre-initialised guest's image
//! (`memory_init_cow`) with zero pages past it. A page nobody wrote is either not present
//! (it reads as the image or as zeros) or present and still backed by the image file; either
//! way it holds the fresh interpreter's bytes. A page written since is private anonymous
//! memory (or swapped out). So only present anonymous and swapped pages can differ from a
//! fresh interpreter's; they are compared byte for byte, and the rest are skipped. Where the
//! page table cannot be read, or the memory is not a page-aligned mapping, every page is a
//! candidate: the answer is the same, only slower.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::snapshot::PAGE;

/// Bit 63 of a pagemap entry: the page is present in RAM.
const PRESENT: u64 = 1 << 63;
/// Bit 62: the page is swapped out.
const SWAPPED: u64 = 1 << 62;
/// Bit 61: the page is file-backed or shared anonymous (here: still the image's).
const FILE_OR_SHARED: u64 = 1 << 61;

/// For each 4 KiB page of the memory whose bytes from address 1 are `memory` (as the guest
/// hands it over), whether the process may have written it: `None` when that cannot be told
/// (every page is then a candidate).
pub(crate) fn written_pages(memory: &[u8]) -> Option<Vec<bool>> {
    let start = (memory.as_ptr() as usize).checked_sub(1)?;
    if !start.is_multiple_of(PAGE) || page_size() != PAGE {
        return None;
    }
    let pages = (memory.len() + 1).div_ceil(PAGE);
    let mut entries = vec![0u8; pages * 8];
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    pagemap
        .read_exact_at(&mut entries, (start / PAGE * 8) as u64)
        .ok()?;
    Some(
        entries
            .chunks_exact(8)
            .map(|entry| written(u64::from_le_bytes(entry.try_into().expect("8 bytes"))))
            .collect(),
    )
}

/// The bytes of the `len`-byte region at address `start` that the process holds privately:
/// 4 KiB pages present and anonymous (written since they were mapped) or swapped out. Pages
/// never touched, or still backed by the image file, cost no private memory and are not
/// counted. `None` when the page table cannot be read or `start` is not page-aligned.
///
/// This reads the kernel's page table only (8 bytes per page, in 64 KiB reads); it never
/// touches the region itself, so it is sound for any address.
pub(crate) fn resident_bytes(start: usize, len: usize) -> Option<u64> {
    if !start.is_multiple_of(PAGE) || page_size() != PAGE {
        return None;
    }
    let pagemap = File::open("/proc/self/pagemap").ok()?;
    let pages = len.div_ceil(PAGE);
    let mut entries = vec![0u8; pages.min(CHUNK_PAGES) * 8];
    let mut private = 0u64;
    let mut done = 0;
    while done < pages {
        let n = (pages - done).min(CHUNK_PAGES);
        let buf = &mut entries[..n * 8];
        pagemap
            .read_exact_at(buf, ((start / PAGE + done) * 8) as u64)
            .ok()?;
        private += buf
            .chunks_exact(8)
            .filter(|entry| {
                let entry = u64::from_le_bytes([
                    entry[0], entry[1], entry[2], entry[3], entry[4], entry[5], entry[6], entry[7],
                ]);
                written(entry)
            })
            .count() as u64;
        done += n;
    }
    Some(private * PAGE as u64)
}

/// Pages of page table read at once by [`resident_bytes`] (64 KiB of entries).
const CHUNK_PAGES: usize = 8192;

/// Whether a pagemap entry is a page the process may have written: swapped out, or present
/// and neither file-backed nor shared.
fn written(entry: u64) -> bool {
    entry & SWAPPED != 0 || (entry & PRESENT != 0 && entry & FILE_OR_SHARED == 0)
}

fn page_size() -> usize {
    rustix::param::page_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An anonymous private mapping of `pages` pages, as a slice from its address 1.
    struct Mapping {
        base: *mut u8,
        len: usize,
    }

    impl Mapping {
        #[allow(unsafe_code)]
        fn new(pages: usize) -> Mapping {
            let len = pages * PAGE;
            // SAFETY: a fresh anonymous mapping, unmapped in `drop`.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            Mapping {
                base: base.cast(),
                len,
            }
        }

        #[allow(unsafe_code)]
        fn memory(&mut self) -> &mut [u8] {
            // SAFETY: bytes 1..len of the mapping, borrowed mutably through `self`.
            unsafe { std::slice::from_raw_parts_mut(self.base.add(1), self.len - 1) }
        }
    }

    impl Drop for Mapping {
        #[allow(unsafe_code)]
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }

    #[test]
    fn only_written_pages_are_candidates() {
        let mut mapping = Mapping::new(8);
        let memory = mapping.memory();
        // Address 3 * PAGE + 10 and 6 * PAGE are bytes - 1 of the slice.
        memory[3 * PAGE + 9] = 1;
        memory[6 * PAGE - 1] = 2;
        // Reading a page maps the zero page, which the page table shows as anonymous: a
        // candidate that compares equal (only written pages must be candidates).
        let _ = std::hint::black_box(memory[PAGE * 5]);
        let Some(written) = written_pages(memory) else {
            // No readable page table here (not Linux, or /proc hidden): nothing to check.
            return;
        };
        assert!(written[3] && written[6], "{written:?}");
        for untouched in [0, 1, 2, 4, 7] {
            assert!(!written[untouched], "page {untouched}: {written:?}");
        }
    }

    #[test]
    fn resident_bytes_count_the_written_pages_only() {
        let mut mapping = Mapping::new(8);
        let base = mapping.base as usize;
        let Some(before) = resident_bytes(base, 8 * PAGE) else {
            return;
        };
        assert_eq!(before, 0, "nothing touched yet");
        let memory = mapping.memory();
        memory[3 * PAGE + 9] = 1;
        memory[6 * PAGE - 1] = 2;
        assert_eq!(resident_bytes(base, 8 * PAGE), Some(2 * PAGE as u64));
        // Only the region asked about counts: pages 0..4 hold one written page.
        assert_eq!(resident_bytes(base, 4 * PAGE), Some(PAGE as u64));
        assert_eq!(resident_bytes(base + 1, PAGE), None, "not page-aligned");
    }

    #[test]
    fn a_slice_not_at_a_page_boundary_plus_one_has_no_answer() {
        let mut mapping = Mapping::new(2);
        let memory = mapping.memory();
        assert!(written_pages(&memory[1..]).is_none());
    }
}
