//! Limits and settings of the sandbox, with the reason for every default.

use std::path::PathBuf;
use std::time::Duration;

use crate::memory::MemoryAccount;

/// Settings of a [`Runtime`](crate::Runtime): engine-level settings fixed when it is built,
/// and the [`Limits`] every sandbox it creates runs under.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Per-call and per-sandbox limits (can be changed later with
    /// [`Runtime::with_limits`](crate::Runtime::with_limits)).
    pub limits: Limits,
    /// Host stack available to WebAssembly, in bytes. Deep recursion inside RustPython uses a
    /// lot of native stack; beyond this a call ends with `StackOverflow`. Default 16 MiB, so
    /// that Python's own recursion limit (a catchable `RecursionError`) trips first.
    pub max_wasm_stack: usize,
    /// Where compiled guest artifacts are cached (keyed by guest hash, engine settings and
    /// wasmtime version). `None` disables the cache: every process then pre-initialises and
    /// compiles the guest, which takes tens of seconds. Default: `$SPADE_CACHE_DIR`, else
    /// `$XDG_CACHE_HOME/spade`, else `~/.cache/spade`.
    pub cache_dir: Option<PathBuf>,
    /// Pre-reserved sandbox slots (wasmtime's pooling allocator). `None` maps and unmaps
    /// every sandbox's memory, tables and stack afresh. Default: `Some(Pool::default())`.
    pub pool: Option<Pool>,
    /// Start every sandbox of a source from a snapshot of the loaded environment, taken once
    /// per source, `max_turns` and limits (see [`Runtime::sandbox_from`]). Default `true`;
    /// `false` runs the source in every sandbox, with the same results.
    ///
    /// [`Runtime::sandbox_from`]: crate::Runtime::sandbox_from
    pub snapshots: bool,
    /// How a long-running call gives the executor back, so that its deadline is checked and
    /// other sandboxes on the thread get their turn. Default [`Yields::Fuel`] every
    /// [`Yields::DEFAULT_FUEL_INTERVAL`] units.
    pub yields: Yields,
    /// A memory budget shared by every sandbox of the runtime (and of the runtimes made from
    /// it with [`Runtime::with_limits`](crate::Runtime::with_limits)): each sandbox's linear
    /// memory is charged to it as it grows and released when the sandbox is dropped, and a
    /// growth past what is left fails as a growth past [`Limits::memory_limit`] does (see
    /// [`MemoryAccount`] for what is charged). Default `None`: each sandbox is bounded by its
    /// own memory limit only, which suits a process that runs the sandboxes it chose to run
    /// (`spade run`, `check`, `fuzz`, the Python package); a server that runs other people's
    /// sets one.
    pub memory_account: Option<MemoryAccount>,
    /// How much the runtime keeps of the sources it compiled and the snapshots it took, in
    /// memory and on disk. Default [`Caches::default`].
    pub caches: Caches,
}

/// Bounds on what a [`Runtime`](crate::Runtime) keeps between sandboxes: compiled sources and
/// their load plans in memory, and snapshot files in the cache directory. Every cache is least
/// recently used first out; what is evicted costs only a compile or a probe when it is needed
/// again, never a different result. A source that something outside the cache still holds (a
/// registration, a live sandbox's caller) keeps working: eviction drops the cache's reference,
/// not the source.
#[derive(Debug, Clone, PartialEq)]
pub struct Caches {
    /// Load plans kept per source. A plan (and its snapshot) depends on the `max_turns` a
    /// sandbox is created with, which the constructor receives and the snapshot of a loaded
    /// environment holds, so each distinct `max_turns` has its own; past this many, the least
    /// recently used is dropped. Default 4: a source is played with one or two values in
    /// practice, and 4 snapshots of at most 64 MiB bound one source's share.
    pub plans_per_source: usize,
    /// Sources kept compiled in memory. Default 1,024: more than a server's registrations (256
    /// by default), so a registered source is never compiled twice.
    pub sources: usize,
    /// Bytes the compiled sources in memory may hold: their text, bytecode and the snapshots
    /// of their plans. Past it, least recently used sources are dropped (the most recently used
    /// one is always kept). Default 512 MiB: a hundred snapshots of a typical environment (3 to
    /// 5 MiB), or eight of the largest a snapshot can be.
    pub memory_bytes: usize,
    /// Bytes the snapshot files in the cache directory may hold. After each snapshot file is
    /// written, the least recently used files (by modification time: a read touches it) that no
    /// plan in this runtime's memory uses are removed until the rest fit. Default 4 GiB: the
    /// snapshots of about a thousand typical sources; a removed file costs a later process one
    /// probe of its source.
    pub disk_bytes: u64,
    /// Bytes that the compiled bytecode files (`code/`) and the verdict files (`verdicts/`) in
    /// the cache directory may each hold: one file per distinct source compiled or checked, so
    /// without a bound a client that registers many distinct sources fills the disk. After
    /// each file is written, the least recently used files of its folder (by modification
    /// time: a read touches it) are removed until the rest fit. Default 256 MiB: a typical
    /// file is a few KiB to tens of KiB, so each folder keeps thousands of sources, far more
    /// than a server's registrations (256 by default); a removed file costs a later compile or
    /// check of its source, never a different result.
    pub code_disk_bytes: u64,
}

