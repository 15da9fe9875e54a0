//! The call deadline: an async timeout around every guest call that counts only the time the
//! call runs.
//!
//! A call's time is the CPU time of the thread while it polls the call (the guest runs on a
//! fiber inside `poll`, and so do the host functions it calls), plus the wall-clock time the
//! guest spends parked in a host wait (a pending poll that nobody has woken). Time between an
//! epoch yield and the next poll, when the task waits in the executor's queue behind other
//! sandboxes, is not counted, and neither is time the OS spends running other threads, so a
//! loaded machine does not turn a call into a `Deadline`. The check runs at every poll; a
//! parked guest is stopped by a timer armed for the rest of its budget.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// Set by the store's epoch callback whenever the guest yields to the executor, so that the
/// pending poll that follows is known to be a yield (queue time, not counted) rather than a
/// park (counted).
#[derive(Clone, Default)]
pub(crate) struct YieldFlag(Arc<AtomicBool>);

impl YieldFlag {
    /// Records that the guest is about to yield.
    pub(crate) fn yielding(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn take(&self) -> bool {
        self.0.swap(false, Ordering::Relaxed)
    }
}

/// The call ran out of time.
#[derive(Debug)]
pub(crate) struct Elapsed;

/// Runs `call` with a budget of `limit` of its own time (see the module documentation).
pub(crate) async fn bounded<F: Future>(
    limit: Duration,
    yields: &YieldFlag,
    call: F,
) -> Result<F::Output, Elapsed> {
    yields.take();
    Bounded {
        call: Box::pin(call),
        yields: yields.clone(),
        limit,
        spent: Duration::ZERO,
        parked: None,
    }
    .await
}

struct Bounded<F> {
    call: Pin<Box<F>>,
    yields: YieldFlag,
    limit: Duration,
    spent: Duration,
    /// Since when the guest is parked, and the timer that ends the park at the deadline.
    parked: Option<(Instant, Pin<Box<tokio::time::Sleep>>)>,
}

impl<F: Future> Future for Bounded<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        if let Some((since, _)) = this.parked.take() {
            this.spent += since.elapsed();
        }
        if this.spent >= this.limit {
            return Poll::Ready(Err(Elapsed));
        }
        let started = cpu_now();
        let polled = this.call.as_mut().poll(cx);
        this.spent += cpu_now().saturating_sub(started);
        let Poll::Ready(value) = polled else {
            return this.pending(cx);
        };
        // A call that finished past its budget still ran out of time: the outcome must not
        // depend on whether the last stretch happened to end before the next check.
        if this.spent > this.limit {
            return Poll::Ready(Err(Elapsed));
        }
        Poll::Ready(Ok(value))
    }
}

impl<F> Bounded<F> {
    fn pending(&mut self, cx: &mut Context<'_>) -> Poll<Result<F::Output, Elapsed>>
    where
        F: Future,
    {
        if self.spent >= self.limit {
            return Poll::Ready(Err(Elapsed));
        }
        if self.yields.take() {
            // An epoch yield: the task is already woken and waits in the queue.
            return Poll::Pending;
        }
        let mut timer = Box::pin(tokio::time::sleep(self.limit - self.spent));
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(Elapsed));
        }
        self.parked = Some((Instant::now(), timer));
        Poll::Pending
    }
}

/// CPU time of the calling thread.
#[cfg(unix)]
fn cpu_now() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is supported on
    // every unix spade builds for (Linux, macOS, the BSDs).
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return wall_fallback();
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Elsewhere, the wall-clock time inside `poll` (which still excludes queue time).
#[cfg(not(unix))]
fn cpu_now() -> Duration {
    wall_fallback()
}

fn wall_fallback() -> Duration {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(for_cpu: Duration) {
        let start = cpu_now();
        while cpu_now() - start < for_cpu {
            std::hint::black_box(0u64);
        }
    }

    #[tokio::test]
    async fn a_call_within_its_budget_finishes() {
        let flag = YieldFlag::default();
        let out = bounded(Duration::from_millis(500), &flag, async {
            spin(Duration::from_millis(20));
            7
        })
        .await;
        assert_eq!(out.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_parked_call_is_stopped_at_its_deadline() {
        let flag = YieldFlag::default();
        let started = Instant::now();
        let out = bounded(
            Duration::from_millis(200),
            &flag,
            std::future::pending::<()>(),
        )
        .await;
        assert!(out.is_err());
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }

    #[tokio::test]
    async fn a_call_that_runs_past_its_budget_is_elapsed() {
        let flag = YieldFlag::default();
        let out = bounded(Duration::from_millis(30), &flag, async {
            spin(Duration::from_millis(60));
        })
        .await;
        assert!(out.is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn time_queued_behind_other_work_does_not_count() {
        // The call yields (as the epoch callback makes a guest do) ten times; between its polls
        // another task blocks the only executor thread for 50 ms of wall time. Its own CPU time
        // is tiny, so a 100 ms budget holds although 500 ms pass.
        let flag = YieldFlag::default();
        let hog = tokio::spawn(async {
            for _ in 0..10 {
                std::thread::sleep(Duration::from_millis(50));
                tokio::task::yield_now().await;
            }
        });
        let yields = flag.clone();
        let started = Instant::now();
        let out = bounded(Duration::from_millis(100), &flag, async move {
            for _ in 0..10 {
                yields.yielding();
                tokio::task::yield_now().await;
            }
        })
        .await;
        hog.await.unwrap();
        assert!(out.is_ok());
        assert!(started.elapsed() >= Duration::from_millis(400));
    }
}
