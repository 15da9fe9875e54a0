//! spade-sandbox: run untrusted, model-written Python environments in a WebAssembly sandbox.
//!
//! The environment runs inside RustPython compiled to `wasm32-wasip2`, under wasmtime, behind
//! the `spade:env` WIT interface. Every call is bounded by fuel (deterministic), a memory cap,
//! a deadline on the call's own running time and size limits on everything it returns; the
//! sandbox sees no files, network, environment variables, real clocks or real entropy
//! (`time.sleep` advances a virtual clock), so an episode replays bit for bit.
//!
//! Lifecycles:
//! - per process: [`Runtime`] (engine, linker, pre-instantiated guest, compiled-artifact cache);
//! - per environment instance: [`Sandbox`] (one store, one loaded environment, one seed);
//! - per call: fuel and deadline are set afresh; a host limit kills the sandbox and frees its store.
//!
//! The public API:
//! - [`Runtime`] and its [`Config`] (with [`Limits`], [`Pool`], [`Yields`] and
//!   [`default_cache_dir`]): the per-process engine, guest and caches;
//! - [`MemoryAccount`]: a memory budget shared by sandboxes (off unless a [`Config`] asks);
//! - [`EnvSource`]: an environment's source, compiled once and shared by its sandboxes;
//! - [`Sandbox`] and its [`SandboxOptions`]: one environment instance; its calls return
//!   [`EnvInfo`], [`Reset`], [`Step`] and [`CallOutput`];
//! - errors: [`CallError`] (with its [`ErrorKind`]) for a call, [`RuntimeError`] for building
//!   the runtime;
//! - [`GUEST_SHA256`] and [`PRELUDE_MODULES`]: what the guest embeds.
//!
//! Compiled artifacts, compiled environment code and load snapshots are cached on disk by the
//! private `cache` module (see docs/snapshots.md). The tooling built on this API (trajectories,
//! `spade check`, `spade fuzz`) is the crate `spade-envtools`.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use spade_sandbox::{Config, Runtime, SandboxOptions};
//!
//! let runtime = Runtime::new(Config::default())?;
//! let source = std::fs::read_to_string("env.py")?;
//! let mut sandbox = runtime.sandbox(&source, SandboxOptions::seeded(7)).await?;
//! let reset = sandbox.reset(Some(7)).await?;
//! println!("{}", reset.observation);
//! let step = sandbox.step(r"\boxed{42}").await?;
//! println!("reward {}", step.reward);
//! # Ok(()) }
//! ```

mod bindings;
mod cache;
mod config;
mod deadline;
mod error;
mod fields;
mod fork;
mod guest_layout;
mod memory;
mod outcome;
mod runtime;
mod sandbox;
mod source;
mod wasi;

pub use config::{Caches, Config, Limits, Pool, Yields, default_cache_dir};
pub use error::{CallError, ErrorKind, ForkError, RuntimeError};
pub use fields::{ExtraFields, object_members};
pub use memory::{MemoryAccount, OVER_BUDGET};
pub use runtime::{CacheStats, Runtime};
pub use sandbox::{CallOutput, EnvInfo, Reset, Sandbox, SandboxOptions, Step};
pub use source::EnvSource;

/// sha256 (hex) of the guest component this build embeds, before pre-initialisation.
pub const GUEST_SHA256: &str = env!("SPADE_GUEST_SHA256");

/// The sandbox's Python prelude modules as `(module name, source)`, exactly as the guest embeds
/// them. They also run under CPython, which lets tools (benchmarks, fidelity checks) load an
/// environment there the way the sandbox does: `spade_prelude.load(source, max_turns, seed)`.
pub const PRELUDE_MODULES: &[(&str, &str)] = &[
    (
        "math_verify",
        include_str!("../../../guest/python/math_verify.py"),
    ),
    (
        "spade_tool_use",
        include_str!("../../../guest/python/spade_tool_use.py"),
    ),
    (
        "spade_prelude",
        include_str!("../../../guest/python/spade_prelude.py"),
    ),
];
