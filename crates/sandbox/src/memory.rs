//! A memory budget shared by sandboxes: every sandbox's linear memory is charged to it as it
//! grows, and released when the sandbox's store is dropped.
//!
//! Without an account (the default: [`Config::memory_account`] is `None`) each sandbox is
//! bounded only by its own [`Limits::memory_limit`]. With one, a sandbox is charged what its
//! linear memory has grown to, and a growth that would take the account past its budget is
//! denied exactly as a growth past the sandbox's own limit is: the guest sees a failed
//! `memory.grow` (Python's `MemoryError`), and the call ends with
//! [`CallError::MemoryLimit`](crate::CallError::MemoryLimit), naming the budget. Other
//! sandboxes on the account are not touched.
//!
//! # What is charged
//!
//! A sandbox's linear memory starts as a copy-on-write mapping of the pre-initialised
//! interpreter's image: those pages cost nothing until written. But an environment can write
//! every page of that image without growing the memory (touching every object of the
//! interpreter changes its reference count), and the host sees no page being written (no call
//! crosses to it). So the account charges by what can be known when:
//!
//! - **while a call runs, the whole memory**: before a call starts, its sandbox's charge is
//!   raised to its memory's full size (`Charge::arm`), and every growth during the call is
//!   charged as it happens. A call whose memory does not fit waits for other sandboxes to give
//!   bytes back, up to its call deadline, and then fails with `MemoryLimit` without running;
//! - **between calls, the pages the memory holds privately**: after a call, the charge falls to
//!   the memory's private pages, read from the kernel's page table (`/proc/self/pagemap`:
//!   present anonymous or swapped 4 KiB pages; `Charge::settle`). Nothing can write the
//!   memory until its next call, which arms the charge again first.
//!
//! So what is charged is never less than what the sandboxes hold, and a budget is never
//! overrun by sandboxes writing their images. The page table is read where the memory lies;
//! the host learns that when it writes a snapshot into the memory (every sandbox loaded from a
//! snapshot, and every fork). A sandbox loaded without one, or whose memory grew since (a
//! growing memory may move), stays charged its whole memory.
//!
//! The figures, for the guest this crate embeds: a fresh sandbox's memory is 29.5 MiB
//! (30,932,992 bytes, 472 WebAssembly pages; [`Runtime::fresh_memory_bytes`]); a
//! `tests/envs/grid_walk` sandbox after a whole episode is charged about 1.4 MiB between calls
//! (debug build, the development VM). A budget of 18 GiB therefore holds thousands of idle
//! sandboxes, and as many calls at once as their whole memories fit.
//!
//! What the account does not count: the host's own state of each sandbox (its store, tables,
//! the native stack a call runs on, a few MiB at most, bounded by the pool's settings), and
//! the pages a freed pool slot keeps resident for its next sandbox ([`Pool::keep_resident`]).
//!
//! [`Config::memory_account`]: crate::Config::memory_account
//! [`Limits::memory_limit`]: crate::Limits::memory_limit
//! [`Pool::keep_resident`]: crate::Pool::keep_resident
//! [`Runtime::fresh_memory_bytes`]: crate::Runtime::fresh_memory_bytes

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

/// The words of a [`CallError::MemoryLimit`](crate::CallError::MemoryLimit) message that say the
/// growth was refused by a shared [`MemoryAccount`] rather than by the sandbox's own limit: such
/// an outcome depends on what other sandboxes held at the time, so a caller that caches
/// outcomes as reproducible (a check's verdict) must not cache it.
pub const OVER_BUDGET: &str = "more than is left of the memory budget shared by all sandboxes";

/// A memory budget that the sandboxes of a runtime draw from (see the module docs). Cheap to
/// clone: clones share one account.
#[derive(Clone)]
pub struct MemoryAccount {
    inner: Arc<Inner>,
}

struct Inner {
    budget: u64,
    /// Bytes charged for each sandbox besides its linear memory ([`MemoryAccount::with_overhead`]).
    overhead: u64,
    charged: AtomicU64,
    /// The most that was ever charged at once.
    peak: AtomicU64,
    /// Woken whenever bytes are given back, for calls waiting to be armed.
    freed: Notify,
}

impl MemoryAccount {
    /// An account of `budget` bytes, nothing charged.
    pub fn new(budget: u64) -> MemoryAccount {
        MemoryAccount::with_overhead(budget, 0)
    }

    /// An account of `budget` bytes that also charges each sandbox `overhead` bytes for as
    /// long as it lives, besides its linear memory: the host's own state of a sandbox (its
    /// store, instance and tables, the stack its calls ran on), which is real memory too but
    /// grows with no call the account sees. `spade serve` charges 4 MiB.
    pub fn with_overhead(budget: u64, overhead: u64) -> MemoryAccount {
        MemoryAccount {
            inner: Arc::new(Inner {
                budget,
                overhead,
                charged: AtomicU64::new(0),
                peak: AtomicU64::new(0),
                freed: Notify::new(),
            }),
        }
    }

