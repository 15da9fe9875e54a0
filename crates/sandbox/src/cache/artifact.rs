//! Preparing the guest component: wizer pre-initialisation, then Cranelift compilation, cached on
//! disk so that later processes only load the compiled artifact.
//!
//! The cache key covers everything the artifact depends on: the guest's sha256, the wasmtime
//! version and the engine's compatibility hash (its compilation settings). The file is
//! written and read through the cache's directory descriptors ([`crate::cache::dir`]): written
//! under an exclusive temporary name and renamed, so a crash never leaves a partial artifact
//! under a valid name; read only when this user alone can write it, and then mapped (shared
//! with every process that maps it, not copied), through the descriptor its permissions were
//! checked on: see [`cached`].

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Engine, Store};
use wasmtime_wizer::Wizer;

use crate::GUEST_SHA256;
use crate::cache::dir::CacheDir;
use crate::error::RuntimeError;
use crate::sandbox::SandboxState;
use crate::wasi;

/// The guest component as built by `crates/sandbox/build.rs`, before pre-initialisation.
static GUEST_WASM: &[u8] = include_bytes!(env!("SPADE_GUEST_WASM"));

/// The guest component the build embeds, before pre-initialisation.
#[cfg(test)]
pub(crate) fn guest_wasm() -> &'static [u8] {
    GUEST_WASM
}

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

/// The file name of the artifact for `engine` in the cache directory.
fn artifact_name(engine: &Engine) -> String {
    format!("guest-{}.cwasm", &artifact_key(engine)[..32])
}

/// Where the artifact for `engine` is cached under `dir`.
pub fn artifact_path(engine: &Engine, dir: &Path) -> PathBuf {
    dir.join(artifact_name(engine))
}

/// The compiled, pre-initialised guest for `engine`, from the cache when possible;
/// `before_build` is called when the cache misses, before the long part.
pub fn load_component(
    engine: &Engine,
    cache: Option<&CacheDir>,
    before_build: impl FnOnce(),
) -> Result<Component, RuntimeError> {
    let name = artifact_name(engine);
    let refused = |message: String| RuntimeError::Cache {
        path: cache.map_or_else(PathBuf::new, |dir| dir.path().join(&name)),
        message,
    };
    if let Some(component) = cached(engine, cache, &name).map_err(refused)? {
        return Ok(component);
    }
    before_build();
    // Several processes may start at once on a cold cache (a test suite, a fleet of workers):
    // one builds the artifact while the others wait on a lock file, then load its result.
    let _lock = match cache {
        Some(dir) => Some(
            dir.lock(&name.replace(".cwasm", ".lock"))
                .map_err(refused)?,
        ),
        None => None,
    };
    if let Some(component) = cached(engine, cache, &name).map_err(refused)? {
        return Ok(component);
    }
    let compiled = build_artifact(engine).map_err(|e| RuntimeError::Guest(format!("{e:#}")))?;
    if let Some(dir) = cache {
        dir.write_atomic(&name, &[&compiled])
            .map_err(|e| refused(format!("writing the compiled guest: {e}")))?;
    }
    // SAFETY: `compiled` was produced just now by `engine.precompile_component`.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize(engine, &compiled) }
        .map_err(|e| RuntimeError::Guest(format!("loading the compiled guest: {e}")))?;
    Ok(component)
}

/// The cached artifact `name`, if there is a cache, the file exists and fits `engine`; an
/// artifact that others could have written is an error (the message says why).
///
/// The file is mapped through the descriptor its permissions were checked on (its
/// `/proc/self/fd` link, which opens that same file, so nothing can be swapped in between).
/// It stays mapped, shared with every other process that maps it, rather than copied: see
/// docs/snapshots.md, "The cache's threat model", for why this one file is mapped and what a
/// truncation of it would do.
fn cached(
    engine: &Engine,
    cache: Option<&CacheDir>,
    name: &str,
) -> Result<Option<Component>, String> {
    let Some(dir) = cache else {
        return Ok(None);
    };
    let Some(file) = dir.open_verified(name)? else {
        return Ok(None);
    };
    let verified = fd_path(&file);
    // SAFETY: the file is one that only this user can write, in a directory only this user
    // can change (checked on the open descriptors); spade writes it atomically under a name
    // that encodes this engine's compatibility hash and never changes it in place, and
    // wasmtime checks its header against the engine before using it. An incompatible or
    // damaged file fails here and is rebuilt.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize_file(engine, &verified) }.ok();
    drop(file);
    Ok(component)
}

/// A path that opens the file `file` is open on, whatever has happened to its name since.
fn fd_path(file: &std::fs::File) -> PathBuf {
    use std::os::fd::AsRawFd as _;
    let fd = file.as_raw_fd();
    if cfg!(target_os = "linux") {
        PathBuf::from(format!("/proc/self/fd/{fd}"))
    } else {
        PathBuf::from(format!("/dev/fd/{fd}"))
    }
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
    let mut store = Store::new(&engine, SandboxState::for_preinit());
    let mut wizer = Wizer::new();
    wizer.keep_init_func(true);
    let (snapshot, _) = wizer
        .run_component(&mut store, GUEST_WASM, async |store, component| {
            let mut linker: Linker<SandboxState> = Linker::new(component.engine());
            wasi::add_to_linker(&mut linker, component)?;
            linker.instantiate_async(store, component).await
        })
        .await
        .map_err(|e| anyhow!("pre-initialising the interpreter: {e:?}"))?;
    Ok(snapshot)
}