impl Default for Caches {
    fn default() -> Self {
        Caches {
            plans_per_source: 4,
            sources: 1024,
            memory_bytes: 512 << 20,
            disk_bytes: 4 << 30,
            code_disk_bytes: 256 << 20,
        }
    }
}

/// How a long-running guest call is made to yield to the async executor. Either way a call
/// gets the same results and uses the same fuel: the yield points only decide how often the
/// deadline is checked, and both bound every call (a guest runs WebAssembly between two
/// checks, and host calls never block).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Yields {
    /// After every this many units of fuel (wasmtime's `fuel_async_yield_interval`). Fuel is
    /// counted anyway, so this compiles nothing extra into the guest: the yield is a host call
    /// when an interval's fuel runs out. The points are deterministic.
    Fuel(u64),
    /// On the runtime's 10 ms epoch tick (wasmtime's epoch interruption): a second check
    /// compiled into every function entry and loop of the guest, and a ticker thread.
    Epochs,
}

impl Yields {
    /// Ten million units: a few milliseconds of interpreter time, finer than the 10 ms epoch
    /// tick, and about a thousand yields in the default 10^10-unit budget of a call.
    pub const DEFAULT_FUEL_INTERVAL: u64 = 10_000_000;
}

impl Default for Yields {
    fn default() -> Self {
        Yields::Fuel(Yields::DEFAULT_FUEL_INTERVAL)
    }
}

/// Sizes of the pooling allocator: sandboxes get pre-reserved slots (virtual memory for a
/// linear memory, tables, instance state and a fiber stack) that are reset, not unmapped, when
/// a sandbox is dropped, so creating a sandbox costs microseconds of bookkeeping instead of a
/// round of `mmap`/`munmap` calls and page faults.
#[derive(Debug, Clone, PartialEq)]
pub struct Pool {
    /// Sandboxes that can be alive at once in one runtime (including the short-lived ones that
    /// compile and snapshot sources). One more is refused with [`CallError::Capacity`]. Each
    /// slot reserves address space only (about 6 GiB for its memory and guard region, untouched
    /// until used), so the default costs no memory. Default 1,024: well above the sandboxes
    /// a 2-core machine can keep busy, and the 1,000 live sandboxes `spade bench` measures.
    ///
    /// [`CallError::Capacity`]: crate::CallError::Capacity
    pub sandboxes: u32,
    /// Bytes of a freed sandbox's linear memory (and of each of its tables) kept mapped and
    /// reset by copying the original bytes back instead of `madvise`, so that the next
    /// sandbox in the slot does not page-fault them in again. With [`Pool::scan_dirty_pages`]
    /// these are the first `keep_resident` bytes the sandbox actually wrote, wherever they
    /// are; without it, the lowest addresses of the memory. Default 8 MiB: above the 3–4 MiB
    /// a loaded environment dirties (restoring a snapshot writes pages all over the heap), so
    /// a reused slot faults nothing. The cost is memory: a freed slot holds up to this much
    /// until it is reused or the runtime is dropped.
    pub keep_resident: usize,
    /// Find the pages a freed sandbox wrote with Linux's `PAGEMAP_SCAN` (kernel 6.7 and
    /// later) and reset only those, instead of assuming the lowest `keep_resident` bytes.
    /// Where the kernel lacks it, slots are reset as without it (the same contents either
    /// way: this changes speed, never what a sandbox sees). Default `true`.
    pub scan_dirty_pages: bool,
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            sandboxes: 1024,
            keep_resident: 8 << 20,
            scan_dirty_pages: true,
        }
    }
}

