//! The per-process runtime: engine, linker, pre-instantiated guest, epoch ticker (with
//! [`Yields::Epochs`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::OnceCell;
use wasmtime::Engine;
use wasmtime::component::Linker;

use crate::bindings::SandboxPre;
use crate::cache::snapshot::{self, CaptureRequest, Captured, LoadPlan, Snapshot};
use crate::cache::{
    Cache, artifact, code as code_cache, snapshot_file as snapshot_cache, verdict as verdict_cache,
};
use crate::config::{Config, Limits, Pool, Yields};
use crate::error::{CallError, RuntimeError};
use crate::sandbox::{EnvInfo, GuestPre, Sandbox, SandboxOptions, SandboxState};
use crate::source::{EnvSource, LiveFiles, PlanKey, Release, SourceCache};
use crate::wasi;

/// How often the engine's epoch advances: a long-running call yields to the async executor (and
/// its deadline is checked) at this granularity.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Everything that is built once per process. Cheap to clone; share it between tasks.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
    limits: Arc<Limits>,
}

struct Inner {
    engine: Engine,
    guest: GuestPre,
    config: Config,
    /// The cache directory, opened and verified once (`None` without one).
    cache: Option<Arc<Cache>>,
    sources: SourceCache,
    /// The snapshot files the plans in memory use (kept by the disk cache's trim).
    live_files: Arc<LiveFiles>,
    stop_ticker: Arc<AtomicBool>,
    linked: Vec<String>,
    trapped: Vec<String>,
    /// A fresh interpreter's memory, the base snapshots are taken against (captured when the
    /// first snapshot is taken).
    base_memory: OnceCell<Arc<Vec<u8>>>,
}

/// What a runtime's caches hold now ([`Runtime::cache_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Compiled sources kept in memory (at most [`Caches::sources`](crate::Caches)).
    pub sources: usize,
    /// Load plans of those sources (at most [`Caches::plans_per_source`](crate::Caches) each).
    pub plans: usize,
    /// Bytes of the snapshots those plans hold.
    pub snapshot_bytes: usize,
    /// Bytes the kept sources hold in all: text, bytecode and snapshots (at most
    /// [`Caches::memory_bytes`](crate::Caches), past the most recently used source).
    pub bytes: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// The wasmtime settings spade relies on.
pub(crate) fn engine_config(config: &Config) -> wasmtime::Config {
    let mut wasm = wasmtime::Config::new();
    wasm.wasm_component_model(true)
        // Fuel makes limits deterministic; yields (by fuel or epoch) let the deadline, the
        // wall-clock safety net, be checked during a long call.
        .consume_fuel(true)
        .epoch_interruption(config.yields == Yields::Epochs)
        // Same float bits on every CPU.
        .cranelift_nan_canonicalization(true)
        .relaxed_simd_deterministic(true)
        .max_wasm_stack(config.max_wasm_stack)
        .async_stack_size(config.max_wasm_stack + (1 << 20))
        // Copy-on-write mapping of the snapshot's memory: the heart of fast instantiation.
        .memory_init_cow(true);
    if let Some(pool) = &config.pool {
        wasm.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(
            pooling_config(pool),
        ));
    }
    wasm
}

/// The pooling allocator for `pool`: one slot per sandbox. A sandbox is one component
/// instance with a handful of core instances (the interpreter, wit-component's shims), one
/// linear memory, a few tables and one fiber stack.
fn pooling_config(pool: &Pool) -> wasmtime::PoolingAllocationConfig {
    let n = pool.sandboxes;
    let mut p = wasmtime::PoolingAllocationConfig::new();
    p.total_component_instances(n)
        .total_core_instances(n.saturating_mul(CORE_INSTANCES_PER_SANDBOX))
        .max_core_instances_per_component(CORE_INSTANCES_PER_SANDBOX)
        .total_memories(n)
        .max_memories_per_component(1)
        .max_memories_per_module(1)
        .total_tables(n.saturating_mul(TABLES_PER_SANDBOX))
        .max_tables_per_component(TABLES_PER_SANDBOX)
        .max_tables_per_module(TABLES_PER_SANDBOX)
        .table_elements(TABLE_ELEMENTS)
        .total_stacks(n)
        // A slot can hold any 32-bit memory: the memory limit is the limiter's to enforce
        // (so `with_limits` can raise it), and the reservation is address space only.
        .max_memory_size(MAX_MEMORY_BYTES)
        .max_core_instance_size(CORE_INSTANCE_BYTES)
        .max_component_instance_size(CORE_INSTANCE_BYTES)
        .linear_memory_keep_resident(pool.keep_resident)
        .table_keep_resident(pool.keep_resident)
        .pagemap_scan(if pool.scan_dirty_pages {
            wasmtime::Enabled::Auto
        } else {
            wasmtime::Enabled::No
        });
    p
}

