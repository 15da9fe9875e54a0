//! The spade guest's global allocator: pools of same-sized small blocks in front of wasi-libc's
//! `malloc` (the system allocator of `wasm32-wasip2`), the way CPython's own `pymalloc` works.
//!
//! RustPython allocates on nearly every bytecode (ints, floats, tuples, frames, bound methods),
//! and almost all of it is small. A small block (at most [`MAX_SMALL`] bytes, alignment at most
//! [`GRAIN`]) comes from a [`POOL`]-byte pool of blocks of its size class: popped from the
//! pool's free list, or cut from its untouched end, and pushed back on that list when freed, a
//! handful of instructions either way against dlmalloc's bins, headers and coalescing.
//! Everything larger goes to the backing allocator.
//!
//! Memory comes back as it does with `pymalloc`: a pool whose blocks are all free is returned
//! to the backing allocator (except the last pool of its class with room, kept so that a loop
//! that allocates and frees one object does not take and return a pool every time), so memory
//! freed by small objects of one size serves objects of another. A single live block keeps its
//! whole pool. The state is a pure function of the calls made (no outside addresses, no
//! randomisation), so a snapshot or a replay sees the same heap, byte for byte, run after run.

#![deny(unsafe_op_in_unsafe_fn)]

use core::cell::UnsafeCell;
use core::ptr;
use std::alloc::{GlobalAlloc, Layout, System};

/// Size classes are multiples of this many bytes, and every small block is aligned to it.
pub const GRAIN: usize = 16;
/// Number of size classes: blocks of 16, 32, ..., 512 bytes (pymalloc's largest small size).
const CLASSES: usize = 32;
/// The largest small block.
pub const MAX_SMALL: usize = GRAIN * CLASSES;
/// Bytes of one pool, taken from the backing allocator aligned to its size so that a block
/// finds its pool by masking its address. Each pool holds blocks of one class after its header.
pub const POOL: usize = 16 << 10;

/// The header at the start of every pool.
#[repr(C)]
struct Pool {
    /// Freed blocks of this pool; each holds the address of the next.
    free: *mut u8,
    /// Offset of the first block never handed out.
    untouched: usize,
    /// Blocks handed out and not yet freed.
    live: usize,
    /// The size class.
    class: usize,
    /// Neighbours in the class's list of pools with room (null at the ends).
    prev: *mut Pool,
    next: *mut Pool,
    /// Whether the pool is on that list (it is off it exactly when it is full).
    listed: bool,
}

/// Offset of a pool's first block: its header, rounded up to [`GRAIN`].
const FIRST: usize = core::mem::size_of::<Pool>().next_multiple_of(GRAIN);

/// The layout pools are taken from the backing allocator with.
const POOL_LAYOUT: Layout = match Layout::from_size_align(POOL, POOL) {
    Ok(layout) => layout,
    Err(_) => panic!("POOL is a power of two"),
};

/// The allocator; see the crate documentation. `B` is where pools and large blocks come from:
/// [`System`] (wasi-libc's `malloc`) in the guest, a counting allocator in the tests.
///
/// Not thread-safe: it is `Sync` only on WebAssembly without threads (the guest's
/// `wasm32-wasip2`), so that it can be the guest's `#[global_allocator]`.
pub struct Pools<B: GlobalAlloc = System> {
    /// Per class, the pools that have room (the head is allocated from first).
    open: UnsafeCell<[*mut Pool; CLASSES]>,
    backing: B,
}

// SAFETY: WebAssembly without the atomics feature has no second thread.
#[cfg(all(target_family = "wasm", not(target_feature = "atomics")))]
unsafe impl<B: GlobalAlloc + Sync> Sync for Pools<B> {}

impl<B: GlobalAlloc> Pools<B> {
    /// An allocator with no pools yet, taking memory from `backing`.
    pub const fn new(backing: B) -> Self {
        Pools {
            open: UnsafeCell::new([ptr::null_mut(); CLASSES]),
            backing,
        }
    }
}

/// The size class of a block of `size` bytes aligned to `align`, when it is small.
#[inline(always)]
fn class_of(size: usize, align: usize) -> Option<usize> {
    (size <= MAX_SMALL && align <= GRAIN).then(|| size.saturating_sub(1) / GRAIN)
}

#[inline(always)]
fn block_size(class: usize) -> usize {
    (class + 1) * GRAIN
}

impl<B: GlobalAlloc> Pools<B> {
    /// The lists of open pools.
    ///
    /// # Safety
    ///
    /// No other reference to them may be live (single-threaded, and no method holds one
    /// across a call into the backing allocator that could re-enter).
    #[allow(clippy::mut_from_ref)]
    #[inline(always)]
    unsafe fn open(&self) -> &mut [*mut Pool; CLASSES] {
        // SAFETY: guaranteed by the caller.
        unsafe { &mut *self.open.get() }
    }

    /// A block of `class`, or null when the backing allocator has no pool to give.
    #[inline(always)]
    unsafe fn alloc_small(&self, class: usize) -> *mut u8 {
        // SAFETY: single-threaded; the reference ends before anything else runs.
        let pool = unsafe { self.open()[class] };
        if pool.is_null() {
            return unsafe { self.alloc_from_new_pool(class) };
        }
        // SAFETY: a pool on a list is a live pool of this class with room for a block.
        unsafe {
            let p = &mut *pool;
            p.live += 1;
            let block = p.free;
            if !block.is_null() {
                p.free = *(block as *mut *mut u8);
                if p.free.is_null() && p.untouched + block_size(class) > POOL {
                    self.unlist(pool);
                }
                return block;
            }
            let block = (pool as *mut u8).add(p.untouched);
            p.untouched += block_size(class);
            if p.untouched + block_size(class) > POOL {
                self.unlist(pool);
            }
            block
        }
    }

