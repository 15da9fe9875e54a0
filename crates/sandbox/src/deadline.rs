//! The call deadline: an async timeout around every guest call that counts only the time the
//! call runs.
//!
//! A call's time is the CPU time of the thread while it polls the call (the guest runs on a
//! fiber inside `poll`, and so do the host functions it calls), plus the wall-clock time the
//! guest spends parked in a host wait (a pending poll that nobody has woken). Time between a
//! yield and the next poll, when the task waits in the executor's queue behind other
//! sandboxes, is not counted, and neither is time the OS spends running other threads, so a
//! loaded machine does not turn a call into a `Deadline`. The check runs at every poll; a
//! parked guest is stopped by a timer armed for the rest of its budget.
//!
//! A yield (by fuel interval or epoch tick, see [`Yields`](crate::Yields)) wakes its own task
//! before it returns `Pending`; a park does not. Each poll runs the call with a waker that
//! notes such a wake, which is how the two are told apart whatever made the guest yield.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

/// The call ran out of time.
#[derive(Debug)]
pub(crate) struct Elapsed;

/// Runs `call` with a budget of `limit` of its own time (see the module documentation).
pub(crate) async fn bounded<F: Future>(limit: Duration, call: F) -> Result<F::Output, Elapsed> {
    let wakes = Arc::new(WakeNote::default());
    Bounded {
        call: Box::pin(call),
        waker: Waker::from(wakes.clone()),
        wakes,
        limit,
        spent: Duration::ZERO,
        parked: None,
    }
    .await
}

/// The waker a call is polled with: notes every wake and passes it on to the task's waker.
#[derive(Default)]
struct WakeNote {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl WakeNote {
    /// Makes wakes reach the waker of the task polling now.
    fn forward_to(&self, task: &Waker) {
        let mut current = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if !current.as_ref().is_some_and(|w| w.will_wake(task)) {
            *current = Some(task.clone());
        }
    }
}

impl Wake for WakeNote {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(task) = task.as_ref() {
            task.wake_by_ref();
        }
    }
}

struct Bounded<F> {
    call: Pin<Box<F>>,
    wakes: Arc<WakeNote>,
    /// `wakes` as a waker, made once per call.
    waker: Waker,
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
        this.wakes.forward_to(cx.waker());
        this.wakes.woken.store(false, Ordering::Release);
        let started = cpu_now();
        let polled = this
            .call
            .as_mut()
            .poll(&mut Context::from_waker(&this.waker));
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
        if self.wakes.woken.swap(false, Ordering::AcqRel) {
            // A yield: the task is already woken and waits in the queue.
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

    /// Yields the way wasmtime's fuel and epoch yields do: wakes the task during the poll,
    /// then returns `Pending` once.
    async fn yield_like_wasmtime() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                return Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        })
        .await;
    }

    #[tokio::test]
    async fn a_call_within_its_budget_finishes() {
        let out = bounded(Duration::from_millis(500), async {
            spin(Duration::from_millis(20));
            7
        })
        .await;
        assert_eq!(out.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_parked_call_is_stopped_at_its_deadline() {
        let started = Instant::now();
        let out = bounded(Duration::from_millis(200), std::future::pending::<()>()).await;
        assert!(out.is_err());
        let waited = started.elapsed();
        assert!(waited >= Duration::from_millis(200), "{waited:?}");
        assert!(waited < Duration::from_secs(5), "{waited:?}");
    }

    #[tokio::test]
    async fn a_call_that_runs_past_its_budget_is_elapsed() {
        let out = bounded(Duration::from_millis(30), async {
            spin(Duration::from_millis(60));
        })
        .await;
        assert!(out.is_err());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn time_queued_behind_other_work_does_not_count() {
        // The call yields (wakes itself and returns `Pending`, as wasmtime's fuel and epoch
        // yields do) ten times; between its polls another task blocks the only executor
        // thread for 50 ms of wall time. Its own CPU time is tiny, so a 100 ms budget holds
        // although 500 ms pass.
        let hog = tokio::spawn(async {
            for _ in 0..10 {
                std::thread::sleep(Duration::from_millis(50));
                tokio::task::yield_now().await;
            }
        });
        let started = Instant::now();
        let out = bounded(Duration::from_millis(100), async {
            for _ in 0..10 {
                yield_like_wasmtime().await;
            }
        })
        .await;
        hog.await.unwrap();
        assert!(out.is_ok());
        assert!(started.elapsed() >= Duration::from_millis(400));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_park_woken_from_elsewhere_counts_its_wall_time() {
        // The call parks (returns `Pending` without waking itself) until another task wakes it
        // 300 ms later: that wait is the call's time, so a 100 ms budget is exceeded.
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let waker = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let _ = tx.send(());
        });
        let out = bounded(Duration::from_millis(100), async {
            let _ = rx.await;
        })
        .await;
        assert!(out.is_err());
        waker.abort();
    }
}