/// The largest 32-bit linear memory.
const MAX_MEMORY_BYTES: usize = 1 << 32;
/// Core instances in one instance of the guest component (the interpreter, wit-component's
/// indirect-call shim and its fixup module, with room to spare).
const CORE_INSTANCES_PER_SANDBOX: u32 = 8;
/// Tables per sandbox: the interpreter's function table and the shim's.
const TABLES_PER_SANDBOX: u32 = 4;
/// Elements of the largest table (RustPython's function table has tens of thousands).
const TABLE_ELEMENTS: usize = 1 << 17;
/// Bytes of one instance's host-side state (its vmctx: imports, globals, table and memory
/// pointers).
const CORE_INSTANCE_BYTES: usize = 1 << 20;

impl Runtime {
    /// Whether the compiled guest for `config` is already in its cache, so that
    /// [`Runtime::new`] maps it in milliseconds instead of pre-initialising and compiling it
    /// (about a minute). `false` without a cache directory.
    pub fn is_prepared(config: &Config) -> bool {
        let Some(dir) = config.cache_dir.as_deref() else {
            return false;
        };
        Engine::new(&engine_config(config))
            .is_ok_and(|engine| artifact::artifact_path(&engine, dir).exists())
    }

    /// Builds the engine and prepares the guest (from the artifact cache when possible).
    pub fn new(config: Config) -> Result<Runtime, RuntimeError> {
        Runtime::new_announcing(config, || {})
    }

    /// [`Runtime::new`], calling `before_build` once the artifact cache has missed, just before
    /// the guest is pre-initialised and compiled (or another process building it is waited
    /// for): a command can tell its user why this start takes a minute. With a warm cache it
    /// is never called, and no engine is built twice to find out (as [`Runtime::is_prepared`]
    /// would).
    pub fn new_announcing(
        config: Config,
        before_build: impl FnOnce(),
    ) -> Result<Runtime, RuntimeError> {
        if config.yields == Yields::Fuel(0) {
            return Err(RuntimeError::Engine(
                "Yields::Fuel needs a positive fuel interval".to_owned(),
            ));
        }
        let engine = Engine::new(&engine_config(&config))
            .map_err(|e| RuntimeError::Engine(e.to_string()))?;
        let cache = config
            .cache_dir
            .as_deref()
            .map(Cache::open)
            .transpose()?
            .map(Arc::new);
        let component =
            artifact::load_component(&engine, cache.as_ref().map(|c| &c.root), before_build)?;
        let mut linker: Linker<SandboxState> = Linker::new(&engine);
        let trapped = wasi::add_to_linker(&mut linker, &component)
            .map_err(|e| RuntimeError::Engine(e.to_string()))?;
        let linked = wasi::imported_interfaces(&component)
            .into_iter()
            .filter(|name| !trapped.contains(name))
            .collect();
        let instance_pre = linker
            .instantiate_pre(&component)
            .map_err(|e| RuntimeError::Guest(e.to_string()))?;
        let pre = SandboxPre::new(instance_pre).map_err(|e| RuntimeError::Guest(e.to_string()))?;
        let stop_ticker = Arc::new(AtomicBool::new(false));
        if config.yields == Yields::Epochs {
            spawn_ticker(engine.clone(), stop_ticker.clone());
        }
        let limits = Arc::new(config.limits.clone());
        let sources = SourceCache::new(config.caches.sources, config.caches.memory_bytes);
        Ok(Runtime {
            inner: Arc::new(Inner {
                engine,
                guest: GuestPre {
                    pre,
                    yields: config.yields,
                    account: config.memory_account.clone(),
                },
                config,
                cache,
                sources,
                live_files: Arc::new(LiveFiles::default()),
                stop_ticker,
                linked,
                trapped,
                base_memory: OnceCell::new(),
            }),
            limits,
        })
    }

