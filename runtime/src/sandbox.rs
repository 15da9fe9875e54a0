//! One sandbox: one store, one loaded environment instance, one seed.

use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, Trap, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{self, EnvError};
use crate::config::Limits;
use crate::error::{CallError, ErrorKind};
use crate::source::EnvSource;
use crate::wasi::{CappedOutput, deterministic_ctx};

/// How a sandbox is set up. Everything that could make two runs differ is here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SandboxOptions {
    /// Seeds the sandbox's WASI randomness and Python's module-global `random` before the
    /// environment source runs.
    pub seed: u64,
    /// Passed to the environment's constructor as `max_turns=` when set.
    pub max_turns: Option<u32>,
}

impl SandboxOptions {
    /// Options with the given seed and the environment's own `max_turns`.
    pub fn seeded(seed: u64) -> Self {
        SandboxOptions {
            seed,
            max_turns: None,
        }
    }
}

/// What `load` found in the environment source.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvInfo {
    /// The environment class's name.
    pub class_name: String,
    /// The environment's `max_turns` attribute after construction, if it is an int.
    pub max_turns: Option<u32>,
    /// Tool schemas (JSON, OpenAI function format) for tool-use environments.
    pub tools: Option<String>,
}

/// The result of `reset`.
#[derive(Debug, Clone, PartialEq)]
pub struct Reset {
    pub observation: String,
    /// The info dict as compact JSON.
    pub info: String,
}

/// The result of `step`.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub observation: String,
    pub reward: f64,
    pub terminated: bool,
    pub truncated: bool,
    /// The info dict as compact JSON.
    pub info: String,
}

/// Output the environment printed during one call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CallOutput {
    /// Captured stdout (lossy UTF-8), at most `Limits::output_limit` bytes.
    pub stdout: String,
    /// Captured stderr (lossy UTF-8), at most `Limits::output_limit` bytes.
    pub stderr: String,
    /// Bytes printed beyond the limit and dropped.
    pub dropped_bytes: u64,
}

/// Enforces the memory cap and remembers whether it was hit.
pub(crate) struct MemoryLimiter {
    limit: usize,
    denied: Option<usize>,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.denied = Some(desired);
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1 << 20)
    }
}

/// The host side of a store.
pub struct SandboxState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: MemoryLimiter,
    stdout: CappedOutput,
    stderr: CappedOutput,
    deadline_at: Option<Instant>,
}

impl SandboxState {
    pub(crate) fn new(seed: u64, config: &Limits) -> Self {
        let stdout = CappedOutput::new(config.output_limit);
        let stderr = CappedOutput::new(config.output_limit);
        SandboxState {
            wasi: deterministic_ctx(seed, stdout.clone(), stderr.clone()),
            table: ResourceTable::new(),
            limiter: MemoryLimiter {
                limit: config.memory_limit,
                denied: None,
            },
            stdout,
            stderr,
            deadline_at: None,
        }
    }

    /// The state wizer pre-initialises the interpreter in (seed 0, default limits).
    pub(crate) fn for_preinit() -> Self {
        Self::new(0, &Limits::default())
    }
}

impl WasiView for SandboxState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Marker error raised from the epoch callback when a call passes its deadline.
#[derive(Debug)]
struct DeadlineExceeded;

impl std::fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("call deadline exceeded")
    }
}

impl std::error::Error for DeadlineExceeded {}

/// A loaded environment in its own WebAssembly instance.
///
/// Calls take `&mut self`: one sandbox runs one call at a time. Drive many sandboxes
/// concurrently by moving each into its own tokio task. After a host limit
/// ([`CallError::kills_sandbox`]) or a Python `MemoryError`, every further call returns
/// [`CallError::Dead`].
pub struct Sandbox {
    store: Store<SandboxState>,
    bindings: bindings::Sandbox,
    info: EnvInfo,
    config: Arc<Limits>,
    dead: Option<ErrorKind>,
    last_fuel: u64,
    last_output: CallOutput,
}

impl Sandbox {
    /// A sandbox around a freshly instantiated guest, before `load`.
    fn instantiated(
        store: Store<SandboxState>,
        bindings: bindings::Sandbox,
        config: Arc<Limits>,
    ) -> Sandbox {
        let info = EnvInfo {
            class_name: String::new(),
            max_turns: None,
            tools: None,
        };
        Sandbox {
            store,
            bindings,
            info,
            config,
            dead: None,
            last_fuel: 0,
            last_output: CallOutput::default(),
        }
    }

