//! Preparing the guest component: wizer pre-initialisation, then Cranelift compilation, cached on
//! disk so that later processes only map the compiled artifact.
//!
//! The cache key covers everything the artifact depends on: the guest's sha256, the wasmtime
//! version and the engine's compatibility hash (its compilation settings). Files are written to
//! a temporary name and renamed, so a crash never leaves a partial artifact under a valid name.
//! A compiled artifact is native code that is mapped and run, so the cache is private: the
//! directory is created readable and writable by its user only (0700, files 0600), and an
//! artifact that anyone else could write (the file, or the directory holding it, writable by
//! group or others, or owned by another user) is refused with an error that says why.

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
use crate::wasi;

/// The guest component as built by `crates/sandbox/build.rs`, before pre-initialisation.
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

/// The compiled, pre-initialised guest for `engine`, from the cache when possible;
/// `before_build` is called when the cache misses, before the long part.
pub fn load_component(
    engine: &Engine,
    cache_dir: Option<&Path>,
    before_build: impl FnOnce(),
) -> Result<Component, RuntimeError> {
    let path = cache_dir.map(|dir| artifact_path(engine, dir));
    if let Some(component) = cached_at(engine, path.as_deref())? {
        return Ok(component);
    }
    before_build();
    // Several processes may start at once on a cold cache (a test suite, a fleet of workers):
    // one builds the artifact while the others wait on a lock file, then map its result.
    let _lock = match &path {
        Some(path) => Some(lock(path).map_err(|e| RuntimeError::Cache {
            path: path.clone(),
            message: format!("{e:#}"),
        })?),
        None => None,
    };
    if let Some(component) = cached_at(engine, path.as_deref())? {
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

/// The cached artifact at `path`, if there is a cache, the file exists and fits `engine`; an
/// artifact that others could have written is an error.
fn cached_at(engine: &Engine, path: Option<&Path>) -> Result<Option<Component>, RuntimeError> {
    let Some(path) = path else {
        return Ok(None);
    };
    if !path.exists() {
        return Ok(None);
    }
    private::check(path).map_err(|message| RuntimeError::Cache {
        path: path.to_owned(),
        message,
    })?;
    // SAFETY: the file was written by `store` below (atomically, under a name that encodes
    // this engine's compatibility hash) and only its owner can write it (checked above);
    // wasmtime additionally checks its header against the engine before using it. An
    // incompatible or damaged file fails here and is rebuilt.
    #[allow(unsafe_code)]
    Ok(unsafe { Component::deserialize_file(engine, path) }.ok())
}

/// An exclusive lock on `<artifact>.lock`, held until the returned file is dropped.
fn lock(path: &Path) -> anyhow::Result<std::fs::File> {
    let dir = path
        .parent()
        .ok_or_else(|| anyhow!("no parent directory"))?;
    private::create_dir(dir).context("creating the cache directory")?;
    let lock_path = path.with_extension("lock");
    let file = private::open_options()
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
    private::write_atomic(path, &[bytes]).context("writing the compiled guest")
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

/// The cache's privacy: created private, refused when others could write it.
pub(crate) mod private {
    use std::fs::OpenOptions;
    use std::path::Path;

    /// Creates `dir` (and missing parents) readable and writable by its user only.
    pub(crate) fn create_dir(dir: &Path) -> std::io::Result<()> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir)
    }

    /// Writes `parts` to `path` through a temporary file in the same directory (created
    /// private) and a rename, so a crash never leaves a partial file under the real name.
    pub(crate) fn write_atomic(path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
        use std::io::Write as _;
        let dir = path.parent().unwrap_or(Path::new("."));
        create_dir(dir)?;
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            path.file_name().unwrap_or_default().to_string_lossy(),
            std::process::id()
        ));
        let mut file = open_options()
            .create(true)
            .truncate(true)
            .write(true)
            .open(&tmp)?;
        for part in parts {
            file.write_all(part)?;
        }
        drop(file);
        std::fs::rename(&tmp, path)
    }

    /// Options that create files readable and writable by their user only.
    pub(crate) fn open_options() -> OpenOptions {
        let mut options = OpenOptions::new();
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        options
    }

    /// `Ok` when only the current user can write the artifact at `path`: the file and the
    /// directory holding it are owned by this user and not writable by group or others.
    #[cfg(unix)]
    pub(crate) fn check(path: &Path) -> Result<(), String> {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        #[allow(unsafe_code)]
        let me = unsafe { libc::geteuid() };
        let dir = path.parent().unwrap_or(Path::new("."));
        for (what, target) in [("the artifact", path), ("its directory", dir)] {
            let meta = std::fs::metadata(target)
                .map_err(|e| format!("reading the permissions of {}: {e}", target.display()))?;
            let mode = meta.mode() & 0o7777;
            let why = if meta.uid() != me {
                format!(
                    "{what} {} is owned by uid {}, not by this user (uid {me})",
                    target.display(),
                    meta.uid()
                )
            } else if mode & 0o022 != 0 {
                format!(
                    "{what} {} is writable by {} (mode {mode:04o})",
                    target.display(),
                    if mode & 0o002 != 0 {
                        "every user"
                    } else {
                        "its group"
                    }
                )
            } else {
                continue;
            };
            return Err(format!(
                "refusing the cached artifact: {why}. A compiled artifact is native code that \
                 spade maps and runs, so only its owner may be able to write it; fix the \
                 permissions (chmod go-w) or delete the file to have it rebuilt"
            ));
        }
        Ok(())
    }

    /// Elsewhere there are no unix permissions to check.
    #[cfg(not(unix))]
    pub(crate) fn check(_path: &Path) -> Result<(), String> {
        Ok(())
    }

    #[cfg(all(test, unix))]
    mod tests {
        use std::os::unix::fs::PermissionsExt;

        use super::*;

        fn mode(path: &Path) -> u32 {
            std::fs::metadata(path).unwrap().permissions().mode() & 0o777
        }

        #[test]
        fn the_cache_is_created_private_and_others_writable_artifacts_are_refused() {
            let root = std::env::temp_dir().join(format!("spade-private-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&root);
            let dir = root.join("a").join("spade");
            create_dir(&dir).unwrap();
            assert_eq!(mode(&dir), 0o700);
            let file = dir.join("guest.cwasm");
            std::io::Write::write_all(
                &mut open_options().create(true).write(true).open(&file).unwrap(),
                b"x",
            )
            .unwrap();
            assert_eq!(mode(&file), 0o600);
            assert_eq!(check(&file), Ok(()));

            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
            let err = check(&file).unwrap_err();
            assert!(err.contains("the artifact"), "{err}");
            assert!(
                err.contains("is writable by every user (mode 0666)"),
                "{err}"
            );
            assert!(err.contains("native code"), "{err}");

            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o620)).unwrap();
            assert!(
                check(&file)
                    .unwrap_err()
                    .contains("writable by its group (mode 0620)")
            );

            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
            let err = check(&file).unwrap_err();
            assert!(err.contains("its directory"), "{err}");
            assert!(err.contains("writable by every user (mode 0777)"), "{err}");
            std::fs::remove_dir_all(&root).unwrap();
        }
    }
}