    /// Creates a sandbox and loads the environment `source` into it (compiling the source
    /// first unless this runtime has compiled it before).
    pub async fn sandbox(
        &self,
        source: &str,
        options: SandboxOptions,
    ) -> Result<Sandbox, CallError> {
        let prepared = self.prepare(source).await?;
        self.sandbox_from(&prepared, options).await
    }

    /// Creates a sandbox from an already compiled source.
    ///
    /// The first sandbox of a source (for each `max_turns` and set of limits) decides how
    /// all of them are loaded, and with [`Config::snapshots`] takes the snapshot they start
    /// from: see [`crate::cache::snapshot`] for what runs when. Every way gives the same state, fuel
    /// and output as running the source in the sandbox.
    pub async fn sandbox_from(
        &self,
        source: &EnvSource,
        options: SandboxOptions,
    ) -> Result<Sandbox, CallError> {
        let key = PlanKey {
            max_turns: options.max_turns,
            limits: (*self.limits).clone(),
            snapshots: self.inner.config.snapshots,
        };
        let cell = source.plan_cell(
            key.clone(),
            self.inner.config.caches.plans_per_source,
            || {
                let name = self.snapshot_name(source, &key)?;
                Some(self.inner.live_files.mark(name))
            },
        );
        let decided = cell.initialized();
        let plan = cell
            .get_or_try_init(|| self.cached_plan(source, &key))
            .await?;
        // A new plan may have grown the source: keep the runtime's sources within their bounds
        // (a plan decided before changed nothing, and is only a use).
        drop(self.inner.sources.touch(source, !decided));
        Sandbox::load(
            &self.inner.guest,
            self.limits.clone(),
            source,
            options,
            plan,
        )
        .await
    }

    /// A verdict cached under `key` by [`Runtime::store_verdict`] with this guest, if the cache
    /// has it intact. The caller's key must name everything the verdict depends on besides the
    /// guest (the source's hash, the limits, the check's options).
    pub fn cached_verdict(&self, key: &str) -> Option<Vec<u8>> {
        let cache = self.inner.cache.as_ref()?;
        verdict_cache::read(
            &cache.verdicts,
            &verdict_cache::name(&self.artifact_key(), key),
        )
    }

    /// Caches `verdict` under `key` (see [`Runtime::cached_verdict`]); a runtime without a
    /// cache directory keeps nothing.
    pub fn store_verdict(&self, key: &str, verdict: &[u8]) -> std::io::Result<()> {
        let Some(cache) = self.inner.cache.as_ref() else {
            return Ok(());
        };
        let name = verdict_cache::name(&self.artifact_key(), key);
        verdict_cache::write(
            &cache.verdicts,
            &name,
            verdict,
            self.inner.config.caches.code_disk_bytes,
        )
    }

    /// The file that caches the bytecode of `source` compiled under this runtime's limits
    /// (`None` without a cache directory). [`Runtime::prepare`] writes it; a later process
    /// reads it instead of compiling the source again.
    pub fn code_file(&self, source: &EnvSource) -> Option<PathBuf> {
        self.code_path(source.sha256())
    }

    fn code_path(&self, source_sha256: &str) -> Option<PathBuf> {
        self.inner
            .config
            .cache_dir
            .as_deref()
            .map(|dir| code_cache::path(dir, &self.artifact_key(), source_sha256, &self.limits))
    }

    /// The file that caches how sandboxes of `source` with `max_turns` are loaded under this
    /// runtime's limits, and their snapshot (`None` without a cache directory). It is written
    /// by the first sandbox; deleting it only costs the next process a probe.
    pub fn snapshot_file(&self, source: &EnvSource, max_turns: Option<u32>) -> Option<PathBuf> {
        let key = PlanKey {
            max_turns,
            limits: (*self.limits).clone(),
            snapshots: self.inner.config.snapshots,
        };
        self.snapshot_path(source, &key)
    }

    fn snapshot_path(&self, source: &EnvSource, key: &PlanKey) -> Option<PathBuf> {
        self.inner
            .config
            .cache_dir
            .as_deref()
            .map(|dir| snapshot_cache::path(dir, &self.artifact_key(), source.sha256(), key))
    }