    /// Bytes charged for each sandbox besides its linear memory.
    pub fn overhead(&self) -> u64 {
        self.inner.overhead
    }

    /// The budget, in bytes.
    pub fn budget(&self) -> u64 {
        self.inner.budget
    }

    /// Bytes charged now: the linear memories of the sandboxes alive on this account.
    pub fn charged(&self) -> u64 {
        self.inner.charged.load(Ordering::Acquire)
    }

    /// The most bytes that were charged at once since the account was made.
    pub fn peak(&self) -> u64 {
        self.inner.peak.load(Ordering::Acquire)
    }

    /// Bytes left to charge.
    pub fn available(&self) -> u64 {
        self.budget().saturating_sub(self.charged())
    }

    /// Charges `bytes` if they fit in what is left; `false` (nothing charged) if not.
    fn try_charge(&self, bytes: u64) -> bool {
        let mut current = self.inner.charged.load(Ordering::Acquire);
        loop {
            let Some(next) = current
                .checked_add(bytes)
                .filter(|n| *n <= self.inner.budget)
            else {
                return false;
            };
            match self.inner.charged.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    self.inner.peak.fetch_max(next, Ordering::AcqRel);
                    return true;
                }
                Err(actual) => current = actual,
            }
        }
    }

    /// Gives back `bytes` charged earlier.
    fn release(&self, bytes: u64) {
        if bytes > 0 {
            self.inner.charged.fetch_sub(bytes, Ordering::AcqRel);
            self.inner.freed.notify_waiters();
        }
    }
}

impl fmt::Debug for MemoryAccount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryAccount")
            .field("budget", &self.budget())
            .field("charged", &self.charged())
            .finish()
    }
}

impl PartialEq for MemoryAccount {
    /// Two accounts are equal when they are the same account.
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// Where a sandbox's linear memory lies in the host's address space, learned when the host
/// last wrote into it (a snapshot's restore): its first byte's address and its length. Shared
/// between the memory's [`Charge`] and the write that learns it.
#[derive(Default)]
pub(crate) struct Location {
    /// `(address, length)`; `(0, 0)` while unknown.
    at: Mutex<(usize, usize)>,
}

impl Location {
    /// Records that the memory's bytes are the `len` bytes at `address`.
    pub(crate) fn set(&self, address: usize, len: usize) {
        *self.at.lock().unwrap_or_else(|e| e.into_inner()) = (address, len);
    }

    fn get(&self) -> Option<(usize, usize)> {
        let at = *self.at.lock().unwrap_or_else(|e| e.into_inner());
        (at.1 > 0).then_some(at)
    }
}

/// What one sandbox's linear memory is charged to an account; released when dropped (with the
/// sandbox's store).
///
/// While a call runs, the charge covers the whole memory ([`Charge::arm`] before it, every
/// growth during it). Between calls it is what the memory really holds privately
/// ([`Charge::settle`]), where the memory's place is known (see the module docs).
pub(crate) struct Charge {
    account: MemoryAccount,
    /// Bytes charged now.
    bytes: u64,
    /// The memory's size as of its last allowed growth.
    size: u64,
    /// Where the memory lies, once known.
    location: Arc<Location>,
}

/// A growth the account refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OverBudget {
    /// The account's budget.
    pub(crate) budget: u64,
    /// What was charged to it (all sandboxes) when the growth was refused.
    pub(crate) charged: u64,
}

impl Charge {
    /// Nothing charged yet to `account`.
    pub(crate) fn new(account: MemoryAccount) -> Charge {
        Charge {
            account,
            bytes: 0,
            size: 0,
            location: Arc::default(),
        }
    }

    /// The cell a restore records the memory's place in.
    pub(crate) fn location(&self) -> Arc<Location> {
        self.location.clone()
    }

    /// The memory's size as of its last allowed growth.
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    fn over_budget(&self) -> OverBudget {
        OverBudget {
            budget: self.account.budget(),
            charged: self.account.charged(),
        }
    }

    /// Charges the growth of a memory of `current` bytes to `desired` bytes, if it fits. A
    /// growth that was allowed before and then failed left the size past `current`; what it
    /// charged stays charged until the call is settled.
    pub(crate) fn grow(&mut self, current: usize, desired: usize) -> Result<(), OverBudget> {
        let (current, desired) = (current as u64, desired as u64);
        self.size = self.size.min(current);
        let more = (self.account.overhead() + desired).saturating_sub(self.bytes);
        if !self.account.try_charge(more) {
            return Err(self.over_budget());
        }
        self.bytes += more;
        self.size = desired;
        Ok(())
    }

