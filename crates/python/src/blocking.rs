//! Runs the sandbox's async calls from Python threads.
//!
//! Every call blocks the calling Python thread on one process-wide tokio runtime with the GIL
//! released, so that other Python threads (a rollout's workers, an asyncio loop's executor)
//! run their own sandboxes in parallel meanwhile. `block_on` polls the call on the calling
//! thread itself, which is what the sandbox's deadline measures (that thread's CPU time).

use std::future::Future;
use std::sync::OnceLock;

use pyo3::prelude::*;

/// The process's tokio runtime: timers and I/O drivers for wasmtime-wasi, and one worker for
/// the few tasks a sandbox spawns. Calls themselves run on the threads that make them.
fn tokio() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("spade-tokio")
            .enable_all()
            .build()
            .expect("building the tokio runtime")
    })
}

/// Runs `future` to completion on this thread with the GIL released.
pub fn run<F>(py: Python<'_>, future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    py.detach(|| tokio().block_on(future))
}
