//! The per-process runtime: engine, linker, pre-instantiated guest, epoch ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::Engine;
use wasmtime::component::Linker;

use crate::artifact;
use crate::bindings::SandboxPre;
use crate::config::{Config, Limits};
use crate::error::{CallError, RuntimeError};
use crate::sandbox::{Sandbox, SandboxOptions, SandboxState};
use crate::source::{EnvSource, SourceCache};
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
    pre: SandboxPre<SandboxState>,
    config: Config,
    sources: SourceCache,
    stop_ticker: Arc<AtomicBool>,
    linked: Vec<String>,
    trapped: Vec<String>,
}

/// Compiled sources kept per runtime.
const SOURCE_CACHE_ENTRIES: usize = 1024;

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop_ticker.store(true, Ordering::Relaxed);
    }
}

/// The wasmtime settings spade relies on.
pub(crate) fn engine_config(config: &Config) -> wasmtime::Config {
    let mut wasm = wasmtime::Config::new();
    wasm.wasm_component_model(true)
        // Fuel makes limits deterministic; epochs give the wall-clock safety net.
        .consume_fuel(true)
        .epoch_interruption(true)
        // Same float bits on every CPU.
        .cranelift_nan_canonicalization(true)
        .relaxed_simd_deterministic(true)
        .max_wasm_stack(config.max_wasm_stack)
        .async_stack_size(config.max_wasm_stack + (1 << 20))
        // Copy-on-write mapping of the snapshot's memory: the heart of fast instantiation.
        .memory_init_cow(true);
    wasm
}

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
        let engine = Engine::new(&engine_config(&config))
            .map_err(|e| RuntimeError::Engine(e.to_string()))?;
        let component = artifact::load_component(&engine, config.cache_dir.as_deref())?;
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
        spawn_ticker(engine.clone(), stop_ticker.clone());
        let limits = Arc::new(config.limits.clone());
        Ok(Runtime {
            inner: Arc::new(Inner {
                engine,
                pre,
                config,
                sources: SourceCache::new(SOURCE_CACHE_ENTRIES),
                stop_ticker,
                linked,
                trapped,
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
    pub async fn sandbox_from(
        &self,
        source: &EnvSource,
        options: SandboxOptions,
    ) -> Result<Sandbox, CallError> {
        Sandbox::load(&self.inner.pre, self.limits.clone(), source, options).await
    }

    /// Compiles `source` once (in a throwaway sandbox, within the load fuel budget) and caches
    /// the bytecode for every later sandbox of the same source. A syntax error is a
    /// [`CallError::Load`].
    pub async fn prepare(&self, source: &str) -> Result<EnvSource, CallError> {
        let (sha256, hit) = self.inner.sources.get(source);
        if let Some(prepared) = hit {
            return Ok(prepared);
        }
        let code = Sandbox::compile(&self.inner.pre, self.limits.clone(), source).await?;
        let prepared = EnvSource::new(source, sha256, code);
        self.inner.sources.insert(prepared.clone());
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
