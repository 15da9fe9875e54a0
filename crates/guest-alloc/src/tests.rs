//! The allocator on the host, over a backing allocator that counts what it hands out.

use std::cell::Cell;

use super::*;

/// The system allocator, counting pools and other blocks outstanding; refuses everything once
/// `refuse` is set.
#[derive(Default)]
struct Counting {
    pools: Cell<usize>,
    others: Cell<usize>,
    refuse: Cell<bool>,
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.refuse.get() {
            return ptr::null_mut();
        }
        let count = if layout == POOL_LAYOUT {
            &self.pools
        } else {
            &self.others
        };
        count.set(count.get() + 1);
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        let count = if layout == POOL_LAYOUT {
            &self.pools
        } else {
            &self.others
        };
        count.set(count.get() - 1);
        unsafe { System.dealloc(block, layout) }
    }
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 1).unwrap()
}

/// A deterministic stream of numbers (a 64-bit LCG's high bits).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n
    }
}

struct Block {
    ptr: *mut u8,
    size: usize,
    fill: u8,
}

fn fill(block: &Block) {
    unsafe { ptr::write_bytes(block.ptr, block.fill, block.size) };
}

fn intact(block: &Block) -> bool {
    unsafe { std::slice::from_raw_parts(block.ptr, block.size) }
        .iter()
        .all(|&b| b == block.fill)
}

#[test]
fn blocks_of_every_size_are_aligned_distinct_and_keep_their_contents() {
    let pools = Pools::new(Counting::default());
    let mut rng = Lcg(7);
    let mut live: Vec<Block> = Vec::new();
    // Miri checks every access, slowly: fewer rounds there.
    let rounds = if cfg!(miri) { 1_500 } else { 20_000 };
    for round in 0..rounds {
        if !live.is_empty() && rng.below(3) == 0 {
            let block = live.swap_remove(rng.below(live.len()));
            assert!(
                intact(&block),
                "a block of {} bytes was overwritten",
                block.size
            );
            unsafe { pools.dealloc(block.ptr, layout(block.size)) };
        } else {
            let size = 1 + rng.below(700);
            let ptr = unsafe { pools.alloc(layout(size)) };
            assert!(!ptr.is_null());
            if size <= MAX_SMALL {
                assert_eq!(ptr as usize % GRAIN, 0, "a small block is GRAIN-aligned");
            }
            let block = Block {
                ptr,
                size,
                fill: round as u8,
            };
            fill(&block);
            live.push(block);
        }
    }
    let mut ranges: Vec<(usize, usize)> = live
        .iter()
        .map(|b| (b.ptr as usize, b.ptr as usize + b.size))
        .collect();
    ranges.sort();
    assert!(
        ranges.windows(2).all(|w| w[0].1 <= w[1].0),
        "blocks overlap"
    );
    for block in live {
        assert!(intact(&block));
        unsafe { pools.dealloc(block.ptr, layout(block.size)) };
    }
    assert_eq!(pools.backing.others.get(), 0, "every large block was freed");
    assert!(
        pools.backing.pools.get() <= CLASSES,
        "at most one empty pool per class is kept, {} are",
        pools.backing.pools.get()
    );
}

/// Allocates blocks of `size` until the backing allocator has handed out `pools` pools.
fn fill_pools(pools: &Pools<Counting>, size: usize, count: usize) -> Vec<*mut u8> {
    let mut blocks = Vec::new();
    let before = pools.backing.pools.get();
    loop {
        let ptr = unsafe { pools.alloc(layout(size)) };
        if pools.backing.pools.get() == before + count + 1 {
            unsafe { pools.dealloc(ptr, layout(size)) };
            return blocks;
        }
        blocks.push(ptr);
    }
}

#[test]
fn emptied_pools_go_back_except_the_last_open_one_of_the_class() {
    let pools = Pools::new(Counting::default());
    let blocks = fill_pools(&pools, 48, 3);
    assert_eq!(
        pools.backing.pools.get(),
        4,
        "three full pools and the one just opened"
    );
    for &ptr in &blocks {
        unsafe { pools.dealloc(ptr, layout(48)) };
    }
    assert_eq!(
        pools.backing.pools.get(),
        1,
        "one empty pool of the class is kept"
    );
    // The space is free for another class: 200-byte blocks take new pools from the backing
    // allocator, which can reuse what was returned.
    let other = fill_pools(&pools, 200, 3);
    assert_eq!(pools.backing.pools.get(), 5);
    for &ptr in &other {
        unsafe { pools.dealloc(ptr, layout(200)) };
    }
    assert_eq!(pools.backing.pools.get(), 2);
}