    /// Before a call: charges the whole memory, since a call can write every page of it
    /// without growing it. Waits up to `wait` for other sandboxes to give enough back; the
    /// account's state then if they did not.
    pub(crate) async fn arm(&mut self, wait: Duration) -> Result<(), OverBudget> {
        let need = (self.account.overhead() + self.size).saturating_sub(self.bytes);
        if need == 0 {
            return Ok(());
        }
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            // Listen before trying, so that a release between the two is not missed.
            let freed = self.account.inner.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if self.account.try_charge(need) {
                self.bytes += need;
                return Ok(());
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(self.over_budget());
            }
        }
    }

    /// After a call: the charge becomes what the memory holds privately (see the module
    /// docs), when its place is known and it has not grown since; otherwise the whole memory
    /// (what a growth that failed after it was allowed charged past it is given back).
    pub(crate) fn settle(&mut self) {
        let resident = match self.location.get() {
            Some((address, len)) if len as u64 == self.size => {
                crate::cache::pagemap::resident_bytes(address, len)
            }
            _ => None,
        };
        let keep = self.account.overhead() + resident.map_or(self.size, |r| r.min(self.size));
        if self.bytes > keep {
            self.account.release(self.bytes - keep);
            self.bytes = keep;
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.account.release(self.bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_fit_the_budget_and_come_back_on_drop() {
        let account = MemoryAccount::new(100);
        let mut a = Charge::new(account.clone());
        let mut b = Charge::new(account.clone());
        assert_eq!(a.grow(0, 60), Ok(()));
        assert_eq!(
            b.grow(0, 50),
            Err(OverBudget {
                budget: 100,
                charged: 60
            })
        );
        assert_eq!(account.charged(), 60);
        assert_eq!(b.grow(0, 40), Ok(()));
        assert_eq!(account.available(), 0);
        drop(a);
        assert_eq!(account.charged(), 40);
        drop(b);
        assert_eq!(account.charged(), 0);
        assert_eq!(account.peak(), 100);
    }

    #[test]
    fn a_growth_that_failed_after_it_was_allowed_is_given_back_when_the_call_settles() {
        let account = MemoryAccount::new(100);
        let mut a = Charge::new(account.clone());
        a.grow(0, 10).unwrap();
        // Allowed to 50, but the memory stayed at 10: the charge holds 50 until the call
        // settles, and then the memory's 20.
        a.grow(10, 50).unwrap();
        a.grow(10, 20).unwrap();
        assert_eq!(account.charged(), 50);
        a.settle();
        assert_eq!(account.charged(), 20);
    }

    #[test]
    fn the_overhead_is_charged_for_as_long_as_the_sandbox_lives() {
        let account = MemoryAccount::with_overhead(100, 7);
        let mut a = Charge::new(account.clone());
        a.grow(0, 10).unwrap();
        assert_eq!(account.charged(), 17);
        a.settle();
        assert_eq!(account.charged(), 17, "no place known: the whole memory");
        assert_eq!(
            Charge::new(account.clone()).grow(0, 80),
            Err(OverBudget {
                budget: 100,
                charged: 17
            }),
            "80 and 7 more do not fit beside 17"
        );
        drop(a);
        assert_eq!(account.charged(), 0);
    }

    #[tokio::test]
    async fn arming_covers_the_whole_memory_and_waits_for_room() {
        let account = MemoryAccount::new(100);
        let mut a = Charge::new(account.clone());
        a.grow(0, 60).unwrap();
        // Settled to 10 (as if measured), then armed again: the whole 60.
        a.account.release(50);
        a.bytes = 10;
        let mut b = Charge::new(account.clone());
        b.grow(0, 50).unwrap();
        assert_eq!(account.charged(), 60);
        // 50 more do not fit until b gives its 50 back (here: is dropped, after 20 ms).
        let waited = std::time::Instant::now();
        let drop_b = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(b);
        });
        a.arm(Duration::from_secs(5)).await.unwrap();
        assert!(waited.elapsed() >= Duration::from_millis(15));
        drop_b.await.unwrap();
        assert_eq!(account.charged(), 60);
        // With nothing given back, arming gives up after its wait.
        let mut d = Charge::new(account.clone());
        d.size = 50;
        assert_eq!(
            d.arm(Duration::from_millis(10)).await,
            Err(OverBudget {
                budget: 100,
                charged: 60
            })
        );
        assert_eq!(account.charged(), 60);
    }

    #[test]
    #[allow(unsafe_code)]
    fn settling_charges_the_pages_the_memory_holds_privately() {
        const PAGE: usize = 4096;
        let len = 8 * PAGE;
        // SAFETY: a fresh anonymous mapping, unmapped below.
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
        let account = MemoryAccount::new(1 << 20);
        let mut a = Charge::new(account.clone());
        a.grow(0, len).unwrap();
        assert_eq!(account.charged(), len as u64);
        // SAFETY: two bytes inside the mapping.
        unsafe {
            base.cast::<u8>().add(PAGE).write(1);
            base.cast::<u8>().add(5 * PAGE + 7).write(1);
        }
        a.location().set(base as usize, len);
        a.settle();
        if crate::cache::pagemap::resident_bytes(base as usize, len).is_some() {
            assert_eq!(account.charged(), 2 * PAGE as u64);
        }
        // Grown since the place was learnt: the whole memory again.
        a.grow(len, 2 * len).unwrap();
        a.settle();
        assert_eq!(account.charged(), 2 * len as u64);
        drop(a);
        assert_eq!(account.charged(), 0);
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(base, len) };
    }
}
