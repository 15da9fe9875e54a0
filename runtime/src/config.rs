//! Limits and settings of the sandbox, with the reason for every default.

use std::path::PathBuf;
use std::time::Duration;

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
}

/// Limits of one sandbox and of each call into it.
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
    /// Wall-clock limit of one call. A safety net against stalls, not the primary limit: it is
    /// not deterministic, so fuel should trip first. Default 30 s, the SPADE reference's step
    /// timeout.
    pub call_deadline: Duration,
    /// Bytes of stdout, and of stderr, kept per call; the rest is counted and dropped, so an
    /// output flood cannot grow host memory. Default 1 MiB.
    pub output_limit: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel_per_call: 10_000_000_000,
            load_fuel: 20_000_000_000,
            memory_limit: 512 << 20,
            call_deadline: Duration::from_secs(30),
            output_limit: 1 << 20,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config {
            limits: Limits::default(),
            max_wasm_stack: 16 << 20,
            cache_dir: default_cache_dir(),
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