    /// The name of the snapshot file of `source` and `key` (`None` without a cache directory).
    fn snapshot_name(&self, source: &EnvSource, key: &PlanKey) -> Option<String> {
        self.inner.cache.as_ref()?;
        Some(snapshot_cache::name(
            &self.artifact_key(),
            source.sha256(),
            key,
        ))
    }

    /// The plan for `source` from the disk cache, or probed and then cached.
    async fn cached_plan(&self, source: &EnvSource, key: &PlanKey) -> Result<LoadPlan, CallError> {
        let cached = self.inner.cache.as_ref().map(|cache| {
            let name = snapshot_cache::name(&self.artifact_key(), source.sha256(), key);
            (&cache.snapshots, name)
        });
        if let Some((dir, name)) = &cached
            && let Some(plan) = snapshot_cache::read(dir, name)
        {
            // A read is a use: the trim removes the least recently used files first.
            let _ = dir.touch(name);
            return Ok(plan);
        }
        let plan = self.plan(source, key.max_turns).await?;
        if let Some((dir, name)) = &cached {
            // A plan that cannot be cached is probed again by the next process; nothing else
            // depends on the file.
            if snapshot_cache::write(dir, name, &plan).is_ok() {
                self.trim_snapshot_files();
            }
        }
        Ok(plan)
    }

    /// Removes the least recently used snapshot files that no plan in memory uses until the
    /// rest fit [`Caches::disk_bytes`](crate::Caches).
    fn trim_snapshot_files(&self) {
        if let Some(cache) = &self.inner.cache {
            let live = &self.inner.live_files;
            snapshot_cache::trim(
                &cache.snapshots,
                self.inner.config.caches.disk_bytes,
                |name| live.contains(name),
            );
        }
    }

    /// Lets go of the compiled source of `sha256` (a server's registration of it was evicted
    /// or deleted): it leaves this runtime's cache, and once the last handle on it is dropped
    /// (at once, or when the last sandbox's caller that still plays it lets go) its plans and
    /// snapshots are freed and the snapshot files of those plans removed (unless a plan in
    /// memory uses one). A caller that still holds the source goes on using it; a later
    /// [`Runtime::prepare`] of the same text compiles it again.
    pub fn release(&self, sha256: &str) {
        if let Some(source) = self.inner.sources.remove(sha256) {
            self.mark_released(&source);
        }
    }

    /// [`Runtime::release`] of `source`, which the caller hands over: the same source is let
    /// go of whether or not it is still in this runtime's cache.
    pub fn release_source(&self, source: EnvSource) {
        self.mark_released(&source);
        self.release(source.sha256());
    }

    fn mark_released(&self, source: &EnvSource) {
        if let Some(cache) = &self.inner.cache {
            source.mark_released(Release {
                cache: cache.clone(),
                live: self.inner.live_files.clone(),
            });
        }
    }

    /// What the runtime's source cache holds now: sources, their plans and the bytes of
    /// their snapshots. A source held only outside the cache (by a registration the cache
    /// evicted) is not counted until its next sandbox puts it back.
    pub fn cache_stats(&self) -> CacheStats {
        let (sources, plans, snapshot_bytes, bytes) = self.inner.sources.stats();
        CacheStats {
            sources,
            plans,
            snapshot_bytes,
            bytes,
        }
    }

    /// The snapshot files in the cache directory and their bytes (at most
    /// [`Caches::disk_bytes`](crate::Caches), past the files that plans in memory use);
    /// `(0, 0)` without a cache directory. Lists the directory: not for a hot path.
    pub fn snapshot_files(&self) -> (usize, u64) {
        self.inner
            .cache
            .as_ref()
            .and_then(|cache| cache.snapshots.files().ok())
            .map_or((0, 0), |files| {
                let snaps = files.iter().filter(|f| f.name.ends_with(".snap"));
                snaps.fold((0, 0), |(n, b), f| (n + 1, b + f.bytes))
            })
    }