    /// Instantiates the guest and loads the compiled `source` into it.
    pub(crate) async fn load(
        pre: &bindings::SandboxPre<SandboxState>,
        config: Arc<Limits>,
        source: &EnvSource,
        options: SandboxOptions,
    ) -> Result<Sandbox, CallError> {
        let budget = config.load_fuel;
        let (mut store, bindings) = instantiate(pre, &config, options.seed, budget).await?;
        let load_options = bindings::LoadOptions {
            max_turns: options.max_turns,
            random_seed: options.seed,
        };
        let outcome = bindings
            .spade_env_environment()
            .call_load(&mut store, source.text(), source.code(), load_options)
            .await;
        let mut sandbox = Sandbox::instantiated(store, bindings, config);
        let info = sandbox.finish(budget, outcome)?;
        sandbox.info = EnvInfo {
            class_name: info.class_name,
            max_turns: info.max_turns,
            tools: info.tools,
        };
        Ok(sandbox)
    }

    /// Compiles `source` to bytecode in a throwaway instance (budget: the load fuel).
    pub(crate) async fn compile(
        pre: &bindings::SandboxPre<SandboxState>,
        config: Arc<Limits>,
        source: &str,
    ) -> Result<Vec<u8>, CallError> {
        let budget = config.load_fuel;
        let (mut store, bindings) = instantiate(pre, &config, 0, budget).await?;
        let outcome = bindings
            .spade_env_environment()
            .call_compile(&mut store, source)
            .await;
        let mut sandbox = Sandbox::instantiated(store, bindings, config);
        sandbox.finish(budget, outcome)
    }

    /// What `load` found: class name, `max_turns`, tool schemas.
    pub fn info(&self) -> &EnvInfo {
        &self.info
    }

    /// Fuel used by the last call (its whole budget if it ran out).
    pub fn last_fuel(&self) -> u64 {
        self.last_fuel
    }

    /// What the environment printed during the last call.
    pub fn last_output(&self) -> &CallOutput {
        &self.last_output
    }

    /// Why the sandbox is dead, if it is.
    pub fn dead(&self) -> Option<ErrorKind> {
        self.dead
    }

    /// Calls `reset(seed=seed)` (or `reset()` when `seed` is `None`).
    pub async fn reset(&mut self, seed: Option<u64>) -> Result<Reset, CallError> {
        let budget = self.start()?;
        let outcome = self
            .bindings
            .spade_env_environment()
            .call_reset(&mut self.store, seed)
            .await;
        let r = self.finish(budget, outcome)?;
        Ok(Reset {
            observation: r.observation,
            info: r.info,
        })
    }

    /// Calls `step(action)`.
    pub async fn step(&mut self, action: &str) -> Result<Step, CallError> {
        let budget = self.start()?;
        let outcome = self
            .bindings
            .spade_env_environment()
            .call_step(&mut self.store, action)
            .await;
        let r = self.finish(budget, outcome)?;
        Ok(Step {
            observation: r.observation,
            reward: r.reward,
            terminated: r.terminated,
            truncated: r.truncated,
            info: r.info,
        })
    }

    /// Calls `solution()`.
    pub async fn solution(&mut self) -> Result<String, CallError> {
        let budget = self.start()?;
        let outcome = self
            .bindings
            .spade_env_environment()
            .call_solution(&mut self.store)
            .await;
        self.finish(budget, outcome)
    }

    /// Calls `close()` if the environment defines it.
    pub async fn close(&mut self) -> Result<(), CallError> {
        let budget = self.start()?;
        let outcome = self
            .bindings
            .spade_env_environment()
            .call_close(&mut self.store)
            .await;
        self.finish(budget, outcome)
    }

    fn start(&mut self) -> Result<u64, CallError> {
        if let Some(kind) = self.dead {
            return Err(CallError::Dead(kind));
        }
        let budget = self.config.fuel_per_call;
        begin_call(&mut self.store, &self.config, budget);
        Ok(budget)
    }

