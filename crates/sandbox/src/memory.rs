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
//! interpreter changes its reference count), so the private memory a sandbox can hold is its
//! whole linear memory, not only what it grew by. The account therefore charges each sandbox
//! its full linear-memory size: the initial image's size when it is instantiated (wasmtime
//! asks the limiter for it, as a growth from 0) plus every byte of every later growth. This
//! is the model that stays inside the budget whatever the environment does.
//!
//! The figures, for the guest this crate embeds: a fresh sandbox's memory is 29.5 MiB
//! (30,932,992 bytes, 472 WebAssembly pages; [`Runtime::fresh_memory_bytes`]), and a typical
//! environment fits in the free space of that image (`tests/envs/grid_walk` plays a whole
//! episode without growing it), so a typical sandbox is charged 29.5 MiB, while the private
//! memory it really holds is a few MiB (the pages a load and its calls wrote). A budget of
//! 18 GiB therefore holds about 620 sandboxes. Charging only the pages made private would
//! hold thousands, but the host sees a page made private only after the fact (no call
//! crosses to the host when the guest writes one), so a budget so kept could be overrun by
//! every sandbox in a call at once, each by up to its image: that model is not safe, and the
//! account does not use it.
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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
    charged: AtomicU64,
    /// The most that was ever charged at once.
    peak: AtomicU64,
}

impl MemoryAccount {
    /// An account of `budget` bytes, nothing charged.
    pub fn new(budget: u64) -> MemoryAccount {
        MemoryAccount {
            inner: Arc::new(Inner {
                budget,
                charged: AtomicU64::new(0),
                peak: AtomicU64::new(0),
            }),
        }
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

/// What one sandbox's linear memory is charged to an account; released when dropped (with the
/// sandbox's store).
pub(crate) struct Charge {
    account: MemoryAccount,
    /// Bytes charged: the memory's size as of its last allowed growth.
    bytes: u64,
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
        Charge { account, bytes: 0 }
    }

    /// Makes the charge `desired` bytes for a memory of `current` bytes that asks to grow: what
    /// was charged past `current` (a growth that was allowed and then failed) is given back,
    /// and the growth is charged if it fits.
    pub(crate) fn grow(&mut self, current: usize, desired: usize) -> Result<(), OverBudget> {
        let current = current as u64;
        let desired = desired as u64;
        if self.bytes > current {
            self.account.release(self.bytes - current);
            self.bytes = current;
        }
        let more = desired.saturating_sub(self.bytes);
        if !self.account.try_charge(more) {
            return Err(OverBudget {
                budget: self.account.budget(),
                charged: self.account.charged(),
            });
        }
        self.bytes += more;
        Ok(())
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
    fn a_growth_that_failed_after_it_was_allowed_is_given_back_at_the_next() {
        let account = MemoryAccount::new(100);
        let mut a = Charge::new(account.clone());
        a.grow(0, 10).unwrap();
        // Allowed to 50, but the memory stayed at 10: the next growth starts from 10.
        a.grow(10, 50).unwrap();
        a.grow(10, 20).unwrap();
        assert_eq!(account.charged(), 20);
    }
}
