//! One sandbox: one store, one loaded environment instance, one seed, and the one call
//! lifecycle every guest call goes through ([`Sandbox::call`]).

use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, Store, UpdateDeadline};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{self, EnvError, SizeLimits};
use crate::cache::snapshot::{CaptureRequest, Captured, LoadPlan, Snapshot, SnapshotIo};
use crate::config::{Limits, Yields};
use crate::deadline;
use crate::error::{CallError, ErrorKind};
use crate::fields::ExtraFields;
use crate::memory::{Charge, Location, MemoryAccount, OverBudget};
use crate::outcome;
use crate::source::EnvSource;
use crate::wasi::{CappedOutput, EntropyReads, EntropyStreams, VirtualClock, deterministic_ctx};

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
    /// Captured stdout (lossy UTF-8), at most `Limits::output_limit` bytes after conversion.
    pub stdout: String,
    /// Captured stderr (lossy UTF-8), at most `Limits::output_limit` bytes after conversion.
    pub stderr: String,
    /// Bytes printed beyond the limit and dropped (counted as the guest wrote them).
    pub dropped_bytes: u64,
}

/// Enforces the memory cap (and, with a shared [`MemoryAccount`], charges every growth to it)
/// and remembers whether it denied a growth during the current call.
pub(crate) struct MemoryLimiter {
    limit: usize,
    /// The size a growth asked for that was denied, since the call began.
    pub(crate) denied: Option<usize>,
    /// Why the last denied growth was denied, when it was the shared account that refused it.
    pub(crate) over_budget: Option<OverBudget>,
    /// This sandbox's linear memory, charged to the shared account (none without one).
    charge: Option<Charge>,
}

impl MemoryLimiter {
    /// Where a restore records the memory's place, when it is charged to an account.
    pub(crate) fn location(&self) -> Option<Arc<Location>> {
        self.charge.as_ref().map(Charge::location)
    }
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            self.denied = Some(desired);
            self.over_budget = None;
            return Ok(false);
        }
        if let Some(charge) = &mut self.charge
            && let Err(over) = charge.grow(current, desired)
        {
            self.denied = Some(desired);
            self.over_budget = Some(over);
            return Ok(false);
        }
        Ok(true)
    }

    fn memory_grow_failed(&mut self, _error: wasmtime::Error) -> wasmtime::Result<()> {
        // Growth beyond what the memory can ever hold (4 GiB for a 32-bit memory) never
        // reaches `memory_growing`, but it is the cap all the same.
        self.denied = Some(self.denied.unwrap_or(usize::MAX));
        Ok(())
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
    pub(crate) table: ResourceTable,
    pub(crate) clock: VirtualClock,
    pub(crate) limiter: MemoryLimiter,
    pub(crate) stdout: CappedOutput,
    pub(crate) stderr: CappedOutput,
    /// The sandbox's seed (for `wasi:random/insecure-seed`).
    pub(crate) seed: u64,
    /// Reads of WASI entropy so far.
    pub(crate) entropy: EntropyReads,
    /// The positions of the WASI entropy streams (shared with the WASI context).
    pub(crate) streams: EntropyStreams,
    /// The host side of snapshot capture and restore.
    pub(crate) snapshot: SnapshotIo,
}

impl SandboxState {
    pub(crate) fn new(seed: u64, config: &Limits, account: Option<&MemoryAccount>) -> Self {
        // Capture the raw limit; the lossy UTF-8 conversion cuts to the same limit.
        let stdout = CappedOutput::new(config.output_limit);
        let stderr = CappedOutput::new(config.output_limit);
        let clock = VirtualClock::default();
        let entropy = EntropyReads::default();
        let streams = EntropyStreams::new(seed);
        SandboxState {
            wasi: deterministic_ctx(
                &streams,
                clock.clone(),
                stdout.clone(),
                stderr.clone(),
                &entropy,
            ),
            table: ResourceTable::new(),
            clock,
            limiter: MemoryLimiter {
                limit: config.memory_limit,
                denied: None,
                over_budget: None,
                charge: account.cloned().map(Charge::new),
            },
            stdout,
            stderr,
            seed,
            entropy,
            streams,
            snapshot: SnapshotIo::default(),
        }
    }

