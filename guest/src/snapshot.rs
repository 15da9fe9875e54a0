//! The guest's half of per-environment snapshots: handing the linear memory to the host after
//! an environment is loaded, and writing a snapshot's pages back into a fresh instance.
//!
//! A snapshot is the interpreter's linear memory between calls: the heap, the statics, the
//! interpreter and the loaded environment. Restoring it into a fresh instance of the same
//! component gives exactly the state the snapshot was taken in (the only mutable wasm global,
//! the stack pointer, is back at its base between calls). Two regions are never written by
//! a restore: the shadow stack (the restore runs on it; between calls it holds nothing) and
//! the scratch buffer the host's chunks are received in.

use core::arch::wasm32;
use core::cell::UnsafeCell;

/// Bytes of one page of a restore chunk (a 4 KiB page, not a 64 KiB wasm page).
const PAGE: usize = 4096;
/// One record of a chunk: the page index (u32, little-endian), then the page.
const RECORD: usize = 4 + PAGE;
/// The host sends chunks of at most this many bytes: sixteen records. Every page of the buffer
/// a restore writes stays private to the sandbox (and, in a fresh pool slot, is page-faulted in
/// first), so it is small; the host's round trip per chunk costs far less than a page fault.
const SCRATCH_BYTES: usize = 16 * RECORD;

/// Where chunks from the host land during a restore, and the flag that sends `cabi_realloc`
/// there. Page-aligned so that its pages can be skipped whole.
#[repr(C, align(4096))]
struct Scratch {
    active: bool,
    used: usize,
    bytes: [u8; SCRATCH_BYTES],
}

struct ScratchCell(UnsafeCell<Scratch>);

// SAFETY: the guest is single-threaded.
unsafe impl Sync for ScratchCell {}

static SCRATCH: ScratchCell = ScratchCell(UnsafeCell::new(Scratch {
    active: false,
    used: 0,
    bytes: [0; SCRATCH_BYTES],
}));

unsafe extern "C" {
    /// Bounds of the shadow stack, defined by the linker.
    static __stack_low: u8;
    static __stack_high: u8;
}

/// Passes the whole linear memory (from byte 1) to the host, allocating nothing: the heap the
/// host receives is exactly the heap between calls.
pub fn capture() {
    let size = wasm32::memory_size::<0>() * 65536;
    // SAFETY: addresses 1..size are inside linear memory 0 (its current size), every byte of
    // it is initialised (wasm memory starts zero-filled), and nothing writes to it while the
    // host copies it out during the call below (the guest is single-threaded).
    let memory = unsafe { core::slice::from_raw_parts(1 as *const u8, size - 1) };
    crate::spade::env::snapshot_host::capture_memory(memory);
}

/// Grows memory to `pages` wasm pages and writes every page the host sends, except the
/// shadow stack's and the scratch buffer's.
pub fn restore(pages: u32) {
    let current = wasm32::memory_size::<0>();
    if (pages as usize) > current && wasm32::memory_grow::<0>(pages as usize - current) == usize::MAX
    {
        // The host sized the memory limit for the snapshot; a failure here is a host bug.
        wasm32::unreachable();
    }
    // SAFETY: single-threaded; nothing else holds a reference into SCRATCH.
    let scratch = unsafe { &mut *SCRATCH.0.get() };
    let skip = [
        // Only the addresses of the linker-defined symbols are taken.
        (&raw const __stack_low as usize, &raw const __stack_high as usize),
        (
            scratch as *const Scratch as usize,
            scratch as *const Scratch as usize + core::mem::size_of::<Scratch>(),
        ),
    ];
    scratch.active = true;
    loop {
        scratch.used = 0;
        let chunk = crate::spade::env::snapshot_host::next_chunk();
        let (ptr, len) = (chunk.as_ptr(), chunk.len());
        // The chunk lives in the scratch buffer, not on the heap: it must not be freed.
        core::mem::forget(chunk);
        if len == 0 {
            break;
        }
        // SAFETY: `ptr..ptr + len` is the list the host just wrote into the scratch buffer.
        let records = unsafe { core::slice::from_raw_parts(ptr, len) };
        for record in records.chunks_exact(RECORD) {
            let index = u32::from_le_bytes([record[0], record[1], record[2], record[3]]) as usize;
            let start = index * PAGE;
            if skip
                .iter()
                .any(|&(low, high)| start < high && start + PAGE > low)
            {
                continue;
            }
            // SAFETY: the page is inside memory (grown above to the snapshot's size), outside
            // the live stack and the scratch buffer, and no Rust reference points into it
            // while it is overwritten: between calls nothing on the heap is borrowed.
            unsafe {
                core::ptr::copy_nonoverlapping(record[4..].as_ptr(), start as *mut u8, PAGE);
            }
        }
    }
    scratch.active = false;
}

/// The canonical ABI's allocator: the scratch buffer while a restore receives chunks (the heap
/// is being overwritten then), the global allocator otherwise. It replaces wasi-libc's weak
/// default, which is the same `realloc`-based allocator.
///
/// # Safety
///
/// Called by the component's canonical ABI glue with its usual contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn cabi_realloc(
    old_ptr: *mut u8,
    old_len: usize,
    align: usize,
    new_len: usize,
) -> *mut u8 {
    // SAFETY: single-threaded; the scratch state is only read and bumped here.
    let scratch = unsafe { &mut *SCRATCH.0.get() };
    if scratch.active {
        let start = scratch.used.next_multiple_of(align.max(1));
        if old_len != 0 || start + new_len > SCRATCH_BYTES {
            wasm32::unreachable();
        }
        scratch.used = start + new_len;
        return scratch.bytes[start..].as_mut_ptr();
    }
    use std::alloc::{Layout, alloc, realloc};
    if new_len == 0 {
        return align as *mut u8;
    }
    // SAFETY: the canonical ABI passes a valid alignment and, for a reallocation, the pointer
    // and size of an earlier allocation with the same alignment.
    let ptr = unsafe {
        if old_len == 0 {
            alloc(Layout::from_size_align_unchecked(new_len, align))
        } else {
            realloc(
                old_ptr,
                Layout::from_size_align_unchecked(old_len, align),
                new_len,
            )
        }
    };
    if ptr.is_null() {
        wasm32::unreachable();
    }
    ptr
}
