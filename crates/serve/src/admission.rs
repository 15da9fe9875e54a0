//! Admission: one path that every sandbox a request can create goes through, and the memory
//! budget that bounds them.
//!
//! A WebSocket session, an HTTP `POST /reset` and an HTTP `POST /step` each take one session
//! slot for as long as their sandbox lives; one more is refused at once with OpenEnv's
//! `CAPACITY_REACHED`. A session holds at most two sandboxes: the running episode's and, while
//! a reset runs, the new one (a reset that fails leaves the running episode as it was). A
//! check of a registered source holds one.
//!
//! Memory is not reserved per slot: every sandbox of the server, sessions' and checks' alike,
//! draws its linear memory from one [`spade_sandbox::MemoryAccount`] of `--memory-budget`
//! bytes, so a session costs what its sandbox really holds: its whole linear memory while one
//! of its calls runs (a call may write every page), and the pages it holds privately between
//! calls (see [`spade_sandbox::MemoryAccount`]). A call waits, up to its deadline, for room for
//! its whole memory; a sandbox that would take the server past the budget fails that call with
//! `memory_limit` while the others go on. The session slots are then a plain cap; by default,
//! as many as fit in the budget at a typical idle session's cost, with room kept for calls
//! running at once ([`default_sessions`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::registry::Tenant;

/// Sandboxes one session can hold at once (the running episode's and a reset's new one).
pub const SANDBOXES_PER_SESSION: u64 = 2;

/// The session slots, and how many live sessions each tenant holds.
pub struct Admission {
    slots: Arc<Semaphore>,
    max: usize,
    /// Most live sessions (WebSocket and held) of one tenant.
    per_tenant: usize,
    tenants: Arc<Mutex<HashMap<Tenant, usize>>>,
}

/// A refusal: every slot is taken, or (`per_tenant`) every slot the tenant may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtCapacity {
    /// Sessions active (the tenant's, for a per-tenant refusal).
    pub active: usize,
    /// The limit reached.
    pub max: usize,
    /// The tenant's limit was reached (`--max-sessions-per-token`), not the server's.
    pub per_tenant: bool,
}

impl AtCapacity {
    /// OpenEnv's capacity message, or the per-token one.
    pub fn message(&self) -> String {
        if self.per_tenant {
            return format!(
                "Token at its session limit: {}/{} sessions of this token active (--max-sessions-per-token). Close one of them first.",
                self.active, self.max
            );
        }
        format!(
            "Server at capacity: {}/{} sessions active. Cannot accept new connections.",
            self.active, self.max
        )
    }
}

/// A live session's slot: the server's slot and the tenant's count, both given back on drop.
pub struct SessionSlot {
    _slot: OwnedSemaphorePermit,
    tenant: Tenant,
    tenants: Arc<Mutex<HashMap<Tenant, usize>>>,
}

impl Drop for SessionSlot {
    fn drop(&mut self) {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = tenants.get_mut(&self.tenant) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                tenants.remove(&self.tenant);
            }
        }
    }
}

impl Admission {
    /// `max` session slots, at most `per_tenant` of them live sessions of one tenant.
    pub fn new(max: usize, per_tenant: usize) -> Admission {
        Admission {
            slots: Arc::new(Semaphore::new(max)),
            max,
            per_tenant,
            tenants: Arc::default(),
        }
    }

    /// A slot, held until the permit is dropped, or the refusal.
    pub fn admit(&self) -> Result<OwnedSemaphorePermit, AtCapacity> {
        self.slots
            .clone()
            .try_acquire_owned()
            .map_err(|_| AtCapacity {
                active: self.active(),
                max: self.max,
                per_tenant: false,
            })
    }

    /// A slot for a live session of `tenant` (a WebSocket session or a held one), or the
    /// refusal: the tenant holds its limit of sessions, or the server is full.
    pub fn admit_session(&self, tenant: Tenant) -> Result<SessionSlot, AtCapacity> {
        let mut tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        let held = tenants.get(&tenant).copied().unwrap_or(0);
        // A tenant limit of every slot or more is the server's: its refusal says so.
        if held >= self.per_tenant && self.per_tenant < self.max {
            return Err(AtCapacity {
                active: held,
                max: self.per_tenant,
                per_tenant: true,
            });
        }
        let slot = self.admit()?;
        tenants.insert(tenant, held + 1);
        Ok(SessionSlot {
            _slot: slot,
            tenant,
            tenants: self.tenants.clone(),
        })
    }