#[test]
fn a_loop_that_allocates_and_frees_one_block_keeps_its_pool() {
    let pools = Pools::new(Counting::default());
    for _ in 0..1000 {
        let ptr = unsafe { pools.alloc(layout(64)) };
        unsafe { pools.dealloc(ptr, layout(64)) };
    }
    assert_eq!(pools.backing.pools.get(), 1);
}

#[test]
fn freed_blocks_are_reused_first() {
    let pools = Pools::new(Counting::default());
    let a = unsafe { pools.alloc(layout(100)) };
    let b = unsafe { pools.alloc(layout(100)) };
    unsafe { pools.dealloc(a, layout(100)) };
    let again = unsafe { pools.alloc(layout(97)) };
    assert_eq!(again, a, "same class, last freed");
    let fresh = unsafe { pools.alloc(layout(100)) };
    assert_ne!(fresh, b);
    for block in [again, b, fresh] {
        unsafe { pools.dealloc(block, layout(100)) };
    }
}

#[test]
fn large_and_over_aligned_blocks_go_to_the_backing_allocator() {
    let pools = Pools::new(Counting::default());
    let large = unsafe { pools.alloc(layout(MAX_SMALL + 1)) };
    let aligned_layout = Layout::from_size_align(64, 64).unwrap();
    let aligned = unsafe { pools.alloc(aligned_layout) };
    assert_eq!(aligned as usize % 64, 0);
    assert_eq!(pools.backing.others.get(), 2);
    assert_eq!(pools.backing.pools.get(), 0);
    unsafe {
        pools.dealloc(large, layout(MAX_SMALL + 1));
        pools.dealloc(aligned, aligned_layout);
    }
    assert_eq!(pools.backing.others.get(), 0);
}

#[test]
fn realloc_keeps_contents_within_and_across_classes_and_sizes() {
    let pools = Pools::new(Counting::default());
    let mut size = 10;
    let mut ptr = unsafe { pools.alloc(layout(size)) };
    for (i, byte) in (0..size).enumerate() {
        unsafe { *ptr.add(i) = byte as u8 };
    }
    // Within a class (10 -> 16 bytes) the block stays; then it moves to larger classes, to
    // the backing allocator and back to a small class.
    let same = unsafe { pools.realloc(ptr, layout(size), 16) };
    assert_eq!(same, ptr);
    size = 16;
    for new_size in [100, 512, 513, 5000, 40] {
        ptr = unsafe { pools.realloc(ptr, layout(size), new_size) };
        let kept = size.min(new_size).min(10);
        for i in 0..kept {
            assert_eq!(
                unsafe { *ptr.add(i) },
                i as u8,
                "byte {i} after {size} -> {new_size}"
            );
        }
        size = new_size;
    }
    unsafe { pools.dealloc(ptr, layout(size)) };
    assert_eq!(pools.backing.others.get(), 0);
}

#[test]
fn alloc_zeroed_clears_a_reused_block() {
    let pools = Pools::new(Counting::default());
    let a = unsafe { pools.alloc(layout(64)) };
    unsafe { ptr::write_bytes(a, 0xAB, 64) };
    unsafe { pools.dealloc(a, layout(64)) };
    let b = unsafe { pools.alloc_zeroed(layout(64)) };
    assert_eq!(a, b);
    assert!(
        unsafe { std::slice::from_raw_parts(b, 64) }
            .iter()
            .all(|&x| x == 0)
    );
    unsafe { pools.dealloc(b, layout(64)) };
}

#[test]
fn a_refused_pool_is_a_null_block_and_nothing_breaks() {
    let pools = Pools::new(Counting::default());
    pools.backing.refuse.set(true);
    assert!(unsafe { pools.alloc(layout(32)) }.is_null());
    assert!(unsafe { pools.alloc(layout(4096)) }.is_null());
    pools.backing.refuse.set(false);
    let ptr = unsafe { pools.alloc(layout(32)) };
    assert!(!ptr.is_null());
    unsafe { pools.dealloc(ptr, layout(32)) };
}