    /// Probes how `source` loads and takes its snapshot (see [`crate::cache::snapshot`]).
    async fn plan(
        &self,
        source: &EnvSource,
        max_turns: Option<u32>,
    ) -> Result<LoadPlan, CallError> {
        let snapshots = self.inner.config.snapshots;
        if snapshots {
            // The fresh memory a snapshot is diffed against is captured (once per runtime)
            // before the probe exists: with a shared `MemoryAccount` each of the two would be
            // charged its whole memory, and a budget that fits one sandbox's call would then
            // refuse the first plan on a cold cache.
            self.base_memory().await?;
        }
        let mut probe = Sandbox::fresh(self.limits.clone(), &self.inner.guest, 0);
        // A probe that fails leaves the error to each sandbox's own load, which runs the
        // stage as it always ran (seeded first).
        let Ok((_, used_random)) = probe.load_source(source, max_turns, None, false).await else {
            return Ok(LoadPlan::Seeded);
        };
        if used_random || !probe.seed_independent() {
            return Ok(LoadPlan::Seeded);
        }
        let module_fuel = probe.last_fuel();
        let mut snapshot = None;
        if snapshots && probe.can_snapshot() {
            snapshot = self.take_snapshot(&mut probe, module_fuel, None).await?;
        }
        let seeded_construct = |snapshot: Option<(Snapshot, usize)>| LoadPlan::Deferred {
            seed_before_construct: true,
            snapshot: snapshot.map(|(snapshot, _)| Arc::new(snapshot)),
        };
        let Ok((info, used_random)) = probe.construct(true).await else {
            return Ok(seeded_construct(snapshot));
        };
        if used_random || !probe.seed_independent() {
            // Every sandbox constructs after the restore: have the restore populate the pages
            // the probe's constructor wrote, too. An optimisation only: a probe that cannot
            // hand its memory over now leaves the snapshot as it is.
            if let Some((snapshot, before_len)) = &mut snapshot
                && let Ok(base) = self.base_memory().await
            {
                let request = CaptureRequest::LaterPages {
                    base,
                    snapshot_pages: snapshot::record_pages(&snapshot.records),
                    before_len: *before_len,
                };
                if let Ok(Captured::LaterPages(pages)) = probe.capture(request).await {
                    snapshot.later_pages = pages;
                }
            }
            return Ok(seeded_construct(snapshot));
        }
        let fuel = module_fuel.saturating_add(probe.last_fuel());
        if snapshot.is_some() && probe.can_snapshot() {
            // A constructor that leaves too much behind keeps the snapshot before it.
            if let Some(after) = self.take_snapshot(&mut probe, fuel, Some(info)).await? {
                snapshot = Some(after);
            }
        }
        Ok(LoadPlan::Deferred {
            seed_before_construct: false,
            snapshot: snapshot.map(|(snapshot, _)| Arc::new(snapshot)),
        })
    }

    /// The snapshot of `probe` as it is now: its pages that differ from a fresh interpreter's
    /// (`None` when they are too many to be worth keeping), and the length of the memory it
    /// was taken from. The diff is made where the memory lies in the guest: the host holds
    /// the snapshot's pages, never a copy of the probe's memory.
    async fn take_snapshot(
        &self,
        probe: &mut Sandbox,
        load_fuel: u64,
        constructed: Option<EnvInfo>,
    ) -> Result<Option<(Snapshot, usize)>, CallError> {
        let clock_nanos = probe.state().map_or(0, |state| state.clock.peek());
        let base = self.base_memory().await?;
        let Captured::Diff {
            records,
            dirty_pages,
            len,
        } = probe.capture(CaptureRequest::Diff(base)).await?
        else {
            unreachable!("a diff request captures a diff");
        };
        if dirty_pages * snapshot::PAGE > snapshot::MAX_SNAPSHOT_BYTES {
            return Ok(None);
        }
        let snapshot = Snapshot {
            // The capture starts at address 1.
            wasm_pages: ((len + 1) / 65536) as u32,
            records: snapshot::Records::captured(records),
            dirty_pages,
            later_pages: Vec::new(),
            constructed,
            load_fuel,
            clock_nanos,
        };
        Ok(Some((snapshot, len)))
    }

    /// The pre-instantiated guest every sandbox of this runtime is created from.
    pub(crate) fn guest(&self) -> &GuestPre {
        &self.inner.guest
    }

