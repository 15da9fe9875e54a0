//! Runs the sandbox's async calls from Python threads.
//!
//! Every call blocks the calling Python thread with the GIL released, so that other Python
//! threads (a rollout's workers, an asyncio loop's executor) run their own sandboxes in
//! parallel meanwhile. Each Python thread drives its calls on its own current-thread tokio
//! runtime (timers and I/O for wasmtime-wasi), as `spade run` does: the call runs on the thread
//! that makes it, which is what the sandbox's deadline measures (that thread's CPU time), and no
//! wake-up crosses threads.

use std::cell::OnceCell;
use std::future::Future;

use pyo3::prelude::*;

thread_local! {
    /// This thread's runtime, built on its first call.
    static RUNTIME: OnceCell<tokio::runtime::Runtime> = const { OnceCell::new() };
}

/// Runs `future` to completion on this thread with the GIL released.
pub fn run<F>(py: Python<'_>, future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    py.detach(|| {
        RUNTIME.with(|cell| {
            cell.get_or_init(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("building this thread's tokio runtime")
            })
            .block_on(future)
        })
    })
}
