//! Helpers that several subcommands share: starting the sandbox runtime with its first-run
//! notice, the settings of a process that plays one episode, and leaving a finished episode
//! to the process's exit.

use anyhow::Context as _;
use spade_sandbox::{Config, Pool, Runtime, Sandbox};

/// Sandboxes one episode needs at once: its own, and the short-lived ones that compile its
/// source, probe how it loads and capture a fresh interpreter, with room to spare.
const ONE_EPISODE_SLOTS: u32 = 8;

/// The runtime settings of a process that plays one episode (`spade run`): the default ones
/// with a pool of [`ONE_EPISODE_SLOTS`] instead of a thousand, which a process that starts for
/// one episode would set up and tear down for nothing.
pub fn one_episode_config(snapshots: bool) -> Config {
    Config {
        snapshots,
        pool: Some(Pool {
            sandboxes: ONE_EPISODE_SLOTS,
            ..Pool::default()
        }),
        ..Config::default()
    }
}

/// Starts the sandbox runtime. On a machine's first run this pre-initialises and compiles the
/// guest (about a minute): say so on stderr, then where it is cached.
pub fn start_runtime(config: Config) -> anyhow::Result<Runtime> {
    let mut built = None;
    let runtime = Runtime::new_announcing(config.clone(), || {
        eprintln!(
            "spade: first run with this build: pre-initialising the Python interpreter (wizer) \
             and compiling it (Cranelift), one to three minutes on 2 cores; later runs start in \
             milliseconds"
        );
        built = Some(std::time::Instant::now());
    })
    .context("starting the sandbox runtime")?;
    if let Some(started) = built {
        let cached = match &config.cache_dir {
            Some(dir) => format!("cached in {}", dir.display()),
            None => "not cached: no cache directory (set SPADE_CACHE_DIR)".to_owned(),
        };
        eprintln!(
            "spade: sandbox ready in {:.0} s ({cached})",
            started.elapsed().as_secs_f64()
        );
    }
    Ok(runtime)
}

/// Hands a finished episode's sandbox and the runtime to the process's exit instead of
/// dropping them: a drop resets the sandbox's pool slot for a next sandbox that never comes
/// and unmaps the pool's reservations and the artifact one by one, about half a millisecond
/// that the kernel's teardown of the process spends anyway. Only for a process that exits
/// next (nothing of theirs needs flushing: the trajectory is written and flushed before).
pub fn leave_for_exit(sandbox: Option<Sandbox>, runtime: Runtime) {
    std::mem::forget(sandbox);
    std::mem::forget(runtime);
}
