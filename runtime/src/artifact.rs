//! Preparing the guest component: wizer pre-initialisation, then Cranelift compilation, cached on
//! disk so that later processes only map the compiled artifact.
//!
//! The cache key covers everything the artifact depends on: the guest's sha256, the wasmtime
//! version and the engine's compatibility hash (its compilation settings). Files are written to
//! a temporary name and renamed, so a crash never leaves a partial artifact under a valid name.
//! The cache directory must be writable only by its user: a compiled artifact is trusted code.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};
use wasmtime_wizer::Wizer;

use crate::GUEST_SHA256;
use crate::error::RuntimeError;
use crate::sandbox::SandboxState;

/// The guest component as built by `runtime/build.rs`, before pre-initialisation.
static GUEST_WASM: &[u8] = include_bytes!(env!("SPADE_GUEST_WASM"));

/// Bumped whenever the way the artifact is produced changes.
const ARTIFACT_FORMAT: &str = "spade-artifact-1";

/// A `Hasher` that feeds sha256, so the engine hash is stable across processes.
struct ShaHasher(Sha256);

impl Hasher for ShaHasher {
    fn finish(&self) -> u64 {
        unreachable!("only `write` is used")
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The cache key of the artifact for `engine`.
pub fn artifact_key(engine: &Engine) -> String {
    let mut hasher = ShaHasher(Sha256::new());
    hasher.write(ARTIFACT_FORMAT.as_bytes());
    hasher.write(GUEST_SHA256.as_bytes());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex::encode(hasher.0.finalize())
}

/// Where the artifact for `engine` is cached under `dir`.
pub fn artifact_path(engine: &Engine, dir: &Path) -> PathBuf {
    let key = artifact_key(engine);
    dir.join(format!("guest-{}.cwasm", &key[..32]))
}

/// The compiled, pre-initialised guest for `engine`, from the cache when possible.
pub fn load_component(
    engine: &Engine,
    cache_dir: Option<&Path>,
) -> Result<Component, RuntimeError> {
    let path = cache_dir.map(|dir| artifact_path(engine, dir));
    if let Some(component) = path.as_deref().and_then(|p| cached(engine, p)) {
        return Ok(component);
    }
    // Several processes may start at once on a cold cache (a test suite, a fleet of workers):
    // one builds the artifact while the others wait on a lock file, then map its result.
    let _lock = match &path {
        Some(path) => Some(lock(path).map_err(|e| RuntimeError::Cache {
            path: path.clone(),
            message: format!("{e:#}"),
        })?),
        None => None,
    };
    if let Some(component) = path.as_deref().and_then(|p| cached(engine, p)) {
        return Ok(component);
    }
    let compiled = build_artifact(engine).map_err(|e| RuntimeError::Guest(format!("{e:#}")))?;
    if let Some(path) = &path {
        store(path, &compiled).map_err(|e| RuntimeError::Cache {
            path: path.clone(),
            message: format!("{e:#}"),
        })?;
    }
    // SAFETY: `compiled` was produced just now by `engine.precompile_component`.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(engine, &compiled) }
        .map_err(|e| RuntimeError::Guest(format!("loading the compiled guest: {e}")))?;
    Ok(component)
}

/// The cached artifact at `path`, if it exists and fits `engine`.
fn cached(engine: &Engine, path: &Path) -> Option<Component> {
    if !path.exists() {
        return None;
    }
    // SAFETY: the file was written by `store` below (atomically, under a name that encodes
    // this engine's compatibility hash); wasmtime additionally checks its header against the
    // engine before using it. An incompatible or damaged file fails here and is rebuilt.
    #[allow(unsafe_code)]
    unsafe { Component::deserialize_file(engine, path) }.ok()
}

/// An exclusive lock on `<artifact>.lock`, held until the returned file is dropped.
fn lock(path: &Path) -> anyhow::Result<std::fs::File> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow!("no parent directory"))?;
    std::fs::create_dir_all(dir).context("creating the cache directory")?;
    let lock_path = path.with_extension("lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    file.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    Ok(file)
}

fn store(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow!("no parent directory"))?;
    std::fs::create_dir_all(dir).context("creating the cache directory")?;
    let tmp: PathBuf = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap().to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).context("writing the compiled guest")?;
    std::fs::rename(&tmp, path).context("moving the compiled guest into place")?;
    Ok(())
}

/// Pre-initialises the guest with wizer and compiles the result for `engine`.
///
/// Runs on its own thread with its own single-threaded tokio runtime, so it works whether or
/// not the caller is inside a tokio runtime.
fn build_artifact(engine: &Engine) -> anyhow::Result<Vec<u8>> {
    let wizened = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .context("starting a runtime for pre-initialisation")?
                    .block_on(preinitialize())
            })
            .join()
            .map_err(|_| anyhow!("pre-initialisation panicked"))?
    })?;
    engine
        .precompile_component(&wizened)
        .map_err(|e| anyhow!("compiling the guest: {e}"))
}

/// Runs the guest's `wizer-initialize` export (boots RustPython, imports the prelude) and
/// snapshots the resulting state into a new component.
async fn preinitialize() -> anyhow::Result<Vec<u8>> {
    // A throwaway engine: the instrumented component runs once, so compile it quickly.
    let mut config = wasmtime::Config::new();
    config.cranelift_opt_level(wasmtime::OptLevel::None);
    config.max_wasm_stack(16 << 20);
    config.async_stack_size(17 << 20);
    let engine = Engine::new(&config).map_err(|e| anyhow!("wizer engine: {e}"))?;
    let mut linker: Linker<SandboxState> = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(|e| anyhow!("linking WASI: {e}"))?;
    let mut store = Store::new(&engine, SandboxState::for_preinit());
    let mut wizer = Wizer::new();
    wizer.keep_init_func(true);
    let (snapshot, _) = wizer
        .run_component(&mut store, GUEST_WASM, async |store, component| {
            linker.instantiate_async(store, component).await
        })
        .await
        .map_err(|e| anyhow!("pre-initialising the interpreter: {e:?}"))?;
    Ok(snapshot)
}
