//! The canonical ABI's allocator, routed to the guest's global allocator.

use core::arch::wasm32;

/// The canonical ABI's allocator: the global allocator (the guest's pools). It replaces
/// wasi-libc's weak default, which calls wasi-libc's `realloc`: a block it returned would later
/// be freed through Rust's global allocator, which is not wasi-libc's `malloc`.
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