/// Limits of one sandbox and of each call into it.
///
/// The size limits (`observation_limit`, `info_limit`, `solution_limit`, `tools_limit`,
/// `error_limit`) bound everything a call hands back. The guest measures each value before it
/// is copied out of Python; a value over its limit is a [`CallError::Contract`] naming the
/// value, its size and the limit (the sandbox stays usable), so the host never holds more than
/// the limit of it.
///
/// [`CallError::Contract`]: crate::CallError::Contract
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Fuel for each `reset`, `step`, `solution` and `close` call. Fuel counts WebAssembly
    /// instructions, so running out is deterministic: the same call stops at the same point on
    /// every machine. Default 10^10, several seconds of interpreter time; a typical step of a
    /// generated environment uses well under 10^8.
    pub fuel_per_call: u64,
    /// Fuel for loading (compiling and running the module, constructing the environment).
    /// Default 2 * 10^10: loading does more work than a step.
    pub load_fuel: u64,
    /// Largest linear memory of one sandbox, in bytes. The pre-initialised interpreter takes
    /// a few tens of MiB of it. Growth beyond the cap fails inside the guest and ends the call
    /// with `MemoryLimit`. Default 512 MiB.
    pub memory_limit: usize,
    /// Time limit of one call, a safety net against stalls rather than the primary limit (it
    /// is not deterministic, so fuel should trip first). Default 30 s, the SPADE reference's
    /// step timeout.
    ///
    /// It counts only the time the call itself runs: the CPU time of the thread while it polls
    /// the call (measured with the thread's CPU clock around every poll), plus the wall-clock
    /// time the guest spends parked in a host wait. Time the call spends queued behind other
    /// sandboxes on a busy executor or a busy machine does not count, so under load a call is
    /// not cut short because other work ran. `time.sleep` and every other clock wait are
    /// virtual (they advance the sandbox clock and return at once), so they cost neither.
    pub call_deadline: Duration,
    /// Bytes of stdout, and of stderr, kept per call, measured after the lossy UTF-8
    /// conversion (an invalid byte becomes U+FFFD, 3 bytes); the rest is counted in
    /// [`CallOutput::dropped_bytes`](crate::CallOutput::dropped_bytes) and dropped, so an output
    /// flood cannot grow host memory. Default 1 MiB.
    pub output_limit: usize,
    /// Largest observation (`reset` and `step`), in bytes of UTF-8. Default 1 MiB, about a
    /// quarter of a million tokens: far beyond any context window, small enough to copy, hash
    /// and record without a second thought.
    pub observation_limit: usize,
    /// Largest info dict of `reset` and `step`, in bytes of its JSON. Default 1 MiB.
    pub info_limit: usize,
    /// Largest `solution()` string, in bytes of UTF-8. Default 1 MiB.
    pub solution_limit: usize,
    /// Largest tool schemas (`get_tools()` of a tool-use environment), in bytes of their JSON.
    /// Default 1 MiB.
    pub tools_limit: usize,
    /// Largest error text the environment can cause: a traceback, a load error, a contract
    /// message. Default 1 MiB (a traceback of a thousand frames is about 100 KiB); at least
    /// 1 KiB is used, so that the message about an oversized error always fits.
    pub error_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel_per_call: 10_000_000_000,
            load_fuel: 20_000_000_000,
            memory_limit: 512 << 20,
            call_deadline: Duration::from_secs(30),
            output_limit: 1 << 20,
            observation_limit: 1 << 20,
            info_limit: 1 << 20,
            solution_limit: 1 << 20,
            tools_limit: 1 << 20,
            error_limit: 1 << 20,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Limits::default(),
            max_wasm_stack: 16 << 20,
            cache_dir: default_cache_dir(),
            pool: Some(Pool::default()),
            snapshots: true,
            yields: Yields::default(),
            memory_account: None,
            caches: Caches::default(),
        }
    }
}

/// `$SPADE_CACHE_DIR`, else `$XDG_CACHE_HOME/spade`, else `~/.cache/spade`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SPADE_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("spade"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("spade"))
}

impl Limits {
    /// These limits with none above `local`'s: each limit is the smaller of the two. A replay of
    /// a trajectory from elsewhere runs under the file's limits clamped this way, so a file cannot
    /// ask for more fuel, memory, time or output than the local configuration allows.
    pub fn clamp_to(&self, local: &Limits) -> Limits {
        let mut clamped = self.clone();
        clamped.fuel_per_call = self.fuel_per_call.min(local.fuel_per_call);
        clamped.load_fuel = self.load_fuel.min(local.load_fuel);
        clamped.memory_limit = self.memory_limit.min(local.memory_limit);
        clamped.call_deadline = self.call_deadline.min(local.call_deadline);
        clamped.output_limit = self.output_limit.min(local.output_limit);
        clamped
    }
}