    /// Live sessions of `tenant` now.
    pub fn sessions_of(&self, tenant: Tenant) -> usize {
        let tenants = self.tenants.lock().unwrap_or_else(PoisonError::into_inner);
        tenants.get(&tenant).copied().unwrap_or(0)
    }

    /// Slots taken now.
    pub fn active(&self) -> usize {
        self.max - self.slots.available_permits()
    }

    /// Slots in all.
    pub fn max(&self) -> usize {
        self.max
    }
}

/// What the memory account charges each sandbox of the server besides its linear memory, for
/// the host's own state of it (its store, instances and tables, the stack its calls ran on):
/// 4 MiB. Measured: 570 grid_walk sessions took the server's RSS to 2,872 MiB, 4.9 MiB a
/// session, of which about 1.4 MiB is the sandbox's private linear memory (release build, the
/// development VM; docs/serve.md).
pub const SANDBOX_OVERHEAD: u64 = 4 << 20;

/// What a typical idle session is charged, allowed for when the default number of sessions is
/// worked out: 6 MiB, its sandbox's [`SANDBOX_OVERHEAD`] and 2 MiB of private linear memory
/// (between calls a sandbox is charged the pages its memory holds privately: a grid_walk
/// sandbox after its episode, 1.4 MiB).
pub const TYPICAL_SESSION: u64 = SANDBOX_OVERHEAD + (2 << 20);

/// Fresh sandboxes the budget keeps room for besides the sessions, per check worker: none, but
/// a source's first sandbox is planned with two (the probe and a fresh interpreter it is
/// compared with), so two are set aside once.
pub const PLANNING_SANDBOXES: u64 = 2;

/// Calls that can run at once, each charged its sandbox's whole memory, that the default number
/// of sessions keeps room for: 64 (a GRPO group stepping together). More wait for room, up to
/// their call deadline.
pub const CALLS_AT_ONCE: u64 = 64;

/// The most sessions the default allows, whatever the budget: each slot reserves address space
/// for two sandboxes (about 6 GiB each), and 4,096 sessions keep that under a tenth of what a
/// 64-bit process can map.
pub const MAX_DEFAULT_SESSIONS: u64 = 4096;

/// The default number of session slots: the sessions that fit in `budget` at a typical idle
/// session's cost ([`TYPICAL_SESSION`]) once room is set aside for the sandboxes of
/// `check_workers` checks, a source's planning ([`PLANNING_SANDBOXES`]) and [`CALLS_AT_ONCE`]
/// calls, each a whole fresh memory of `fresh` bytes and its [`SANDBOX_OVERHEAD`]; at most
/// [`MAX_DEFAULT_SESSIONS`].
pub fn default_sessions(budget: u64, fresh: u64, check_workers: usize) -> u64 {
    let whole = fresh.saturating_add(SANDBOX_OVERHEAD);
    let set_aside = whole.saturating_mul(check_workers as u64 + PLANNING_SANDBOXES + CALLS_AT_ONCE);
    (budget.saturating_sub(set_aside) / TYPICAL_SESSION).min(MAX_DEFAULT_SESSIONS)
}

/// What each freed pool slot may keep resident for its next sandbox: `default` (the pool's
/// 8 MiB) or less, so that the kept pages of all `slots` together take at most half of the
/// `machine`'s memory outside the `budget` (the account does not count them: a slot keeps
/// them while no sandbox holds it). In whole 4 KiB pages. A 24 GiB machine with the default
/// budget and sessions keeps about 0.6 MiB a slot; without a known machine size, `default`.
pub fn keep_resident(machine: Option<u64>, budget: u64, slots: u32, default: usize) -> usize {
    let Some(machine) = machine else {
        return default;
    };
    let share = machine.saturating_sub(budget) / 2 / u64::from(slots.max(1));
    usize::try_from(share).unwrap_or(usize::MAX).min(default) / 4096 * 4096
}

/// The machine's memory, from `/proc/meminfo` (`MemTotal`); `None` where it cannot be read.
pub fn machine_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The default budget: three quarters of the machine's memory, leaving the rest to the
/// server's own process, the compiled guest and the operating system.
pub fn default_budget() -> Option<u64> {
    machine_memory().map(|m| m / 4 * 3)
}

