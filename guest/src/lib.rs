//! spade-guest: a RustPython interpreter exporting the `spade:env` world.
//!
//! The host instantiates this component once per sandbox (one environment instance). Calls are
//! thin wrappers over [`interpreter`], which owns the Python state; [`convert`] turns Python
//! return values into WIT values strictly, without going through Python's `json`.

mod cabi;
mod convert;
mod interpreter;
mod limits;
mod rng_watch;
mod snapshot;

/// Small blocks from pools, as CPython's `pymalloc` (see `spade-guest-alloc`); the rest from
/// wasi-libc's `malloc`.
#[global_allocator]
static ALLOCATOR: spade_guest_alloc::Pools = spade_guest_alloc::Pools::new(std::alloc::System);

wit_bindgen::generate!({ world: "sandbox", path: "../wit" });

use exports::spade::env::environment as env;

struct Component;

impl Guest for Component {
    /// Run by wizer when the component is built: the snapshot holds a booted interpreter with
    /// the prelude and the commonly used standard library already imported.
    fn wizer_initialize() {
        interpreter::initialize();
    }
}

impl env::Guest for Component {
    fn compile(source: String, limits: env::SizeLimits) -> Result<Vec<u8>, env::EnvError> {
        interpreter::with(|s| s.compile(&source, limits))
    }

    fn load(
        source: String,
        code: Vec<u8>,
        options: env::LoadOptions,
    ) -> Result<env::EnvInfo, env::EnvError> {
        interpreter::with(|s| s.load(&source, &code, options))
    }

    fn construct(report_random: bool) -> Result<env::EnvInfo, env::EnvError> {
        interpreter::with(|s| s.construct(report_random))
    }

    fn reseed(seed: u64) -> Result<(), env::EnvError> {
        interpreter::with(|s| s.reseed(seed))
    }

    fn snapshot() {
        snapshot::capture();
    }

    fn restore(pages: u32) {
        snapshot::restore(pages);
    }

    fn reset(seed: Option<u64>, fields: Option<String>) -> Result<env::ResetResult, env::EnvError> {
        interpreter::with(|s| s.reset(seed, fields.as_deref()))
    }

    fn step(action: String) -> Result<env::StepResult, env::EnvError> {
        interpreter::with(|s| s.step(&action))
    }

    fn solution() -> Result<String, env::EnvError> {
        interpreter::with(|s| s.solution())
    }

    fn close() -> Result<(), env::EnvError> {
        interpreter::with(|s| s.close())
    }
}

export!(Component);