    #[cold]
    unsafe fn alloc_from_new_pool(&self, class: usize) -> *mut u8 {
        // SAFETY: POOL_LAYOUT has a non-zero size.
        let pool = unsafe { self.backing.alloc(POOL_LAYOUT) } as *mut Pool;
        if pool.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: `pool` is POOL fresh bytes aligned to POOL, enough for the header and at
        // least one block of any class.
        unsafe {
            pool.write(Pool {
                free: ptr::null_mut(),
                untouched: FIRST,
                live: 0,
                class,
                prev: ptr::null_mut(),
                next: ptr::null_mut(),
                listed: false,
            });
            self.list(pool);
            self.alloc_small(class)
        }
    }

    /// Puts `pool` at the head of its class's list.
    unsafe fn list(&self, pool: *mut Pool) {
        // SAFETY: `pool` is a live pool off its list; the list's pools are live.
        unsafe {
            let p = &mut *pool;
            let open = self.open();
            let head = open[p.class];
            p.prev = ptr::null_mut();
            p.next = head;
            p.listed = true;
            if !head.is_null() {
                (*head).prev = pool;
            }
            open[p.class] = pool;
        }
    }

    /// Takes `pool` off its class's list (it is full, or about to be returned).
    unsafe fn unlist(&self, pool: *mut Pool) {
        // SAFETY: `pool` is a live pool on its list; its neighbours are live.
        unsafe {
            let p = &mut *pool;
            if p.prev.is_null() {
                self.open()[p.class] = p.next;
            } else {
                (*p.prev).next = p.next;
            }
            if !p.next.is_null() {
                (*p.next).prev = p.prev;
            }
            p.prev = ptr::null_mut();
            p.next = ptr::null_mut();
            p.listed = false;
        }
    }

    #[inline(always)]
    unsafe fn dealloc_small(&self, block: *mut u8) {
        // The block's provenance is its pool's: the header is reached through it.
        let pool = block.map_addr(|addr| addr & !(POOL - 1)).cast::<Pool>();
        // SAFETY: `block` was handed out by `alloc_small` from this pool and is no longer used.
        unsafe {
            let p = &mut *pool;
            *(block as *mut *mut u8) = p.free;
            p.free = block;
            p.live -= 1;
            if !p.listed {
                self.list(pool);
            } else if p.live == 0 {
                self.release(pool);
            }
        }
    }

    /// Returns an empty `pool` to the backing allocator, unless it is the only pool of its
    /// class with room.
    #[cold]
    unsafe fn release(&self, pool: *mut Pool) {
        // SAFETY: `pool` is live, listed and holds no live block.
        unsafe {
            let p = &*pool;
            if p.prev.is_null() && p.next.is_null() {
                return;
            }
            self.unlist(pool);
            self.backing.dealloc(pool as *mut u8, POOL_LAYOUT);
        }
    }
}

impl<B: GlobalAlloc> Drop for Pools<B> {
    /// Returns the pools that hold no live block. The guest's allocator is a static and never
    /// dropped; this is for allocators made for a while, as in the tests.
    fn drop(&mut self) {
        for class in 0..CLASSES {
            let mut pool = self.open.get_mut()[class];
            while !pool.is_null() {
                // SAFETY: listed pools are live; an empty one is handed back once.
                unsafe {
                    let next = (*pool).next;
                    if (*pool).live == 0 {
                        self.backing.dealloc(pool.cast(), POOL_LAYOUT);
                    }
                    pool = next;
                }
            }
        }
    }
}

// SAFETY: small blocks are distinct, GRAIN-aligned pieces of pools, each at least as large as
// its class, handed out once until freed; everything else is the backing allocator's.
unsafe impl<B: GlobalAlloc> GlobalAlloc for Pools<B> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match class_of(layout.size(), layout.align()) {
            Some(class) => unsafe { self.alloc_small(class) },
            None => unsafe { self.backing.alloc(layout) },
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match class_of(layout.size(), layout.align()) {
            Some(class) => {
                let block = unsafe { self.alloc_small(class) };
                if !block.is_null() {
                    // SAFETY: the block holds at least `layout.size()` bytes.
                    unsafe { ptr::write_bytes(block, 0, layout.size()) };
                }
                block
            }
            None => unsafe { self.backing.alloc_zeroed(layout) },
        }
    }

    #[inline]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        match class_of(layout.size(), layout.align()) {
            Some(_) => unsafe { self.dealloc_small(block) },
            None => unsafe { self.backing.dealloc(block, layout) },
        }
    }

    #[inline]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = class_of(layout.size(), layout.align());
        let new = class_of(new_size, layout.align());
        match (old, new) {
            (None, None) => unsafe { self.backing.realloc(block, layout, new_size) },
            // The block already holds `new_size` bytes.
            (Some(a), Some(b)) if a == b => block,
            _ => {
                // SAFETY: the caller guarantees `new_size` with this alignment is a valid layout.
                let new_layout =
                    unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
                let moved = unsafe { self.alloc(new_layout) };
                if !moved.is_null() {
                    // SAFETY: both blocks are live and distinct; the copy fits both.
                    unsafe {
                        ptr::copy_nonoverlapping(block, moved, layout.size().min(new_size));
                        self.dealloc(block, layout);
                    }
                }
                moved
            }
        }
    }
}

#[cfg(test)]
mod tests;