    /// The state wizer pre-initialises the interpreter in (seed 0, default limits).
    pub(crate) fn for_preinit() -> Self {
        Self::new(0, &Limits::default(), None)
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

/// The pre-instantiated guest and how its calls yield: what every sandbox of a runtime is
/// created from.
#[derive(Clone)]
pub(crate) struct GuestPre {
    pub(crate) pre: bindings::SandboxPre<SandboxState>,
    pub(crate) yields: Yields,
    /// The account every sandbox's linear memory is charged to ([`crate::Config::memory_account`]).
    pub(crate) account: Option<MemoryAccount>,
}

/// The store and guest instance of a sandbox that is alive.
struct Live {
    store: Store<SandboxState>,
    pre: bindings::SandboxPre<SandboxState>,
    /// Whether the engine interrupts by epoch (the deadline of each call is then armed).
    epochs: bool,
    /// Set once the guest is instantiated (by the sandbox's first call).
    bindings: Option<bindings::Sandbox>,
}

/// One guest call, with its arguments.
pub(crate) enum Call<'a> {
    /// Compile `source` to bytecode.
    Compile(&'a str),
    /// Load `source`, seeding `random` first with `seed` when there is one.
    Load {
        source: &'a EnvSource,
        max_turns: Option<u32>,
        seed: Option<u64>,
        construct: bool,
    },
    /// Construct the environment class (after a load without `construct`); with
    /// `report_random`, find out whether the constructor used the module-global `random`.
    Construct {
        report_random: bool,
    },
    /// Seed `random` (after a load without a seed).
    Reseed(u64),
    /// Hand the linear memory to the host, which makes of it what the request says.
    Capture(CaptureRequest),
    /// Write a snapshot's pages into this (fresh) instance.
    Restore(&'a Arc<Snapshot>),
    /// `reset(seed=...)`, with extra fields (a JSON object) split by `reset`'s signature.
    Reset(Option<u64>, Option<&'a str>),
    Step(&'a str),
    Solution,
    Close,
}

/// What a guest call returned.
pub(crate) enum Reply {
    Code(Vec<u8>),
    /// What the load found, and whether a load without a seed changed `random`.
    Loaded(EnvInfo, bool),
    Captured(Captured),
    /// The reset's result and the names of the fields `reset` did not take.
    Reset(Reset, Vec<String>),
    Step(Step),
    Solution(String),
    /// A call without a value (`reseed`, `restore`, `close`).
    Done,
}

/// A loaded environment in its own WebAssembly instance.
///
/// Calls take `&mut self`: one sandbox runs one call at a time. Drive many sandboxes
/// concurrently by moving each into its own tokio task (with tokio's time driver enabled: a
/// guest parked in a host wait is stopped by a tokio timer). After a host limit
/// ([`CallError::kills_sandbox`]), or when a call's future is dropped before it finishes, the
/// sandbox's store (its linear memory and instance) is dropped at once and every further call
/// returns [`CallError::Dead`] with the reason.
pub struct Sandbox {
    live: Option<Live>,
    info: EnvInfo,
    limits: Arc<Limits>,
    dead: Option<ErrorKind>,
    last_fuel: u64,
    last_output: CallOutput,
}

impl Sandbox {
    /// A sandbox with a fresh store (the guest is instantiated by its first call).
    pub(crate) fn fresh(limits: Arc<Limits>, guest: &GuestPre, seed: u64) -> Sandbox {
        let mut store = Store::new(
            guest.pre.engine(),
            SandboxState::new(seed, &limits, guest.account.as_ref()),
        );
        store.limiter(|state| &mut state.limiter);
        match guest.yields {
            Yields::Fuel(interval) => store
                .fuel_async_yield_interval(Some(interval))
                .expect("fuel is enabled and `Runtime::new` refuses a zero interval"),
            // Deadlines are decided by `deadline::bounded` around the call; an epoch tick only
            // makes a long-running guest yield to the executor.
            Yields::Epochs => store.epoch_deadline_callback(|_| Ok(UpdateDeadline::Yield(1))),
        }
        Sandbox {
            live: Some(Live {
                store,
                pre: guest.pre.clone(),
                epochs: guest.yields == Yields::Epochs,
                bindings: None,
            }),
            info: EnvInfo {
                class_name: String::new(),
                max_turns: None,
                tools: None,
            },
            limits,
            dead: None,
            last_fuel: 0,
            last_output: CallOutput::default(),
        }
    }

    /// Loads `source` into a fresh sandbox the way `plan` says (see [`crate::cache::snapshot`]).
    /// Whatever the plan, the sandbox ends up in the same state, and `last_fuel` and
    /// `last_output` report the load as if every stage ran here.
    pub(crate) async fn load(
        guest: &GuestPre,
        limits: Arc<Limits>,
        source: &EnvSource,
        options: SandboxOptions,
        plan: &LoadPlan,
    ) -> Result<Sandbox, CallError> {
        let mut sandbox = Sandbox::fresh(limits, guest, options.seed);
        let max_turns = options.max_turns;
        let LoadPlan::Deferred {
            seed_before_construct,
            snapshot,
        } = plan
        else {
            let (info, _) = sandbox
                .load_source(source, max_turns, Some(options.seed), true)
                .await?;
            sandbox.info = info;
            return Ok(sandbox);
        };
        let mut load = Stages::default();
        let mut info = None;
        match snapshot {
            Some(snapshot) => {
                sandbox.call(Call::Restore(snapshot)).await?;
                load.fuel = snapshot.load_fuel;
                info = snapshot.constructed.clone();
            }
            None => {
                sandbox.load_source(source, max_turns, None, false).await?;
                load.add(&sandbox);
            }
        }
        // An unseeded constructor runs as the probe ran it (comparing `random`'s state), so
        // that it costs the fuel a snapshot taken after it reports; a seeded one compares
        // nothing, in every sandbox of the source alike.
        if info.is_none() && !seed_before_construct {
            info = Some(sandbox.construct(true).await?.0);
            load.add(&sandbox);
        }
        sandbox.call(Call::Reseed(options.seed)).await?;
        load.add(&sandbox);
        if info.is_none() {
            info = Some(sandbox.construct(false).await?.0);
            load.add(&sandbox);
        }
        sandbox.info = info.expect("constructed above");
        sandbox.last_fuel = load.fuel;
        sandbox.last_output = load.output;
        Ok(sandbox)
    }

    /// Runs the load call: what it found, and whether a load without a seed used the
    /// module-global `random`. Without `construct` the module runs and [`Sandbox::construct`]
    /// finishes the load.
    pub(crate) async fn load_source(
        &mut self,
        source: &EnvSource,
        max_turns: Option<u32>,
        seed: Option<u64>,
        construct: bool,
    ) -> Result<(EnvInfo, bool), CallError> {
        match self
            .call(Call::Load {
                source,
                max_turns,
                seed,
                construct,
            })
            .await?
        {
            Reply::Loaded(info, used_random) => Ok((info, used_random)),
            _ => unreachable!("load replies with Loaded"),
        }
    }

    /// Constructs the environment class after a load without `construct`; with
    /// `report_random`, also whether the constructor used the module-global `random` (false
    /// when not asked).
    pub(crate) async fn construct(
        &mut self,
        report_random: bool,
    ) -> Result<(EnvInfo, bool), CallError> {
        match self.call(Call::Construct { report_random }).await? {
            Reply::Loaded(info, used_random) => Ok((info, used_random)),
            _ => unreachable!("construct replies with Loaded"),
        }
    }

    /// What `request` makes of the guest's linear memory (a fresh instance's, or after a
    /// load), read in place.
    pub(crate) async fn capture(&mut self, request: CaptureRequest) -> Result<Captured, CallError> {
        match self.call(Call::Capture(request)).await? {
            Reply::Captured(captured) => Ok(captured),
            _ => unreachable!("capture replies with Captured"),
        }
    }

    /// The host state of the live store (`None` once the sandbox is dead).
    pub(crate) fn state(&self) -> Option<&SandboxState> {
        self.live.as_ref().map(|live| live.store.data())
    }

    /// The host state of the live store, to change (`None` once the sandbox is dead).
    pub(crate) fn state_mut(&mut self) -> Option<&mut SandboxState> {
        self.live.as_mut().map(|live| live.store.data_mut())
    }

    /// The sandbox's limits.
    pub(crate) fn limits_arc(&self) -> Arc<Limits> {
        self.limits.clone()
    }

    /// Takes the account of the last call (fuel, output), for a call of the host's own (a
    /// fork's capture) that must not replace it.
    pub(crate) fn take_last(&mut self) -> (u64, CallOutput) {
        (self.last_fuel, std::mem::take(&mut self.last_output))
    }

    /// Puts back what [`Sandbox::take_last`] took.
    pub(crate) fn put_last(&mut self, (fuel, output): (u64, CallOutput)) {
        self.last_fuel = fuel;
        self.last_output = output;
    }

    /// Makes a sandbox just restored from a parent's state report what the parent found at
    /// load (`info`); its own account starts empty (the fork ran no call of the environment's).
    pub(crate) fn set_forked(&mut self, info: EnvInfo) {
        self.info = info;
        self.last_fuel = 0;
        self.last_output = CallOutput::default();
    }

    /// Runs one guest call through the call lifecycle ([`Sandbox::call`]).
    pub(crate) async fn run(&mut self, call: Call<'_>) -> Result<Reply, CallError> {
        self.call(call).await
    }

    /// Whether the sandbox is alive and has not read WASI entropy.
    pub(crate) fn seed_independent(&self) -> bool {
        self.state().is_some_and(|state| state.entropy.get() == 0)
    }

    /// Whether the state after the last call can be snapshotted: the sandbox is alive, the
    /// call printed nothing and the guest holds no host resource (a cached stdout stream would
    /// not exist in the instance the snapshot is restored into).
    pub(crate) fn can_snapshot(&self) -> bool {
        let out = &self.last_output;
        self.state().is_some_and(|state| state.table.is_empty())
            && out.stdout.is_empty()
            && out.stderr.is_empty()
            && out.dropped_bytes == 0
    }

    /// Compiles `source` to bytecode in a throwaway instance (budget: the load fuel).
    pub(crate) async fn compile(
        guest: &GuestPre,
        limits: Arc<Limits>,
        source: &str,
    ) -> Result<Vec<u8>, CallError> {
        let mut sandbox = Sandbox::fresh(limits, guest, 0);
        match sandbox.call(Call::Compile(source)).await? {
            Reply::Code(code) => Ok(code),
            _ => unreachable!("compile replies with Code"),
        }
    }

    /// What `load` found: class name, `max_turns`, tool schemas.
    pub fn info(&self) -> &EnvInfo {
        &self.info
    }

    /// Fuel used by the last call (its whole budget if it ran out; 0 for a call refused
    /// because the sandbox is dead).
    pub fn last_fuel(&self) -> u64 {
        self.last_fuel
    }

    /// What the environment printed during the last call (nothing for a refused call).
    pub fn last_output(&self) -> &CallOutput {
        &self.last_output
    }

    /// Why the sandbox is dead, if it is.
    pub fn dead(&self) -> Option<ErrorKind> {
        self.dead
    }

    /// Calls `reset(seed=seed)` (or `reset()` when `seed` is `None`).
    pub async fn reset(&mut self, seed: Option<u64>) -> Result<Reset, CallError> {
        match self.call(Call::Reset(seed, None)).await? {
            Reply::Reset(reset, _) => Ok(reset),
            _ => unreachable!("reset replies with Reset"),
        }
    }

    /// Calls `reset(seed=seed, **passed)`, where `passed` are the `fields` that the
    /// environment's `reset` takes by keyword (all of them when it takes `**kwargs`), as
    /// OpenEnv's server passes a reset request's fields. Returns the reset and the names of the
    /// fields it dropped, in their order in `fields`. `seed` is never a field: one named so is
    /// dropped.
    /// The fields reach `json.loads` as their text ([`ExtraFields`]), so integers of any size
    /// arrive as Python ints.
    pub async fn reset_with(
        &mut self,
        seed: Option<u64>,
        fields: &ExtraFields,
    ) -> Result<(Reset, Vec<String>), CallError> {
        match self.call(Call::Reset(seed, Some(fields.json()))).await? {
            Reply::Reset(reset, dropped) => {
                check_dropped(&dropped, fields)?;
                Ok((reset, dropped))
            }
            _ => unreachable!("reset replies with Reset"),
        }
    }

    /// Calls `step(action)`.
    pub async fn step(&mut self, action: &str) -> Result<Step, CallError> {
        match self.call(Call::Step(action)).await? {
            Reply::Step(step) => Ok(step),
            _ => unreachable!("step replies with Step"),
        }
    }

    /// Calls `solution()`.
    pub async fn solution(&mut self) -> Result<String, CallError> {
        match self.call(Call::Solution).await? {
            Reply::Solution(text) => Ok(text),
            _ => unreachable!("solution replies with Solution"),
        }
    }

    /// Calls `close()` if the environment defines it.
    pub async fn close(&mut self) -> Result<(), CallError> {
        match self.call(Call::Close).await? {
            Reply::Done => Ok(()),
            _ => unreachable!("close replies with Closed"),
        }
    }

    /// The one call lifecycle: every guest call goes through here.
    ///
    /// Phases: refuse if dead; take the store out of the sandbox (so that dropping this
    /// future drops the store, and the sandbox then answers `Dead(Cancelled)`); set the fuel
    /// budget, clear output and the memory limiter's record; run the guest call under the
    /// deadline; record fuel and output; classify the outcome and check result sizes; put the
    /// store back unless the outcome killed the sandbox.
    async fn call(&mut self, call: Call<'_>) -> Result<Reply, CallError> {
        let Some(mut live) = self.live.take() else {
            self.last_fuel = 0;
            self.last_output = CallOutput::default();
            return Err(CallError::Dead(self.dead.unwrap_or(ErrorKind::Cancelled)));
        };
        self.dead = Some(ErrorKind::Cancelled);
        let limits = self.limits.clone();
        let budget = match call {
            Call::Compile(_)
            | Call::Load { .. }
            | Call::Construct { .. }
            | Call::Capture(_)
            | Call::Restore(_) => limits.load_fuel,
            _ => limits.fuel_per_call,
        };
        // With a shared account, the whole memory is charged while the call runs (it can
        // write every page): waiting, up to the call's deadline, for room to be given back.
        if let Some(charge) = live.store.data_mut().limiter.charge.as_mut()
            && let Err(over) = charge.arm(limits.call_deadline).await
        {
            self.last_fuel = 0;
            self.last_output = CallOutput::default();
            self.dead = Some(ErrorKind::MemoryLimit);
            return Err(outcome::memory_not_covered(&limits, charge.size(), over));
        }
        begin(&mut live.store, live.epochs, budget);
        // Capture and restore run only spade's own code on memory the load already sized;
        // they get a deadline of their own rather than the environment's.
        let call_deadline = match call {
            Call::Capture(_) | Call::Restore(_) => limits.call_deadline.max(SNAPSHOT_DEADLINE),
            _ => limits.call_deadline,
        };
        let ran = deadline::bounded(call_deadline, dispatch(&mut live, call, &limits)).await;
        self.last_fuel = budget.saturating_sub(live.store.get_fuel().unwrap_or(0));
        let denied = live.store.data_mut().limiter.denied.take();
        let over_budget = live.store.data_mut().limiter.over_budget.take();
        let result = match ran {
            Err(deadline::Elapsed) => Err(CallError::Deadline(call_deadline)),
            Ok(Err(trap)) => Err(outcome::classify_trap(&live.store, &limits, budget, trap)),
            Ok(Ok(Err(env_error))) => {
                Err(outcome::check_error(outcome::env_error(env_error), &limits))
            }
            Ok(Ok(Ok(reply))) => outcome::check_sizes(reply, &limits),
        };
        // A denied growth means the cap was reached, whatever the guest made of it (a trap, a
        // `MemoryError` it raised or caught, a contract error from a half-built value).
        let result = match denied {
            Some(desired) if outcome::memory_decides(&result) => {
                Err(outcome::memory_limit(&limits, desired, over_budget))
            }
            _ => result,
        };
        self.last_output = outcome::take_output(&live.store, limits.output_limit);
        match &result {
            Err(err) if err.kills_sandbox() => self.dead = Some(err.kind()),
            _ => {
                // Between calls the charge is what the memory really holds.
                if let Some(charge) = live.store.data_mut().limiter.charge.as_mut() {
                    charge.settle();
                }
                self.dead = None;
                self.live = Some(live);
            }
        }
        result
    }
}

/// The least deadline of a snapshot's capture or restore: they copy at most the memory limit.
const SNAPSHOT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(30);

/// Sets a call's fuel budget and clears what the previous call left behind.
fn begin(store: &mut Store<SandboxState>, epochs: bool, budget: u64) {
    store
        .set_fuel(budget)
        .expect("fuel is enabled on the engine");
    if epochs {
        store.set_epoch_deadline(1);
    }
    let state = store.data_mut();
    state.limiter.denied = None;
    state.limiter.over_budget = None;
    state.stdout.take();
    state.stderr.take();
}

/// The limits the guest enforces on what it returns.
fn size_limits(limits: &Limits) -> SizeLimits {
    SizeLimits {
        observation: limits.observation_limit as u64,
        info: limits.info_limit as u64,
        solution: limits.solution_limit as u64,
        tools: limits.tools_limit as u64,
        error: outcome::error_limit(limits) as u64,
    }
}

/// The reply to a `load` or `construct`.
fn loaded(info: bindings::GuestEnvInfo) -> Reply {
    Reply::Loaded(
        EnvInfo {
            class_name: info.class_name,
            max_turns: info.max_turns,
            tools: info.tools,
        },
        info.used_random,
    )
}

/// Fuel and output of the stages of a load, added up.
#[derive(Default)]
struct Stages {
    fuel: u64,
    output: CallOutput,
}

impl Stages {
    /// Adds the last call of `sandbox`.
    fn add(&mut self, sandbox: &Sandbox) {
        self.fuel = self.fuel.saturating_add(sandbox.last_fuel);
        let out = &sandbox.last_output;
        self.output.stdout.push_str(&out.stdout);
        self.output.stderr.push_str(&out.stderr);
        self.output.dropped_bytes += out.dropped_bytes;
    }
}

/// Runs the guest function `call` names (instantiating the guest first if this is the
/// sandbox's first call).
async fn dispatch(
    live: &mut Live,
    call: Call<'_>,
    limits: &Limits,
) -> wasmtime::Result<Result<Reply, EnvError>> {
    let store = &mut live.store;
    if live.bindings.is_none() {
        live.bindings = Some(live.pre.instantiate_async(&mut *store).await?);
    }
    let Some(guest) = &live.bindings else {
        unreachable!("instantiated above");
    };
    let env = guest.spade_env_environment();
    Ok(match call {
        Call::Compile(source) => env
            .call_compile(store, source, size_limits(limits))
            .await?
            .map(Reply::Code),
        Call::Load {
            source,
            max_turns,
            seed,
            construct,
        } => {
            let load_options = bindings::LoadOptions {
                max_turns,
                random_seed: seed,
                construct,
                limits: size_limits(limits),
            };
            env.call_load(store, source.text(), source.code(), load_options)
                .await?
                .map(loaded)
        }
        Call::Construct { report_random } => {
            env.call_construct(store, report_random).await?.map(loaded)
        }
        Call::Reseed(seed) => env.call_reseed(store, seed).await?.map(|()| Reply::Done),
        Call::Capture(request) => {
            store.data_mut().snapshot.capture = Some((request, None));
            // The guest hands over its whole memory in one host call.
            let hostcall_fuel = store.hostcall_fuel();
            store.set_hostcall_fuel(limits.memory_limit.saturating_add(1 << 20));
            let ran = env.call_snapshot(&mut *store).await;
            store.set_hostcall_fuel(hostcall_fuel);
            let captured = store
                .data_mut()
                .snapshot
                .capture
                .take()
                .and_then(|(_, captured)| captured);
            ran?;
            match captured {
                Some(captured) => Ok(Reply::Captured(captured)),
                None => wasmtime::bail!("the guest's snapshot did not pass its memory"),
            }
        }
        Call::Restore(snapshot) => {
            store.data_mut().snapshot.restore = Some((snapshot.clone(), false));
            let ran = env.call_restore(&mut *store, snapshot.wasm_pages).await;
            let restore = store.data_mut().snapshot.restore.take();
            ran?;
            if !restore.is_some_and(|(_, written)| written) {
                wasmtime::bail!("the guest's restore did not ask for the snapshot's pages");
            }
            store.data().clock.advance_to(snapshot.clock_nanos);
            Ok(Reply::Done)
        }
        Call::Reset(seed, fields) => env.call_reset(store, seed, fields).await?.map(|r| {
            Reply::Reset(
                Reset {
                    observation: r.observation,
                    info: r.info,
                },
                r.dropped,
            )
        }),
        Call::Step(action) => env.call_step(store, action).await?.map(|r| {
            Reply::Step(Step {
                observation: r.observation,
                reward: r.reward,
                terminated: r.terminated,
                truncated: r.truncated,
                info: r.info,
            })
        }),
        Call::Solution => env.call_solution(store).await?.map(Reply::Solution),
        Call::Close => env.call_close(store).await?.map(|()| Reply::Done),
    })
}

/// The host's own check of a reset's dropped names: each a distinct key of the `fields` it
/// sent, so the list is never larger than the request. The guest checks the same before the
/// names leave it; this only trips for a guest that does not keep the contract.
fn check_dropped(dropped: &[String], fields: &ExtraFields) -> Result<(), CallError> {
    let mut seen = std::collections::HashSet::new();
    for name in dropped {
        if !fields.contains(name) || !seen.insert(name.as_str()) {
            let mut end = name.len().min(64);
            while !name.is_char_boundary(end) {
                end -= 1;
            }
            return Err(CallError::Contract(format!(
                "reset() dropped {:?}, which is not one of its fields or is named twice",
                &name[..end]
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod dropped_tests {
    use super::*;

    #[test]
    fn dropped_names_must_be_distinct_fields() {
        let fields = &ExtraFields::parse(r#"{"a": 1, "b": 2}"#).unwrap();
        assert!(check_dropped(&["a".into(), "b".into()], fields).is_ok());
        assert!(check_dropped(&[], fields).is_ok());
        let unknown = check_dropped(&["c".into()], fields).unwrap_err();
        assert_eq!(
            unknown.to_string(),
            CallError::Contract(
                "reset() dropped \"c\", which is not one of its fields or is named twice".into()
            )
            .to_string()
        );
        assert!(check_dropped(&["a".into(), "a".into()], fields).is_err());
        let long = "x".repeat(1000);
        let message = check_dropped(&[long], fields).unwrap_err().to_string();
        assert!(message.len() < 200, "{message}");
    }
}