    /// A fresh interpreter's memory (captured once per runtime).
    pub(crate) async fn base_memory(&self) -> Result<Arc<Vec<u8>>, CallError> {
        self.inner
            .base_memory
            .get_or_try_init(|| async {
                let mut fresh = Sandbox::fresh(self.limits.clone(), &self.inner.guest, 0);
                match fresh.capture(CaptureRequest::Whole).await? {
                    Captured::Whole(memory) => Ok(Arc::new(memory)),
                    _ => unreachable!("a whole request captures the whole memory"),
                }
            })
            .await
            .cloned()
    }

    /// Bytes of a fresh sandbox's linear memory: the pre-initialised interpreter's image, which
    /// a [`MemoryAccount`](crate::MemoryAccount) charges every sandbox before its environment
    /// grows it. Found once per runtime, by instantiating the guest.
    pub async fn fresh_memory_bytes(&self) -> Result<u64, CallError> {
        // The capture starts at address 1.
        Ok(self.base_memory().await?.len() as u64 + 1)
    }

    /// How sandboxes of `source` with `max_turns` are loaded under this runtime's limits,
    /// once a sandbox has decided it: `Some(dirty pages, bytes)` when they start from a
    /// snapshot, `None` when each runs the source (or nothing is decided yet).
    pub fn snapshot_size(
        &self,
        source: &EnvSource,
        max_turns: Option<u32>,
    ) -> Option<(usize, usize)> {
        let key = PlanKey {
            max_turns,
            limits: (*self.limits).clone(),
            snapshots: self.inner.config.snapshots,
        };
        match source.plan(&key) {
            Some(LoadPlan::Deferred {
                snapshot: Some(snapshot),
                ..
            }) => Some((snapshot.dirty_pages, snapshot.bytes())),
            _ => None,
        }
    }

    /// Compiles `source` once (in a throwaway sandbox, within the load fuel budget) and caches
    /// the bytecode for every later sandbox of the same source, in memory and (with a cache
    /// directory) on disk for later processes. A syntax error is a [`CallError::Load`].
    pub async fn prepare(&self, source: &str) -> Result<EnvSource, CallError> {
        let (sha256, hit) = self.inner.sources.get(source);
        if let Some(prepared) = hit {
            return Ok(prepared);
        }
        let cached = self.inner.cache.as_ref().map(|cache| {
            let name = code_cache::name(&self.artifact_key(), &sha256, &self.limits);
            (&cache.code, name)
        });
        let code = match cached
            .as_ref()
            .and_then(|(dir, name)| code_cache::read(dir, name))
        {
            Some(code) => code,
            None => {
                let code = Sandbox::compile(&self.inner.guest, self.limits.clone(), source).await?;
                if let Some((dir, name)) = &cached {
                    // A compile that cannot be cached is done again by the next process.
                    let budget = self.inner.config.caches.code_disk_bytes;
                    let _ = code_cache::write(dir, name, &code, budget);
                }
                code
            }
        };
        let prepared = EnvSource::new(source, sha256, code);
        drop(self.inner.sources.insert(prepared.clone()));
        Ok(prepared)
    }

    /// A runtime sharing this one's engine and compiled guest, whose sandboxes run under
    /// `limits`. Cheap: nothing is compiled or instantiated.
    pub fn with_limits(&self, limits: Limits) -> Runtime {
        Runtime {
            inner: self.inner.clone(),
            limits: Arc::new(limits),
        }
    }

    /// The limits sandboxes of this runtime run under.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The engine-level settings this runtime was built with (its limits may differ: see
    /// [`Runtime::limits`]).
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The WASI interfaces linked for the guest (`wasi:io/poll`, ...): exactly those it
    /// imports that spade provides, the monotonic clock being the sandbox's virtual clock.
    pub fn linked_interfaces(&self) -> &[String] {
        &self.inner.linked
    }

    /// Interfaces the guest imports that spade does not provide (sockets): every function of
    /// them is a stub that traps, so none of it can be reached.
    pub fn trapped_interfaces(&self) -> &[String] {
        &self.inner.trapped
    }

    /// The cache key of the compiled guest for this runtime's engine.
    pub fn artifact_key(&self) -> String {
        artifact::artifact_key(&self.inner.engine)
    }
}

fn spawn_ticker(engine: Engine, stop: Arc<AtomicBool>) {
    std::thread::Builder::new()
        .name("spade-epoch".to_owned())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        })
        .expect("spawning the epoch thread");
}