/// Bytes as a person reads them: a whole binary unit when exact (`9 GiB`), else the bytes
/// with an approximation (`9663676415 bytes (9.0 GiB)`).
pub fn show_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if bytes >= size {
            if bytes.is_multiple_of(size) {
                return format!("{} {unit}", bytes / size);
            }
            return format!("{bytes} bytes ({:.1} {unit})", bytes as f64 / size as f64);
        }
    }
    format!("{bytes} bytes")
}

/// Parses a size: a number of bytes, or a number with `K`, `M`, `G` or `T` (binary: 1K is
/// 1024 bytes), optionally followed by `iB` or `B` (`512M`, `8GiB`, `1073741824`).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (digits, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let bad = || {
        format!(
            "'{trimmed}' is not a size: write bytes, or a number with K, M, G or T (for example 512M or 8GiB)"
        )
    };
    let number: u64 = digits.trim().parse().map_err(|_| bad())?;
    number.checked_mul(1u64 << shift).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("1024"), Ok(1024));
        assert_eq!(parse_size("512M"), Ok(512 << 20));
        assert_eq!(parse_size("8GiB"), Ok(8 << 30));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert_eq!(parse_size("64KB"), Ok(64 << 10));
        assert!(
            parse_size("lots")
                .unwrap_err()
                .contains("'lots' is not a size")
        );
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn the_default_sessions_divide_the_budget_by_an_idle_sessions_cost() {
        // The figures of this guest: a fresh sandbox is 29.5 MiB, 33.5 MiB with its overhead;
        // 2 check workers, the planning and 64 calls at once set aside 68 of them (2,278 MiB);
        // each idle session costs 6 MiB.
        let fresh = 30_932_992;
        let whole = fresh + (4 << 20);
        assert_eq!(
            default_sessions(8 << 30, fresh, 2),
            ((8 << 30) - 68 * whole) / (6 << 20)
        );
        assert_eq!(default_sessions(8 << 30, fresh, 2), 985);
        // 3/4 of this 24 GiB machine: the target of 1,000 sessions, and more.
        assert_eq!(default_sessions(18 << 30, fresh, 2), 2692);
        assert_eq!(default_sessions(68 * whole, fresh, 2), 0);
        assert_eq!(default_sessions(1 << 50, fresh, 2), MAX_DEFAULT_SESSIONS);
    }

    #[test]
    fn freed_slots_keep_at_most_half_the_memory_outside_the_budget() {
        let default = 8 << 20;
        // 24 GiB, 18 GiB budget, 4,672 slots: 3 GiB / 4,672 = 673 KiB, 168 whole pages.
        assert_eq!(
            keep_resident(Some(24 << 30), 18 << 30, 4672, default),
            168 * 4096
        );
        // Few slots: the default.
        assert_eq!(
            keep_resident(Some(24 << 30), 18 << 30, 64, default),
            default
        );
        // A budget at or past the machine's memory: nothing kept.
        assert_eq!(keep_resident(Some(8 << 30), 9 << 30, 64, default), 0);
        assert_eq!(keep_resident(None, 18 << 30, 4672, default), default);
    }

    #[test]
    fn admission_refuses_past_the_slots_and_frees_them() {
        let admission = Admission::new(2, 2);
        let a = admission.admit().unwrap();
        let _b = admission.admit().unwrap();
        assert_eq!(
            admission.admit().unwrap_err(),
            AtCapacity {
                active: 2,
                max: 2,
                per_tenant: false
            }
        );
        drop(a);
        assert!(admission.admit().is_ok());
    }

    #[test]
    fn a_tenant_holds_at_most_its_sessions() {
        let admission = Admission::new(4, 2);
        let a = admission.admit_session(Tenant(0)).unwrap();
        let _b = admission.admit_session(Tenant(0)).unwrap();
        let refused = admission.admit_session(Tenant(0)).err().unwrap();
        assert_eq!(
            refused,
            AtCapacity {
                active: 2,
                max: 2,
                per_tenant: true
            }
        );
        assert!(refused.message().contains("--max-sessions-per-token"));
        assert!(admission.admit_session(Tenant(1)).is_ok());
        assert_eq!(admission.sessions_of(Tenant(0)), 2);
        drop(a);
        assert_eq!(admission.sessions_of(Tenant(0)), 1);
        assert!(admission.admit_session(Tenant(0)).is_ok());
        // With every slot allowed to one tenant, a full server refuses as a full server.
        let admission = Admission::new(1, 1);
        let _only = admission.admit_session(Tenant(0)).unwrap();
        assert!(!admission.admit_session(Tenant(0)).err().unwrap().per_tenant);
    }
}
