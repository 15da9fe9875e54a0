//! The guest's half of per-environment snapshots: handing the linear memory to the host after
//! an environment is loaded, and having the host write a snapshot's pages into a fresh
//! instance.
//!
//! A snapshot is the interpreter's linear memory between calls: the heap, the statics, the
//! interpreter and the loaded environment. Restoring it into a fresh instance of the same
//! component gives exactly the state the snapshot was taken in (the only mutable wasm global,
//! the stack pointer, is back at its base between calls). One region is never written by a
//! restore: the shadow stack (the restore runs on it; between calls it holds nothing).

use core::arch::wasm32;

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

/// Grows memory to `pages` wasm pages and has the host write every page of the snapshot into
/// it except the shadow stack's. The host writes the pages in place (no copy through a guest
/// buffer), so nothing on the heap may be borrowed across the call, and nothing is: the
/// export's glue allocates nothing for a `u32` argument, and the `skip` list lives on the
/// shadow stack, which the host leaves alone, and is passed to the host in place.
pub fn restore(pages: u32) {
    let current = wasm32::memory_size::<0>();
    if (pages as usize) > current
        && wasm32::memory_grow::<0>(pages as usize - current) == usize::MAX
    {
        // The host sized the memory limit for the snapshot; a failure here is a host bug.
        wasm32::unreachable();
    }
    // Only the addresses of the linker-defined symbols are taken. The list is passed in place
    // (a list of `u32`); nothing may be allocated for the call, since the host overwrites the
    // allocator's state with the snapshot's.
    let skip = [
        &raw const __stack_low as u32,
        &raw const __stack_high as u32,
    ];
    crate::spade::env::snapshot_host::write_snapshot(&skip);
}