    fn finish<R>(
        &mut self,
        budget: u64,
        outcome: wasmtime::Result<Result<R, EnvError>>,
    ) -> Result<R, CallError> {
        self.store.data_mut().deadline_at = None;
        self.last_fuel = budget.saturating_sub(self.store.get_fuel().unwrap_or(0));
        let result = match outcome {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(self.env_error(err)),
            Err(err) => Err(classify_trap(&mut self.store, &self.config, budget, err)),
        };
        self.last_output = take_output(&mut self.store);
        if let Err(err) = &result
            && err.kills_sandbox()
        {
            self.dead = Some(err.kind());
        }
        result
    }

    fn env_error(&mut self, err: EnvError) -> CallError {
        match err {
            EnvError::Load(s) => CallError::Load(s),
            EnvError::Contract(s) => CallError::Contract(s),
            EnvError::Exception(s) => CallError::Exception(s),
            EnvError::Usage(s) => CallError::Usage(s),
            EnvError::OutOfMemory(traceback) => CallError::MemoryLimit {
                limit: self.config.memory_limit,
                detail: format!("Python raised MemoryError\n{traceback}"),
            },
        }
    }
}

/// A store with the sandbox's limits, deterministic WASI context and deadline callback, and
/// the guest instantiated in it (the instantiation's fuel comes out of `budget`).
async fn instantiate(
    pre: &bindings::SandboxPre<SandboxState>,
    config: &Limits,
    seed: u64,
    budget: u64,
) -> Result<(Store<SandboxState>, bindings::Sandbox), CallError> {
    let mut store = Store::new(pre.engine(), SandboxState::new(seed, config));
    store.limiter(|state| &mut state.limiter);
    store.epoch_deadline_callback(|ctx| match ctx.data().deadline_at {
        Some(at) if Instant::now() >= at => Err(wasmtime::Error::new(DeadlineExceeded)),
        _ => Ok(UpdateDeadline::Yield(1)),
    });
    begin_call(&mut store, config, budget);
    match pre.instantiate_async(&mut store).await {
        Ok(bindings) => Ok((store, bindings)),
        Err(err) => Err(classify_trap(&mut store, config, budget, err)),
    }
}

/// Sets a call's fuel budget and deadline.
fn begin_call(store: &mut Store<SandboxState>, config: &Limits, budget: u64) {
    store
        .set_fuel(budget)
        .expect("fuel is enabled on the engine");
    store.set_epoch_deadline(1);
    store.data_mut().deadline_at = Some(Instant::now() + config.call_deadline);
}

fn take_output(store: &mut Store<SandboxState>) -> CallOutput {
    let state = store.data();
    let (stdout, dropped_out) = state.stdout.take();
    let (stderr, dropped_err) = state.stderr.take();
    CallOutput {
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        dropped_bytes: dropped_out + dropped_err,
    }
}

/// Turns a wasmtime error from a guest call into the host outcome it stands for.
fn classify_trap(
    store: &mut Store<SandboxState>,
    config: &Limits,
    budget: u64,
    err: wasmtime::Error,
) -> CallError {
    if err.downcast_ref::<DeadlineExceeded>().is_some() {
        return CallError::Deadline(config.call_deadline);
    }
    if let Some(exit) = err.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return CallError::GuestTrap(format!(
            "the environment exited the interpreter (os._exit({})); the sandbox cannot continue",
            exit.0
        ));
    }
    let trap = err.downcast_ref::<Trap>().copied();
    let denied = store.data_mut().limiter.denied.take();
    match trap {
        Some(Trap::OutOfFuel) => CallError::OutOfFuel { budget },
        Some(Trap::StackOverflow) => CallError::StackOverflow,
        Some(Trap::Interrupt) => CallError::Deadline(config.call_deadline),
        _ if denied.is_some() => CallError::MemoryLimit {
            limit: config.memory_limit,
            detail: format!(
                "the environment tried to grow the sandbox memory to {} bytes",
                denied.unwrap_or(0)
            ),
        },
        _ => {
            // A guest panic prints its message to stderr before trapping: keep its tail.
            let (stderr, _) = store.data().stderr.take();
            let stderr = String::from_utf8_lossy(&stderr);
            let tail: String = stderr
                .lines()
                .rev()
                .take(5)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            let what = trap
                .map(|t| t.to_string())
                .unwrap_or_else(|| format!("{err:#}"));
            if tail.is_empty() {
                CallError::GuestTrap(what)
            } else {
                CallError::GuestTrap(format!("{what}\n{tail}"))
            }
        }
    }
}
